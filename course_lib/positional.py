"""Positional encodings (chapter 3); rotary position embeddings and ALiBi (Part V, in preparation)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .validation import check_hidden_states, check_int, check_number, checked_by

__all__ = [
    "check_encoding_inputs",
    "sinusoidal_encoding",
    "PositionalEncoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "rotate_half", "check_rope_inputs", "rope_angles", "apply_rope", "RotaryEmbedding",
    "check_alibi_inputs", "alibi_slopes", "alibi_bias",
]


def check_encoding_inputs(max_len: int, d_model: int, dtype: torch.dtype = torch.float32) -> None:
    """Raise ``ValueError`` unless ``max_len`` and ``d_model`` are positive ints and ``dtype`` is floating."""
    check_int(max_len, "max_len")
    check_int(d_model, "d_model")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype; got {dtype}")


@checked_by(check_encoding_inputs)
def sinusoidal_encoding(max_len: int, d_model: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """The fixed sinusoidal position table of the paper.

    ``PE[pos, 2i]   = sin(pos / 10000 ** (2i / d_model))``
    ``PE[pos, 2i+1] = cos(pos / 10000 ** (2i / d_model))``

    Computed in float64 and cast to ``dtype`` at the end, so that large
    positions keep their precision. For odd ``d_model`` the last column is a
    sine (there are ``ceil(d_model / 2)`` sine columns and ``floor(d_model / 2)``
    cosine columns).

    Args:
        max_len: number of positions, ``>= 1``.
        d_model: encoding width, ``>= 1`` (odd allowed).
        dtype: floating dtype of the result.

    Returns:
        tensor of shape ``(max_len, d_model)``, values in ``[-1, 1]``.

    Raises:
        ValueError: if ``max_len`` or ``d_model`` is not a positive integer, or
            ``dtype`` is not a floating dtype.

    Source: Vaswani et al. (2017), section 3.5.
    """
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d/2),)
    angle = position / torch.pow(10000.0, two_i / d_model)  # (max_len, ceil(d/2))
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)  # (max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.to(dtype)


class PositionalEncoding(nn.Module):
    """What the positional layers share: sizes, dropout and the check of their input.

    On its own it adds no position at all, only dropout: the model then sees
    no word order (``TransformerConfig(positional="none")``, chapter 3's
    experiment). :class:`SinusoidalPositionalEncoding` and
    :class:`LearnedPositionalEmbedding` add their positions.

    Args:
        d_model: width of the embeddings, ``>= 1``.
        max_len: the number of positions supported, ``>= 1``.
        dropout: dropout probability applied to the sum (paper: 0.1).

    Shapes:
        ``x``: ``(batch, seq_len, d_model)`` float -> same shape and dtype.
        ``offset``: the position of ``x[:, 0]`` (used by incremental decoding).
    """

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.1) -> None:
        super().__init__()
        check_int(max_len, "max_len")
        check_int(d_model, "d_model")
        self.d_model = d_model
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)

    def check_inputs(self, x: Tensor, offset: int = 0) -> None:
        """Raise ``ValueError`` for ``x`` not ``(batch, seq_len, d_model)``, a bad ``offset``, or too many positions."""
        check_hidden_states(x, "x", self.d_model)
        check_int(offset, "offset", 0)
        if offset + x.size(1) > self.max_len:
            raise ValueError(
                f"positions {offset}..{offset + x.size(1) - 1} exceed max_len={self.max_len}; "
                f"build the encoding with a larger max_len or use shorter sequences"
            )

    @checked_by(check_inputs)
    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        return self.dropout(x)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


class SinusoidalPositionalEncoding(PositionalEncoding):
    """Add the sinusoidal table to the embeddings, then apply dropout.

    The table is a registered *buffer*: it moves with ``.to()`` and is never
    trained; ``persistent=False`` keeps it out of the ``state_dict`` (it is
    recomputed when the module is built).

    Args and shapes: as :class:`PositionalEncoding` (``max_len`` default 5000).

    Raises:
        ValueError: wrong shape of ``x``, or ``offset + seq_len > max_len``.

    Source: Vaswani et al. (2017), section 3.5 and 5.4 (dropout on the sums).
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.1) -> None:
        super().__init__(d_model, max_len, dropout)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)

    @checked_by(PositionalEncoding.check_inputs)
    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        return self.dropout(x + self.pe[offset : offset + x.size(1)].to(x.dtype))


