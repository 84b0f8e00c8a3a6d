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
## Exercise 5.1 — split the heads, for any leading dimensions

Multi-head attention runs $h$ attentions side by side, each on its own slice of width
$d_k = d_{\text{model}} / h$ (section 3.2.2): the first $d_k$ features of every position go to
head 0, the next $d_k$ to head 1, and so on, and the heads then become a dimension of their own.
The chapter's `MultiHeadAttention.split_heads` does this for a `(batch, seq_len, d_model)` tensor.
Real code meets other shapes: one unbatched sequence `(seq_len, d_model)` in a demo, or
`(batch, beam, seq_len, d_model)` during beam search (chapter 10). Write a version that works for
**any number of leading dimensions**:

$$(\dots, \text{seq\_len}, d_{\text{model}}) \;\to\; (\dots, \text{seq\_len}, h, d_k)
\;\to\; (\dots, h, \text{seq\_len}, d_k)$$

Write `split_heads(x, n_heads)`: `out[..., i, t, :] == x[..., t, i*d_k:(i+1)*d_k]`. Raise
`ValueError` when `x` has fewer than 2 dimensions, or when `d_model` is not divisible by `n_heads`
(say both numbers in the message).

**Example.** `x` of shape `(3, 8)` (no batch), `n_heads = 2` → shape `(2, 3, 4)`; `out[1, 0]` is
`x[0, 4:8]`. `x` of shape `(2, 3, 5, 8)` → `(2, 3, 2, 5, 4)`.

**Hints.** `x.shape[:-2]` is the tuple of leading dimensions, whatever its length:
`x.reshape(*x.shape[:-1], n_heads, d_k)` then `.transpose(-3, -2)`. Unpacking
`batch, seq_len, d_model = x.shape` works for 3-D inputs only.
'''),
    ("exercise", "5.1", r'''
def split_heads(x, n_heads):
    """Split the feature dimension into heads, for any leading dimensions.

    Args:
        x: float tensor ``(..., seq_len, d_model)`` (at least 2-D).
        n_heads: number of heads ``h``; must divide ``d_model``.

    Returns:
        float tensor ``(..., n_heads, seq_len, d_k)`` with ``d_k = d_model // n_heads``;
        ``out[..., i, t, :] == x[..., t, i*d_k:(i+1)*d_k]``.

    Raises:
        ValueError: ``x`` has fewer than 2 dims, or ``d_model % n_heads != 0``.

    Source: Vaswani et al. (2017), section 3.2.2; chapter 5.
    """
    ### BEGIN SOLUTION
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., seq_len, d_model); got {tuple(x.shape)}")
    d_model = x.shape[-1]
    if n_heads < 1 or d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    return x.reshape(*x.shape[:-1], n_heads, d_model // n_heads).transpose(-3, -2)
    ### END SOLUTION
'''),
    ("md", r'''
## Exercise 5.2 — merge the heads, for any leading dimensions

The inverse: `(..., n_heads, seq_len, d_k)` → `(..., seq_len, n_heads * d_k)`, head $i$ filling
the features $i d_k, \dots, (i+1) d_k - 1$ — the *Concat* of
$\text{Concat}(\text{head}_1, \dots, \text{head}_h) W^O$. Write `merge_heads(x)` for any number of
leading dimensions; raise `ValueError` when `x` has fewer than 3 dimensions.

**Example.** `(4, 3, 2)` (4 heads, 3 positions, `d_k = 2`, no batch) → `(3, 8)`;
`(2, 3, 4, 5, 6)` (batch 2, beam 3, 4 heads) → `(2, 3, 5, 24)`.

**Hints.** `.transpose(-3, -2)` first. A transposed tensor is not contiguous in memory, so `.view`
refuses it: use `.reshape`, or `.contiguous().view(...)`.
'''),
    ("exercise", "5.2", r'''
def merge_heads(x):
    """Concatenate the heads back into one feature dimension, for any leading dimensions.

    Args:
        x: float tensor ``(..., n_heads, seq_len, d_k)`` (at least 3-D).

    Returns:
        float tensor ``(..., seq_len, n_heads * d_k)``; the inverse of ``split_heads``.

    Raises:
        ValueError: ``x`` has fewer than 3 dims.

    Source: Vaswani et al. (2017), section 3.2.2 (Concat); chapter 5.
    """
    ### BEGIN SOLUTION
    if x.dim() < 3:
        raise ValueError(f"x must have shape (..., n_heads, seq_len, d_k); got {tuple(x.shape)}")
    n_heads, seq_len, d_k = x.shape[-3:]
    return x.transpose(-3, -2).reshape(*x.shape[:-3], seq_len, n_heads * d_k)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** A round trip gives back the input, for 2-D, 3-D and 4-D inputs; on 3-D inputs your
split agrees with the library's `MultiHeadAttention.split_heads`. Position 1's features 4…7 must
land in head 1.
'''),
    ("tryit", r'''
for shape in [(3, 8), (2, 3, 8), (2, 4, 3, 8)]:
    x = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    heads = split_heads(x, 2)
    print(f"{str(shape):>14} -> {str(tuple(heads.shape)):>16}  round trip ok: {torch.equal(merge_heads(heads), x)}")
x = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8)
print("same as course_lib on (batch, seq_len, d_model):", torch.equal(split_heads(x, 2), MultiHeadAttention(8, 2).split_heads(x)))
print("head 1, position 1 of batch 0:", split_heads(x, 2)[0, 1, 1].tolist(), "== x[0, 1, 4:8]:", x[0, 1, 4:8].tolist())
'''),
    ("md", r'''
