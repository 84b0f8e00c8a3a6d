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
    "1.1": [
        ("counts multiply-adds, not FLOPs (no factor 2)", """
def layer_flops(kind, n, d, batch=1, kernel_size=3):
    if kind not in ("attention", "multi_head_attention", "rnn", "gru", "lstm", "conv") or min(n, d, batch, kernel_size) < 1:
        raise ValueError("bad")
    g = {"rnn": 1, "gru": 3, "lstm": 4}
    if kind == "attention":
        return 2 * batch * n * n * d
    if kind == "multi_head_attention":
        return 4 * batch * n * d * d + 2 * batch * n * n * d
    if kind == "conv":
        return batch * n * kernel_size * d * d
    return g[kind] * 2 * batch * n * d * d
"""),
        ("gates forgotten: gru and lstm counted as an rnn", """
def layer_flops(kind, n, d, batch=1, kernel_size=3):
    if kind not in ("attention", "multi_head_attention", "rnn", "gru", "lstm", "conv") or min(n, d, batch, kernel_size) < 1:
        raise ValueError("bad")
    if kind == "attention":
        return 4 * batch * n * n * d
    if kind == "multi_head_attention":
        return 8 * batch * n * d * d + 4 * batch * n * n * d
    if kind == "conv":
        return 2 * batch * n * kernel_size * d * d
    return 4 * batch * n * d * d
"""),
        ("recurrent step counted with one d x d product (W_ih x_t forgotten)", """
def layer_flops(kind, n, d, batch=1, kernel_size=3):
    if kind not in ("attention", "multi_head_attention", "rnn", "gru", "lstm", "conv") or min(n, d, batch, kernel_size) < 1:
        raise ValueError("bad")
    g = {"rnn": 1, "gru": 3, "lstm": 4}
    if kind == "attention":
        return 4 * batch * n * n * d
    if kind == "multi_head_attention":
        return 8 * batch * n * d * d + 4 * batch * n * n * d
    if kind == "conv":
        return 2 * batch * n * kernel_size * d * d
    return g[kind] * 2 * batch * n * d * d
"""),
        ("multi-head attention without the projections", """
def layer_flops(kind, n, d, batch=1, kernel_size=3):
    if kind not in ("attention", "multi_head_attention", "rnn", "gru", "lstm", "conv") or min(n, d, batch, kernel_size) < 1:
        raise ValueError("bad")
    g = {"rnn": 1, "gru": 3, "lstm": 4}
    if kind in ("attention", "multi_head_attention"):
        return 4 * batch * n * n * d
    if kind == "conv":
        return 2 * batch * n * kernel_size * d * d
    return g[kind] * 4 * batch * n * d * d
"""),
        ("batch ignored", """
def layer_flops(kind, n, d, batch=1, kernel_size=3):
    if kind not in ("attention", "multi_head_attention", "rnn", "gru", "lstm", "conv") or min(n, d, batch, kernel_size) < 1:
        raise ValueError("bad")
    g = {"rnn": 1, "gru": 3, "lstm": 4}
    if kind == "attention":
        return 4 * n * n * d
    if kind == "multi_head_attention":
        return 8 * n * d * d + 4 * n * n * d
    if kind == "conv":
        return 2 * n * kernel_size * d * d
    return g[kind] * 4 * n * d * d
"""),
        ("float result (math.pow)", """
def layer_flops(kind, n, d, batch=1, kernel_size=3):
    if kind not in ("attention", "multi_head_attention", "rnn", "gru", "lstm", "conv") or min(n, d, batch, kernel_size) < 1:
        raise ValueError("bad")
    g = {"rnn": 1, "gru": 3, "lstm": 4}
    if kind == "attention":
        return 4 * batch * math.pow(n, 2) * d
    if kind == "multi_head_attention":
        return 8 * batch * n * math.pow(d, 2) + 4 * batch * math.pow(n, 2) * d
    if kind == "conv":
        return 2.0 * batch * n * kernel_size * d * d
    return g[kind] * 4 * batch * n * math.pow(d, 2)
"""),
    ],
    "1.2": [
        ("equality counted as 'more' (returns d for the rnn)", """
def crossover_length(d, recurrent="rnn", projections=False):
    g = {"rnn": 1, "gru": 3, "lstm": 4}
    if d < 1 or recurrent not in g:
        raise ValueError("bad")
    return max((g[recurrent] - (2 if projections else 0)) * d, 1)
"""),
        ("always n = d + 1 (the chapter's core-vs-rnn answer)", """
def crossover_length(d, recurrent="rnn", projections=False):
    if d < 1 or recurrent not in ("rnn", "gru", "lstm"):
        raise ValueError("bad")
    return d + 1
"""),
        ("projections ignored", """
def crossover_length(d, recurrent="rnn", projections=False):
    g = {"rnn": 1, "gru": 3, "lstm": 4}
    if d < 1 or recurrent not in g:
        raise ValueError("bad")
    return g[recurrent] * d + 1
"""),
        ("negative threshold not clamped to n >= 1", """
def crossover_length(d, recurrent="rnn", projections=False):
    g = {"rnn": 1, "gru": 3, "lstm": 4}
    if d < 1 or recurrent not in g:
        raise ValueError("bad")
    return (g[recurrent] - (2 if projections else 0)) * d + 1
"""),
        ("projections counted as 4 n d^2 (one product per projection, no factor 2)", """
def crossover_length(d, recurrent="rnn", projections=False):
    g = {"rnn": 1, "gru": 3, "lstm": 4}
    if d < 1 or recurrent not in g:
        raise ValueError("bad")
    return max((g[recurrent] - (1 if projections else 0)) * d + 1, 1)
"""),
    ],
    "1.3": [
        ("recurrent path n instead of n - 1", """
def table1_counts(kind, n, k=None, r=None):
    if n < 2:
        raise ValueError("n")
    if kind == "self_attention":
        return 1, 1
    if kind == "recurrent":
        return n, n
    if kind == "convolutional":
        if k is None or k < 2: raise ValueError("k")
        return 1, -(-(n - 1) // (k - 1))
    if kind == "dilated_convolutional":
        if k is None or k < 2: raise ValueError("k")
        L, reach = 0, 1
        while reach < n:
            L, reach = L + 1, reach * k
        return 1, L
    if kind == "restricted_self_attention":
        if r is None or r < 3 or r % 2 == 0: raise ValueError("r")
        return 1, -(-(n - 1) // ((r - 1) // 2))
    raise ValueError("kind")
"""),
        ("orders of growth taken literally: n / k and n / r, rounded down", """
def table1_counts(kind, n, k=None, r=None):
    if n < 2:
        raise ValueError("n")
    if kind == "self_attention":
        return 1, 1
    if kind == "recurrent":
        return n, n - 1
    if kind == "convolutional":
        if k is None or k < 2: raise ValueError("k")
        return 1, max(n // k, 1)
    if kind == "dilated_convolutional":
        if k is None or k < 2: raise ValueError("k")
        return 1, max(int(math.log(n, k)), 1)
    if kind == "restricted_self_attention":
        if r is None or r < 3 or r % 2 == 0: raise ValueError("r")
        return 1, max(n // r, 1)
    raise ValueError("kind")
"""),
        ("dilated reach with math.log and ceil (rounding)", """
def table1_counts(kind, n, k=None, r=None):
    if n < 2:
        raise ValueError("n")
    if kind == "self_attention":
        return 1, 1
    if kind == "recurrent":
        return n, n - 1
    if kind == "convolutional":
        if k is None or k < 2: raise ValueError("k")
        return 1, -(-(n - 1) // (k - 1))
    if kind == "dilated_convolutional":
        if k is None or k < 2: raise ValueError("k")
        return 1, math.ceil(math.log(n) / math.log(k))
    if kind == "restricted_self_attention":
        if r is None or r < 3 or r % 2 == 0: raise ValueError("r")
        return 1, -(-(n - 1) // ((r - 1) // 2))
    raise ValueError("kind")
"""),
        ("restricted window: r positions further per layer (not (r - 1) / 2)", """
def table1_counts(kind, n, k=None, r=None):
    if n < 2:
        raise ValueError("n")
    if kind == "self_attention":
        return 1, 1
    if kind == "recurrent":
        return n, n - 1
    if kind == "convolutional":
        if k is None or k < 2: raise ValueError("k")
        return 1, -(-(n - 1) // (k - 1))
    if kind == "dilated_convolutional":
        if k is None or k < 2: raise ValueError("k")
        L, reach = 0, 1
        while reach < n:
            L, reach = L + 1, reach * k
        return 1, L
    if kind == "restricted_self_attention":
        if r is None or r < 3 or r % 2 == 0: raise ValueError("r")
        return 1, -(-(n - 1) // r)
    raise ValueError("kind")
"""),
        ("convolution: k positions further per layer (not k - 1)", """
def table1_counts(kind, n, k=None, r=None):
    if n < 2:
        raise ValueError("n")
    if kind == "self_attention":
        return 1, 1
    if kind == "recurrent":
        return n, n - 1
    if kind == "convolutional":
        if k is None or k < 2: raise ValueError("k")
        return 1, -(-(n - 1) // k)
    if kind == "dilated_convolutional":
        if k is None or k < 2: raise ValueError("k")
        L, reach = 0, 1
        while reach < n:
            L, reach = L + 1, reach * k
        return 1, L
    if kind == "restricted_self_attention":
        if r is None or r < 3 or r % 2 == 0: raise ValueError("r")
        return 1, -(-(n - 1) // ((r - 1) // 2))
    raise ValueError("kind")
"""),
        ("sequential operations of the recurrence given as 1", """
def table1_counts(kind, n, k=None, r=None):
    if n < 2:
        raise ValueError("n")
    if kind == "self_attention":
        return 1, 1
    if kind == "recurrent":
        return 1, n - 1
    if kind == "convolutional":
        if k is None or k < 2: raise ValueError("k")
        return 1, -(-(n - 1) // (k - 1))
    if kind == "dilated_convolutional":
        if k is None or k < 2: raise ValueError("k")
        L, reach = 0, 1
        while reach < n:
            L, reach = L + 1, reach * k
        return 1, L
    if kind == "restricted_self_attention":
        if r is None or r < 3 or r % 2 == 0: raise ValueError("r")
        return 1, -(-(n - 1) // ((r - 1) // 2))
    raise ValueError("kind")
"""),
    ],
    "2.1": [
        ("bool ids accepted (issue 22: a bool tensor is not a tensor of ids)", """
def scaled_embedding(tokens, weight, padding_idx=None):
    if tokens.dtype.is_floating_point:
        raise ValueError("tokens must be an integer tensor")
    if tokens.dtype != torch.bool and (int(tokens.min()) < 0 or int(tokens.max()) >= weight.shape[0]):
        raise ValueError("tokens out of range")
    if padding_idx is not None and not 0 <= padding_idx < weight.shape[0]:
        raise ValueError("padding_idx out of range")
    out = weight[tokens.long()] * math.sqrt(weight.shape[1])
    return out if padding_idx is None else out * (tokens != padding_idx)[..., None]
"""),
        ("error messages that do not name tokens (issue 22)", """
def scaled_embedding(tokens, weight, padding_idx=None):
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError("bad dtype")
    if int(tokens.min()) < 0 or int(tokens.max()) >= weight.shape[0]:
        raise ValueError("id out of range")
    if padding_idx is not None and not 0 <= padding_idx < weight.shape[0]:
        raise ValueError("padding_idx out of range")
    out = weight[tokens] * math.sqrt(weight.shape[1])
    return out if padding_idx is None else out * (tokens != padding_idx)[..., None]
"""),
        ("no sqrt(d_model) scale", "def scaled_embedding(tokens, weight, padding_idx=None):\n    return weight[tokens]"),
        ("scaled by d_model", "def scaled_embedding(tokens, weight, padding_idx=None):\n    return weight[tokens] * weight.shape[1]"),
        ("no validation", "def scaled_embedding(tokens, weight, padding_idx=None):\n    return weight[tokens.long()] * math.sqrt(weight.shape[1])"),
        ("padding_idx ignored (F.embedding's padding_idx only stops the gradient)", """
def scaled_embedding(tokens, weight, padding_idx=None):
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError("tokens")
    if int(tokens.min()) < 0 or int(tokens.max()) >= weight.shape[0]:
        raise ValueError("tokens")
    if padding_idx is not None and not 0 <= padding_idx < weight.shape[0]:
        raise ValueError("padding_idx")
    return F.embedding(tokens, weight, padding_idx=padding_idx) * math.sqrt(weight.shape[1])
"""),
        ("padding zeroed before the lookup of every row (id 0 always zeroed)", """
def scaled_embedding(tokens, weight, padding_idx=None):
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError("tokens")
    if int(tokens.min()) < 0 or int(tokens.max()) >= weight.shape[0]:
        raise ValueError("tokens")
    out = weight[tokens] * math.sqrt(weight.shape[1])
    return out * (tokens != 0)[..., None]
"""),
    ],
    "2.2": [
        ("scaled like the embedding", "def tied_output_logits(hidden, weight):\n    return hidden @ weight.T * math.sqrt(weight.shape[1])"),
        ("no shape check", "def tied_output_logits(hidden, weight):\n    return hidden[..., : weight.shape[1]] @ weight[:, : hidden.shape[-1]].T"),
    ],
    "2.3": [
        ("positional norm taken as sqrt(d_model) (the 1/2 forgotten)", """
def scale_ratios(d_model, init_std):
    if d_model < 2 or d_model % 2 or init_std <= 0:
        raise ValueError("bad")
    pe_sq = d_model
    rows = []
    for f in (1.0, math.sqrt(d_model)):
        e = d_model * (init_std * f) ** 2
        rows.append([math.sqrt(e / pe_sq), pe_sq / (pe_sq + e)])
    return torch.tensor(rows)
"""),
        ("init_std squared twice (variance used as std)", """
def scale_ratios(d_model, init_std):
    if d_model < 2 or d_model % 2 or init_std <= 0:
        raise ValueError("bad")
    pe_sq = d_model / 2
    rows = []
    for f in (1.0, math.sqrt(d_model)):
        e = d_model * (init_std ** 2 * f) ** 2
        rows.append([math.sqrt(e / pe_sq), pe_sq / (pe_sq + e)])
    return torch.tensor(rows)
"""),
        ("ratio upside down (positional / embedding)", """
def scale_ratios(d_model, init_std):
    if d_model < 2 or d_model % 2 or init_std <= 0:
        raise ValueError("bad")
    pe_sq = d_model / 2
    rows = []
    for f in (1.0, math.sqrt(d_model)):
        e = d_model * (init_std * f) ** 2
        rows.append([math.sqrt(pe_sq / e), pe_sq / (pe_sq + e)])
    return torch.tensor(rows)
"""),
        ("scale d_model instead of sqrt(d_model)", """
def scale_ratios(d_model, init_std):
    if d_model < 2 or d_model % 2 or init_std <= 0:
        raise ValueError("bad")
    pe_sq = d_model / 2
    rows = []
    for f in (1.0, d_model):
        e = d_model * (init_std * f) ** 2
        rows.append([math.sqrt(e / pe_sq), pe_sq / (pe_sq + e)])
    return torch.tensor(rows)
"""),
        ("cosine from norms, not squared norms", """
def scale_ratios(d_model, init_std):
    if d_model < 2 or d_model % 2 or init_std <= 0:
        raise ValueError("bad")
    pe_sq = d_model / 2
    rows = []
    for f in (1.0, math.sqrt(d_model)):
        e = d_model * (init_std * f) ** 2
        rows.append([math.sqrt(e / pe_sq), math.sqrt(pe_sq) / (math.sqrt(pe_sq) + math.sqrt(e))])
    return torch.tensor(rows)
"""),
    ],
    "3.1": [
        ("sine and cosine swapped", """
def encode_positions(positions, d_model, base=10000.0):
    if positions.dtype.is_floating_point or int(positions.min()) < 0 or d_model < 1 or base <= 1:
        raise ValueError("bad")
    angle = positions.double()[..., None] / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(*positions.shape, d_model, dtype=torch.float64)
    pe[..., 0::2] = torch.cos(angle)
    pe[..., 1::2] = torch.sin(angle[..., : d_model // 2])
    return pe
"""),
        ("exponent uses the column index, not 2i", """
def encode_positions(positions, d_model, base=10000.0):
    if positions.dtype.is_floating_point or int(positions.min()) < 0 or d_model < 1 or base <= 1:
        raise ValueError("bad")
    col = torch.arange(d_model, dtype=torch.float64)
    angle = positions.double()[..., None] / base ** (col / d_model)
    return torch.where(col.long() % 2 == 0, torch.sin(angle), torch.cos(angle))
"""),
        ("odd d_model: last column made a cosine", """
def encode_positions(positions, d_model, base=10000.0):
    if positions.dtype.is_floating_point or int(positions.min()) < 0 or d_model < 1 or base <= 1:
        raise ValueError("bad")
    d = d_model + (d_model % 2)
    angle = positions.double()[..., None] / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(*positions.shape, d, dtype=torch.float64)
    pe[..., 0::2] = torch.sin(angle)
    pe[..., 1::2] = torch.cos(angle)
    return pe[..., :d_model]
"""),
        ("positions ignored: the table of 0 .. n-1 along the last axis", """
def encode_positions(positions, d_model, base=10000.0):
    if positions.dtype.is_floating_point or int(positions.min()) < 0 or d_model < 1 or base <= 1:
        raise ValueError("bad")
    pos = torch.arange(positions.shape[-1], dtype=torch.float64).expand(positions.shape)
    angle = pos[..., None] / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(*positions.shape, d_model, dtype=torch.float64)
    pe[..., 0::2] = torch.sin(angle)
    pe[..., 1::2] = torch.cos(angle[..., : d_model // 2])
    return pe
"""),
        ("base ignored (always 10000)", """
def encode_positions(positions, d_model, base=10000.0):
    if positions.dtype.is_floating_point or int(positions.min()) < 0 or d_model < 1 or base <= 1:
        raise ValueError("bad")
    angle = positions.double()[..., None] / 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(*positions.shape, d_model, dtype=torch.float64)
    pe[..., 0::2] = torch.sin(angle)
    pe[..., 1::2] = torch.cos(angle[..., : d_model // 2])
    return pe
"""),
        ("float32 angles (large positions lose accuracy)", """
def encode_positions(positions, d_model, base=10000.0):
    if positions.dtype.is_floating_point or int(positions.min()) < 0 or d_model < 1 or base <= 1:
        raise ValueError("bad")
    angle = positions.float()[..., None] * (1.0 / base ** (torch.arange(0, d_model, 2).float() / d_model))
    pe = torch.zeros(*positions.shape, d_model)
    pe[..., 0::2] = torch.sin(angle)
    pe[..., 1::2] = torch.cos(angle[..., : d_model // 2])
    return pe
"""),
    ],
    "3.2": [
        ("rotation in the wrong direction", """
def shift_encodings(pe, k):
    d = pe.shape[-1]
    if d % 2:
        raise ValueError("pe")
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    a = torch.as_tensor(k, dtype=torch.float64)[..., None] * w
    s, c = pe[..., 0::2].double(), pe[..., 1::2].double()
    return torch.stack([s * torch.cos(a) - c * torch.sin(a), c * torch.cos(a) + s * torch.sin(a)], -1).flatten(-2)
"""),
        ("k added to the angle of pair 0 only (one frequency for all pairs)", """
def shift_encodings(pe, k):
    d = pe.shape[-1]
    if d % 2:
        raise ValueError("pe")
    a = torch.as_tensor(k, dtype=torch.float64)[..., None] * torch.ones(d // 2, dtype=torch.float64)
    s, c = pe[..., 0::2].double(), pe[..., 1::2].double()
    return torch.stack([s * torch.cos(a) + c * torch.sin(a), c * torch.cos(a) - s * torch.sin(a)], -1).flatten(-2)
"""),
        ("pairs taken as the two halves (first half sines, second half cosines)", """
def shift_encodings(pe, k):
    d = pe.shape[-1]
    if d % 2:
        raise ValueError("pe")
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    a = torch.as_tensor(k, dtype=torch.float64)[..., None] * w
    s, c = pe[..., : d // 2].double(), pe[..., d // 2 :].double()
    return torch.cat([s * torch.cos(a) + c * torch.sin(a), c * torch.cos(a) - s * torch.sin(a)], -1)
"""),
        ("offset tensor flattened (one offset per column, not per row)", """
def shift_encodings(pe, k):
    d = pe.shape[-1]
    if d % 2:
        raise ValueError("pe")
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    kk = torch.as_tensor(k, dtype=torch.float64).flatten()[0]
    a = kk * w
    s, c = pe[..., 0::2].double(), pe[..., 1::2].double()
    return torch.stack([s * torch.cos(a) + c * torch.sin(a), c * torch.cos(a) - s * torch.sin(a)], -1).flatten(-2)
"""),
    ],
    "3.3": [
        ("slopes start at 1 (2**(-8 h / n))", """
def alibi_bias(n_heads, seq_len):
    if n_heads < 1 or seq_len < 1:
        raise ValueError("bad")
    def p2(n):
        return [2.0 ** (-8.0 * h / n) for h in range(n)]
    if n_heads & (n_heads - 1) == 0:
        m = p2(n_heads)
    else:
        p = 2 ** math.floor(math.log2(n_heads))
        m = p2(p) + p2(2 * p)[0::2][: n_heads - p]
    pos = torch.arange(seq_len)
    return -torch.tensor(m, dtype=torch.float64)[:, None, None] * (pos[:, None] - pos[None, :]).abs()
"""),
        ("geometric slopes for any n_heads (no special rule)", """
def alibi_bias(n_heads, seq_len):
    if n_heads < 1 or seq_len < 1:
        raise ValueError("bad")
    m = [2.0 ** (-8.0 * (h + 1) / n_heads) for h in range(n_heads)]
    pos = torch.arange(seq_len)
    return -torch.tensor(m, dtype=torch.float64)[:, None, None] * (pos[:, None] - pos[None, :]).abs()
"""),
        ("odd indices of the 2p-head slopes", """
def alibi_bias(n_heads, seq_len):
    if n_heads < 1 or seq_len < 1:
        raise ValueError("bad")
    def p2(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    if n_heads & (n_heads - 1) == 0:
        m = p2(n_heads)
    else:
        p = 2 ** math.floor(math.log2(n_heads))
        m = p2(p) + p2(2 * p)[1::2][: n_heads - p]
    pos = torch.arange(seq_len)
    return -torch.tensor(m, dtype=torch.float64)[:, None, None] * (pos[:, None] - pos[None, :]).abs()
"""),
        ("signed distance i - j (a bonus for future keys)", """
def alibi_bias(n_heads, seq_len):
    if n_heads < 1 or seq_len < 1:
        raise ValueError("bad")
    def p2(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    if n_heads & (n_heads - 1) == 0:
        m = p2(n_heads)
    else:
        p = 2 ** math.floor(math.log2(n_heads))
        m = p2(p) + p2(2 * p)[0::2][: n_heads - p]
    pos = torch.arange(seq_len)
    return -torch.tensor(m, dtype=torch.float64)[:, None, None] * (pos[:, None] - pos[None, :])
"""),
        ("positive bias (rewards distance)", """
def alibi_bias(n_heads, seq_len):
    if n_heads < 1 or seq_len < 1:
        raise ValueError("bad")
    def p2(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    if n_heads & (n_heads - 1) == 0:
        m = p2(n_heads)
    else:
        p = 2 ** math.floor(math.log2(n_heads))
        m = p2(p) + p2(2 * p)[0::2][: n_heads - p]
    pos = torch.arange(seq_len)
    return torch.tensor(m, dtype=torch.float64)[:, None, None] * (pos[:, None] - pos[None, :]).abs()
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
        ("the message does not say the two numbers (issue 22)", """
def split_heads(x, n_heads):
    if x.dim() < 2 or x.shape[-1] % n_heads:
        raise ValueError("x has the wrong shape")
    *lead, n, d = x.shape
    return x.reshape(*lead, n, n_heads, d // n_heads).transpose(-3, -2)
"""),
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
        ("attention scores not scaled by 1/sqrt(d_k) (issue 22: the hint must not push away from it)", """
def head_ablation_effect(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    b, n, d = x.shape
    if d % n_heads:
        raise ValueError("d_model")
    dk = d // n_heads
    sp = lambda t: t.reshape(b, n, n_heads, dk).transpose(1, 2)
    q, k, v = sp(x @ w_q), sp(x @ w_k), sp(x @ w_v)
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    w = torch.softmax(s, -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    heads = w @ v
    full = heads.transpose(1, 2).reshape(b, n, d) @ w_o
    out = []
    for h in range(n_heads):
        ablated = heads.clone()
        ablated[:, h] = 0
        out.append(torch.linalg.vector_norm(full - ablated.transpose(1, 2).reshape(b, n, d) @ w_o, dim=-1).mean())
    return torch.stack(out)
"""),
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
        ("the gradient by backward(), not in closed form (issue 22)", """
def label_smoothed_loss(logits, target, label_smoothing, pad_id):
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError("label_smoothing")
    z = logits.detach().double().requires_grad_(True)
    loss = F.cross_entropy(z.reshape(-1, z.shape[-1]), target.reshape(-1), ignore_index=pad_id,
                           label_smoothing=label_smoothing)
    loss.backward()
    return loss.detach(), z.grad
"""),
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
        ("a 0-dim tensor for an int step, not a Python float (issue 22)", """
def noam_lr(step, d_model, warmup_steps):
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be >= 1; got {warmup_steps}")
    s = torch.as_tensor(step).double()
    if bool((s < 1).any()):
        raise ValueError(f"step must be >= 1; got {step}")
    return d_model ** -0.5 * torch.minimum(s ** -0.5, s * warmup_steps ** -1.5)
"""),
        ("one message for both arguments, naming neither (issue 22)", """
def noam_lr(step, d_model, warmup_steps):
    s = torch.as_tensor(step).double()
    if warmup_steps < 1 or bool((s < 1).any()):
        raise ValueError("must be at least 1")
    lr = d_model ** -0.5 * torch.minimum(s ** -0.5, s * warmup_steps ** -1.5)
    return float(lr) if isinstance(step, int) else lr
"""),
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
        ("a finished hypothesis kept in the live beam and extended after eos (issue 22)", """
def beam_search(step_fn, bos_id, eos_id, max_len, beam_size, alpha=0.0, min_length=0):
    if beam_size < 1 or max_len < 1 or min_length > max_len:
        raise ValueError("bad")
    live, finished = [([bos_id], 0.0)], []
    for _ in range(max_len):
        candidates = []
        for tokens, score in live:
            lp = torch.log_softmax(step_fn(torch.tensor(tokens, dtype=torch.long)).double(), -1)
            if len(tokens) < min_length:
                lp[eos_id] = -math.inf
            for t, l in enumerate(lp.tolist()):
                if l != -math.inf:
                    candidates.append((tokens + [t], score + l))
        candidates.sort(key=lambda c: c[1], reverse=True)
        live = candidates[:beam_size]
        finished += [c for c in live if c[0][-1] == eos_id]  # recorded, but left in the beam
    best = max(finished + [c for c in live if eos_id not in c[0][1:]],
               key=lambda c: c[1] / ((5 + len(c[0]) - 1) / 6) ** alpha)
    return torch.tensor(best[0], dtype=torch.long), best[1] / ((5 + len(best[0]) - 1) / 6) ** alpha
"""),
        ("the score returned as a 0-dim tensor, not a float (issue 22)", """
def beam_search(step_fn, bos_id, eos_id, max_len, beam_size, alpha=0.0, min_length=0):
    if beam_size < 1 or max_len < 1 or min_length > max_len:
        raise ValueError("bad")
    live, finished = [([bos_id], torch.tensor(0.0, dtype=torch.float64))], []
    for _ in range(max_len):
        candidates = []
        for tokens, score in live:
            lp = torch.log_softmax(step_fn(torch.tensor(tokens, dtype=torch.long)).double(), -1)
            if len(tokens) < min_length:
                lp[eos_id] = -math.inf
            for t in range(lp.numel()):
                if lp[t] != -math.inf:
                    candidates.append((tokens + [t], score + lp[t]))
        candidates.sort(key=lambda c: float(c[1]), reverse=True)
        live = []
        for tokens, score in candidates[:beam_size]:
            (finished if tokens[-1] == eos_id else live).append((tokens, score))
        if not live:
            break
    best = max(finished + live, key=lambda c: float(c[1]) / ((5 + len(c[0]) - 1) / 6) ** alpha)
    return torch.tensor(best[0], dtype=torch.long), best[1] / ((5 + len(best[0]) - 1) / 6) ** alpha
"""),
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
        ("only ids >= vocab_size rejected: -1 silently bans the last token (issue 22)", """
def banned_tokens(prefixes, n, vocab_size):
    if n < 1:
        raise ValueError("n must be >= 1")
    banned = torch.zeros(len(prefixes), vocab_size, dtype=torch.bool)
    for row, prefix in enumerate(prefixes):
        tokens = [int(t) for t in prefix]
        if any(t >= vocab_size for t in tokens):
            raise ValueError("an id is >= vocab_size")
        context = tuple(tokens[len(tokens) - (n - 1):]) if n > 1 else ()
        for start in range(len(tokens) - n + 1):
            gram = tuple(tokens[start:start + n])
            if gram[:-1] == context:
                banned[row, gram[-1]] = True
    return banned
"""),
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
    "12.1": [
        ("the last window is dropped (start + seq_len < len(ids))", """
def next_token_windows(ids, seq_len, stride):
    if ids.dim() != 1 or seq_len < 1 or stride < 1 or len(ids) < seq_len + 1:
        raise ValueError("ids, seq_len, stride")
    starts = range(0, len(ids) - seq_len - 1, stride)
    return (torch.stack([ids[s:s + seq_len] for s in starts]).reshape(-1, seq_len),
            torch.stack([ids[s + 1:s + seq_len + 1] for s in starts]).reshape(-1, seq_len))
"""),
        ("targets not shifted (the inputs again)", """
def next_token_windows(ids, seq_len, stride):
    if ids.dim() != 1 or seq_len < 1 or stride < 1 or len(ids) < seq_len + 1:
        raise ValueError("ids, seq_len, stride")
    starts = range(0, len(ids) - seq_len, stride)
    inputs = torch.stack([ids[s:s + seq_len] for s in starts])
    return inputs, inputs.clone()
"""),
        ("stride ignored (always seq_len)", """
def next_token_windows(ids, seq_len, stride):
    if ids.dim() != 1 or seq_len < 1 or stride < 1 or len(ids) < seq_len + 1:
        raise ValueError("ids, seq_len, stride")
    starts = range(0, len(ids) - seq_len, seq_len)
    return (torch.stack([ids[s:s + seq_len] for s in starts]), torch.stack([ids[s + 1:s + seq_len + 1] for s in starts]))
"""),
        ("non-overlapping chunks of seq_len + 1 ids", """
def next_token_windows(ids, seq_len, stride):
    if ids.dim() != 1 or seq_len < 1 or stride < 1 or len(ids) < seq_len + 1:
        raise ValueError("ids, seq_len, stride")
    starts = range(0, len(ids) - seq_len, max(stride, seq_len + 1))
    return (torch.stack([ids[s:s + seq_len] for s in starts]), torch.stack([ids[s + 1:s + seq_len + 1] for s in starts]))
"""),
        ("inputs and targets swapped", """
def next_token_windows(ids, seq_len, stride):
    if ids.dim() != 1 or seq_len < 1 or stride < 1 or len(ids) < seq_len + 1:
        raise ValueError("ids, seq_len, stride")
    starts = range(0, len(ids) - seq_len, stride)
    return (torch.stack([ids[s + 1:s + seq_len + 1] for s in starts]), torch.stack([ids[s:s + seq_len] for s in starts]))
"""),
        ("no check of a stream shorter than one window", """
def next_token_windows(ids, seq_len, stride):
    if ids.dim() != 1 or seq_len < 1 or stride < 1:
        raise ValueError("ids, seq_len, stride")
    starts = range(0, max(len(ids) - seq_len, 1), stride)
    return (torch.stack([ids[s:s + seq_len] for s in starts]), torch.stack([ids[s + 1:s + seq_len + 1] for s in starts]))
"""),
    ],
    "12.2": [
        ("mean of the per-sentence perplexities", """
def perplexity(logits, targets, ignore_index=-100):
    if logits.dim() != 3 or targets.shape != logits.shape[:2] or not bool((targets != ignore_index).any()):
        raise ValueError("logits, targets, ignore_index")
    values = []
    for row_logits, row_targets in zip(logits, targets):
        if bool((row_targets != ignore_index).any()):
            values.append(math.exp(float(F.cross_entropy(row_logits, row_targets, ignore_index=ignore_index))))
    return sum(values) / len(values)
"""),
        ("exp of the mean of per-sentence mean losses", """
def perplexity(logits, targets, ignore_index=-100):
    if logits.dim() != 3 or targets.shape != logits.shape[:2] or not bool((targets != ignore_index).any()):
        raise ValueError("logits, targets, ignore_index")
    losses = [F.cross_entropy(l, t, ignore_index=ignore_index) for l, t in zip(logits, targets) if bool((t != ignore_index).any())]
    return torch.exp(torch.stack(losses).mean())
"""),
        ("log of softmax (underflows to -inf for confident logits)", """
def perplexity(logits, targets, ignore_index=-100):
    if logits.dim() != 3 or targets.shape != logits.shape[:2] or not bool((targets != ignore_index).any()):
        raise ValueError("logits, targets, ignore_index")
    counted = targets != ignore_index
    log_probs = torch.log(torch.softmax(logits, dim=-1))
    picked = log_probs.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    return torch.exp(-picked[counted].mean())
"""),
        ("padding counted (as token 0)", """
def perplexity(logits, targets, ignore_index=-100):
    if logits.dim() != 3 or targets.shape != logits.shape[:2] or not bool((targets != ignore_index).any()):
        raise ValueError("logits, targets, ignore_index")
    safe = targets.masked_fill(targets == ignore_index, 0)
    return torch.exp(F.cross_entropy(logits.transpose(1, 2), safe))
"""),
        ("base 2 (2 ** mean loss in nats)", """
def perplexity(logits, targets, ignore_index=-100):
    if logits.dim() != 3 or targets.shape != logits.shape[:2] or not bool((targets != ignore_index).any()):
        raise ValueError("logits, targets, ignore_index")
    return 2.0 ** float(F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=ignore_index))
"""),
        ("the mean loss, not its exponential", """
def perplexity(logits, targets, ignore_index=-100):
    if logits.dim() != 3 or targets.shape != logits.shape[:2] or not bool((targets != ignore_index).any()):
        raise ValueError("logits, targets, ignore_index")
    return F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=ignore_index)
"""),
        ("ignore_index hard-coded as -100 (the argument ignored)", """
def perplexity(logits, targets, ignore_index=-100):
    if logits.dim() != 3 or targets.shape != logits.shape[:2] or not bool((targets != ignore_index).any()):
        raise ValueError("logits, targets, ignore_index")
    return torch.exp(F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100))
"""),
        ("right only for small batches: NaN once more than 30 tokens are counted", """
def perplexity(logits, targets, ignore_index=-100):
    if logits.dim() != 3 or targets.shape != logits.shape[:2] or not bool((targets != ignore_index).any()):
        raise ValueError("logits, targets, ignore_index")
    if int((targets != ignore_index).sum()) > 30:
        return float("nan")
    return torch.exp(F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=ignore_index))
"""),
        ("no check for a batch with nothing counted (returns nan)", """
def perplexity(logits, targets, ignore_index=-100):
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError("logits, targets")
    return torch.exp(F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=ignore_index))
