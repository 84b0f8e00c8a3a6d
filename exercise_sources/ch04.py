"""Source of exercises/04_attention.ipynb and its solution (see build_notebooks.py)."""

CHAPTER = "04"
NOTEBOOK = "04_attention.ipynb"
TITLE = "scaled dot-product attention"

CELLS = [
    ("code", r'''
import math
import sys

import torch
import torch.nn.functional as F

from course_lib.masks import causal_mask
'''),
    ("md", r'''
## Exercise 4.1 — attention with a mask *and* an additive bias

Equation (1) of the paper, with one extension that most later models use: a float **bias** added
to the scores before the softmax,

$$\text{Attention}(Q, K, V) = \text{softmax}\!\left(\frac{Q K^{\top}}{\sqrt{d_k}} + B\right) V .$$

$B$ is how position information enters *inside* attention: T5's learned relative-position bias,
or ALiBi (Press et al., 2022), whose bias for head $h$ is $-m_h\,|i - j|$ — the farther a key,
the lower its score. The chapter's listing has no bias; you add it, and you make it work with
the boolean mask.

**The course's mask convention** (chapter 8, and `torch.nn.functional.scaled_dot_product_attention`):
a mask is a `torch.bool` tensor broadcastable to the score shape `(..., q_len, k_len)`;
`True` means *may attend*, `False` means *blocked*. A blocked entry gets weight exactly 0.

**The bias** is a floating-point tensor broadcastable to `(..., q_len, k_len)` (for example
`(n_heads, q_len, k_len)` for ALiBi, shared by the whole batch). It is added **after** the
$1/\sqrt{d_k}$ scale. An entry `-inf` in the bias blocks that key, exactly as `False` in the
mask does (PyTorch reads a float `attn_mask` this way). **A query row in which every key is
blocked — by the mask, by `-inf` in the bias, or by both — must give zero weights and a zero
output, never NaN.**

Write `scaled_dot_product_attention(q, k, v, mask=None, bias=None)`:

* `q`: `(..., q_len, d_k)`, `k`: `(..., k_len, d_k)`, `v`: `(..., k_len, d_v)` — the leading
  dimensions `...` are e.g. `(batch,)` or `(batch, n_heads)`;
* returns `(out, weights)`: `out` of shape `(..., q_len, d_v)` and the weights
  `(..., q_len, k_len)`;
* raises `ValueError` when `q` and `k` have different `d_k`, when `bias` is not a floating-point
  tensor (a boolean belongs in `mask`), or when `bias` does not broadcast to the score shape.

**Example.** One query, two keys, `d_k = 1`: `q = [[2.]]`, `k = [[1.], [1.]]`, `bias = [[0., -inf]]`
gives scores `[2, -inf]`, weights `[1, 0]`; with `bias = [[-inf, -inf]]` the weights are `[0, 0]`
and the output is 0.

**Hints.** Combine the two ways of blocking into one boolean "allowed" tensor,
`mask & (bias != float("-inf"))`. Do not leave `-inf` in the scores (a row of `-inf` gives
`softmax = nan`): fill the blocked scores with `torch.finfo(scores.dtype).min`, the most negative
*finite* number of the dtype, and after the softmax set the blocked weights to 0.
A bias broadcasts to the scores when it has at most as many dimensions and, compared from the
right, each of its sizes is 1 or the score's size; check that yourself and raise a `ValueError` naming
`bias` (adding a bias of the wrong shape raises a `RuntimeError`, or silently broadcasts the scores up).
The checker also runs your function on `float16` and `bfloat16` inputs: a fill value such as
`-1e9` does not fit in `float16` (its most negative finite number is -65504), while
`torch.finfo(scores.dtype).min` is right for every dtype.
'''),
    ("exercise", "4.1", r'''
def scaled_dot_product_attention(q, k, v, mask=None, bias=None):
    """softmax(q k^T / sqrt(d_k) + bias) v, with an optional boolean mask.

    Args:
        q: float tensor ``(..., q_len, d_k)`` of queries.
        k: float tensor ``(..., k_len, d_k)`` of keys.
        v: float tensor ``(..., k_len, d_v)`` of values.
        mask: ``None`` or a torch.bool tensor broadcastable to
            ``(..., q_len, k_len)``; True = may attend, False = blocked.
        bias: ``None`` or a float tensor broadcastable to ``(..., q_len, k_len)``,
            added to the scaled scores; an entry ``-inf`` blocks that key.

    Returns:
        ``(out, weights)``: ``out`` ``(..., q_len, d_v)`` and ``weights``
        ``(..., q_len, k_len)``, rows summing to 1 over the allowed keys;
        blocked weights are exactly 0, and a row with no allowed key has zero
        weights and a zero output (no NaN).

    Raises:
        ValueError: ``q.shape[-1] != k.shape[-1]``; ``bias`` not floating point
            or not broadcastable to the score shape.

    Source: Vaswani et al. (2017), section 3.2.1, equation (1); the bias as in
    Raffel et al. (2020, T5) and Press et al. (2022, ALiBi); chapter 4.
    """
    ### BEGIN SOLUTION
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same d_k (last dim); got q {tuple(q.shape)}, k {tuple(k.shape)}")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])    # (..., q_len, k_len)
    allowed = mask
    if bias is not None:
        if not torch.is_tensor(bias) or not bias.is_floating_point():
            raise ValueError(f"bias must be a floating-point tensor (a boolean belongs in mask); got {getattr(bias, 'dtype', type(bias))}")
        fits = bias.dim() <= scores.dim() and all(b in (1, n) for b, n in zip(bias.shape[::-1], scores.shape[::-1]))
        if not fits:                                               # sizes compared from the right, as broadcasting does
            raise ValueError(f"bias of shape {tuple(bias.shape)} does not broadcast to the scores {tuple(scores.shape)}")
        finite = bias != float("-inf")
        scores = scores + bias.masked_fill(~finite, 0.0)
        allowed = finite if allowed is None else allowed & finite
    if allowed is not None:
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if allowed is not None:
        weights = weights.masked_fill(~allowed, 0.0)              # fully blocked rows -> all zeros
    return weights @ v, weights
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Without a bias your function must agree with PyTorch's fused attention and with the
course library. Then add ALiBi's bias: the weights fall off with the distance $|i - j|$, more
steeply in head 0 (slope $1/4$) than in head 3 (slope $1/256$). PyTorch takes the same bias as a
float `attn_mask`. Last, a bias whose row is all `-inf`.
'''),
    ("tryit", r'''
import course_lib.attention  # the course's own version, for this comparison only

gen = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 4, 6, 8, generator=gen) for _ in range(3))   # (batch, n_heads, seq_len, d_k)
out, weights = scaled_dot_product_attention(q, k, v, causal_mask(6))
print("no bias, causal: matches torch:", torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6),
      " matches course_lib:", torch.allclose(out, course_lib.attention.scaled_dot_product_attention(q, k, v, causal_mask(6))[0], atol=1e-6))

slopes = 2.0 ** (-8.0 * torch.arange(1, 5) / 4)                        # ALiBi slopes for 4 heads: 1/4 ... 1/256
distance = (torch.arange(6)[None, :] - torch.arange(6)[:, None]).abs()
alibi = -slopes[:, None, None] * distance                               # (n_heads, q_len, k_len)
q0 = torch.zeros(2, 4, 6, 8)                                            # zero queries: only the bias speaks
_, w_alibi = scaled_dot_product_attention(q0, k, v, bias=alibi)
for h in (0, 3):
    print(f"head {h}, query 0, slope {slopes[h]:.4f}:", [round(x, 3) for x in w_alibi[0, h, 0].tolist()])
out_b, _ = scaled_dot_product_attention(q, k, v, causal_mask(6), bias=alibi)
torch_b = F.scaled_dot_product_attention(q, k, v, attn_mask=alibi.masked_fill(~causal_mask(6)[0], float("-inf")))
print("bias + causal mask: matches torch:", torch.allclose(out_b, torch_b, atol=1e-6))

blocked = torch.zeros(6, 6)
blocked[2] = float("-inf")                                              # query 2 may see nothing
out_x, w_x = scaled_dot_product_attention(q, k, v, bias=blocked)
print("row of -inf -> weights", w_x[0, 0, 2].tolist(), " any NaN:", bool(out_x.isnan().any()))
'''),
    ("md", r'''
## Exercise 4.2 — single-head self-attention

In self-attention the queries, keys and values are three linear projections of the *same*
sequence $X$ (shape `(batch, seq_len, d_model)`), written as in the paper with the input on
the left:

$$Q = X W^Q,\quad K = X W^K,\quad V = X W^V,\qquad
\text{out} = \text{Attention}(Q, K, V)$$

with $W^Q, W^K \in \mathbb{R}^{d_{\text{model}} \times d_k}$ and
$W^V \in \mathbb{R}^{d_{\text{model}} \times d_v}$. Write
`self_attention(x, w_q, w_k, w_v, mask=None)` returning `(out, weights)` with `out` of shape
`(batch, seq_len, d_v)` and `weights` of shape `(batch, seq_len, seq_len)`; `mask` follows the
convention of exercise 4.1.

**Hints.** Three matrix products, then call your `scaled_dot_product_attention`. The scale is
$1/\sqrt{d_k}$ with $d_k$ = `w_q.shape[1]`, the width of the queries — not $d_{\text{model}}$.
'''),
    ("exercise", "4.2", r'''
def self_attention(x, w_q, w_k, w_v, mask=None):
    """Single-head self-attention with projection matrices (no biases).

    Args:
        x: float tensor ``(batch, seq_len, d_model)``.
        w_q, w_k: float tensors ``(d_model, d_k)``; ``w_v``: ``(d_model, d_v)``.
        mask: ``None`` or torch.bool, broadcastable to ``(batch, seq_len, seq_len)``;
            True = may attend.

    Returns:
        ``(out, weights)``: ``out`` ``(batch, seq_len, d_v)``, ``weights``
        ``(batch, seq_len, seq_len)``.

    Raises:
        ValueError: as ``scaled_dot_product_attention`` (mismatched d_k).

    Source: Vaswani et al. (2017), sections 3.2.1-3.2.2; chapter 4.
    """
    ### BEGIN SOLUTION
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return scaled_dot_product_attention(q, k, v, mask)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Every row of the weights is a probability distribution over the positions; with a
causal mask, position $i$ only looks at positions $\le i$. The last check compares with PyTorch's
fused attention applied to the projected inputs.
'''),
    ("tryit", r'''
gen = torch.Generator().manual_seed(1)
x = torch.randn(1, 4, 6, generator=gen)
w_q, w_k, w_v = (torch.randn(6, 3, generator=gen) / math.sqrt(6) for _ in range(3))
out, weights = self_attention(x, w_q, w_k, w_v, causal_mask(4)[0])
print("out shape:", tuple(out.shape), " weights shape:", tuple(weights.shape))
print("row sums:", [round(s, 6) for s in weights.sum(-1)[0].tolist()])
print(weights[0].round(decimals=3))
expected = F.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, is_causal=True)
print("matches torch:", torch.allclose(out, expected, atol=1e-6))
'''),
    ("md", r'''
## Exercise 4.3 — additive (Bahdanau) attention

Before the Transformer, attention in translation models was **additive** (Bahdanau, Cho &
Bengio, 2015): instead of a dot product, a small one-hidden-layer network scores each
query–key pair,

$$e_{ij} = w^{\top} \tanh\!\left(q_i W_q + k_j W_k\right), \qquad
\alpha_{ij} = \operatorname{softmax}_j(e_{ij}), \qquad \text{out}_i = \sum_j \alpha_{ij} v_j ,$$

with $W_q \in \mathbb{R}^{d_q \times d_{att}}$, $W_k \in \mathbb{R}^{d_k \times d_{att}}$ and
$w \in \mathbb{R}^{d_{att}}$. Section 3.2.1 of the paper compares the two: for small $d_k$ they
perform alike, dot-product attention is much faster (one matrix product), and *without* the
$1/\sqrt{d_k}$ scale additive attention wins for large $d_k$ — because dot products grow with
$d_k$ while $|e_{ij}| \le \lVert w \rVert_1$ whatever the width (each $\tanh$ lies in $(-1, 1)$).
The try-it cell measures both.

Write `additive_attention(q, k, v, w_q, w_k, w_score, mask=None)`:

* `q`: `(batch, q_len, d_q)`, `k`: `(batch, k_len, d_k)`, `v`: `(batch, k_len, d_v)` — `d_q` and
  `d_k` may differ (each side has its own matrix);
* `w_q`: `(d_q, d_att)`, `w_k`: `(d_k, d_att)`, `w_score`: `(d_att,)` (the vector $w$); used as
  `x @ w`, no biases, **no** $1/\sqrt{\cdot}$ scale;
* `mask`: `None` or bool broadcastable to `(batch, q_len, k_len)`, True = may attend; blocked keys
  get weight exactly 0, and a row with no allowed key gives zero weights and a zero output;
* returns `(out, weights)`: `(batch, q_len, d_v)` and `(batch, q_len, k_len)`;
* raises `ValueError` (naming the argument) when `w_q.shape[0] != d_q`, `w_k.shape[0] != d_k`, or
  `w_q`, `w_k`, `w_score` do not share `d_att`.

**Example.** `d_att = 1`, `w_q = [[1.]]`, `w_k = [[1.]]`, `w_score = [2.]`, one query `q = [[0.5]]`
and keys `k = [[0.5], [-0.5]]`: scores $2\tanh(1) = 1.523$ and $2\tanh(0) = 0$, weights
`[0.821, 0.179]`.

**Hints.** Project first: `q @ w_q` is `(batch, q_len, d_att)`, `k @ w_k` is `(batch, k_len, d_att)`.
Every pair $(i, j)$ needs their sum: insert axes so that they broadcast to
`(batch, q_len, k_len, d_att)` (`[:, :, None, :]` and `[:, None, :, :]`), apply `torch.tanh`, then
`@ w_score` removes the last axis. Masking works as in 4.1.
'''),
    ("exercise", "4.3", r'''
def additive_attention(q, k, v, w_q, w_k, w_score, mask=None):
    """Additive (Bahdanau) attention: scores w_score . tanh(q W_q + k W_k).

    Args:
        q: float ``(batch, q_len, d_q)``; k: ``(batch, k_len, d_k)``;
            v: ``(batch, k_len, d_v)``.
        w_q: ``(d_q, d_att)``; w_k: ``(d_k, d_att)``; w_score: ``(d_att,)``.
        mask: ``None`` or torch.bool broadcastable to ``(batch, q_len, k_len)``;
            True = may attend.

    Returns:
        ``(out, weights)``: ``(batch, q_len, d_v)`` and ``(batch, q_len, k_len)``;
        blocked weights exactly 0, a row with no allowed key all zeros.

    Raises:
        ValueError: widths of ``w_q``/``w_k`` do not match ``q``/``k``, or
            ``w_q``, ``w_k``, ``w_score`` do not share ``d_att``.

    Source: Bahdanau, Cho & Bengio (2015), section 3.1 and appendix A.1.2;
    Vaswani et al. (2017), section 3.2.1; chapter 4.
    """
    ### BEGIN SOLUTION
    if w_q.shape[0] != q.shape[-1]:
        raise ValueError(f"w_q must have d_q = {q.shape[-1]} rows (q's last dim); got w_q {tuple(w_q.shape)}")
    if w_k.shape[0] != k.shape[-1]:
        raise ValueError(f"w_k must have d_k = {k.shape[-1]} rows (k's last dim); got w_k {tuple(w_k.shape)}")
    if not (w_q.shape[1] == w_k.shape[1] == w_score.shape[-1]):
        raise ValueError(f"w_q, w_k and w_score must share d_att; got {tuple(w_q.shape)}, {tuple(w_k.shape)}, {tuple(w_score.shape)}")
    hidden = torch.tanh((q @ w_q)[:, :, None, :] + (k @ w_k)[:, None, :, :])   # (batch, q_len, k_len, d_att)
    scores = hidden @ w_score                                                   # (batch, q_len, k_len)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** First the worked example. Then the comparison of section 3.2.1: for growing width
$d$ (the width of queries and keys, and $d_{att}$), draw unit-variance queries and keys and
look at the spread of the scores. Unscaled dot products have standard deviation $\sqrt{d}$
(chapter 4's variance argument), scaled ones stay near 1; the additive scores stay bounded by
$\lVert w \rVert_1$ whatever $d$. The last column is the average largest weight of a row of
16 keys: near 1 means the softmax has saturated.
'''),
    ("tryit", r'''
out, w = additive_attention(torch.tensor([[[0.5]]]), torch.tensor([[[0.5], [-0.5]]]), torch.tensor([[[1.0], [0.0]]]),
                            torch.tensor([[1.0]]), torch.tensor([[1.0]]), torch.tensor([2.0]))
print("worked example: weights", [round(x, 3) for x in w[0, 0].tolist()], " out", round(out.item(), 3))

gen = torch.Generator().manual_seed(0)
print(f"{'d':>5} {'std q.k':>9} {'sqrt(d)':>8} {'std q.k/sqrt(d)':>16} {'max |additive|':>15} {'||w||_1':>8}"
      f"   max weight: dot / scaled / additive")
for d in (4, 16, 64, 256):
    q = torch.randn(200, 1, d, generator=gen)
    k = torch.randn(200, 16, d, generator=gen)
    w_q, w_k = torch.randn(d, d, generator=gen) / math.sqrt(d), torch.randn(d, d, generator=gen) / math.sqrt(d)
    w_score = torch.randn(d, generator=gen) / math.sqrt(d)
    dots = q @ k.transpose(-2, -1)                                       # (200, 1, 16), unscaled
    _, w_add = additive_attention(q, k, k, w_q, w_k, w_score)
    add_scores = torch.tanh((q @ w_q)[:, :, None] + (k @ w_k)[:, None]) @ w_score
    peaks = [s.softmax(-1).max(-1).values.mean().item() for s in (dots, dots / math.sqrt(d))] + [w_add.max(-1).values.mean().item()]
    print(f"{d:>5} {dots.std().item():>9.2f} {math.sqrt(d):>8.2f} {(dots / math.sqrt(d)).std().item():>16.3f} "
          f"{add_scores.abs().max().item():>15.3f} {w_score.abs().sum().item():>8.2f}   "
          + " / ".join(f"{p:.3f}" for p in peaks))
'''),
    ("md", r'''
## Exercise 4.4 — predict the spread of the scores

Footnote 4 of the paper: if the components of $q$ and $k$ are independent with mean 0 and
variance 1, then $q \cdot k$ has variance $d_k$ — which is why the scores are divided by
$\sqrt{d_k}$. In a real model the components do not all have variance 1: after a learned
projection some features are large and some small. Generalise the argument. Let $q_i$ and $k_i$
($i = 1 \dots d_k$) be independent, with mean 0 and standard deviations $\sigma^q_i$ and
$\sigma^k_i$. Predict the standard deviation of the unscaled score $q \cdot k$, and the scale $c$
for which $c\,(q \cdot k)$ has variance 1.

Write `dot_product_score_std(q_std, k_std)`:

* `q_std`, `k_std`: float tensors of the same shape `(..., d_k)` holding $\sigma^q_i$ and $\sigma^k_i$
  (the leading dimensions are independent problems, e.g. one per head);
* returns `(std, scale)`, both of shape `(...)`: the standard deviation of $q \cdot k$ and the
  scale $c = 1 / \text{std}$;
* raises `ValueError` (naming `q_std` and `k_std`) when the shapes differ or a standard deviation is
  negative.

**Example.** `q_std = k_std = torch.ones(64)` (the paper's $d_k = 64$) gives `std = 8` and
`scale = 0.125`, the paper's $1/\sqrt{d_k}$. `q_std = [2, 0]`, `k_std = [1, 5]` gives `std = 2`:
the second feature contributes nothing, because its query component is always 0.

**Hints.** For independent zero-mean $a$ and $b$: $\operatorname{Var}(ab) = \operatorname{Var}(a)\operatorname{Var}(b)$,
and variances of independent terms add. No sampling is needed — the answer is a closed form.
'''),
    ("exercise", "4.4", r'''
def dot_product_score_std(q_std, k_std):
    """Standard deviation of q . k for independent zero-mean components, and the scale to unit variance.

    Args:
        q_std: float tensor ``(..., d_k)``, the standard deviations of the query's components.
        k_std: float tensor of the same shape, those of the key's components.

    Returns:
        ``(std, scale)``: float tensors ``(...)``; ``std`` is the standard deviation of
        ``q . k`` and ``scale = 1 / std``.

    Raises:
        ValueError: shapes differ, or a standard deviation is negative.

    Source: Vaswani et al. (2017), section 3.2.1 and footnote 4; chapter 4.
    """
    ### BEGIN SOLUTION
    if q_std.shape != k_std.shape:
        raise ValueError(f"q_std and k_std must have the same shape; got {tuple(q_std.shape)} and {tuple(k_std.shape)}")
    if (q_std < 0).any() or (k_std < 0).any():
        raise ValueError("q_std and k_std must be non-negative standard deviations")
    std = torch.sqrt((q_std**2 * k_std**2).sum(dim=-1))
    return std, 1.0 / std
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Check your prediction by sampling: 100,000 pairs $(q, k)$ drawn with the given
standard deviations, their measured spread, and the spread after your scale. Then the paper's
case, unit variances, for growing $d_k$: the unscaled spread grows like $\sqrt{d_k}$.
'''),
    ("tryit", r'''
gen = torch.Generator().manual_seed(0)
q_std = torch.tensor([2.0, 1.0, 0.5, 0.1, 3.0, 1.0, 0.0, 1.5])
k_std = torch.tensor([0.5, 1.0, 2.0, 4.0, 1.0, 0.3, 7.0, 1.0])
std, scale = dot_product_score_std(q_std, k_std)
q = torch.randn(100_000, 8, generator=gen, dtype=torch.float64) * q_std
k = torch.randn(100_000, 8, generator=gen, dtype=torch.float64) * k_std
dots = (q * k).sum(-1)
print(f"predicted std {float(std):.4f}, measured {dots.std().item():.4f}; after the scale: {(float(scale) * dots).std().item():.4f}")
print(f"1/sqrt(d_k) would give {(dots / math.sqrt(8)).std().item():.4f}")
for d_k in (4, 64, 512):
    std_d, scale_d = dot_product_score_std(torch.ones(d_k), torch.ones(d_k))
    print(f"d_k = {d_k:>3}: std of q.k = {float(std_d):6.2f}, scale = {float(scale_d):.4f} = 1/sqrt({d_k})")
'''),
]
