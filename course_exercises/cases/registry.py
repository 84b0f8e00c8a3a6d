"""The registry of autograded exercise cases (chapters 1-13).

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

The registry is this file (the framework: ``NOTEBOOKS``, ``EXERCISES``,
:class:`Case`, ``_add``, the input helpers, the stand-ins' sources) and the
files named in :data:`PARTS` beside it: ``shared.py`` (helpers several
chapters use) and one file per chapter, ``ch01_motivation.py`` ...
``ch13_modern_block.py``, which register that chapter's cases. They are one
module: :func:`course_exercises.check.load_cases` runs this file, then each
part in order, in the namespace of the module ``course_exercise_cases``
(their relative imports, there for readers and linters, are left out;
:func:`course_exercises.casefile.cases_parts`). Never import them as
``course_exercises.cases.registry``. They ship inside the package, so that
the student's check command (``course-check``) and the instructor's grader
(``course-grade``) work from an installed package as from a clone; the tests
(``tests/exercises``) use the same files. They do no work at import time
beyond building the ``CASES`` list.

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
from dataclasses import KW_ONLY, dataclass, field
from functools import partial
from types import ModuleType
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Case", "CASES", "NOTEBOOKS", "EXERCISES", "Draws", "drawing", "to_array", "to_number", "ReturnTypeError", "compare",
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
    "12": "12_language_model.ipynb",
    "13": "13_modern_block.ipynb",
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
    "12.1": "next_token_windows",
    "12.2": "perplexity",
    "12.3": "translation_lm_targets",
    "13.1": "rope_interleaved",
    "13.2": "grouped_query_attention",
    "13.3": "kv_cache_bytes",
    "13.4": "lm_parameter_count",
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
            definition (the source, a ``_STANDIN_*`` constant of ``registry.py``)
            in place of the student's, so that one mistake costs its own
            points only. Trusted side only: the student copy of the cases
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
    _: KW_ONLY  # the rest by name only: the student copy strips expected, robust and standins by name
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
        if not -2**63 <= int(value) < 2**63:   # a wrong answer, not a crash of the student's code: say what came back
            raise ReturnTypeError(f"{what} returned an int of {int(value).bit_length()} bits, outside the 64-bit range "
                                  f"of any right answer; return a Python int or a torch.Tensor of {words}s in that range")
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
            " (the function returns one tensor, not a tuple of them: return only the result)" \
            if isinstance(value, tuple) and any(isinstance(v, torch.Tensor) for v in value) else \
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


def to_number(value: object, what: str, *, kind: str) -> np.ndarray:
    """:func:`to_array` for an answer that is one number (a perplexity, a count of bytes): a 0-dim array.

    A tensor of one entry (shape ``(1,)``) is that number; a result of more (or no) entries breaks the
    return-type rule (``ReturnTypeError``): it is what the student's function returned, never an error
    of the harness's conversion.
    """
    arr = to_array(value, what, kind=kind)
    if arr.size != 1:
        example = "a Python float or a 0-dim tensor" if kind == "f" else "a Python int or a 0-dim tensor"
        raise ReturnTypeError(f"{what} returned a value of the wrong shape ({type(value).__name__}{_shape_words(value)}); "
                              f"return one number ({example})")
    return arr.reshape(())


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
    *,
    expected: Callable[[], Arrays],
    hint: str,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    robust: Callable[[], bool] | None = None,
    standins: dict[str, str] | None = None,
) -> None:
    """Register one case; ``standins``: see :class:`Case` (pass the ``_STANDIN_*`` constants).

    Everything after ``produce`` is keyword-only: the student copy of the cases removes ``expected``,
    ``robust`` and ``standins`` by name and refuses a call that passes more than four arguments by
    position (:mod:`course_exercises.casefile`)."""
    chapter = f"{int(exercise.split('.')[0]):02d}"
    CASES.append(Case(id=id, chapter=chapter, exercise=exercise, points=points, requires=(EXERCISES[exercise],),
                      produce=produce, expected=expected, rtol=rtol, atol=atol, hint=hint, robust=robust,
                      standins=dict(standins) if standins else None))


def cases_for(chapters: tuple[str, ...] | list[str] | None = None) -> list[Case]:
    """The cases of the given two-digit chapters (all when ``None`` or empty)."""
    if not chapters:
        return list(CASES)
    return [c for c in CASES if c.chapter in set(chapters)]


#: the files that register the cases, in order: each is run in this module's namespace after this file
#: (:func:`course_exercises.casefile.cases_parts`); a new chapter's file goes here
PARTS = (
    "shared.py",
    "ch01_motivation.py",
    "ch02_embeddings.py",
    "ch03_positional_encoding.py",
    "ch04_attention.py",
    "ch05_multi_head_attention.py",
    "ch06_feed_forward.py",
    "ch07_add_and_norm.py",
    "ch08_masks.py",
    "ch09_training.py",
    "ch10_inference.py",
    "ch11_pitfalls.py",
    "ch12_language_model.py",
    "ch13_modern_block.py",
)