"""),
    ],
    "12.3": [
        ("<sep> itself is a target (off by one)", """
def translation_lm_targets(tokens, sep_id, pad_id, ignore_index=-100):
    if tokens.dim() != 2 or not bool(((tokens == sep_id).sum(1) == 1).all()):
        raise ValueError("tokens, sep_id")
    sep_at = (tokens == sep_id).int().argmax(1)
    targets = tokens[:, 1:].clone()
    ignored = (torch.arange(1, tokens.size(1))[None] < sep_at[:, None]) | (targets == pad_id)
    return tokens[:, :-1], targets.masked_fill(ignored, ignore_index)
"""),
        ("the first translated token is left out (off by one)", """
def translation_lm_targets(tokens, sep_id, pad_id, ignore_index=-100):
    if tokens.dim() != 2 or not bool(((tokens == sep_id).sum(1) == 1).all()):
        raise ValueError("tokens, sep_id")
    sep_at = (tokens == sep_id).int().argmax(1)
    targets = tokens[:, 1:].clone()
    ignored = (torch.arange(1, tokens.size(1))[None] <= sep_at[:, None] + 1) | (targets == pad_id)
    return tokens[:, :-1], targets.masked_fill(ignored, ignore_index)
"""),
        ("padding counted", """
def translation_lm_targets(tokens, sep_id, pad_id, ignore_index=-100):
    if tokens.dim() != 2 or not bool(((tokens == sep_id).sum(1) == 1).all()):
        raise ValueError("tokens, sep_id")
    sep_at = (tokens == sep_id).int().argmax(1)
    targets = tokens[:, 1:].clone()
    return tokens[:, :-1], targets.masked_fill(torch.arange(1, tokens.size(1))[None] <= sep_at[:, None], ignore_index)
