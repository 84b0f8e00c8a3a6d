"""The registry of autograded exercise cases (chapters 1-11).

Each :class:`Case` checks one exercise on one deterministic input:

* ``produce(ns)`` calls **only** the student's namespace ``ns`` (the module
  returned by :func:`course_exercises.extract.load_namespace`) on seeded,
  fixed-shape inputs and returns plain numpy arrays (float64 / int64 / bool).
  Behaviours are arrays too (``{"raised": np.array(True)}``).
* ``expected()`` computes the same keys from independent sources: closed forms,
  PyTorch built-ins (``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``
  with copied weights, ``F.layer_norm``, ``F.cross_entropy`` ...), hand-worked
  tables, brute-force enumeration, or a library layer of ``course_lib`` that is
  not the exercise itself - never the solutions notebook.

Inputs are built from ``torch.Generator`` seeds (no global random state) and
are rebuilt for every call, so a student function that modifies its inputs in
place cannot change the expected values.

This file ships inside the package (``course_exercises/cases/cases.py``),
so that the student's check command (``course-check``) and the instructor's
grader (``course-grade``) work from an installed package as from a clone; the
tests (``tests/exercises``) use the same file. It has no relative imports and
does no work at import time beyond building the ``CASES`` list. Load it with
:func:`course_exercises.check.load_cases` (by path, as the module
``course_exercise_cases``), never as ``course_exercises.cases.cases``.

The grader covers this whole folder in the sandbox of the process that runs a
student's code (which gets only the *student copy*, see
:mod:`course_exercises.casefile`): keep nothing else here.

The contract between exercises, tests and grader is in
``tests/exercises/CONTRACT.md`` of the repository.
"""

from __future__ import annotations

import contextvars
import hashlib
import itertools
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from types import ModuleType
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Case", "CASES", "NOTEBOOKS", "EXERCISES", "Draws", "drawing", "to_array", "ReturnTypeError", "compare",
           "cases_for"]

#: chapter -> notebook file name (in ``exercises/`` and ``solutions/``)
NOTEBOOKS: dict[str, str] = {
    "01": "01_motivation.ipynb",
    "02": "02_embeddings.ipynb",
    "03": "03_positional_encoding.ipynb",
    "04": "04_attention.ipynb",
    "05": "05_multi_head_attention.ipynb",
    "06": "06_feed_forward.ipynb",
    "07": "07_add_and_norm.ipynb",
    "08": "08_masks.ipynb",
    "09": "09_training.ipynb",
    "10": "10_inference.ipynb",
    "11": "11_pitfalls.ipynb",
}

#: exercise number -> the function the student writes
EXERCISES: dict[str, str] = {
    "1.1": "layer_flops",
    "1.2": "crossover_length",
    "1.3": "table1_counts",
    "2.1": "scaled_embedding",
    "2.2": "tied_output_logits",
    "2.3": "scale_ratios",
    "3.1": "encode_positions",
    "3.2": "shift_encodings",
    "3.3": "alibi_bias",
    "4.1": "scaled_dot_product_attention",
    "4.2": "self_attention",
    "4.3": "additive_attention",
    "4.4": "dot_product_score_std",
    "5.1": "split_heads",
    "5.2": "merge_heads",
    "5.3": "multi_head_attention",
    "5.4": "head_ablation_effect",
    "6.1": "position_wise_ffn",
    "6.2": "gelu",
    "6.3": "swiglu_ffn",
    "6.4": "swiglu_hidden_width",
    "7.1": "layer_norm",
    "7.2": "pre_ln_stack",
    "7.3": "post_ln_stack",
    "7.4": "rms_norm",
    "7.5": "gradient_norms_by_depth",
    "8.1": "padding_mask",
    "8.2": "causal_mask",
    "8.3": "decoder_self_attention_mask",
    "8.4": "prefix_lm_mask",
    "9.1": "label_smoothed_loss",
    "9.2": "noam_lr",
    "9.3": "teacher_forcing_pair",
    "9.4": "noam_lr_with_peak",
    "10.1": "greedy_decode",
    "10.2": "beam_search",
    "10.3": "top_k_top_p_filtering",
    "10.4": "kv_cache_step",
    "10.5": "banned_tokens",
    "11.1": "dependency_matrix",
    "11.2": "loss_floors",
    "11.3": "first_divergence",
}

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Case:
    """One autograded check of one exercise.

    Attributes:
        id: unique, file-name safe (``[0-9a-z.-]``), starts with the exercise
            number, e.g. ``"4.1-causal-mask"``; used as a test id and as a
            directory name by the grader.
        chapter: two-digit chapter, a key of :data:`NOTEBOOKS` (``"04"``).
        exercise: exercise number, ``"4.1"``; the stub raises
            ``NotImplementedError("Exercise 4.1: ...")``.
        points: points earned when the case passes.
        requires: names the student's namespace must define.
        produce: ``produce(ns) -> {key: array}``; calls only the student's code.
        expected: ``expected() -> {key: array}``; independent reference values.
        rtol, atol: tolerances of :func:`numpy.allclose` for float keys (bool
            and integer keys must match exactly).
        hint: one or two sentences shown when the case fails.
        robust: ``robust() -> bool`` for cases whose answer hinges on a
            comparison (argmax, a top-p boundary): ``True`` when the drawn
            inputs keep clear of ties, so float32 rounding cannot flip the
            answer. The grader redraws a case's inputs until it holds.
        standins: ``{function name: source text}`` for an exercise that calls
            another exercise's function: the case runs with the course's
            definition (the source, a ``_STANDIN_*`` constant of this file)
            in place of the student's, so that one mistake costs its own
            points only. Trusted side only: the student copy of this file
            has ``None`` here (:mod:`course_exercises.casefile`), and the
            grader's child gets the sources only once every case of the
            replaced exercise is closed.
    """

    id: str
    chapter: str
    exercise: str
    points: int
    requires: tuple[str, ...]
    produce: Callable[[ModuleType], Arrays]
    expected: Callable[[], Arrays]
    rtol: float
    atol: float
    hint: str
    robust: Callable[[], bool] | None = None
    standins: dict[str, str] | None = None

    @property
    def function(self) -> str:
        """The name of the function the exercise asks for."""
        return EXERCISES[self.exercise]


def standin_exercise(name: str) -> str | None:
    """The exercise whose function is ``name`` (``"causal_mask"`` -> ``"8.2"``), or ``None``."""
    return next((ex for ex, fn in EXERCISES.items() if fn == name), None)


def standin_note(names) -> str:
    """``"ran with the course's causal_mask in place of yours (exercise 8.2)"`` for the given stand-in names."""
    parts = []
    for name in sorted(names):
        ex = standin_exercise(name)
        parts.append(f"{name}" + (f" (exercise {ex})" if ex else ""))
    return f"ran with the course's {', '.join(parts)} in place of yours"


# ---------------------------------------------------------------------------
# Helpers: inputs, conversion, comparison
# ---------------------------------------------------------------------------
@dataclass
class Draws:
    """Where the random inputs of one case come from while :func:`drawing` is active.

    Without an active ``Draws`` (the tests, the student's check command) every
    input comes from its fixed seed. The grader's trusted reference run uses
    ``Draws(salt=...)``: each seed is mixed with a secret salt drawn for the
    grading run and every input drawn is kept in ``recorded``. The student's
    process gets ``Draws(replay=recorded)``: the same inputs as data, never
    the salt, so outputs prepared in advance do not help.

    Attributes:
        salt: secret text mixed into every seed (trusted side only).
        recorded: input key -> array, filled while drawing with a salt.
        replay: input key -> array to hand out instead of drawing.
    """

    salt: str | None = None
    recorded: dict[str, np.ndarray] = field(default_factory=dict)
    replay: dict[str, np.ndarray] | None = None


_DRAWS: contextvars.ContextVar[Draws | None] = contextvars.ContextVar("course_case_draws", default=None)


@contextmanager
def drawing(draws: Draws):
    """Make ``draws`` the source of the random inputs of the cases run inside the ``with`` block."""
    token = _DRAWS.set(draws)
    try:
        yield draws
    finally:
        _DRAWS.reset(token)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _salted(salt: str, seed: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{salt}|{seed}".encode()).digest()[:8], "little") >> 1


def _draw(key: str, seed: int, make: Callable[[int], torch.Tensor]) -> torch.Tensor:
    """``make(seed)``, or the salted / replayed input of the active :class:`Draws`."""
    draws = _DRAWS.get()
    if draws is None:
        return make(seed)
    if draws.replay is not None:
        if key not in draws.replay:
            raise LookupError(f"course grader: the input {key} of this case was not provided")
        return torch.from_numpy(np.array(draws.replay[key], copy=True))
    value = make(_salted(draws.salt, seed) if draws.salt is not None else seed)
    draws.recorded[key] = value.numpy().copy()
    return value


def _randn(seed: int, *shape: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    """float32 standard normal (times ``scale`` plus ``shift``) from a private generator."""
    return _draw(f"randn-{seed}-{shape}-{scale!r}-{shift!r}", seed,
                 lambda s: torch.randn(*shape, generator=_gen(s)) * scale + shift)


def _randint(seed: int, low: int, high: int, *shape: int) -> torch.Tensor:
    """int64 uniform in ``[low, high)`` from a private generator."""
    return _draw(f"randint-{seed}-{low}-{high}-{shape}", seed,
                 lambda s: torch.randint(low, high, shape, generator=_gen(s)))


class ReturnTypeError(TypeError):
    """A student's function returned a value of the wrong type (see :func:`to_array`).

    The check command and the grader show only its message (one line, no
    traceback frames of the cases file): the mistake is in what the function
    returns, not in where the harness noticed it.
    """


def _shape_words(value: object) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None:
        try:
            return f" of shape {tuple(int(n) for n in shape)}"
        except (TypeError, ValueError):
            return ""
    if isinstance(value, (list, tuple)):
        return f" of length {len(value)}"
    return ""


def to_array(value: object, what: str, *, kind: str) -> np.ndarray:
    """Convert a student's return value to a numpy array for comparison: the one return-type rule.

    The rule (the same in the check command and the grader, which both call
    this function): an answer that is an array must be a ``torch.Tensor`` (any
    float dtype for ``"f"``, any integer dtype for ``"i"``, ``torch.bool`` for
    ``"b"``; it may require grad or live on a GPU); an answer that is one
    number may also be a Python ``int``/``float``/``bool``, a NumPy scalar or a
    0-dim NumPy array. A NumPy array with dimensions, a list, a tuple, ``None``
    or anything else fails the case with one line, e.g. ``split_heads(x, 2)
    returned numpy.ndarray of shape (2, 2, 5, 4); return a torch.Tensor``.

    Args:
        value: what the student's function returned.
        what: words naming the value (the call), used in the message.
        kind: the kind the exercise asks for: ``"f"`` (float -> float64),
            ``"i"`` (integer -> int64) or ``"b"`` (bool). A value of another
            kind is returned in its own kind (float64 / int64 / bool) so that
            the comparison reports the dtype mismatch.

    Raises:
        ReturnTypeError: ``value`` breaks the rule (e.g. ``None`` because the
            function forgot to ``return``).
    """
    words = _KIND_WORDS[kind]
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.is_complex():
            raise ReturnTypeError(f"{what} returned a complex tensor; return a real torch.Tensor of {words}s")
        if t.dtype == torch.bool:
            arr = t.numpy()
        elif t.dtype.is_floating_point:
            arr = t.to(torch.float64).numpy()
        else:
            arr = t.to(torch.int64).numpy()
    elif isinstance(value, (bool, np.bool_)):
        arr = np.asarray(bool(value))
    elif isinstance(value, (int, np.integer)):
        arr = np.asarray(int(value), dtype=np.int64)
    elif isinstance(value, (float, np.floating)):
        arr = np.asarray(float(value), dtype=np.float64)
    elif isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        arr = value  # a NumPy number
    else:
        name = type(value).__name__ if type(value).__module__ in ("builtins", None) else \
            f"{type(value).__module__.split('.')[0]}.{type(value).__name__}"
        if value is None:
            raise ReturnTypeError(f"{what} returned None; return a torch.Tensor of {words}s "
                                  f"(did the function forget to `return`?)")
        fix = " (torch.from_numpy(...) converts it)" if isinstance(value, np.ndarray) else \
            " (torch.tensor(...) or torch.stack(...) converts it)" if isinstance(value, (list, tuple)) else ""
        raise ReturnTypeError(f"{what} returned {name}{_shape_words(value)}; return a torch.Tensor of {words}s{fix}")
    if arr.dtype.kind == "b":
        out = arr.astype(bool)
    elif arr.dtype.kind in "iu":
        out = arr.astype(np.int64)
    else:
        out = arr.astype(np.float64)
    if kind == "f" and out.dtype.kind in "iu":  # an integer result where floats are asked: compare values
        out = out.astype(np.float64)
    return np.array(out, order="C", copy=True)  # (np.ascontiguousarray would turn 0-dim into 1-dim)


_KIND_WORDS = {"f": "float", "i": "integer", "b": "bool"}


def _pair(result: object, what: str, names: tuple[str, str]) -> tuple[object, object]:
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        got = f"a {type(result).__name__}" + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else "")
        raise ReturnTypeError(f"{what} returned {got}; return a pair ({names[0]}, {names[1]})")
    return result[0], result[1]


def compare(case: Case, produced: Arrays, expected: Arrays) -> str | None:
    """Compare a case's produced arrays with the expected ones.

    Each key is compared by :func:`course_exercises.compare.compare_arrays`,
    the grader's own comparator (one rule for both: see its docstring).

    Returns:
        ``None`` when every key matches (floats within ``case.rtol``/``case.atol``,
        bool and integer keys exactly), else a teaching message that names the
        exercise and function, the key, the expected and received shape, dtype
        or values, and the case's hint.
    """
    # imported here, so that the student copy of this file (which drops this function) does not import it
    from course_exercises.compare import compare_arrays

    head = f"Exercise {case.exercise} ({case.function}), case {case.id}"
    if not isinstance(produced, dict):
        return f"{head}: the check produced {type(produced).__name__}, not a dict of arrays."
    problems = [f"`{key}` was not produced." for key in expected if key not in produced]
    for key, exp in expected.items():
        if key in produced:
            problem = compare_arrays(key, np.asarray(produced[key]), np.asarray(exp), case.rtol, case.atol)
            problems += [problem] if problem else []
    if not problems:
        return None
    return head + ":\n  - " + "\n  - ".join(problems) + f"\n  Hint: {case.hint}"


def _raises_value_error(fn: Callable[[], object]) -> np.ndarray:
    """``True`` iff ``fn()`` raises ``ValueError``; ``NotImplementedError`` propagates."""
    try:
        fn()
    except NotImplementedError:
        raise
    except ValueError:
        return np.array(True)
    except Exception:
        return np.array(False)
    return np.array(False)


def _f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).numpy()


