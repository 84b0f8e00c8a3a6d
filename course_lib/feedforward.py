"""The position-wise feed-forward network (chapter 6) and its gated form, SwiGLU (Part V, in preparation)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .validation import check_float_input, checked_by

__all__ = ["ACTIVATIONS", "PositionwiseFeedForward"]

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "swiglu": F.silu}
"""The activation of each ``activation`` setting; ``"swiglu"`` gates SiLU (Swish) with a second projection."""

ACTIVATIONS = tuple(_ACTIVATIONS)
"""The settings of ``activation``: ``"relu"``, ``"gelu"`` and ``"swiglu"``."""


class PositionwiseFeedForward(nn.Module):
    """``FFN(x) = W_2 act(W_1 x + b_1) + b_2``, applied to every position alone.

    Args:
        d_model: input and output width.
        d_ff: inner width (paper: ``4 * d_model`` = 2048).
        dropout: dropout on the inner activations (as in
            :class:`torch.nn.TransformerEncoderLayer`; the paper's residual
            dropout is applied by :class:`course_lib.layers.ResidualSublayer`).
        activation: ``"relu"`` (paper), ``"gelu"`` (exact erf form, as
            :func:`torch.nn.functional.gelu`; used by BERT/GPT) or
            ``"swiglu"``: ``W_2 (SiLU(W_1 x) * (V x))``, a third ``(d_ff,
            d_model)`` matrix ``linear_v`` whose output gates the activation
            (Llama, Qwen, Mistral; Shazeer 2020, "GLU Variants Improve
            Transformer", equation (6)). Llama-style models take ``d_ff`` of
            about ``8/3 d_model`` so the three matrices hold as many
            parameters as the two of a ``4 d_model`` ReLU network.
        bias: keyword-only; ``False`` drops the biases ``b_1``, ``b_2`` (today's models).

    Shapes:
        ``x``: ``(batch, seq_len, d_model)`` float -> ``(batch, seq_len, d_model)``
        (any number of leading dimensions works: ``(..., d_model)``).
        Positions never mix: permuting the positions of the input permutes the
        output the same way.

    Raises:
        ValueError: unknown ``activation``; non-positive sizes; an input
            whose last dimension is not ``d_model``.
        TypeError: an input that is not floating point, or whose dtype
            differs from the weights' outside ``torch.autocast``.

    Source: Vaswani et al. (2017), section 3.3, equation (2).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu", *, bias: bool = True) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}; got {activation!r}")
        if d_model < 1 or d_ff < 1:
            raise ValueError(f"d_model and d_ff must be positive; got d_model={d_model}, d_ff={d_ff}")
        self.activation = activation
        self.d_model = d_model
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.linear_v = nn.Linear(d_model, d_ff, bias=bias) if activation == "swiglu" else None  # V of SwiGLU
        self.dropout = nn.Dropout(dropout)
        for lin in (self.linear1, self.linear2, self.linear_v):
            if lin is not None:
                nn.init.xavier_uniform_(lin.weight)
                if lin.bias is not None:
                    nn.init.zeros_(lin.bias)

    def check_inputs(self, x: Tensor) -> None:
        """Raise naming ``x`` unless it is a float tensor ``(..., d_model)`` of the weights' dtype."""
        if x.dim() < 1 or x.size(-1) != self.d_model:
            raise ValueError(f"x must have shape (..., {self.d_model}), e.g. (batch, seq_len, {self.d_model}); got {tuple(x.shape)}")
        check_float_input(x, self.linear1.weight, "x", "PositionwiseFeedForward")

    @checked_by(check_inputs)
    def forward(self, x: Tensor) -> Tensor:
        hidden = _ACTIVATIONS[self.activation](self.linear1(x))  # (batch, seq_len, d_ff)
        if self.linear_v is not None:  # SwiGLU: the activation gated, feature by feature
            hidden = hidden * self.linear_v(x)  # (batch, seq_len, d_ff)
        return self.linear2(self.dropout(hidden))  # (batch, seq_len, d_model)

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}"