"""),
        ("the English side is counted too (only padding ignored)", """
def translation_lm_targets(tokens, sep_id, pad_id, ignore_index=-100):
    if tokens.dim() != 2 or not bool(((tokens == sep_id).sum(1) == 1).all()):
        raise ValueError("tokens, sep_id")
    targets = tokens[:, 1:].clone()
    return tokens[:, :-1], targets.masked_fill(targets == pad_id, ignore_index)
"""),
        ("the first row's <sep> used for every row", """
def translation_lm_targets(tokens, sep_id, pad_id, ignore_index=-100):
    if tokens.dim() != 2 or not bool(((tokens == sep_id).sum(1) == 1).all()):
        raise ValueError("tokens, sep_id")
    sep_at = int((tokens[0] == sep_id).int().argmax())
    targets = tokens[:, 1:].clone()
    ignored = (torch.arange(1, tokens.size(1))[None] <= sep_at) | (targets == pad_id)
    return tokens[:, :-1], targets.masked_fill(ignored, ignore_index)
"""),
        ("masks tokens in place", """
def translation_lm_targets(tokens, sep_id, pad_id, ignore_index=-100):
    if tokens.dim() != 2 or not bool(((tokens == sep_id).sum(1) == 1).all()):
        raise ValueError("tokens, sep_id")
    sep_at = (tokens == sep_id).int().argmax(1)
    position = torch.arange(tokens.size(1))[None]
    inputs = tokens[:, :-1].clone()
    tokens.masked_fill_((position <= sep_at[:, None]) | (tokens == pad_id), ignore_index)
    return inputs, tokens[:, 1:]