# ---------------------------------------------------------------------------
# Stand-ins: the course's own definition of an exercise that another exercise calls
# ---------------------------------------------------------------------------
# Written for this file (not copied from solutions/): each is run in a namespace of its own
# and only the named function replaces the student's, for the cases that pass it as ``standins=``.
# Trusted side only: the student copy of this file drops them (nothing uses them any more).
_STANDIN_SCALED_DOT_PRODUCT_ATTENTION = '''
import math
import torch


def scaled_dot_product_attention(q, k, v, mask=None, bias=None):
    if q.size(-1) != k.size(-1):
        raise ValueError(f"q and k need the same last dimension (d_k); got {q.size(-1)} and {k.size(-1)}")
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.size(-1)))
    if bias is not None:
        if not torch.is_floating_point(bias):
            raise ValueError(f"bias must be a floating-point tensor (a boolean belongs in mask); got {bias.dtype}")
        fits = bias.dim() <= scores.dim() and all(b in (1, s) for b, s in zip(reversed(bias.shape), reversed(scores.shape)))
        if not fits:
            raise ValueError(f"bias of shape {tuple(bias.shape)} does not broadcast to the scores {tuple(scores.shape)}")
        scores = scores + bias.to(scores.dtype)
    allowed = torch.isfinite(scores) if mask is None else mask & torch.isfinite(scores)
    scores = torch.where(allowed, scores, torch.finfo(scores.dtype).min)
    weights = torch.where(allowed, torch.softmax(scores, dim=-1), 0.0)
    return torch.matmul(weights, v), weights
'''

_STANDIN_SPLIT_HEADS = '''
def split_heads(x, n_heads):
    if x.dim() < 2:
        raise ValueError(f"x must be (..., seq_len, d_model); got shape {tuple(x.shape)}")
    if n_heads < 1 or x.size(-1) % n_heads:
        raise ValueError(f"d_model = {x.size(-1)} is not divisible by n_heads = {n_heads}")
    heads = x.reshape(*x.shape[:-1], n_heads, x.size(-1) // n_heads)  # (..., seq_len, n_heads, d_k)
    return heads.transpose(-2, -3)  # (..., n_heads, seq_len, d_k)
'''

_STANDIN_MERGE_HEADS = '''
def merge_heads(x):
    if x.dim() < 3:
        raise ValueError(f"x must be (..., n_heads, seq_len, d_k); got shape {tuple(x.shape)}")
    y = x.transpose(-2, -3)  # (..., seq_len, n_heads, d_k)
    return y.reshape(*y.shape[:-2], y.size(-2) * y.size(-1))
'''

_STANDIN_CAUSAL_MASK = '''
import torch


def causal_mask(q_len, k_len=None):
    if q_len < 1:
        raise ValueError(f"q_len must be at least 1; got {q_len}")
    k_len = q_len if k_len is None else k_len
    if k_len < q_len:
        raise ValueError(f"k_len must be at least q_len = {q_len}; got {k_len}")
    rows = torch.arange(q_len)[:, None] + (k_len - q_len)
    return (torch.arange(k_len)[None, :] <= rows)[None, None]
'''

CASES: list[Case] = []


def _add(
    id: str,
    exercise: str,
    points: int,
    produce: Callable[[ModuleType], Arrays],
    expected: Callable[[], Arrays],
    hint: str,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    robust: Callable[[], bool] | None = None,
    standins: dict[str, str] | None = None,
) -> None:
    """Register one case; ``standins``: see :class:`Case` (pass the ``_STANDIN_*`` constants, as a keyword)."""
    chapter = f"{int(exercise.split('.')[0]):02d}"
    CASES.append(Case(id=id, chapter=chapter, exercise=exercise, points=points, requires=(EXERCISES[exercise],),
                      produce=produce, expected=expected, rtol=rtol, atol=atol, hint=hint, robust=robust,
                      standins=dict(standins) if standins else None))


def cases_for(chapters: tuple[str, ...] | list[str] | None = None) -> list[Case]:
    """The cases of the given two-digit chapters (all when ``None`` or empty)."""
    if not chapters:
        return list(CASES)
    return [c for c in CASES if c.chapter in set(chapters)]


# ===========================================================================
# Chapter 1 - motivation: the cost of a layer, the crossover, table 1
# ===========================================================================
# FLOPs of the matrix products of one layer, the chapter's convention: a multiply-add is 2 FLOPs;
# biases, softmax and nonlinearities are not counted (FlopCounterMode counts the same, see test_cases.py).
_FLOP_FORMULAS: dict[str, Callable[[int, int, int, int], int]] = {
    "attention": lambda n, d, b, k: 2 * (b * n * n * d) + 2 * (b * n * n * d),        # Q K^T, then weights @ V
    "multi_head_attention": lambda n, d, b, k: 4 * (2 * b * n * d * d) + 4 * b * n * n * d,  # + Q, K, V, output
    "rnn": lambda n, d, b, k: n * (2 * (b * d * d) + 2 * (b * d * d)),                 # W_ih x_t, W_hh h_{t-1}
    "gru": lambda n, d, b, k: n * 3 * (2 * (b * d * d) + 2 * (b * d * d)),             # 3 gates
    "lstm": lambda n, d, b, k: n * 4 * (2 * (b * d * d) + 2 * (b * d * d)),            # 4 gates
    "conv": lambda n, d, b, k: 2 * b * n * (k * d) * d,                                # n outputs, k*d inputs each
}


def _p_flops(ns: ModuleType, rows) -> Arrays:
    out = []
    for kind, n, d, batch, kernel_size in rows:
        value = ns.layer_flops(kind, int(n), int(d), batch=int(batch), kernel_size=int(kernel_size))
        out.append(to_array(value, f"layer_flops({kind!r}, {int(n)}, {int(d)}, batch={int(batch)}, kernel_size={int(kernel_size)})", kind="i"))
    return {"flops": np.stack(out)}


def _e_flops(rows) -> Arrays:
    return {"flops": np.array([_FLOP_FORMULAS[kind](int(n), int(d), int(b), int(k)) for kind, n, d, b, k in rows], dtype=np.int64)}


_FLOP_HINT = ("Count 2 FLOPs per multiply-add, matrix products only: attention core 4*batch*n^2*d; multi-head attention "
              "adds four d x d projections, 8*batch*n*d^2; a recurrent step does two d x d products per gate "
              "(rnn 1 gate, gru 3, lstm 4); a convolution does kernel_size*d multiply-adds per output channel.")
_FLOP_TABLES = {
    "1.1-attention-core": [("attention", 12, 16, 2, 3), ("attention", 1, 1, 1, 3), ("attention", 100, 64, 3, 3)],
    "1.1-multi-head-attention": [("multi_head_attention", 12, 16, 2, 3), ("multi_head_attention", 50, 8, 1, 3)],
    "1.1-rnn": [("rnn", 12, 16, 2, 3), ("rnn", 7, 5, 1, 3), ("rnn", 1000, 512, 4, 3)],
    "1.1-gated-recurrent": [("gru", 7, 5, 2, 3), ("lstm", 7, 5, 2, 3), ("lstm", 64, 512, 1, 3)],
    "1.1-convolution": [("conv", 7, 5, 2, 3), ("conv", 30, 16, 1, 5), ("conv", 9, 4, 3, 1)],
}


def _flop_rows_and_draws(rows, seed: int) -> list[tuple[str, int, int, int, int]]:
    """The table's rows plus one row with drawn sizes per kind of the table (so that every case has drawn inputs)."""
    kinds = list(dict.fromkeys(row[0] for row in rows))
    n, d = _randint(seed, 1, 300, len(kinds)), _randint(seed + 1, 1, 300, len(kinds))
    b, k = _randint(seed + 2, 1, 9, len(kinds)), _randint(seed + 3, 1, 8, len(kinds))
    return list(rows) + [(kind, int(n[i]), int(d[i]), int(b[i]), int(k[i])) for i, kind in enumerate(kinds)]


for _n, (_id, _rows) in enumerate(_FLOP_TABLES.items()):
    _rows_fn = partial(_flop_rows_and_draws, _rows, 131 + 10 * _n)
    _add(_id, "1.1", 2 if "gated" in _id else 1, (lambda f: lambda ns: _p_flops(ns, f()))(_rows_fn),
         (lambda f: lambda: _e_flops(f()))(_rows_fn), _FLOP_HINT, rtol=0.0, atol=1e-6)


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_flop_rows() -> list[tuple[str, int, int, int, int]]:
    n, d, b, k = _randint(101, 1, 300, 6), _randint(102, 1, 300, 6), _randint(103, 1, 9, 6), _randint(104, 1, 8, 6)
    return [(kind, int(n[i]), int(d[i]), int(b[i]), int(k[i])) for i, kind in enumerate(_FLOP_FORMULAS)]


_add("1.1-drawn-sizes", "1.1", 2, lambda ns: _p_flops(ns, _drawn_flop_rows()), lambda: _e_flops(_drawn_flop_rows()),
     _FLOP_HINT, rtol=0.0, atol=1e-6)


def _p_flops_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_unknown_kind": _raises_value_error(lambda: ns.layer_flops("transformer", 4, 8)),
        "raised_for_n_0": _raises_value_error(lambda: ns.layer_flops("rnn", 0, 8)),
        "raised_for_d_0": _raises_value_error(lambda: ns.layer_flops("attention", 4, 0)),
        "raised_for_batch_0": _raises_value_error(lambda: ns.layer_flops("lstm", 4, 8, batch=0)),
        "raised_for_kernel_size_0": _raises_value_error(lambda: ns.layer_flops("conv", 4, 8, kernel_size=0)),
    }


_add("1.1-rejects-bad-arguments", "1.1", 1, _p_flops_rejects,
     lambda: {k: np.array(True) for k in ("raised_for_unknown_kind", "raised_for_n_0", "raised_for_d_0", "raised_for_batch_0",
                                          "raised_for_kernel_size_0")},
     "Raise ValueError naming the argument for an unknown kind and for n, d, batch or kernel_size smaller than 1.")


def _crossover_by_enumeration(d: int, recurrent: str, projections: bool) -> int:
    attention = "multi_head_attention" if projections else "attention"
    n = 1
    while _FLOP_FORMULAS[attention](n, d, 1, 1) <= _FLOP_FORMULAS[recurrent](n, d, 1, 1):
        n += 1
    return n


def _p_crossover(ns: ModuleType, rows) -> Arrays:
    out = [to_array(ns.crossover_length(int(d), recurrent=rec, projections=proj),
                    f"crossover_length({int(d)}, recurrent={rec!r}, projections={proj})", kind="i") for d, rec, proj in rows]
    return {"n": np.stack(out)}


def _e_crossover(rows) -> Arrays:
    return {"n": np.array([_crossover_by_enumeration(int(d), rec, proj) for d, rec, proj in rows], dtype=np.int64)}


_CROSS_HINT = ("Solve attention FLOPs > recurrent FLOPs for n (the batch cancels): the core costs 4 n^2 d, the four "
               "projections add 8 n d^2; the recurrent layer costs 4 n d^2 per gate (rnn 1, gru 3, lstm 4). "
               "'More' is strict: at equality the answer is the next n.")
_CROSS_TABLES = {
    "1.2-core-vs-rnn": [(1, "rnn", False), (16, "rnn", False), (512, "rnn", False)],
    "1.2-core-vs-gated": [(16, "gru", False), (512, "lstm", False), (3, "lstm", False)],
    "1.2-with-projections": [(16, "rnn", True), (512, "gru", True), (512, "lstm", True), (1, "lstm", True)],
}


def _crossover_rows_and_draws(rows, seed: int) -> list[tuple[int, str, bool]]:
    """The table's rows plus one row with a drawn width per comparison of the table."""
    pairs = list(dict.fromkeys((rec, proj) for _, rec, proj in rows))
    d = _randint(seed, 1, 1025, len(pairs))
    return list(rows) + [(int(d[i]), rec, proj) for i, (rec, proj) in enumerate(pairs)]


for _n, (_id, _rows) in enumerate(_CROSS_TABLES.items()):
    _rows_fn = partial(_crossover_rows_and_draws, _rows, 181 + 10 * _n)
    _add(_id, "1.2", 1, (lambda f: lambda ns: _p_crossover(ns, f()))(_rows_fn),
         (lambda f: lambda: _e_crossover(f()))(_rows_fn), _CROSS_HINT, rtol=0.0, atol=1e-6)


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_crossover_rows() -> list[tuple[int, str, bool]]:
    d = _randint(111, 1, 1025, 6)
    return [(int(d[i]), rec, proj) for i, (rec, proj) in enumerate(itertools.product(("rnn", "gru", "lstm"), (False, True)))]


_add("1.2-drawn-width", "1.2", 2, lambda ns: _p_crossover(ns, _drawn_crossover_rows()),
     lambda: _e_crossover(_drawn_crossover_rows()), _CROSS_HINT, rtol=0.0, atol=1e-6)


def _p_crossover_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_d_0": _raises_value_error(lambda: ns.crossover_length(0)),
        "raised_for_unknown_recurrent": _raises_value_error(lambda: ns.crossover_length(16, recurrent="transformer")),
    }


_add("1.2-rejects-bad-arguments", "1.2", 1, _p_crossover_rejects,
     lambda: {"raised_for_d_0": np.array(True), "raised_for_unknown_recurrent": np.array(True)},
     "Raise ValueError naming the argument when d < 1 or recurrent is not 'rnn', 'gru' or 'lstm'.")


def _one_layer_edges(kind: str, n: int, layer: int, k: int | None, r: int | None) -> np.ndarray:
    """edges[i, j]: output position j of one layer (recurrence step) reads input position i."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    if kind == "self_attention":
        return np.ones((n, n), dtype=bool)
    if kind == "recurrent":
        return (j == i) | (j == i + 1)
    if kind == "convolutional":
        return (j - i >= 0) & (j - i <= k - 1)
    if kind == "dilated_convolutional":
        step = k ** layer
        return (j - i >= 0) & ((j - i) % step == 0) & ((j - i) // step <= k - 1)
    if kind == "restricted_self_attention":
        return np.abs(i - j) <= (r - 1) // 2
    raise AssertionError(kind)  # pragma: no cover


def _path_by_enumeration(kind: str, n: int, k: int | None, r: int | None) -> int:
    """Layers needed until input position 0 reaches output position n - 1 (breadth-first, layer by layer)."""
    reached = np.zeros(n, dtype=bool)
    reached[0] = True
    layers = 0
    while not reached[n - 1]:
        reached = (reached[:, None] & _one_layer_edges(kind, n, layers, k, r)).any(axis=0)
        layers += 1
    return layers


#: sequential operations of one layer (the paper's table 1): only the recurrence waits for its previous step
_SEQUENTIAL = {"self_attention": lambda n: 1, "recurrent": lambda n: n, "convolutional": lambda n: 1,
               "dilated_convolutional": lambda n: 1, "restricted_self_attention": lambda n: 1}


def _p_table1(ns: ModuleType, rows) -> Arrays:
    seq, path = [], []
    for kind, n, k, r in rows:
        what = f"table1_counts({kind!r}, {n}, k={k}, r={r})"
        s, p = _pair(ns.table1_counts(kind, n, k=k, r=r), what, ("sequential_operations", "maximum_path_length"))
        seq.append(to_array(s, f"{what}[0] (sequential_operations)", kind="i"))
        path.append(to_array(p, f"{what}[1] (maximum_path_length)", kind="i"))
    return {"sequential_operations": np.stack(seq), "maximum_path_length": np.stack(path)}


def _e_table1(rows) -> Arrays:
    return {"sequential_operations": np.array([_SEQUENTIAL[kind](n) for kind, n, _, _ in rows], dtype=np.int64),
            "maximum_path_length": np.array([_path_by_enumeration(kind, n, k, r) for kind, n, k, r in rows], dtype=np.int64)}


_TABLE1_HINT = ("Count layers (recurrence steps) from input position 0 to output position n-1: attention 1; recurrent n-1; "
                "a causal kernel of width k reaches k-1 positions further per layer; dilations 1, k, k^2, ... reach k^L "
                "positions after L layers; a centred window of r positions reaches (r-1)/2 further. Only the recurrence "
                "needs n sequential operations.")
_TABLE1_TABLES = {
    "1.3-self-attention": [("self_attention", n, None, None) for n in (2, 3, 10, 1000)],
    "1.3-recurrent": [("recurrent", n, None, None) for n in (2, 3, 10, 100)],
    "1.3-convolutional": [("convolutional", n, k, None) for n, k in ((2, 2), (10, 3), (11, 3), (12, 3), (100, 5), (64, 64), (65, 64))],
    "1.3-dilated-convolutional": [("dilated_convolutional", n, k, None) for n, k in ((2, 2), (8, 2), (9, 2), (27, 3), (28, 3), (100, 10), (101, 10), (125, 5), (216, 6))],
    "1.3-restricted-self-attention": [("restricted_self_attention", n, None, r) for n, r in ((2, 3), (10, 3), (11, 5), (12, 5), (100, 9), (50, 99))],
}


def _table1_rows_and_draws(rows, seed: int) -> list[tuple[str, int, int | None, int | None]]:
    """The table's rows plus two rows of the same kind with a drawn n (and k or r)."""
    kind = rows[0][0]
    n, k, r = _randint(seed, 2, 400, 2), _randint(seed + 1, 2, 12, 2), 2 * _randint(seed + 2, 1, 20, 2) + 1
    return list(rows) + [(kind, int(n[i]), int(k[i]) if "conv" in kind else None, int(r[i]) if "restricted" in kind else None)
                         for i in range(2)]


