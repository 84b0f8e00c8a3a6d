"""The cases of chapter 3 - positional encoding (exercises 3.1, 3.2, 3.3).

A part of the cases registry (``registry.py``): loaded after it, into the same module
(``course_exercise_cases``), never imported on its own; the relative imports below name where
each helper lives and are left out when the parts are put together (:mod:`course_exercises.casefile`).
"""

from __future__ import annotations

from functools import partial
from types import ModuleType

import numpy as np
import torch

from .registry import Arrays, _add, _raises_value_error, _randint, to_array
from .shared import _pe_at

# ===========================================================================
# Chapter 3 - positional encoding
# ===========================================================================


def _p_pe(ns: ModuleType, positions: torch.Tensor, d_model: int, base: float | None) -> Arrays:
    kwargs = {} if base is None else {"base": base}
    what = f"encode_positions(positions of shape {tuple(positions.shape)}, {d_model}" + (f", base={base}" if base else "") + ")"
    return {"pe": to_array(ns.encode_positions(positions.clone(), d_model, **kwargs), what, kind="f")}


def _e_pe(positions: torch.Tensor, d_model: int, base: float | None) -> Arrays:
    return {"pe": _pe_at(positions.numpy(), d_model, 10000.0 if base is None else base)}


_PE_HINT = ("PE[pos, 2i] = sin(pos / base**(2i/d_model)) and PE[pos, 2i+1] = cos(pos / base**(2i/d_model)), one row per entry "
            "of `positions` (any shape, any integer positions); the exponent uses the even column index 2i for both columns "
            "of a pair; for odd d_model the last column is a sine. Compute the angles in float64: at positions in the thousands "
            "float32 angles are off by about 1e-4.")
_PE_FIXED = {
    "3.1-arange-10-d-8": (lambda: torch.arange(10), 8, None, 1),
    "3.1-odd-d-model-5": (lambda: torch.arange(7), 5, None, 2),
    "3.1-one-position": (lambda: torch.tensor([0]), 1, None, 1),
    "3.1-offset-batch-d-16": (lambda: torch.arange(20, 26)[None] + torch.tensor([[0], [100], [997]]), 16, None, 2),
    "3.1-left-padded-positions-odd-33": (lambda: torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]), 33, None, 1),
    "3.1-base-100": (lambda: torch.arange(12).reshape(3, 4), 6, 100.0, 2),
}
for _id, (_make, _d, _base, _pts) in _PE_FIXED.items():
    _add(_id, "3.1", _pts, (lambda m, d, b: lambda ns: _p_pe(ns, m(), d, b))(_make, _d, _base),
         expected=(lambda m, d, b: lambda: _e_pe(m(), d, b))(_make, _d, _base), hint=_PE_HINT, atol=2e-5)


def _p_pe_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_float_positions": _raises_value_error(lambda: ns.encode_positions(torch.tensor([0.0, 1.0]), 8)),
        "raised_for_negative_position": _raises_value_error(lambda: ns.encode_positions(torch.tensor([3, -1]), 8)),
        "raised_for_d_model_0": _raises_value_error(lambda: ns.encode_positions(torch.arange(4), 0)),
        "raised_for_base_1": _raises_value_error(lambda: ns.encode_positions(torch.arange(4), 8, base=1.0)),
    }


