"""The cases of chapter 10 - inference (exercises 10.1, 10.2, 10.3, 10.4, 10.5).

A part of the cases registry (``registry.py``): loaded after it, into the same module
(``course_exercise_cases``), never imported on its own; the relative imports below name where
each helper lives and are left out when the parts are put together (:mod:`course_exercises.casefile`).
"""

from __future__ import annotations

import itertools
import math
from functools import partial
from types import ModuleType

import numpy as np
import torch
import torch.nn.functional as F

from .registry import Arrays, ReturnTypeError, _add, _f64, _pair, _raises_value_error, _randint, _randn, to_array, to_number

# ===========================================================================
# Chapter 10 - inference
# ===========================================================================
BOS, EOS, A, B = 0, 1, 2, 3
#: A hand-made next-token table over {<bos>=0, <eos>=1, A=2, B=3}: prefix (after <bos>) -> probabilities.
HAND_TABLE: dict[tuple[int, ...], tuple[float, float, float, float]] = {
    (): (0.01, 0.09, 0.50, 0.40),
    (A,): (0.01, 0.39, 0.31, 0.29),
    (B,): (0.01, 0.89, 0.06, 0.04),
}
HAND_DEFAULT = (0.01, 0.59, 0.25, 0.15)
# Worked by hand (max_len >= 2):
#   greedy: A (0.50), then <eos> (0.39)            -> [<bos>, A, <eos>], p = 0.50 * 0.39 = 0.195
#   beam 2: step 1 keeps A (0.50) and B (0.40); step 2 candidates B<eos> 0.40 * 0.89 = 0.356,
#           A<eos> 0.195, AA 0.155, AB 0.145, ...; both finished ones win -> best [<bos>, B, <eos>], p = 0.356
#   beam 2, min_length 3 (<eos> forbidden as generated token 1 or 2): step 1 keeps A, B; step 2 (no <eos>)
#           keeps AA 0.155 and AB 0.145 (BA 0.024, BB 0.016); step 3 (default row) AA<eos> 0.155 * 0.59 =
#           0.09145, AB<eos> 0.08555 are the two best -> best [<bos>, A, A, <eos>], p = 0.09145
HAND_GREEDY = [BOS, A, EOS]
HAND_BEAM2 = [BOS, B, EOS]
HAND_BEAM2_MIN3 = [BOS, A, A, EOS]
#: a second hand table (row 1 of the hand-made batch of 10.1): B, B, then <eos>
HAND_TABLE_2: dict[tuple[int, ...], tuple[float, float, float, float]] = {
    (): (0.01, 0.09, 0.30, 0.60),
    (B,): (0.01, 0.19, 0.10, 0.70),
    (B, B): (0.01, 0.80, 0.10, 0.09),
}
#: the hand-made batch of 10.1, worked by hand with pad_id 5: row 0 [<bos>, A, <eos>, <pad>], row 1 [<bos>, B, B, <eos>]
HAND_BATCH_PAD = 5
HAND_BATCH_GREEDY = [[BOS, A, EOS, HAND_BATCH_PAD], [BOS, B, B, EOS]]


def _gnmt(n: int, alpha: float) -> float:
    return ((5.0 + n) / 6.0) ** alpha


class _StepFn:
    """A next-token model for the decoding exercises: ``step_fn(prefix) -> logits``.

    ``prefix`` must be a 1-D integer tensor that starts with ``<bos>``; the
    logits are a float32 ``(vocab_size,)`` tensor. It counts its calls and stops
    a runaway decoding loop with a clear error.
    """

    def __init__(self, kind: str, seed: int = 0, vocab: int = 4, max_len: int = 8, max_calls: int = 1000, eos_penalty: float = 0.0):
        self.kind, self.vocab, self.max_calls, self.calls = kind, vocab, max_calls, 0
        if kind == "random":
            self.table = _randn(seed, max_len + 1, vocab, vocab, scale=2.0)
            self.table[..., EOS] -= eos_penalty

    def __call__(self, prefix: object) -> torch.Tensor:
        self.calls += 1
        if self.calls > self.max_calls:
            raise RuntimeError(f"step_fn was called more than {self.max_calls} times: does the decoding loop stop after max_len tokens?")
        if not isinstance(prefix, torch.Tensor) or prefix.dim() != 1 or prefix.dtype.is_floating_point or prefix.dtype == torch.bool:
            got = f"shape {tuple(prefix.shape)}, dtype {prefix.dtype}" if isinstance(prefix, torch.Tensor) else type(prefix).__name__
            raise TypeError(f"step_fn expects a 1-D integer tensor of token ids (the prefix); got {got}")
        ids = [int(t) for t in prefix]
        if not ids or ids[0] != BOS:
            raise ValueError(f"step_fn expects a prefix that starts with bos_id={BOS}; got {ids}")
        if self.kind == "hand":
            probs = HAND_TABLE.get(tuple(ids[1:]), HAND_DEFAULT)
            return torch.tensor(probs, dtype=torch.float64).log().float()
        position = min(len(ids) - 1, self.table.size(0) - 1)
        return self.table[position, ids[-1]].clone()


def _logp(step_fn: _StepFn, prefix: list[int]) -> np.ndarray:
    return torch.log_softmax(step_fn(torch.tensor(prefix)).double(), dim=-1).numpy()


def _greedy_reference(step_fn, max_len: int) -> tuple[list[int], float]:
    """One sequence, greedily (``step_fn`` of the single-sequence interface)."""
    seq, score = [BOS], 0.0
    for _ in range(max_len):
        logp = _logp(step_fn, seq)
        token = int(np.argmax(logp))
        seq.append(token)
        score += float(logp[token])
        if token == EOS:
            break
    return seq, score