for _n, (_id, _rows) in enumerate(_TABLE1_TABLES.items()):
    _rows_fn = partial(_table1_rows_and_draws, _rows, 141 + 10 * _n)
    _add(_id, "1.3", 1, (lambda f: lambda ns: _p_table1(ns, f()))(_rows_fn),
         (lambda f: lambda: _e_table1(f()))(_rows_fn), _TABLE1_HINT, rtol=0.0, atol=1e-6)


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_table1_rows() -> list[tuple[str, int, int | None, int | None]]:
    n, k, r = _randint(121, 2, 400, 5), _randint(122, 2, 12, 5), 2 * _randint(123, 1, 20, 5) + 1
    return [(kind, int(n[i]), int(k[i]) if "conv" in kind else None, int(r[i]) if "restricted" in kind else None)
            for i, kind in enumerate(_SEQUENTIAL)]


_add("1.3-drawn-sizes", "1.3", 2, lambda ns: _p_table1(ns, _drawn_table1_rows()), lambda: _e_table1(_drawn_table1_rows()),
     _TABLE1_HINT, rtol=0.0, atol=1e-6)


def _p_table1_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_n_1": _raises_value_error(lambda: ns.table1_counts("recurrent", 1)),
        "raised_for_unknown_kind": _raises_value_error(lambda: ns.table1_counts("lstm", 10)),
        "raised_for_kernel_1": _raises_value_error(lambda: ns.table1_counts("convolutional", 10, k=1)),
        "raised_for_missing_k": _raises_value_error(lambda: ns.table1_counts("dilated_convolutional", 10)),
        "raised_for_even_r": _raises_value_error(lambda: ns.table1_counts("restricted_self_attention", 10, r=4)),
    }


_add("1.3-rejects-bad-arguments", "1.3", 1, _p_table1_rejects,
     lambda: {k: np.array(True) for k in ("raised_for_n_1", "raised_for_unknown_kind", "raised_for_kernel_1",
                                          "raised_for_missing_k", "raised_for_even_r")},
     "Raise ValueError naming the argument: n < 2, an unknown kind, a convolution without an int k >= 2, "
     "a restricted attention without an odd int r >= 3.")


# ===========================================================================
# Chapter 2 - embeddings
# ===========================================================================
def _emb_inputs(seed: int, token_shape: tuple[int, ...], vocab: int, d_model: int):
    return _randint(seed, 0, vocab, *token_shape), _randn(seed + 1, vocab, d_model)


def _padded_emb_inputs(seed: int, token_shape: tuple[int, ...], vocab: int, d_model: int, pad: int):
    tokens, weight = _emb_inputs(seed, token_shape, vocab, d_model)
    tokens[..., -2:] = pad  # the last two positions of every sequence are padding; the weight's pad row is not zero
    return tokens, weight


def _p_scaled_embedding(ns: ModuleType, args) -> Arrays:
    seed, token_shape, vocab, d_model = args
    tokens, weight = _emb_inputs(seed, token_shape, vocab, d_model)
    return {"embedded": to_array(ns.scaled_embedding(tokens, weight), "scaled_embedding(tokens, weight)", kind="f")}


def _e_scaled_embedding(seed, token_shape, vocab, d_model) -> Arrays:
    tokens, weight = _emb_inputs(seed, token_shape, vocab, d_model)
    return {"embedded": _f64(F.embedding(tokens, weight.double()) * math.sqrt(d_model))}


_EMB_HINT = "Look up the rows of `weight` (weight[tokens]) and multiply by math.sqrt(d_model), where d_model = weight.shape[1] (paper section 3.4)."
for _id, _args in {
    "2.1-batch-2x5": (201, (2, 5), 11, 8),
    "2.1-batch-3x7-wide": (202, (3, 7), 50, 64),
    "2.1-single-token": (203, (1, 1), 3, 1),
    "2.1-three-dim-tokens": (204, (2, 3, 4), 9, 6),
}.items():
    _add(_id, "2.1", 1, partial(_p_scaled_embedding, args=_args),
         partial(_e_scaled_embedding, *_args), _EMB_HINT)


def _p_scaled_embedding_pad(ns: ModuleType, args) -> Arrays:
    seed, token_shape, vocab, d_model, pad = args
    tokens, weight = _padded_emb_inputs(seed, token_shape, vocab, d_model, pad)
    return {"embedded": to_array(ns.scaled_embedding(tokens, weight, padding_idx=pad),
                                 f"scaled_embedding(tokens, weight, padding_idx={pad})", kind="f")}


def _e_scaled_embedding_pad(seed, token_shape, vocab, d_model, pad) -> Arrays:
    tokens, weight = _padded_emb_inputs(seed, token_shape, vocab, d_model, pad)
    # F.embedding's own padding_idx only stops the gradient; the output row is zeroed here
    keep = (tokens != pad).double()[..., None]
    return {"embedded": _f64(F.embedding(tokens, weight.double()) * math.sqrt(d_model) * keep)}


_EMB_PAD_HINT = ("Positions holding padding_idx must come out as zero vectors, whatever the weight's row padding_idx holds "
                 "(F.embedding(..., padding_idx=...) only blocks the gradient); other positions are weight[tokens] * sqrt(d_model).")
for _id, _args in {
    "2.1-padding-idx-0": (206, (3, 6), 12, 8, 0),
    "2.1-padding-idx-last-id": (207, (2, 2, 5), 7, 4, 6),
}.items():
    _add(_id, "2.1", 2, partial(_p_scaled_embedding_pad, args=_args),
         partial(_e_scaled_embedding_pad, *_args), _EMB_PAD_HINT)


def _value_error_text(fn: Callable[[], object]) -> str | None:
    """The message of the ``ValueError`` that ``fn()`` raises (``None`` when it raises none); ``NotImplementedError``
    propagates."""
    try:
        fn()
    except NotImplementedError:
        raise
    except ValueError as exc:
        return str(exc)
    except Exception:
        return None
    return None


def _rejections(checks: dict) -> Arrays:
    """``raised_for_<situation>``: ``fn()`` raises ``ValueError``, for each ``situation -> (fn, words)``; and
    ``message_names_<w1>_and_<w2>``: every such ``ValueError`` raised names the words the statement promises."""
    out: Arrays = {}
    named: dict[str, bool] = {}
    for situation, (fn, words) in checks.items():
        text = _value_error_text(fn)
        out[f"raised_for_{situation}"] = np.array(text is not None)
        if words:
            key = "message_names_" + "_and_".join(words)
            named[key] = named.get(key, True) and (text is None or all(w in text for w in words))
    return {**out, **{k: np.array(v) for k, v in named.items()}}


def _p_embedding_rejects(ns: ModuleType) -> Arrays:
    weight = _randn(205, 5, 4)
    return _rejections({
        "id_equal_to_vocab_size": (lambda: ns.scaled_embedding(torch.tensor([[0, 5]]), weight), ("tokens",)),
        "negative_id": (lambda: ns.scaled_embedding(torch.tensor([[-1, 2]]), weight), ("tokens",)),
        "float_tokens": (lambda: ns.scaled_embedding(torch.tensor([[0.0, 1.0]]), weight), ("tokens",)),
        "bool_tokens": (lambda: ns.scaled_embedding(torch.tensor([[True, False]]), weight), ("tokens",)),
        "padding_idx_5": (lambda: ns.scaled_embedding(torch.tensor([[0, 1]]), weight, padding_idx=5), ("padding_idx",)),
    })


_add("2.1-rejects-bad-tokens", "2.1", 1, _p_embedding_rejects,
     lambda: {k: np.array(True) for k in ("raised_for_id_equal_to_vocab_size", "raised_for_negative_id", "raised_for_float_tokens",
                                          "raised_for_bool_tokens", "raised_for_padding_idx_5",
                                          "message_names_tokens", "message_names_padding_idx")},
     "Raise ValueError (naming `tokens`) when tokens is not an integer tensor (float or bool) or an id lies outside "
     "[0, vocab_size), and (naming `padding_idx`) when padding_idx is not None and outside [0, vocab_size).")


def _p_tied(ns: ModuleType, args) -> Arrays:
    seed, batch, seq_len, vocab, d_model = args
    hidden, weight = _randn(seed, batch, seq_len, d_model), _randn(seed + 1, vocab, d_model)
    return {"logits": to_array(ns.tied_output_logits(hidden, weight), "tied_output_logits(hidden, weight)", kind="f")}


def _e_tied(seed, batch, seq_len, vocab, d_model) -> Arrays:
    hidden, weight = _randn(seed, batch, seq_len, d_model), _randn(seed + 1, vocab, d_model)
    return {"logits": _f64(F.linear(hidden.double(), weight.double()))}


_TIED_HINT = "logits = hidden @ weight.T: the embedding matrix (vocab_size, d_model) is reused, transposed, as the output projection."
for _id, _args in {"2.2-batch-2x4": (211, 2, 4, 10, 8), "2.2-batch-1x6-vocab-30": (212, 1, 6, 30, 16)}.items():
    _add(_id, "2.2", 1, partial(_p_tied, args=_args),
         partial(_e_tied, *_args), _TIED_HINT, atol=1e-5)


def _p_tied_rejects(ns: ModuleType) -> Arrays:
    hidden, weight = _randn(213, 2, 3, 8), _randn(214, 10, 6)
    return {"raised_for_mismatched_d_model": _raises_value_error(lambda: ns.tied_output_logits(hidden, weight))}


_add("2.2-rejects-mismatched-width", "2.2", 1, _p_tied_rejects, lambda: {"raised_for_mismatched_d_model": np.array(True)},
     "Raise ValueError when hidden.shape[-1] != weight.shape[1] (both must be d_model).")


def _e_scale(rows) -> Arrays:
    out = []
    for d_model, init_std in rows:
        pe_sq = float((_pe_closed_form(7, d_model) ** 2).sum(axis=1).mean())  # every row: d_model / 2 (even d_model)
        row = []
        for factor in (1.0, math.sqrt(d_model)):
            emb_sq = d_model * (init_std * factor) ** 2                        # E ||row||^2 = d_model * std^2
            row.append([math.sqrt(emb_sq / pe_sq), pe_sq / (pe_sq + emb_sq)])
        out.append(row)
    return {"ratios": np.array(out, dtype=np.float64)}


def _per_call(name: str, labels: list[str], stacked: np.ndarray) -> Arrays:
    """One key per call of a stacked result, named by the call's inputs (``ratios_call_1_d_model_64_init_std_0.125``),
    so that a message names the call it is about and indexes only that call's own result."""
    return {f"{name}_call_{i}_{label}": np.asarray(value) for i, (label, value) in enumerate(zip(labels, stacked))}


def _scale_labels(rows) -> list[str]:
    return [f"d_model_{int(d)}_init_std_{float(s):.6g}".replace("+", "") for d, s in rows]


def _p_scale(ns: ModuleType, rows) -> Arrays:
    return _per_call("ratios", _scale_labels(rows), np.stack([
        to_array(ns.scale_ratios(int(d), float(s)), f"scale_ratios({int(d)}, {float(s)!r})", kind="f") for d, s in rows]))


def _e_scale_per_call(rows) -> Arrays:
    return _per_call("ratios", _scale_labels(rows), _e_scale(rows)["ratios"])


_SCALE_HINT = ("An embedding row with N(0, init_std^2) entries has E||row||^2 = d_model * init_std^2 (times d_model once "
               "scaled by sqrt(d_model)); a positional row of even width has ||PE||^2 = d_model / 2 exactly. Column 0 is "
               "sqrt(E||row||^2) / ||PE||, column 1 is ||PE||^2 / (||PE||^2 + E||row||^2); row 0 unscaled, row 1 scaled.")
def _scale_rows_and_draw(rows, seed: int) -> list[tuple[int, float]]:
    """The rows plus one with a drawn even width and the initialisation rule of the first row."""
    d = 2 * int(_randint(seed, 1, 1025))
    std = d ** -0.5 if rows[0][1] == rows[0][0] ** -0.5 else rows[0][1]
    return list(rows) + [(d, std)]


for _n, (_id, _rows) in enumerate({
    "2.3-paper-init-512": [(512, 512 ** -0.5)],
    "2.3-paper-init-several-widths": [(8, 8 ** -0.5), (64, 0.125), (1024, 1 / 32)],
    "2.3-unit-std": [(16, 1.0), (512, 1.0)],
    "2.3-small-std-wide": [(2, 0.02), (4096, 0.02)],
}.items()):
    _rows_fn = partial(_scale_rows_and_draw, _rows, 231 + _n)
    _add(_id, "2.3", 1, (lambda f: lambda ns: _p_scale(ns, f()))(_rows_fn), (lambda f: lambda: _e_scale_per_call(f()))(_rows_fn),
         _SCALE_HINT, rtol=1e-6, atol=1e-9)


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_scale_rows() -> list[tuple[int, float]]:
    d, s = 2 * _randint(221, 1, 1025, 3), _randint(222, 1, 2001, 3)
    return [(int(d[i]), int(s[i]) / 1000) for i in range(3)]


_add("2.3-drawn-widths", "2.3", 2, lambda ns: _p_scale(ns, _drawn_scale_rows()), lambda: _e_scale_per_call(_drawn_scale_rows()),
     _SCALE_HINT, rtol=1e-6, atol=1e-9)


def _p_scale_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_odd_d_model": _raises_value_error(lambda: ns.scale_ratios(7, 0.1)),
        "raised_for_std_0": _raises_value_error(lambda: ns.scale_ratios(8, 0.0)),
    }