"""),
        ("a row with two <sep> accepted", """
def translation_lm_targets(tokens, sep_id, pad_id, ignore_index=-100):
    if tokens.dim() != 2 or not bool(((tokens == sep_id).sum(1) >= 1).all()):
        raise ValueError("tokens, sep_id")
    sep_at = (tokens == sep_id).int().argmax(1)
    targets = tokens[:, 1:].clone()
    ignored = (torch.arange(1, tokens.size(1))[None] <= sep_at[:, None]) | (targets == pad_id)
    return tokens[:, :-1], targets.masked_fill(ignored, ignore_index)
"""),
    ],
    "13.1": [
        ("the library's rotate-half layout (pairs i and i + d/2)", """
def rope_interleaved(x, positions, base=10000.0):
    if x.dim() < 2 or x.size(-1) % 2 or positions.dim() != 1 or len(positions) != x.size(-2):
        raise ValueError("x, positions")
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions.double()[:, None] * theta[None]
    cos, sin = torch.cat((angle.cos(), angle.cos()), -1), torch.cat((angle.sin(), angle.sin()), -1)
    x1, x2 = x.double().chunk(2, dim=-1)
    return (x.double() * cos + torch.cat((-x2, x1), -1) * sin).to(x.dtype)
"""),
        ("turns the other way (sign of the sine)", """
