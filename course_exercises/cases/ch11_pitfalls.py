"""The cases of chapter 11 - pitfalls (exercises 11.1, 11.2, 11.3).

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

from .registry import Arrays, _add, _pair, _raises_value_error, _randint, _randn, to_array, to_number

# ===========================================================================
# Chapter 11 - pitfalls
# ===========================================================================
class _Planted:
    """A sequence layer with a planted dependency pattern: ``fn(x)``, x ``(L, d)`` float -> ``(L_out, d)``.

    ``causal`` / ``leaks-next`` / ``ignores-first`` / ``bidirectional``: ``x + tanh(attention(x))`` with the
    mask ``j <= i`` / ``j <= i + 1`` / ``1 <= j <= i`` / all (masked weights exactly 0);
    ``strided``: ``tanh(x[0::2] W1 + x[1::2] W2)`` (``L_out = L / 2``);
    ``shift``: output ``i`` is ``x[i - 1] W1`` and output 0 is zeros.
    """

    def __init__(self, kind: str, seed: int, length: int, d: int):
        self.kind, self.length, self.d = kind, length, d
        self.weights = _randn(seed, 4, d, d, scale=d**-0.5)

    def mask(self) -> torch.Tensor:
        i = torch.arange(self.length)[:, None]
        j = torch.arange(self.length)[None, :]
        return {"causal": j <= i, "leaks-next": j <= i + 1, "ignores-first": (j <= i) & (j >= 1),
                "bidirectional": torch.ones(self.length, self.length, dtype=torch.bool)}[self.kind]

    def __call__(self, x: object) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or tuple(x.shape) != (self.length, self.d) or not x.dtype.is_floating_point:
            got = f"shape {tuple(x.shape)}, dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(f"fn expects a float tensor of shape (L_in, d) = ({self.length}, {self.d}), like x; got {got}")
        w = self.weights.to(x.dtype)
        if self.kind == "strided":
            return torch.tanh(x[0::2] @ w[0] + x[1::2] @ w[1])
        if self.kind == "shift":
            return torch.cat([torch.zeros_like(x[:1]), x[:-1] @ w[0]], dim=0)
        mask = self.mask()
        scores = (x @ w[0]) @ (x @ w[1]).T / math.sqrt(self.d)
        weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(x.dtype).min), dim=-1) * mask
        return x + torch.tanh(weights @ (x @ w[2]))


def _planted_expected(kind: str, length: int) -> np.ndarray:
    """From the construction of the planted layer (output i, input j)."""
    i = np.arange(length)[:, None]
    j = np.arange(length)[None, :]
    if kind == "strided":
        return (j // 2 == np.arange(length // 2)[:, None])
    if kind == "shift":
        return j == i - 1
    allowed = {"causal": j <= i, "leaks-next": j <= i + 1, "ignores-first": (j <= i) & (j >= 1),
               "bidirectional": np.ones((length, length), dtype=bool)}[kind]
    return allowed | (i == j)  # the residual connection: output i always depends on input i


_PLANTED_SPECS = {
    # id: (kind, seed, L_in (the drawn length is within 2 of it), d)
    "11.1-drawn-correct-causal-layer": ("causal", 1101, 6, 4),
    "11.1-drawn-layer-that-leaks-the-next-token": ("leaks-next", 1102, 7, 4),
    "11.1-drawn-layer-that-ignores-the-first-position": ("ignores-first", 1103, 5, 3),
    "11.1-drawn-bidirectional-layer": ("bidirectional", 1104, 4, 4),
    "11.1-drawn-strided-layer-l-out-half-of-l-in": ("strided", 1105, 6, 3),
    "11.1-drawn-shift-layer-first-output-constant": ("shift", 1106, 5, 2),
}


def _planted_length(key: str) -> int:
    """The drawn sequence length of a case: between L_in - 2 and L_in + 2 of its spec (even for the strided layer)."""
    kind, seed, length, _ = _PLANTED_SPECS[key]
    length = length - 2 + int(_randint(seed + 70, 0, 5, 1)[0])
    return length + (length % 2) if kind == "strided" else length


def _p_dependency(ns: ModuleType, key: str) -> Arrays:
    kind, seed, _, d = _PLANTED_SPECS[key]
    length = _planted_length(key)
    fn, x = _Planted(kind, seed, length, d), _randn(seed + 50, length, d)
    return {"depends": to_array(ns.dependency_matrix(fn, x), f"dependency_matrix(fn, x) for x of shape ({length}, {d})", kind="b")}


def _e_dependency(key: str) -> Arrays:
    return {"depends": _planted_expected(_PLANTED_SPECS[key][0], _planted_length(key))}


_DEPENDENCY_HINT = ("Return a bool tensor of shape (L_out, L_in): entry [i, j] is True when output position i changes with input "
                    "position j. With autograd: J = torch.autograd.functional.jacobian(fn, x) has shape (L_out, d_out, L_in, d); "
                    "reduce it with J.abs().amax(dim=(1, 3)) > 1e-6. (Rows are outputs, columns are inputs; a constant output row "
                    "is all False.)")
for _id, (_kind, _seed, _length, _d) in _PLANTED_SPECS.items():
    _add(_id, "11.1", 2, partial(_p_dependency, key=_id), expected=partial(_e_dependency, _id), hint=_DEPENDENCY_HINT)


def _p_dependency_rejects(ns: ModuleType) -> Arrays:
    fn = _Planted("causal", 1107, 4, 2)
    return {
        "raised_for_1d_x": _raises_value_error(lambda: ns.dependency_matrix(fn, torch.ones(4))),
        "raised_for_3d_x": _raises_value_error(lambda: ns.dependency_matrix(fn, torch.ones(1, 4, 2))),
    }


_add("11.1-rejects-x-not-2d", "11.1", 1, _p_dependency_rejects,
     expected=lambda: {"raised_for_1d_x": np.array(True), "raised_for_3d_x": np.array(True)},
     hint="Raise ValueError naming x when it is not a 2-D tensor (L_in, d), before calling fn.")


# --- 11.2: the loss floors of a source-blind decoder -----------------------------------------------------
def _entropy_of(counts: dict) -> float:
    total = sum(counts.values())
    return -sum(c / total * math.log(c / total) for c in counts.values())


def _floors_reference(rows: list[list[int]], pad_id: int) -> tuple[float, float]:
    """Counting with dictionaries: H(Y) and H(Y | position) = sum_p (n_p / N) H(Y | p)."""
    unigram, by_position = {}, {}
    for row in rows:
        for p, token in enumerate(row):
            if token == pad_id:
                continue
            unigram[token] = unigram.get(token, 0) + 1
            by_position.setdefault(p, {})
            by_position[p][token] = by_position[p].get(token, 0) + 1
    total = sum(unigram.values())
    conditional = sum(sum(c.values()) / total * _entropy_of(c) for c in by_position.values())
    return _entropy_of(unigram), conditional


#: hand-worked: tokens 4 5 2 / 4 2 / 5 5 2 (pad 0): counts 4:2, 5:3, 2:3 of N = 8;
#: position 0 {4, 4, 5}, position 1 {5, 2, 5}, position 2 {2, 2}
_FLOORS_HAND = [[4, 5, 2], [4, 2, 0], [5, 5, 2]]
_FLOORS_HAND_VALUES = (
    -(2 / 8 * math.log(2 / 8) + 2 * (3 / 8) * math.log(3 / 8)),                    # 1.0822 nats
    2 * (3 / 8) * -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3)) + 0.0,      # 0.4774 nats
)
#: every sequence is "4 5 2": the position determines the token, so the position-aware floor is 0 (unigram log 3)
_FLOORS_FIXED = [[4, 5, 2]] * 4
_FLOORS_FIXED_VALUES = (math.log(3), 0.0)

_FLOORS_SPECS = {
    # id: (source, pad_id)
    "11.2-hand-padded-batch": ("hand", 0),
    "11.2-position-determines-the-token": ("fixed", 0),
    "11.2-drawn-padded-batch": ((1121, 7, 3, 9), 0),
    "11.2-drawn-pad-id-1-no-padding": ((1122, 6, 6, 6), 1),
    "11.2-drawn-padded-batch-of-12": ((1123, 12, 2, 7), 0),
}


def _floors_rows(key: str) -> list[list[int]]:
    source, pad_id = _FLOORS_SPECS[key]
    if source == "hand":
        return [list(r) for r in _FLOORS_HAND]
    if source == "fixed":
        return [list(r) for r in _FLOORS_FIXED]
    seed, batch, min_len, max_len = source
    lengths = _randint(seed, min_len, max_len + 1, batch).tolist()
    tokens = _randint(seed + 1, 2, 8, batch, max_len)
    tokens[tokens == pad_id] = 9                                   # no real token equals pad_id
    for r, n in enumerate(lengths):
        tokens[r, n - 1] = 9 if pad_id != 9 else 8                 # each sentence ends with its "<eos>"
        tokens[r, n:] = pad_id
    return tokens.tolist()


def _p_floors(ns: ModuleType, key: str) -> Arrays:
    _, pad_id = _FLOORS_SPECS[key]
    targets = torch.tensor(_floors_rows(key), dtype=torch.long)
    unigram, positional = _pair(ns.loss_floors(targets, pad_id), f"loss_floors(targets, pad_id={pad_id})",
                                ("unigram_entropy", "position_entropy"))
    return {"unigram_entropy": to_number(unigram, "unigram_entropy", kind="f"),
            "position_entropy": to_number(positional, "position_entropy", kind="f")}


def _e_floors(key: str) -> Arrays:
    source, pad_id = _FLOORS_SPECS[key]
    values = {"hand": _FLOORS_HAND_VALUES, "fixed": _FLOORS_FIXED_VALUES}.get(source) if isinstance(source, str) else None
    if values is None:
        values = _floors_reference(_floors_rows(key), pad_id)
    return {"unigram_entropy": np.array(values[0]), "position_entropy": np.array(values[1])}


_FLOORS_HINT = ("Skip the pad_id entries. unigram_entropy = -sum_w f_w log f_w over ALL real target tokens (natural log). "
                "position_entropy = sum over positions p of (n_p / N) * H(tokens at position p): each position's entropy weighted "
                "by its share of the tokens (not a plain mean over positions). Return the pair (unigram, position-aware).")
for _id in _FLOORS_SPECS:
    _add(_id, "11.2", 2, partial(_p_floors, key=_id), expected=partial(_e_floors, _id), hint=_FLOORS_HINT)


def _p_floors_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_1d_targets": _raises_value_error(lambda: ns.loss_floors(torch.tensor([4, 5, 2]), 0)),
        "raised_for_only_padding": _raises_value_error(lambda: ns.loss_floors(torch.zeros(2, 3, dtype=torch.long), 0)),
    }


_add("11.2-rejects-bad-targets", "11.2", 1, _p_floors_rejects,
     expected=lambda: {"raised_for_1d_targets": np.array(True), "raised_for_only_padding": np.array(True)},
     hint="Raise ValueError naming targets when it is not 2-D (batch, tgt_len) or holds no token other than pad_id.")


# --- 11.3: a divergence detector ------------------------------------------------------------------------
_NAN, _INF = float("nan"), float("inf")
#: hand-worked: (losses, k) -> first divergent step (0-based), -1 = none
_DIVERGENCE_HAND = {
    "spikes": [
        ((3.0, 2.5, 2.0, 2.2, 7.0, _NAN), 3.0),   # 7.0 > 3 * 2.0                          -> 4
        ((3.0, 2.5, 2.0, 2.2, 7.0, 3.0), 4.0),    # 7.0 <= 4 * 2.0, nothing else            -> -1
        ((2.0, 1.0, 2.5, 2.9, 3.2), 3.0),         # 3.2 > 3 * min(2, 1, 2.5, 2.9) = 3.0     -> 4 (3.2 < 3 * 2.9)
        ((1.0, 0.9, 0.8), 2.0),                   # decreasing                              -> -1
        ((4.0, 1.0, 3.0), 3.0),                   # 3.0 is not ABOVE 3 * 1.0                -> -1
    ],
    "non-finite": [
        ((3.0, 2.5, 2.0, 2.2, 7.0, _NAN), 4.0),   # the NaN                                 -> 5
        ((2.0, 1.5, _INF), 10.0),                 # inf                                     -> 2
        ((_NAN, 1.0), 2.0),                       # the very first step                     -> 0
        ((5.0, -_INF, 1.0), 2.0),                 # -inf is not finite either               -> 1
    ],
}
_DIVERGENCE_HAND_STEPS = {"spikes": [4, -1, 4, -1, -1], "non-finite": [5, 2, 0, 1]}


def _divergence_drawn(seed: int, spike: bool, nan: bool, k: float) -> tuple[list[float], int, int]:
    """A decaying loss curve with +-5 % noise (never k times its running minimum), then a spike of (k + 2) x at a
    drawn step and/or a NaN at a later drawn step."""
    n = 40
    noise = _randint(seed, 0, 1001, n).double() / 1000.0
    losses = [3.0 * math.exp(-0.05 * t) * (0.95 + 0.1 * float(u)) for t, u in enumerate(noise)]
    at = [int(v) for v in _randint(seed + 1, 5, 20, 2)]
    spike_at, nan_at = at[0], at[0] + 1 + at[1]
    if spike:
        losses[spike_at] *= k + 2.0
    if nan:
        losses[nan_at] = _NAN
    return losses, spike_at, nan_at


def _divergence_slow_rise(seed: int, k: float) -> list[float]:
    """Down for 15 steps, then up by about 8 % a step (+-2 % noise): no step is k times the one before, but the
    curve crosses k times its running minimum after about 15 more steps."""
    noise = _randint(seed, 0, 1001, 40).double() / 1000.0
    return [(3.0 * 0.9 ** min(t, 15) * 1.08 ** max(t - 15, 0)) * (0.98 + 0.04 * float(u)) for t, u in enumerate(noise)]


def _divergence_reference(losses: list[float], k: float) -> int:
    best = None
    for t, loss in enumerate(losses):
        if not math.isfinite(loss):
            return t
        if best is not None and loss > k * best:
            return t
        best = loss if best is None else min(best, loss)
    return -1


_DIVERGENCE_DRAWN = {
    "11.3-drawn-spike": (1131, True, False, 2.5),
    "11.3-drawn-nan-after-a-spike": (1132, True, True, 3.0),
    "11.3-drawn-nan-only": (1133, False, True, 2.0),
    "11.3-drawn-healthy-run": (1134, False, False, 2.0),
    "11.3-drawn-slow-rise-above-the-running-minimum": (1135, "slow", False, 3.0),
}


def _divergence_inputs(key: str) -> list[tuple[torch.Tensor, float]]:
    if key in _DIVERGENCE_HAND:
        return [(torch.tensor(losses, dtype=torch.float32), k) for losses, k in _DIVERGENCE_HAND[key]]
    seed, spike, nan, k = _DIVERGENCE_DRAWN[key]
    if spike == "slow":
        return [(torch.tensor(_divergence_slow_rise(seed, k), dtype=torch.float32), k)]
    return [(torch.tensor(_divergence_drawn(seed, spike, nan, k)[0], dtype=torch.float32), k)]


def _p_divergence(ns: ModuleType, key: str) -> Arrays:
    steps = []
    for losses, k in _divergence_inputs(key):
        step = to_array(ns.first_divergence(losses, k), f"first_divergence(losses, k={k})", kind="i")
        if step.shape != ():
            raise TypeError(f"first_divergence must return one int (the step, or -1); got an array of shape {step.shape}")
        steps.append(step)
    return {"first_divergent_step": np.array(steps, dtype=np.float64 if any(s.dtype.kind == "f" for s in steps) else np.int64)}


def _e_divergence(key: str) -> Arrays:
    if key in _DIVERGENCE_HAND:
        return {"first_divergent_step": np.array(_DIVERGENCE_HAND_STEPS[key], dtype=np.int64)}
    steps = [_divergence_reference(losses.double().tolist(), k) for losses, k in _divergence_inputs(key)]
    return {"first_divergent_step": np.array(steps, dtype=np.int64)}


_DIVERGENCE_HINT = ("Walk the losses in order, keeping the minimum of the losses BEFORE the current step. Step t diverges when its "
                    "loss is not finite (NaN, inf or -inf: use math.isfinite / torch.isfinite - a comparison with NaN is always "
                    "False) or when it is strictly above k times that running minimum. Return the first such t (0-based) as an "
                    "int, or -1 when there is none.")
for _id in ("spikes", "non-finite"):
    _add(f"11.3-hand-{_id}", "11.3", 2, partial(_p_divergence, key=_id), expected=partial(_e_divergence, _id), hint=_DIVERGENCE_HINT)
for _id in _DIVERGENCE_DRAWN:
    _add(_id, "11.3", 2 if "healthy" not in _id else 1, partial(_p_divergence, key=_id), expected=partial(_e_divergence, _id),
         hint=_DIVERGENCE_HINT)


def _p_divergence_rejects(ns: ModuleType) -> Arrays:
    losses = torch.tensor([3.0, 2.0, 1.0])
    return {
        "raised_for_k_1": _raises_value_error(lambda: ns.first_divergence(losses, 1.0)),
        "raised_for_2d_losses": _raises_value_error(lambda: ns.first_divergence(losses[None], 2.0)),
    }


_add("11.3-rejects-bad-arguments", "11.3", 1, _p_divergence_rejects,
     expected=lambda: {"raised_for_k_1": np.array(True), "raised_for_2d_losses": np.array(True)},
     hint="Raise ValueError naming the argument when k <= 1 or losses is not 1-D.")
