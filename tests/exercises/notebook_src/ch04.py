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
## Exercise 4.1 — scaled dot-product attention, with masks

Equation (1) of the paper:

$$\text{Attention}(Q, K, V) = \text{softmax}\!\left(\frac{Q K^{\top}}{\sqrt{d_k}}\right) V$$

Each of the `q_len` queries scores every one of the `k_len` keys, the softmax over the keys turns
the scores into weights that sum to 1, and the output is the weighted average of the values.

**The course's mask convention** (chapter 8, and `torch.nn.functional.scaled_dot_product_attention`):
a mask is a `torch.bool` tensor broadcastable to the score shape `(..., q_len, k_len)`;
`True` means *may attend*, `False` means *blocked*. A blocked entry gets weight exactly 0.
**A query row in which every key is blocked must give zero weights and a zero output — never NaN.**

Write `scaled_dot_product_attention(q, k, v, mask=None)`:

* `q`: `(..., q_len, d_k)`, `k`: `(..., k_len, d_k)`, `v`: `(..., k_len, d_v)` — the leading
  dimensions `...` are e.g. `(batch,)` or `(batch, n_heads)`;
* returns `(out, weights)`: `out` of shape `(..., q_len, d_v)` and the weights
  `(..., q_len, k_len)`;
* raises `ValueError` when `q` and `k` have different `d_k`.

**Hints.** `k.transpose(-2, -1)` swaps the last two dimensions. Filling blocked scores with
`-inf` makes a fully blocked row `softmax([-inf, -inf]) = [nan, nan]`; fill them instead with
the most negative *finite* number, `torch.finfo(scores.dtype).min`, and after the softmax set
the blocked weights to 0 with `weights.masked_fill(~mask, 0.0)`.
The checker also runs your function on `float16` and `bfloat16` inputs: a fill value such as
`-1e9` does not fit in `float16` (its most negative finite number is -65504), while
`torch.finfo(scores.dtype).min` is right for every dtype.
'''),
    ("exercise", "4.1", r'''
def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d_k)) v, with an optional boolean mask.

    Args:
        q: float tensor ``(..., q_len, d_k)`` of queries.
        k: float tensor ``(..., k_len, d_k)`` of keys.
        v: float tensor ``(..., k_len, d_v)`` of values.
        mask: ``None`` or a torch.bool tensor broadcastable to
            ``(..., q_len, k_len)``; True = may attend, False = blocked.

    Returns:
        ``(out, weights)``: ``out`` ``(..., q_len, d_v)`` and ``weights``
        ``(..., q_len, k_len)``, rows summing to 1 over the allowed keys;
        blocked weights are exactly 0, and a row with no allowed key has zero
        weights and a zero output (no NaN).

    Raises:
        ValueError: ``q.shape[-1] != k.shape[-1]``.

    Source: Vaswani et al. (2017), section 3.2.1, equation (1); chapter 4.
    """
    ### BEGIN SOLUTION
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same d_k (last dim); got q {tuple(q.shape)}, k {tuple(k.shape)}")
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)            # (..., q_len, k_len)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)                 # fully blocked rows -> all zeros
    return weights @ v, weights
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Compare with PyTorch's fused attention and with the course library on a causal mask
(`course_lib.masks.causal_mask`), then block *every* key of one query row and look at that row.
'''),
    ("tryit", r'''
import course_lib.attention  # the course's own version, for this comparison only

gen = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 5, 8, generator=gen) for _ in range(3))
mask = causal_mask(5)[0]                                   # (1, 5, 5): True on and below the diagonal
out, weights = scaled_dot_product_attention(q, k, v, mask)
print("matches torch:", torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-6))
print("matches course_lib:", torch.allclose(out, course_lib.attention.scaled_dot_product_attention(q, k, v, mask)[0], atol=1e-6))
print("weights of query 2 (batch 0):", [round(w, 3) for w in weights[0, 2].tolist()])

blocked = mask.clone().expand(2, 5, 5).clone()
blocked[0, 1] = False                                      # query 1 of batch 0 may see nothing
out, weights = scaled_dot_product_attention(q, k, v, blocked)
print("fully blocked row -> weights", weights[0, 1].tolist(), "output all zero:", bool((out[0, 1] == 0).all()))
print("any NaN:", bool(out.isnan().any()))
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
]
