"""Positional encodings (chapter 3)."""

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
