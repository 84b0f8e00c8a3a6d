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
    nothing is checked there.
    """
    if not torch.is_floating_point(x):
        raise TypeError(f"{name} must be a floating-point tensor; got dtype {x.dtype}")
    if x.dtype != weight.dtype and not _autocast_on(x.device.type):
        raise TypeError(
            f"{name} has dtype {x.dtype} but the weights of {layer} are {weight.dtype}: convert one to the "
            f"other (e.g. x.to({weight.dtype}) or module.to({x.dtype})), or run inside torch.autocast"
        )
