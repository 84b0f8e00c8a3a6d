"""The cases of chapter 7 - Add & Norm (exercises 7.1, 7.2, 7.3, 7.4, 7.5).

A part of the cases registry (``registry.py``): loaded after it, into the same module
(``course_exercise_cases``), never imported on its own; the relative imports below name where
each helper lives and are left out when the parts are put together (:mod:`course_exercises.casefile`).
"""

from __future__ import annotations

from functools import partial
from types import ModuleType
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from .registry import Arrays, _add, _f64, _raises_value_error, _randn, to_array

# ===========================================================================
# Chapter 7 - Add & Norm
# ===========================================================================
def _ln_inputs(seed, shape, n_dims, shift, eps):
    """x of ``shape``; gamma and beta of the last ``n_dims`` dimensions of it."""
    norm_shape = shape[len(shape) - n_dims:]
    return (_randn(seed, *shape, shift=shift), _randn(seed + 1, *norm_shape, scale=0.5, shift=1.0),
            _randn(seed + 2, *norm_shape, scale=0.5), eps)


def _p_ln(ns: ModuleType, args) -> Arrays:
    x, gamma, beta, eps = _ln_inputs(*args)
    return {"out": to_array(ns.layer_norm(x, gamma, beta, eps), "layer_norm(x, gamma, beta, eps)", kind="f")}


def _e_ln(args) -> Arrays:
    x, gamma, beta, eps = _ln_inputs(*args)
    return {"out": _f64(F.layer_norm(x.double(), tuple(gamma.shape), gamma.double(), beta.double(), eps))}


_LN_HINT = ("Normalise over the trailing dimensions that gamma has (gamma.shape == x.shape[-gamma.dim():]), as "
            "nn.LayerNorm(normalized_shape) does: ONE mean and ONE variance over all those entries together, "
            "(x - mean) / sqrt(var + eps) * gamma + beta, the BIASED variance (divide by the number of entries), eps inside "
            "the square root.")
_LN_MULTI = (" Here gamma has more than one dimension: average over dims = tuple(range(-gamma.dim(), 0)), not over the "
             "last one only.")
for _id, _args, _points, _hint in (
    ("7.1-batch-2x5-d-8", (701, (2, 5, 8), 1, 0.0, 1e-5), 1, _LN_HINT),
    ("7.1-eps-0.1", (703, (2, 4, 6), 1, 0.0, 0.1), 1, _LN_HINT + " Use the eps argument you are given (0.1 here)."),
    ("7.1-large-mean", (704, (4, 2, 6), 1, 100.0, 1e-5), 1,
     _LN_HINT + " Here every row has mean about 100: compute the variance from the centred values, mean((x - mean)**2), "
                "not as mean(x**2) - mean**2, which loses all precision in float32."),
    ("7.1-gamma-2d-heads-4x6", (705, (2, 3, 4, 6), 2, 0.0, 1e-5), 2, _LN_HINT + _LN_MULTI),
    ("7.1-gamma-3d-large-mean-eps-0.05", (706, (5, 2, 3, 4), 3, 100.0, 0.05), 2,
     _LN_HINT + _LN_MULTI + " Centre before squaring (the mean is about 100), and use eps = 0.05."),
    ("7.1-gamma-2d-large-mean-eps-0.01", (707, (3, 5, 4), 2, 50.0, 0.01), 2,
     _LN_HINT + _LN_MULTI + " Centre before squaring (the mean is about 50), and use eps = 0.01."),
):
    # float32 rounding of a mean of about 100 costs about 1e-5 in each normalised value: a looser atol there
    _add(_id, "7.1", _points, partial(_p_ln, args=_args), expected=partial(_e_ln, _args), hint=_hint,
         atol=1e-4 if "large-mean" in _id else 1e-5, rtol=1e-4)