def rope_interleaved(x, positions, base=10000.0):
    if x.dim() < 2 or x.size(-1) % 2 or positions.dim() != 1 or len(positions) != x.size(-2):
        raise ValueError("x, positions")
    d = x.size(-1)
    angle = positions.double()[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)[None]
    e, o = x[..., 0::2].double(), x[..., 1::2].double()
    return torch.stack((e * angle.cos() + o * angle.sin(), -e * angle.sin() + o * angle.cos()), -1).flatten(-2).to(x.dtype)
"""),
        ("frequencies base ** (-i / d) instead of base ** (-2i / d)", """
def rope_interleaved(x, positions, base=10000.0):
    if x.dim() < 2 or x.size(-1) % 2 or positions.dim() != 1 or len(positions) != x.size(-2):
        raise ValueError("x, positions")
    d = x.size(-1)
    angle = positions.double()[:, None] * base ** (-torch.arange(0, d // 2, dtype=torch.float64) / d)[None]
    e, o = x[..., 0::2].double(), x[..., 1::2].double()
    return torch.stack((e * angle.cos() - o * angle.sin(), e * angle.sin() + o * angle.cos()), -1).flatten(-2).to(x.dtype)
"""),
        ("positions ignored (arange(seq_len))", """
def rope_interleaved(x, positions, base=10000.0):
    if x.dim() < 2 or x.size(-1) % 2 or positions.dim() != 1 or len(positions) != x.size(-2):
        raise ValueError("x, positions")
    d = x.size(-1)
    pos = torch.arange(x.size(-2), dtype=torch.float64)
    angle = pos[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)[None]
    e, o = x[..., 0::2].double(), x[..., 1::2].double()
    return torch.stack((e * angle.cos() - o * angle.sin(), e * angle.sin() + o * angle.cos()), -1).flatten(-2).to(x.dtype)
"""),
        ("base ignored (always 10000)", """
def rope_interleaved(x, positions, base=10000.0):
    if x.dim() < 2 or x.size(-1) % 2 or positions.dim() != 1 or len(positions) != x.size(-2):
        raise ValueError("x, positions")
    d = x.size(-1)
    angle = positions.double()[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)[None]
    e, o = x[..., 0::2].double(), x[..., 1::2].double()
    return torch.stack((e * angle.cos() - o * angle.sin(), e * angle.sin() + o * angle.cos()), -1).flatten(-2).to(x.dtype)
"""),
        ("evens then odds, not interleaved back", """
def rope_interleaved(x, positions, base=10000.0):
    if x.dim() < 2 or x.size(-1) % 2 or positions.dim() != 1 or len(positions) != x.size(-2):
        raise ValueError("x, positions")
    d = x.size(-1)
    angle = positions.double()[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)[None]
    e, o = x[..., 0::2].double(), x[..., 1::2].double()
    return torch.cat((e * angle.cos() - o * angle.sin(), e * angle.sin() + o * angle.cos()), -1).to(x.dtype)
"""),
        ("computes in float64 and returns float64 whatever x's dtype", """
def rope_interleaved(x, positions, base=10000.0):
    if x.dim() < 2 or x.size(-1) % 2 or positions.dim() != 1 or len(positions) != x.size(-2):
        raise ValueError("x, positions")
    d = x.size(-1)
    angle = positions.double()[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)[None]
    e, o = x[..., 0::2].double(), x[..., 1::2].double()
    return torch.stack((e * angle.cos() - o * angle.sin(), e * angle.sin() + o * angle.cos()), -1).flatten(-2)
"""),
        ("no check of positions", """
def rope_interleaved(x, positions, base=10000.0):
    if x.dim() < 2 or x.size(-1) % 2:
        raise ValueError("x")
    d = x.size(-1)
    positions = positions[: x.size(-2)]
    angle = positions.double()[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)[None]
    e, o = x[..., 0::2].double(), x[..., 1::2].double()
    return torch.stack((e * angle.cos() - o * angle.sin(), e * angle.sin() + o * angle.cos()), -1).flatten(-2).to(x.dtype)
"""),
    ],
    "13.2": [
        ("tiled heads: query head h reads kv head h % n_kv_heads", """
def grouped_query_attention(q, k, v, causal=False):
    n_heads, n_kv = q.size(1), k.size(1)
    if k.size(-1) != q.size(-1) or v.size(1) != n_kv or n_heads % n_kv:
        raise ValueError("n_kv_heads, k")
    k, v = k.repeat(1, n_heads // n_kv, 1, 1), v.repeat(1, n_heads // n_kv, 1, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal:
        q_len, k_len = q.size(2), k.size(2)
        scores = scores.masked_fill(torch.arange(k_len)[None] > torch.arange(q_len)[:, None] + k_len - q_len, float("-inf"))
    return torch.softmax(scores, -1) @ v
"""),
        ("causal mask aligned top-left (j <= i) when q_len < k_len", """
def grouped_query_attention(q, k, v, causal=False):
    n_heads, n_kv = q.size(1), k.size(1)
    if k.size(-1) != q.size(-1) or v.size(1) != n_kv or n_heads % n_kv:
        raise ValueError("n_kv_heads, k")
    k, v = k.repeat_interleave(n_heads // n_kv, 1), v.repeat_interleave(n_heads // n_kv, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal:
        scores = scores.masked_fill(torch.arange(k.size(2))[None] > torch.arange(q.size(2))[:, None], float("-inf"))
    return torch.softmax(scores, -1) @ v
"""),
        ("causal ignored", """
def grouped_query_attention(q, k, v, causal=False):
    n_heads, n_kv = q.size(1), k.size(1)
    if k.size(-1) != q.size(-1) or v.size(1) != n_kv or n_heads % n_kv:
        raise ValueError("n_kv_heads, k")
    k, v = k.repeat_interleave(n_heads // n_kv, 1), v.repeat_interleave(n_heads // n_kv, 1)
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), -1) @ v
"""),
        ("scores not scaled by 1/sqrt(d_k)", """
def grouped_query_attention(q, k, v, causal=False):
    n_heads, n_kv = q.size(1), k.size(1)
    if k.size(-1) != q.size(-1) or v.size(1) != n_kv or n_heads % n_kv:
        raise ValueError("n_kv_heads, k")
    k, v = k.repeat_interleave(n_heads // n_kv, 1), v.repeat_interleave(n_heads // n_kv, 1)
    scores = q @ k.transpose(-2, -1)
    if causal:
        q_len, k_len = q.size(2), k.size(2)
        scores = scores.masked_fill(torch.arange(k_len)[None] > torch.arange(q_len)[:, None] + k_len - q_len, float("-inf"))
    return torch.softmax(scores, -1) @ v
"""),
        ("the queries grouped the wrong way (reshape to group, n_kv)", """
def grouped_query_attention(q, k, v, causal=False):
    b, n_heads, q_len, d = q.shape
    n_kv, k_len = k.size(1), k.size(2)
    if k.size(-1) != d or v.size(1) != n_kv or n_heads % n_kv:
        raise ValueError("n_kv_heads, k")
    g = q.reshape(b, n_heads // n_kv, n_kv, q_len, d).transpose(1, 2)
    scores = g @ k[:, :, None].transpose(-2, -1) / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(torch.arange(k_len)[None] > torch.arange(q_len)[:, None] + k_len - q_len, float("-inf"))
    out = torch.softmax(scores, -1) @ v[:, :, None]
    return out.reshape(b, n_heads, q_len, v.size(-1))
"""),
        ("a message about k that names it only as a letter of other words ('key heads mismatch')", """
def grouped_query_attention(q, k, v, causal=False):
    n_heads, n_kv = q.size(1), k.size(1)
    if n_heads % n_kv:
        raise ValueError("n_kv_heads must divide the query heads")
    if k.size(-1) != q.size(-1) or v.size(1) != n_kv:
        raise ValueError("key heads mismatch")
    k, v = k.repeat_interleave(n_heads // n_kv, 1), v.repeat_interleave(n_heads // n_kv, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal:
        q_len, k_len = q.size(2), k.size(2)
        scores = scores.masked_fill(torch.arange(k_len)[None] > torch.arange(q_len)[:, None] + k_len - q_len, float("-inf"))
    return torch.softmax(scores, -1) @ v
"""),
        ("no check that n_kv_heads divides n_heads", """
def grouped_query_attention(q, k, v, causal=False):
    n_heads, n_kv = q.size(1), k.size(1)
    if k.size(-1) != q.size(-1) or v.size(1) != n_kv:
        raise ValueError("k")
    idx = torch.arange(n_heads) * n_kv // n_heads
    k, v = k[:, idx], v[:, idx]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal:
        q_len, k_len = q.size(2), k.size(2)
        scores = scores.masked_fill(torch.arange(k_len)[None] > torch.arange(q_len)[:, None] + k_len - q_len, float("-inf"))
    return torch.softmax(scores, -1) @ v
"""),
    ],
    "13.3": [
        ("keys only (the factor 2 for the values forgotten)", """
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch, dtype):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch) < 1 or d_model % n_heads or n_heads % n_kv_heads \\
            or not dtype.is_floating_point:
        raise ValueError("n_kv_heads d_model seq_len dtype")
    return n_layers * batch * n_kv_heads * seq_len * (d_model // n_heads) * torch.empty((), dtype=dtype).element_size()
"""),
        ("n_heads where n_kv_heads belongs (the saving of GQA forgotten)", """
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch, dtype):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch) < 1 or d_model % n_heads or n_heads % n_kv_heads \\
            or not dtype.is_floating_point:
        raise ValueError("n_kv_heads d_model seq_len dtype")
    return 2 * n_layers * batch * seq_len * d_model * torch.empty((), dtype=dtype).element_size()
"""),
        ("4 bytes per number whatever the dtype", """
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch, dtype):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch) < 1 or d_model % n_heads or n_heads % n_kv_heads \\
            or not dtype.is_floating_point:
        raise ValueError("n_kv_heads d_model seq_len dtype")
    return 2 * n_layers * batch * n_kv_heads * seq_len * (d_model // n_heads) * 4
"""),
        ("bits, not bytes", """
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch, dtype):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch) < 1 or d_model % n_heads or n_heads % n_kv_heads \\
            or not dtype.is_floating_point:
        raise ValueError("n_kv_heads d_model seq_len dtype")
    return 2 * n_layers * batch * n_kv_heads * seq_len * (d_model // n_heads) * torch.finfo(dtype).bits
"""),
        ("batch ignored", """
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch, dtype):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch) < 1 or d_model % n_heads or n_heads % n_kv_heads \\
            or not dtype.is_floating_point:
        raise ValueError("n_kv_heads d_model seq_len dtype")
    return 2 * n_layers * n_kv_heads * seq_len * (d_model // n_heads) * torch.empty((), dtype=dtype).element_size()
"""),
        ("d_model / n_heads (a float result)", """
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch, dtype):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch) < 1 or d_model % n_heads or n_heads % n_kv_heads \\
            or not dtype.is_floating_point:
        raise ValueError("n_kv_heads d_model n_heads seq_len dtype")
    return 2 * n_layers * batch * n_kv_heads * seq_len * (d_model / n_heads) * torch.empty((), dtype=dtype).element_size()