_add("2.3-rejects-bad-arguments", "2.3", 1, _p_scale_rejects,
     lambda: {"raised_for_odd_d_model": np.array(True), "raised_for_std_0": np.array(True)},
     "Raise ValueError naming d_model when it is odd or smaller than 2, and naming init_std when it is not > 0.")


# ===========================================================================
# Chapter 3 - positional encoding
# ===========================================================================
def _pe_closed_form(max_len: int, d_model: int) -> np.ndarray:
    return _pe_at(np.arange(max_len), d_model)


def _pe_at(positions: np.ndarray, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The sinusoidal rows of the given integer positions, entry by entry with ``math``: ``positions.shape + (d_model,)``."""
    flat = np.asarray(positions).reshape(-1)
    pe = np.zeros((flat.size, d_model))
    for row, pos in enumerate(flat.tolist()):
        for col in range(d_model):
            i2 = col - (col % 2)  # the "2i" of the paper
            angle = pos / (base ** (i2 / d_model))
            pe[row, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    return pe.reshape(*np.shape(positions), d_model)


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
         (lambda m, d, b: lambda: _e_pe(m(), d, b))(_make, _d, _base), _PE_HINT, atol=2e-5)


def _p_pe_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_float_positions": _raises_value_error(lambda: ns.encode_positions(torch.tensor([0.0, 1.0]), 8)),
        "raised_for_negative_position": _raises_value_error(lambda: ns.encode_positions(torch.tensor([3, -1]), 8)),
        "raised_for_d_model_0": _raises_value_error(lambda: ns.encode_positions(torch.arange(4), 0)),
        "raised_for_base_1": _raises_value_error(lambda: ns.encode_positions(torch.arange(4), 8, base=1.0)),
    }


_add("3.1-rejects-bad-arguments", "3.1", 1, _p_pe_rejects,
     lambda: {k: np.array(True) for k in ("raised_for_float_positions", "raised_for_negative_position", "raised_for_d_model_0",
                                          "raised_for_base_1")},
     "Raise ValueError naming the argument: positions not an integer tensor or negative, d_model < 1, base <= 1.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_positions(parity: int) -> tuple[torch.Tensor, int]:
    """Drawn positions (3, 9) and a drawn d_model of the given parity (0 even, 1 odd)."""
    return _randint(301 + parity, 0, 5000, 3, 9), 2 * int(_randint(303 + parity, 1, 24)) + parity


def _drawn_base() -> float:
    return float(_randint(305, 2, 100001))


_add("3.1-drawn-positions", "3.1", 2, lambda ns: _p_pe(ns, *_drawn_positions(0), None),
     lambda: _e_pe(*_drawn_positions(0), None), _PE_HINT, atol=2e-5)
_add("3.1-drawn-odd-d-model", "3.1", 1, lambda ns: _p_pe(ns, *_drawn_positions(1), None),
     lambda: _e_pe(*_drawn_positions(1), None), _PE_HINT, atol=2e-5)
_add("3.1-drawn-base", "3.1", 1, lambda ns: _p_pe(ns, *_drawn_positions(0), _drawn_base()),
     lambda: _e_pe(*_drawn_positions(0), _drawn_base()), _PE_HINT, atol=2e-5)


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
         (lambda p, d, k: lambda: _e_peshift(p(), d, k()))(_pos, _d, _k), _PESHIFT_HINT, atol=1e-5)


def _p_peshift_rejects(ns: ModuleType) -> Arrays:
    return {"raised_for_odd_d_model": _raises_value_error(lambda: ns.shift_encodings(torch.zeros(3, 5, dtype=torch.float64), 2))}


_add("3.2-rejects-odd-d-model", "3.2", 1, _p_peshift_rejects, lambda: {"raised_for_odd_d_model": np.array(True)},
     "For odd d_model the last column has no cosine partner: raise ValueError naming pe.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_peshift() -> tuple[torch.Tensor, int, torch.Tensor]:
    return _randint(311, 0, 200, 4, 5), 2 * int(_randint(312, 1, 17)), _randint(313, -30, 31, 4, 1)


def _drawn_scalar_shift() -> tuple[torch.Tensor, int, int]:
    return _randint(314, 0, 200, 3, 4), 2 * int(_randint(315, 1, 17)), int(_randint(316, -30, 31))


_add("3.2-drawn-scalar-offset", "3.2", 1, lambda ns: _p_peshift(ns, *_drawn_scalar_shift()),
     lambda: _e_peshift(*_drawn_scalar_shift()), _PESHIFT_HINT, atol=1e-5)
_add("3.2-drawn-offsets", "3.2", 2, lambda ns: _p_peshift(ns, *_drawn_peshift()), lambda: _e_peshift(*_drawn_peshift()),
     _PESHIFT_HINT, atol=1e-5)


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
    _add(_id, "3.3", _pts, partial(_p_alibi, n_heads=_args[0], seq_len=_args[1]), partial(_e_alibi, *_args), _ALIBI_HINT,
         rtol=1e-6, atol=1e-9)


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_alibi(power_of_2: bool) -> tuple[int, int]:
    """Drawn (n_heads, seq_len): n_heads a power of 2 (1 .. 64), or not one (3 .. 63)."""
    if power_of_2:
        return 2 ** int(_randint(323, 0, 7)), int(_randint(324, 2, 17))
    others = [n for n in range(3, 64) if n & (n - 1)]
    return others[int(_randint(321, 0, len(others)))], int(_randint(322, 2, 17))


_add("3.3-drawn-power-of-2-heads", "3.3", 1, lambda ns: _p_alibi(ns, *_drawn_alibi(True)),
     lambda: _e_alibi(*_drawn_alibi(True)), _ALIBI_HINT, rtol=1e-6, atol=1e-9)
_add("3.3-drawn-sizes", "3.3", 2, lambda ns: _p_alibi(ns, *_drawn_alibi(False)), lambda: _e_alibi(*_drawn_alibi(False)),
     _ALIBI_HINT, rtol=1e-6, atol=1e-9)


def _p_alibi_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_n_heads_0": _raises_value_error(lambda: ns.alibi_bias(0, 4)),
        "raised_for_seq_len_0": _raises_value_error(lambda: ns.alibi_bias(8, 0)),
    }


_add("3.3-rejects-bad-sizes", "3.3", 1, _p_alibi_rejects,
     lambda: {"raised_for_n_heads_0": np.array(True), "raised_for_seq_len_0": np.array(True)},
     "Raise ValueError naming the argument when n_heads or seq_len is smaller than 1.")


# ===========================================================================
# Chapter 4 - scaled dot-product attention
# ===========================================================================
def _attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                         bias: torch.Tensor | None = None) -> Arrays:
    """Closed form in float64: softmax over the allowed keys of ``q k^T / sqrt(d_k) + bias`` (allowed: the mask
    says True and the bias is not -inf); rows with no allowed key -> zeros. The output is cross-checked against
    torch's fused attention with the equivalent float mask on the rows that have an allowed key."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    allowed = torch.ones_like(scores, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask
    if bias is not None:
        bias = bias.double()
        allowed = allowed & (bias != float("-inf"))
        scores = scores + bias.masked_fill(bias == float("-inf"), 0.0)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    empty = ~allowed.any(dim=-1, keepdim=True)
    weights = torch.where(empty, torch.zeros_like(weights), weights)
    out = weights @ v
    float_mask = torch.zeros_like(scores) if bias is None else (bias + torch.zeros_like(scores))
    float_mask = float_mask.masked_fill(~(allowed | empty), float("-inf")).masked_fill(empty, 0.0)
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask)
    rows = (~empty).expand_as(out)
    assert torch.allclose(fused[rows], out[rows], atol=1e-10), "reference mismatch with torch"
    return {"out": out.numpy(), "weights": weights.numpy()}


def _attn_inputs(seed: int, lead: tuple[int, ...], q_len: int, k_len: int, d_k: int, d_v: int, mask_kind: str):
    q = _randn(seed, *lead, q_len, d_k)
    k = _randn(seed + 1, *lead, k_len, d_k)
    v = _randn(seed + 2, *lead, k_len, d_v)
    batch = lead[0]
    if mask_kind == "none":
        mask = None
    elif mask_kind == "padding":  # (batch, 1, ..., 1, k_len): sequence b has k_len - b valid keys
        lengths = torch.tensor([k_len - b for b in range(batch)])
        mask = (torch.arange(k_len)[None, :] < lengths[:, None]).view(batch, *([1] * (len(lead) - 1)), 1, k_len)
    elif mask_kind == "causal":
        mask = torch.ones(q_len, k_len, dtype=torch.bool).tril()
    elif mask_kind == "fully-masked-row":  # causal, and query row 1 of batch 0 may see nothing
        mask = torch.ones(q_len, k_len, dtype=torch.bool).tril().expand(*lead, q_len, k_len).clone()
        mask[(0,) * len(lead) + (1,)] = False
    else:  # pragma: no cover
        raise AssertionError(mask_kind)
    return q, k, v, mask


def _alibi_bias(n_heads: int, q_len: int, k_len: int) -> torch.Tensor:
    """ALiBi (Press et al., 2022): ``-slope_h * |i - j|``, slopes ``2^(-8 h / n_heads)``; shape (n_heads, q_len, k_len)."""
    slopes = 2.0 ** (-8.0 * torch.arange(1, n_heads + 1, dtype=torch.float32) / n_heads)
    distance = (torch.arange(k_len)[None, :] - torch.arange(q_len)[:, None]).abs().float()
    return -slopes[:, None, None] * distance


def _attn_bias(seed: int, lead: tuple[int, ...], q_len: int, k_len: int, bias_kind: str) -> torch.Tensor | None:
    if bias_kind == "none":
        return None
    if bias_kind == "alibi":  # (n_heads, q_len, k_len), broadcast over the batch
        return _alibi_bias(lead[-1], q_len, k_len)
    bias = _randn(seed + 3, *lead, q_len, k_len, scale=2.0)
    if bias_kind == "drawn":
        return bias
    if bias_kind == "inf-causal":  # the causal mask written into the bias: -inf above the diagonal
        return bias.masked_fill(~torch.ones(q_len, k_len, dtype=torch.bool).tril(), float("-inf"))
    if bias_kind == "inf-row":  # query row 2 of the first batch/head entry: every key -inf
        bias = bias.clone()
        bias[(0,) * len(lead) + (2,)] = float("-inf")
        bias[(0,) * len(lead) + (0, 0)] = float("-inf")  # and one single blocked entry elsewhere
        return bias
    raise AssertionError(bias_kind)  # pragma: no cover


def _call_attention(ns: ModuleType, q, k, v, mask, bias, what: str):
    if bias is None:
        result = ns.scaled_dot_product_attention(q, k, v, mask)
        call = "scaled_dot_product_attention(q, k, v, mask)"
    else:
        result = ns.scaled_dot_product_attention(q, k, v, mask, bias=bias)
        call = "scaled_dot_product_attention(q, k, v, mask, bias=bias)"
    out, weights = _pair(result, call + what, ("out", "weights"))
    return {"out": to_array(out, "out", kind="f"), "weights": to_array(weights, "weights", kind="f")}


def _p_attention(ns: ModuleType, args, bias_kind: str = "none") -> Arrays:
    q, k, v, mask = _attn_inputs(*args)
    seed, lead, q_len, k_len = args[:4]
    return _call_attention(ns, q, k, v, mask, _attn_bias(seed, lead, q_len, k_len, bias_kind), "")


def _e_attention(args, bias_kind: str = "none") -> Arrays:
    q, k, v, mask = _attn_inputs(*args)
    seed, lead, q_len, k_len = args[:4]
    return _attention_reference(q, k, v, mask, _attn_bias(seed, lead, q_len, k_len, bias_kind))


_ATTN_HINT = ("weights = softmax(q @ k.transpose(-2, -1) / sqrt(d_k)) over the last dim (keys); out = weights @ v. "
              "Blocked entries (mask False) must get weight exactly 0.")
_BIAS_HINT = ("The bias is ADDED to the scaled scores: softmax(q @ k^T / sqrt(d_k) + bias), not divided by sqrt(d_k) "
              "with them; it broadcasts like the mask (e.g. (n_heads, q_len, k_len) over the batch). ")
_INF_HINT = ("A -inf entry of the bias blocks that key exactly as mask False does: combine both into one 'allowed' tensor "
             "(mask & (bias != -inf)), fill the blocked scores with torch.finfo(scores.dtype).min and zero the blocked "
             "weights after the softmax, so that a row with no allowed key gives zeros, never NaN.")
for _id, _args, _bias, _pts, _hint in (
    ("4.1-no-mask-3d", (401, (2,), 4, 4, 8, 8, "none"), "none", 1, _ATTN_HINT),
    ("4.1-cross-lengths-heads", (402, (2, 2), 3, 5, 4, 6, "none"), "none", 1,
     _ATTN_HINT + " q_len (3) and k_len (5) differ here; d_v (6) differs from d_k (4)."),
    ("4.1-padding-mask", (403, (3, 2), 4, 5, 8, 8, "padding"), "none", 1,
     _ATTN_HINT + " The mask has shape (batch, 1, 1, k_len) and must broadcast over heads and queries; True = may attend."),
    ("4.1-causal-mask", (404, (2, 2), 5, 5, 4, 4, "causal"), "none", 1,
     _ATTN_HINT + " With a causal mask, row i has non-zero weights only for keys j <= i."),
    ("4.1-fully-masked-row", (405, (2, 2), 4, 4, 4, 4, "fully-masked-row"), "none", 1,
     "A query row whose keys are ALL masked must give zero weights and a zero output, never NaN: fill blocked scores with a large "
     "negative finite number (torch.finfo(scores.dtype).min) instead of -inf, then set the blocked weights to 0 after the softmax."),
    ("4.1-bias-alibi-heads", (416, (2, 4), 5, 6, 8, 8, "none"), "alibi", 2,
     _BIAS_HINT + "Here the bias is ALiBi's -slope_h * |i - j|, shape (n_heads, q_len, k_len)."),
    ("4.1-bias-and-padding-mask", (417, (3, 2), 4, 5, 8, 6, "padding"), "drawn", 2,
     _BIAS_HINT + "The boolean mask still blocks its keys (weight exactly 0) when a bias is given."),
    ("4.1-bias-inf-causal", (418, (2,), 5, 5, 8, 8, "none"), "inf-causal", 2, _INF_HINT),
    ("4.1-bias-inf-row-and-mask", (419, (2, 2), 4, 4, 8, 8, "causal"), "inf-row", 2, _INF_HINT),
):
    _add(_id, "4.1", _pts, partial(_p_attention, args=_args, bias_kind=_bias), partial(_e_attention, _args, _bias),
         _hint, atol=1e-5)


_HALF_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _p_attention_low(ns: ModuleType, args, dtype: str, bias_kind: str = "none") -> Arrays:
    q, k, v, mask = _attn_inputs(*args)
    seed, lead, q_len, k_len = args[:4]
    bias = _attn_bias(seed, lead, q_len, k_len, bias_kind)
    q, k, v = (t.to(_HALF_DTYPES[dtype]) for t in (q, k, v))
    bias = None if bias is None else bias.to(_HALF_DTYPES[dtype])
    return _call_attention(ns, q, k, v, mask, bias, f" with {dtype} inputs")