# --- 10.1: greedy decoding of a batch, each row stopping on its own --------------------------------------
class _BatchStepFn:
    """``step_fn(prefixes) -> logits`` for a batch: ``prefixes`` ``(batch, t)`` long, logits ``(batch, V)``.

    Row ``r``'s logits depend only on its own prefix: they are ``table[r, position, last token]``
    (``kind="random"``) or the hand tables (row 0 ``HAND_TABLE``, row 1 ``HAND_TABLE_2``). ``<pad>`` and
    ``<bos>`` get a very low logit (never the argmax).
    """

    def __init__(self, kind: str, seed: int = 0, batch: int = 2, vocab: int = 6, max_len: int = 8, pad_id: int = 5,
                 eos_shift=(), max_calls: int = 200):
        self.kind, self.batch, self.vocab, self.max_len, self.pad_id = kind, batch, vocab, max_len, pad_id
        self.calls, self.max_calls = 0, max_calls
        if kind == "random":
            self.table = _randn(seed, batch, max_len + 1, vocab, vocab, scale=2.0)
            for row, shift in enumerate(eos_shift):
                self.table[row, :, :, EOS] += shift
            self.table[..., pad_id] = -1e4
            self.table[..., BOS] = -1e4

    def row_logits(self, row: int, ids: list[int]) -> torch.Tensor:
        """The logits of one row for its prefix ``ids`` (starting with <bos>): the reference uses this."""
        if self.kind == "hand":
            table = HAND_TABLE if row == 0 else HAND_TABLE_2
            probs = list(table.get(tuple(ids[1:]), HAND_DEFAULT)) + [1e-30] * (self.vocab - 4)
            out = torch.tensor(probs, dtype=torch.float64).log().float()
            out[self.pad_id] = -1e4
            return out
        position = min(len(ids) - 1, self.max_len)
        return self.table[row, position, ids[-1]].clone()

    def __call__(self, prefixes: object) -> torch.Tensor:
        self.calls += 1
        if self.calls > self.max_calls:
            raise RuntimeError(f"step_fn was called more than {self.max_calls} times: does the decoding loop stop after max_len tokens?")
        if (not isinstance(prefixes, torch.Tensor) or prefixes.dim() != 2 or prefixes.dtype.is_floating_point
                or prefixes.dtype == torch.bool):
            got = f"shape {tuple(prefixes.shape)}, dtype {prefixes.dtype}" if isinstance(prefixes, torch.Tensor) else type(prefixes).__name__
            raise TypeError(f"step_fn expects a 2-D integer tensor (batch_size, t) of prefixes; got {got}")
        if prefixes.size(0) != self.batch:
            raise TypeError(f"step_fn expects all batch_size={self.batch} rows at every step (finished rows too, continued "
                            f"with pad_id); got {prefixes.size(0)} rows")
        ids = prefixes.tolist()
        if any(not row or row[0] != BOS for row in ids):
            raise ValueError(f"step_fn expects every prefix to start with bos_id={BOS}; got first column {[r[:1] for r in ids]}")
        return torch.stack([self.row_logits(r, row) for r, row in enumerate(ids)])


def _batch_greedy_reference(fn: _BatchStepFn, max_len: int) -> np.ndarray:
    """Each row decoded on its own (one sequence at a time), then padded to the longest."""
    rows = []
    for r in range(fn.batch):
        seq = [BOS]
        for _ in range(max_len):
            token = int(np.argmax(fn.row_logits(r, seq).double().numpy()))
            seq.append(token)
            if token == EOS:
                break
        rows.append(seq)
    width = max(map(len, rows))
    return np.array([seq + [fn.pad_id] * (width - len(seq)) for seq in rows], dtype=np.int64)


_BGREEDY_SPECS = {
    # id: (kind, seed, batch, vocab, max_len, pad_id, eos shift per row)
    "10.1-hand-batch": ("hand", 0, 2, 6, 5, HAND_BATCH_PAD, ()),
    "10.1-drawn-rows-stop-at-different-steps": ("random", 1001, 4, 7, 8, 6, (1.5, 0.5, 0.0, -0.5)),
    "10.1-drawn-some-rows-never-stop": ("random", 1002, 3, 6, 6, 5, (-100.0, 0.0, -100.0)),
    "10.1-drawn-no-row-stops": ("random", 1003, 2, 6, 4, 5, (-100.0, -100.0)),
    "10.1-drawn-one-row": ("random", 1005, 1, 8, 10, 7, (0.0,)),
    "10.1-drawn-batch-of-6": ("random", 1006, 6, 6, 9, 5, (2.0, 1.5, 1.0, 0.5, 0.0, 0.0)),
}


def _bgreedy_fn(key: str, max_calls: int = 200) -> _BatchStepFn:
    kind, seed, batch, vocab, max_len, pad_id, shift = _BGREEDY_SPECS[key]
    return _BatchStepFn(kind, seed, batch, vocab, max_len, pad_id, shift, max_calls)


def _p_bgreedy(ns: ModuleType, key: str, bos: int = BOS) -> Arrays:
    _, _, batch, _, max_len, pad_id, _ = _BGREEDY_SPECS[key]
    fn = _bgreedy_fn(key)
    out = ns.greedy_decode(fn, batch, BOS, EOS, pad_id, max_len)
    return {"tokens": to_array(out, f"greedy_decode(step_fn, batch_size={batch}, bos_id={BOS}, eos_id={EOS}, pad_id={pad_id}, "
                                    f"max_len={max_len})", kind="i")}


def _e_bgreedy(key: str) -> Arrays:
    if key == "10.1-hand-batch":
        return {"tokens": np.array(HAND_BATCH_GREEDY, dtype=np.int64)}
    _, _, _, _, max_len, _, _ = _BGREEDY_SPECS[key]
    return {"tokens": _batch_greedy_reference(_bgreedy_fn(key, 10**6), max_len)}


def _bgreedy_is_clear(key: str) -> bool:
    """A clear argmax (gap > 1e-3) at every step of every row, and the stopping pattern the case is about."""
    kind, _, batch, _, max_len, _, _ = _BGREEDY_SPECS[key]
    if kind == "hand":
        return True
    fn = _bgreedy_fn(key, 10**6)
    lengths = []
    for r in range(batch):
        seq = [BOS]
        for _ in range(max_len):
            logits = np.sort(fn.row_logits(r, seq).double().numpy())
            if logits[-1] - logits[-2] <= 1e-3:
                return False
            seq.append(int(np.argmax(fn.row_logits(r, seq).double().numpy())))
            if seq[-1] == EOS:
                break
        lengths.append((len(seq) - 1, seq[-1] == EOS))
    if key in ("10.1-drawn-rows-stop-at-different-steps", "10.1-drawn-batch-of-6"):  # at least two different stopping steps, all before max_len
        return len({n for n, _ in lengths}) >= 2 and all(stopped and n < max_len for n, stopped in lengths)
    if key == "10.1-drawn-one-row":
        return lengths[0][1] and lengths[0][0] < max_len
    return True