def _p_ln_rejects(ns: ModuleType) -> Arrays:
    x = torch.ones(2, 3, 6) + torch.arange(6.0)
    return {
        "raised_for_gamma_of_5_features": _raises_value_error(lambda: ns.layer_norm(x, torch.ones(5), torch.zeros(5))),
        "raised_for_gamma_3x5": _raises_value_error(lambda: ns.layer_norm(x, torch.ones(3, 5), torch.zeros(3, 5))),
        "raised_for_beta_shape": _raises_value_error(lambda: ns.layer_norm(x, torch.ones(6), torch.zeros(3, 6))),
    }


_add("7.1-rejects-shapes", "7.1", 1, _p_ln_rejects,
     expected=lambda: {"raised_for_gamma_of_5_features": np.array(True), "raised_for_gamma_3x5": np.array(True),
                       "raised_for_beta_shape": np.array(True)},
     hint="Raise ValueError naming gamma when gamma.shape is not the trailing shape of x (x.shape[-gamma.dim():]), and naming "
          "beta when beta.shape != gamma.shape - broadcasting would hide some of these mistakes.")


def _sublayer_fn(seed: int, d_model: int, zero: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """A fixed, deterministic sublayer: tanh(x @ W + b), or zero."""
    w = _randn(seed, d_model, d_model, scale=d_model**-0.5)
    b = _randn(seed + 1, d_model, scale=0.1)

    def sublayer(y: torch.Tensor) -> torch.Tensor:
        if zero:
            return torch.zeros_like(y)
        return torch.tanh(y @ w.to(y.dtype) + b.to(y.dtype))

    return sublayer


def _stack_inputs(seed, batch, seq_len, d_model, n_layers, zero):
    """x, the sublayers, one (gamma, beta) per sublayer and a final (gamma, beta)."""
    x = _randn(seed, batch, seq_len, d_model, scale=2.0, shift=0.5)
    fns = [_sublayer_fn(seed + 10 * (l + 1), d_model, zero) for l in range(n_layers)]
    norms = [(_randn(seed + 10 * (l + 1) + 2, d_model, scale=0.3, shift=1.0), _randn(seed + 10 * (l + 1) + 3, d_model, scale=0.3))
             for l in range(n_layers)]
    final = (_randn(seed + 4, d_model, scale=0.3, shift=1.0), _randn(seed + 5, d_model, scale=0.3))
    return x, fns, norms, final


def _p_stack(ns: ModuleType, args, norm_first: bool) -> Arrays:
    x, fns, norms, final = _stack_inputs(*args)
    if norm_first:
        out = ns.pre_ln_stack(x, fns, norms, final)
        return {"out": to_array(out, "pre_ln_stack(x, sublayers, norms, final_norm)", kind="f")}
    return {"out": to_array(ns.post_ln_stack(x, fns, norms), "post_ln_stack(x, sublayers, norms)", kind="f")}


def _e_stack(args, norm_first: bool) -> Arrays:
    """course_lib's ResidualSublayer (dropout 0, LayerNorm weights copied) once per sublayer, in float64."""
    from course_lib.layers import ResidualSublayer

    x, fns, norms, final = _stack_inputs(*args)
    h = x.double()
    with torch.no_grad():
        for fn, (gamma, beta) in zip(fns, norms):
            block = ResidualSublayer(x.size(-1), dropout=0.0, norm_first=norm_first).double().eval()
            block.norm.weight.copy_(gamma.double())
            block.norm.bias.copy_(beta.double())
            h = block(h, fn)
        if norm_first:
            h = F.layer_norm(h, (x.size(-1),), final[0].double(), final[1].double(), 1e-5)
    return {"out": _f64(h)}


_PRE_HINT = ("Pre-LN: for each sublayer l, x = x + sublayer_l(LayerNorm_l(x)) with that sublayer's own (gamma, beta) - the "
             "residual path carries x itself, never normalised; after the last sublayer, ONE final LayerNorm with final_norm.")
_POST_HINT = ("Post-LN (the paper, section 3.1): for each sublayer l, x = LayerNorm_l(x + sublayer_l(x)) with that sublayer's "
              "own (gamma, beta) - add first, normalise the sum; no final LayerNorm.")
for _ex, _nf, _hint, _seed in (("7.2", True, _PRE_HINT, 710), ("7.3", False, _POST_HINT, 750)):
    for _suffix, _args, _points in (
        ("one-sublayer", (_seed + 1, 2, 4, 8, 1, False), 1),
        ("three-sublayers-d-16", (_seed + 2, 1, 3, 16, 3, False), 2),
        ("four-sublayers", (_seed + 3, 2, 2, 8, 4, False), 2),
        ("zero-sublayers-two", (_seed + 4, 2, 2, 6, 2, True), 1),
    ):
        _add(f"{_ex}-{_suffix}", _ex, _points, partial(_p_stack, args=_args, norm_first=_nf), expected=partial(_e_stack, _args, _nf),
             hint=_hint, atol=1e-5, rtol=1e-4)


def _p_stack_rejects(ns: ModuleType, norm_first: bool) -> Arrays:
    x = torch.ones(1, 2, 4) + torch.arange(4.0)
    fns = [lambda y: y, lambda y: y]
    one = [(torch.ones(4), torch.zeros(4))]
    final = (torch.ones(4), torch.zeros(4))
    if norm_first:
        return {"raised_for_2_sublayers_1_norm": _raises_value_error(lambda: ns.pre_ln_stack(x, fns, one, final))}
    return {"raised_for_2_sublayers_1_norm": _raises_value_error(lambda: ns.post_ln_stack(x, fns, one))}


for _ex, _nf in (("7.2", True), ("7.3", False)):
    _add(f"{_ex}-rejects-norms-length", _ex, 1, partial(_p_stack_rejects, norm_first=_nf),
         expected=lambda: {"raised_for_2_sublayers_1_norm": np.array(True)},
         hint="Raise ValueError naming norms when len(norms) != len(sublayers): zip() would silently drop a sublayer.")


def _rms_inputs(seed, shape, shift, scale, eps):
    return _randn(seed, *shape, scale=scale, shift=shift), _randn(seed + 1, shape[-1], scale=0.5, shift=1.0), eps


def _p_rms(ns: ModuleType, args) -> Arrays:
    x, gain, eps = _rms_inputs(*args)
    return {"out": to_array(ns.rms_norm(x, gain, eps), "rms_norm(x, gain, eps)", kind="f")}


def _e_rms(args) -> Arrays:
    x, gain, eps = _rms_inputs(*args)
    x64, g64 = x.double(), gain.double()
    if hasattr(F, "rms_norm"):  # PyTorch >= 2.4
        return {"out": _f64(F.rms_norm(x64, (x.size(-1),), g64, eps))}
    return {"out": _f64(x64 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + eps) * g64)}  # pragma: no cover