class LearnedPositionalEmbedding(PositionalEncoding):
    """A trained vector per position (as in BERT/GPT), added to the embeddings.

    Unlike the sinusoidal table it cannot represent a position it never saw in
    training: asking for ``offset + seq_len > max_len`` is an error.

    Args:
        d_model: width of the embeddings.
        max_len: the number of learned positions.
        dropout: dropout probability applied to the sum.
        init_std: standard deviation of the initial rows (normal, mean 0).
            The default 1.0 matches the token embeddings of this course,
            which are initialised with std ``d_model ** -0.5`` and multiplied
            by ``sqrt(d_model)`` (chapter 2), so both signals start at the
            same scale. BERT and GPT use 0.02 for both tables because they do
            not scale their token embeddings; 0.02 here would start the
            positions about 50 times weaker than the words.

    Shapes:
        ``x``: ``(batch, seq_len, d_model)`` float -> same shape and dtype.

    Raises:
        ValueError: wrong shape of ``x``, ``offset + seq_len > max_len``, or
            ``init_std`` not finite and > 0.

    Source: Vaswani et al. (2017), section 3.5 ("We also experimented with
    using learned positional embeddings ... nearly identical results", table 3 row E).
    """

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.1, init_std: float = 1.0) -> None:
        super().__init__(d_model, max_len, dropout)
        check_number(init_std, "init_std", low=0, low_inclusive=False)
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=init_std)

    @checked_by(PositionalEncoding.check_inputs)
    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        positions = torch.arange(offset, offset + x.size(1), device=x.device)
        return self.dropout(x + self.embedding(positions).to(x.dtype))


def rotate_half(x: Tensor) -> Tensor:
    """``(x1, x2) -> (-x2, x1)`` on the two halves of the last dimension: a 90-degree turn of every pair ``(x[i], x[i + d/2])``."""
    x1, x2 = x.chunk(2, dim=-1)  # each (..., d/2)
    return torch.cat((-x2, x1), dim=-1)  # (..., d)


def check_rope_inputs(max_len: int, d_head: int, base: float = 10000.0) -> None:
    """Raise ``ValueError`` unless ``max_len`` is a positive int, ``d_head`` a positive even int and ``base > 0``."""
    check_int(max_len, "max_len")
    if not isinstance(d_head, int) or d_head < 2 or d_head % 2:
        raise ValueError(f"d_head must be a positive even int (RoPE turns pairs of features); got {d_head!r}")
    check_number(base, "base", low=0, low_inclusive=False)


