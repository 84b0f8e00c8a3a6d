"""Source of exercises/05_multi_head_attention.ipynb and its solution (see build_notebooks.py)."""

CHAPTER = "05"
NOTEBOOK = "05_multi_head_attention.ipynb"
TITLE = "multi-head attention"

CELLS = [
    ("code", r'''
import math
import sys

import torch

from course_lib.attention import MultiHeadAttention
from course_lib.attention import scaled_dot_product_attention as library_attention
from course_lib.masks import causal_mask
'''),
    ("md", r'''
## Exercise 5.1 — split the heads

Multi-head attention runs $h$ attentions side by side, each on its own slice of width
$d_k = d_{\text{model}} / h$ (section 3.2.2). After the projections, a tensor of shape
`(batch, seq_len, d_model)` is cut into heads: the first $d_k$ features of every position go to
head 0, the next $d_k$ to head 1, and so on; the heads then become a dimension of their own:

$$(\text{batch}, \text{seq\_len}, d_{\text{model}}) \;\to\; (\text{batch}, \text{seq\_len}, h, d_k)
\;\to\; (\text{batch}, h, \text{seq\_len}, d_k)$$

Write `split_heads(x, n_heads)`. Raise `ValueError` when `x` is not 3-D, or when `d_model` is not
divisible by `n_heads` (say both numbers in the message).

**Hints.** `x.view(batch, seq_len, n_heads, d_k)` (or `reshape`) then `.transpose(1, 2)`.
Reshaping *directly* to `(batch, n_heads, seq_len, d_k)` gives the right shape and the wrong
result: it mixes positions into heads.
'''),
    ("exercise", "5.1", r'''
def split_heads(x, n_heads):
    """Split the feature dimension into heads.

    Args:
        x: float tensor ``(batch, seq_len, d_model)``.
        n_heads: number of heads ``h``; must divide ``d_model``.

    Returns:
        float tensor ``(batch, n_heads, seq_len, d_k)`` with ``d_k = d_model // n_heads``;
        ``out[b, i, t, :] == x[b, t, i*d_k:(i+1)*d_k]``.

    Raises:
        ValueError: ``x`` is not 3-D, or ``d_model % n_heads != 0``.

    Source: Vaswani et al. (2017), section 3.2.2; chapter 5.
    """
    ### BEGIN SOLUTION
    if x.dim() != 3:
        raise ValueError(f"x must have shape (batch, seq_len, d_model); got {tuple(x.shape)}")
    batch, seq_len, d_model = x.shape
    if n_heads < 1 or d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    return x.reshape(batch, seq_len, n_heads, d_model // n_heads).transpose(1, 2)
    ### END SOLUTION
'''),
    ("md", r'''
## Exercise 5.2 — merge the heads

The inverse: `(batch, n_heads, seq_len, d_k)` → `(batch, seq_len, n_heads * d_k)`, head $i$
filling the features $i d_k, \dots, (i+1) d_k - 1$ — the *Concat* of
$\text{Concat}(\text{head}_1, \dots, \text{head}_h) W^O$. Write `merge_heads(x)`; raise
`ValueError` when `x` is not 4-D.

**Hints.** `.transpose(1, 2)` first. A transposed tensor is not contiguous in memory, so `.view`
refuses it: use `.reshape`, or `.contiguous().view(...)`.
'''),
    ("exercise", "5.2", r'''
def merge_heads(x):
    """Concatenate the heads back into one feature dimension.

    Args:
        x: float tensor ``(batch, n_heads, seq_len, d_k)``.

    Returns:
        float tensor ``(batch, seq_len, n_heads * d_k)``; the inverse of
        ``split_heads``.

    Raises:
        ValueError: ``x`` is not 4-D.

    Source: Vaswani et al. (2017), section 3.2.2 (Concat); chapter 5.
    """
    ### BEGIN SOLUTION
    if x.dim() != 4:
        raise ValueError(f"x must have shape (batch, n_heads, seq_len, d_k); got {tuple(x.shape)}")
    batch, n_heads, seq_len, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, seq_len, n_heads * d_k)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** A round trip gives back the input, and your split agrees with the library's
`MultiHeadAttention.split_heads`. Position 1's features 4…7 must land in head 1.
'''),
    ("tryit", r'''
x = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8)
heads = split_heads(x, 2)
print("split:", tuple(heads.shape), " round trip ok:", torch.equal(merge_heads(heads), x))
print("same as course_lib:", torch.equal(heads, MultiHeadAttention(8, 2).split_heads(x)))
print("head 1, position 1 of batch 0:", heads[0, 1, 1].tolist(), "== x[0, 1, 4:8]:", x[0, 1, 4:8].tolist())
'''),
    ("md", r'''
## Exercise 5.3 — multi-head attention

Put it together (section 3.2.2, figure 2):

$$\text{MultiHead}(Q, K, V) = \text{Concat}(\text{head}_1, \dots, \text{head}_h)\, W^O,\qquad
\text{head}_i = \text{Attention}(Q W^Q_i, K W^K_i, V W^V_i)$$

The $h$ per-head projections $W^Q_i \in \mathbb{R}^{d_{\text{model}} \times d_k}$ are the column
blocks of one matrix $W^Q \in \mathbb{R}^{d_{\text{model}} \times d_{\text{model}}}$, so: project
with the full matrix, then split into heads. Write
`multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None)`:

* `query`: `(batch, q_len, d_model)`; `key`, `value`: `(batch, k_len, d_model)` (the same
  tensor as `query` for self-attention, the encoder output for cross-attention);
* `w_q, w_k, w_v, w_o`: `(d_model, d_model)`, used as `x @ w` (no biases);
* `mask`: `None` or bool, broadcastable to `(batch, n_heads, q_len, k_len)`, True = may attend;
* returns `(out, weights)`: `out` `(batch, q_len, d_model)`, `weights`
  `(batch, n_heads, q_len, k_len)`.

**Hints.** `split_heads(query @ w_q, n_heads)` and so on; attention per head is just attention
on 4-D tensors (use your 5.1/5.2 and the course library's `scaled_dot_product_attention`,
imported above as `library_attention` — you wrote it in chapter 4); then `merge_heads(...) @ w_o`.
'''),
    ("exercise", "5.3", r'''
def multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """Multi-head attention from explicit projection matrices (no biases).

    Args:
        query: float ``(batch, q_len, d_model)``.
        key, value: float ``(batch, k_len, d_model)``.
        w_q, w_k, w_v, w_o: float ``(d_model, d_model)``, applied as ``x @ w``.
        n_heads: number of heads; must divide ``d_model``.
        mask: ``None`` or torch.bool broadcastable to
            ``(batch, n_heads, q_len, k_len)``; True = may attend.

    Returns:
        ``(out, weights)``: ``out`` ``(batch, q_len, d_model)``, ``weights``
        ``(batch, n_heads, q_len, k_len)`` (per head, before ``w_o``).

    Raises:
        ValueError: ``d_model`` not divisible by ``n_heads`` (from ``split_heads``).

    Source: Vaswani et al. (2017), section 3.2.2, figure 2; chapter 5.
    """
    ### BEGIN SOLUTION
    q = split_heads(query @ w_q, n_heads)                        # (batch, h, q_len, d_k)
    k = split_heads(key @ w_k, n_heads)                          # (batch, h, k_len, d_k)
    v = split_heads(value @ w_v, n_heads)
    out, weights = library_attention(q, k, v, mask)              # (batch, h, q_len, d_k)
    return merge_heads(out) @ w_o, weights
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The library's `MultiHeadAttention` stores its projections as `nn.Linear` layers,
which compute `x @ weight.T`; handing your function the transposed weights must give the same
output, here with a causal mask.
'''),
    ("tryit", r'''
torch.manual_seed(0)
mha = MultiHeadAttention(d_model=16, n_heads=4, bias=False).eval()
x = torch.randn(2, 5, 16)
mask = causal_mask(5)
w_q, w_k, w_v, w_o = (lin.weight.T for lin in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj))
with torch.no_grad():
    mine, my_weights = multi_head_attention(x, x, x, w_q, w_k, w_v, w_o, 4, mask)
    ref, ref_weights = mha(x, mask=mask, need_weights=True)
print("out:", tuple(mine.shape), " weights:", tuple(my_weights.shape))
print("matches course_lib:", torch.allclose(mine, ref, atol=1e-6), torch.allclose(my_weights, ref_weights, atol=1e-6))
'''),
]