## Exercise 5.3 — multi-head attention from a fused, per-head QKV weight

Section 3.2.2, figure 2:

$$\text{MultiHead}(Q, K, V) = \text{Concat}(\text{head}_1, \dots, \text{head}_h)\, W^O,\qquad
\text{head}_i = \text{Attention}(Q W^Q_i, K W^K_i, V W^V_i)$$

The chapter's fused projection stacks three whole matrices, $[W^Q \mid W^K \mid W^V]$. Many
checkpoints (Megatron-LM, GPT-NeoX) store the fused weight **per head** instead: the
$3 d_{\text{model}}$ columns are ordered (head, which of q/k/v, feature), so head 0's query, key
and value columns come first, then head 1's, and so on. Viewed as
`w_qkv.view(d_model, n_heads, 3, d_k)`:

* `[:, i, 0, :]` is $W^Q_i$, `[:, i, 1, :]` is $W^K_i$, `[:, i, 2, :]` is $W^V_i$ (each `(d_model, d_k)`).

Write `multi_head_attention(query, key, value, w_qkv, w_o, n_heads, mask=None)`:

* `query`: `(batch, q_len, d_model)`; `key`, `value`: `(batch, k_len, d_model)` (the same
  tensor as `query` for self-attention, the encoder output for cross-attention — so project
  `query` with the query columns, `key` with the key columns, `value` with the value columns);
* `w_qkv`: `(d_model, 3 * d_model)` in the per-head layout above; `w_o`: `(d_model, d_model)`;
  used as `x @ w` (no biases);
* `mask`: `None` or bool, broadcastable to `(batch, n_heads, q_len, k_len)`, True = may attend;
* returns `(out, weights)`: `out` `(batch, q_len, d_model)`, `weights`
  `(batch, n_heads, q_len, k_len)`.

**Example.** `d_model = 4`, `n_heads = 2` (`d_k = 2`): columns 0–1 of `w_qkv` are $W^Q_0$, 2–3
$W^K_0$, 4–5 $W^V_0$, 6–7 $W^Q_1$, 8–9 $W^K_1$, 10–11 $W^V_1$.

**Hints.** Rebuild the three ordinary `(d_model, d_model)` matrices: `w = w_qkv.view(d_model, n_heads, 3, d_k)`,
then `w[:, :, 0, :].reshape(d_model, d_model)` is $W^Q$ with head $i$ in columns
$i d_k \dots (i+1) d_k - 1$ — the layout your `split_heads` expects. Then project, split, attend
per head (the course library's `scaled_dot_product_attention`, imported above as
`library_attention`), merge, multiply by `w_o`. Slicing `w_qkv[:, :d_model]` as $W^Q$ is the
library's layout, not this one.
'''),
    ("exercise", "5.3", r'''