_add("3.1-rejects-bad-arguments", "3.1", 1, _p_pe_rejects,
     expected=lambda: {k: np.array(True) for k in ("raised_for_float_positions", "raised_for_negative_position", "raised_for_d_model_0",
                                                   "raised_for_base_1")},
     hint="Raise ValueError naming the argument: positions not an integer tensor or negative, d_model < 1, base <= 1.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_positions(parity: int) -> tuple[torch.Tensor, int]:
    """Drawn positions (3, 9) and a drawn d_model of the given parity (0 even, 1 odd)."""
    return _randint(301 + parity, 0, 5000, 3, 9), 2 * int(_randint(303 + parity, 1, 24)) + parity


def _drawn_base() -> float:
    return float(_randint(305, 2, 100001))


_add("3.1-drawn-positions", "3.1", 2, lambda ns: _p_pe(ns, *_drawn_positions(0), None),
     expected=lambda: _e_pe(*_drawn_positions(0), None), hint=_PE_HINT, atol=2e-5)
_add("3.1-drawn-odd-d-model", "3.1", 1, lambda ns: _p_pe(ns, *_drawn_positions(1), None),
     expected=lambda: _e_pe(*_drawn_positions(1), None), hint=_PE_HINT, atol=2e-5)
_add("3.1-drawn-base", "3.1", 1, lambda ns: _p_pe(ns, *_drawn_positions(0), _drawn_base()),
     expected=lambda: _e_pe(*_drawn_positions(0), _drawn_base()), hint=_PE_HINT, atol=2e-5)


def _sinusoid_rows(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """Input builder for 3.2: the sinusoidal rows (float64) of the given positions."""
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angle = positions.double()[..., None] * omega
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).flatten(-2)


def _p_peshift(ns: ModuleType, positions: torch.Tensor, d_model: int, k) -> Arrays:
    pe = _sinusoid_rows(positions, d_model)
    k_arg = k.clone() if isinstance(k, torch.Tensor) else k
    what = f"shift_encodings(pe of shape {tuple(pe.shape)}, k={'a tensor of shape ' + str(tuple(k.shape)) if isinstance(k, torch.Tensor) else k})"
    return {"shifted": to_array(ns.shift_encodings(pe, k_arg), what, kind="f")}


def _e_peshift(positions: torch.Tensor, d_model: int, k) -> Arrays:
    k_np = k.numpy() if isinstance(k, torch.Tensor) else k
    return {"shifted": _pe_at(positions.numpy() + k_np, d_model)}


_PESHIFT_HINT = ("For each pair (2i, 2i+1) with w = 1/10000**(2i/d_model): new_sin = sin*cos(w k) + cos*sin(w k), "
               "new_cos = cos*cos(w k) - sin*sin(w k); k broadcasts over the rows (pe.shape[:-1]).")
_PESHIFT_FIXED = {
    "3.2-offset-1-d-8": (lambda: torch.arange(10), 8, lambda: 1, 1),
    "3.2-offset-5-batch-d-16": (lambda: torch.arange(12).reshape(2, 6) * 7, 16, lambda: 5, 1),
    "3.2-negative-offset-d-4": (lambda: torch.arange(3, 9), 4, lambda: -3, 1),
    "3.2-offset-0-unchanged": (lambda: torch.arange(5), 6, lambda: 0, 1),
    "3.2-per-row-offsets": (lambda: torch.tensor([[0, 1, 2], [10, 20, 30]]), 8, lambda: torch.tensor([[1], [-4]]), 2),
}
for _id, (_pos, _d, _k, _pts) in _PESHIFT_FIXED.items():
    _add(_id, "3.2", _pts, (lambda p, d, k: lambda ns: _p_peshift(ns, p(), d, k()))(_pos, _d, _k),
         expected=(lambda p, d, k: lambda: _e_peshift(p(), d, k()))(_pos, _d, _k), hint=_PESHIFT_HINT, atol=1e-5)


def _p_peshift_rejects(ns: ModuleType) -> Arrays:
    return {"raised_for_odd_d_model": _raises_value_error(lambda: ns.shift_encodings(torch.zeros(3, 5, dtype=torch.float64), 2))}


_add("3.2-rejects-odd-d-model", "3.2", 1, _p_peshift_rejects, expected=lambda: {"raised_for_odd_d_model": np.array(True)},
     hint="For odd d_model the last column has no cosine partner: raise ValueError naming pe.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_peshift() -> tuple[torch.Tensor, int, torch.Tensor]:
    return _randint(311, 0, 200, 4, 5), 2 * int(_randint(312, 1, 17)), _randint(313, -30, 31, 4, 1)


def _drawn_scalar_shift() -> tuple[torch.Tensor, int, int]:
    return _randint(314, 0, 200, 3, 4), 2 * int(_randint(315, 1, 17)), int(_randint(316, -30, 31))


_add("3.2-drawn-scalar-offset", "3.2", 1, lambda ns: _p_peshift(ns, *_drawn_scalar_shift()),
     expected=lambda: _e_peshift(*_drawn_scalar_shift()), hint=_PESHIFT_HINT, atol=1e-5)
_add("3.2-drawn-offsets", "3.2", 2, lambda ns: _p_peshift(ns, *_drawn_peshift()), expected=lambda: _e_peshift(*_drawn_peshift()),
     hint=_PESHIFT_HINT, atol=1e-5)


def _alibi_slopes_reference(n_heads: int) -> list[float]:
    """Press et al. (2022): the geometric sequence 2^(-8/n), 2^(-16/n), ... for n a power of 2; otherwise the
    slopes of the power of 2 just below n, then every other slope of twice that power (the paper's code)."""
    if n_heads & (n_heads - 1) == 0:
        return [2.0 ** (-8.0 * (h + 1) / n_heads) for h in range(n_heads)]
    below = 1 << (n_heads.bit_length() - 1)
    return _alibi_slopes_reference(below) + _alibi_slopes_reference(2 * below)[0::2][: n_heads - below]


def _e_alibi(n_heads: int, seq_len: int) -> Arrays:
    slopes = np.array(_alibi_slopes_reference(n_heads))
    distance = np.abs(np.arange(seq_len)[:, None] - np.arange(seq_len)[None, :])
    return {"bias": -slopes[:, None, None] * distance[None]}


def _p_alibi(ns: ModuleType, n_heads: int, seq_len: int) -> Arrays:
    return {"bias": to_array(ns.alibi_bias(n_heads, seq_len), f"alibi_bias({n_heads}, {seq_len})", kind="f")}


_ALIBI_HINT = ("bias[h, i, j] = -m_h * |i - j|. For n_heads a power of 2, m_h = 2**(-8 (h+1) / n_heads) (h from 0); otherwise "
               "take the slopes for p = the largest power of 2 below n_heads, then slopes_for(2p)[0::2][:n_heads - p].")
for _id, _args, _pts in (
    ("3.3-8-heads", (8, 5), 1),
    ("3.3-16-heads", (16, 4), 1),
    ("3.3-one-head", (1, 6), 1),
    ("3.3-6-heads-not-a-power-of-2", (6, 4), 2),
    ("3.3-12-heads-not-a-power-of-2", (12, 3), 1),
):
    _add(_id, "3.3", _pts, partial(_p_alibi, n_heads=_args[0], seq_len=_args[1]), expected=partial(_e_alibi, *_args), hint=_ALIBI_HINT,
         rtol=1e-6, atol=1e-9)


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_alibi(power_of_2: bool) -> tuple[int, int]:
    """Drawn (n_heads, seq_len): n_heads a power of 2 (1 .. 64), or not one (3 .. 63)."""
    if power_of_2:
        return 2 ** int(_randint(323, 0, 7)), int(_randint(324, 2, 17))
    others = [n for n in range(3, 64) if n & (n - 1)]
    return others[int(_randint(321, 0, len(others)))], int(_randint(322, 2, 17))


_add("3.3-drawn-power-of-2-heads", "3.3", 1, lambda ns: _p_alibi(ns, *_drawn_alibi(True)),
     expected=lambda: _e_alibi(*_drawn_alibi(True)), hint=_ALIBI_HINT, rtol=1e-6, atol=1e-9)
_add("3.3-drawn-sizes", "3.3", 2, lambda ns: _p_alibi(ns, *_drawn_alibi(False)), expected=lambda: _e_alibi(*_drawn_alibi(False)),
     hint=_ALIBI_HINT, rtol=1e-6, atol=1e-9)


def _p_alibi_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_n_heads_0": _raises_value_error(lambda: ns.alibi_bias(0, 4)),
        "raised_for_seq_len_0": _raises_value_error(lambda: ns.alibi_bias(8, 0)),
    }


_add("3.3-rejects-bad-sizes", "3.3", 1, _p_alibi_rejects,
     expected=lambda: {"raised_for_n_heads_0": np.array(True), "raised_for_seq_len_0": np.array(True)},
     hint="Raise ValueError naming the argument when n_heads or seq_len is smaller than 1.")