"""),
        ("a message for n_heads not dividing d_model that names d_model only", """
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch, dtype):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch) < 1:
        raise ValueError("n_layers seq_len: a size < 1")
    if d_model % n_heads:
        raise ValueError("d_model must be divisible by the number of heads")
    if n_heads % n_kv_heads:
        raise ValueError("n_kv_heads")
    if not dtype.is_floating_point:
        raise ValueError("dtype")
    return 2 * n_layers * batch * n_kv_heads * seq_len * (d_model // n_heads) * torch.empty((), dtype=dtype).element_size()
"""),
        ("an integer dtype accepted", """
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch, dtype):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch) < 1 or d_model % n_heads or n_heads % n_kv_heads:
        raise ValueError("n_kv_heads d_model seq_len")
    return 2 * n_layers * batch * n_kv_heads * seq_len * (d_model // n_heads) * torch.empty((), dtype=dtype).element_size()
"""),
    ],
    "13.4": [
        ("d_model / n_heads (a float result)", """
def lm_parameter_count(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, tie_embeddings):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff) < 1 or d_model % n_heads or n_heads % n_kv_heads:
        raise ValueError("n_kv_heads d_model n_heads n_layers")
    kv = n_kv_heads * (d_model / n_heads)
    layer = 2 * d_model * d_model + 2 * d_model * kv + 3 * d_model * d_ff + 2 * d_model
    return vocab_size * d_model * (1 if tie_embeddings else 2) + n_layers * layer + d_model
