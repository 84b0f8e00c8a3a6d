"""Small input checks shared by the layers (private: not part of the course's API)."""

from __future__ import annotations

import torch
from torch import Tensor


def _autocast_on(device_type: str) -> bool:
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:  # torch < 2.4: no device argument
        if device_type == "cpu":
            return bool(torch.is_autocast_cpu_enabled())
        return bool(torch.is_autocast_enabled())


def check_input_dtype(x: Tensor, weight: Tensor, name: str, layer: str) -> None:
    """Raise ``TypeError`` when ``x`` is not a float tensor of ``weight``'s dtype (outside autocast).

    Without this check a float16 input into float32 weights fails deep inside
    ``F.linear`` with "mat1 and mat2 must have the same dtype". Under
    ``torch.autocast`` mixed dtypes are expected (autocast casts them), so
    only a float64 input is rejected there (autocast leaves float64 alone).
    """
    if not torch.is_floating_point(x):
        raise TypeError(f"{name} must be a floating-point tensor; got dtype {x.dtype}")
    if x.dtype == weight.dtype:
        return
    # autocast casts float32/float16/bfloat16 inputs of matrix products, never float64
    if x.dtype == torch.float64 or not _autocast_on(x.device.type):
        hint = " (torch.autocast does not cast float64)" if x.dtype == torch.float64 else ", or run inside torch.autocast"
        raise TypeError(
            f"{name} has dtype {x.dtype} but the weights of {layer} are {weight.dtype}: convert one to the "
            f"other (e.g. x.to({weight.dtype}) or module.to({x.dtype})){hint}"
        )
