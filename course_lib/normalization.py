"""Normalisation layers: LayerNorm (the paper) and RMSNorm (today's models); chapters 7 and 13."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .validation import check_choice, check_int, check_number, checked_by

__all__ = ["NORMS", "RMSNorm", "make_norm"]

NORMS = ("layer", "rms")
"""The settings of ``norm``: ``"layer"`` = :class:`torch.nn.LayerNorm`, ``"rms"`` = :class:`RMSNorm`."""


class RMSNorm(nn.Module):
    """Root-mean-square normalisation: ``x / sqrt(mean(x**2) + eps) * weight``.

    LayerNorm without the mean subtraction and without the bias: each
    position's vector is divided by its root mean square, then scaled by a
    learned gain per feature (initialised to 1). Cheaper than LayerNorm and,
    in practice, as good; Llama, Qwen, Gemma and Mistral use it.

    The statistics are computed in float32 whatever the input's dtype (as
    Hugging Face's Llama does), and the result is cast back to it.

    Args:
        d_model: width of the last dimension, ``>= 1``.
        eps: added to the mean square (Llama: 1e-5 or 1e-6).

    Shapes:
        ``x``: ``(..., d_model)`` float -> the same shape and dtype.

    Raises:
        ValueError: a non-positive ``d_model``, an ``eps`` not ``> 0``, or an
            input whose last dimension is not ``d_model``.

    Source: Zhang and Sennrich (2019), "Root Mean Square Layer Normalization",
    equation (4). Equivalent to :class:`torch.nn.RMSNorm` (tested with a copied weight).
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        check_int(d_model, "d_model")
        check_number(eps, "eps", low=0, low_inclusive=False)
        self.d_model = d_model
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def check_inputs(self, x: Tensor) -> None:
        """Raise naming ``x`` unless it is a float tensor ``(..., d_model)``."""
        if not isinstance(x, Tensor) or x.dim() < 1 or x.size(-1) != self.d_model:
            raise ValueError(f"x must have shape (..., {self.d_model}); got {tuple(getattr(x, 'shape', ()))}")
        if not torch.is_floating_point(x):
            raise TypeError(f"x must be a floating-point tensor; got dtype {x.dtype}")

    @checked_by(check_inputs)
    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        inv_rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return self.weight * (x32 * inv_rms).to(x.dtype)  # (..., d_model)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


def make_norm(norm: str, d_model: int, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """The normalisation layer that ``norm`` names: ``"layer"`` (the paper) or ``"rms"``.

    ``bias=False`` drops LayerNorm's bias (RMSNorm has none); the default
    ``nn.LayerNorm(d_model, eps=eps)`` is exactly the layer of chapter 7.
    """
    check_choice(norm, "norm", NORMS)
    if norm == "rms":
        return RMSNorm(d_model, eps)
    return nn.LayerNorm(d_model, eps=eps, bias=bias)