@checked_by(check_rope_inputs)
def rope_angles(max_len: int, d_head: int, base: float = 10000.0) -> tuple[Tensor, Tensor]:
    """The cosines and sines of rotary position embeddings, each ``(max_len, d_head)`` float32.

    Pair ``i`` (``0 <= i < d_head / 2``) turns by ``pos * base ** (-2i / d_head)``:
    the frequencies of the sinusoidal table (chapter 3). The angle of pair
    ``i`` sits in columns ``i`` and ``i + d_head / 2`` (the rotate-half layout).
    Computed in float64, then cast.
    """
    inv_freq = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)  # (d_head/2,)
    angle = torch.outer(torch.arange(max_len, dtype=torch.float64), inv_freq)  # (max_len, d_head/2)
    angle = torch.cat((angle, angle), dim=-1)  # (max_len, d_head): pair i in columns i and i + d_head/2
    return angle.cos().float(), angle.sin().float()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate every feature pair of ``x`` ``(..., seq_len, d_head)`` by its position's angle.

    ``cos``/``sin``: ``(seq_len, d_head)`` from :func:`rope_angles`. The
    pairs are ``(x[..., i], x[..., i + d_head/2])`` (rotate-half, as Hugging
    Face's Llama and GPT-NeoX; the RoFormer paper and Meta's reference Llama
    pair neighbours ``(x[2i], x[2i+1])`` instead: the same rotation of a
    permuted feature order).

    Source: Su et al. (2021), "RoFormer", equation (34).
    """
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)  # (..., seq_len, d_head)


class RotaryEmbedding(nn.Module):
    """Rotary position embeddings: turn queries and keys by an angle proportional to their position.

    Nothing is added to the embeddings. Inside attention, the query and the
    key of each head are rotated pair by pair (:func:`apply_rope`), so the
    score ``q_m . k_n`` depends on the positions only through ``m - n``:
    relative positions, for free, in every layer.

    Args:
        d_head: width of one head (``d_model // n_heads``), even.
        max_len: the number of positions supported.
        base: the wavelength base (paper and Llama 1/2: 10000).

    Shapes:
        ``q``: ``(batch, n_heads, seq_len, d_head)``; ``k``: ``(batch,
        n_kv_heads, seq_len, d_head)``; ``offset``: the position of the first
        row (the cached length during incremental decoding). Returns both rotated.

    Source: Su et al. (2021), "RoFormer: Enhanced Transformer with Rotary
    Position Embedding", section 3.4.
    """

    def __init__(self, d_head: int, max_len: int, base: float = 10000.0) -> None:
        super().__init__()
        cos, sin = rope_angles(max_len, d_head, base)
        self.register_buffer("cos", cos, persistent=False)  # (max_len, d_head)
        self.register_buffer("sin", sin, persistent=False)
        self.d_head, self.max_len, self.base = d_head, max_len, base

    def forward(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        positions = slice(offset, offset + q.size(-2))  # the rows of q and k: the same new positions
        cos, sin = self.cos[positions], self.sin[positions]  # (seq_len, d_head)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, max_len={self.max_len}, base={self.base}"


def check_alibi_inputs(n_heads: int) -> None:
    """Raise ``ValueError`` unless ``n_heads`` is a positive int."""
    check_int(n_heads, "n_heads")


@checked_by(check_alibi_inputs)
def alibi_slopes(n_heads: int) -> Tensor:
    """The ALiBi slope of each head, ``(n_heads,)`` float32: a geometric sequence from ``2 ** (-8 / n)``.

    For ``n_heads`` a power of two, head ``h`` (from 0) gets ``2 ** (-8 (h + 1) / n_heads)``
    (8 heads: 1/2, 1/4, ..., 1/256). Otherwise the slopes of the largest power
    of two below ``n_heads``, then every other slope of twice that number.

    Source: Press et al. (2022), "Train Short, Test Long: Attention with
    Linear Biases Enables Input Length Extrapolation", section 3.
    """
    power = 2 ** (n_heads.bit_length() - 1)  # the largest power of two <= n_heads
    slopes = [2 ** (-8 * (h + 1) / power) for h in range(power)]
    slopes += [2 ** (-8 * (h + 1) / (2 * power)) for h in range(0, 2 * power, 2)][: n_heads - power]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(slopes: Tensor, q_len: int, k_len: int) -> Tensor:
    """The ALiBi score bias ``-slope_h * |i - j|``, ``(n_heads, q_len, k_len)``.

    Queries are the last ``q_len`` of the ``k_len`` positions (with a KV
    cache, the new ones). Under a causal mask only ``j <= i`` counts, where
    the bias is ``-slope_h * (i - j)``: the further back a key, the lower its
    score, and no position is ever added to the embeddings.
    """
    i = torch.arange(k_len - q_len, k_len, device=slopes.device)[:, None]  # (q_len, 1): query positions
    j = torch.arange(k_len, device=slopes.device)[None, :]  # (1, k_len): key positions
    return -slopes[:, None, None] * (i - j).abs()  # (n_heads, q_len, k_len)
