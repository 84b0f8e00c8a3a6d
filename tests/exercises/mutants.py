"""Deliberately wrong answers: every one must fail at least one case of its exercise.

Each entry is ``(what is wrong, source)``; the source defines the exercise's
function (with the common mistake) after ``PRELUDE``. ``test_cases.py`` runs
every case of the exercise on it and requires a failure, which shows that the
cases and their tolerances can tell a right answer from a typical wrong one.
"""

PRELUDE = """
import math
import torch
import torch.nn.functional as F
"""

MUTANTS: dict[str, list[tuple[str, str]]] = {
    "2.1": [
        ("no sqrt(d_model) scale", "def scaled_embedding(tokens, weight):\n    return weight[tokens]"),
        ("scaled by d_model", "def scaled_embedding(tokens, weight):\n    return weight[tokens] * weight.shape[1]"),
        ("no validation", "def scaled_embedding(tokens, weight):\n    return weight[tokens.long()] * math.sqrt(weight.shape[1])"),
    ],
    "2.2": [
        ("scaled like the embedding", "def tied_output_logits(hidden, weight):\n    return hidden @ weight.T * math.sqrt(weight.shape[1])"),
        ("no shape check", "def tied_output_logits(hidden, weight):\n    return hidden[..., : weight.shape[1]] @ weight[:, : hidden.shape[-1]].T"),
    ],
    "3.1": [
        ("sine and cosine swapped", """
def sinusoidal_encoding(max_len, d_model):
    if max_len < 1 or d_model < 1:
        raise ValueError("bad")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    angle = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.cos(angle)
    pe[:, 1::2] = torch.sin(angle[:, : d_model // 2])
    return pe
"""),
        ("exponent uses the column index, not 2i", """
def sinusoidal_encoding(max_len, d_model):
    if max_len < 1 or d_model < 1:
        raise ValueError("bad")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    col = torch.arange(d_model, dtype=torch.float64)
    angle = pos / 10000 ** (col / d_model)
    pe = torch.where(col.long() % 2 == 0, torch.sin(angle), torch.cos(angle))
    return pe
"""),
        ("odd d_model: last column made a cosine", """
def sinusoidal_encoding(max_len, d_model):
    if max_len < 1 or d_model < 1:
        raise ValueError("bad")
    d = d_model + (d_model % 2)
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    angle = pos / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe[:, :d_model]
"""),
    ],
    "3.2": [
        ("rotation in the wrong direction", """
def relative_position_matrix(k, d_model):
    if d_model % 2:
        raise ValueError("odd")
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        w = 1.0 / 10000.0 ** (2 * i / d_model)
        c, s = math.cos(w * k), math.sin(w * k)
        m[2 * i, 2 * i], m[2 * i, 2 * i + 1], m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = c, -s, s, c
    return m
"""),
    ],
    "4.1": [
        ("no 1/sqrt(d_k) scale", """
def scaled_dot_product_attention(q, k, v, mask=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    w = torch.softmax(scores, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
"""),
        ("-inf fill: NaN on a fully masked row", """
def scaled_dot_product_attention(q, k, v, mask=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, -1)
    return w @ v, w
"""),
        ("mask convention inverted (True = blocked)", """
def scaled_dot_product_attention(q, k, v, mask=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
    w = torch.softmax(scores, -1)
    if mask is not None:
        w = w.masked_fill(mask, 0.0)
    return w @ v, w
"""),
        ("softmax over the queries", """
def scaled_dot_product_attention(q, k, v, mask=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    w = torch.softmax(scores, -2)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
"""),
        ("blocked weights not zeroed on a fully masked row", """
def scaled_dot_product_attention(q, k, v, mask=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    w = torch.softmax(scores, -1)
    return w @ v, w
"""),
        ("-1e9 fill, blocked weights zeroed afterwards (overflows float16)", """
def scaled_dot_product_attention(q, k, v, mask=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    w = torch.softmax(scores, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
"""),
    ],
    "4.2": [
        ("scaled by sqrt(d_model)", """
def self_attention(x, w_q, w_k, w_v, mask=None):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    w = torch.softmax(scores, -1)
    return w @ v, w
"""),
    ],
    "5.1": [
        ("reshape straight to (batch, heads, len, d_k)", """
def split_heads(x, n_heads):
    if x.dim() != 3 or x.shape[-1] % n_heads:
        raise ValueError("shape")
    b, n, d = x.shape
    return x.reshape(b, n_heads, n, d // n_heads)
"""),
    ],
    "5.2": [
        ("reshape without transposing back", """
def merge_heads(x):
    if x.dim() != 4:
        raise ValueError("shape")
    b, h, n, d = x.shape
    return x.reshape(b, n, h * d)
"""),
    ],
    "5.3": [
        ("scaled by sqrt(d_model) instead of sqrt(d_k)", """
def multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
    b, lq, d = query.shape
    lk = key.shape[1]
    q = (query @ w_q).view(b, lq, n_heads, d // n_heads).transpose(1, 2)
    k = (key @ w_k).view(b, lk, n_heads, d // n_heads).transpose(1, 2)
    v = (value @ w_v).view(b, lk, n_heads, d // n_heads).transpose(1, 2)
    s = q @ k.transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    return (w @ v).transpose(1, 2).reshape(b, lq, d) @ w_o, w
"""),
        ("output projection w_o forgotten", """
def multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
    b, lq, d = query.shape
    lk = key.shape[1]
    q = (query @ w_q).view(b, lq, n_heads, d // n_heads).transpose(1, 2)
    k = (key @ w_k).view(b, lk, n_heads, d // n_heads).transpose(1, 2)
    v = (value @ w_v).view(b, lk, n_heads, d // n_heads).transpose(1, 2)
    s = q @ k.transpose(-2, -1) / math.sqrt(d // n_heads)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    return (w @ v).transpose(1, 2).reshape(b, lq, d), w
"""),
        ("own masking with a -1e9 fill (overflows float16)", """
def multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
    b, lq, d = query.shape
    lk = key.shape[1]
    q = (query @ w_q).view(b, lq, n_heads, d // n_heads).transpose(1, 2)
    k = (key @ w_k).view(b, lk, n_heads, d // n_heads).transpose(1, 2)
    v = (value @ w_v).view(b, lk, n_heads, d // n_heads).transpose(1, 2)
    s = q @ k.transpose(-2, -1) / math.sqrt(d // n_heads)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    w = torch.softmax(s, -1)
    return (w @ v).transpose(1, 2).reshape(b, lq, d) @ w_o, w
"""),
    ],
    "6.1": [
        ("no ReLU", "def position_wise_ffn(x, w1, b1, w2, b2):\n    return (x @ w1 + b1) @ w2 + b2"),
        ("ReLU before the bias", "def position_wise_ffn(x, w1, b1, w2, b2):\n    return (torch.relu(x @ w1) + b1) @ w2 + b2"),
    ],
    "6.2": [
        ("tanh approximation", "def gelu(x):\n    return F.gelu(x, approximate='tanh')"),
        ("sigmoid approximation x * sigmoid(1.702 x)", "def gelu(x):\n    return x * torch.sigmoid(1.702 * x)"),
    ],
    "7.1": [
        ("unbiased variance", """
def layer_norm(x, gamma, beta, eps=1e-5):
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=True, keepdim=True) + eps) * gamma + beta
"""),
        ("eps outside the square root", """
def layer_norm(x, gamma, beta, eps=1e-5):
    return (x - x.mean(-1, keepdim=True)) / (torch.sqrt(x.var(-1, unbiased=False, keepdim=True)) + eps) * gamma + beta
"""),
        ("variance as E[x^2] - mean^2 in float32", """
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean * mean
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta
"""),
        ("eps argument ignored", """
def layer_norm(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], gamma, beta, 1e-5)
"""),
    ],
    "7.2": [
        ("Post-LN instead of Pre-LN", """
def pre_ln_sublayer(x, sublayer, gamma, beta, eps=1e-5):
    return F.layer_norm(x + sublayer(x), x.shape[-1:], gamma, beta, eps)
"""),
        ("residual adds the normalised x", """
def pre_ln_sublayer(x, sublayer, gamma, beta, eps=1e-5):
    y = F.layer_norm(x, x.shape[-1:], gamma, beta, eps)
    return y + sublayer(y)
"""),
    ],
    "7.3": [
        ("Pre-LN instead of Post-LN", """
def post_ln_sublayer(x, sublayer, gamma, beta, eps=1e-5):
    return x + sublayer(F.layer_norm(x, x.shape[-1:], gamma, beta, eps))
"""),
    ],
    "8.1": [
        ("True at the padding", """
def padding_mask(tokens, pad_id):
    if tokens.dim() != 2:
        raise ValueError("tokens")
    return (tokens == pad_id)[:, None, None, :]
"""),
        ("shape (batch, seq_len)", """
def padding_mask(tokens, pad_id):
    if tokens.dim() != 2:
        raise ValueError("tokens")
    return tokens != pad_id
"""),
        ("0/1 integers instead of bool", """
def padding_mask(tokens, pad_id):
    if tokens.dim() != 2:
        raise ValueError("tokens")
    return (tokens != pad_id).long()[:, None, None, :]
"""),
    ],
    "8.2": [
        ("upper triangle", """
def causal_mask(size):
    if size < 1:
        raise ValueError("size")
    return torch.ones(size, size, dtype=torch.bool).triu()[None, None]
"""),
        ("diagonal excluded", """
def causal_mask(size):
    if size < 1:
        raise ValueError("size")
    return torch.ones(size, size, dtype=torch.bool).tril(-1)[None, None]
"""),
    ],
    "8.3": [
        ("causal only", """
def decoder_self_attention_mask(tgt, pad_id):
    n = tgt.shape[1]
    return torch.ones(n, n, dtype=torch.bool).tril()[None, None].expand(tgt.shape[0], 1, n, n)
"""),
        ("padding applied to the queries instead of the keys", """
def decoder_self_attention_mask(tgt, pad_id):
    n = tgt.shape[1]
    return (tgt != pad_id)[:, None, :, None] & torch.ones(n, n, dtype=torch.bool).tril()[None, None]
"""),
    ],
    "9.1": [
        ("eps spread over the other classes only", """
def label_smoothed_loss(logits, target, label_smoothing, pad_id):
    if not 0 <= label_smoothing <= 1:
        raise ValueError("label_smoothing")
    lp = torch.log_softmax(logits, -1)
    v = logits.shape[-1]
    nll = -lp.gather(-1, target[..., None]).squeeze(-1)
    others = -(lp.sum(-1) - lp.gather(-1, target[..., None]).squeeze(-1)) / (v - 1)
    loss = (1 - label_smoothing) * nll + label_smoothing * others
    keep = (target != pad_id).float()
    return (loss * keep).sum() / keep.sum()
"""),
        ("padding not ignored", """
def label_smoothed_loss(logits, target, label_smoothing, pad_id):
    if not 0 <= label_smoothing <= 1:
        raise ValueError("label_smoothing")
    v = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, v), target.reshape(-1), label_smoothing=label_smoothing)
"""),
        ("sum instead of mean", """
def label_smoothed_loss(logits, target, label_smoothing, pad_id):
    if not 0 <= label_smoothing <= 1:
        raise ValueError("label_smoothing")
    v = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, v), target.reshape(-1), ignore_index=pad_id,
                           label_smoothing=label_smoothing, reduction="sum")
"""),
    ],
    "9.2": [
        ("warm-up exponent -0.5 instead of -1.5", """
def noam_lr(step, d_model, warmup_steps):
    if step < 1 or warmup_steps < 1:
        raise ValueError("step")
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -0.5)
"""),
        ("d_model factor forgotten", """
def noam_lr(step, d_model, warmup_steps):
    if step < 1 or warmup_steps < 1:
        raise ValueError("step")
    return min(step ** -0.5, step * warmup_steps ** -1.5)
"""),
        ("step 0 accepted", """
def noam_lr(step, d_model, warmup_steps):
    step = max(step, 1)
    return d_model ** -0.5 * min(step ** -0.5, step * max(warmup_steps, 1) ** -1.5)
"""),
    ],
    "9.3": [
        ("roll: the last token wraps around", """
def shift_right(tgt, bos_id):
    if tgt.dim() != 2:
        raise ValueError("tgt")
    return torch.roll(tgt, 1, dims=1)
"""),
        ("modifies tgt in place", """
def shift_right(tgt, bos_id):
    if tgt.dim() != 2:
        raise ValueError("tgt")
    tgt[:, 1:] = tgt[:, :-1].clone()
    tgt[:, 0] = bos_id
    return tgt
"""),
    ],
    "10.1": [
        ("stops every row at the first eos of any row", """
def greedy_decode(step_fn, batch_size, bos_id, eos_id, pad_id, max_len):
    if batch_size < 1 or max_len < 1:
        raise ValueError("size")
    ys = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        nxt = step_fn(ys).argmax(-1)
        ys = torch.cat([ys, nxt[:, None]], 1)
        if bool((nxt == eos_id).any()):
            break
    return ys
"""),
        ("finished rows keep generating (no padding after eos)", """
def greedy_decode(step_fn, batch_size, bos_id, eos_id, pad_id, max_len):
    if batch_size < 1 or max_len < 1:
        raise ValueError("size")
    ys = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    done = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_len):
        nxt = step_fn(ys).argmax(-1)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done |= nxt == eos_id
        if bool(done.all()):
            break
    return ys
"""),
        ("always runs max_len steps", """
def greedy_decode(step_fn, batch_size, bos_id, eos_id, pad_id, max_len):
    if batch_size < 1 or max_len < 1:
        raise ValueError("size")
    ys = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    done = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_len):
        nxt = torch.where(done, torch.full_like(ys[:, 0], pad_id), step_fn(ys).argmax(-1))
        ys = torch.cat([ys, nxt[:, None]], 1)
        done |= nxt == eos_id
    return ys
"""),
        ("the eos itself replaced by padding", """
def greedy_decode(step_fn, batch_size, bos_id, eos_id, pad_id, max_len):
    if batch_size < 1 or max_len < 1:
        raise ValueError("size")
    ys = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    done = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_len):
        nxt = step_fn(ys).argmax(-1)
        done |= nxt == eos_id
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], 1)
        if bool(done.all()):
            break
    return ys
"""),
        ("only the rows still running are given to step_fn", """
def greedy_decode(step_fn, batch_size, bos_id, eos_id, pad_id, max_len):
    if batch_size < 1 or max_len < 1:
        raise ValueError("size")
    ys = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    done = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_len):
        nxt = torch.full((batch_size,), pad_id, dtype=torch.long)
        nxt[~done] = step_fn(ys[~done]).argmax(-1)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done |= nxt == eos_id
        if bool(done.all()):
            break
    return ys
"""),
    ],
    "10.2": [
        ("greedy whatever the beam size", """
def beam_search(step_fn, bos_id, eos_id, max_len, beam_size, alpha=0.0, min_length=0):
    if beam_size < 1 or max_len < 1 or min_length > max_len:
        raise ValueError("bad")
    tokens, score = [bos_id], 0.0
    for _ in range(max_len):
        lp = torch.log_softmax(step_fn(torch.tensor(tokens)).double(), -1)
        if len(tokens) < min_length:
            lp[eos_id] = -math.inf
        t = int(lp.argmax())
        tokens.append(t)
        score += float(lp[t])
        if t == eos_id:
            break
    return torch.tensor(tokens), score / ((5 + len(tokens) - 1) / 6) ** alpha
"""),
        ("never freezes finished hypotheses (keeps extending them after eos)", """
def beam_search(step_fn, bos_id, eos_id, max_len, beam_size, alpha=0.0, min_length=0):
    if beam_size < 1 or max_len < 1 or min_length > max_len:
        raise ValueError("bad")
    beam = [([bos_id], 0.0)]
    for _ in range(max_len):
        cands = []
        for toks, sc in beam:
            lp = torch.log_softmax(step_fn(torch.tensor(toks)).double(), -1)
            if len(toks) < min_length:
                lp[eos_id] = -math.inf
            cands += [(toks + [t], sc + v) for t, v in enumerate(lp.tolist())]
        beam = sorted(cands, key=lambda c: c[1], reverse=True)[:beam_size]
    norm = lambda h: h[1] / ((5 + len(h[0]) - 1) / 6) ** alpha
    best = max(beam, key=norm)
    return torch.tensor(best[0]), norm(best)
"""),
        ("never freezes, but cuts the result at its first eos", """
def beam_search(step_fn, bos_id, eos_id, max_len, beam_size, alpha=0.0, min_length=0):
    if beam_size < 1 or max_len < 1 or min_length > max_len:
        raise ValueError("bad")
    beam = [([bos_id], 0.0, 0.0)]   # tokens, score up to the first eos, running score
    for _ in range(max_len):
        cands = []
        for toks, sc, run in beam:
            lp = torch.log_softmax(step_fn(torch.tensor(toks)).double(), -1)
            if len(toks) < min_length:
                lp[eos_id] = -math.inf
            ended = eos_id in toks[1:]
            cands += [(toks + [t], sc if ended else sc + v, run + v) for t, v in enumerate(lp.tolist())]
        beam = sorted(cands, key=lambda c: c[2], reverse=True)[:beam_size]
    def cut(h):
        toks = h[0][: h[0].index(eos_id, 1) + 1] if eos_id in h[0][1:] else h[0]
        return toks, h[1] / ((5 + len(toks) - 1) / 6) ** alpha
    best = max((cut(h) for h in beam), key=lambda c: c[1])
    return torch.tensor(best[0]), best[1]
"""),
        ("min_length ignored", """
def beam_search(step_fn, bos_id, eos_id, max_len, beam_size, alpha=0.0, min_length=0):
    if beam_size < 1 or max_len < 1 or min_length > max_len:
        raise ValueError("bad")
    live, done = [([bos_id], 0.0)], []
    for _ in range(max_len):
        cands = []
        for toks, sc in live:
            for t, lp in enumerate(torch.log_softmax(step_fn(torch.tensor(toks)).double(), -1).tolist()):
                cands.append((toks + [t], sc + lp))
        cands.sort(key=lambda c: c[1], reverse=True)
        live = []
        for toks, sc in cands[:beam_size]:
            (done if toks[-1] == eos_id else live).append((toks, sc))
        if not live:
            break
    norm = lambda h: h[1] / ((5 + len(h[0]) - 1) / 6) ** alpha
    best = max(done + live, key=norm)
    return torch.tensor(best[0]), norm(best)
"""),
        ("length penalty n ** alpha instead of ((5 + n) / 6) ** alpha", """
def beam_search(step_fn, bos_id, eos_id, max_len, beam_size, alpha=0.0, min_length=0):
    if beam_size < 1 or max_len < 1 or min_length > max_len:
        raise ValueError("bad")
    live, done = [([bos_id], 0.0)], []
    for _ in range(max_len):
        cands = []
        for toks, sc in live:
            lp = torch.log_softmax(step_fn(torch.tensor(toks)).double(), -1)
            if len(toks) < min_length:
                lp[eos_id] = -math.inf
            cands += [(toks + [t], sc + v) for t, v in enumerate(lp.tolist())]
        cands.sort(key=lambda c: c[1], reverse=True)
        live = []
        for toks, sc in cands[:beam_size]:
            (done if toks[-1] == eos_id else live).append((toks, sc))
        if not live:
            break
    norm = lambda h: h[1] / (len(h[0]) - 1) ** alpha
    best = max(done + live, key=norm)
    return torch.tensor(best[0]), norm(best)
"""),
        ("min_length renormalises the other tokens", """
def beam_search(step_fn, bos_id, eos_id, max_len, beam_size, alpha=0.0, min_length=0):
    if beam_size < 1 or max_len < 1 or min_length > max_len:
        raise ValueError("bad")
    live, done = [([bos_id], 0.0)], []
    for _ in range(max_len):
        cands = []
        for toks, sc in live:
            logits = step_fn(torch.tensor(toks)).double()
            if len(toks) < min_length:
                logits[eos_id] = -math.inf
            cands += [(toks + [t], sc + v) for t, v in enumerate(torch.log_softmax(logits, -1).tolist())]
        cands.sort(key=lambda c: c[1], reverse=True)
        live = []
        for toks, sc in cands[:beam_size]:
            (done if toks[-1] == eos_id else live).append((toks, sc))
        if not live:
            break
    norm = lambda h: h[1] / ((5 + len(h[0]) - 1) / 6) ** alpha
    best = max(done + live, key=norm)
    return torch.tensor(best[0]), norm(best)
"""),
    ],
    "10.3": [
        ("temperature applied after the filters (top-p on the unscaled probabilities)", """
def top_k_top_p_filtering(logits, temperature=1.0, top_k=0, top_p=1.0):
    if temperature <= 0 or top_k < 0:
        raise ValueError("arg")
    top_p = torch.as_tensor(top_p, dtype=torch.float64)
    if not bool(((top_p > 0) & (top_p <= 1)).all()):
        raise ValueError("top_p")
    out = logits.clone()
    if 0 < top_k < out.shape[-1]:
        out = out.masked_fill(out < torch.topk(out, top_k).values[..., -1:], float("-inf"))
    sl, order = torch.sort(out, descending=True)
    p = torch.softmax(sl.double(), -1)
    remove = (p.cumsum(-1) - p) >= top_p.expand(out.shape[:-1])[..., None]
    return out.masked_fill(remove.scatter(-1, order, remove), float("-inf")) / temperature
"""),
        ("returns the unscaled logits", """
def top_k_top_p_filtering(logits, temperature=1.0, top_k=0, top_p=1.0):
    if temperature <= 0 or top_k < 0:
        raise ValueError("arg")
    top_p = torch.as_tensor(top_p, dtype=torch.float64)
    if not bool(((top_p > 0) & (top_p <= 1)).all()):
        raise ValueError("top_p")
    out = logits / temperature
    if 0 < top_k < out.shape[-1]:
        out = out.masked_fill(out < torch.topk(out, top_k).values[..., -1:], float("-inf"))
    sl, order = torch.sort(out, descending=True)
    p = torch.softmax(sl.double(), -1)
    remove = (p.cumsum(-1) - p) >= top_p.expand(out.shape[:-1])[..., None]
    remove = remove.scatter(-1, order, remove)
    return logits.masked_fill(remove | torch.isinf(out), float("-inf"))
"""),
        ("one top_p for every row (the first)", """
def top_k_top_p_filtering(logits, temperature=1.0, top_k=0, top_p=1.0):
    if temperature <= 0 or top_k < 0:
        raise ValueError("arg")
    top_p = float(torch.as_tensor(top_p).flatten()[0])
    if not 0 < top_p <= 1:
        raise ValueError("top_p")
    out = logits / temperature
    if 0 < top_k < out.shape[-1]:
        out = out.masked_fill(out < torch.topk(out, top_k).values[..., -1:], float("-inf"))
    sl, order = torch.sort(out, descending=True)
    p = torch.softmax(sl.double(), -1)
    remove = (p.cumsum(-1) - p) >= top_p
    return out.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
"""),
        ("top-p on the probabilities before top-k", """
def top_k_top_p_filtering(logits, temperature=1.0, top_k=0, top_p=1.0):
    if temperature <= 0 or top_k < 0:
        raise ValueError("arg")
    top_p = torch.as_tensor(top_p, dtype=torch.float64)
    if not bool(((top_p > 0) & (top_p <= 1)).all()):
        raise ValueError("top_p")
    scaled = logits / temperature
    out = scaled.clone()
    if 0 < top_k < out.shape[-1]:
        out = out.masked_fill(out < torch.topk(out, top_k).values[..., -1:], float("-inf"))
    sl, order = torch.sort(scaled, descending=True)
    p = torch.softmax(sl.double(), -1)
    remove = (p.cumsum(-1) - p) >= top_p.expand(out.shape[:-1])[..., None]
    return out.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
"""),
        ("top-p keeps a token only if the mass INCLUDING it is < top_p", """
def top_k_top_p_filtering(logits, temperature=1.0, top_k=0, top_p=1.0):
    if temperature <= 0 or top_k < 0:
        raise ValueError("arg")
    top_p = torch.as_tensor(top_p, dtype=torch.float64)
    if not bool(((top_p > 0) & (top_p <= 1)).all()):
        raise ValueError("top_p")
    out = logits / temperature
    if 0 < top_k < out.shape[-1]:
        out = out.masked_fill(out < torch.topk(out, top_k).values[..., -1:], float("-inf"))
    if bool((top_p < 1).any()):
        sl, order = torch.sort(out, descending=True)
        remove = torch.softmax(sl.double(), -1).cumsum(-1) >= top_p.expand(out.shape[:-1])[..., None]
        remove[..., 0] = False
        out = out.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return out
"""),
    ],
    "10.4": [
        ("no causal mask inside a chunk", """
def kv_cache_step(q_new, k_new, v_new, k_cache=None, v_cache=None):
    k = k_new if k_cache is None else torch.cat([k_cache, k_new], -2)
    v = v_new if v_cache is None else torch.cat([v_cache, v_new], -2)
    w = torch.softmax(q_new @ k.transpose(-2, -1) / math.sqrt(q_new.shape[-1]), -1)
    return w @ v, k, v
"""),
        ("the cache is returned but not attended to", """
def kv_cache_step(q_new, k_new, v_new, k_cache=None, v_cache=None):
    k = k_new if k_cache is None else torch.cat([k_cache, k_new], -2)
    v = v_new if v_cache is None else torch.cat([v_cache, v_new], -2)
    n = q_new.shape[-2]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    s = (q_new @ k_new.transpose(-2, -1) / math.sqrt(q_new.shape[-1])).masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1) @ v_new, k, v
"""),
    ],
    "10.5": [
        ("bans every token that occurred (n ignored)", """
def banned_tokens(prefixes, n, vocab_size):
    if n < 1:
        raise ValueError("n")
    out = torch.zeros(len(prefixes), vocab_size, dtype=torch.bool)
    for r, p in enumerate(prefixes):
        if len(p) and (int(p.min()) < 0 or int(p.max()) >= vocab_size):
            raise ValueError("id")
        out[r, p.long()] = True
    return out
"""),
        ("context of n tokens instead of n - 1", """
def banned_tokens(prefixes, n, vocab_size):
    if n < 1:
        raise ValueError("n")
    out = torch.zeros(len(prefixes), vocab_size, dtype=torch.bool)
    for r, p in enumerate(prefixes):
        t = p.tolist()
        if any(x < 0 or x >= vocab_size for x in t):
            raise ValueError("id")
        ctx = tuple(t[len(t) - n:]) if len(t) >= n else None
        for s in range(len(t) - n):
            if tuple(t[s:s + n]) == ctx:
                out[r, t[s + n]] = True
    return out
"""),
        ("bans the FIRST token of the matching n-gram", """
def banned_tokens(prefixes, n, vocab_size):
    if n < 1:
        raise ValueError("n")
    out = torch.zeros(len(prefixes), vocab_size, dtype=torch.bool)
    for r, p in enumerate(prefixes):
        t = p.tolist()
        if any(x < 0 or x >= vocab_size for x in t):
            raise ValueError("id")
        ctx = tuple(t[len(t) - (n - 1):]) if n > 1 else ()
        for s in range(len(t) - n + 1):
            if tuple(t[s + 1:s + n]) == ctx:
                out[r, t[s]] = True
    return out
"""),
        ("the last n-gram is compared with itself (bans the last token)", """
def banned_tokens(prefixes, n, vocab_size):
    if n < 1:
        raise ValueError("n")
    out = torch.zeros(len(prefixes), vocab_size, dtype=torch.bool)
    for r, p in enumerate(prefixes):
        t = p.tolist()
        if any(x < 0 or x >= vocab_size for x in t):
            raise ValueError("id")
        ctx = tuple(t[len(t) - n:-1]) if n > 1 else ()
        for s in range(len(t) - n + 1):
            if tuple(t[s:s + n - 1]) == ctx:
                out[r, t[s + n - 1]] = True
    return out
"""),
        ("no validation of the ids", """
def banned_tokens(prefixes, n, vocab_size):
    if n < 1:
        raise ValueError("n")
    out = torch.zeros(len(prefixes), vocab_size, dtype=torch.bool)
    for r, p in enumerate(prefixes):
        t = [x for x in p.tolist() if 0 <= x < vocab_size]
        ctx = tuple(t[len(t) - (n - 1):]) if n > 1 else ()
        for s in range(len(t) - n + 1):
            if tuple(t[s:s + n - 1]) == ctx:
                out[r, t[s + n - 1]] = True
    return out
"""),
    ],
    "11.1": [
        ("transposed: (L_in, L_out)", """
def dependency_matrix(fn, x):
    if x.dim() != 2:
        raise ValueError("x")
    jac = torch.autograd.functional.jacobian(fn, x)
    return (jac.abs().amax(dim=(1, 3)) > 1e-6).T
"""),
        ("one backward pass of fn(x).sum(): the same row for every output", """
def dependency_matrix(fn, x):
    if x.dim() != 2:
        raise ValueError("x")
    x = x.clone().requires_grad_(True)
    out = fn(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    return (grad.abs().sum(-1) > 1e-6)[None, :].expand(out.shape[0], -1)
"""),
        ("assumes L_out == L_in and a diagonal that always depends", """
def dependency_matrix(fn, x):
    if x.dim() != 2:
        raise ValueError("x")
    jac = torch.autograd.functional.jacobian(fn, x)
    dep = jac.abs().amax(dim=(1, 3)) > 1e-6
    n = x.shape[0]
    return dep[:n, :n] | torch.eye(n, dtype=torch.bool)
"""),
        ("Jacobian reduced over the wrong axes", """
def dependency_matrix(fn, x):
    if x.dim() != 2:
        raise ValueError("x")
    jac = torch.autograd.functional.jacobian(fn, x)
    return jac.abs().amax(dim=(0, 2)) > 1e-6
"""),
    ],
    "11.2": [
        ("padding counted as a token", """
def loss_floors(targets, pad_id):
    if targets.dim() != 2 or not bool((targets != pad_id).any()):
        raise ValueError("targets")
    def h(t):
        _, c = torch.unique(t, return_counts=True)
        f = c.double() / c.sum()
        return float(-(f * f.log()).sum())
    N = targets.numel()
    return h(targets.flatten()), sum(targets.shape[0] / N * h(targets[:, p]) for p in range(targets.shape[1]))
"""),
        ("position entropy: plain mean over positions", """
def loss_floors(targets, pad_id):
    if targets.dim() != 2 or not bool((targets != pad_id).any()):
        raise ValueError("targets")
    def h(t):
        _, c = torch.unique(t, return_counts=True)
        f = c.double() / c.sum()
        return float(-(f * f.log()).sum())
    cols = [targets[:, p][targets[:, p] != pad_id] for p in range(targets.shape[1])]
    cols = [c for c in cols if c.numel()]
    return h(targets[targets != pad_id]), sum(h(c) for c in cols) / len(cols)
"""),
        ("log base 2 (bits, not nats)", """
def loss_floors(targets, pad_id):
    if targets.dim() != 2 or not bool((targets != pad_id).any()):
        raise ValueError("targets")
    def h(t):
        _, c = torch.unique(t, return_counts=True)
        f = c.double() / c.sum()
        return float(-(f * f.log2()).sum())
    real = targets[targets != pad_id]
    total = 0.0
    for p in range(targets.shape[1]):
        col = targets[:, p][targets[:, p] != pad_id]
        if col.numel():
            total += col.numel() / real.numel() * h(col)
    return h(real), total
"""),
        ("the unigram entropy given for both floors", """
def loss_floors(targets, pad_id):
    if targets.dim() != 2 or not bool((targets != pad_id).any()):
        raise ValueError("targets")
    _, c = torch.unique(targets[targets != pad_id], return_counts=True)
    f = c.double() / c.sum()
    h = float(-(f * f.log()).sum())
    return h, h
"""),
    ],
    "11.3": [
        ("NaN slips through (only compares with k x min)", """
def first_divergence(losses, k):
    if k <= 1 or losses.dim() != 1:
        raise ValueError("bad")
    best = None
    for t, v in enumerate(losses.tolist()):
        if best is not None and v > k * best:
            return t
        best = v if best is None else min(best, v)
    return -1
"""),
        ("running mean instead of the running minimum", """
def first_divergence(losses, k):
    if k <= 1 or losses.dim() != 1:
        raise ValueError("bad")
    seen = []
    for t, v in enumerate(losses.tolist()):
        if not math.isfinite(v) or (seen and v > k * sum(seen) / len(seen)):
            return t
        seen.append(v)
    return -1
"""),
        ("compares with the previous loss, not the running minimum", """
def first_divergence(losses, k):
    if k <= 1 or losses.dim() != 1:
        raise ValueError("bad")
    values = losses.tolist()
    for t, v in enumerate(values):
        if not math.isfinite(v) or (t > 0 and v > k * values[t - 1]):
            return t
    return -1
"""),
        ("1-based step numbers", """
def first_divergence(losses, k):
    if k <= 1 or losses.dim() != 1:
        raise ValueError("bad")
    best = None
    for t, v in enumerate(losses.tolist()):
        if not math.isfinite(v) or (best is not None and v > k * best):
            return t + 1
        best = v if best is None else min(best, v)
    return -1
"""),
        (">= instead of >", """
def first_divergence(losses, k):
    if k <= 1 or losses.dim() != 1:
        raise ValueError("bad")
    best = None
    for t, v in enumerate(losses.tolist()):
        if not math.isfinite(v) or (best is not None and v >= k * best):
            return t
        best = v if best is None else min(best, v)
    return -1
"""),
    ],
}
