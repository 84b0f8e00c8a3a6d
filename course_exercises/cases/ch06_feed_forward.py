"""The cases of chapter 6 - position-wise feed-forward network (exercises 6.1, 6.2, 6.3, 6.4).

A part of the cases registry (``registry.py``): loaded after it, into the same module
(``course_exercise_cases``), never imported on its own; the relative imports below name where
each helper lives and are left out when the parts are put together (:mod:`course_exercises.casefile`).
"""

from __future__ import annotations

import math
from functools import partial
from types import ModuleType

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .registry import Arrays, _add, _f64, _pair, _raises_value_error, _randint, _randn, to_array

# ===========================================================================
# Chapter 6 - position-wise feed-forward network
# ===========================================================================
def _ffn_inputs(seed, batch, seq_len, d_model, d_ff):
    """Weights in nn.Linear's layout: w1 (d_ff, d_model), w2 (d_model, d_ff)."""
    x = _randn(seed, batch, seq_len, d_model)
    w1 = _randn(seed + 1, d_ff, d_model, scale=d_model**-0.5)
    b1 = _randn(seed + 2, d_ff, scale=0.3)
    w2 = _randn(seed + 3, d_model, d_ff, scale=d_ff**-0.5)
    b2 = _randn(seed + 4, d_model, scale=0.1)
    return x, w1, b1, w2, b2


def _p_ffn(ns: ModuleType, args) -> Arrays:
    out, active = _pair(ns.position_wise_ffn(*_ffn_inputs(*args)), "position_wise_ffn(x, w1, b1, w2, b2)", ("out", "active"))
    return {"out": to_array(out, "out", kind="f"), "active": to_array(active, "active", kind="f")}


def _e_ffn(args) -> Arrays:
    x, w1, b1, w2, b2 = (t.double() for t in _ffn_inputs(*args))
    pre = F.linear(x, w1, b1)
    return {"out": _f64(F.linear(F.relu(pre), w2, b2)), "active": _f64((pre > 0).double().mean(-1))}


_FFN_HINT = ("The weights come in nn.Linear's layout (out_features, in_features): FFN(x) = max(0, x @ w1.T + b1) @ w2.T + b2. "
             "active[b, t] is the fraction of the d_ff inner units that are > 0 after the ReLU at that position.")
for _id, _args, _pts in (
    ("6.1-d-8-ff-32", (601, 2, 5, 8, 32), 2),
    ("6.1-one-position", (602, 1, 1, 4, 16), 1),
    ("6.1-d-16-ff-64", (603, 3, 7, 16, 64), 2),
):
    _add(_id, "6.1", _pts, partial(_p_ffn, args=_args), expected=partial(_e_ffn, _args), hint=_FFN_HINT, atol=1e-5)


def _p_ffn_rejects(ns: ModuleType) -> Arrays:
    x, w1, b1, w2, b2 = _ffn_inputs(604, 1, 3, 8, 32)
    return {
        "raised_for_paper_layout_w1": _raises_value_error(lambda: ns.position_wise_ffn(x, w1.T, b1, w2, b2)),
        "raised_for_paper_layout_w2": _raises_value_error(lambda: ns.position_wise_ffn(x, w1, b1, w2.T, b2)),
    }


_add("6.1-rejects-transposed-weights", "6.1", 1, _p_ffn_rejects,
     expected=lambda: {"raised_for_paper_layout_w1": np.array(True), "raised_for_paper_layout_w2": np.array(True)},
     hint="Raise ValueError naming w1 (or w2) when its shape is not (d_ff, d_model) (or (d_model, d_ff)), with d_model = x.shape[-1] "
          "and d_ff = w1.shape[0]: a weight in the paper's layout is a common slip.")


def _gelu_input(which: str) -> torch.Tensor:
    if which == "grid":
        return torch.linspace(-6.0, 6.0, 121)
    if which == "random":
        return _randn(611, 3, 4, 5, scale=2.0)
    if which == "tail-grid":
        return torch.linspace(-12.0, -5.0, 71)
    if which == "tail-random":
        return _randn(612, 4, 6, scale=2.0, shift=-8.0).clamp(-12.0, -5.0)
    return torch.tensor([-30.0, -10.0, -1e-3, 0.0, 1e-3, 10.0, 30.0])


def _p_gelu(ns: ModuleType, which) -> Arrays:
    return {"out": to_array(ns.gelu(_gelu_input(which)), "gelu(x)", kind="f")}


def _e_gelu(which) -> Arrays:
    """The exact GELU x Phi(x) = x erfc(-x / sqrt 2) / 2, element by element with math.erfc in float64."""
    x = _gelu_input(which).double().flatten().tolist()
    values = [0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x]
    return {"out": np.array(values, dtype=np.float64).reshape(tuple(_gelu_input(which).shape))}