def multi_head_attention(query, key, value, w_qkv, w_o, n_heads, mask=None):
    """Multi-head attention from a fused per-head QKV weight (no biases).

    Args:
        query: float ``(batch, q_len, d_model)``.
        key, value: float ``(batch, k_len, d_model)``.
        w_qkv: float ``(d_model, 3 * d_model)``; ``w_qkv.view(d_model, n_heads, 3, d_k)[:, i, j]``
            is head i's query (j=0), key (j=1) or value (j=2) matrix ``(d_model, d_k)``.
        w_o: float ``(d_model, d_model)``, applied as ``x @ w_o``.
        n_heads: number of heads; must divide ``d_model``.
        mask: ``None`` or torch.bool broadcastable to
            ``(batch, n_heads, q_len, k_len)``; True = may attend.

    Returns:
        ``(out, weights)``: ``out`` ``(batch, q_len, d_model)``, ``weights``
        ``(batch, n_heads, q_len, k_len)`` (per head, before ``w_o``).

    Raises:
        ValueError: ``d_model`` not divisible by ``n_heads`` (from ``split_heads``).

    Source: Vaswani et al. (2017), section 3.2.2, figure 2; the per-head fused
    layout of Megatron-LM / GPT-NeoX; chapter 5.
    """
    ### BEGIN SOLUTION
    d_model = query.shape[-1]
    if n_heads < 1 or d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    per_head = w_qkv.reshape(d_model, n_heads, 3, d_model // n_heads)
    w_q, w_k, w_v = (per_head[:, :, j, :].reshape(d_model, d_model) for j in range(3))
    q = split_heads(query @ w_q, n_heads)                        # (batch, h, q_len, d_k)
    k = split_heads(key @ w_k, n_heads)                          # (batch, h, k_len, d_k)
    v = split_heads(value @ w_v, n_heads)
    out, weights = library_attention(q, k, v, mask)              # (batch, h, q_len, d_k)
    return merge_heads(out) @ w_o, weights
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The library's `MultiHeadAttention` stores its projections as `nn.Linear` layers, which
compute `x @ weight.T`. Below, its three weights are interleaved into the per-head layout; your
function must give the library's output, here with a causal mask. The last line shows what
the library's own layout (three stacked blocks) gives when read per head: a different answer,
and nothing raises.
'''),
    ("tryit", r'''
torch.manual_seed(0)
mha = MultiHeadAttention(d_model=16, n_heads=4, bias=False).eval()
x = torch.randn(2, 5, 16)
mask = causal_mask(5)
w_q, w_k, w_v, w_o = (lin.weight.T for lin in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj))
per_head = torch.stack([w.reshape(16, 4, 4) for w in (w_q, w_k, w_v)], dim=2).reshape(16, 48)  # (d_model, h, 3, d_k)
stacked = torch.cat([w_q, w_k, w_v], dim=1)                                                   # the library's layout
with torch.no_grad():
    mine, my_weights = multi_head_attention(x, x, x, per_head, w_o, 4, mask)
    mha.record_weights = True
    ref, ref_weights = mha(x, mask=mask), mha.last_weights
    misread, _ = multi_head_attention(x, x, x, stacked, w_o, 4, mask)
print("out:", tuple(mine.shape), " weights:", tuple(my_weights.shape))
print("matches course_lib:", torch.allclose(mine, ref, atol=1e-6), torch.allclose(my_weights, ref_weights, atol=1e-6))
print("stacked layout read per head matches:", torch.allclose(misread, ref, atol=1e-6))
'''),
    ("md", r'''
## Exercise 5.4 — head importance by ablation

Are all heads needed? Michel, Levy & Neubig (2019, "Are Sixteen Heads Really Better than One?")
switched heads off one at a time and found that many can go with little loss. The simplest
measure of a head's importance for one input is how much the layer's **output** moves when that
head is removed: replace head $h$'s attention output by zeros before the concatenation and
$W^O$, and compare with the full output,

$$\text{effect}_h = \frac{1}{B \cdot L} \sum_{b, t} \bigl\lVert \text{out}_{b,t} - \text{out}^{(-h)}_{b,t} \bigr\rVert_2 .$$

