"""The cases of chapter 9 - training (exercises 9.1, 9.2, 9.3, 9.4).

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

from .registry import Arrays, ReturnTypeError, _add, _f64, _pair, _raises_value_error, _randint, _randn, to_array
from .shared import _per_call, _rejections

# ===========================================================================
# Chapter 9 - training
# ===========================================================================
def _ls_inputs(seed, batch, tgt_len, vocab, pad_id, n_pad):
    logits = _randn(seed, batch, tgt_len, vocab, scale=2.0)
    target = _randint(seed + 1, 0, vocab, batch, tgt_len)
    target = torch.where(target == pad_id, (target + 1) % vocab, target)  # no accidental padding
    for b in range(batch):  # the last n_pad * b positions of sequence b are padding
        if n_pad * b:
            target[b, tgt_len - min(tgt_len - 1, n_pad * b):] = pad_id
    return logits, target


def _p_ls(ns: ModuleType, args, eps) -> Arrays:
    logits, target = _ls_inputs(*args)
    what = "label_smoothed_loss(logits, target, label_smoothing, pad_id)"
    with torch.no_grad():  # the statement asks for the gradient in closed form: no backward() while it runs
        loss, grad = _pair(ns.label_smoothed_loss(logits, target, eps, args[4]), what, ("loss", "grad_logits"))
    return {"loss": to_array(loss, what + "[0]", kind="f"), "grad_logits": to_array(grad, what + "[1]", kind="f")}


def _e_ls(args, eps) -> Arrays:
    """PyTorch's built-in loss in float64, and its gradient by autograd."""
    logits, target = _ls_inputs(*args)
    v = logits.size(-1)
    leaf = logits.double().requires_grad_(True)
    loss = F.cross_entropy(leaf.reshape(-1, v), target.reshape(-1), ignore_index=args[4], label_smoothing=eps)
    (grad,) = torch.autograd.grad(loss, leaf)
    return {"loss": _f64(loss), "grad_logits": _f64(grad)}


_LS_HINT = ("Target distribution q: (1 - eps) on the true class plus eps / vocab_size on EVERY class (the true one included), "
            "as F.cross_entropy(..., label_smoothing=eps) does; loss = mean over the n non-padding positions of "
            "-sum_c q_c log p_c. Its gradient with respect to the logits is (softmax(logits) - q) / n at every non-padding "
            "position and exactly 0 at the padding positions (they are not in the mean). The cases run your function "
            "with autograd switched off (torch.no_grad()): backward() fails there - compute the gradient yourself.")
for _id, _args, _eps, _points in (
    ("9.1-eps-0.1-with-padding", (901, 3, 6, 11, 0, 2), 0.1, 2),
    ("9.1-eps-0-is-cross-entropy", (902, 2, 5, 7, 0, 1), 0.0, 1),
    ("9.1-eps-0.3-pad-id-2", (903, 2, 4, 50, 2, 2), 0.3, 2),
    ("9.1-no-padding", (904, 1, 8, 5, 0, 0), 0.1, 1),
    ("9.1-eps-1-uniform-target", (906, 2, 3, 6, 0, 1), 1.0, 1),
):
    _add(_id, "9.1", _points, partial(_p_ls, args=_args, eps=_eps), expected=partial(_e_ls, _args, _eps), hint=_LS_HINT, atol=1e-5)


def _p_ls_rejects(ns: ModuleType) -> Arrays:
    logits, target = _ls_inputs(905, 1, 3, 4, 0, 0)
    return {
        "raised_for_eps_1.5": _raises_value_error(lambda: ns.label_smoothed_loss(logits, target, 1.5, 0)),
        "raised_for_eps_-0.1": _raises_value_error(lambda: ns.label_smoothed_loss(logits, target, -0.1, 0)),
    }


_add("9.1-rejects-bad-label-smoothing", "9.1", 1, _p_ls_rejects,
     expected=lambda: {"raised_for_eps_1.5": np.array(True), "raised_for_eps_-0.1": np.array(True)},
     hint="Raise ValueError naming label_smoothing when it is outside [0, 1].")