_BGREEDY_HINT = ("Keep a (batch_size, t) tensor of prefixes, starting with a column of bos_id. Each step: logits = step_fn(prefixes) "
                 "(ALL rows, every step), next = argmax per row; a row that has already produced eos_id gets pad_id instead; append "
                 "the column. Stop as soon as every row has produced eos_id, or after max_len steps. Return (batch_size, 1 + steps) long.")
for _id in _BGREEDY_SPECS:
    _add(_id, "10.1", 2, partial(_p_bgreedy, key=_id), expected=partial(_e_bgreedy, _id), hint=_BGREEDY_HINT,
         robust=partial(_bgreedy_is_clear, _id))


def _p_bgreedy_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_max_len_0": _raises_value_error(lambda: ns.greedy_decode(_bgreedy_fn("10.1-hand-batch"), 2, BOS, EOS, 5, 0)),
        "raised_for_batch_size_0": _raises_value_error(lambda: ns.greedy_decode(_bgreedy_fn("10.1-hand-batch"), 0, BOS, EOS, 5, 3)),
    }


_add("10.1-rejects-bad-sizes", "10.1", 1, _p_bgreedy_rejects,
     expected=lambda: {"raised_for_max_len_0": np.array(True), "raised_for_batch_size_0": np.array(True)},
     hint="Raise ValueError naming the argument when max_len < 1 or batch_size < 1, before calling step_fn.")


# --- 10.2: beam search with the GNMT length penalty and min_length ---------------------------------------
def _allowed_logp(step_fn, prefix: list[int], min_length: int) -> np.ndarray:
    """log_softmax of the logits; <eos> set to -inf while fewer than min_length - 1 tokens were generated."""
    logp = _logp(step_fn, prefix).copy()
    if len(prefix) < min_length:  # the next token would be generated token number len(prefix) < min_length
        logp[EOS] = -np.inf
    return logp


def _exhaustive_reference(step_fn, max_len: int, length_penalty: float, min_length: int = 0) -> tuple[list[int], float]:
    """The best finished-or-full-length sequence by enumeration of every sequence (what beam search with an
    unlimited beam finds); normalised score = sum of log-probs / ((5 + n) / 6) ** alpha, n = generated tokens."""
    best: tuple[float, list[int]] | None = None
    for n in range(1, max_len + 1):
        for body in itertools.product(range(step_fn.vocab), repeat=n):
            if EOS in body[:-1] or (n < max_len and body[-1] != EOS):
                continue
            if body[-1] == EOS and n < min_length:
                continue
            seq, score = [BOS], 0.0
            for token in body:
                score += float(_logp(step_fn, seq)[token])
                seq.append(token)
            value = score / _gnmt(n, length_penalty)
            if best is None or value > best[0]:
                best = (value, seq)
    assert best is not None
    return best[1], best[0]


def _beam_reference(step_fn, max_len: int, beam_size: int, alpha: float, min_length: int) -> tuple[list[int], float, float]:
    """The course's beam search, one hypothesis at a time in float64 (trusted side).

    Returns ``(tokens, normalised score, smallest gap)``: the gap is the smallest difference between the
    beam_size-th and the next candidate at any step, and between the best and the second-best final
    hypothesis (used by the robustness check)."""
    live, finished, gap = [([BOS], 0.0)], [], np.inf
    for _ in range(max_len):
        cands = []
        for seq, score in live:
            logp = _allowed_logp(step_fn, seq, min_length)
            cands += [(seq + [t], score + float(logp[t])) for t in range(len(logp))]
        cands.sort(key=lambda c: -c[1])
        if len(cands) > beam_size and np.isfinite(cands[beam_size - 1][1]):
            gap = min(gap, cands[beam_size - 1][1] - cands[beam_size][1])
        live = []
        for seq, score in cands[:beam_size]:
            if not np.isfinite(score):
                continue
            (finished if seq[-1] == EOS else live).append((seq, score))
        if not live:
            break
    ranked = sorted(((score / _gnmt(len(seq) - 1, alpha), seq) for seq, score in finished + live), key=lambda c: -c[0])
    if len(ranked) > 1:
        gap = min(gap, ranked[0][0] - ranked[1][0])
    return ranked[0][1], ranked[0][0], gap


def _unfrozen_beam(step_fn, max_len: int, beam_size: int, alpha: float, min_length: int) -> list[int]:
    """The classic bug, for the robustness check only: finished hypotheses stay in the beam and keep being
    extended (their score frozen at their first <eos>); the result is cut at its first <eos>."""
    beam = [([BOS], 0.0, 0.0)]  # tokens, score up to the first <eos>, running score
    for _ in range(max_len):
        cands = []
        for seq, score, running in beam:
            logp = _allowed_logp(step_fn, seq, min_length)
            ended = EOS in seq[1:]
            cands += [(seq + [t], score if ended else score + float(logp[t]), running + float(logp[t]))
                      for t in range(len(logp))]
        beam = sorted(cands, key=lambda c: -c[2])[:beam_size]
    cut = [(seq[: seq.index(EOS, 1) + 1] if EOS in seq[1:] else seq, score) for seq, score, _ in beam]
    return max(cut, key=lambda c: c[1] / _gnmt(len(c[0]) - 1, alpha))[0]