Write `head_ablation_effect(x, w_q, w_k, w_v, w_o, n_heads, mask=None)` for **self-attention**:

* `x`: `(batch, seq_len, d_model)`; `w_q, w_k, w_v, w_o`: `(d_model, d_model)` as `x @ w`, no
  biases; head $h$ owns columns $h d_k \dots (h+1) d_k - 1$ of `w_q`, `w_k`, `w_v`;
* `mask`: `None` or bool broadcastable to `(batch, n_heads, seq_len, seq_len)`, True = may attend;
* returns a float tensor `(n_heads,)`: `effect[h]` as above — the L2 norm over the `d_model`
  features at each (batch, position), averaged over all `batch * seq_len` positions (padded
  positions included);
* raises `ValueError` naming `d_model` and `n_heads` when `n_heads` does not divide `d_model`.

Write it self-contained (its own projections and attention, no call to 5.1–5.3).

**Example.** With one head, removing it leaves $W^O$ nothing to mix: `effect[0]` is the mean
norm of the whole output.

**Hints.** Compute each head's output `(batch, seq_len, d_k)` once; the full output is their
concatenation times `w_o`. Removing head $h$ takes away exactly its share
$\text{head}_h W^O_h$ (rows $h d_k \dots$ of `w_o`, chapter 5's "why $W^O$" section) — you may use
that, or recompute the ablated output. Zeroing a head's *query* is not removing it: the head then
attends uniformly and still writes a value average.
'''),
    ("exercise", "5.4", r'''
def head_ablation_effect(x, w_q, w_k, w_v, w_o, n_heads, mask=None):
    """How much the self-attention output moves when each head's output is zeroed.

    Args:
        x: float ``(batch, seq_len, d_model)``.
        w_q, w_k, w_v, w_o: float ``(d_model, d_model)``, applied as ``x @ w``.
        n_heads: number of heads; must divide ``d_model``.
        mask: ``None`` or torch.bool broadcastable to
            ``(batch, n_heads, seq_len, seq_len)``; True = may attend.

    Returns:
        float tensor ``(n_heads,)``: ``effect[h]`` = mean over (batch, position) of
        ``||out - out_without_head_h||_2`` (norm over ``d_model``).

    Raises:
        ValueError: ``d_model % n_heads != 0``.

    Source: Michel, Levy & Neubig (2019); Vaswani et al. (2017), section 3.2.2; chapter 5.
    """
    ### BEGIN SOLUTION
    batch, seq_len, d_model = x.shape
    if n_heads < 1 or d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    d_k = d_model // n_heads

    def heads(t):                                                # (batch, seq_len, d_model) -> (batch, h, seq_len, d_k)
        return t.reshape(batch, seq_len, n_heads, d_k).transpose(1, 2)

    q, k, v = heads(x @ w_q), heads(x @ w_k), heads(x @ w_v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    per_head = weights @ v                                       # (batch, h, seq_len, d_k)
    w_o_blocks = w_o.reshape(n_heads, d_k, d_model)              # W^O_h: rows h*d_k ... of w_o
    share = torch.einsum("bhtd,hdm->bhtm", per_head, w_o_blocks) # head h's contribution to the output
    return torch.linalg.vector_norm(share, dim=-1).mean(dim=(0, 2))
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Take a layer whose head 2 is made ten times louder (its value columns scaled up)
and whose head 0 is silenced (its value columns zero): the ablation effects must find both.
'''),
    ("tryit", r'''
gen = torch.Generator().manual_seed(3)
d_model, n_heads = 16, 4
x = torch.randn(2, 6, d_model, generator=gen)
w_q, w_k, w_v, w_o = (torch.randn(d_model, d_model, generator=gen) / math.sqrt(d_model) for _ in range(4))
w_v = w_v.clone()
w_v[:, 8:12] *= 10.0                                          # head 2 (columns 8-11) made louder
w_v[:, 0:4] = 0.0                                             # head 0 writes nothing
effect = head_ablation_effect(x, w_q, w_k, w_v, w_o, n_heads, causal_mask(6))
print("effect per head:", [round(e, 3) for e in effect.tolist()])
print("most important head:", int(effect.argmax()), " least important:", int(effect.argmin()))
'''),
]
