"""Source of exercises/13_modern_block.ipynb and its solution (see build_notebooks.py)."""

CHAPTER = "13"
NOTEBOOK = "13_modern_block.ipynb"
TITLE = "today's block: interleaved RoPE, grouped-query attention, the KV cache's memory, a Llama-style parameter count"

CELLS = [
    ("code", r'''
import math
import sys

import torch
import torch.nn.functional as F

import course_lib.positional
'''),
    ("md", r'''
Chapter 13 turns the 2017 block into today's (Llama's) block with a few switches: RMSNorm, rotary
position embeddings, SwiGLU, grouped-query attention, no biases. These exercises write two of
those switches in another formulation than the library's, and two computations that say what the
switches cost or save.

## Exercise 13.1 — RoPE with interleaved pairs

`course_lib.positional.apply_rope` turns the feature pairs `(x[i], x[i + d/2])` (the "rotate-half"
layout of Hugging Face's Llama and GPT-NeoX). The RoFormer paper, GPT-J and Meta's original Llama
code pair **neighbours** instead: pair $i$ is $(x_{2i}, x_{2i+1})$, $0 \le i < d/2$, and at position
$m$ it turns by the angle $m\,\theta_i$ with $\theta_i = \text{base}^{-2i/d}$:

$$\begin{pmatrix} y_{2i} \\ y_{2i+1} \end{pmatrix} =
\begin{pmatrix} \cos m\theta_i & -\sin m\theta_i \\ \sin m\theta_i & \cos m\theta_i \end{pmatrix}
\begin{pmatrix} x_{2i} \\ x_{2i+1} \end{pmatrix}.$$

The two layouts are the same rotation of differently ordered features, but a checkpoint written
for one gives wrong attention in the other: the weights of one must be permuted to load into the
other.

Write `rope_interleaved(x, positions, base=10000.0)`: `x` is a float tensor of shape
`(..., seq_len, d_head)` (any leading dimensions: batch, heads), `positions` a 1-D integer tensor of
length `seq_len` (the position of each row: `torch.arange(seq_len)` for a prompt, `offset + ...`
with a KV cache). Return the rotated tensor, same shape and dtype as `x`.

Raise `ValueError` naming `x` when it has fewer than 2 dimensions or an odd `d_head`, and naming
`positions` when it is not 1-D of length `seq_len`.

Example: `d_head = 4`, `x = [1, 0, 1, 0]` at position 1 with `base = 10000`: pair 0 turns by 1 radian
(`[cos 1, sin 1] = [0.5403, 0.8415]`), pair 1 by $10000^{-1/2} = 0.01$ radian (`[0.99995, 0.0099998]`).

**Hints.** `x[..., 0::2]` and `x[..., 1::2]` are the two members of every pair; the angles
`positions[:, None] * theta[None, :]` have shape `(seq_len, d_head / 2)`; put the results back with
`torch.stack((y_even, y_odd), dim=-1).flatten(-2)`. (Or: complex numbers, `torch.view_as_complex`.)
'''),
    ("exercise", "13.1", r'''
def rope_interleaved(x, positions, base=10000.0):
    """Rotary position embedding with neighbouring pairs (x[2i], x[2i+1]) (RoFormer, GPT-J, Meta's Llama).

    Args:
        x: float ``(..., seq_len, d_head)``, ``d_head`` even.
        positions: 1-D integer tensor ``(seq_len,)``, the position of each row.
        base: the wavelength base; pair ``i`` turns by ``position * base ** (-2 i / d_head)``.

    Returns:
        The rotated tensor, the shape and dtype of ``x``.

    Raises:
        ValueError: ``x`` with fewer than 2 dims or an odd last dim; ``positions`` not 1-D of length ``seq_len``.

    Source: chapter 13 (RoPE); Su et al. (2021), "RoFormer", equation (34).
    """
    ### BEGIN SOLUTION
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.size(-1) % 2:
        raise ValueError(f"x must be (..., seq_len, d_head) with an even d_head; got {getattr(x, 'shape', type(x).__name__)}")
    if not isinstance(positions, torch.Tensor) or positions.dim() != 1 or len(positions) != x.size(-2):
        raise ValueError(f"positions must be 1-D of length seq_len = {x.size(-2)}; got {getattr(positions, 'shape', type(positions).__name__)}")
    d = x.size(-1)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)         # (d/2,)
    angle = positions.double()[:, None] * theta[None, :]                     # (seq_len, d/2)
    cos, sin = angle.cos(), angle.sin()
    even, odd = x[..., 0::2].double(), x[..., 1::2].double()                  # (..., seq_len, d/2)
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (..., seq_len, d/2, 2)
    return rotated.flatten(-2).to(x.dtype)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The point of RoPE: the score of a rotated query and key depends only on the distance
between their positions. Move both by the same amount and the score stays; and the library's
rotate-half layout gives the same result once the features are reordered.
'''),
    ("tryit", r'''
g = torch.Generator().manual_seed(0)
q, k = torch.randn(8, generator=g), torch.randn(8, generator=g)
for m, n in ((5, 2), (105, 102), (2, 5)):
    score = rope_interleaved(q[None], torch.tensor([m])) @ rope_interleaved(k[None], torch.tensor([n]))[0]
    print(f"query at {m:3d}, key at {n:3d}: score {float(score):+.5f}")

order = torch.cat((torch.arange(0, 8, 2), torch.arange(1, 8, 2)))           # pairs (2i, 2i+1) -> (i, i + 4)
cos, sin = course_lib.positional.rope_angles(6, 8)
x = torch.randn(6, 8, generator=g)
library = course_lib.positional.apply_rope(x[:, order], cos, sin)
print("same rotation, other layout:", torch.allclose(rope_interleaved(x, torch.arange(6))[:, order], library, atol=1e-6))
'''),
    ("md", r'''
## Exercise 13.2 — grouped-query attention without copying the keys

In grouped-query attention, `n_heads` query heads share `n_kv_heads` key/value heads (a divisor of
`n_heads`): with `group = n_heads // n_kv_heads`, query head $h$ reads key/value head
$\lfloor h / \text{group} \rfloor$ (consecutive query heads form a group). `n_kv_heads = n_heads` is
multi-head attention, `n_kv_heads = 1` multi-query attention. The library repeats the key/value
heads until there are `n_heads` of them (`course_lib.attention.share_kv_heads`), which copies the
cache. Here, do the opposite: **reshape the queries** into their groups and let each key/value head
serve its whole group in one matrix product, so that nothing of the keys and values is copied.

Write `grouped_query_attention(q, k, v, causal=False)`:

* `q`: `(batch, n_heads, q_len, d_k)`; `k`: `(batch, n_kv_heads, k_len, d_k)`;
  `v`: `(batch, n_kv_heads, k_len, d_v)`;
* scaled dot-product attention, $\text{softmax}(q k^\top / \sqrt{d_k})\, v$, head by head as above;
* `causal=True`: the queries are the **last** `q_len` of the `k_len` positions (a prompt, or the new
  tokens after a KV cache), so query $i$ may see key $j$ when $j \le i + (k\_len - q\_len)$;
* return the output, `(batch, n_heads, q_len, d_v)`.

Raise `ValueError` naming `n_kv_heads` when the number of key heads does not divide the number of
query heads, and naming `k` (the argument's name as a word of its own, e.g. "k has 2 heads but v
has 4") when `k` and `v` differ in their number of heads or `k`'s last dimension is not `q`'s.

**Hints.** `q.reshape(batch, n_kv_heads, group, q_len, d_k)` puts the query heads of one group
together; `k[:, :, None]` (shape `(batch, n_kv_heads, 1, k_len, d_k)`) broadcasts over the group in
`torch.matmul`. Fill the blocked scores with `float("-inf")` (every query sees at least one key here)
and reshape the result back to `(batch, n_heads, q_len, d_v)`.
'''),
    ("exercise", "13.2", r'''
def grouped_query_attention(q, k, v, causal=False):
    """Attention where consecutive groups of query heads share one key/value head, without repeating k and v.

    Args:
        q: ``(batch, n_heads, q_len, d_k)``.
        k: ``(batch, n_kv_heads, k_len, d_k)``, ``n_kv_heads`` dividing ``n_heads``.
        v: ``(batch, n_kv_heads, k_len, d_v)``.
        causal: the queries are the last ``q_len`` of the ``k_len`` positions; query ``i`` sees key ``j``
            when ``j <= i + k_len - q_len``.

    Returns:
        ``(batch, n_heads, q_len, d_v)``; query head ``h`` reads key/value head ``h // (n_heads // n_kv_heads)``.

    Raises:
        ValueError: ``n_kv_heads`` does not divide ``n_heads``; ``k`` and ``v`` with different head counts or
            ``k``'s last dim not ``q``'s.

    Source: chapter 13; Ainslie et al. (2023), "GQA"; Shazeer (2019), multi-query attention.
    """
    ### BEGIN SOLUTION
    batch, n_heads, q_len, d_k = q.shape
    n_kv_heads, k_len = k.size(1), k.size(2)
    if k.size(-1) != d_k or v.size(1) != n_kv_heads or v.size(2) != k_len:
        raise ValueError(f"k must be (batch, n_kv_heads, k_len, d_k = {d_k}) with the heads and length of v; "
                         f"got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads = {n_kv_heads} must divide n_heads = {n_heads}")
    group = n_heads // n_kv_heads
    grouped = q.reshape(batch, n_kv_heads, group, q_len, d_k)                       # the query heads of each group
    scores = grouped @ k[:, :, None].transpose(-2, -1) / math.sqrt(d_k)             # (batch, n_kv, group, q_len, k_len)
    if causal:
        allowed = torch.arange(k_len)[None, :] <= torch.arange(q_len)[:, None] + (k_len - q_len)
        scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v[:, :, None]                             # (batch, n_kv, group, q_len, d_v)
    return out.reshape(batch, n_heads, q_len, v.size(-1))
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Eight query heads over two key/value heads: the output of query head 1 changes when the
first key/value head changes, and not when the second does.
'''),
    ("tryit", r'''
g = torch.Generator().manual_seed(1)
q = torch.randn(1, 8, 5, 4, generator=g)
k, v = torch.randn(1, 2, 5, 4, generator=g), torch.randn(1, 2, 5, 4, generator=g)
out = grouped_query_attention(q, k, v, causal=True)
for changed in (0, 1):
    v2 = v.clone()
    v2[:, changed] += 1.0
    moved = (grouped_query_attention(q, k, v2, causal=True) - out).abs().amax(dim=(0, 2, 3)) > 0
    print(f"change key/value head {changed}: query heads that move {moved.nonzero().flatten().tolist()}")
'''),
    ("md", r'''
## Exercise 13.3 — the memory of the KV cache

While it generates, a decoder keeps the keys and the values of every position it has read, in every
layer: for each layer, two tensors of shape `(batch, n_kv_heads, seq_len, d_head)`, with
`d_head = d_model // n_heads`. Grouped-query attention shrinks them by `n_heads / n_kv_heads`; the
number format sets the bytes per number (4 for `float32`, 2 for `float16`/`bfloat16`).

Write `kv_cache_bytes(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch, dtype)` returning the
number of bytes of that cache. Return a Python `int` (divide with `//`: `d_model / n_heads` is a
float). `n_kv_heads=None` means `n_heads` (multi-head attention); `dtype` is a floating-point
`torch.dtype`.

Raise `ValueError` naming `d_model` and `n_heads` when `n_heads` does not divide `d_model`, naming
`n_kv_heads` when it does not divide `n_heads`, naming the size (e.g. `seq_len`) when a size is
smaller than 1, and naming `dtype` when it is not a floating-point torch dtype.

Example: a Llama-2-7B-sized model (32 layers, 32 heads, `d_model = 4096`, multi-head) caching 4096
positions of one sequence in `float16` holds $2 \cdot 32 \cdot 1 \cdot 32 \cdot 4096 \cdot 128
\cdot 2 = 2^{31}$ bytes, 2 GiB; with 8 key/value heads, a quarter of that.

**Hints.** `torch.empty((), dtype=dtype).itemsize` (or `torch.finfo(dtype).bits // 8`) is the size of
one number; `dtype.is_floating_point` tells a float dtype. Return a Python `int`: the numbers can
exceed what a float32 holds exactly.
'''),
    ("exercise", "13.3", r'''
def kv_cache_bytes(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch, dtype):
    """Bytes of the keys and values a decoder caches for ``batch`` sequences of ``seq_len`` positions.

    Args:
        n_layers, n_heads, d_model: the model's sizes (``n_heads`` divides ``d_model``).
        n_kv_heads: key/value heads (a divisor of ``n_heads``), or ``None`` for ``n_heads``.
        seq_len, batch: positions cached per sequence, sequences.
        dtype: floating-point ``torch.dtype`` of the cache.

    Returns:
        int (a Python int): ``2 * n_layers * batch * n_kv_heads * seq_len * (d_model // n_heads) * bytes per number``.

    Raises:
        ValueError: a size < 1, ``n_heads`` not dividing ``d_model``, ``n_kv_heads`` not dividing ``n_heads``,
            ``dtype`` not a floating-point torch dtype.

    Source: chapter 13 (the KV cache of grouped-query attention); chapter 10 (the KV cache).
    """
    ### BEGIN SOLUTION
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    sizes = dict(n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, d_model=d_model, seq_len=seq_len, batch=batch)
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1; got {value!r}")
    if d_model % n_heads:
        raise ValueError(f"n_heads = {n_heads} must divide d_model = {d_model}")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads = {n_kv_heads} must divide n_heads = {n_heads}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch dtype; got {dtype!r}")
    per_number = torch.empty((), dtype=dtype).element_size()
    return 2 * n_layers * batch * n_kv_heads * seq_len * (d_model // n_heads) * per_number
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The cache of a 7B-sized model for one 4096-token sequence, as the key/value heads are
grouped.
'''),
    ("tryit", r'''
for kv in (32, 8, 4, 1):
    size = kv_cache_bytes(32, 32, kv, 4096, 4096, 1, torch.float16)
    print(f"n_kv_heads = {kv:2d}: {size / 2**30:6.3f} GiB")
'''),
    ("md", r'''
## Exercise 13.4 — how many parameters has today's block?

Count the parameters of a decoder-only language model built of today's block (the configuration
`LanguageModelConfig.modern(...)` of chapter 13), from its sizes alone, without building it:

* a token embedding of `vocab_size` rows of `d_model`; positions cost nothing (RoPE has no weights);
* in each of the `n_layers` layers: the attention's query and output projections, `d_model × d_model`
  each; the key and value projections, each `d_model` inputs to `n_kv_heads × d_head` outputs
  (`d_head = d_model // n_heads`); SwiGLU's three matrices (gate and up: `d_model → d_ff`, down:
  `d_ff → d_model`); two RMSNorms, with a scale of `d_model` each; **no biases** anywhere;
* a final RMSNorm (`d_model`);
* the output projection `d_model → vocab_size` without a bias, **unless** `tie_embeddings` is true
  (then it reuses the embedding matrix and adds nothing).

Write `lm_parameter_count(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, tie_embeddings)`
returning the count. Return a Python `int` (divide with `//`: `d_model / n_heads` is a float).
`n_kv_heads=None` means `n_heads`. Raise `ValueError` naming `d_model` and `n_heads` when `n_heads`
does not divide `d_model`, naming `n_kv_heads` when it does not divide `n_heads`, and naming the
size (e.g. `n_layers`) when a size is smaller than 1.

Example: Llama 2 7B (`vocab_size = 32000`, `d_model = 4096`, 32 layers, 32 heads, multi-head,
`d_ff = 11008`, untied) has 6,738,415,616 parameters: the "7B" of its name.

**Hints.** Count one layer first; `n_kv_heads * (d_model // n_heads)` is the width of the key and
value projections. `LanguageModel(LanguageModelConfig.modern(...)).num_parameters()` checks small
configurations (the try-it cell does).
'''),
    ("exercise", "13.4", r'''
def lm_parameter_count(vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, tie_embeddings):
    """Trainable parameters of a Llama-style decoder-only model (RMSNorm, RoPE, SwiGLU, GQA, no biases).

    Args:
        vocab_size, d_model, n_layers, n_heads, d_ff: the sizes (``n_heads`` divides ``d_model``).
        n_kv_heads: key/value heads (a divisor of ``n_heads``), or ``None`` for ``n_heads``.
        tie_embeddings: the output projection reuses the embedding matrix.

    Returns:
        int (a Python int): the number of parameters (a tied matrix counted once).

    Raises:
        ValueError: a size < 1; ``n_heads`` not dividing ``d_model``; ``n_kv_heads`` not dividing ``n_heads``.

    Source: chapter 13 (``LanguageModelConfig.modern``); Touvron et al. (2023), Llama 2, table 1.
    """
    ### BEGIN SOLUTION
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    sizes = dict(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, d_ff=d_ff)
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1; got {value!r}")
    if d_model % n_heads:
        raise ValueError(f"n_heads = {n_heads} must divide d_model = {d_model}")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads = {n_kv_heads} must divide n_heads = {n_heads}")
    kv_width = n_kv_heads * (d_model // n_heads)
    attention = 2 * d_model * d_model + 2 * d_model * kv_width        # q, out; k, v
    ffn = 3 * d_model * d_ff                                           # gate, up, down
    layer = attention + ffn + 2 * d_model                              # + two RMSNorm scales
    output = 0 if tie_embeddings else vocab_size * d_model
    return vocab_size * d_model + n_layers * layer + d_model + output
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Your count against a model the library builds, and what grouping the key/value heads
and tying the embeddings save at the size of Llama 2 7B.
'''),
    ("tryit", r'''
from course_lib.language_model import LanguageModel, LanguageModelConfig

config = LanguageModelConfig.modern(500, d_model=64, n_layers=3, n_heads=8, n_kv_heads=2, d_ff=172, tie_embeddings=False)
print("library:", LanguageModel(config).num_parameters(), " yours:", lm_parameter_count(500, 64, 3, 8, 2, 172, False))
for kv, tied in ((32, False), (8, False), (8, True)):
    print(f"7B sizes, n_kv_heads = {kv:2d}, tied = {tied!s:5}: {lm_parameter_count(32000, 4096, 32, 32, kv, 11008, tied):,}")
'''),
]