def _p_beam(ns: ModuleType, args, min_length: int = 0) -> Arrays:
    kind, seed, vocab, max_len, beam_size, length_penalty = args
    fn = _StepFn(kind, seed, vocab, max_len, max_calls=20000)
    after_eos: list[bool] = []

    def step_fn(prefix):  # the statement promises to look for a finished hypothesis that is extended
        if isinstance(prefix, torch.Tensor) and prefix.dim() == 1 and bool((prefix[1:] == EOS).any()):
            after_eos.append(True)
        return fn(prefix)

    call = (f"beam_search(step_fn, bos_id, eos_id, max_len={max_len}, beam_size={beam_size}, alpha={length_penalty}, "
            f"min_length={min_length})")
    tokens, score = _pair(ns.beam_search(step_fn, BOS, EOS, max_len, beam_size, length_penalty, min_length), call,
                          ("tokens", "score"))
    if not isinstance(score, float):  # the statement promises "its normalised score as a float"
        raise ReturnTypeError(f"{call} returned a score of type {type(score).__name__}; return it as a Python float "
                              f"(float(...))")
    return {"tokens": to_array(tokens, "tokens", kind="i"), "score": to_number(score, "score", kind="f"),
            "a_finished_hypothesis_was_extended": np.array(bool(after_eos))}


def _e_beam(kind, seed, vocab, max_len, beam_size, length_penalty, min_length=0) -> Arrays:
    fn = _StepFn(kind, seed, vocab, max_len, max_calls=10**6)
    if kind == "hand" and beam_size == 2:
        if min_length == 3:  # worked by hand above
            seq, score = HAND_BEAM2_MIN3, math.log(0.50) + math.log(0.31) + math.log(0.59)
        else:
            assert min_length <= 2
            seq, score = HAND_BEAM2, math.log(0.40) + math.log(0.89)
        score /= _gnmt(len(seq) - 1, length_penalty)
    elif beam_size == 1 and min_length <= 1:
        seq, score = _greedy_reference(fn, max_len)
        score /= _gnmt(len(seq) - 1, length_penalty)
    elif beam_size >= vocab**max_len:
        seq, score = _exhaustive_reference(fn, max_len, length_penalty, min_length)
    else:
        seq, score, _ = _beam_reference(fn, max_len, beam_size, length_penalty, min_length)
    return {"tokens": np.array(seq, dtype=np.int64), "score": np.array(score),
            "a_finished_hypothesis_was_extended": np.array(False)}


def _beam_is_clear(kind, seed, vocab, max_len, beam_size, length_penalty, min_length=0, live_best=False,
                   limited_differs=False) -> bool:
    """Beam 1: a clear greedy path. Unlimited beam: a clear winner (gap > 1e-3) that greedy misses (and, with
    ``live_best``, one that never produced <eos>). Limited beam: no near-tie at any cut, and (with
    ``limited_differs``) a result that differs from greedy decoding and from a beam that never freezes its
    finished hypotheses (so that the case catches that classic bug)."""
    if kind == "hand":
        return True
    if beam_size == 1:
        return _greedy_is_clear(kind, seed, vocab, max_len, 0.0)
    fn = _StepFn(kind, seed, vocab, max_len, max_calls=10**6)
    greedy, _ = _greedy_reference(_StepFn(kind, seed, vocab, max_len, max_calls=10**6), max_len)
    if beam_size < vocab**max_len:
        seq, _, gap = _beam_reference(fn, max_len, beam_size, length_penalty, min_length)
        if gap <= 1e-3:
            return False
        if not limited_differs:
            return True
        unfrozen = _unfrozen_beam(_StepFn(kind, seed, vocab, max_len, max_calls=10**6), max_len, beam_size, length_penalty,
                                  min_length)
        return seq != greedy and seq != unfrozen
    values = []
    for n in range(1, max_len + 1):
        for body in itertools.product(range(vocab), repeat=n):
            if EOS in body[:-1] or (n < max_len and body[-1] != EOS) or (body[-1] == EOS and n < min_length):
                continue
            seq, score = [BOS], 0.0
            for token in body:
                score += float(_logp(fn, seq)[token])
                seq.append(token)
            values.append((score / _gnmt(n, length_penalty), seq))
    values.sort(key=lambda item: item[0])
    best = values[-1][1]
    return (values[-1][0] - values[-2][0] > 1e-3 and greedy != best
            and (not live_best or best[-1] != EOS))


def _greedy_is_clear(kind, seed, vocab, max_len, eos_penalty) -> bool:
    """No near-tie (gap > 1e-3) between the best two logits along the greedy path."""
    if kind == "hand":
        return True
    fn = _StepFn(kind, seed, vocab, max_len, eos_penalty=eos_penalty)
    seq, _ = _greedy_reference(fn, max_len)
    for t in range(1, len(seq)):
        logits = np.sort(fn(torch.tensor(seq[:t])).double().numpy())
        if logits[-1] - logits[-2] <= 1e-3:
            return False
    return True


_BEAM_HINT = ("Keep (tokens, score) hypotheses, score = sum of log_softmax(step_fn(prefix))[token] (eos_id gets -inf while the "
              "hypothesis has fewer than min_length - 1 generated tokens). Each step, extend every LIVE hypothesis by every token and "
              "keep the beam_size best candidates; a kept candidate ending in eos_id is finished and is never extended again. Stop "
              "when none is live or after max_len steps; return the best of the finished (and, at max_len, live) hypotheses by "
              "score / ((5 + n) / 6) ** alpha (n = generated tokens, eos included), with that normalised score.")