_RMS_HINT = ("RMSNorm (Zhang & Sennrich 2019): out = x / sqrt(mean(x**2 over the last dim) + eps) * gain - no mean "
             "subtracted, no bias, eps inside the square root, the mean of the squares (divide by d_model, not d_model - 1).")
for _id, _args, _points, _hint in (
    ("7.4-batch-2x5-d-8", (741, (2, 5, 8), 0.0, 1.0, 1e-6), 1, _RMS_HINT),
    ("7.4-shifted-rows-eps-0.1", (742, (3, 4, 6), 3.0, 1.0, 0.1), 2,
     _RMS_HINT + " These rows have mean about 3: RMSNorm does NOT centre them (that is what makes it cheaper than LayerNorm); "
                 "use eps = 0.1."),
    ("7.4-eps-0.5-small-inputs", (743, (2, 3, 5), 0.0, 0.1, 0.5), 2,
     _RMS_HINT + " With small inputs and eps = 0.5 the eps term dominates: use the eps you are given, inside the root."),
    ("7.4-d-1", (744, (4, 3, 1), 0.0, 2.0, 1e-6), 1, _RMS_HINT + " With d_model = 1 the RMS is |x|: out = sign(x) * gain."),
):
    _add(_id, "7.4", _points, partial(_p_rms, args=_args), expected=partial(_e_rms, _args), hint=_hint, atol=1e-5, rtol=1e-4)


