"""Positional encodings (chapter 3)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["sinusoidal_encoding", "SinusoidalPositionalEncoding", "LearnedPositionalEmbedding"]


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
    _check_sizes(max_len, d_model)
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype; got {dtype}")
    position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d/2),)
    angle = position / torch.pow(10000.0, two_i / d_model)  # (max_len, ceil(d/2))
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.to(dtype)


def _check_sizes(max_len: int, d_model: int) -> None:
    for name, value in (("max_len", max_len), ("d_model", d_model)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int; got {value!r}")


def _check_positions(x: Tensor, offset: int, max_len: int, d_model: int) -> None:
    if x.dim() != 3 or x.size(-1) != d_model:
        raise ValueError(f"x must have shape (batch, seq_len, {d_model}); got {tuple(x.shape)}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be an int >= 0; got {offset!r}")
    if offset + x.size(1) > max_len:
        raise ValueError(
            f"positions {offset}..{offset + x.size(1) - 1} exceed max_len={max_len}; "
            f"build the encoding with a larger max_len or use shorter sequences"
        )


class SinusoidalPositionalEncoding(nn.Module):
    """Add the sinusoidal table to the embeddings, then apply dropout.

    The table is a registered *buffer* (moves with ``.to()``, saved in the
    ``state_dict``, never trained).

    Args:
        d_model: width of the embeddings.
        max_len: the largest number of positions supported.
        dropout: dropout probability applied to the sum (paper: 0.1).

    Shapes:
        ``x``: ``(batch, seq_len, d_model)`` float -> same shape and dtype.
        ``offset``: the position of ``x[:, 0]`` (used by incremental decoding).

    Raises:
        ValueError: wrong shape of ``x``, or ``offset + seq_len > max_len``.

    Source: Vaswani et al. (2017), section 3.5 and 5.4 (dropout on the sums).
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.1) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        _check_positions(x, offset, self.max_len, self.d_model)
        return self.dropout(x + self.pe[offset : offset + x.size(1)].to(x.dtype))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


class LearnedPositionalEmbedding(nn.Module):
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
        super().__init__()
        _check_sizes(max_len, d_model)
        if not 0 < init_std < math.inf:
            raise ValueError(f"init_std must be a finite number > 0; got {init_std}")
        self.d_model = d_model
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=init_std)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        _check_positions(x, offset, self.max_len, self.d_model)
        positions = torch.arange(offset, offset + x.size(1), device=x.device)
        return self.dropout(x + self.embedding(positions).to(x.dtype))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"