def _e_attention_low(args, dtype: str, bias_kind: str = "none") -> Arrays:
    """Torch's fused attention in float32 on the same (rounded) low-precision inputs; zeros on a fully masked row."""
    q, k, v, mask = _attn_inputs(*args)
    seed, lead, q_len, k_len = args[:4]
    bias = _attn_bias(seed, lead, q_len, k_len, bias_kind)
    q, k, v = (t.to(_HALF_DTYPES[dtype]).float() for t in (q, k, v))
    shape = (*q.shape[:-1], k.size(-2))
    full = torch.ones(shape, dtype=torch.bool) if mask is None else mask.expand(shape)
    add = torch.zeros(shape)
    if bias is not None:
        bias = bias.to(_HALF_DTYPES[dtype]).float().expand(shape)
        full = full & (bias != float("-inf"))
        add = bias.masked_fill(bias == float("-inf"), 0.0)
    empty = ~full.any(dim=-1, keepdim=True)
    safe = full | empty  # torch gives NaN on a row with no allowed key: let it see everything, then zero that row
    float_mask = add.masked_fill(~safe, float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + float_mask, dim=-1)
    out = torch.where(empty, torch.zeros_like(out), out)
    weights = torch.where(empty, torch.zeros_like(weights), weights)
    return {"out": _f64(out), "weights": _f64(weights)}


_LOW_HINT = ("In float16 the most negative number is about -65504: a fill value such as -1e9 cannot even be stored "
             "(masked_fill raises), and -inf gives NaN on a fully masked row. Use torch.finfo(scores.dtype).min, which "
             "is right for every dtype, and set the blocked weights to 0 after the softmax.")
for _id, _args, _dtype, _bias, _pts, _rtol, _atol in (
    ("4.1-float16-fully-masked-row", (4091, (2, 2), 4, 4, 8, 8, "fully-masked-row"), "float16", "none", 1, 1e-2, 3e-3),
    ("4.1-float16-bias-inf-row", (4101, (3, 2), 4, 5, 8, 8, "padding"), "float16", "inf-row", 2, 1e-2, 3e-3),
    ("4.1-bfloat16-alibi-causal", (4151, (2, 2), 5, 5, 4, 4, "causal"), "bfloat16", "alibi", 2, 3e-2, 2e-2),
):
    _add(_id, "4.1", _pts, partial(_p_attention_low, args=_args, dtype=_dtype, bias_kind=_bias),
         partial(_e_attention_low, _args, _dtype, _bias), _LOW_HINT + (" " + _INF_HINT if _bias == "inf-row" else ""),
         rtol=_rtol, atol=_atol)


def _p_attention_rejects(ns: ModuleType) -> Arrays:
    q, k, v = _randn(406, 2, 3, 4), _randn(407, 2, 5, 6), _randn(408, 2, 5, 6)
    return {"raised_for_mismatched_d_k": _raises_value_error(lambda: ns.scaled_dot_product_attention(q, k, v))}


_add("4.1-rejects-mismatched-d-k", "4.1", 1, _p_attention_rejects, lambda: {"raised_for_mismatched_d_k": np.array(True)},
     "Raise ValueError naming q and k when their last dimensions (d_k) differ.")


def _p_attention_rejects_bias(ns: ModuleType) -> Arrays:
    q, k, v = _randn(409, 2, 3, 4), _randn(410, 2, 5, 4), _randn(4111, 2, 5, 6)
    return {
        "raised_for_bool_bias": _raises_value_error(
            lambda: ns.scaled_dot_product_attention(q, k, v, None, bias=torch.ones(3, 5, dtype=torch.bool))),
        "raised_for_bias_of_wrong_shape": _raises_value_error(
            lambda: ns.scaled_dot_product_attention(q, k, v, None, bias=torch.zeros(5, 3))),
    }


_add("4.1-rejects-bad-bias", "4.1", 1, _p_attention_rejects_bias,
     lambda: {"raised_for_bool_bias": np.array(True), "raised_for_bias_of_wrong_shape": np.array(True)},
     "Raise ValueError naming `bias` when it is not a floating-point tensor (a boolean belongs in `mask`) or when it does "
     "not broadcast to the score shape (..., q_len, k_len): check the sizes from the right (each 1 or equal, no extra "
     "dims) and raise ValueError yourself - the RuntimeError of a failed addition is not a ValueError.")


def _self_attn_inputs(seed, batch, seq_len, d_model, d_k, d_v, causal):
    x = _randn(seed, batch, seq_len, d_model)
    w_q = _randn(seed + 1, d_model, d_k, scale=d_model**-0.5)
    w_k = _randn(seed + 2, d_model, d_k, scale=d_model**-0.5)
    w_v = _randn(seed + 3, d_model, d_v, scale=d_model**-0.5)
    mask = torch.ones(seq_len, seq_len, dtype=torch.bool).tril() if causal else None
    return x, w_q, w_k, w_v, mask


def _p_self_attention(ns: ModuleType, args) -> Arrays:
    x, w_q, w_k, w_v, mask = _self_attn_inputs(*args)
    out, weights = _pair(ns.self_attention(x, w_q, w_k, w_v, mask), "self_attention(x, w_q, w_k, w_v, mask)", ("out", "weights"))
    return {"out": to_array(out, "out", kind="f"), "weights": to_array(weights, "weights", kind="f")}


def _e_self_attention(args) -> Arrays:
    x, w_q, w_k, w_v, mask = _self_attn_inputs(*args)
    x = x.double()
    q, k, v = x @ w_q.double(), x @ w_k.double(), x @ w_v.double()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return {"out": _f64(out), "weights": _f64(torch.softmax(scores, dim=-1))}


_SELF_HINT = ("Project first: Q = x @ w_q, K = x @ w_k, V = x @ w_v (paper convention, x times W), then scaled dot-product "
              "attention with d_k = w_q.shape[1] (not d_model).")
for _id, _args in {
    "4.2-batch-2x5": (411, 2, 5, 8, 4, 4, False),
    "4.2-d-v-differs": (412, 1, 6, 12, 3, 5, False),
    "4.2-causal": (413, 2, 4, 8, 8, 6, True),
}.items():
    _add(_id, "4.2", 2, partial(_p_self_attention, args=_args), partial(_e_self_attention, _args), _SELF_HINT, atol=1e-5,
         standins={"scaled_dot_product_attention": _STANDIN_SCALED_DOT_PRODUCT_ATTENTION})




def _additive_inputs(seed, batch, q_len, k_len, d_q, d_k, d_v, d_att, mask_kind):
    q = _randn(seed, batch, q_len, d_q)
    k = _randn(seed + 1, batch, k_len, d_k)
    v = _randn(seed + 2, batch, k_len, d_v)
    w_q = _randn(seed + 3, d_q, d_att, scale=d_q**-0.5)
    w_k = _randn(seed + 4, d_k, d_att, scale=d_k**-0.5)
    w_score = _randn(seed + 5, d_att)
    if mask_kind == "none":
        mask = None
    elif mask_kind == "padding":  # (batch, 1, k_len): sequence b has k_len - b keys
        mask = (torch.arange(k_len)[None, :] < torch.tensor([k_len - b for b in range(batch)])[:, None])[:, None, :]
    elif mask_kind == "causal":
        mask = torch.ones(q_len, k_len, dtype=torch.bool).tril()
    elif mask_kind == "fully-masked-row":  # causal, and query 1 of batch 0 may see nothing
        mask = torch.ones(q_len, k_len, dtype=torch.bool).tril().expand(batch, q_len, k_len).clone()
        mask[0, 1] = False
    else:  # pragma: no cover
        raise AssertionError(mask_kind)
    return q, k, v, w_q, w_k, w_score, mask


def _p_additive(ns: ModuleType, args) -> Arrays:
    q, k, v, w_q, w_k, w_score, mask = _additive_inputs(*args)
    out, weights = _pair(ns.additive_attention(q, k, v, w_q, w_k, w_score, mask),
                         "additive_attention(q, k, v, w_q, w_k, w_score, mask)", ("out", "weights"))
    return {"out": to_array(out, "out", kind="f"), "weights": to_array(weights, "weights", kind="f")}


def _additive_reference(q, k, v, w_q, w_k, w_score, mask) -> Arrays:
    """einsum in float64: score[b, i, j] = sum_a w_score[a] tanh((q W_q)[b, i, a] + (k W_k)[b, j, a])."""
    q, k, v, w_q, w_k, w_score = (t.double() for t in (q, k, v, w_q, w_k, w_score))
    hidden = torch.tanh(torch.einsum("bid,da->bia", q, w_q)[:, :, None, :] + torch.einsum("bjd,da->bja", k, w_k)[:, None, :, :])
    scores = torch.einsum("bija,a->bij", hidden, w_score)
    allowed = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask.expand_as(scores)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    empty = ~allowed.any(-1, keepdim=True)
    weights = torch.where(empty, torch.zeros_like(weights), weights)
    return {"out": _f64(torch.einsum("bij,bjd->bid", weights, v)), "weights": _f64(weights)}


def _e_additive(args) -> Arrays:
    return _additive_reference(*_additive_inputs(*args))


_ADD_HINT = ("score[b, i, j] = w_score . tanh(q[b, i] @ w_q + k[b, j] @ w_k): broadcast the projected queries "
             "(batch, q_len, 1, d_att) against the projected keys (batch, 1, k_len, d_att), take tanh, then the dot "
             "product with w_score over d_att. No 1/sqrt scale; softmax over the keys (last dim); out = weights @ v.")
for _id, _args, _pts, _extra in (
    ("4.3-no-mask", (431, 2, 3, 5, 6, 6, 4, 8, "none"), 2, ""),
    ("4.3-cross-widths-padding", (432, 3, 4, 6, 5, 7, 3, 6, "padding"), 2,
     " Here d_q (5) and d_k (7) differ: additive attention needs no common width, each side has its own matrix."),
    ("4.3-causal-self", (433, 1, 5, 5, 4, 4, 4, 10, "causal"), 2, " With a causal mask row i has weights only for keys j <= i."),
    ("4.3-fully-masked-row", (434, 2, 4, 4, 6, 6, 5, 8, "fully-masked-row"), 2,
     " A query row with no allowed key must give zero weights and a zero output, never NaN."),
):
    _add(_id, "4.3", _pts, partial(_p_additive, args=_args), partial(_e_additive, _args), _ADD_HINT + _extra, atol=1e-5)


def _p_additive_rejects(ns: ModuleType) -> Arrays:
    q, k, v, w_q, w_k, w_score, _ = _additive_inputs(435, 1, 2, 3, 4, 6, 5, 8, "none")
    return {
        "raised_for_w_q_not_matching_q": _raises_value_error(lambda: ns.additive_attention(q, k, v, w_k, w_k, w_score)),
        "raised_for_attention_widths_differ": _raises_value_error(
            lambda: ns.additive_attention(q, k, v, w_q, w_k[:, :5], w_score)),
        "raised_for_w_score_width": _raises_value_error(lambda: ns.additive_attention(q, k, v, w_q, w_k, w_score[:5])),
    }


_add("4.3-rejects-bad-widths", "4.3", 1, _p_additive_rejects,
     lambda: {k: np.array(True) for k in ("raised_for_w_q_not_matching_q", "raised_for_attention_widths_differ",
                                           "raised_for_w_score_width")},
     "Raise ValueError naming the argument when w_q's rows do not match q's last dim, w_k's rows k's, or when w_q, w_k and "
     "w_score do not share the attention width d_att.")


def _score_std_inputs(kind: str, seed: int, shape: tuple[int, ...]):
    if kind == "unit":
        return torch.ones(shape), torch.ones(shape)
    if kind == "constant":
        return torch.full(shape, 0.5), torch.full(shape, 3.0)
    return _randn(seed, *shape).abs() + 0.1, _randn(seed + 1, *shape).abs() + 0.1


def _p_score_std(ns: ModuleType, kind, seed, shape) -> Arrays:
    q_std, k_std = _score_std_inputs(kind, seed, shape)
    std, scale = _pair(ns.dot_product_score_std(q_std, k_std), "dot_product_score_std(q_std, k_std)", ("std", "scale"))
    return {"std": to_array(std, "std", kind="f"), "scale": to_array(scale, "scale", kind="f")}


def _e_score_std(kind, seed, shape) -> Arrays:
    """Var(sum_i q_i k_i) = sum_i Var(q_i) Var(k_i) for independent zero-mean components (footnote 4, unequal variances)."""
    q_std, k_std = (t.double().numpy() for t in _score_std_inputs(kind, seed, shape))
    std = np.array(np.sqrt(np.sum(q_std**2 * k_std**2, axis=-1)), dtype=np.float64)
    return {"std": std, "scale": np.array(1.0 / std, dtype=np.float64)}


_STD_HINT = ("For independent zero-mean components, Var(q_i k_i) = Var(q_i) Var(k_i) = q_std_i^2 k_std_i^2, and the variances of "
             "the d_k terms add: std(q . k) = sqrt(sum_i q_std_i^2 k_std_i^2), summed over the last dim only; scale = 1 / std. "
             "With unit variances this is sqrt(d_k) and the paper's 1/sqrt(d_k).")
for _id, _kind, _seed, _shape, _pts in (
    ("4.4-unit-variance-d-k-64", "unit", 0, (64,), 1),
    ("4.4-unit-variance-per-head", "unit", 0, (8, 16), 1),
    ("4.4-constant-stds", "constant", 0, (10,), 1),
    ("4.4-drawn-stds", "drawn", 441, (32,), 2),
    ("4.4-drawn-stds-per-head", "drawn", 443, (2, 4, 8), 2),
):
    _add(_id, "4.4", _pts, partial(_p_score_std, kind=_kind, seed=_seed, shape=_shape),
         partial(_e_score_std, _kind, _seed, _shape), _STD_HINT, atol=1e-5)


def _p_score_std_rejects(ns: ModuleType) -> Arrays:
    q_std, k_std = _score_std_inputs("unit", 0, (4,))
    return {
        "raised_for_shapes_differ": _raises_value_error(lambda: ns.dot_product_score_std(q_std, torch.ones(5))),
        "raised_for_negative_std": _raises_value_error(lambda: ns.dot_product_score_std(q_std, -k_std)),
    }


_add("4.4-rejects-bad-stds", "4.4", 1, _p_score_std_rejects,
     lambda: {"raised_for_shapes_differ": np.array(True), "raised_for_negative_std": np.array(True)},
     "Raise ValueError naming q_std and k_std when their shapes differ, or when a standard deviation is negative.")


# ===========================================================================
# Chapter 5 - multi-head attention
# ===========================================================================
def _p_split(ns: ModuleType, args) -> Arrays:
    seed, shape, n_heads = args
    x = _randn(seed, *shape)
    return {"heads": to_array(ns.split_heads(x, n_heads), f"split_heads(x of shape {tuple(shape)}, {n_heads})", kind="f")}


