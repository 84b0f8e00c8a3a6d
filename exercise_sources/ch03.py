"""Source of exercises/03_positional_encoding.ipynb and its solution (see build_notebooks.py)."""

CHAPTER = "03"
NOTEBOOK = "03_positional_encoding.ipynb"
TITLE = "positional encoding"

CELLS = [
    ("code", r'''
import math
import sys

import torch

from course_lib.positional import SinusoidalPositionalEncoding
'''),
    ("md", r'''
## Exercise 3.1 — the encoding of any positions

Section 3.5 of the paper adds to each embedding a fixed vector that depends on the position
`pos`. Column $2i$ holds a sine, column $2i+1$ a cosine, and the pair shares one frequency:

$$PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{b^{2i/d_{\text{model}}}}\right), \qquad
PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{b^{2i/d_{\text{model}}}}\right), \qquad b = 10000 .$$

The chapter's `sinusoidal_encoding(max_len, d_model)` builds the table of the positions
`0, 1, …, max_len - 1`. A model does not always need those rows: a decoder that generates with a
cache needs only the row of the new position, a batch of left-padded sentences has its first real
token at a different position in every row, and later models change the base $b$ (a larger base
gives longer wavelengths). Write `encode_positions(positions, d_model, base=10000.0)`:

* `positions`: an integer tensor of positions `>= 0`, of any shape `S`, e.g. `(batch, seq_len)`;
* returns a float64 tensor of shape `S + (d_model,)`: the row of the formula above for each entry;
* it must work for an **odd** `d_model` too: then the last column is a sine.

Raise `ValueError` naming the argument when `positions` is not an integer tensor or holds a
negative value, when `d_model < 1`, or when `base <= 1`.

Example: `encode_positions(torch.tensor([[0, 1]]), 2)` is `[[[0., 1.], [0.8415, 0.5403]]]`
(position 0 is `sin 0, cos 0`; position 1 is `sin 1, cos 1`).

**Hints.** The angles `positions[..., None] / base ** (two_i / d_model)` with
`two_i = torch.arange(0, d_model, 2)` have shape `S + (ceil(d_model / 2),)`. Fill the even columns
`pe[..., 0::2]` with their sines and the odd ones `pe[..., 1::2]` with the cosines of the first
`d_model // 2` angles. **Compute in float64** (`positions.to(torch.float64)`): positions in the
thousands are checked, and there float32 angles are off by about $10^{-4}$ — more than the check allows.
'''),
    ("exercise", "3.1", r'''
def encode_positions(positions, d_model, base=10000.0):
    """Sinusoidal encodings of arbitrary integer positions.

    Args:
        positions: integer tensor of positions >= 0, any shape ``S``.
        d_model: width of the encoding (int >= 1, odd allowed).
        base: the base b of the wavelengths (float > 1; the paper: 10000).

    Returns:
        float64 tensor ``S + (d_model,)``: ``PE[..., 2i] = sin(pos / base**(2i/d_model))``,
        ``PE[..., 2i+1] = cos(pos / base**(2i/d_model))``; for odd ``d_model``
        the last column is a sine.

    Raises:
        ValueError: ``positions`` not an integer tensor or negative; ``d_model < 1``; ``base <= 1``.

    Source: Vaswani et al. (2017), section 3.5; chapter 3.
    """
    ### BEGIN SOLUTION
    if positions.dtype.is_floating_point or positions.dtype == torch.bool or positions.is_complex():
        raise ValueError(f"positions must be an integer tensor; got dtype {positions.dtype}")
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0; got {int(positions.min())}")
    if not isinstance(d_model, int) or d_model < 1:
        raise ValueError(f"d_model must be an int >= 1; got {d_model!r}")
    if not base > 1:
        raise ValueError(f"base must be > 1; got {base!r}")
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)              # (ceil(d/2),)
    angle = positions.to(torch.float64)[..., None] / base ** (two_i / d_model)
    pe = torch.zeros(*positions.shape, d_model, dtype=torch.float64)
    pe[..., 0::2] = torch.sin(angle)
    pe[..., 1::2] = torch.cos(angle[..., : d_model // 2])
    return pe
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** `torch.arange(max_len)` gives back the chapter's table; a batch of left-padded
sentences gets each real token's position counted from its first real token.
'''),
    ("tryit", r'''
import course_lib.positional  # the course's own table, for this comparison only

for max_len, d_model in [(50, 16), (7, 5)]:
    mine = encode_positions(torch.arange(max_len), d_model)
    ref = course_lib.positional.sinusoidal_encoding(max_len, d_model, dtype=torch.float64)
    print((max_len, d_model), "shape", tuple(mine.shape), "matches the chapter's table:", torch.allclose(mine, ref, atol=1e-6))

real = torch.tensor([[False, False, True, True], [True, True, True, True]])   # two left-padded sentences
positions = (real.long().cumsum(-1) - 1).clamp_min(0)                       # [[0, 0, 0, 1], [0, 1, 2, 3]]
print("positions:", positions.tolist(), "-> encodings", tuple(encode_positions(positions, 8).shape))
print("base 100 vs 10000, column 6 at position 50:",
      round(float(encode_positions(torch.tensor([50]), 8, base=100.0)[0, 6]), 4),
      round(float(encode_positions(torch.tensor([50]), 8)[0, 6]), 4))
'''),
    ("md", r'''
## Exercise 3.2 — move encodings without knowing their positions

The paper chose sinusoids because *"for any fixed offset $k$, $PE_{pos+k}$ can be represented as
a linear function of $PE_{pos}$"*. With $\omega_i = 1/10000^{2i/d_{\text{model}}}$ and the angle
addition formulas, each (sine, cosine) pair is **rotated** by the angle $\omega_i k$:

$$\begin{pmatrix} \sin\omega_i(pos+k) \\ \cos\omega_i(pos+k) \end{pmatrix} =
\begin{pmatrix} \cos\omega_i k & \sin\omega_i k \\ -\sin\omega_i k & \cos\omega_i k \end{pmatrix}
\begin{pmatrix} \sin\omega_i\, pos \\ \cos\omega_i\, pos \end{pmatrix}$$

The chapter builds the $d_{\text{model}} \times d_{\text{model}}$ matrix $M_k$ for one offset.
Here you use the property as a model would: you are given encodings only — rows of the table,
the positions they came from are **not** given — and one offset per row. Write
`shift_encodings(pe, k)`:

* `pe`: a float tensor `(..., d_model)` of sinusoidal rows (base 10000), `d_model` even;
* `k`: an int, or an integer tensor that broadcasts against `pe.shape[:-1]` (one offset per
  row, e.g. shape `(batch, 1)` for one offset per sentence);
* returns a float tensor of the shape of `pe`: each row moved `k` positions (negative `k` moves
  back), i.e. the row of position `pos + k` where the input row was that of `pos`.

Raise `ValueError` naming `pe` when its last dimension is odd (the last sine has no cosine
partner). Do not compute the positions back from the encodings: rotate each pair.

Example: the rows of positions 0 and 1 at `d_model = 2` are `[0, 1]` and `[sin 1, cos 1]`;
`shift_encodings(torch.tensor([[0., 1.]]), 1)` is `[[0.8415, 0.5403]]`.

**Hints.** `pe[..., 0::2]` are the sines, `pe[..., 1::2]` the cosines, one column per pair;
`omega = 10000 ** (-torch.arange(0, d_model, 2) / d_model)`; the angles
`torch.as_tensor(k)[..., None] * omega` broadcast against them. Put the results back with
`torch.stack([new_sin, new_cos], dim=-1).flatten(-2)`.
'''),
    ("exercise", "3.2", r'''
def shift_encodings(pe, k):
    """Move sinusoidal encodings ``k`` positions by rotating each (sine, cosine) pair.

    Args:
        pe: float tensor ``(..., d_model)`` of sinusoidal rows, ``d_model`` even.
        k: int, or integer tensor broadcasting against ``pe.shape[:-1]``.

    Returns:
        float tensor of ``pe``'s shape: the rows of positions ``pos + k``. With
        ``w = 1 / 10000**(2i/d_model)``: ``sin' = sin cos(w k) + cos sin(w k)``,
        ``cos' = cos cos(w k) - sin sin(w k)``.

    Raises:
        ValueError: ``pe.shape[-1]`` is odd.

    Source: Vaswani et al. (2017), section 3.5 (the linear-offset property); chapter 3.
    """
    ### BEGIN SOLUTION
    d_model = pe.shape[-1]
    if d_model % 2:
        raise ValueError(f"pe must have an even last dimension (sine/cosine pairs); got {d_model}")
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angle = torch.as_tensor(k, dtype=torch.float64)[..., None] * omega
    c, s = torch.cos(angle), torch.sin(angle)
    sin, cos = pe[..., 0::2].to(torch.float64), pe[..., 1::2].to(torch.float64)
    return torch.stack([sin * c + cos * s, cos * c - sin * s], dim=-1).flatten(-2)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Move the table of positions 0–16 by 3, and by a different offset per sentence, and
compare with the library's layer fed with `offset=3`.
'''),
    ("tryit", r'''
import course_lib.positional  # the course's own table, for this demo only

pe = course_lib.positional.sinusoidal_encoding(30, 8, dtype=torch.float64)
print("rows 0..16 moved by 3 == rows 3..19:", torch.allclose(shift_encodings(pe[:17], 3), pe[3:20]))
layer = SinusoidalPositionalEncoding(d_model=8, max_len=30, dropout=0.0)
print("same as the layer with offset=3:", torch.allclose(layer(torch.zeros(1, 17, 8), offset=3)[0].double(),
                                                         shift_encodings(pe[:17], 3), atol=1e-6))
batch = torch.stack([pe[0:5], pe[10:15]])                  # two sentences, at positions 0.. and 10..
moved = shift_encodings(batch, torch.tensor([[2], [-10]]))
print("one offset per sentence:", torch.allclose(moved, torch.stack([pe[2:7], pe[0:5]])))
'''),
    ("md", r'''
## Exercise 3.3 — a relative-position bias: ALiBi

ALiBi (Press, Smith and Lewis, "Train Short, Test Long", ICLR 2022) adds no positional vectors.
Instead, head $h$ adds to the attention score of query $i$ and key $j$ a penalty proportional to
their distance, with a fixed slope $m_h$ per head:

$$\text{scores}_h = \frac{Q_h K_h^\top}{\sqrt{d_k}} + \text{bias}_h, \qquad \text{bias}[h, i, j] = -\,m_h\,|i - j| .$$

(The paper uses it in a decoder, where the causal mask removes the keys $j > i$; on every key that
is left, $-m_h |i - j| = -m_h (i - j)$ is the paper's bias. The absolute value makes the same
tensor usable without a causal mask.)

**The slopes** (section 3 of the paper and its code). For a number of heads $n$ that is a power of
2, they are the geometric sequence that starts at $2^{-8/n}$ with ratio $2^{-8/n}$:

$$m_h = 2^{-8(h+1)/n}, \qquad h = 0, 1, \dots, n-1$$

(8 heads: $\frac12, \frac14, \dots, \frac1{256}$). When $n$ is not a power of 2, take the $p$
slopes for $p$ = the largest power of 2 below $n$, then append the first $n - p$ slopes **at even
indices** (every other one, starting with the first) of the $2p$-head sequence. Example, 6 heads:
the 4-head slopes $\frac14, \frac1{16}, \frac1{64}, \frac1{256}$, then from the 8-head slopes
$\frac12, \frac18, \frac1{32}, \dots$ the first two: $\frac12, \frac18$.

Write `alibi_bias(n_heads, seq_len)` returning the float tensor `bias` of shape
`(n_heads, seq_len, seq_len)`. Raise `ValueError` naming the argument when `n_heads` or `seq_len`
is smaller than 1.

**Hints.** `(n & (n - 1)) == 0` tests for a power of 2 (`n >= 1`), and `2 ** math.floor(math.log2(n))`
is the largest power of 2 not above `n`. The distances are
`(torch.arange(L)[:, None] - torch.arange(L)[None, :]).abs()`; multiply by `slopes[:, None, None]`.
'''),
    ("exercise", "3.3", r'''
def alibi_bias(n_heads, seq_len):
    """ALiBi's attention bias: -slope_h * |i - j| for every head h, query i and key j.

    Args:
        n_heads: number of heads (int >= 1).
        seq_len: number of positions L (int >= 1).

    Returns:
        float tensor ``(n_heads, L, L)``. Slopes: ``2**(-8 (h+1) / n_heads)`` for a
        power-of-2 ``n_heads``; otherwise the slopes of the largest power of 2 ``p``
        below, then ``slopes(2p)[0::2][:n_heads - p]``.

    Raises:
        ValueError: ``n_heads < 1`` or ``seq_len < 1``.

    Source: Press, Smith and Lewis (2022), "Train Short, Test Long", section 3; chapter 3.
    """
    ### BEGIN SOLUTION
    for name, value in (("n_heads", n_heads), ("seq_len", seq_len)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1; got {value!r}")

    def power_of_2_slopes(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    if n_heads & (n_heads - 1) == 0:
        slopes = power_of_2_slopes(n_heads)
    else:
        p = 2 ** math.floor(math.log2(n_heads))
        slopes = power_of_2_slopes(p) + power_of_2_slopes(2 * p)[0::2][: n_heads - p]
    position = torch.arange(seq_len)
    distance = (position[:, None] - position[None, :]).abs().to(torch.float64)   # (L, L)
    return -torch.tensor(slopes, dtype=torch.float64)[:, None, None] * distance
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Add the bias of 8 heads to attention scores that are all equal (queries that see
nothing in the keys) and look at where the last query attends: steep heads look at their
neighbours, flat heads far back.
'''),
    ("tryit", r'''
bias = alibi_bias(8, 10)
print("slopes:", [round(-float(bias[h, 1, 0]), 5) for h in range(8)])
causal = torch.ones(10, 10, dtype=torch.bool).tril()
weights = torch.softmax((torch.zeros(8, 10, 10) + bias).masked_fill(~causal, float("-inf")), dim=-1)
for h in (0, 3, 7):
    print(f"head {h}: weights of the last query on keys 0..9:", [round(float(w), 3) for w in weights[h, -1]])
print("6 heads, slopes:", [round(-float(alibi_bias(6, 2)[h, 1, 0]), 5) for h in range(6)])
'''),
]