_GELU_HINT = "Use the exact form GELU(x) = x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2))), not the tanh approximation."
_GELU_TAIL_HINT = ("For x below about -5 the value 1 + erf(x / sqrt 2) is 1 minus a number closer to 1 than float precision "
                   "can tell, so it comes out 0 (or off by orders of magnitude): rewrite 1 + erf(z) as erfc(-z) "
                   "(torch.special.erfc), which is computed accurately in the tail. The check here is relative (rtol 1e-4).")
for _id, _which, _pts, _rtol, _atol, _hint in (
    ("6.2-grid", "grid", 1, 1e-5, 1e-6, _GELU_HINT),
    ("6.2-random-3d", "random", 1, 1e-5, 1e-6, _GELU_HINT),
    ("6.2-extremes", "extremes", 1, 1e-5, 1e-6, _GELU_HINT),
    ("6.2-tail-grid", "tail-grid", 2, 1e-4, 0.0, _GELU_TAIL_HINT),
    ("6.2-tail-random", "tail-random", 2, 1e-4, 0.0, _GELU_TAIL_HINT),
):
    _add(_id, "6.2", _pts, partial(_p_gelu, which=_which), expected=partial(_e_gelu, _which), hint=_hint, rtol=_rtol, atol=_atol)


def _swiglu_inputs(seed, batch, seq_len, d_model, d_hidden):
    x = _randn(seed, batch, seq_len, d_model)
    w_gate = _randn(seed + 1, d_model, d_hidden, scale=d_model**-0.5)
    w_up = _randn(seed + 2, d_model, d_hidden, scale=d_model**-0.5)
    w_down = _randn(seed + 3, d_hidden, d_model, scale=d_hidden**-0.5)
    return x, w_gate, w_up, w_down


def _p_swiglu(ns: ModuleType, args) -> Arrays:
    return {"out": to_array(ns.swiglu_ffn(*_swiglu_inputs(*args)), "swiglu_ffn(x, w_gate, w_up, w_down)", kind="f")}


def _e_swiglu(args) -> Arrays:
    x, w_gate, w_up, w_down = (t.double() for t in _swiglu_inputs(*args))
    return {"out": _f64((F.silu(x @ w_gate) * (x @ w_up)) @ w_down)}


_SWIGLU_HINT = ("SwiGLU(x) = (Swish(x @ w_gate) * (x @ w_up)) @ w_down with Swish(z) = z * sigmoid(z) (SiLU): the Swish goes on "
                "the GATE branch only, the product is elementwise, and there are no biases.")
for _id, _args, _pts in (
    ("6.3-d-8-hidden-24", (631, 2, 5, 8, 24), 2),
    ("6.3-d-16-hidden-40", (632, 3, 4, 16, 40), 2),
    ("6.3-one-position", (633, 1, 1, 6, 16), 1),
):
    _add(_id, "6.3", _pts, partial(_p_swiglu, args=_args), expected=partial(_e_swiglu, _args), hint=_SWIGLU_HINT, atol=1e-5)


def _p_swiglu_rejects(ns: ModuleType) -> Arrays:
    x, w_gate, w_up, w_down = _swiglu_inputs(634, 1, 2, 8, 24)
    return {
        "raised_for_gate_and_up_differ": _raises_value_error(lambda: ns.swiglu_ffn(x, w_gate, w_up[:, :20], w_down)),
        "raised_for_w_down_shape": _raises_value_error(lambda: ns.swiglu_ffn(x, w_gate, w_up, w_down.T)),
    }


_add("6.3-rejects-bad-shapes", "6.3", 1, _p_swiglu_rejects,
     expected=lambda: {"raised_for_gate_and_up_differ": np.array(True), "raised_for_w_down_shape": np.array(True)},
     hint="Raise ValueError naming the argument when w_gate and w_up are not both (d_model, d_hidden) or w_down is not (d_hidden, d_model).")


#: (d_model, d_ff, multiple_of) -> d_hidden, worked by hand: 2 d_ff / 3, floored, then rounded UP to a multiple.
#: 11008, 13824 and 22016 are the hidden widths of LLaMA 7B, 13B and 65B (Touvron et al., 2023).
_SWIGLU_WIDTH_ROWS = [(512, 2048, 1), (512, 2048, 8), (768, 3072, 64), (4096, 16384, 256), (5120, 20480, 256),
                      (8192, 32768, 256)]
#: the answers, used only by the expected values (never by ``produce``): 4096 / 3 = 1365.33 -> 1365; 1365 -> 171 * 8;
#: exactly 2048; 10922 -> 43 * 256; 13653 -> 54 * 256; 21845 -> 86 * 256
_SWIGLU_WIDTH_HAND = [1365, 1368, 2048, 11008, 13824, 22016]