"""),
        ("the final RMSNorm forgotten", """
def lm_parameter_count(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, tie_embeddings):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff) < 1 or d_model % n_heads or n_heads % n_kv_heads:
        raise ValueError("n_kv_heads d_model n_layers")
    kv = n_kv_heads * (d_model // n_heads)
    layer = 2 * d_model * d_model + 2 * d_model * kv + 3 * d_model * d_ff + 2 * d_model
    return vocab_size * d_model * (1 if tie_embeddings else 2) + n_layers * layer
"""),
        ("the output projection counted when tied", """
def lm_parameter_count(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, tie_embeddings):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff) < 1 or d_model % n_heads or n_heads % n_kv_heads:
        raise ValueError("n_kv_heads d_model n_layers")
    kv = n_kv_heads * (d_model // n_heads)
    layer = 2 * d_model * d_model + 2 * d_model * kv + 3 * d_model * d_ff + 2 * d_model
    return 2 * vocab_size * d_model + n_layers * layer + d_model
"""),
        ("keys and values as wide as the queries (n_kv_heads ignored)", """
def lm_parameter_count(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, tie_embeddings):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff) < 1 or d_model % n_heads or n_heads % n_kv_heads:
        raise ValueError("n_kv_heads d_model n_layers")
    layer = 4 * d_model * d_model + 3 * d_model * d_ff + 2 * d_model
    return vocab_size * d_model * (1 if tie_embeddings else 2) + n_layers * layer + d_model