# The random tables are seeded so that greedy decoding does NOT find the best sequence; with
# alpha 2 the best is a hypothesis still live at max_len (no <eos>); the limited beams
# (the drawn cases) do not find greedy's answer either.
_BEAM_SPECS = {
    # id: (args (kind, seed, vocab, max_len, beam_size, alpha), min_length, points)
    "10.2-hand-table-beam-2-beats-greedy": (("hand", 0, 4, 5, 2, 0.0), 0, 2),
    "10.2-hand-table-beam-2-min-length-3": (("hand", 0, 4, 5, 2, 0.0), 3, 2),
    "10.2-beam-1-equals-greedy-hand": (("hand", 0, 4, 5, 1, 0.0), 0, 1),
    "10.2-beam-1-equals-greedy-random": (("random", 1011, 6, 6, 1, 0.0), 0, 1),
    "10.2-unlimited-beam-is-exhaustive": (("random", 1023, 4, 3, 64, 0.0), 0, 1),
    "10.2-unlimited-beam-alpha-2-best-is-live": (("random", 1042, 4, 3, 64, 2.0), 0, 1),
    "10.2-unlimited-beam-alpha-0.6-min-length-2": (("random", 1035, 3, 4, 81, 0.6), 2, 1),
    # limited beams, drawn so that the answer differs from greedy decoding and from a beam that never freezes
    "10.2-drawn-beam-3-alpha-0.6": (("random", 1038, 5, 5, 3, 0.6), 0, 3),
    "10.2-drawn-beam-2-min-length-3": (("random", 1041, 4, 5, 2, 0.0), 3, 3),
    "10.2-drawn-beam-2-alpha-0.6-min-length-2": (("random", 1038, 5, 5, 2, 0.6), 2, 3),
    "10.2-drawn-beam-2-vocab-3": (("random", 1044, 3, 6, 2, 0.0), 0, 3),
}
for _id, (_args, _min_length, _points) in _BEAM_SPECS.items():
    _add(_id, "10.2", _points, partial(_p_beam, args=_args, min_length=_min_length), expected=partial(_e_beam, *_args, _min_length),
         hint=_BEAM_HINT, atol=1e-5,
         robust=partial(_beam_is_clear, *_args, _min_length, live_best=_id.endswith("best-is-live"),
                        limited_differs=_id.startswith("10.2-drawn")))


def _p_beam_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_beam_size_0": _raises_value_error(lambda: ns.beam_search(_StepFn("hand"), BOS, EOS, 5, 0)),
        "raised_for_max_len_0": _raises_value_error(lambda: ns.beam_search(_StepFn("hand"), BOS, EOS, 0, 2)),
        "raised_for_min_length_above_max_len": _raises_value_error(
            lambda: ns.beam_search(_StepFn("hand"), BOS, EOS, 3, 2, 0.0, 4)),
    }


_add("10.2-rejects-bad-sizes", "10.2", 1, _p_beam_rejects,
     expected=lambda: {"raised_for_beam_size_0": np.array(True), "raised_for_max_len_0": np.array(True),
                       "raised_for_min_length_above_max_len": np.array(True)},
     hint="Raise ValueError (naming the argument) when beam_size < 1, max_len < 1 or min_length > max_len, before decoding anything.")


# --- 10.3: temperature, top-k and top-p (one top_p per row) ----------------------------------------------
#: hand-worked filtering example: probabilities 0.10, 0.50, 0.05, 0.20, 0.15 (in this order)
HAND_PROBS = (0.10, 0.50, 0.05, 0.20, 0.15)
_FILTER_SPECS = {
    # id: (logits source, temperature, top_k, top_p (a float or "rows": one drawn value per row))
    "10.3-hand-top-p-0.8": ("hand", 1.0, 0, 0.8),
    "10.3-hand-temperature-2-top-p-0.8": ("hand", 2.0, 0, 0.8),
    "10.3-hand-temperature-0.5-top-p-0.8": ("hand", 0.5, 0, 0.8),
    "10.3-hand-top-k-4-then-top-p-0.72": ("hand", 1.0, 4, 0.72),
    "10.3-random-top-k-10-temperature-0.7": ((1021, (4, 50)), 0.7, 10, 1.0),
    "10.3-random-top-p-per-row": ((1022, (5, 20)), 1.0, 0, "rows"),
    "10.3-random-3d-temperature-1.5-top-k-5-top-p-per-row": ((1023, (2, 3, 30)), 1.5, 5, "rows"),
    "10.3-random-3d-temperature-0.6-top-p-0.5": ((1027, (2, 2, 12)), 0.6, 0, 0.5),
    "10.3-random-temperature-1.3-top-k-6-top-p-0.6": ((1028, (6, 16)), 1.3, 6, 0.6),
    "10.3-random-temperature-0.8-top-k-4-top-p-per-row": ((1029, (6, 10)), 0.8, 4, "rows"),
    "10.3-temperature-only": ((1024, (2, 8)), 1.7, 0, 1.0),
    "10.3-top-k-larger-than-vocab": ((1025, (2, 6)), 1.0, 10, 1.0),
}
#: the hand-worked kept masks (expected values only)
_FILTER_HAND_KEPT = {
    "10.3-hand-top-p-0.8": (False, True, False, True, True),  # 0.5 + 0.2 = 0.7 < 0.8, + 0.15 = 0.85
    # T = 2: p ~ sqrt(p) = .152 .340 .107 .215 .186; mass before .152 is .340 + .215 + .186 = .741 < .8: kept
    "10.3-hand-temperature-2-top-p-0.8": (True, True, False, True, True),
    # T = 0.5: p ~ p^2 = .031 .769 .008 .123 .069; .769 < .8 keeps .123, then .892 >= .8 removes the rest
    "10.3-hand-temperature-0.5-top-p-0.8": (False, True, False, True, False),
    # top-k 4 drops 0.05; renormalised 0.5/0.95 + 0.2/0.95 = 0.737 >= 0.72, so 0.15 is dropped too
    # (without renormalising, 0.5 + 0.2 = 0.70 < 0.72 would keep it)
    "10.3-hand-top-k-4-then-top-p-0.72": (False, True, False, True, False),
}


def _filter_logits(key) -> torch.Tensor:
    source = _FILTER_SPECS[key][0]
    if source == "hand":
        return torch.tensor(HAND_PROBS, dtype=torch.float64).log().float()
    seed, shape = source
    return _randn(seed, *shape, scale=2.0)


def _filter_top_p(key):
    """The top_p argument: a float, or a float32 tensor of shape logits.shape[:-1] (one value per row, in [0.3, 0.95])."""
    source, _, _, top_p = _FILTER_SPECS[key]
    if top_p != "rows":
        return top_p
    seed, shape = source
    return 0.3 + _randint(seed + 100, 0, 66, *shape[:-1]).float() / 100.0


