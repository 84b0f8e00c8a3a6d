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
        ("the chapter's listing copied: no bias argument", """
def scaled_dot_product_attention(q, k, v, mask=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    w = torch.softmax(scores, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
"""),
        ("no 1/sqrt(d_k) scale", """
def scaled_dot_product_attention(q, k, v, mask=None, bias=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    scores = q @ k.transpose(-2, -1)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    w = torch.softmax(scores, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
"""),
        ("bias added before the 1/sqrt(d_k) scale", """
def scaled_dot_product_attention(q, k, v, mask=None, bias=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    if bias is not None and (bias.dtype == torch.bool or bias.dim() > q.dim() or any(b not in (1, n) for b, n in zip(bias.shape[::-1], (k.shape[-2], *q.shape[:-1][::-1])))):
        raise ValueError("bias")
    scores = q @ k.transpose(-2, -1)
    allowed = mask
    if bias is not None:
        finite = bias != float("-inf")
        scores = scores + bias.masked_fill(~finite, 0.0)
        allowed = finite if mask is None else mask & finite
    scores = scores / math.sqrt(q.shape[-1])
    if allowed is not None:
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    w = torch.softmax(scores, -1)
    if allowed is not None:
        w = w.masked_fill(~allowed, 0.0)
    return w @ v, w
"""),
        ("bias added, -inf in the bias not treated as blocked (NaN on a row of -inf)", """
def scaled_dot_product_attention(q, k, v, mask=None, bias=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    if bias is not None and (not bias.is_floating_point() or bias.dim() > q.dim() or any(b not in (1, n) for b, n in zip(bias.shape[::-1], (k.shape[-2], *q.shape[:-1][::-1])))):
        raise ValueError("bias")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    w = torch.softmax(scores, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
"""),
        ("bias ignored when a mask is given", """
def scaled_dot_product_attention(q, k, v, mask=None, bias=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    if bias is not None and not bias.is_floating_point():
        raise ValueError("bias")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = mask
    if mask is None and bias is not None:
        allowed = bias != float("-inf")
        scores = scores + bias.masked_fill(~allowed, 0.0)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    w = torch.softmax(scores, -1)
    if allowed is not None:
        w = w.masked_fill(~allowed, 0.0)
    return w @ v, w
"""),
        ("no validation of the bias", """
def scaled_dot_product_attention(q, k, v, mask=None, bias=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = mask
    if bias is not None:
        finite = bias != float("-inf")
        scores = scores + bias.masked_fill(~finite, 0.0)
        allowed = finite if mask is None else mask & finite
    if allowed is not None:
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    w = torch.softmax(scores, -1)
    if allowed is not None:
        w = w.masked_fill(~allowed, 0.0)
    return w @ v, w
"""),
        ("-inf fill: NaN on a fully masked row", """
def scaled_dot_product_attention(q, k, v, mask=None, bias=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, -1)
    return w @ v, w
"""),
        ("mask convention inverted (True = blocked)", """
def scaled_dot_product_attention(q, k, v, mask=None, bias=None):
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
def scaled_dot_product_attention(q, k, v, mask=None, bias=None):
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
def scaled_dot_product_attention(q, k, v, mask=None, bias=None):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError("d_k")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    w = torch.softmax(scores, -1)
    return w @ v, w
"""),
        ("-1e9 fill, blocked weights zeroed afterwards (overflows float16)", """
def scaled_dot_product_attention(q, k, v, mask=None, bias=None):
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
    "4.3": [
        ("scaled by 1/sqrt(d_att) like dot-product attention", """
def additive_attention(q, k, v, w_q, w_k, w_score, mask=None):
    if w_q.shape[0] != q.shape[-1] or w_k.shape[0] != k.shape[-1] or not (w_q.shape[1] == w_k.shape[1] == w_score.shape[-1]):
        raise ValueError("w")
    s = torch.tanh((q @ w_q)[:, :, None] + (k @ w_k)[:, None]) @ w_score / math.sqrt(w_score.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
"""),
        ("no tanh (the query term then cancels in the softmax)", """
def additive_attention(q, k, v, w_q, w_k, w_score, mask=None):
    if w_q.shape[0] != q.shape[-1] or w_k.shape[0] != k.shape[-1] or not (w_q.shape[1] == w_k.shape[1] == w_score.shape[-1]):
        raise ValueError("w")
    s = ((q @ w_q)[:, :, None] + (k @ w_k)[:, None]) @ w_score
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
"""),
        ("tanh of each projection separately, then added", """
def additive_attention(q, k, v, w_q, w_k, w_score, mask=None):
    if w_q.shape[0] != q.shape[-1] or w_k.shape[0] != k.shape[-1] or not (w_q.shape[1] == w_k.shape[1] == w_score.shape[-1]):
        raise ValueError("w")
    s = (torch.tanh(q @ w_q)[:, :, None] + torch.tanh(k @ w_k)[:, None]) @ w_score
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
"""),
        ("w_score ignored (sum over d_att)", """
def additive_attention(q, k, v, w_q, w_k, w_score, mask=None):
    if w_q.shape[0] != q.shape[-1] or w_k.shape[0] != k.shape[-1] or not (w_q.shape[1] == w_k.shape[1] == w_score.shape[-1]):
        raise ValueError("w")
    s = torch.tanh((q @ w_q)[:, :, None] + (k @ w_k)[:, None]).sum(-1)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
"""),
        ("-inf fill: NaN on a fully masked row", """
def additive_attention(q, k, v, w_q, w_k, w_score, mask=None):
    if w_q.shape[0] != q.shape[-1] or w_k.shape[0] != k.shape[-1] or not (w_q.shape[1] == w_k.shape[1] == w_score.shape[-1]):
        raise ValueError("w")
    s = torch.tanh((q @ w_q)[:, :, None] + (k @ w_k)[:, None]) @ w_score
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, -1)
    return w @ v, w
"""),
        ("no validation of the widths", """
def additive_attention(q, k, v, w_q, w_k, w_score, mask=None):
    s = torch.tanh((q @ w_q)[:, :, None] + (k @ w_k)[:, None]) @ w_score
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
"""),
    ],
    "4.4": [
        ("sqrt(d_k) whatever the standard deviations", """
def dot_product_score_std(q_std, k_std):
    if q_std.shape != k_std.shape or (q_std < 0).any() or (k_std < 0).any():
        raise ValueError("std")
    std = torch.full(q_std.shape[:-1], math.sqrt(q_std.shape[-1]))
    return std, 1 / std
"""),
        ("standard deviations multiplied and summed (no squares)", """
def dot_product_score_std(q_std, k_std):
    if q_std.shape != k_std.shape or (q_std < 0).any() or (k_std < 0).any():
        raise ValueError("std")
    std = torch.sqrt((q_std * k_std).sum(-1))
    return std, 1 / std
"""),
        ("product of the norms (the Cauchy-Schwarz bound)", """
def dot_product_score_std(q_std, k_std):
    if q_std.shape != k_std.shape or (q_std < 0).any() or (k_std < 0).any():
        raise ValueError("std")
    std = q_std.norm(dim=-1) * k_std.norm(dim=-1)
    return std, 1 / std
"""),
        ("the variance returned as the std, scale 1/variance", """
def dot_product_score_std(q_std, k_std):
    if q_std.shape != k_std.shape or (q_std < 0).any() or (k_std < 0).any():
        raise ValueError("std")
    var = (q_std**2 * k_std**2).sum(-1)
    return var, 1 / var
"""),
        ("summed over every dim, not only the last", """
def dot_product_score_std(q_std, k_std):
    if q_std.shape != k_std.shape or (q_std < 0).any() or (k_std < 0).any():
        raise ValueError("std")
    std = torch.sqrt((q_std**2 * k_std**2).sum())
    return std, 1 / std
"""),
        ("no validation", """
def dot_product_score_std(q_std, k_std):
    std = torch.sqrt((q_std**2 * k_std**2).sum(-1))
    return std, 1 / std
"""),
    ],
    "5.1": [
        ("reshape straight to (..., heads, len, d_k)", """
def split_heads(x, n_heads):
    if x.dim() < 2 or x.shape[-1] % n_heads:
        raise ValueError("shape")
    *lead, n, d = x.shape
    return x.reshape(*lead, n_heads, n, d // n_heads)
"""),
        ("the chapter's listing: 3-D inputs only", """
def split_heads(x, n_heads):
    if x.dim() != 3 or x.shape[-1] % n_heads:
        raise ValueError("shape")
    batch, seq_len, d_model = x.shape
    return x.view(batch, seq_len, n_heads, d_model // n_heads).transpose(1, 2)
"""),
        ("transpose(1, 2) hard-coded for any rank", """
def split_heads(x, n_heads):
    if x.dim() < 2 or x.shape[-1] % n_heads:
        raise ValueError("shape")
    return x.reshape(*x.shape[:-1], n_heads, x.shape[-1] // n_heads).transpose(1, 2)
"""),
    ],
    "5.2": [
        ("reshape without transposing back", """
def merge_heads(x):
    if x.dim() < 3:
        raise ValueError("shape")
    *lead, h, n, d = x.shape
    return x.reshape(*lead, n, h * d)
"""),
        ("the chapter's listing: 4-D inputs only", """
def merge_heads(x):
    if x.dim() != 4:
        raise ValueError("shape")
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)
"""),
    ],
    "5.3": [
        ("fused weight read in the library's layout [W_Q | W_K | W_V]", """
def multi_head_attention(query, key, value, w_qkv, w_o, n_heads, mask=None):
    b, lq, d = query.shape
    lk = key.shape[1]
    w_q, w_k, w_v = w_qkv[:, :d], w_qkv[:, d:2 * d], w_qkv[:, 2 * d:]
    q = (query @ w_q).view(b, lq, n_heads, d // n_heads).transpose(1, 2)
    k = (key @ w_k).view(b, lk, n_heads, d // n_heads).transpose(1, 2)
    v = (value @ w_v).view(b, lk, n_heads, d // n_heads).transpose(1, 2)
    s = q @ k.transpose(-2, -1) / math.sqrt(d // n_heads)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    return (w @ v).transpose(1, 2).reshape(b, lq, d) @ w_o, w
"""),
        ("fused weight viewed as (d_model, 3, n_heads, d_k)", """
def multi_head_attention(query, key, value, w_qkv, w_o, n_heads, mask=None):
    b, lq, d = query.shape
    lk = key.shape[1]
    w = w_qkv.reshape(d, 3, n_heads, d // n_heads)
    w_q, w_k, w_v = (w[:, j].reshape(d, d) for j in range(3))
    q = (query @ w_q).view(b, lq, n_heads, d // n_heads).transpose(1, 2)
    k = (key @ w_k).view(b, lk, n_heads, d // n_heads).transpose(1, 2)
    v = (value @ w_v).view(b, lk, n_heads, d // n_heads).transpose(1, 2)
    s = q @ k.transpose(-2, -1) / math.sqrt(d // n_heads)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    return (w @ v).transpose(1, 2).reshape(b, lq, d) @ w_o, w
"""),
        ("scaled by sqrt(d_model) instead of sqrt(d_k)", """
def multi_head_attention(query, key, value, w_qkv, w_o, n_heads, mask=None):
    b, lq, d = query.shape
    lk = key.shape[1]
    w = w_qkv.reshape(d, n_heads, 3, d // n_heads)
    w_q, w_k, w_v = (w[:, :, j].reshape(d, d) for j in range(3))
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
def multi_head_attention(query, key, value, w_qkv, w_o, n_heads, mask=None):
    b, lq, d = query.shape
    lk = key.shape[1]
    w = w_qkv.reshape(d, n_heads, 3, d // n_heads)
    w_q, w_k, w_v = (w[:, :, j].reshape(d, d) for j in range(3))
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
def multi_head_attention(query, key, value, w_qkv, w_o, n_heads, mask=None):
    b, lq, d = query.shape
    lk = key.shape[1]
    w = w_qkv.reshape(d, n_heads, 3, d // n_heads)
    w_q, w_k, w_v = (w[:, :, j].reshape(d, d) for j in range(3))
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
    "5.4": [
        ("the head's query zeroed instead of its output (it then attends uniformly)", """
def head_ablation_effect(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    b, n, d = x.shape
    if d % n_heads:
        raise ValueError("d_model")
    dk = d // n_heads
    def run(wq):
        sp = lambda t: t.reshape(b, n, n_heads, dk).transpose(1, 2)
        q, k, v = sp(x @ wq), sp(x @ w_k), sp(x @ w_v)
        s = q @ k.transpose(-2, -1) / math.sqrt(dk)
        if mask is not None:
            s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
        w = torch.softmax(s, -1)
        if mask is not None:
            w = w.masked_fill(~mask, 0.0)
        return (w @ v).transpose(1, 2).reshape(b, n, d) @ w_o
    full = run(w_q)
    out = []
    for h in range(n_heads):
        wq = w_q.clone()
        wq[:, h * dk:(h + 1) * dk] = 0
        out.append(torch.linalg.vector_norm(full - run(wq), dim=-1).mean())
    return torch.stack(out)
"""),
        ("output columns of head h zeroed after w_o", """
def head_ablation_effect(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    b, n, d = x.shape
    if d % n_heads:
        raise ValueError("d_model")
    dk = d // n_heads
    sp = lambda t: t.reshape(b, n, n_heads, dk).transpose(1, 2)
    q, k, v = sp(x @ w_q), sp(x @ w_k), sp(x @ w_v)
    s = q @ k.transpose(-2, -1) / math.sqrt(dk)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    full = (w @ v).transpose(1, 2).reshape(b, n, d) @ w_o
    return torch.stack([torch.linalg.vector_norm(full[..., h * dk:(h + 1) * dk], dim=-1).mean() for h in range(n_heads)])
"""),
        ("one Frobenius norm over everything instead of the mean of per-position norms", """
def head_ablation_effect(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    b, n, d = x.shape
    if d % n_heads:
        raise ValueError("d_model")
    dk = d // n_heads
    sp = lambda t: t.reshape(b, n, n_heads, dk).transpose(1, 2)
    q, k, v = sp(x @ w_q), sp(x @ w_k), sp(x @ w_v)
    s = q @ k.transpose(-2, -1) / math.sqrt(dk)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    heads = w @ v
    return torch.stack([torch.linalg.vector_norm(heads[:, h] @ w_o[h * dk:(h + 1) * dk]) for h in range(n_heads)])
"""),
        ("the head's own output norm, before w_o", """
def head_ablation_effect(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    b, n, d = x.shape
    if d % n_heads:
        raise ValueError("d_model")
    dk = d // n_heads
    sp = lambda t: t.reshape(b, n, n_heads, dk).transpose(1, 2)
    q, k, v = sp(x @ w_q), sp(x @ w_k), sp(x @ w_v)
    s = q @ k.transpose(-2, -1) / math.sqrt(dk)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return torch.linalg.vector_norm(w @ v, dim=-1).mean(dim=(0, 2))
"""),
    ],
    "6.1": [
        ("the chapter's ffn_by_hand copied: paper layout, no active fraction", "def position_wise_ffn(x, w1, b1, w2, b2):\n    return torch.relu(x @ w1 + b1) @ w2 + b2"),
        ("no ReLU", """
def position_wise_ffn(x, w1, b1, w2, b2):
    if w1.shape[1] != x.shape[-1] or tuple(w2.shape) != (x.shape[-1], w1.shape[0]):
        raise ValueError("w1")
    pre = x @ w1.T + b1
    return pre @ w2.T + b2, (pre > 0).float().mean(-1)
"""),
        ("ReLU before the bias", """
def position_wise_ffn(x, w1, b1, w2, b2):
    if w1.shape[1] != x.shape[-1] or tuple(w2.shape) != (x.shape[-1], w1.shape[0]):
        raise ValueError("w1")
    h = torch.relu(x @ w1.T) + b1
    return h @ w2.T + b2, (h > 0).float().mean(-1)
"""),
        ("active counted before the bias", """
def position_wise_ffn(x, w1, b1, w2, b2):
    if w1.shape[1] != x.shape[-1] or tuple(w2.shape) != (x.shape[-1], w1.shape[0]):
        raise ValueError("w1")
    h = torch.relu(x @ w1.T + b1)
    return h @ w2.T + b2, (x @ w1.T > 0).float().mean(-1)
"""),
        ("active as a count, not a fraction", """
def position_wise_ffn(x, w1, b1, w2, b2):
    if w1.shape[1] != x.shape[-1] or tuple(w2.shape) != (x.shape[-1], w1.shape[0]):
        raise ValueError("w1")
    h = torch.relu(x @ w1.T + b1)
    return h @ w2.T + b2, (h > 0).sum(-1)
"""),
        ("no shape checks", """
def position_wise_ffn(x, w1, b1, w2, b2):
    h = torch.relu(x @ w1.T + b1)
    return h @ w2.T + b2, (h > 0).float().mean(-1)
"""),
    ],
    "6.2": [
        ("the textbook form 1 + erf (0 in the tail)", "def gelu(x):\n    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))"),
        ("F.gelu (0 in the tail)", "def gelu(x):\n    return F.gelu(x)"),
        ("tanh approximation", "def gelu(x):\n    return F.gelu(x, approximate='tanh')"),
        ("sigmoid approximation x * sigmoid(1.702 x)", "def gelu(x):\n    return x * torch.sigmoid(1.702 * x)"),
        ("erfc with the wrong sign", "def gelu(x):\n    return 0.5 * x * torch.special.erfc(x / math.sqrt(2))"),
    ],
    "6.3": [
        ("Swish on the up branch instead of the gate", """
def swiglu_ffn(x, w_gate, w_up, w_down):
    if w_gate.shape != w_up.shape or w_gate.shape[0] != x.shape[-1] or tuple(w_down.shape) != (w_gate.shape[1], x.shape[-1]):
        raise ValueError("w")
    return ((x @ w_gate) * F.silu(x @ w_up)) @ w_down
"""),
        ("sigmoid gate (GLU) instead of Swish", """
def swiglu_ffn(x, w_gate, w_up, w_down):
    if w_gate.shape != w_up.shape or w_gate.shape[0] != x.shape[-1] or tuple(w_down.shape) != (w_gate.shape[1], x.shape[-1]):
        raise ValueError("w")
    return (torch.sigmoid(x @ w_gate) * (x @ w_up)) @ w_down
"""),
        ("ReLU gate (ReGLU)", """
def swiglu_ffn(x, w_gate, w_up, w_down):
    if w_gate.shape != w_up.shape or w_gate.shape[0] != x.shape[-1] or tuple(w_down.shape) != (w_gate.shape[1], x.shape[-1]):
        raise ValueError("w")
    return (torch.relu(x @ w_gate) * (x @ w_up)) @ w_down
"""),
        ("Swish of the sum instead of the product", """
def swiglu_ffn(x, w_gate, w_up, w_down):
    if w_gate.shape != w_up.shape or w_gate.shape[0] != x.shape[-1] or tuple(w_down.shape) != (w_gate.shape[1], x.shape[-1]):
        raise ValueError("w")
    return F.silu(x @ w_gate + x @ w_up) @ w_down
"""),
        ("no shape checks", "def swiglu_ffn(x, w_gate, w_up, w_down):\n    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down"),
    ],
    "6.4": [
        ("rounded to the nearest integer, no multiple", """
def swiglu_hidden_width(d_model, d_ff, multiple_of=1):
    if min(d_model, d_ff, multiple_of) < 1:
        raise ValueError("size")
    h = round(2 * d_ff / 3)
    return h, 3 * d_model * h, 2 * d_model * d_ff
"""),
        ("rounded DOWN to the multiple", """
def swiglu_hidden_width(d_model, d_ff, multiple_of=1):
    if min(d_model, d_ff, multiple_of) < 1:
        raise ValueError("size")
    h = (2 * d_ff) // 3 // multiple_of * multiple_of
    return h, 3 * d_model * h, 2 * d_model * d_ff
"""),
        ("ceil of 2 d_ff / 3 before rounding to the multiple", """
def swiglu_hidden_width(d_model, d_ff, multiple_of=1):
    if min(d_model, d_ff, multiple_of) < 1:
        raise ValueError("size")
    h = math.ceil(2 * d_ff / 3)
    h = -(-h // multiple_of) * multiple_of
    return h, 3 * d_model * h, 2 * d_model * d_ff
"""),
        ("parameters counted with biases", """
def swiglu_hidden_width(d_model, d_ff, multiple_of=1):
    if min(d_model, d_ff, multiple_of) < 1:
        raise ValueError("size")
    h = -(-((2 * d_ff) // 3) // multiple_of) * multiple_of
    return h, 3 * d_model * h + 2 * h + d_model, 2 * d_model * d_ff + d_ff + d_model
"""),
        ("SwiGLU counted with two matrices", """
def swiglu_hidden_width(d_model, d_ff, multiple_of=1):
    if min(d_model, d_ff, multiple_of) < 1:
        raise ValueError("size")
    h = -(-((2 * d_ff) // 3) // multiple_of) * multiple_of
    return h, 2 * d_model * h, 2 * d_model * d_ff
"""),
        ("no validation", """
def swiglu_hidden_width(d_model, d_ff, multiple_of=1):
    h = -(-((2 * d_ff) // 3) // max(multiple_of, 1)) * max(multiple_of, 1)
    return h, 3 * d_model * h, 2 * d_model * d_ff
"""),
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