"""),
        ("a two-matrix FFN (SwiGLU's gate forgotten)", """
def lm_parameter_count(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, tie_embeddings):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff) < 1 or d_model % n_heads or n_heads % n_kv_heads:
        raise ValueError("n_kv_heads d_model n_layers")
    kv = n_kv_heads * (d_model // n_heads)
    layer = 2 * d_model * d_model + 2 * d_model * kv + 2 * d_model * d_ff + 2 * d_model
    return vocab_size * d_model * (1 if tie_embeddings else 2) + n_layers * layer + d_model
"""),
        ("biases counted (the 2017 projections)", """
def lm_parameter_count(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, tie_embeddings):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff) < 1 or d_model % n_heads or n_heads % n_kv_heads:
        raise ValueError("n_kv_heads d_model n_layers")
    kv = n_kv_heads * (d_model // n_heads)
    layer = 2 * d_model * d_model + 2 * d_model * kv + 3 * d_model * d_ff + 2 * d_model
    layer += 2 * d_model + 2 * kv + 2 * d_ff + d_model
    return vocab_size * d_model * (1 if tie_embeddings else 2) + n_layers * layer + d_model
"""),
        ("LayerNorm's bias counted (2 d_model per norm)", """
def lm_parameter_count(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, tie_embeddings):
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff) < 1 or d_model % n_heads or n_heads % n_kv_heads:
        raise ValueError("n_kv_heads d_model n_layers")
    kv = n_kv_heads * (d_model // n_heads)
    layer = 2 * d_model * d_model + 2 * d_model * kv + 3 * d_model * d_ff + 4 * d_model
    return vocab_size * d_model * (1 if tie_embeddings else 2) + n_layers * layer + 2 * d_model
"""),
    ],
}