def _e_split(seed, shape, n_heads) -> Arrays:
    x = _randn(seed, *shape).double().numpy()
    *lead, seq_len, d_model = shape
    heads = x.reshape(*lead, seq_len, n_heads, d_model // n_heads)
    return {"heads": np.ascontiguousarray(np.swapaxes(heads, -3, -2))}


_SPLIT_HINT = ("Reshape the last dim to (n_heads, d_k) and THEN swap the sequence and head axes (transpose(-3, -2)). "
               "Reshaping directly to (..., n_heads, seq_len, d_k) gives the right shape but mixes positions into heads. "
               "Use negative dims and x.shape[:-2] so that any number of leading dims works.")
for _id, _args, _pts in (
    ("5.1-batch-d-8-heads-2", (501, (2, 5, 8), 2), 1),
    ("5.1-batch-d-12-heads-3", (502, (1, 3, 12), 3), 1),
    ("5.1-unbatched-2d", (503, (4, 6), 3), 2),
    ("5.1-beams-4d", (504, (2, 3, 4, 8), 4), 2),
    ("5.1-d-k-1-one-head-5d", (5041, (2, 1, 2, 3, 4), 1), 1),
):
    _add(_id, "5.1", _pts, partial(_p_split, args=_args), partial(_e_split, *_args), _SPLIT_HINT)


def _p_split_rejects(ns: ModuleType) -> Arrays:
    return _rejections({
        "indivisible_d_model": (lambda: ns.split_heads(_randn(505, 2, 3, 10), 4), ("10", "4")),  # both numbers
        "1d_input": (lambda: ns.split_heads(_randn(506, 8), 2), ()),
    })


_add("5.1-rejects-bad-input", "5.1", 1, _p_split_rejects,
     lambda: {"raised_for_indivisible_d_model": np.array(True), "raised_for_1d_input": np.array(True),
              "message_names_10_and_4": np.array(True)},
     "Raise ValueError when x has fewer than 2 dims (it needs (..., seq_len, d_model)) or when d_model is not divisible "
     "by n_heads (name both numbers).")


def _p_merge(ns: ModuleType, args) -> Arrays:
    seed, shape = args
    x = _randn(seed, *shape)
    return {"merged": to_array(ns.merge_heads(x), f"merge_heads(x of shape {tuple(shape)})", kind="f")}


def _e_merge(seed, shape) -> Arrays:
    x = _randn(seed, *shape).double().numpy()
    *lead, n_heads, seq_len, d_k = shape
    return {"merged": np.swapaxes(x, -3, -2).reshape(*lead, seq_len, n_heads * d_k)}


_MERGE_HINT = ("Undo split_heads: swap the head and sequence axes back (transpose(-3, -2)) to (..., seq_len, n_heads, d_k), "
               "then reshape to (..., seq_len, n_heads * d_k) (.reshape, or .contiguous() before .view). Head h must fill "
               "columns h*d_k ... (h+1)*d_k - 1, for any number of leading dims.")
for _id, _args, _pts in (
    ("5.2-batch-heads-2-d-k-4", (511, (2, 2, 5, 4)), 1),
    ("5.2-batch-heads-3-d-k-2", (512, (1, 3, 4, 2)), 1),
    ("5.2-unbatched-3d", (513, (3, 4, 5)), 2),
    ("5.2-beams-5d", (514, (2, 3, 4, 2, 3)), 2),
):
    _add(_id, "5.2", _pts, partial(_p_merge, args=_args), partial(_e_merge, *_args), _MERGE_HINT)


def _p_merge_rejects(ns: ModuleType) -> Arrays:
    return {"raised_for_2d_input": _raises_value_error(lambda: ns.merge_heads(_randn(515, 3, 4)))}


_add("5.2-rejects-2d-input", "5.2", 1, _p_merge_rejects, lambda: {"raised_for_2d_input": np.array(True)},
     "Raise ValueError when x has fewer than 3 dims (it needs (..., n_heads, seq_len, d_k)).")


def _mha_inputs(seed, batch, q_len, k_len, d_model, n_heads, mask_kind):
    query = _randn(seed, batch, q_len, d_model)
    key = query if mask_kind == "causal-self" else _randn(seed + 1, batch, k_len, d_model)
    value = query if mask_kind == "causal-self" else _randn(seed + 2, batch, k_len, d_model)
    ws = [_randn(seed + 3 + i, d_model, d_model, scale=d_model**-0.5) for i in range(4)]
    if mask_kind == "padding":
        lengths = torch.tensor([max(1, k_len - 2 * b) for b in range(batch)])
        mask = (torch.arange(k_len)[None, :] < lengths[:, None])[:, None, None, :]
    elif mask_kind == "causal-self":
        mask = torch.ones(q_len, q_len, dtype=torch.bool).tril()[None, None]
    else:
        mask = None
    return query, key, value, ws, n_heads, mask


def _interleave_qkv(w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The fused (d_model, 3 d_model) weight in the per-head layout: columns ordered (head, [q, k, v], d_k)."""
    d_model = w_q.size(0)
    d_k = d_model // n_heads
    per_head = torch.stack([w.reshape(d_model, n_heads, d_k) for w in (w_q, w_k, w_v)], dim=2)  # (d_model, h, 3, d_k)
    return per_head.reshape(d_model, 3 * d_model)


def _p_mha(ns: ModuleType, args, dtype: str = "float32") -> Arrays:
    query, key, value, (w_q, w_k, w_v, w_o), n_heads, mask = _mha_inputs(*args)
    w_qkv = _interleave_qkv(w_q, w_k, w_v, n_heads)
    if dtype == "float16":
        query, key, value, w_qkv, w_o = (t.half() for t in (query, key, value, w_qkv, w_o))
    out, weights = _pair(
        ns.multi_head_attention(query, key, value, w_qkv, w_o, n_heads, mask),
        "multi_head_attention(query, key, value, w_qkv, w_o, n_heads, mask)" + (" with float16 inputs" if dtype == "float16" else ""),
        ("out", "weights"),
    )
    return {"out": to_array(out, "out", kind="f"), "weights": to_array(weights, "weights", kind="f")}


def _e_mha(args, dtype: str = "float32") -> Arrays:
    """torch.nn.MultiheadAttention with the weights copied (it computes x @ W.T, so W is transposed). The fused weight is
    undone here with numpy (columns of head h: q at 3h*d_k, k at (3h+1)*d_k, v at (3h+2)*d_k); float16 cases run in
    float32 on the float16-rounded inputs."""
    query, key, value, (w_q, w_k, w_v, w_o), n_heads, mask = _mha_inputs(*args)
    d_model = query.size(-1)
    d_k = d_model // n_heads
    fused = _interleave_qkv(w_q, w_k, w_v, n_heads)
    work = torch.float64 if dtype == "float32" else torch.float32
    if dtype == "float16":
        query, key, value, fused, w_o = (t.half() for t in (query, key, value, fused, w_o))
    cols = fused.double().numpy().reshape(d_model, n_heads, 3, d_k)
    w_sep = [torch.from_numpy(np.ascontiguousarray(cols[:, :, j, :].reshape(d_model, d_model))).to(work) for j in range(3)]
    mha = nn.MultiheadAttention(d_model, n_heads, bias=False, batch_first=True, dtype=work)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([w.T for w in w_sep], dim=0))
        mha.out_proj.weight.copy_(w_o.T.to(work))
    kwargs = {}
    if mask is not None and mask.size(0) == 1:  # causal (1, 1, L, L): torch wants True = BLOCKED
        kwargs["attn_mask"] = ~mask[0, 0]
    elif mask is not None:  # padding (batch, 1, 1, k_len)
        kwargs["key_padding_mask"] = ~mask[:, 0, 0, :]
    mha.eval()
    with torch.no_grad():
        out, weights = mha(query.to(work), key.to(work), value.to(work), need_weights=True, average_attn_weights=False, **kwargs)
    return {"out": _f64(out), "weights": _f64(weights)}


_MHA_HINT = ("w_qkv holds the three projections side by side PER HEAD: viewed as (d_model, n_heads, 3, d_k), [:, h, 0] is head h's "
             "W^Q_h, [:, h, 1] its W^K_h, [:, h, 2] its W^V_h (not [W^Q | W^K | W^V] as three blocks of d_model columns). "
             "Project (query with W^Q, key with W^K, value with W^V), split into heads, attention per head with scale "
             "1/sqrt(d_k), merge, multiply by w_o. weights has shape (batch, n_heads, q_len, k_len).")
for _id, _args in {
    "5.3-self-4-heads": (521, 2, 5, 5, 16, 4, "none"),
    "5.3-cross-padding-mask": (522, 3, 3, 6, 8, 2, "padding"),
    "5.3-causal-self-3-heads": (523, 1, 4, 4, 12, 3, "causal-self"),
    "5.3-one-head": (524, 1, 3, 5, 8, 1, "none"),
}.items():
    _add(_id, "5.3", 2, partial(_p_mha, args=_args), partial(_e_mha, _args), _MHA_HINT, atol=1e-5,
         standins={"split_heads": _STANDIN_SPLIT_HEADS, "merge_heads": _STANDIN_MERGE_HEADS})

_add("5.3-float16-padding-mask", "5.3", 1, partial(_p_mha, args=(5251, 3, 3, 6, 8, 2, "padding"), dtype="float16"),
     partial(_e_mha, (5251, 3, 3, 6, 8, 2, "padding"), "float16"),
     _MHA_HINT + " This case runs in float16: if you mask the scores yourself, fill with torch.finfo(scores.dtype).min "
                 "(a fill value such as -1e9 overflows float16).", rtol=1e-2, atol=5e-3,
     standins={"split_heads": _STANDIN_SPLIT_HEADS, "merge_heads": _STANDIN_MERGE_HEADS})


def _ablation_inputs(seed, batch, seq_len, d_model, n_heads, mask_kind):
    x = _randn(seed, batch, seq_len, d_model)
    ws = [_randn(seed + 1 + i, d_model, d_model, scale=d_model**-0.5) for i in range(4)]
    if mask_kind == "causal":
        mask = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    elif mask_kind == "padding":  # (batch, 1, 1, seq_len): sequence b has seq_len - b real tokens
        mask = (torch.arange(seq_len)[None, :] < torch.tensor([seq_len - b for b in range(batch)])[:, None])[:, None, None, :]
    else:
        mask = None
    return x, ws, n_heads, mask


def _p_ablation(ns: ModuleType, args) -> Arrays:
    x, (w_q, w_k, w_v, w_o), n_heads, mask = _ablation_inputs(*args)
    effect = ns.head_ablation_effect(x, w_q, w_k, w_v, w_o, n_heads, mask)
    return {"effect": to_array(effect, "head_ablation_effect(x, w_q, w_k, w_v, w_o, n_heads, mask)", kind="f")}


def _e_ablation(args) -> Arrays:
    """Run the layer n_heads + 1 times in float64 (torch's fused attention per head): once whole, once per head with that
    head's output replaced by zeros before W^O; mean over (batch, position) of the L2 norm of the difference."""
    x, ws, n_heads, mask = _ablation_inputs(*args)
    x = x.double()
    w_q, w_k, w_v, w_o = (w.double() for w in ws)
    d_model = x.size(-1)
    d_k = d_model // n_heads
    heads = []
    for h in range(n_heads):
        cols = slice(h * d_k, (h + 1) * d_k)
        heads.append(F.scaled_dot_product_attention((x @ w_q)[..., cols][:, None], (x @ w_k)[..., cols][:, None],
                                                    (x @ w_v)[..., cols][:, None],
                                                    attn_mask=None if mask is None else mask.reshape(-1, 1, *mask.shape[-2:]))[:, 0])
    full = torch.cat(heads, dim=-1) @ w_o
    effect = []
    for h in range(n_heads):
        ablated = torch.cat([torch.zeros_like(t) if i == h else t for i, t in enumerate(heads)], dim=-1) @ w_o
        effect.append(torch.linalg.vector_norm(full - ablated, dim=-1).mean())
    return {"effect": _f64(torch.stack(effect))}


_ABL_HINT = ("For each head h: the full output minus the output computed with head h's attention output (batch, seq_len, d_k) "
             "set to zero BEFORE the concatenation and w_o; take the L2 norm over d_model at every (batch, position) and "
             "average those norms. Zero the head's output, not its weights or its query. The attention itself is the "
             "chapter's: scores scaled by 1/sqrt(d_k) before the softmax; the averaged norm is returned as it is.")
for _id, _args, _pts in (
    ("5.4-four-heads", (541, 2, 5, 16, 4, "none"), 2),
    ("5.4-causal-two-heads", (542, 1, 6, 8, 2, "causal"), 2),
    ("5.4-padding-three-heads", (543, 3, 4, 12, 3, "padding"), 2),
    ("5.4-one-head", (544, 2, 3, 6, 1, "none"), 1),
):
    _add(_id, "5.4", _pts, partial(_p_ablation, args=_args), partial(_e_ablation, _args), _ABL_HINT, atol=1e-5)


def _p_ablation_rejects(ns: ModuleType) -> Arrays:
    x, (w_q, w_k, w_v, w_o), _, _ = _ablation_inputs(545, 1, 3, 10, 2, "none")
    return {"raised_for_indivisible_d_model": _raises_value_error(
        lambda: ns.head_ablation_effect(x, w_q, w_k, w_v, w_o, 4))}


_add("5.4-rejects-indivisible-d-model", "5.4", 1, _p_ablation_rejects,
     lambda: {"raised_for_indivisible_d_model": np.array(True)},
     "Raise ValueError naming d_model and n_heads when d_model is not divisible by n_heads.")


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
    _add(_id, "6.1", _pts, partial(_p_ffn, args=_args), partial(_e_ffn, _args), _FFN_HINT, atol=1e-5)


def _p_ffn_rejects(ns: ModuleType) -> Arrays:
    x, w1, b1, w2, b2 = _ffn_inputs(604, 1, 3, 8, 32)
    return {
        "raised_for_paper_layout_w1": _raises_value_error(lambda: ns.position_wise_ffn(x, w1.T, b1, w2, b2)),
        "raised_for_paper_layout_w2": _raises_value_error(lambda: ns.position_wise_ffn(x, w1, b1, w2.T, b2)),
    }


_add("6.1-rejects-transposed-weights", "6.1", 1, _p_ffn_rejects,
     lambda: {"raised_for_paper_layout_w1": np.array(True), "raised_for_paper_layout_w2": np.array(True)},
     "Raise ValueError naming w1 (or w2) when its shape is not (d_ff, d_model) (or (d_model, d_ff)), with d_model = x.shape[-1] "
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
    _add(_id, "6.2", _pts, partial(_p_gelu, which=_which), partial(_e_gelu, _which), _hint, rtol=_rtol, atol=_atol)


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
    _add(_id, "6.3", _pts, partial(_p_swiglu, args=_args), partial(_e_swiglu, _args), _SWIGLU_HINT, atol=1e-5)


def _p_swiglu_rejects(ns: ModuleType) -> Arrays:
    x, w_gate, w_up, w_down = _swiglu_inputs(634, 1, 2, 8, 24)
    return {
        "raised_for_gate_and_up_differ": _raises_value_error(lambda: ns.swiglu_ffn(x, w_gate, w_up[:, :20], w_down)),
        "raised_for_w_down_shape": _raises_value_error(lambda: ns.swiglu_ffn(x, w_gate, w_up, w_down.T)),
    }


_add("6.3-rejects-bad-shapes", "6.3", 1, _p_swiglu_rejects,
     lambda: {"raised_for_gate_and_up_differ": np.array(True), "raised_for_w_down_shape": np.array(True)},
     "Raise ValueError naming the argument when w_gate and w_up are not both (d_model, d_hidden) or w_down is not (d_hidden, d_model).")


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
_add("6.4-hand-table", "6.4", 2, partial(_p_swiglu_width, rows=_SWIGLU_WIDTH_ROWS), _e_swiglu_width_table, _WIDTH_HINT,
     rtol=0.0, atol=1e-6)
_add("6.4-drawn-sizes", "6.4", 2, partial(_p_swiglu_width, rows=_swiglu_width_drawn_rows), _e_swiglu_width_drawn, _WIDTH_HINT,
     rtol=0.0, atol=1e-6)


def _p_swiglu_width_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_zero_d_ff": _raises_value_error(lambda: ns.swiglu_hidden_width(512, 0, 8)),
        "raised_for_zero_multiple_of": _raises_value_error(lambda: ns.swiglu_hidden_width(512, 2048, 0)),
    }


_add("6.4-rejects-bad-sizes", "6.4", 1, _p_swiglu_width_rejects,
     lambda: {"raised_for_zero_d_ff": np.array(True), "raised_for_zero_multiple_of": np.array(True)},
     "Raise ValueError naming the argument when d_model, d_ff or multiple_of is smaller than 1.")


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
    _add(_id, "7.1", _points, partial(_p_ln, args=_args), partial(_e_ln, _args), _hint,
         atol=1e-4 if "large-mean" in _id else 1e-5, rtol=1e-4)


def _p_ln_rejects(ns: ModuleType) -> Arrays:
    x = torch.ones(2, 3, 6) + torch.arange(6.0)
    return {
        "raised_for_gamma_of_5_features": _raises_value_error(lambda: ns.layer_norm(x, torch.ones(5), torch.zeros(5))),
        "raised_for_gamma_3x5": _raises_value_error(lambda: ns.layer_norm(x, torch.ones(3, 5), torch.zeros(3, 5))),
        "raised_for_beta_shape": _raises_value_error(lambda: ns.layer_norm(x, torch.ones(6), torch.zeros(3, 6))),
    }


_add("7.1-rejects-shapes", "7.1", 1, _p_ln_rejects,
     lambda: {"raised_for_gamma_of_5_features": np.array(True), "raised_for_gamma_3x5": np.array(True),
              "raised_for_beta_shape": np.array(True)},
     "Raise ValueError naming gamma when gamma.shape is not the trailing shape of x (x.shape[-gamma.dim():]), and naming "
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
        _add(f"{_ex}-{_suffix}", _ex, _points, partial(_p_stack, args=_args, norm_first=_nf), partial(_e_stack, _args, _nf),
             _hint, atol=1e-5, rtol=1e-4)


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
         lambda: {"raised_for_2_sublayers_1_norm": np.array(True)},
         "Raise ValueError naming norms when len(norms) != len(sublayers): zip() would silently drop a sublayer.")


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
    _add(_id, "7.4", _points, partial(_p_rms, args=_args), partial(_e_rms, _args), _hint, atol=1e-5, rtol=1e-4)


def _p_rms_rejects(ns: ModuleType) -> Arrays:
    x = torch.ones(2, 3, 6) + torch.arange(6.0)
    return {"raised_for_gain_of_5": _raises_value_error(lambda: ns.rms_norm(x, torch.ones(5), 1e-6)),
            "raised_for_gain_3x6": _raises_value_error(lambda: ns.rms_norm(x, torch.ones(3, 6), 1e-6))}


_add("7.4-rejects-gain-shape", "7.4", 1, _p_rms_rejects,
     lambda: {"raised_for_gain_of_5": np.array(True), "raised_for_gain_3x6": np.array(True)},
     "Raise ValueError naming gain when gain.shape != (x.shape[-1],).")


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
             partial(_e_depth, _args, _nf), _DEPTH_HINT, rtol=5e-4, atol=1e-5)


def _p_depth_rejects(ns: ModuleType) -> Arrays:
    x = torch.ones(2, 3, 4) + torch.arange(4.0)
    return {"raised_for_w_of_other_shape": _raises_value_error(
        lambda: ns.gradient_norms_by_depth(x, [torch.tanh], torch.ones(1, 3, 4), True))}


_add("7.5-rejects-w-shape", "7.5", 1, _p_depth_rejects, lambda: {"raised_for_w_of_other_shape": np.array(True)},
     "Raise ValueError naming w when w.shape != x.shape: broadcasting w would silently change the loss.")

# ===========================================================================
# Chapter 8 - masks
# ===========================================================================
def _pad_reference(lengths: np.ndarray, seq_len: int) -> np.ndarray:
    """Enumeration: entry [b, 0, 0, j] is True iff j < lengths[b]."""
    out = np.zeros((len(lengths), 1, 1, seq_len), dtype=bool)
    for b, n in enumerate(lengths):
        for j in range(seq_len):
            out[b, 0, 0, j] = j < n
    return out


_PAD_LENGTHS = {
    "8.1-lengths-3-5-2": ([3, 5, 2], 5),
    "8.1-longer-than-every-sentence": ([1, 4], 7),
    "8.1-empty-and-full": ([0, 3, 6, 1], 6),
}


def _p_padding(ns: ModuleType, lengths, seq_len) -> Arrays:
    mask = ns.padding_mask(torch.as_tensor(lengths), seq_len)
    return {"mask": to_array(mask, "padding_mask(lengths, seq_len)", kind="b")}


_PAD_HINT = ("Entry [b, 0, 0, j] is True (may attend: a real token) iff j < lengths[b] - compare torch.arange(seq_len) with "
             "lengths[:, None] - and the result has shape (batch, 1, 1, seq_len), dtype torch.bool.")
for _id, (_lengths, _seq_len) in _PAD_LENGTHS.items():
    _add(_id, "8.1", 1, partial(_p_padding, lengths=_lengths, seq_len=_seq_len),
         partial(lambda n, s: {"mask": _pad_reference(np.array(n), s)}, _lengths, _seq_len), _PAD_HINT)


def _p_padding_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_2d_lengths": _raises_value_error(lambda: ns.padding_mask(torch.tensor([[3, 2]]), 4)),
        "raised_for_length_above_seq_len": _raises_value_error(lambda: ns.padding_mask(torch.tensor([3, 5]), 4)),
        "raised_for_negative_length": _raises_value_error(lambda: ns.padding_mask(torch.tensor([3, -1]), 4)),
    }


_add("8.1-rejects-bad-lengths", "8.1", 1, _p_padding_rejects,
     lambda: {"raised_for_2d_lengths": np.array(True), "raised_for_length_above_seq_len": np.array(True),
              "raised_for_negative_length": np.array(True)},
     "Raise ValueError naming lengths when it is not 1-D (batch,) or when a length is < 0 or > seq_len.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_lengths() -> tuple[torch.Tensor, int]:
    return _randint(811, 0, 10, 6), 9


def _p_padding_drawn(ns: ModuleType) -> Arrays:
    lengths, seq_len = _drawn_lengths()
    return {"mask": to_array(ns.padding_mask(lengths, seq_len), "padding_mask(lengths, seq_len)", kind="b")}


_add("8.1-drawn-lengths", "8.1", 2, _p_padding_drawn, lambda: {"mask": _pad_reference(_drawn_lengths()[0].numpy(), 9)}, _PAD_HINT)


def _causal_reference(q_len: int, k_len: int) -> np.ndarray:
    """Enumeration: the queries are the LAST q_len of k_len positions; query i is position k_len - q_len + i."""
    out = np.zeros((1, 1, q_len, k_len), dtype=bool)
    for i in range(q_len):
        for j in range(k_len):
            out[0, 0, i, j] = j <= k_len - q_len + i
    return out


def _p_causal(ns: ModuleType, q_len, k_len) -> Arrays:
    mask = ns.causal_mask(q_len) if k_len is None else ns.causal_mask(q_len, k_len)
    return {"mask": to_array(mask, f"causal_mask({q_len}" + ("" if k_len is None else f", {k_len}") + ")", kind="b")}


_CAUSAL_HINT = ("The queries are the LAST q_len positions of the k_len keys: query i sits at position k_len - q_len + i, so "
                "entry [0, 0, i, j] is True iff j <= i + (k_len - q_len) (with k_len = None: k_len = q_len, the lower "
                "triangle). torch.tril has a `diagonal` argument. Shape (1, 1, q_len, k_len), dtype torch.bool.")
for _q, _k, _points in ((1, None, 1), (4, None, 1), (1, 5, 2), (3, 7, 3), (2, 2, 1)):
    _add(f"8.2-q-{_q}-k-{'none' if _k is None else _k}", "8.2", _points, partial(_p_causal, q_len=_q, k_len=_k),
         partial(lambda q, k: {"mask": _causal_reference(q, q if k is None else k)}, _q, _k), _CAUSAL_HINT)


def _p_causal_rejects(ns: ModuleType) -> Arrays:
    return {"raised_for_q_len_0": _raises_value_error(lambda: ns.causal_mask(0)),
            "raised_for_k_len_below_q_len": _raises_value_error(lambda: ns.causal_mask(4, 3))}


_add("8.2-rejects-bad-sizes", "8.2", 1, _p_causal_rejects,
     lambda: {"raised_for_q_len_0": np.array(True), "raised_for_k_len_below_q_len": np.array(True)},
     "Raise ValueError naming q_len when it is smaller than 1, and naming k_len when k_len < q_len.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_q_k() -> tuple[int, int]:
    q_len = int(_randint(821, 2, 12))
    return q_len, q_len + int(_randint(822, 1, 10))


_add("8.2-drawn-q-k", "8.2", 2, lambda ns: _p_causal(ns, *_drawn_q_k()),
     lambda: {"mask": _causal_reference(*_drawn_q_k())}, _CAUSAL_HINT)
_add("8.2-drawn-square", "8.2", 1, lambda ns: _p_causal(ns, _drawn_q_k()[1], None),
     lambda: {"mask": _causal_reference(_drawn_q_k()[1], _drawn_q_k()[1])}, _CAUSAL_HINT)


def _dec_reference(tgt: np.ndarray, pad_id: int, q_len: int | None) -> np.ndarray:
    """Enumeration: [b, 0, i, j] = (tgt[b, j] != pad_id) and j <= L - q_len + i."""
    batch, length = tgt.shape
    q = length if q_len is None else q_len
    out = np.zeros((batch, 1, q, length), dtype=bool)
    for b in range(batch):
        for i in range(q):
            for j in range(length):
                out[b, 0, i, j] = bool(tgt[b, j] != pad_id) and j <= length - q + i
    return out


_DEC_TOKENS = {
    "8.3-pad-0": ([[1, 5, 6, 2, 0, 0], [1, 7, 2, 0, 0, 0]], 0, None, 1),
    "8.3-batch-3-pad-id-5": ([[1, 6, 7, 8, 2, 5, 5], [1, 2, 5, 5, 5, 5, 5], [1, 9, 9, 9, 9, 9, 2]], 5, None, 1),
    "8.3-last-query-only": ([[1, 5, 6, 2, 0, 0], [1, 7, 8, 9, 4, 3]], 0, 1, 2),
    "8.3-last-3-queries-pad-id-9": ([[1, 4, 4, 2, 9, 9, 9], [9, 9, 1, 6, 6, 6, 2]], 9, 3, 2),
}


def _p_dec_mask(ns: ModuleType, tgt, pad_id, q_len) -> Arrays:
    t = torch.as_tensor(tgt)
    mask = ns.decoder_self_attention_mask(t, pad_id) if q_len is None else ns.decoder_self_attention_mask(t, pad_id, q_len)
    return {"mask": to_array(mask, "decoder_self_attention_mask(tgt, pad_id, q_len)", kind="b")}


_DEC_HINT = ("Combine both rules with a logical AND: key j is a real token (tgt[b, j] != pad_id, over ALL tgt_len keys) and "
             "j <= i + (tgt_len - q_len) - the queries are the last q_len positions, as causal_mask(q_len, tgt_len) says. "
             "Shape (batch, 1, q_len, tgt_len).")
for _id, (_tgt, _pad, _q, _points) in _DEC_TOKENS.items():
    _add(_id, "8.3", _points, partial(_p_dec_mask, tgt=_tgt, pad_id=_pad, q_len=_q),
         partial(lambda t, p, q: {"mask": _dec_reference(np.array(t), p, q)}, _tgt, _pad, _q), _DEC_HINT,
         standins={"causal_mask": _STANDIN_CAUSAL_MASK})


def _p_dec_mask_rejects(ns: ModuleType) -> Arrays:
    tgt = torch.tensor([[1, 4, 2, 0]])
    return {"raised_for_1d_tgt": _raises_value_error(lambda: ns.decoder_self_attention_mask(torch.tensor([1, 4, 2]), 0)),
            "raised_for_q_len_above_tgt_len": _raises_value_error(lambda: ns.decoder_self_attention_mask(tgt, 0, 5))}


_add("8.3-rejects-bad-shapes", "8.3", 1, _p_dec_mask_rejects,
     lambda: {"raised_for_1d_tgt": np.array(True), "raised_for_q_len_above_tgt_len": np.array(True)},
     "Raise ValueError naming tgt when it is not 2-D, and naming q_len when it is < 1 or > tgt_len.",
     standins={"causal_mask": _STANDIN_CAUSAL_MASK})


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_dec() -> tuple[torch.Tensor, int, int]:
    return _randint(831, 0, 4, 3, 8), int(_randint(832, 0, 4)), int(_randint(833, 1, 8))


def _p_dec_mask_drawn(ns: ModuleType) -> Arrays:
    tgt, pad_id, q_len = _drawn_dec()
    return {"mask": to_array(ns.decoder_self_attention_mask(tgt, pad_id, q_len), "decoder_self_attention_mask(tgt, pad_id, q_len)",
                             kind="b")}


def _e_dec_mask_drawn() -> Arrays:
    tgt, pad_id, q_len = _drawn_dec()
    return {"mask": _dec_reference(tgt.numpy(), pad_id, q_len)}


_add("8.3-drawn-tokens", "8.3", 2, _p_dec_mask_drawn, _e_dec_mask_drawn, _DEC_HINT,
     standins={"causal_mask": _STANDIN_CAUSAL_MASK})


def _drawn_right_padded() -> torch.Tensor:
    """(4, 7) targets padded on the right only (pad_id 0), the common case: a drawn length per row."""
    lengths = _randint(834, 1, 8, 4)
    tokens = _randint(835, 1, 10, 4, 7)
    return torch.where(torch.arange(7)[None, :] < lengths[:, None], tokens, 0)


def _p_dec_mask_right(ns: ModuleType) -> Arrays:
    mask = ns.decoder_self_attention_mask(_drawn_right_padded(), 0)
    return {"mask": to_array(mask, "decoder_self_attention_mask(tgt, 0)", kind="b")}


# right padding only: an answer that gets the common case right but not left padding keeps these points
_add("8.3-drawn-right-padded", "8.3", 2, _p_dec_mask_right,
     lambda: {"mask": _dec_reference(_drawn_right_padded().numpy(), 0, None)}, _DEC_HINT,
     standins={"causal_mask": _STANDIN_CAUSAL_MASK})


def _prefix_reference(tokens: np.ndarray, prefix_lengths: np.ndarray, pad_id: int) -> np.ndarray:
    """Enumeration: [b, 0, i, j] = (tokens[b, j] != pad_id) and (j < prefix_lengths[b] or j <= i)."""
    batch, length = tokens.shape
    out = np.zeros((batch, 1, length, length), dtype=bool)
    for b in range(batch):
        for i in range(length):
            for j in range(length):
                out[b, 0, i, j] = bool(tokens[b, j] != pad_id) and (j < prefix_lengths[b] or j <= i)
    return out


_PREFIX = {
    "8.4-hand-two-sentences": ([[4, 5, 6, 7, 8, 0], [4, 9, 3, 0, 0, 0]], [3, 1], 0, 2),
    "8.4-prefix-0-is-causal": ([[3, 4, 5, 2, 2]], [0], 2, 1),
    "8.4-whole-sentence-prefix": ([[3, 4, 5, 1, 1], [6, 7, 8, 9, 6]], [3, 5], 1, 1),
    "8.4-prefix-covers-padding": ([[5, 6, 0, 0], [5, 6, 7, 8]], [4, 2], 0, 1),
}


def _p_prefix(ns: ModuleType, tokens, prefix_lengths, pad_id) -> Arrays:
    mask = ns.prefix_lm_mask(torch.as_tensor(tokens), torch.as_tensor(prefix_lengths), pad_id)
    return {"mask": to_array(mask, "prefix_lm_mask(tokens, prefix_lengths, pad_id)", kind="b")}


_PREFIX_HINT = ("Entry [b, 0, i, j] is True iff key j is a real token (tokens[b, j] != pad_id) AND (j < prefix_lengths[b] OR "
                "j <= i): every query sees the whole prefix of its own sentence (bidirectional), and the positions after "
                "it causally. Each sentence has its own prefix length: compare torch.arange(L) with prefix_lengths[:, None]. "
                "Shape (batch, 1, L, L), dtype torch.bool.")
for _id, (_tokens, _prefix, _pad, _points) in _PREFIX.items():
    _add(_id, "8.4", _points, partial(_p_prefix, tokens=_tokens, prefix_lengths=_prefix, pad_id=_pad),
         partial(lambda t, p, pad: {"mask": _prefix_reference(np.array(t), np.array(p), pad)}, _tokens, _prefix, _pad),
         _PREFIX_HINT)


def _p_prefix_rejects(ns: ModuleType) -> Arrays:
    tokens = torch.tensor([[4, 5, 6, 0], [4, 5, 0, 0]])
    return {
        "raised_for_prefix_of_wrong_batch": _raises_value_error(lambda: ns.prefix_lm_mask(tokens, torch.tensor([2]), 0)),
        "raised_for_prefix_above_seq_len": _raises_value_error(lambda: ns.prefix_lm_mask(tokens, torch.tensor([2, 5]), 0)),
        "raised_for_negative_prefix": _raises_value_error(lambda: ns.prefix_lm_mask(tokens, torch.tensor([-1, 2]), 0)),
    }


_add("8.4-rejects-bad-prefix-lengths", "8.4", 1, _p_prefix_rejects,
     lambda: {"raised_for_prefix_of_wrong_batch": np.array(True), "raised_for_prefix_above_seq_len": np.array(True),
              "raised_for_negative_prefix": np.array(True)},
     "Raise ValueError naming prefix_lengths unless it has shape (batch,) with every value in [0, seq_len].")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_prefix() -> tuple[torch.Tensor, torch.Tensor, int]:
    return _randint(841, 0, 4, 4, 7), _randint(842, 0, 8, 4), int(_randint(843, 0, 4))


def _p_prefix_drawn(ns: ModuleType) -> Arrays:
    tokens, prefix, pad_id = _drawn_prefix()
    return {"mask": to_array(ns.prefix_lm_mask(tokens, prefix, pad_id), "prefix_lm_mask(tokens, prefix_lengths, pad_id)", kind="b")}


def _e_prefix_drawn() -> Arrays:
    tokens, prefix, pad_id = _drawn_prefix()
    return {"mask": _prefix_reference(tokens.numpy(), prefix.numpy(), pad_id)}


_add("8.4-drawn-tokens", "8.4", 2, _p_prefix_drawn, _e_prefix_drawn, _PREFIX_HINT)


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
    _add(_id, "9.1", _points, partial(_p_ls, args=_args, eps=_eps), partial(_e_ls, _args, _eps), _LS_HINT, atol=1e-5)


def _p_ls_rejects(ns: ModuleType) -> Arrays:
    logits, target = _ls_inputs(905, 1, 3, 4, 0, 0)
    return {
        "raised_for_eps_1.5": _raises_value_error(lambda: ns.label_smoothed_loss(logits, target, 1.5, 0)),
        "raised_for_eps_-0.1": _raises_value_error(lambda: ns.label_smoothed_loss(logits, target, -0.1, 0)),
    }


_add("9.1-rejects-bad-label-smoothing", "9.1", 1, _p_ls_rejects,
     lambda: {"raised_for_eps_1.5": np.array(True), "raised_for_eps_-0.1": np.array(True)},
     "Raise ValueError naming label_smoothing when it is outside [0, 1].")


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
    _add(_id, "9.2", 1, partial(_p_noam, key=_id), partial(_e_noam, _id),
         _NOAM_HINT, rtol=1e-6, atol=0.0)


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


_add("9.2-int-steps", "9.2", 1, _p_noam_int, lambda: {"lr": _noam_closed_form((1, 4000, 16000), 512, 4000)},
     _NOAM_HINT + " An int step gives a plain float.", rtol=1e-6, atol=0.0)


def _p_noam_rejects(ns: ModuleType) -> Arrays:
    return _rejections({
        "step_0": (lambda: ns.noam_lr(0, 512, 4000), ("step",)),
        "a_0_in_the_steps": (lambda: ns.noam_lr(torch.tensor([3, 0, 5]), 512, 4000), ("step",)),
        "warmup_0": (lambda: ns.noam_lr(10, 512, 0), ("warmup_steps",)),
    })


_add("9.2-rejects-step-0", "9.2", 1, _p_noam_rejects,
     lambda: {"raised_for_step_0": np.array(True), "raised_for_a_0_in_the_steps": np.array(True),
              "raised_for_warmup_0": np.array(True), "message_names_step": np.array(True),
              "message_names_warmup_steps": np.array(True)},
     "Steps count from 1 (step**-0.5 is undefined at 0): raise ValueError naming step when any step is < 1 (also inside a "
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


_add("9.2-drawn-steps", "9.2", 2, _p_noam_drawn, _e_noam_drawn, _NOAM_HINT, rtol=1e-6, atol=0.0)


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
         partial(_e_pair, *_spec), _PAIR_HINT)


def _p_pair_rejects(ns: ModuleType) -> Arrays:
    return {"raised_for_1d_tgt": _raises_value_error(lambda: ns.teacher_forcing_pair(torch.tensor([4, 5, 0]), 1, 2, 0))}


_add("9.3-rejects-1d-tgt", "9.3", 1, _p_pair_rejects, lambda: {"raised_for_1d_tgt": np.array(True)},
     "Raise ValueError naming tgt when it is not 2-D (batch, tgt_len).")


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


_add("9.3-drawn-tokens", "9.3", 2, _p_pair_drawn, _e_pair_drawn, _PAIR_HINT)


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
         partial(lambda s, w, p: _per_call("lr", [f"step_{int(t)}" for t in s], _peak_closed_form(s, w, p)),
                 _steps, _warmup, _peak), _PEAK_HINT, rtol=1e-6, atol=0.0)


def _p_peak_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_step_0": _raises_value_error(lambda: ns.noam_lr_with_peak(0, 100, 1e-3)),
        "raised_for_warmup_0": _raises_value_error(lambda: ns.noam_lr_with_peak(5, 0, 1e-3)),
        "raised_for_peak_0": _raises_value_error(lambda: ns.noam_lr_with_peak(5, 100, 0.0)),
    }


_add("9.4-rejects-bad-arguments", "9.4", 1, _p_peak_rejects,
     lambda: {"raised_for_step_0": np.array(True), "raised_for_warmup_0": np.array(True), "raised_for_peak_0": np.array(True)},
     "Raise ValueError naming the argument when step < 1, warmup_steps < 1 or peak_lr <= 0.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_peak() -> tuple[list[int], int, float]:
    warmup = int(_randint(941, 2, 5000))
    steps = [int(v) for v in _randint(942, 1, 20000, 5)] + [warmup, warmup + 1]
    return steps, warmup, float(_randint(943, 1, 100)) * 1e-4


_add("9.4-drawn-steps", "9.4", 2,
     lambda ns: (lambda d: _per_call("lr", [f"step_{t}" for t in d[0]], _peak_values(ns, *d)))(_drawn_peak()),
     lambda: (lambda d: _per_call("lr", [f"step_{t}" for t in d[0]], _peak_closed_form(*d)))(_drawn_peak()),
     _PEAK_HINT, rtol=1e-6, atol=0.0)


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
    _add(_id, "10.1", 2, partial(_p_bgreedy, key=_id), partial(_e_bgreedy, _id), _BGREEDY_HINT,
         robust=partial(_bgreedy_is_clear, _id))


def _p_bgreedy_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_max_len_0": _raises_value_error(lambda: ns.greedy_decode(_bgreedy_fn("10.1-hand-batch"), 2, BOS, EOS, 5, 0)),
        "raised_for_batch_size_0": _raises_value_error(lambda: ns.greedy_decode(_bgreedy_fn("10.1-hand-batch"), 0, BOS, EOS, 5, 3)),
    }


_add("10.1-rejects-bad-sizes", "10.1", 1, _p_bgreedy_rejects,
     lambda: {"raised_for_max_len_0": np.array(True), "raised_for_batch_size_0": np.array(True)},
     "Raise ValueError naming the argument when max_len < 1 or batch_size < 1, before calling step_fn.")


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
    return {"tokens": to_array(tokens, "tokens", kind="i"), "score": to_array(score, "score", kind="f").reshape(()),
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
    _add(_id, "10.2", _points, partial(_p_beam, args=_args, min_length=_min_length), partial(_e_beam, *_args, _min_length),
         _BEAM_HINT, atol=1e-5,
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
     lambda: {"raised_for_beam_size_0": np.array(True), "raised_for_max_len_0": np.array(True),
              "raised_for_min_length_above_max_len": np.array(True)},
     "Raise ValueError (naming the argument) when beam_size < 1, max_len < 1 or min_length > max_len, before decoding anything.")


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
    _add(_id, "10.3", 1 if _FILTER_SPECS[_id][0] == "hand" or "only" in _id or "larger" in _id else 2, partial(_p_filter, key=_id), partial(_e_filter, _id), _FILTER_HINT,
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
     lambda: {k: np.array(True) for k in ("raised_for_top_p_0", "raised_for_top_p_1.5", "raised_for_one_row_top_p_1.5",
                                          "raised_for_top_k_-1", "raised_for_temperature_0")},
     "Raise ValueError naming the argument when temperature <= 0, top_k < 0, or top_p (any of its values) is outside (0, 1].")


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
    _add(_id, "10.4", 2, partial(_p_kv, args=_args, chunks=_chunks), partial(_e_kv, _args, _chunks), _KV_HINT, atol=1e-5)


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
     partial(_e_kv_half, (1046, 2, 2, 5, 8), (3, 1, 1)),
     _KV_HINT + " This case runs in float16: if you mask the scores yourself, fill with torch.finfo(scores.dtype).min "
                "(a fill value such as -1e9 overflows float16).", rtol=1e-2, atol=5e-3)


def _p_kv_rejects(ns: ModuleType) -> Arrays:
    q, k, v = _kv_inputs(1045, 1, 1, 3, 4)
    cache = k[:, :, :2]
    return {
        "raised_for_v_cache_missing": _raises_value_error(lambda: ns.kv_cache_step(q[:, :, 2:], k[:, :, 2:], v[:, :, 2:], cache, None)),
        "raised_for_k_cache_missing": _raises_value_error(lambda: ns.kv_cache_step(q[:, :, 2:], k[:, :, 2:], v[:, :, 2:], None, cache)),
    }


_add("10.4-rejects-one-missing-cache", "10.4", 1, _p_kv_rejects,
     lambda: {"raised_for_v_cache_missing": np.array(True), "raised_for_k_cache_missing": np.array(True)},
     "k_cache and v_cache go together: raise ValueError when exactly one of them is None.")


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
    _add(_id, "10.5", 2, partial(_p_banned, key=_key, n=_n, vocab=_vocab), partial(_e_banned, _key, _n, _vocab), _NGRAM_HINT)

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
     lambda: {f"greedy_blocking_n{n}": np.array(seq, dtype=np.int64) for n, seq in _LOOP_HAND.items()},
     "This case decodes a model that loops (2 3 2 3 ...) greedily, banning your banned_tokens(...) at every step: "
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
     lambda: {"raised_for_n_0": np.array(True), "raised_for_token_beyond_vocab": np.array(True),
              "raised_for_negative_id": np.array(True)},
     "Raise ValueError naming the argument when n < 1 or a prefix holds an id outside [0, vocab_size).")


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
    _add(_id, "11.1", 2, partial(_p_dependency, key=_id), partial(_e_dependency, _id), _DEPENDENCY_HINT)