def _noam_closed_form(steps, d_model: int, warmup: int) -> np.ndarray:
    return np.array([d_model**-0.5 * min(s**-0.5, s * warmup**-1.5) for s in np.asarray(steps, dtype=np.int64).ravel()]).reshape(
        np.shape(steps))


_NOAM_STEPS = {
    "9.2-paper-base-512-4000": ((1, 10, 100, 1000, 3999, 4000, 4001, 10000, 100000), 512, 4000),
    "9.2-d-128-warmup-400": ((1, 50, 399, 400, 401, 2000), 128, 400),
    "9.2-warmup-1": ((1, 2, 9, 1000), 64, 1),
    "9.2-2d-steps": (((1, 2, 3), (600, 1200, 4800)), 256, 1200),
}


def _e_noam(key) -> Arrays:
    return {"lr": _noam_closed_form(*_NOAM_STEPS[key])}


def _noam_value(ns: ModuleType, step, d_model, warmup) -> np.ndarray:
    return to_array(ns.noam_lr(step, d_model, warmup), f"noam_lr(step, {d_model}, {warmup})", kind="f")


def _p_noam(ns: ModuleType, key) -> Arrays:
    steps, d_model, warmup = _NOAM_STEPS[key]
    return {"lr": _noam_value(ns, torch.tensor(steps), d_model, warmup)}


_NOAM_HINT = ("lr = d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5) (paper equation 3), ELEMENT-WISE for a tensor "
              "of steps: Python's min() cannot compare tensors - use torch.minimum, and compute in floating point "
              "(step.double()) so that step**-0.5 is not an integer power. The result has the shape of step; the peak is at "
              "step == warmup_steps (about 6.99e-4 for d_model 512, warm-up 4000).")
for _id in _NOAM_STEPS:
    _add(_id, "9.2", 1, partial(_p_noam, key=_id), expected=partial(_e_noam, _id),
         hint=_NOAM_HINT, rtol=1e-6, atol=0.0)


def _p_noam_int(ns: ModuleType) -> Arrays:
    for step in (1, 4000, 16000):  # the statement promises a Python float for an int step
        value = ns.noam_lr(step, 512, 4000)
        if not isinstance(value, float):
            raise ReturnTypeError(f"noam_lr({step}, 512, 4000) returned {type(value).__name__}; an int step gives a "
                                  f"Python float (float(...) of the 0-dim result)")
    values = [_noam_value(ns, s, 512, 4000) for s in (1, 4000, 16000)]
    if any(v.shape != () for v in values):
        raise TypeError(f"noam_lr(step, ...) with an int step must return one number (a float); got shape {values[0].shape}")
    return {"lr": np.array([float(v) for v in values])}


_add("9.2-int-steps", "9.2", 1, _p_noam_int, expected=lambda: {"lr": _noam_closed_form((1, 4000, 16000), 512, 4000)},
     hint=_NOAM_HINT + " An int step gives a plain float.", rtol=1e-6, atol=0.0)


def _p_noam_rejects(ns: ModuleType) -> Arrays:
    return _rejections({
        "step_0": (lambda: ns.noam_lr(0, 512, 4000), ("step",)),
        "a_0_in_the_steps": (lambda: ns.noam_lr(torch.tensor([3, 0, 5]), 512, 4000), ("step",)),
        "warmup_0": (lambda: ns.noam_lr(10, 512, 0), ("warmup_steps",)),
    })


