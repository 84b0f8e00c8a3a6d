"""Mixed precision: which autocast dtype a device supports, and the context the forward pass runs in."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from ..validation import check_choice
from .config import AMP_MODES

__all__ = ["cpu_supports_bf16", "mixed_precision"]


def cpu_supports_bf16() -> bool:
    """Whether this CPU has native bfloat16 matrix instructions (AVX512-BF16 or AMX).

    With them, ``amp="bf16"`` (bfloat16 autocast) makes CPU training faster
    (about 1.3-2x for the course's models on an AVX512-BF16 machine); without
    them bfloat16 is emulated and slower than float32.

    Source: chapter 9 (mixed precision); PyTorch's oneDNN backend check.
    """
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def mixed_precision(amp: str, device: str | torch.device) -> tuple[Callable[[], Any], Any]:
    """The autocast context factory and gradient scaler for a mixed-precision setting.

    Used by :func:`train` around every forward pass (the loss and the
    backward pass run outside autocast; autocast already produced float32
    where it matters, e.g. the softmax and the loss inputs).

    Args:
        amp: ``"off"`` (float32), ``"bf16"`` (bfloat16 autocast on the
            device's type - CPU or CUDA; no scaler: bfloat16 has float32's
            exponent range, so gradients do not underflow), ``"fp16"``
            (float16 autocast with a :class:`torch.amp.GradScaler`, CUDA only:
            float16 gradients below ~6e-8 flush to zero unless the loss is
            scaled up first), or ``"auto"`` (``"fp16"`` on CUDA, ``"off"``
            elsewhere).
        device: where the model runs (``torch.device`` or a string like ``"cpu"``).

    Returns:
        ``(autocast, scaler)``: ``autocast()`` makes a fresh context manager
        (``contextlib.nullcontext`` when off); ``scaler`` is a
        ``GradScaler`` for ``"fp16"``, else ``None``.

    Raises:
        ValueError: an unknown ``amp``, or ``amp="fp16"`` on a non-CUDA device.

    Source: chapter 9 (mixed precision); Micikevicius et al. (2018), "Mixed
    Precision Training" (loss scaling).
    """
    device = torch.device(device)
    check_choice(amp, "amp", AMP_MODES)
    if amp == "auto":
        amp = "fp16" if device.type == "cuda" else "off"
    if amp == "off":
        return contextlib.nullcontext, None
    if amp == "fp16":
        if device.type != "cuda":
            raise ValueError("amp='fp16' needs a CUDA device (float16 autocast on CPU is not supported); use 'bf16' or 'off'")
        scaler = torch.amp.GradScaler("cuda")
        return (lambda: torch.autocast("cuda", dtype=torch.float16)), scaler
    return (lambda: torch.autocast(device.type, dtype=torch.bfloat16)), None