def _filter_reference(logits: np.ndarray, temperature: float, top_k: int, top_p) -> np.ndarray:
    """Kept mask: temperature, top-k, then top-p on the renormalised remaining probabilities (closed form per row)."""
    flat = logits.reshape(-1, logits.shape[-1]) / temperature
    ps = np.broadcast_to(np.asarray(top_p, dtype=np.float64), logits.shape[:-1]).reshape(-1)
    keep = np.ones_like(flat, dtype=bool)
    for r, row in enumerate(flat):
        order = np.argsort(-row, kind="stable")
        if 0 < top_k < row.size:
            keep[r, order[top_k:]] = False
        if ps[r] < 1.0:
            p = np.exp(row - row.max()) * keep[r]
            p = p / p.sum()
            before = np.cumsum(p[order]) - p[order]  # probability mass of the strictly better tokens
            keep[r, order[before >= ps[r]]] = False
    return keep.reshape(logits.shape)


def _filter_is_clear(key) -> bool:
    """Every row keeps clear of the top-p boundary (> 1e-4) and has distinct logits around the k-th."""
    source, temperature, top_k, _ = _FILTER_SPECS[key]
    if source == "hand":
        return True
    top_p = _filter_top_p(key)
    logits = _filter_logits(key).double().numpy() / temperature
    rows = logits.reshape(-1, logits.shape[-1])
    ps = np.broadcast_to(np.asarray(top_p, dtype=np.float64), logits.shape[:-1]).reshape(-1)
    if top_k and np.diff(np.sort(rows, axis=-1), axis=-1).min() <= 1e-6:
        return False
    for row, p_row in zip(rows, ps):
        if p_row >= 1.0:
            continue
        order = np.argsort(-row)
        keep = np.ones_like(row, dtype=bool)
        if 0 < top_k < row.size:
            keep[order[top_k:]] = False
        p = np.exp(row - row.max()) * keep
        p /= p.sum()
        before = np.cumsum(p[order]) - p[order]
        if np.min(np.abs(before[keep[order]] - p_row)) <= 1e-4:
            return False
    return True


def _p_filter(ns: ModuleType, key) -> Arrays:
    _, temperature, top_k, _ = _FILTER_SPECS[key]
    logits, top_p = _filter_logits(key), _filter_top_p(key)
    shown = "a tensor of one value per row" if isinstance(top_p, torch.Tensor) else top_p
    out = ns.top_k_top_p_filtering(logits, temperature, top_k, top_p)
    arr = to_array(out, f"top_k_top_p_filtering(logits, temperature={temperature}, top_k={top_k}, top_p={shown})", kind="f")
    kept = np.isfinite(arr)
    # removed entries stay -inf in "values" (a message then says "got -inf", never a made-up 0.0)
    return {"kept": kept, "values": np.where(kept, arr, -np.inf),
            "removed_are_minus_inf": np.array(bool(np.all(arr[~kept] == -np.inf)))}


def _e_filter(key) -> Arrays:
    _, temperature, top_k, _ = _FILTER_SPECS[key]
    hand = _FILTER_HAND_KEPT.get(key)
    logits = _filter_logits(key).double().numpy()
    top_p = _filter_top_p(key)
    top_p = top_p.double().numpy() if isinstance(top_p, torch.Tensor) else top_p
    kept = np.array(hand) if hand is not None else _filter_reference(logits, temperature, top_k, top_p)
    return {"kept": kept, "values": np.where(kept, logits / temperature, -np.inf), "removed_are_minus_inf": np.array(True)}


_FILTER_HINT = ("First divide the logits by temperature; return THOSE scaled logits, with removed entries float('-inf'). top_k: keep "
                "the k largest per row (0 = off, k >= vocab keeps all). Then top_p on the softmax of the REMAINING scaled logits: sort "
                "descending and keep a token while the probability of the tokens before it is < top_p of its row (a tensor top_p "
                "has one value per row: top_p[..., None] broadcasts it).")
for _id in _FILTER_SPECS:
    _add(_id, "10.3", 1 if _FILTER_SPECS[_id][0] == "hand" or "only" in _id or "larger" in _id else 2, partial(_p_filter, key=_id), expected=partial(_e_filter, _id), hint=_FILTER_HINT,
         robust=partial(_filter_is_clear, _id))


def _p_filter_rejects(ns: ModuleType) -> Arrays:
    logits = _randn(1026, 3, 5)
    return {
        "raised_for_top_p_0": _raises_value_error(lambda: ns.top_k_top_p_filtering(logits, 1.0, 0, 0.0)),
        "raised_for_top_p_1.5": _raises_value_error(lambda: ns.top_k_top_p_filtering(logits, 1.0, 0, 1.5)),
        "raised_for_one_row_top_p_1.5": _raises_value_error(
            lambda: ns.top_k_top_p_filtering(logits, 1.0, 0, torch.tensor([0.5, 1.5, 0.9]))),
        "raised_for_top_k_-1": _raises_value_error(lambda: ns.top_k_top_p_filtering(logits, 1.0, -1, 1.0)),
        "raised_for_temperature_0": _raises_value_error(lambda: ns.top_k_top_p_filtering(logits, 0.0, 0, 1.0)),
    }


_add("10.3-rejects-bad-arguments", "10.3", 1, _p_filter_rejects,
     expected=lambda: {k: np.array(True) for k in ("raised_for_top_p_0", "raised_for_top_p_1.5", "raised_for_one_row_top_p_1.5",
                                                   "raised_for_top_k_-1", "raised_for_temperature_0")},
     hint="Raise ValueError naming the argument when temperature <= 0, top_k < 0, or top_p (any of its values) is outside (0, 1].")


# --- 10.4: one step with a KV cache ----------------------------------------------------------------------
def _kv_inputs(seed, batch, n_heads, seq_len, d_k):
    return (_randn(seed, batch, n_heads, seq_len, d_k), _randn(seed + 1, batch, n_heads, seq_len, d_k),
            _randn(seed + 2, batch, n_heads, seq_len, d_k))


