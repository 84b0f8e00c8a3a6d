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
        ("last dimension only (the chapter's listing)", """
def layer_norm(x, gamma, beta, eps=1e-5):
    mu = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return gamma * (x - mu) / torch.sqrt(var + eps) + beta
"""),
        ("each trailing dimension normalised in turn", """
def layer_norm(x, gamma, beta, eps=1e-5):
    if tuple(x.shape[x.dim() - gamma.dim():]) != tuple(gamma.shape) or beta.shape != gamma.shape:
        raise ValueError("gamma")
    y = x
    for d in range(-gamma.dim(), 0):
        y = (y - y.mean(d, keepdim=True)) / torch.sqrt(y.var(d, unbiased=False, keepdim=True) + eps)
    return y * gamma + beta
"""),
        ("unbiased variance", """
def layer_norm(x, gamma, beta, eps=1e-5):
    if tuple(x.shape[x.dim() - gamma.dim():]) != tuple(gamma.shape) or beta.shape != gamma.shape:
        raise ValueError("gamma")
    dims = tuple(range(-gamma.dim(), 0))
    return (x - x.mean(dims, keepdim=True)) / torch.sqrt(x.var(dims, unbiased=True, keepdim=True) + eps) * gamma + beta
"""),
        ("eps outside the square root", """
def layer_norm(x, gamma, beta, eps=1e-5):
    if tuple(x.shape[x.dim() - gamma.dim():]) != tuple(gamma.shape) or beta.shape != gamma.shape:
        raise ValueError("gamma")
    dims = tuple(range(-gamma.dim(), 0))
    return (x - x.mean(dims, keepdim=True)) / (torch.sqrt(x.var(dims, unbiased=False, keepdim=True)) + eps) * gamma + beta
"""),
        ("variance as E[x^2] - mean^2 in float32", """
def layer_norm(x, gamma, beta, eps=1e-5):
    if tuple(x.shape[x.dim() - gamma.dim():]) != tuple(gamma.shape) or beta.shape != gamma.shape:
        raise ValueError("gamma")
    dims = tuple(range(-gamma.dim(), 0))
    mean = x.mean(dims, keepdim=True)
    var = (x * x).mean(dims, keepdim=True) - mean * mean
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta
"""),
        ("eps argument ignored", """
def layer_norm(x, gamma, beta, eps=1e-5):
    if tuple(x.shape[x.dim() - gamma.dim():]) != tuple(gamma.shape) or beta.shape != gamma.shape:
        raise ValueError("gamma")
    return F.layer_norm(x, tuple(gamma.shape), gamma, beta, 1e-5)
"""),
        ("no shape check", """
def layer_norm(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x, tuple(gamma.shape), gamma, beta.expand_as(gamma), eps)
"""),
    ],
    "7.2": [
        ("final LayerNorm forgotten", """
def pre_ln_stack(x, sublayers, norms, final_norm, eps=1e-5):
    if len(norms) != len(sublayers):
        raise ValueError("norms")
    for f, (g, b) in zip(sublayers, norms):
        x = x + f(F.layer_norm(x, x.shape[-1:], g, b, eps))
    return x
"""),
        ("Post-LN instead of Pre-LN", """
def pre_ln_stack(x, sublayers, norms, final_norm, eps=1e-5):
    if len(norms) != len(sublayers):
        raise ValueError("norms")
    for f, (g, b) in zip(sublayers, norms):
        x = F.layer_norm(x + f(x), x.shape[-1:], g, b, eps)
    return F.layer_norm(x, x.shape[-1:], final_norm[0], final_norm[1], eps)
"""),
        ("residual adds the normalised x", """
def pre_ln_stack(x, sublayers, norms, final_norm, eps=1e-5):
    if len(norms) != len(sublayers):
        raise ValueError("norms")
    for f, (g, b) in zip(sublayers, norms):
        y = F.layer_norm(x, x.shape[-1:], g, b, eps)
        x = y + f(y)
    return F.layer_norm(x, x.shape[-1:], final_norm[0], final_norm[1], eps)
"""),
        ("the first LayerNorm for every sublayer", """
def pre_ln_stack(x, sublayers, norms, final_norm, eps=1e-5):
    if len(norms) != len(sublayers):
        raise ValueError("norms")
    for f in sublayers:
        x = x + f(F.layer_norm(x, x.shape[-1:], norms[0][0], norms[0][1], eps))
    return F.layer_norm(x, x.shape[-1:], final_norm[0], final_norm[1], eps)
"""),
        ("zip drops the extra sublayer (no length check)", """
def pre_ln_stack(x, sublayers, norms, final_norm, eps=1e-5):
    for f, (g, b) in zip(sublayers, norms):
        x = x + f(F.layer_norm(x, x.shape[-1:], g, b, eps))
    return F.layer_norm(x, x.shape[-1:], final_norm[0], final_norm[1], eps)
"""),
    ],
    "7.3": [
        ("Pre-LN instead of Post-LN", """
def post_ln_stack(x, sublayers, norms, eps=1e-5):
    if len(norms) != len(sublayers):
        raise ValueError("norms")
    for f, (g, b) in zip(sublayers, norms):
        x = x + f(F.layer_norm(x, x.shape[-1:], g, b, eps))
    return x
"""),
        ("only the last sublayer's output normalised", """
def post_ln_stack(x, sublayers, norms, eps=1e-5):
    if len(norms) != len(sublayers):
        raise ValueError("norms")
    for f in sublayers:
        x = x + f(x)
    return F.layer_norm(x, x.shape[-1:], norms[-1][0], norms[-1][1], eps)
"""),
        ("norms applied in reverse order", """
def post_ln_stack(x, sublayers, norms, eps=1e-5):
    if len(norms) != len(sublayers):
        raise ValueError("norms")
    for f, (g, b) in zip(sublayers, norms[::-1]):
        x = F.layer_norm(x + f(x), x.shape[-1:], g, b, eps)
    return x
"""),
        ("zip drops the extra sublayer (no length check)", """
def post_ln_stack(x, sublayers, norms, eps=1e-5):
    for f, (g, b) in zip(sublayers, norms):
        x = F.layer_norm(x + f(x), x.shape[-1:], g, b, eps)
    return x
"""),
    ],
    "7.4": [
        ("centred like LayerNorm", """
def rms_norm(x, gain, eps=1e-6):
    if tuple(gain.shape) != (x.shape[-1],):
        raise ValueError("gain")
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt((c * c).mean(-1, keepdim=True) + eps) * gain
"""),
        ("eps outside the square root", """
def rms_norm(x, gain, eps=1e-6):
    if tuple(gain.shape) != (x.shape[-1],):
        raise ValueError("gain")
    return x / (torch.sqrt((x * x).mean(-1, keepdim=True)) + eps) * gain
"""),
        ("root of the sum instead of the mean", """
def rms_norm(x, gain, eps=1e-6):
    if tuple(gain.shape) != (x.shape[-1],):
        raise ValueError("gain")
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps) * gain
"""),
        ("eps argument ignored", """
def rms_norm(x, gain, eps=1e-6):
    if tuple(gain.shape) != (x.shape[-1],):
        raise ValueError("gain")
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * gain
"""),
        ("no shape check", """
def rms_norm(x, gain, eps=1e-6):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain
"""),
    ],
    "7.5": [
        ("Pre-LN without the final LayerNorm", """
def gradient_norms_by_depth(x, sublayers, w, norm_first, eps=1e-5):
    if w.shape != x.shape:
        raise ValueError("w")
    d = x.shape[-1]
    xs = [x.detach().clone().requires_grad_(True)]
    for f in sublayers:
        h = xs[-1]
        xs.append(h + f(F.layer_norm(h, (d,), eps=eps)) if norm_first else F.layer_norm(h + f(h), (d,), eps=eps))
    return torch.stack([g.norm() for g in torch.autograd.grad((w * xs[-1]).sum(), xs)])
"""),
        ("placements swapped (norm_first=True taken as Post-LN)", """
def gradient_norms_by_depth(x, sublayers, w, norm_first, eps=1e-5):
    if w.shape != x.shape:
        raise ValueError("w")
    d = x.shape[-1]
    norm_first = not norm_first
    xs = [x.detach().clone().requires_grad_(True)]
    for f in sublayers:
        h = xs[-1]
        xs.append(h + f(F.layer_norm(h, (d,), eps=eps)) if norm_first else F.layer_norm(h + f(h), (d,), eps=eps))
    out = F.layer_norm(xs[-1], (d,), eps=eps) if norm_first else xs[-1]
    return torch.stack([g.norm() for g in torch.autograd.grad((w * out).sum(), xs)])
"""),
        ("norms listed from the output down", """
def gradient_norms_by_depth(x, sublayers, w, norm_first, eps=1e-5):
    if w.shape != x.shape:
        raise ValueError("w")
    d = x.shape[-1]
    xs = [x.detach().clone().requires_grad_(True)]
    for f in sublayers:
        h = xs[-1]
        xs.append(h + f(F.layer_norm(h, (d,), eps=eps)) if norm_first else F.layer_norm(h + f(h), (d,), eps=eps))
    out = F.layer_norm(xs[-1], (d,), eps=eps) if norm_first else xs[-1]
    return torch.stack([g.norm() for g in torch.autograd.grad((w * out).sum(), xs)][::-1])
"""),
        ("the input's gradient left out (N norms)", """
def gradient_norms_by_depth(x, sublayers, w, norm_first, eps=1e-5):
    if w.shape != x.shape:
        raise ValueError("w")
    d = x.shape[-1]
    xs = [x.detach().clone().requires_grad_(True)]
    for f in sublayers:
        h = xs[-1]
        xs.append(h + f(F.layer_norm(h, (d,), eps=eps)) if norm_first else F.layer_norm(h + f(h), (d,), eps=eps))
    out = F.layer_norm(xs[-1], (d,), eps=eps) if norm_first else xs[-1]
    return torch.stack([g.norm() for g in torch.autograd.grad((w * out).sum(), xs)][1:])
"""),
        ("no residual path (x = LN(f(x)) / x = f(LN(x)))", """
def gradient_norms_by_depth(x, sublayers, w, norm_first, eps=1e-5):
    if w.shape != x.shape:
        raise ValueError("w")
    d = x.shape[-1]
    xs = [x.detach().clone().requires_grad_(True)]
    for f in sublayers:
        h = xs[-1]
        xs.append(f(F.layer_norm(h, (d,), eps=eps)) if norm_first else F.layer_norm(f(h), (d,), eps=eps))
    out = F.layer_norm(xs[-1], (d,), eps=eps) if norm_first else xs[-1]
    return torch.stack([g.norm() for g in torch.autograd.grad((w * out).sum(), xs)])
"""),
        ("w broadcast instead of rejected", """
def gradient_norms_by_depth(x, sublayers, w, norm_first, eps=1e-5):
    d = x.shape[-1]
    xs = [x.detach().clone().requires_grad_(True)]
    for f in sublayers:
        h = xs[-1]
        xs.append(h + f(F.layer_norm(h, (d,), eps=eps)) if norm_first else F.layer_norm(h + f(h), (d,), eps=eps))
    out = F.layer_norm(xs[-1], (d,), eps=eps) if norm_first else xs[-1]
    return torch.stack([g.norm() for g in torch.autograd.grad((w * out).sum(), xs)])
"""),
    ],
    "8.1": [
        ("True at the padding", """
def padding_mask(lengths, seq_len):
    if lengths.dim() != 1 or (lengths < 0).any() or (lengths > seq_len).any():
        raise ValueError("lengths")
    return (torch.arange(seq_len)[None, :] >= lengths[:, None])[:, None, None, :]
"""),
        ("j <= length: one padding key too many", """
def padding_mask(lengths, seq_len):
    if lengths.dim() != 1 or (lengths < 0).any() or (lengths > seq_len).any():
        raise ValueError("lengths")
    return (torch.arange(seq_len)[None, :] <= lengths[:, None])[:, None, None, :]
"""),
        ("shape (batch, seq_len)", """
def padding_mask(lengths, seq_len):
    if lengths.dim() != 1 or (lengths < 0).any() or (lengths > seq_len).any():
        raise ValueError("lengths")
    return torch.arange(seq_len)[None, :] < lengths[:, None]
"""),
        ("flags on the query axis (batch, 1, seq_len, 1)", """
def padding_mask(lengths, seq_len):
    if lengths.dim() != 1 or (lengths < 0).any() or (lengths > seq_len).any():
        raise ValueError("lengths")
    return (torch.arange(seq_len)[None, :] < lengths[:, None])[:, None, :, None]
"""),
        ("0/1 integers instead of bool", """
def padding_mask(lengths, seq_len):
    if lengths.dim() != 1 or (lengths < 0).any() or (lengths > seq_len).any():
        raise ValueError("lengths")
    return (torch.arange(seq_len)[None, :] < lengths[:, None]).long()[:, None, None, :]
"""),
        ("no validation", """
def padding_mask(lengths, seq_len):
    return (torch.arange(seq_len)[None, :] < lengths.reshape(-1)[:, None])[:, None, None, :]
"""),
    ],
    "8.2": [
        ("top-left alignment (is_causal's): tril without offset", """
def causal_mask(q_len, k_len=None):
    k_len = q_len if k_len is None else k_len
    if q_len < 1 or k_len < q_len:
        raise ValueError("q_len")
    return torch.ones(q_len, k_len, dtype=torch.bool).tril()[None, None]
"""),
        ("square only: k_len ignored (the chapter's listing)", """
def causal_mask(q_len, k_len=None):
    if q_len < 1:
        raise ValueError("q_len")
    return torch.ones(q_len, q_len, dtype=torch.bool).tril()[None, None]
"""),
        ("upper triangle", """
def causal_mask(q_len, k_len=None):
    k_len = q_len if k_len is None else k_len
    if q_len < 1 or k_len < q_len:
        raise ValueError("q_len")
    return torch.ones(q_len, k_len, dtype=torch.bool).triu(k_len - q_len)[None, None]
"""),
        ("diagonal excluded", """
def causal_mask(q_len, k_len=None):
    k_len = q_len if k_len is None else k_len
    if q_len < 1 or k_len < q_len:
        raise ValueError("q_len")
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len - 1)[None, None]
"""),
        ("k_len < q_len accepted", """
def causal_mask(q_len, k_len=None):
    k_len = q_len if k_len is None else k_len
    if q_len < 1:
        raise ValueError("q_len")
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)[None, None]
"""),
    ],
    "8.3": [
        ("the chapter's listing: q_len ignored", """
def decoder_self_attention_mask(tgt, pad_id, q_len=None):
    if tgt.dim() != 2:
        raise ValueError("tgt")
    n = tgt.shape[1]
    return (tgt != pad_id)[:, None, None, :] & torch.ones(n, n, dtype=torch.bool).tril()[None, None]
"""),
        ("causal only", """
def decoder_self_attention_mask(tgt, pad_id, q_len=None):
    if tgt.dim() != 2:
        raise ValueError("tgt")
    n = tgt.shape[1]
    q = n if q_len is None else q_len
    if not 1 <= q <= n:
        raise ValueError("q_len")
    return torch.ones(q, n, dtype=torch.bool).tril(n - q)[None, None].expand(tgt.shape[0], 1, q, n)
"""),
        ("top-left aligned causal part", """
def decoder_self_attention_mask(tgt, pad_id, q_len=None):
    if tgt.dim() != 2:
        raise ValueError("tgt")
    n = tgt.shape[1]
    q = n if q_len is None else q_len
    if not 1 <= q <= n:
        raise ValueError("q_len")
    return (tgt != pad_id)[:, None, None, :] & torch.ones(q, n, dtype=torch.bool).tril()[None, None]
"""),
        ("padding applied to the queries instead of the keys", """
def decoder_self_attention_mask(tgt, pad_id, q_len=None):
    if tgt.dim() != 2:
        raise ValueError("tgt")
    n = tgt.shape[1]
    q = n if q_len is None else q_len
    if not 1 <= q <= n:
        raise ValueError("q_len")
    return (tgt[:, n - q:] != pad_id)[:, None, :, None] & torch.ones(q, n, dtype=torch.bool).tril(n - q)[None, None]
"""),
        ("padding mask from the lengths (right padding assumed)", """
def decoder_self_attention_mask(tgt, pad_id, q_len=None):
    if tgt.dim() != 2:
        raise ValueError("tgt")
    n = tgt.shape[1]
    q = n if q_len is None else q_len
    if not 1 <= q <= n:
        raise ValueError("q_len")
    lengths = (tgt != pad_id).sum(1)
    keep = torch.arange(n)[None, :] < lengths[:, None]
    return keep[:, None, None, :] & torch.ones(q, n, dtype=torch.bool).tril(n - q)[None, None]
"""),
    ],
    "8.4": [
        ("padding keys not blocked", """
def prefix_lm_mask(tokens, prefix_lengths, pad_id):
    b, n = tokens.shape
    if tuple(prefix_lengths.shape) != (b,) or (prefix_lengths < 0).any() or (prefix_lengths > n).any():
        raise ValueError("prefix_lengths")
    j = torch.arange(n)
    m = (j[None, :] < prefix_lengths[:, None])[:, None, None, :] | (j[None, :] <= j[:, None])[None, None]
    return m
"""),
        ("causal only: the prefix ignored", """
def prefix_lm_mask(tokens, prefix_lengths, pad_id):
    b, n = tokens.shape
    if tuple(prefix_lengths.shape) != (b,) or (prefix_lengths < 0).any() or (prefix_lengths > n).any():
        raise ValueError("prefix_lengths")
    j = torch.arange(n)
    return (tokens != pad_id)[:, None, None, :] & (j[None, :] <= j[:, None])[None, None]
"""),
        ("prefix off by one (j <= p)", """
def prefix_lm_mask(tokens, prefix_lengths, pad_id):
    b, n = tokens.shape
    if tuple(prefix_lengths.shape) != (b,) or (prefix_lengths < 0).any() or (prefix_lengths > n).any():
        raise ValueError("prefix_lengths")
    j = torch.arange(n)
    pre = (j[None, :] <= prefix_lengths[:, None])[:, None, None, :]
    return (tokens != pad_id)[:, None, None, :] & (pre | (j[None, :] <= j[:, None])[None, None])
"""),
        ("the first sentence's prefix for the whole batch", """
def prefix_lm_mask(tokens, prefix_lengths, pad_id):
    b, n = tokens.shape
    if tuple(prefix_lengths.shape) != (b,) or (prefix_lengths < 0).any() or (prefix_lengths > n).any():
        raise ValueError("prefix_lengths")
    j = torch.arange(n)
    pre = (j < int(prefix_lengths[0]))[None, None, None, :]
    return (tokens != pad_id)[:, None, None, :] & (pre | (j[None, :] <= j[:, None])[None, None])
"""),
        ("prefix on the query axis: prefix queries see everything", """
def prefix_lm_mask(tokens, prefix_lengths, pad_id):
    b, n = tokens.shape
    if tuple(prefix_lengths.shape) != (b,) or (prefix_lengths < 0).any() or (prefix_lengths > n).any():
        raise ValueError("prefix_lengths")
    j = torch.arange(n)
    pre = (j[None, :] < prefix_lengths[:, None])[:, None, :, None]
    return (tokens != pad_id)[:, None, None, :] & (pre | (j[None, :] <= j[:, None])[None, None])
"""),
        ("no validation", """
def prefix_lm_mask(tokens, prefix_lengths, pad_id):
    n = tokens.shape[1]
    j = torch.arange(n)
    pre = (j[None, :] < prefix_lengths.reshape(-1)[:, None])[:, None, None, :]
    return (tokens != pad_id)[:, None, None, :] & (pre | (j[None, :] <= j[:, None])[None, None])
"""),
    ],
    "9.1": [
        ("eps spread over the other classes only", """
def label_smoothed_loss(logits, target, label_smoothing, pad_id):
    if not 0 <= label_smoothing <= 1:
        raise ValueError("label_smoothing")
    v = logits.shape[-1]
    lp = torch.log_softmax(logits, -1)
    onehot = F.one_hot(target, v).to(lp.dtype)
    q = (1 - label_smoothing) * onehot + label_smoothing * (1 - onehot) / (v - 1)
    keep = (target != pad_id).to(lp.dtype)
    n = keep.sum()
    return (-(q * lp).sum(-1) * keep).sum() / n, (lp.exp() - q) * keep[..., None] / n
"""),
        ("gradient without the smoothing (p - one_hot)", """
def label_smoothed_loss(logits, target, label_smoothing, pad_id):
    if not 0 <= label_smoothing <= 1:
        raise ValueError("label_smoothing")
    v = logits.shape[-1]
    lp = torch.log_softmax(logits, -1)
    onehot = F.one_hot(target, v).to(lp.dtype)
    q = (1 - label_smoothing) * onehot + label_smoothing / v
    keep = (target != pad_id).to(lp.dtype)
    n = keep.sum()
    return (-(q * lp).sum(-1) * keep).sum() / n, (lp.exp() - onehot) * keep[..., None] / n
"""),
        ("gradient not divided by the number of tokens", """
def label_smoothed_loss(logits, target, label_smoothing, pad_id):
    if not 0 <= label_smoothing <= 1:
        raise ValueError("label_smoothing")
    v = logits.shape[-1]
    lp = torch.log_softmax(logits, -1)
    q = (1 - label_smoothing) * F.one_hot(target, v).to(lp.dtype) + label_smoothing / v
    keep = (target != pad_id).to(lp.dtype)
    return (-(q * lp).sum(-1) * keep).sum() / keep.sum(), (lp.exp() - q) * keep[..., None]
"""),
        ("gradient also at the padding positions", """
def label_smoothed_loss(logits, target, label_smoothing, pad_id):
    if not 0 <= label_smoothing <= 1:
        raise ValueError("label_smoothing")
    v = logits.shape[-1]
    lp = torch.log_softmax(logits, -1)
    q = (1 - label_smoothing) * F.one_hot(target, v).to(lp.dtype) + label_smoothing / v
    keep = (target != pad_id).to(lp.dtype)
    n = keep.sum()
    return (-(q * lp).sum(-1) * keep).sum() / n, (lp.exp() - q) / n
"""),
        ("gradient sign flipped (q - p)", """
def label_smoothed_loss(logits, target, label_smoothing, pad_id):
    if not 0 <= label_smoothing <= 1:
        raise ValueError("label_smoothing")
    v = logits.shape[-1]
    lp = torch.log_softmax(logits, -1)
    q = (1 - label_smoothing) * F.one_hot(target, v).to(lp.dtype) + label_smoothing / v
    keep = (target != pad_id).to(lp.dtype)
    n = keep.sum()
    return (-(q * lp).sum(-1) * keep).sum() / n, (q - lp.exp()) * keep[..., None] / n
"""),
        ("padding not ignored", """
def label_smoothed_loss(logits, target, label_smoothing, pad_id):
    if not 0 <= label_smoothing <= 1:
        raise ValueError("label_smoothing")
    v = logits.shape[-1]
    lp = torch.log_softmax(logits, -1)
    q = (1 - label_smoothing) * F.one_hot(target, v).to(lp.dtype) + label_smoothing / v
    n = target.numel()
    return -(q * lp).sum() / n, (lp.exp() - q) / n
"""),
        ("the loss only (the chapter's function)", """
def label_smoothed_loss(logits, target, label_smoothing, pad_id):
    if not 0 <= label_smoothing <= 1:
        raise ValueError("label_smoothing")
    v = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, v), target.reshape(-1), ignore_index=pad_id, label_smoothing=label_smoothing)
"""),
    ],
    "9.2": [
        ("Python min(): fails on a tensor of steps (the chapter's listing)", """
def noam_lr(step, d_model, warmup_steps):
    if warmup_steps < 1 or step < 1:
        raise ValueError("step")
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)
"""),
        ("warm-up exponent -0.5 instead of -1.5", """
def noam_lr(step, d_model, warmup_steps):
    s = torch.as_tensor(step).double()
    if warmup_steps < 1 or (s < 1).any():
        raise ValueError("step")
    return d_model ** -0.5 * torch.minimum(s ** -0.5, s * warmup_steps ** -0.5)
"""),
        ("d_model factor forgotten", """
def noam_lr(step, d_model, warmup_steps):
    s = torch.as_tensor(step).double()
    if warmup_steps < 1 or (s < 1).any():
        raise ValueError("step")
    return torch.minimum(s ** -0.5, s * warmup_steps ** -1.5)
"""),
        ("maximum instead of minimum", """
def noam_lr(step, d_model, warmup_steps):
    s = torch.as_tensor(step).double()
    if warmup_steps < 1 or (s < 1).any():
        raise ValueError("step")
    return d_model ** -0.5 * torch.maximum(s ** -0.5, s * warmup_steps ** -1.5)
"""),
        ("step 0 accepted (clamped)", """
def noam_lr(step, d_model, warmup_steps):
    s = torch.as_tensor(step).double().clamp_min(1)
    return d_model ** -0.5 * torch.minimum(s ** -0.5, s * max(warmup_steps, 1) ** -1.5)
"""),
        ("only the first step of a tensor checked", """
def noam_lr(step, d_model, warmup_steps):
    s = torch.as_tensor(step).double()
    if warmup_steps < 1 or s.reshape(-1)[0] < 1:
        raise ValueError("step")
    return d_model ** -0.5 * torch.minimum(s.clamp_min(1) ** -0.5, s * warmup_steps ** -1.5)
"""),
    ],
    "9.3": [
        ("tgt_in is tgt_out shifted right (eos copied into the padding)", """
def teacher_forcing_pair(tgt, bos_id, eos_id, pad_id):
    if tgt.dim() != 2:
        raise ValueError("tgt")
    b, n = tgt.shape
    padded = torch.cat([tgt, torch.full((b, 1), pad_id, dtype=tgt.dtype)], 1)
    out = torch.where(torch.arange(n + 1)[None, :] == (tgt != pad_id).sum(1)[:, None], torch.full_like(padded, eos_id), padded)
    return torch.cat([torch.full((b, 1), bos_id, dtype=tgt.dtype), out[:, :-1]], 1), out
"""),
        ("eos appended after the padding", """
def teacher_forcing_pair(tgt, bos_id, eos_id, pad_id):
    if tgt.dim() != 2:
        raise ValueError("tgt")
    b = tgt.shape[0]
    out = torch.cat([tgt, torch.full((b, 1), eos_id, dtype=tgt.dtype)], 1)
    return torch.cat([torch.full((b, 1), bos_id, dtype=tgt.dtype), tgt], 1), out
"""),
        ("length tgt_len: the last token dropped", """
def teacher_forcing_pair(tgt, bos_id, eos_id, pad_id):
    if tgt.dim() != 2:
        raise ValueError("tgt")
    b, n = tgt.shape
    out = torch.where(torch.arange(n)[None, :] == (tgt != pad_id).sum(1)[:, None], torch.full_like(tgt, eos_id), tgt)
    return torch.cat([torch.full((b, 1), bos_id, dtype=tgt.dtype), tgt[:, :-1]], 1), out
"""),
        ("modifies tgt in place", """
def teacher_forcing_pair(tgt, bos_id, eos_id, pad_id):
    if tgt.dim() != 2:
        raise ValueError("tgt")
    b, n = tgt.shape
    lengths = (tgt != pad_id).sum(1)
    padded = torch.cat([tgt, torch.full((b, 1), pad_id, dtype=tgt.dtype)], 1)
    tgt_in = torch.cat([torch.full((b, 1), bos_id, dtype=tgt.dtype), padded[:, :-1]], 1)
    for r in range(b):
        if lengths[r] < n:
            tgt[r, lengths[r]] = eos_id
    out = torch.cat([tgt, torch.full((b, 1), pad_id, dtype=tgt.dtype)], 1)
    out[lengths == n, n] = eos_id
    return tgt_in, out
"""),
        ("no check of the shape", """
def teacher_forcing_pair(tgt, bos_id, eos_id, pad_id):
    t = tgt.reshape(tgt.shape[0], -1) if tgt.dim() > 1 else tgt[None]
    b, n = t.shape
    padded = torch.cat([t, torch.full((b, 1), pad_id, dtype=t.dtype)], 1)
    out = torch.where(torch.arange(n + 1)[None, :] == (t != pad_id).sum(1)[:, None], torch.full_like(padded, eos_id), padded)
    return torch.cat([torch.full((b, 1), bos_id, dtype=t.dtype), padded[:, :-1]], 1), out
"""),
    ],
    "9.4": [
        ("the paper's formula, not rescaled", """
def noam_lr_with_peak(step, warmup_steps, peak_lr):
    if step < 1 or warmup_steps < 1 or peak_lr <= 0:
        raise ValueError("step")
    return peak_lr * min(step ** -0.5, step * warmup_steps ** -1.5)
"""),
        ("rescaled by warmup_steps instead of its square root", """
def noam_lr_with_peak(step, warmup_steps, peak_lr):
    if step < 1 or warmup_steps < 1 or peak_lr <= 0:
        raise ValueError("step")
    return peak_lr * warmup_steps * min(step ** -0.5, step * warmup_steps ** -1.5)
"""),
        ("decays as warmup / step (1/step, not 1/sqrt(step))", """
def noam_lr_with_peak(step, warmup_steps, peak_lr):
    if step < 1 or warmup_steps < 1 or peak_lr <= 0:
        raise ValueError("step")
    return peak_lr * min(step / warmup_steps, warmup_steps / step)
"""),
        ("warm-up counted from step 0 (peak one step late)", """
def noam_lr_with_peak(step, warmup_steps, peak_lr):
    if step < 1 or warmup_steps < 1 or peak_lr <= 0:
        raise ValueError("step")
    return peak_lr * min((step - 1) / warmup_steps, math.sqrt(warmup_steps / step))
"""),
        ("peak_lr 0 accepted", """
def noam_lr_with_peak(step, warmup_steps, peak_lr):
    if step < 1 or warmup_steps < 1:
        raise ValueError("step")
    return peak_lr * min(step / warmup_steps, math.sqrt(warmup_steps / step))
"""),
    ],
    "10.1": [
        ("does not stop at eos", """
def greedy_decode(step_fn, bos_id, eos_id, max_len):
    tokens = [bos_id]
    for _ in range(max_len):
        tokens.append(int(step_fn(torch.tensor(tokens)).argmax()))
    return torch.tensor(tokens)
"""),
        ("eos left out of the result", """
def greedy_decode(step_fn, bos_id, eos_id, max_len):
    tokens = [bos_id]
    for _ in range(max_len):
        t = int(step_fn(torch.tensor(tokens)).argmax())
        if t == eos_id:
            break
        tokens.append(t)
    return torch.tensor(tokens)
"""),
        ("one token too many (max_len + 1)", """
def greedy_decode(step_fn, bos_id, eos_id, max_len):
    tokens = [bos_id]
    for _ in range(max_len + 1):
        tokens.append(int(step_fn(torch.tensor(tokens)).argmax()))
        if tokens[-1] == eos_id:
            break
    return torch.tensor(tokens)
"""),
    ],
    "10.2": [
        ("greedy whatever the beam size", """
def beam_search(step_fn, bos_id, eos_id, max_len, beam_size, length_penalty=0.0):
    tokens, score = [bos_id], 0.0
    for _ in range(max_len):
        lp = torch.log_softmax(step_fn(torch.tensor(tokens)).double(), -1)
        t = int(lp.argmax())
        tokens.append(t)
        score += float(lp[t])
        if t == eos_id:
            break
    return torch.tensor(tokens), score / (len(tokens) - 1) ** length_penalty
"""),
        ("raw logits summed instead of log-probabilities", """
def beam_search(step_fn, bos_id, eos_id, max_len, beam_size, length_penalty=0.0):
    live, done = [([bos_id], 0.0)], []
    for _ in range(max_len):
        cands = []
        for toks, sc in live:
            for t, lp in enumerate(step_fn(torch.tensor(toks)).double().tolist()):
                cands.append((toks + [t], sc + lp))
        cands.sort(key=lambda c: c[1], reverse=True)
        live = []
        for toks, sc in cands[:beam_size]:
            (done if toks[-1] == eos_id else live).append((toks, sc))
        if not live:
            break
    norm = lambda h: h[1] / (len(h[0]) - 1) ** length_penalty
    best = max(done + live, key=norm)
    return torch.tensor(best[0]), norm(best)
"""),
        ("length penalty ignored", """
def beam_search(step_fn, bos_id, eos_id, max_len, beam_size, length_penalty=0.0):
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
    best = max(done + live, key=lambda h: h[1])
    return torch.tensor(best[0]), best[1]
"""),
    ],
    "10.3": [
        ("top-p on the probabilities before top-k", """
def top_k_top_p_filtering(logits, top_k=0, top_p=1.0):
    if top_k < 0 or not 0 < top_p <= 1:
        raise ValueError("arg")
    out = logits.clone()
    probs = torch.softmax(logits, -1)
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[..., -1:]
        out = out.masked_fill(logits < kth, float("-inf"))
    if top_p < 1:
        sp, order = torch.sort(probs, descending=True)
        remove = (sp.cumsum(-1) - sp) >= top_p
        out = out.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return out
"""),
        ("top-p keeps a token only if the mass INCLUDING it is < top_p", """
def top_k_top_p_filtering(logits, top_k=0, top_p=1.0):
    if top_k < 0 or not 0 < top_p <= 1:
        raise ValueError("arg")
    out = logits.clone()
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(out, top_k).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1:
        sl, order = torch.sort(out, descending=True)
        remove = torch.softmax(sl, -1).cumsum(-1) >= top_p
        remove[..., 0] = False
        out = out.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return out
"""),
        ("removed logits set to a large negative number", """
def top_k_top_p_filtering(logits, top_k=0, top_p=1.0):
    if top_k < 0 or not 0 < top_p <= 1:
        raise ValueError("arg")
    out = logits.clone()
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(out, top_k).values[..., -1:]
        out = out.masked_fill(out < kth, -1e9)
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
}