def _p_swiglu_width(ns: ModuleType, rows) -> Arrays:
    rows = rows() if callable(rows) else rows
    got = [ns.swiglu_hidden_width(int(d), int(ff), int(m)) for d, ff, m in rows]
    arrays = {"d_hidden": [], "swiglu_params": [], "relu_params": []}
    for (d, ff, m), result in zip(rows, got):
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            raise TypeError(f"swiglu_hidden_width({d}, {ff}, {m}) must return a triple (d_hidden, swiglu_params, relu_params); "
                            f"got {type(result).__name__}")
        for key, value in zip(arrays, result):
            arrays[key].append(to_array(value, f"{key} of swiglu_hidden_width({d}, {ff}, {m})", kind="i"))
    return {key: np.stack(values) for key, values in arrays.items()}


def _count_params(d_model: int, d_hidden: int, d_ff: int) -> tuple[int, int]:
    """Parameters of bias-free nn.Linear layers (on the meta device: nothing is allocated)."""
    def count(*layers):
        return sum(p.numel() for layer in layers for p in layer.parameters())
    swiglu = count(nn.Linear(d_model, d_hidden, bias=False, device="meta"), nn.Linear(d_model, d_hidden, bias=False, device="meta"),
                   nn.Linear(d_hidden, d_model, bias=False, device="meta"))
    relu = count(nn.Linear(d_model, d_ff, bias=False, device="meta"), nn.Linear(d_ff, d_model, bias=False, device="meta"))
    return swiglu, relu


def _e_swiglu_width_table() -> Arrays:
    hidden = _SWIGLU_WIDTH_HAND
    counts = [_count_params(d, h, ff) for (d, ff, _), h in zip(_SWIGLU_WIDTH_ROWS, hidden)]
    return {"d_hidden": np.array(hidden, dtype=np.int64), "swiglu_params": np.array([c[0] for c in counts], dtype=np.int64),
            "relu_params": np.array([c[1] for c in counts], dtype=np.int64)}


def _swiglu_width_drawn_rows() -> list[tuple[int, int, int]]:
    d_model = _randint(641, 8, 2049, 5)
    d_ff = _randint(642, 16, 8193, 5)
    multiple = torch.tensor([1, 8, 32, 64, 256])[_randint(643, 0, 5, 5)]
    return [(int(d), int(ff), int(m)) for d, ff, m in zip(d_model, d_ff, multiple)]


def _e_swiglu_width_drawn() -> Arrays:
    rows = _swiglu_width_drawn_rows()
    hidden = []
    for _, d_ff, m in rows:  # the smallest multiple of m that is >= floor(2 d_ff / 3), by counting up
        target = (2 * d_ff) // 3
        h = m
        while h < target:
            h += m
        hidden.append(h)
    counts = [_count_params(d, h, ff) for (d, ff, _), h in zip(rows, hidden)]
    return {"d_hidden": np.array(hidden, dtype=np.int64), "swiglu_params": np.array([c[0] for c in counts], dtype=np.int64),
            "relu_params": np.array([c[1] for c in counts], dtype=np.int64)}


_WIDTH_HINT = ("A bias-free ReLU FFN has 2 * d_model * d_ff parameters, a SwiGLU FFN 3 * d_model * d_hidden (three matrices). "
               "Equal counts need d_hidden = 2 d_ff / 3: take floor(2 * d_ff / 3) in integer arithmetic ((2 * d_ff) // 3), then "
               "round UP to the next multiple of multiple_of (unchanged if it already is one).")
_add("6.4-hand-table", "6.4", 2, partial(_p_swiglu_width, rows=_SWIGLU_WIDTH_ROWS), expected=_e_swiglu_width_table, hint=_WIDTH_HINT,
     rtol=0.0, atol=1e-6)
_add("6.4-drawn-sizes", "6.4", 2, partial(_p_swiglu_width, rows=_swiglu_width_drawn_rows), expected=_e_swiglu_width_drawn, hint=_WIDTH_HINT,
     rtol=0.0, atol=1e-6)


def _p_swiglu_width_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_zero_d_ff": _raises_value_error(lambda: ns.swiglu_hidden_width(512, 0, 8)),
        "raised_for_zero_multiple_of": _raises_value_error(lambda: ns.swiglu_hidden_width(512, 2048, 0)),
    }


_add("6.4-rejects-bad-sizes", "6.4", 1, _p_swiglu_width_rejects,
     expected=lambda: {"raised_for_zero_d_ff": np.array(True), "raised_for_zero_multiple_of": np.array(True)},
     hint="Raise ValueError naming the argument when d_model, d_ff or multiple_of is smaller than 1.")