def _p_rms_rejects(ns: ModuleType) -> Arrays:
    x = torch.ones(2, 3, 6) + torch.arange(6.0)
    return {"raised_for_gain_of_5": _raises_value_error(lambda: ns.rms_norm(x, torch.ones(5), 1e-6)),
            "raised_for_gain_3x6": _raises_value_error(lambda: ns.rms_norm(x, torch.ones(3, 6), 1e-6))}


_add("7.4-rejects-gain-shape", "7.4", 1, _p_rms_rejects,
     expected=lambda: {"raised_for_gain_of_5": np.array(True), "raised_for_gain_3x6": np.array(True)},
     hint="Raise ValueError naming gain when gain.shape != (x.shape[-1],).")


def _depth_inputs(seed, batch, seq_len, d_model, n_layers):
    x = _randn(seed, batch, seq_len, d_model, scale=1.5, shift=0.3)
    fns = [_sublayer_fn(seed + 10 * (l + 1), d_model, False) for l in range(n_layers)]
    return x, fns, _randn(seed + 5, batch, seq_len, d_model)


def _p_depth(ns: ModuleType, args, norm_first: bool) -> Arrays:
    x, fns, w = _depth_inputs(*args)
    out = ns.gradient_norms_by_depth(x, fns, w, norm_first)
    return {"norms": to_array(out, f"gradient_norms_by_depth(x, sublayers, w, norm_first={norm_first})", kind="f")}


def _e_depth(args, norm_first: bool) -> Arrays:
    """course_lib's ResidualSublayer blocks (unit LayerNorms, dropout 0) in float64, gradients by autograd."""
    from course_lib.layers import ResidualSublayer

    x, fns, w = _depth_inputs(*args)
    d_model = x.size(-1)
    streams = [x.double().requires_grad_(True)]
    for fn in fns:
        block = ResidualSublayer(d_model, dropout=0.0, norm_first=norm_first).double().eval()
        streams.append(block(streams[-1], fn))
    out = F.layer_norm(streams[-1], (d_model,)) if norm_first else streams[-1]
    grads = torch.autograd.grad((w.double() * out).sum(), streams)
    return {"norms": np.array([float(g.norm()) for g in grads])}


_DEPTH_HINT = ("Keep every stream tensor x_0 (= x, with requires_grad) ... x_N (after each block), build "
               "L = (w * output).sum() with output = LayerNorm(x_N) for Pre-LN (the final LayerNorm) and x_N for Post-LN, "
               "then torch.autograd.grad(L, [x_0, ..., x_N]) and the Frobenius norm of each gradient, in the order "
               "x_0 (the input) first. Blocks: Post-LN x = LN(x + f(x)), Pre-LN x = x + f(LN(x)), LayerNorms with gain 1, "
               "bias 0, eps 1e-5.")
for _nf, _name in ((False, "post-ln"), (True, "pre-ln")):
    for _suffix, _args, _points in (("3-sublayers", (761, 2, 3, 8, 3), 1), ("8-sublayers", (762, 2, 4, 8, 8), 2)):
        _add(f"7.5-{_name}-{_suffix}", "7.5", _points, partial(_p_depth, args=_args, norm_first=_nf),
             expected=partial(_e_depth, _args, _nf), hint=_DEPTH_HINT, rtol=5e-4, atol=1e-5)


def _p_depth_rejects(ns: ModuleType) -> Arrays:
    x = torch.ones(2, 3, 4) + torch.arange(4.0)
    return {"raised_for_w_of_other_shape": _raises_value_error(
        lambda: ns.gradient_norms_by_depth(x, [torch.tanh], torch.ones(1, 3, 4), True))}


_add("7.5-rejects-w-shape", "7.5", 1, _p_depth_rejects, expected=lambda: {"raised_for_w_of_other_shape": np.array(True)},
     hint="Raise ValueError naming w when w.shape != x.shape: broadcasting w would silently change the loss.")
