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
## Exercise 3.1 — the sinusoidal encoding

Attention by itself ignores word order, so the paper adds to each embedding a fixed vector that
depends on the position `pos` (section 3.5). Column $2i$ holds a sine, column $2i+1$ a cosine,
and the pair shares one frequency:

$$PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/d_{\text{model}}}}\right), \qquad
PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/d_{\text{model}}}}\right)$$

Write `sinusoidal_encoding(max_len, d_model)` returning the float tensor of shape
`(max_len, d_model)` whose row `pos` is the encoding of position `pos = 0, 1, …, max_len - 1`.
It must work for an **odd** `d_model` too: then there is one more sine column than cosine
columns, and the last column is a sine. Raise `ValueError` (naming the argument) when
`max_len` or `d_model` is smaller than 1.

**Hints.** Build `position = torch.arange(max_len)[:, None]` and the even column indices
`two_i = torch.arange(0, d_model, 2)`; the angles `position / 10000 ** (two_i / d_model)` have
shape `(max_len, ceil(d_model / 2))`. Fill `pe[:, 0::2]` with their sines and `pe[:, 1::2]`
with the cosines of the first `d_model // 2` columns of angles. Computing in float64 and
converting at the end keeps large positions accurate.
'''),
    ("exercise", "3.1", r'''
def sinusoidal_encoding(max_len, d_model):
    """The sinusoidal position table of the paper.

    Args:
        max_len: number of positions (int >= 1).
        d_model: width of the encoding (int >= 1, odd allowed).

    Returns:
        float tensor ``(max_len, d_model)`` (float32 or float64), values in
        [-1, 1]: ``PE[pos, 2i] = sin(pos / 10000**(2i/d_model))`` and
        ``PE[pos, 2i+1] = cos(pos / 10000**(2i/d_model))``. For odd
        ``d_model`` the last column is a sine.

    Raises:
        ValueError: ``max_len < 1`` or ``d_model < 1``.

    Source: Vaswani et al. (2017), section 3.5; chapter 3.
    """
    ### BEGIN SOLUTION
    for name, value in (("max_len", max_len), ("d_model", d_model)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1; got {value!r}")
    position = torch.arange(max_len, dtype=torch.float64)[:, None]       # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)             # (ceil(d/2),)
    angle = position / 10000.0 ** (two_i / d_model)                      # (max_len, ceil(d/2))
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.float()
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Compare with the course library's table, for an even and an odd width, and look at
one position: the first columns turn fast (short wavelengths), the last ones slowly.
'''),
    ("tryit", r'''
import course_lib.positional  # the course's own version, for this comparison only

for max_len, d_model in [(50, 16), (7, 5)]:
    mine = sinusoidal_encoding(max_len, d_model)
    ref = course_lib.positional.sinusoidal_encoding(max_len, d_model)
    print((max_len, d_model), "shape", tuple(mine.shape), "matches course_lib:", torch.allclose(mine, ref, atol=1e-6))
print("position 3, d_model 8:", [round(v, 3) for v in sinusoidal_encoding(4, 8)[3].tolist()])
'''),
    ("md", r'''
## Exercise 3.2 — a fixed offset is a rotation

The paper chose sinusoids because *"for any fixed offset $k$, $PE_{pos+k}$ can be represented as
a linear function of $PE_{pos}$"*. With $\omega_i = 1/10000^{2i/d_{\text{model}}}$ and the angle
addition formulas, each (sine, cosine) pair is rotated:

$$\begin{pmatrix} \sin\omega_i(pos+k) \\ \cos\omega_i(pos+k) \end{pmatrix} =
\begin{pmatrix} \cos\omega_i k & \sin\omega_i k \\ -\sin\omega_i k & \cos\omega_i k \end{pmatrix}
\begin{pmatrix} \sin\omega_i\, pos \\ \cos\omega_i\, pos \end{pmatrix}$$

Write `relative_position_matrix(k, d_model)` returning the `(d_model, d_model)` float matrix $M$
with $PE_{pos+k} = M\, PE_{pos}$ for every position (as column vectors; for a table of rows,
`pe[k:] == pe[:-k] @ M.T`). $M$ is block-diagonal: the $2\times 2$ block above sits at rows and
columns $(2i, 2i+1)$; every other entry is 0. `k` may be any integer (negative too). Raise
`ValueError` for an odd `d_model` (the last sine has no cosine partner).

**Hints.** Start from `torch.zeros(d_model, d_model, dtype=torch.float64)` and fill the four
entries of each block in a loop over `i in range(d_model // 2)`.
'''),
    ("exercise", "3.2", r'''
def relative_position_matrix(k, d_model):
    """The matrix that moves a sinusoidal encoding ``k`` positions forward.

    Args:
        k: the offset (int, may be negative or zero).
        d_model: width of the encoding (even int >= 2).

    Returns:
        float tensor ``(d_model, d_model)`` ``M`` with ``PE[pos + k] = M @ PE[pos]``:
        block-diagonal, block ``i`` (rows/columns ``2i, 2i+1``) equal to
        ``[[cos(w k), sin(w k)], [-sin(w k), cos(w k)]]`` with
        ``w = 1 / 10000**(2i/d_model)``.

    Raises:
        ValueError: ``d_model`` is odd or smaller than 2.

    Source: Vaswani et al. (2017), section 3.5 (the linear-offset property); chapter 3.
    """
    ### BEGIN SOLUTION
    if d_model < 2 or d_model % 2:
        raise ValueError(f"d_model must be an even int >= 2 (sine/cosine pairs); got {d_model}")
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        w = 1.0 / 10000.0 ** (2 * i / d_model)
        c, s = math.cos(w * k), math.sin(w * k)
        m[2 * i, 2 * i], m[2 * i, 2 * i + 1] = c, s
        m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = -s, c
    return m
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Shift the whole table by 3 positions with one matrix product, and feed the shifted
encodings through the library's `SinusoidalPositionalEncoding` with `offset=3` to see the same
numbers again.
'''),
    ("tryit", r'''
import course_lib.positional  # the course's own table, for this demo only

pe = course_lib.positional.sinusoidal_encoding(20, 8, dtype=torch.float64)
M = relative_position_matrix(3, 8)
print("PE[pos + 3] == M @ PE[pos] for every pos:", torch.allclose(pe[3:], pe[:-3] @ M.T))
layer = SinusoidalPositionalEncoding(d_model=8, max_len=20, dropout=0.0)
zeros = torch.zeros(1, 17, 8)
print("same as the layer with offset=3:", torch.allclose(layer(zeros, offset=3)[0].double(), pe[:-3] @ M.T, atol=1e-6))
'''),
]