def _p_dependency_rejects(ns: ModuleType) -> Arrays:
    fn = _Planted("causal", 1107, 4, 2)
    return {
        "raised_for_1d_x": _raises_value_error(lambda: ns.dependency_matrix(fn, torch.ones(4))),
        "raised_for_3d_x": _raises_value_error(lambda: ns.dependency_matrix(fn, torch.ones(1, 4, 2))),
    }


_add("11.1-rejects-x-not-2d", "11.1", 1, _p_dependency_rejects,
     lambda: {"raised_for_1d_x": np.array(True), "raised_for_3d_x": np.array(True)},
     "Raise ValueError naming x when it is not a 2-D tensor (L_in, d), before calling fn.")


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
    return {"unigram_entropy": to_array(unigram, "unigram_entropy", kind="f").reshape(()),
            "position_entropy": to_array(positional, "position_entropy", kind="f").reshape(())}


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
    _add(_id, "11.2", 2, partial(_p_floors, key=_id), partial(_e_floors, _id), _FLOORS_HINT)


def _p_floors_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_1d_targets": _raises_value_error(lambda: ns.loss_floors(torch.tensor([4, 5, 2]), 0)),
        "raised_for_only_padding": _raises_value_error(lambda: ns.loss_floors(torch.zeros(2, 3, dtype=torch.long), 0)),
    }