_add("9.2-rejects-step-0", "9.2", 1, _p_noam_rejects,
     expected=lambda: {"raised_for_step_0": np.array(True), "raised_for_a_0_in_the_steps": np.array(True),
                       "raised_for_warmup_0": np.array(True), "message_names_step": np.array(True),
                       "message_names_warmup_steps": np.array(True)},
     hint="Steps count from 1 (step**-0.5 is undefined at 0): raise ValueError naming step when any step is < 1 (also inside a "
          "tensor: (step < 1).any()), and naming warmup_steps when it is < 1.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_noam() -> tuple[torch.Tensor, int, int]:
    return _randint(921, 1, 30000, 2, 4), int(_randint(922, 16, 1025)), int(_randint(923, 1, 8000))


def _p_noam_drawn(ns: ModuleType) -> Arrays:
    steps, d_model, warmup = _drawn_noam()
    return {"lr": _noam_value(ns, steps, d_model, warmup)}


def _e_noam_drawn() -> Arrays:
    steps, d_model, warmup = _drawn_noam()
    return {"lr": _noam_closed_form(steps.numpy(), d_model, warmup)}


_add("9.2-drawn-steps", "9.2", 2, _p_noam_drawn, expected=_e_noam_drawn, hint=_NOAM_HINT, rtol=1e-6, atol=0.0)


def _pair_reference(tgt: np.ndarray, bos_id: int, eos_id: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """By hand, row by row: tgt_out = y_1..y_n <eos> <pad>...; tgt_in = <bos> y_1..y_n <pad>..., both of length L + 1."""
    batch, length = tgt.shape
    tgt_in = np.full((batch, length + 1), pad_id, dtype=np.int64)
    tgt_out = np.full((batch, length + 1), pad_id, dtype=np.int64)
    for b in range(batch):
        words = [int(t) for t in tgt[b] if t != pad_id]
        tgt_in[b, : len(words) + 1] = [bos_id] + words
        tgt_out[b, : len(words) + 1] = words + [eos_id]
    return tgt_in, tgt_out


_PAIRS = {
    "9.3-batch-2": ([[5, 6, 7, 0], [8, 9, 0, 0]], 1, 2, 0),
    "9.3-no-padding": ([[4, 5, 6]], 1, 2, 0),
    "9.3-empty-row-pad-id-3": ([[4, 5, 6, 7, 8], [9, 10, 3, 3, 3], [3, 3, 3, 3, 3]], 0, 1, 3),
}


def _p_pair(ns: ModuleType, tgt, bos_id, eos_id, pad_id) -> Arrays:
    t = torch.as_tensor(tgt)
    before = t.clone()
    what = "teacher_forcing_pair(tgt, bos_id, eos_id, pad_id)"
    tgt_in, tgt_out = _pair(ns.teacher_forcing_pair(t, bos_id, eos_id, pad_id), what, ("tgt_in", "tgt_out"))
    return {"tgt_in": to_array(tgt_in, what + "[0]", kind="i"), "tgt_out": to_array(tgt_out, what + "[1]", kind="i"),
            "tgt_unchanged": np.array(bool(torch.equal(t, before)))}


def _e_pair(tgt, bos_id, eos_id, pad_id) -> Arrays:
    tgt_in, tgt_out = _pair_reference(np.array(tgt, dtype=np.int64), bos_id, eos_id, pad_id)
    return {"tgt_in": tgt_in, "tgt_out": tgt_out, "tgt_unchanged": np.array(True)}


_PAIR_HINT = ("Row by row, with n = the number of real (non-padding) tokens: tgt_out = [y_1, ..., y_n, eos_id, pad...] and "
              "tgt_in = [bos_id, y_1, ..., y_n, pad...], both of length tgt_len + 1 and with the SAME padding positions - "
              "so <eos> goes at position n of its own row (not at the end of the padded row), and tgt_in is NOT simply "
              "tgt_out shifted right (that would copy <eos> into tgt_in). Build new tensors; do not modify tgt.")
for _id, _spec in _PAIRS.items():
    _add(_id, "9.3", 2 if "batch" in _id else 1, partial(_p_pair, **dict(zip(("tgt", "bos_id", "eos_id", "pad_id"), _spec))),
         expected=partial(_e_pair, *_spec), hint=_PAIR_HINT)


def _p_pair_rejects(ns: ModuleType) -> Arrays:
    return {"raised_for_1d_tgt": _raises_value_error(lambda: ns.teacher_forcing_pair(torch.tensor([4, 5, 0]), 1, 2, 0))}


_add("9.3-rejects-1d-tgt", "9.3", 1, _p_pair_rejects, expected=lambda: {"raised_for_1d_tgt": np.array(True)},
     hint="Raise ValueError naming tgt when it is not 2-D (batch, tgt_len).")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_pair() -> tuple[torch.Tensor, int, int, int]:
    words = _randint(931, 4, 20, 4, 7)
    lengths = _randint(932, 0, 8, 4)
    pad_id = 3
    return torch.where(torch.arange(7)[None, :] < lengths[:, None], words, pad_id), 1, 2, pad_id


def _p_pair_drawn(ns: ModuleType) -> Arrays:
    tgt, bos_id, eos_id, pad_id = _drawn_pair()
    return _p_pair(ns, tgt, bos_id, eos_id, pad_id)


def _e_pair_drawn() -> Arrays:
    tgt, bos_id, eos_id, pad_id = _drawn_pair()
    return _e_pair(tgt.numpy(), bos_id, eos_id, pad_id)


_add("9.3-drawn-tokens", "9.3", 2, _p_pair_drawn, expected=_e_pair_drawn, hint=_PAIR_HINT)


def _peak_closed_form(steps, warmup: int, peak_lr: float) -> np.ndarray:
    """The paper's shape scaled so that its maximum, at step == warmup, is peak_lr."""
    return np.array([peak_lr * min(s / warmup, math.sqrt(warmup / s)) for s in steps])


_PEAK = {
    "9.4-warmup-4000-peak-1e-3": ((1, 1000, 3999, 4000, 4001, 16000, 100000), 4000, 1e-3),
    "9.4-warmup-1-peak-0.5": ((1, 2, 4, 100), 1, 0.5),
    "9.4-warmup-60-peak-2e-3": ((1, 30, 59, 60, 61, 240, 300), 60, 2e-3),
}


def _peak_values(ns: ModuleType, steps, warmup, peak_lr) -> np.ndarray:
    values = [to_array(ns.noam_lr_with_peak(int(s), warmup, peak_lr), f"noam_lr_with_peak({int(s)}, {warmup}, {peak_lr})", kind="f")
              for s in steps]
    if any(v.shape != () for v in values):
        raise TypeError(f"noam_lr_with_peak must return one number (a float); got shape {values[0].shape}")
    return np.array([float(v) for v in values])


_PEAK_HINT = ("Keep the paper's shape, min(step**-0.5, step * warmup_steps**-1.5), and rescale it: its value at the peak "
              "(step == warmup_steps) is warmup_steps**-0.5, so lr = peak_lr * warmup_steps**0.5 * min(...), i.e. "
              "peak_lr * min(step / warmup_steps, sqrt(warmup_steps / step)). No d_model: the peak replaces it.")
for _id, (_steps, _warmup, _peak) in _PEAK.items():
    _add(_id, "9.4", 1, partial(lambda ns, s, w, p: _per_call("lr", [f"step_{int(t)}" for t in s], _peak_values(ns, s, w, p)),
                                s=_steps, w=_warmup, p=_peak),
         expected=partial(lambda s, w, p: _per_call("lr", [f"step_{int(t)}" for t in s], _peak_closed_form(s, w, p)),
                          _steps, _warmup, _peak), hint=_PEAK_HINT, rtol=1e-6, atol=0.0)


def _p_peak_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_step_0": _raises_value_error(lambda: ns.noam_lr_with_peak(0, 100, 1e-3)),
        "raised_for_warmup_0": _raises_value_error(lambda: ns.noam_lr_with_peak(5, 0, 1e-3)),
        "raised_for_peak_0": _raises_value_error(lambda: ns.noam_lr_with_peak(5, 100, 0.0)),
    }


_add("9.4-rejects-bad-arguments", "9.4", 1, _p_peak_rejects,
     expected=lambda: {"raised_for_step_0": np.array(True), "raised_for_warmup_0": np.array(True), "raised_for_peak_0": np.array(True)},
     hint="Raise ValueError naming the argument when step < 1, warmup_steps < 1 or peak_lr <= 0.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_peak() -> tuple[list[int], int, float]:
    warmup = int(_randint(941, 2, 5000))
    steps = [int(v) for v in _randint(942, 1, 20000, 5)] + [warmup, warmup + 1]
    return steps, warmup, float(_randint(943, 1, 100)) * 1e-4


_add("9.4-drawn-steps", "9.4", 2,
     lambda ns: (lambda d: _per_call("lr", [f"step_{t}" for t in d[0]], _peak_values(ns, *d)))(_drawn_peak()),
     expected=lambda: (lambda d: _per_call("lr", [f"step_{t}" for t in d[0]], _peak_closed_form(*d)))(_drawn_peak()),
     hint=_PEAK_HINT, rtol=1e-6, atol=0.0)