def _p_kv(ns: ModuleType, args, chunks) -> Arrays:
    q, k, v = _kv_inputs(*args)
    k_cache = v_cache = None
    outs, start = [], 0
    for size in chunks:
        sl = slice(start, start + size)
        result = ns.kv_cache_step(q[:, :, sl], k[:, :, sl], v[:, :, sl], k_cache, v_cache)
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            raise TypeError(f"kv_cache_step must return (out, k_cache, v_cache); got {type(result).__name__}")
        out, k_cache, v_cache = result
        outs.append(to_array(out, "out", kind="f"))
        start += size
    shapes = {o.shape[:2] + o.shape[3:] for o in outs if o.ndim == 4}
    if len(shapes) != 1 or any(o.ndim != 4 for o in outs):
        raise TypeError(f"kv_cache_step's out must have shape (batch, n_heads, new_len, d_k); got shapes {[o.shape for o in outs]}")
    return {
        "out": np.concatenate(outs, axis=2),
        "k_cache": to_array(k_cache, "k_cache", kind="f"),
        "v_cache": to_array(v_cache, "v_cache", kind="f"),
    }


def _e_kv(args, chunks) -> Arrays:
    q, k, v = (t.double() for t in _kv_inputs(*args))
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # recomputing everything, causal
    return {"out": _f64(full), "k_cache": _f64(k), "v_cache": _f64(v)}


_KV_HINT = ("Concatenate the new keys/values after the cached ones along dim -2 (None = empty cache), then attend: the new query i "
            "sits at absolute position past_len + i and may see keys 0 ... past_len + i (a causal mask when new_len > 1). "
            "Return (out, k_cache, v_cache) with the grown caches.")
for _id, _args, _chunks in (
    ("10.4-one-token-at-a-time", (1041, 1, 2, 5, 4), (1, 1, 1, 1, 1)),
    ("10.4-prefill-3-then-steps", (1042, 2, 1, 5, 8), (3, 1, 1)),
    ("10.4-everything-at-once", (1043, 1, 2, 4, 4), (4,)),
    ("10.4-chunks-of-2", (1044, 2, 2, 6, 4), (2, 2, 2)),
):
    _add(_id, "10.4", 2, partial(_p_kv, args=_args, chunks=_chunks), expected=partial(_e_kv, _args, _chunks), hint=_KV_HINT, atol=1e-5)


def _p_kv_half(ns: ModuleType, args, chunks) -> Arrays:
    q, k, v = _kv_inputs(*args)
    k_cache = v_cache = None
    outs, start = [], 0
    for size in chunks:
        sl = slice(start, start + size)
        result = ns.kv_cache_step(q[:, :, sl].half(), k[:, :, sl].half(), v[:, :, sl].half(), k_cache, v_cache)
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            raise TypeError(f"kv_cache_step must return (out, k_cache, v_cache); got {type(result).__name__}")
        out, k_cache, v_cache = result
        outs.append(to_array(out, "out", kind="f"))
        start += size
    if any(o.ndim != 4 for o in outs):
        raise TypeError(f"kv_cache_step's out must have shape (batch, n_heads, new_len, d_k); got shapes {[o.shape for o in outs]}")
    return {"out": np.concatenate(outs, axis=2)}


def _e_kv_half(args, chunks) -> Arrays:
    q, k, v = (t.half().float() for t in _kv_inputs(*args))
    return {"out": _f64(F.scaled_dot_product_attention(q, k, v, is_causal=True))}


_add("10.4-float16-prefill-then-steps", "10.4", 1, partial(_p_kv_half, args=(1046, 2, 2, 5, 8), chunks=(3, 1, 1)),
     expected=partial(_e_kv_half, (1046, 2, 2, 5, 8), (3, 1, 1)),
     hint=_KV_HINT + " This case runs in float16: if you mask the scores yourself, fill with torch.finfo(scores.dtype).min "
                     "(a fill value such as -1e9 overflows float16).", rtol=1e-2, atol=5e-3)


def _p_kv_rejects(ns: ModuleType) -> Arrays:
    q, k, v = _kv_inputs(1045, 1, 1, 3, 4)
    cache = k[:, :, :2]
    return {
        "raised_for_v_cache_missing": _raises_value_error(lambda: ns.kv_cache_step(q[:, :, 2:], k[:, :, 2:], v[:, :, 2:], cache, None)),
        "raised_for_k_cache_missing": _raises_value_error(lambda: ns.kv_cache_step(q[:, :, 2:], k[:, :, 2:], v[:, :, 2:], None, cache)),
    }


_add("10.4-rejects-one-missing-cache", "10.4", 1, _p_kv_rejects,
     expected=lambda: {"raised_for_v_cache_missing": np.array(True), "raised_for_k_cache_missing": np.array(True)},
     hint="k_cache and v_cache go together: raise ValueError when exactly one of them is None.")


# --- 10.5: n-gram blocking --------------------------------------------------------------------------------
def _prefix_list(rows: list[list[int]]) -> list[torch.Tensor]:
    return [torch.tensor(row, dtype=torch.long) for row in rows]


#: hand-worked prefixes (vocab 6) and, per n, the banned tokens of each row
_NGRAM_HAND_ROWS = [[5, 3, 5], [2, 2, 2], [1, 2, 3], [4], [], [1, 2, 1, 2]]
_NGRAM_HAND_BANNED = {
    # n = 1: every token that occurred
    1: [{3, 5}, {2}, {1, 2, 3}, {4}, set(), {1, 2}],
    # n = 2: the tokens that followed the last token before: 5 was followed by 3; 2 by 2; 3 by nothing;
    # a single token has no bigram yet; 2 was followed by 1
    2: [{3}, {2}, set(), set(), set(), {1}],
    # n = 3: the last two tokens (3, 5) never occurred before; (2, 2) was followed by 2; (2, 3) no; (1, 2) by 1
    3: [set(), {2}, set(), set(), set(), {1}],
}
_NGRAM_VOCAB = 6


def _banned_reference(rows: list[list[int]], n: int, vocab: int) -> np.ndarray:
    """By enumeration: x is banned iff (last n - 1 tokens, x) is one of the row's n-grams."""
    out = np.zeros((len(rows), vocab), dtype=bool)
    for r, row in enumerate(rows):
        grams = {tuple(row[i:i + n]) for i in range(len(row) - n + 1)}
        context = tuple(row[len(row) - (n - 1):]) if n > 1 else ()
        for x in range(vocab):
            out[r, x] = len(row) >= n - 1 and (context + (x,)) in grams
    return out


def _ngram_rows(key: str) -> list[list[int]]:
    if key == "hand":
        return [list(row) for row in _NGRAM_HAND_ROWS]
    seed, vocab, lengths = key
    return [_randint(seed + i, 0, vocab, length).tolist() if length else [] for i, length in enumerate(lengths)]