_add("11.2-rejects-bad-targets", "11.2", 1, _p_floors_rejects,
     lambda: {"raised_for_1d_targets": np.array(True), "raised_for_only_padding": np.array(True)},
     "Raise ValueError naming targets when it is not 2-D (batch, tgt_len) or holds no token other than pad_id.")


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
    _add(f"11.3-hand-{_id}", "11.3", 2, partial(_p_divergence, key=_id), partial(_e_divergence, _id), _DIVERGENCE_HINT)
for _id in _DIVERGENCE_DRAWN:
    _add(_id, "11.3", 2 if "healthy" not in _id else 1, partial(_p_divergence, key=_id), partial(_e_divergence, _id),
         _DIVERGENCE_HINT)


def _p_divergence_rejects(ns: ModuleType) -> Arrays:
    losses = torch.tensor([3.0, 2.0, 1.0])
    return {
        "raised_for_k_1": _raises_value_error(lambda: ns.first_divergence(losses, 1.0)),
        "raised_for_2d_losses": _raises_value_error(lambda: ns.first_divergence(losses[None], 2.0)),
    }


_add("11.3-rejects-bad-arguments", "11.3", 1, _p_divergence_rejects,
     lambda: {"raised_for_k_1": np.array(True), "raised_for_2d_losses": np.array(True)},
     "Raise ValueError naming the argument when k <= 1 or losses is not 1-D.")