def _p_banned(ns: ModuleType, key, n: int, vocab: int) -> Arrays:
    out = ns.banned_tokens(_prefix_list(_ngram_rows(key)), n, vocab)
    return {"banned": to_array(out, f"banned_tokens(prefixes, n={n}, vocab_size={vocab})", kind="b")}


def _e_banned(key, n: int, vocab: int) -> Arrays:
    rows = _ngram_rows(key)
    if key == "hand":
        banned = np.zeros((len(rows), vocab), dtype=bool)
        for r, tokens in enumerate(_NGRAM_HAND_BANNED[n][: len(rows)]):
            banned[r, sorted(tokens)] = True
        return {"banned": banned}
    return {"banned": _banned_reference(rows, n, vocab)}


_NGRAM_HINT = ("Row r: collect the n-grams of prefixes[r] (tuples of n consecutive tokens). Token x is banned when the last n - 1 "
               "tokens followed by x form one of them (n = 1: every token that occurred). A prefix with fewer than n tokens bans "
               "nothing. Return a bool tensor (len(prefixes), vocab_size), True = banned.")
for _id, (_key, _n, _vocab) in {
    "10.5-hand-bigrams": ("hand", 2, _NGRAM_VOCAB),
    "10.5-hand-trigrams": ("hand", 3, _NGRAM_VOCAB),
    "10.5-hand-unigrams": ("hand", 1, _NGRAM_VOCAB),
    "10.5-drawn-bigrams": ((1051, 4, (0, 1, 2, 5, 9, 14)), 2, 4),
    "10.5-drawn-trigrams-vocab-3": ((1061, 3, (2, 3, 7, 12, 20)), 3, 5),
}.items():
    _add(_id, "10.5", 2, partial(_p_banned, key=_key, n=_n, vocab=_vocab), expected=partial(_e_banned, _key, _n, _vocab), hint=_NGRAM_HINT)

#: A next-token model that loops: its logits depend only on the last token (vocab 6: <bos>=0, <eos>=1, 2..5).
#: Greedy decoding repeats 2 3 2 3 ...; the blocked decodings below are worked by hand.
LOOP_LOGITS = (
    (-1e4, 0.0, 3.0, 1.0, 0.5, 0.2),   # after <bos>: 2
    (-1e4, 0.0, 0.0, 0.0, 0.0, 0.0),   # after <eos> (never used)
    (-1e4, 1.0, 0.0, 4.0, 2.0, 0.5),   # after 2: 3, then 4, <eos>, 5
    (-1e4, 1.0, 4.0, 0.0, 0.3, 2.5),   # after 3: 2, then 5, <eos>, 4
    (-1e4, 2.5, 1.0, 0.0, 0.0, 3.0),   # after 4: 5, then <eos>
    (-1e4, 3.0, 2.0, 1.0, 0.0, 0.0),   # after 5: <eos>
)
#: greedy with blocking of repeated n-grams (tokens after <bos>), max 10 tokens:
#:   n = 1: 2, 3, then 2 and 3 are banned -> 5, <eos>
#:   n = 2: 2, 3, 2, then (2, 3) would repeat -> 4, 5, <eos>
#:   n = 3: 2, 3, 2, 3, then (2, 3, 2) would repeat -> 5, <eos>
#:   no blocking: 2, 3, 2, 3, ... for all 10 tokens
_LOOP_HAND = {1: [2, 3, 5, EOS], 2: [2, 3, 2, 4, 5, EOS], 3: [2, 3, 2, 3, 5, EOS]}
_LOOP_MAX_LEN = 10


def _p_loop(ns: ModuleType) -> Arrays:
    logits_table = torch.tensor(LOOP_LOGITS)
    out = {}
    for n in (1, 2, 3):
        generated, last = [], BOS
        for _ in range(_LOOP_MAX_LEN):
            banned = ns.banned_tokens([torch.tensor(generated, dtype=torch.long)], n, logits_table.size(1))
            banned = to_array(banned, f"banned_tokens([generated], n={n}, vocab_size=6)", kind="b")
            if banned.shape != (1, logits_table.size(1)):
                raise TypeError(f"banned_tokens must return shape (len(prefixes), vocab_size) = (1, 6); got {banned.shape}")
            logits = logits_table[last].masked_fill(torch.from_numpy(banned[0]), float("-inf"))
            last = int(torch.argmax(logits))
            generated.append(last)
            if last == EOS:
                break
        out[f"greedy_blocking_n{n}"] = np.array(generated, dtype=np.int64)
    return out


_add("10.5-looping-model-greedy-with-blocking", "10.5", 2, _p_loop,
     expected=lambda: {f"greedy_blocking_n{n}": np.array(seq, dtype=np.int64) for n, seq in _LOOP_HAND.items()},
     hint="This case decodes a model that loops (2 3 2 3 ...) greedily, banning your banned_tokens(...) at every step: "
          "with n = 2 the third 3 must be banned (the bigram (2, 3) occurred), so the decoder turns to 4, 5, <eos>. " + _NGRAM_HINT)


def _p_banned_rejects(ns: ModuleType) -> Arrays:
    rows = _prefix_list([[1, 2, 1], [3]])
    return {
        "raised_for_n_0": _raises_value_error(lambda: ns.banned_tokens(rows, 0, 4)),
        "raised_for_token_beyond_vocab": _raises_value_error(lambda: ns.banned_tokens(_prefix_list([[1, 2], [7]]), 2, 4)),
        # -1 would silently index (and ban) the last token
        "raised_for_negative_id": _raises_value_error(lambda: ns.banned_tokens(_prefix_list([[1, 2], [-1, 3]]), 2, 4)),
    }


_add("10.5-rejects-bad-arguments", "10.5", 1, _p_banned_rejects,
     expected=lambda: {"raised_for_n_0": np.array(True), "raised_for_token_beyond_vocab": np.array(True),
                       "raised_for_negative_id": np.array(True)},
     hint="Raise ValueError naming the argument when n < 1 or a prefix holds an id outside [0, vocab_size).")
