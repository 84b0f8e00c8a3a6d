"""The registry of autograded exercise cases (chapters 2-10).

Each :class:`Case` checks one exercise on one deterministic input:

* ``produce(ns)`` calls **only** the student's namespace ``ns`` (the module
  returned by :func:`course_lib.grading.extract.load_namespace`) on seeded,
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

This file ships inside the package (``course_lib/exercise_cases/cases.py``),
so that the student's check command (``course-check``) and the instructor's
grader (``course-grade``) work from an installed package as from a clone; the
tests (``tests/exercises``) use the same file. It has no relative imports and
does no work at import time beyond building the ``CASES`` list. Load it with
:func:`course_lib.check.load_cases` (by path, as the module
``course_exercise_cases``), never as ``course_lib.exercise_cases.cases``.

The grader covers this whole folder in the sandbox of the process that runs a
student's code (which gets only the *student copy*, see
:mod:`course_lib.grading.casefile`): keep nothing else here.

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

__all__ = ["Case", "CASES", "NOTEBOOKS", "EXERCISES", "Draws", "drawing", "to_array", "compare", "cases_for"]

#: chapter -> notebook file name (in ``exercises/`` and ``solutions/``)
NOTEBOOKS: dict[str, str] = {
    "02": "02_embeddings.ipynb",
    "03": "03_positional_encoding.ipynb",
    "04": "04_attention.ipynb",
    "05": "05_multi_head_attention.ipynb",
    "06": "06_feed_forward.ipynb",
    "07": "07_add_and_norm.ipynb",
    "08": "08_masks.ipynb",
    "09": "09_training.ipynb",
    "10": "10_inference.ipynb",
}

#: exercise number -> the function the student writes
EXERCISES: dict[str, str] = {
    "2.1": "scaled_embedding",
    "2.2": "tied_output_logits",
    "3.1": "sinusoidal_encoding",
    "3.2": "relative_position_matrix",
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
    "7.2": "pre_ln_sublayer",
    "7.3": "post_ln_sublayer",
    "8.1": "padding_mask",
    "8.2": "causal_mask",
    "8.3": "decoder_self_attention_mask",
    "9.1": "label_smoothed_loss",
    "9.2": "noam_lr",
    "9.3": "shift_right",
    "10.1": "greedy_decode",
    "10.2": "beam_search",
    "10.3": "top_k_top_p_filtering",
    "10.4": "kv_cache_step",
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

    @property
    def function(self) -> str:
        """The name of the function the exercise asks for."""
        return EXERCISES[self.exercise]


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


def to_array(value: object, what: str, *, kind: str) -> np.ndarray:
    """Convert a student's return value to a numpy array for comparison.

    Args:
        value: a ``torch.Tensor``, numpy array/scalar, Python number or bool.
        what: words naming the value, used in the error message.
        kind: the kind the exercise asks for: ``"f"`` (float -> float64),
            ``"i"`` (integer -> int64) or ``"b"`` (bool). A value of another
            kind is returned in its own kind (float64 / int64 / bool) so that
            the comparison reports the dtype mismatch.

    Raises:
        TypeError: ``value`` is not a tensor, array or number (e.g. ``None``
            because the function forgot to ``return``).
    """
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.is_complex():
            raise TypeError(f"{what} is a complex tensor; expected a real {_KIND_WORDS[kind]} tensor")
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
    elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        arr = value
    else:
        raise TypeError(
            f"{what} is a {type(value).__name__}; expected a torch.Tensor of {_KIND_WORDS[kind]}s"
            + (" (did the function forget to `return`?)" if value is None else "")
        )
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
        raise TypeError(f"{what} must return a pair ({names[0]}, {names[1]}); got {got}")
    return result[0], result[1]


def compare(case: Case, produced: Arrays, expected: Arrays) -> str | None:
    """Compare a case's produced arrays with the expected ones.

    Each key is compared by :func:`course_lib.grading.compare.compare_arrays`,
    the grader's own comparator (one rule for both: see its docstring).

    Returns:
        ``None`` when every key matches (floats within ``case.rtol``/``case.atol``,
        bool and integer keys exactly), else a teaching message that names the
        exercise and function, the key, the expected and received shape, dtype
        or values, and the case's hint.
    """
    # imported here, so that the student copy of this file (which drops this function) does not import it
    from course_lib.grading.compare import compare_arrays

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
) -> None:
    chapter = f"{int(exercise.split('.')[0]):02d}"
    CASES.append(Case(id=id, chapter=chapter, exercise=exercise, points=points, requires=(EXERCISES[exercise],),
                      produce=produce, expected=expected, rtol=rtol, atol=atol, hint=hint, robust=robust))


def cases_for(chapters: tuple[str, ...] | list[str] | None = None) -> list[Case]:
    """The cases of the given two-digit chapters (all when ``None`` or empty)."""
    if not chapters:
        return list(CASES)
    return [c for c in CASES if c.chapter in set(chapters)]


# ===========================================================================
# Chapter 2 - embeddings
# ===========================================================================
def _emb_inputs(seed: int, token_shape: tuple[int, ...], vocab: int, d_model: int):
    return _randint(seed, 0, vocab, *token_shape), _randn(seed + 1, vocab, d_model)


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


def _p_embedding_rejects(ns: ModuleType) -> Arrays:
    weight = _randn(205, 5, 4)
    return {
        "raised_for_id_equal_to_vocab_size": _raises_value_error(lambda: ns.scaled_embedding(torch.tensor([[0, 5]]), weight)),
        "raised_for_negative_id": _raises_value_error(lambda: ns.scaled_embedding(torch.tensor([[-1, 2]]), weight)),
        "raised_for_float_tokens": _raises_value_error(lambda: ns.scaled_embedding(torch.tensor([[0.0, 1.0]]), weight)),
    }


_add("2.1-rejects-bad-tokens", "2.1", 1, _p_embedding_rejects,
     lambda: {k: np.array(True) for k in ("raised_for_id_equal_to_vocab_size", "raised_for_negative_id", "raised_for_float_tokens")},
     "Raise ValueError (naming `tokens`) when tokens is not an integer tensor or an id lies outside [0, vocab_size).")


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


# ===========================================================================
# Chapter 3 - positional encoding
# ===========================================================================
def _pe_closed_form(max_len: int, d_model: int) -> np.ndarray:
    pe = np.zeros((max_len, d_model))
    for pos in range(max_len):
        for col in range(d_model):
            i2 = col - (col % 2)  # the "2i" of the paper
            angle = pos / (10000.0 ** (i2 / d_model))
            pe[pos, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    return pe


def _p_pe(ns: ModuleType, max_len, d_model) -> Arrays:
    return {"pe": to_array(ns.sinusoidal_encoding(max_len, d_model), f"sinusoidal_encoding({max_len}, {d_model})", kind="f")}


_PE_HINT = ("PE[pos, 2i] = sin(pos / 10000**(2i/d_model)) and PE[pos, 2i+1] = cos(pos / 10000**(2i/d_model)); "
            "the exponent uses the even column index 2i for both columns of a pair; for odd d_model the last column is a sine.")
for _id, _args, _pts in (
    ("3.1-len-10-d-8", (10, 8), 1),
    ("3.1-odd-d-model-5", (7, 5), 2),
    ("3.1-one-position", (1, 1), 1),
    ("3.1-len-50-d-16", (50, 16), 1),
    ("3.1-odd-d-model-33", (64, 33), 2),
):
    _add(_id, "3.1", _pts, partial(_p_pe, max_len=_args[0], d_model=_args[1]), partial(lambda a, b: {"pe": _pe_closed_form(a, b)}, *_args),
         _PE_HINT, atol=2e-5)


def _p_pe_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_max_len_0": _raises_value_error(lambda: ns.sinusoidal_encoding(0, 8)),
        "raised_for_d_model_0": _raises_value_error(lambda: ns.sinusoidal_encoding(4, 0)),
    }


_add("3.1-rejects-bad-sizes", "3.1", 1, _p_pe_rejects, lambda: {"raised_for_max_len_0": np.array(True), "raised_for_d_model_0": np.array(True)},
     "Raise ValueError naming the argument when max_len or d_model is smaller than 1.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_pe_size() -> tuple[int, int]:
    return int(_randint(301, 2, 80)), int(_randint(302, 2, 48))


_add("3.1-drawn-size", "3.1", 1, lambda ns: _p_pe(ns, *_drawn_pe_size()),
     lambda: {"pe": _pe_closed_form(*_drawn_pe_size())}, _PE_HINT, atol=2e-5)


def _rel_closed_form(k: int, d_model: int) -> np.ndarray:
    m = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        w = 1.0 / (10000.0 ** (2 * i / d_model))
        c, s = math.cos(w * k), math.sin(w * k)
        # [sin(w(p+k)), cos(w(p+k))] = [[c, s], [-s, c]] @ [sin(wp), cos(wp)]
        m[2 * i, 2 * i], m[2 * i, 2 * i + 1] = c, s
        m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = -s, c
    return m


def _p_rel(ns: ModuleType, k, d_model) -> Arrays:
    return {"matrix": to_array(ns.relative_position_matrix(k, d_model), f"relative_position_matrix({k}, {d_model})", kind="f")}


_REL_HINT = ("Use sin(a+b) = sin a cos b + cos a sin b and cos(a+b) = cos a cos b - sin a sin b: the block for the pair "
             "(2i, 2i+1) is [[cos(w k), sin(w k)], [-sin(w k), cos(w k)]] with w = 1/10000**(2i/d_model); everything else is 0.")
for _id, _args in {
    "3.2-offset-1-d-8": (1, 8),
    "3.2-offset-5-d-16": (5, 16),
    "3.2-negative-offset-d-4": (-3, 4),
    "3.2-offset-0-is-identity": (0, 6),
}.items():
    _add(_id, "3.2", 1, partial(_p_rel, k=_args[0], d_model=_args[1]), partial(lambda a, b: {"matrix": _rel_closed_form(a, b)}, *_args),
         _REL_HINT, atol=1e-5)


def _p_rel_rejects(ns: ModuleType) -> Arrays:
    return {"raised_for_odd_d_model": _raises_value_error(lambda: ns.relative_position_matrix(2, 5))}


_add("3.2-rejects-odd-d-model", "3.2", 1, _p_rel_rejects, lambda: {"raised_for_odd_d_model": np.array(True)},
     "For odd d_model the last column has no cosine partner: raise ValueError naming d_model.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_offset() -> tuple[int, int]:
    return int(_randint(311, -30, 31)), 2 * int(_randint(312, 1, 17))


_add("3.2-drawn-offset", "3.2", 1, lambda ns: _p_rel(ns, *_drawn_offset()),
     lambda: {"matrix": _rel_closed_form(*_drawn_offset())}, _REL_HINT, atol=1e-5)


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
    _add(_id, "4.2", 2, partial(_p_self_attention, args=_args), partial(_e_self_attention, _args), _SELF_HINT, atol=1e-5)




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
    return {
        "raised_for_indivisible_d_model": _raises_value_error(lambda: ns.split_heads(_randn(505, 2, 3, 10), 4)),
        "raised_for_1d_input": _raises_value_error(lambda: ns.split_heads(_randn(506, 8), 2)),
    }


_add("5.1-rejects-bad-input", "5.1", 1, _p_split_rejects,
     lambda: {"raised_for_indivisible_d_model": np.array(True), "raised_for_1d_input": np.array(True)},
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
    _add(_id, "5.3", 2, partial(_p_mha, args=_args), partial(_e_mha, _args), _MHA_HINT, atol=1e-5)

_add("5.3-float16-padding-mask", "5.3", 1, partial(_p_mha, args=(5251, 3, 3, 6, 8, 2, "padding"), dtype="float16"),
     partial(_e_mha, (5251, 3, 3, 6, 8, 2, "padding"), "float16"),
     _MHA_HINT + " This case runs in float16: if you mask the scores yourself, fill with torch.finfo(scores.dtype).min "
                 "(a fill value such as -1e9 overflows float16).", rtol=1e-2, atol=5e-3)


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
             "average those norms. Zero the head's output, not its weights or its query; no scale on the result.")
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
def _ln_inputs(seed, shape, shift, eps):
    d = shape[-1]
    return _randn(seed, *shape, shift=shift), _randn(seed + 1, d, scale=0.5, shift=1.0), _randn(seed + 2, d, scale=0.5), eps


def _p_ln(ns: ModuleType, args) -> Arrays:
    x, gamma, beta, eps = _ln_inputs(*args)
    return {"out": to_array(ns.layer_norm(x, gamma, beta, eps), "layer_norm(x, gamma, beta, eps)", kind="f")}


def _e_ln(args) -> Arrays:
    x, gamma, beta, eps = _ln_inputs(*args)
    return {"out": _f64(F.layer_norm(x.double(), (x.size(-1),), gamma.double(), beta.double(), eps))}


_LN_HINT = ("Normalise over the last dim only: (x - mean) / sqrt(var + eps) * gamma + beta, with the BIASED variance "
            "(divide by d_model: unbiased=False / correction=0) and eps inside the square root.")
for _id, _args, _hint in (
    ("7.1-batch-2x5-d-8", (701, (2, 5, 8), 0.0, 1e-5), _LN_HINT),
    ("7.1-d-16", (702, (1, 3, 16), 0.0, 1e-5), _LN_HINT),
    ("7.1-eps-0.1", (703, (2, 4, 6), 0.0, 0.1), _LN_HINT + " Use the eps argument you are given (0.1 here)."),
    ("7.1-large-mean", (704, (4, 2, 6), 100.0, 1e-5),
     _LN_HINT + " Here every row has mean about 100: compute the variance from the centred values, mean((x - mean)**2), "
                "not as mean(x**2) - mean**2, which loses all precision in float32."),
):
    _add(_id, "7.1", 1, partial(_p_ln, args=_args), partial(_e_ln, _args), _hint, atol=1e-5, rtol=1e-4)


def _sublayer_fn(seed: int, d_model: int, zero: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """A fixed, deterministic sublayer: tanh(x @ W + b), or zero."""
    w = _randn(seed, d_model, d_model, scale=d_model**-0.5)
    b = _randn(seed + 1, d_model, scale=0.1)

    def sublayer(y: torch.Tensor) -> torch.Tensor:
        if zero:
            return torch.zeros_like(y)
        return torch.tanh(y @ w.to(y.dtype) + b.to(y.dtype))

    return sublayer


def _res_inputs(seed, batch, seq_len, d_model, zero):
    x = _randn(seed, batch, seq_len, d_model, scale=2.0, shift=0.5)
    gamma, beta = _randn(seed + 1, d_model, scale=0.3, shift=1.0), _randn(seed + 2, d_model, scale=0.3)
    return x, _sublayer_fn(seed + 3, d_model, zero), gamma, beta


def _p_res(ns: ModuleType, args, norm_first: bool) -> Arrays:
    x, fn, gamma, beta = _res_inputs(*args)
    name = "pre_ln_sublayer" if norm_first else "post_ln_sublayer"
    return {"out": to_array(getattr(ns, name)(x, fn, gamma, beta), f"{name}(x, sublayer, gamma, beta)", kind="f")}


def _e_res(args, norm_first: bool) -> Arrays:
    """course_lib's ResidualSublayer (dropout 0, LayerNorm weights copied), in float64."""
    from course_lib.layers import ResidualSublayer

    x, fn, gamma, beta = _res_inputs(*args)
    block = ResidualSublayer(x.size(-1), dropout=0.0, norm_first=norm_first).double().eval()
    with torch.no_grad():
        block.norm.weight.copy_(gamma.double())
        block.norm.bias.copy_(beta.double())
        return {"out": _f64(block(x.double(), fn))}


_PRE_HINT = "Pre-LN: out = x + sublayer(LayerNorm(x)) - the residual path carries x itself, never normalised."
_POST_HINT = "Post-LN (the paper, section 3.1): out = LayerNorm(x + sublayer(x)) - add first, normalise the sum."
for _ex, _nf, _hint, _seed in (("7.2", True, _PRE_HINT, 710), ("7.3", False, _POST_HINT, 720)):
    for _suffix, _args in {
        "batch-2x4-d-8": (_seed + 1, 2, 4, 8, False),
        "d-16": (_seed + 5, 1, 3, 16, False),
        "zero-sublayer": (_seed + 9, 2, 2, 6, True),
    }.items():
        _add(f"{_ex}-{_suffix}", _ex, 1, partial(_p_res, args=_args, norm_first=_nf), partial(_e_res, _args, _nf), _hint,
             atol=1e-5, rtol=1e-4)


# ===========================================================================
# Chapter 8 - masks
# ===========================================================================
_PAD_TOKENS = {
    "8.1-pad-0": ([[5, 6, 7, 0, 0], [3, 4, 0, 0, 0], [9, 8, 7, 6, 5]], 0),
    "8.1-pad-id-3": ([[1, 3, 3], [3, 3, 3], [2, 1, 4]], 3),
    "8.1-no-padding": ([[4, 5, 6, 7]], 0),
}


def _p_padding(ns: ModuleType, key) -> Arrays:
    tokens, pad_id = _PAD_TOKENS[key]
    return {"mask": to_array(ns.padding_mask(torch.tensor(tokens), pad_id), "padding_mask(tokens, pad_id)", kind="b")}


def _e_padding(key) -> Arrays:
    tokens, pad_id = _PAD_TOKENS[key]
    t = np.array(tokens)
    return {"mask": (t != pad_id)[:, None, None, :]}


_PAD_HINT = "mask = (tokens != pad_id) reshaped to (batch, 1, 1, seq_len), dtype torch.bool, True = may attend (a real token)."
for _id in _PAD_TOKENS:
    _add(_id, "8.1", 1, partial(_p_padding, key=_id), partial(_e_padding, _id), _PAD_HINT)


def _p_padding_rejects(ns: ModuleType) -> Arrays:
    return {"raised_for_1d_tokens": _raises_value_error(lambda: ns.padding_mask(torch.tensor([1, 2, 0]), 0))}


_add("8.1-rejects-1d-tokens", "8.1", 1, _p_padding_rejects, lambda: {"raised_for_1d_tokens": np.array(True)},
     "Raise ValueError naming `tokens` when it is not 2-D (batch, seq_len).")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_tokens(seed: int, vocab: int, batch: int, seq_len: int) -> tuple[torch.Tensor, int]:
    return _randint(seed, 0, vocab, batch, seq_len), int(_randint(seed + 1, 0, vocab))


def _p_padding_drawn(ns: ModuleType) -> Arrays:
    tokens, pad_id = _drawn_tokens(811, 5, 3, 9)
    return {"mask": to_array(ns.padding_mask(tokens, pad_id), "padding_mask(tokens, pad_id)", kind="b")}


def _e_padding_drawn() -> Arrays:
    tokens, pad_id = _drawn_tokens(811, 5, 3, 9)
    return {"mask": (tokens.numpy() != pad_id)[:, None, None, :]}


_add("8.1-drawn-tokens", "8.1", 1, _p_padding_drawn, _e_padding_drawn, _PAD_HINT)


def _p_causal(ns: ModuleType, size) -> Arrays:
    return {"mask": to_array(ns.causal_mask(size), f"causal_mask({size})", kind="b")}


_CAUSAL_HINT = "Entry [0, 0, i, j] is True iff j <= i (lower triangle, diagonal included): torch.ones(size, size, dtype=torch.bool).tril()[None, None]."
for _size in (1, 4, 7):
    _add(f"8.2-size-{_size}", "8.2", 1, partial(_p_causal, size=_size),
         partial(lambda s: {"mask": np.tril(np.ones((s, s), dtype=bool))[None, None]}, _size), _CAUSAL_HINT)


def _p_causal_rejects(ns: ModuleType) -> Arrays:
    return {"raised_for_size_0": _raises_value_error(lambda: ns.causal_mask(0))}


_add("8.2-rejects-size-0", "8.2", 1, _p_causal_rejects, lambda: {"raised_for_size_0": np.array(True)},
     "Raise ValueError naming `size` when it is smaller than 1.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_size() -> int:
    return int(_randint(821, 2, 20))


_add("8.2-drawn-size", "8.2", 1, lambda ns: _p_causal(ns, _drawn_size()),
     lambda: {"mask": np.tril(np.ones((_drawn_size(),) * 2, dtype=bool))[None, None]}, _CAUSAL_HINT)

_DEC_TOKENS = {
    "8.3-pad-0": ([[1, 5, 6, 2, 0, 0], [1, 7, 2, 0, 0, 0]], 0),
    "8.3-pad-id-9-no-padding": ([[1, 4, 4, 2]], 9),
    "8.3-batch-3-pad-id-5": ([[1, 6, 7, 8, 2, 5, 5], [1, 2, 5, 5, 5, 5, 5], [1, 9, 9, 9, 9, 9, 2]], 5),
}


def _p_dec_mask(ns: ModuleType, key) -> Arrays:
    tgt, pad_id = _DEC_TOKENS[key]
    return {"mask": to_array(ns.decoder_self_attention_mask(torch.tensor(tgt), pad_id), "decoder_self_attention_mask(tgt, pad_id)", kind="b")}


def _e_dec_mask(key) -> Arrays:
    tgt, pad_id = _DEC_TOKENS[key]
    t = np.array(tgt)
    n = t.shape[1]
    causal = np.tril(np.ones((n, n), dtype=bool))
    return {"mask": (t != pad_id)[:, None, None, :] & causal[None, None]}


for _id in _DEC_TOKENS:
    _add(_id, "8.3", 2, partial(_p_dec_mask, key=_id), partial(_e_dec_mask, _id),
         "Combine both rules with a logical AND: padding_mask(tgt, pad_id) & causal_mask(tgt_len) -> shape (batch, 1, tgt_len, tgt_len).")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _p_dec_mask_drawn(ns: ModuleType) -> Arrays:
    tgt, pad_id = _drawn_tokens(831, 4, 2, 8)
    return {"mask": to_array(ns.decoder_self_attention_mask(tgt, pad_id), "decoder_self_attention_mask(tgt, pad_id)", kind="b")}


def _e_dec_mask_drawn() -> Arrays:
    tgt, pad_id = _drawn_tokens(831, 4, 2, 8)
    n = tgt.shape[1]
    return {"mask": (tgt.numpy() != pad_id)[:, None, None, :] & np.tril(np.ones((n, n), dtype=bool))[None, None]}


_add("8.3-drawn-tokens", "8.3", 2, _p_dec_mask_drawn, _e_dec_mask_drawn,
     "Combine both rules with a logical AND: padding_mask(tgt, pad_id) & causal_mask(tgt_len) -> shape (batch, 1, tgt_len, tgt_len).")


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
    loss = ns.label_smoothed_loss(logits, target, eps, args[4])
    return {"loss": to_array(loss, "label_smoothed_loss(logits, target, label_smoothing, pad_id)", kind="f")}


def _e_ls(args, eps) -> Arrays:
    logits, target = _ls_inputs(*args)
    v = logits.size(-1)
    loss = F.cross_entropy(logits.double().reshape(-1, v), target.reshape(-1), ignore_index=args[4], label_smoothing=eps)
    return {"loss": _f64(loss)}


_LS_HINT = ("Target distribution: (1 - eps) on the true class plus eps / vocab_size on EVERY class (the true one included), as "
            "F.cross_entropy(..., label_smoothing=eps) does; loss = -sum(target_dist * log_softmax(logits)); average over the "
            "non-padding positions only (target != pad_id). Return a 0-dim tensor.")
for _id, _args, _eps in (
    ("9.1-eps-0.1-with-padding", (901, 3, 6, 11, 0, 2), 0.1),
    ("9.1-eps-0-is-cross-entropy", (902, 2, 5, 7, 0, 1), 0.0),
    ("9.1-eps-0.3-pad-id-2", (903, 2, 4, 50, 2, 2), 0.3),
    ("9.1-no-padding", (904, 1, 8, 5, 0, 0), 0.1),
):
    _add(_id, "9.1", 2, partial(_p_ls, args=_args, eps=_eps), partial(_e_ls, _args, _eps), _LS_HINT, atol=1e-5)


def _p_ls_rejects(ns: ModuleType) -> Arrays:
    logits, target = _ls_inputs(905, 1, 3, 4, 0, 0)
    return {
        "raised_for_eps_1.5": _raises_value_error(lambda: ns.label_smoothed_loss(logits, target, 1.5, 0)),
        "raised_for_eps_-0.1": _raises_value_error(lambda: ns.label_smoothed_loss(logits, target, -0.1, 0)),
    }


_add("9.1-rejects-bad-label-smoothing", "9.1", 1, _p_ls_rejects,
     lambda: {"raised_for_eps_1.5": np.array(True), "raised_for_eps_-0.1": np.array(True)},
     "Raise ValueError naming label_smoothing when it is outside [0, 1].")

_NOAM_STEPS = {
    "9.2-paper-base-512-4000": ((1, 10, 100, 1000, 3999, 4000, 4001, 10000, 100000), 512, 4000),
    "9.2-d-128-warmup-400": ((1, 50, 399, 400, 401, 2000), 128, 400),
    "9.2-warmup-1": ((1, 2, 9, 1000), 64, 1),
}


def _p_noam(ns: ModuleType, key) -> Arrays:
    steps, d_model, warmup = _NOAM_STEPS[key]
    values = [to_array(ns.noam_lr(s, d_model, warmup), f"noam_lr({s}, {d_model}, {warmup})", kind="f") for s in steps]
    if any(v.shape != () for v in values):
        raise TypeError(f"noam_lr must return one number (a float); got shape {values[0].shape}")
    return {"lr": np.array([float(v) for v in values])}


def _e_noam(key) -> Arrays:
    steps, d_model, warmup = _NOAM_STEPS[key]
    return {"lr": np.array([d_model**-0.5 * min(s**-0.5, s * warmup**-1.5) for s in steps])}


_NOAM_HINT = ("lr = d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5) (paper equation 3): linear warm-up, then decay "
              "as 1/sqrt(step); the two branches meet at step == warmup_steps (about 6.99e-4 for d_model 512, warm-up 4000).")
for _id in _NOAM_STEPS:
    _add(_id, "9.2", 1, partial(_p_noam, key=_id), partial(_e_noam, _id), _NOAM_HINT, rtol=1e-6, atol=0.0)


def _p_noam_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_step_0": _raises_value_error(lambda: ns.noam_lr(0, 512, 4000)),
        "raised_for_warmup_0": _raises_value_error(lambda: ns.noam_lr(10, 512, 0)),
    }


_add("9.2-rejects-step-0", "9.2", 1, _p_noam_rejects, lambda: {"raised_for_step_0": np.array(True), "raised_for_warmup_0": np.array(True)},
     "Steps count from 1 (step**-0.5 is undefined at 0): raise ValueError naming step (or warmup_steps) when it is < 1.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_noam() -> tuple[list[int], int, int]:
    steps = [int(v) for v in _randint(921, 1, 30000, 6)]
    return steps, int(_randint(922, 16, 1025)), int(_randint(923, 1, 8000))


def _p_noam_drawn(ns: ModuleType) -> Arrays:
    steps, d_model, warmup = _drawn_noam()
    values = [to_array(ns.noam_lr(s, d_model, warmup), f"noam_lr({s}, {d_model}, {warmup})", kind="f") for s in steps]
    if any(v.shape != () for v in values):
        raise TypeError(f"noam_lr must return one number (a float); got shape {values[0].shape}")
    return {"lr": np.array([float(v) for v in values])}


def _e_noam_drawn() -> Arrays:
    steps, d_model, warmup = _drawn_noam()
    return {"lr": np.array([d_model**-0.5 * min(s**-0.5, s * warmup**-1.5) for s in steps])}


_add("9.2-drawn-steps", "9.2", 1, _p_noam_drawn, _e_noam_drawn, _NOAM_HINT, rtol=1e-6, atol=0.0)

_SHIFT = {
    "9.3-batch-2": ([[5, 6, 7, 2, 0], [8, 9, 2, 0, 0]], 1),
    "9.3-length-1": ([[4]], 1),
    "9.3-bos-3": ([[4, 5, 6, 7, 8, 2], [9, 10, 2, 0, 0, 0], [11, 2, 0, 0, 0, 0]], 3),
}


def _p_shift(ns: ModuleType, key) -> Arrays:
    tgt_list, bos_id = _SHIFT[key]
    tgt = torch.tensor(tgt_list)
    out = to_array(ns.shift_right(tgt, bos_id), "shift_right(tgt, bos_id)", kind="i")
    return {"decoder_input": out, "tgt_unchanged": np.array(tgt.tolist() == tgt_list)}


def _e_shift(key) -> Arrays:
    tgt_list, bos_id = _SHIFT[key]
    t = np.array(tgt_list, dtype=np.int64)
    return {"decoder_input": np.concatenate([np.full((t.shape[0], 1), bos_id), t[:, :-1]], axis=1), "tgt_unchanged": np.array(True)}


for _id in _SHIFT:
    _add(_id, "9.3", 1, partial(_p_shift, key=_id), partial(_e_shift, _id),
         "decoder_input = [bos_id, y_1, ..., y_{n-1}]: prepend bos_id to every row and drop the last column, so the length stays "
         "tgt_len; build a new tensor (torch.cat) instead of modifying tgt in place.")


def _p_shift_rejects(ns: ModuleType) -> Arrays:
    return {"raised_for_1d_tgt": _raises_value_error(lambda: ns.shift_right(torch.tensor([4, 5, 2]), 1))}


_add("9.3-rejects-1d-tgt", "9.3", 1, _p_shift_rejects, lambda: {"raised_for_1d_tgt": np.array(True)},
     "Raise ValueError naming tgt when it is not 2-D (batch, tgt_len).")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_shift() -> tuple[torch.Tensor, int]:
    return _randint(931, 3, 20, 3, 7), int(_randint(932, 0, 3))


def _p_shift_drawn(ns: ModuleType) -> Arrays:
    tgt, bos_id = _drawn_shift()
    before = tgt.clone()
    out = to_array(ns.shift_right(tgt, bos_id), "shift_right(tgt, bos_id)", kind="i")
    return {"decoder_input": out, "tgt_unchanged": np.array(bool(torch.equal(tgt, before)))}


def _e_shift_drawn() -> Arrays:
    tgt, bos_id = _drawn_shift()
    t = tgt.numpy()
    return {"decoder_input": np.concatenate([np.full((t.shape[0], 1), bos_id), t[:, :-1]], axis=1), "tgt_unchanged": np.array(True)}


_add("9.3-drawn-tokens", "9.3", 1, _p_shift_drawn, _e_shift_drawn,
     "decoder_input = [bos_id, y_1, ..., y_{n-1}]: prepend bos_id to every row and drop the last column, so the length stays "
     "tgt_len; build a new tensor (torch.cat) instead of modifying tgt in place.")


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
HAND_GREEDY = [BOS, A, EOS]
HAND_BEAM2 = [BOS, B, EOS]


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


def _greedy_reference(step_fn: _StepFn, max_len: int) -> tuple[list[int], float]:
    seq, score = [BOS], 0.0
    for _ in range(max_len):
        logp = _logp(step_fn, seq)
        token = int(np.argmax(logp))
        seq.append(token)
        score += float(logp[token])
        if token == EOS:
            break
    return seq, score


def _exhaustive_reference(step_fn: _StepFn, max_len: int, length_penalty: float) -> tuple[list[int], float]:
    """The best finished-or-full-length sequence by enumeration of every sequence (what beam search with an
    unlimited beam finds); normalised score = sum of log-probs / n_generated ** length_penalty."""
    best: tuple[float, list[int]] | None = None
    for n in range(1, max_len + 1):
        for body in itertools.product(range(step_fn.vocab), repeat=n):
            if EOS in body[:-1] or (n < max_len and body[-1] != EOS):
                continue
            seq, score = [BOS], 0.0
            for token in body:
                score += float(_logp(step_fn, seq)[token])
                seq.append(token)
            value = score / n**length_penalty
            if best is None or value > best[0]:
                best = (value, seq)
    assert best is not None
    return best[1], best[0]


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


def _beam_is_clear(kind, seed, vocab, max_len, beam_size, length_penalty, live_best=False) -> bool:
    """Beam 1: a clear greedy path. Unlimited beam: a clear winner (gap > 1e-3) that greedy misses
    (and, with ``live_best``, one that never produced <eos>)."""
    if kind == "hand":
        return True
    if beam_size == 1:
        return _greedy_is_clear(kind, seed, vocab, max_len, 0.0)
    fn = _StepFn(kind, seed, vocab, max_len, max_calls=10**6)
    values = []
    for n in range(1, max_len + 1):
        for body in itertools.product(range(vocab), repeat=n):
            if EOS in body[:-1] or (n < max_len and body[-1] != EOS):
                continue
            seq, score = [BOS], 0.0
            for token in body:
                score += float(_logp(fn, seq)[token])
                seq.append(token)
            values.append((score / n**length_penalty, seq))
    values.sort(key=lambda item: item[0])
    best = values[-1][1]
    greedy, _ = _greedy_reference(_StepFn(kind, seed, vocab, max_len, max_calls=10**6), max_len)
    return (values[-1][0] - values[-2][0] > 1e-3 and greedy != best
            and (not live_best or best[-1] != EOS))


def _p_greedy(ns: ModuleType, args) -> Arrays:
    kind, seed, vocab, max_len, eos_penalty = args
    fn = _StepFn(kind, seed, vocab, max_len, eos_penalty=eos_penalty)
    out = ns.greedy_decode(fn, BOS, EOS, max_len)
    return {"tokens": to_array(out, f"greedy_decode(step_fn, bos_id={BOS}, eos_id={EOS}, max_len={max_len})", kind="i")}


def _e_greedy(kind, seed, vocab, max_len, eos_penalty) -> Arrays:
    if kind == "hand":
        return {"tokens": np.array(HAND_GREEDY, dtype=np.int64)}
    seq, _ = _greedy_reference(_StepFn(kind, seed, vocab, max_len, eos_penalty=eos_penalty), max_len)
    return {"tokens": np.array(seq, dtype=np.int64)}


_GREEDY_HINT = ("Start from [bos_id]; repeat up to max_len times: logits = step_fn(prefix), append argmax; stop right after appending "
                "eos_id. Return a 1-D torch.long tensor that starts with bos_id (and ends with eos_id if it was produced).")
for _id, _args in {
    "10.1-hand-table": ("hand", 0, 4, 5, 0.0),
    "10.1-random-table": ("random", 1001, 7, 8, 0.0),
    "10.1-stops-at-max-len": ("random", 1002, 6, 4, 100.0),
    "10.1-random-vocab-12": ("random", 1003, 12, 10, 0.0),
}.items():
    _add(_id, "10.1", 2, partial(_p_greedy, args=_args), partial(_e_greedy, *_args), _GREEDY_HINT,
         robust=partial(_greedy_is_clear, *_args))


def _p_beam(ns: ModuleType, args) -> Arrays:
    kind, seed, vocab, max_len, beam_size, length_penalty = args
    fn = _StepFn(kind, seed, vocab, max_len, max_calls=20000)
    tokens, score = _pair(
        ns.beam_search(fn, BOS, EOS, max_len, beam_size, length_penalty),
        f"beam_search(step_fn, bos_id, eos_id, max_len={max_len}, beam_size={beam_size}, length_penalty={length_penalty})",
        ("tokens", "score"),
    )
    return {"tokens": to_array(tokens, "tokens", kind="i"), "score": to_array(score, "score", kind="f").reshape(())}


def _e_beam(kind, seed, vocab, max_len, beam_size, length_penalty) -> Arrays:
    fn = _StepFn(kind, seed, vocab, max_len, max_calls=10**6)
    if kind == "hand" and beam_size == 2:
        seq, score = HAND_BEAM2, math.log(0.40) + math.log(0.89)  # worked by hand above
        score /= (len(seq) - 1) ** length_penalty
    elif beam_size == 1:
        seq, score = _greedy_reference(fn, max_len)
        score /= (len(seq) - 1) ** length_penalty
    else:
        assert beam_size >= vocab**max_len, "expected values need beam 1, the hand table, or an unlimited beam"
        seq, score = _exhaustive_reference(fn, max_len, length_penalty)
    return {"tokens": np.array(seq, dtype=np.int64), "score": np.array(score)}


_BEAM_HINT = ("Keep (tokens, score) hypotheses with score = sum of log_softmax(step_fn(prefix))[token]. Each step, extend every "
              "live hypothesis by every token, keep the beam_size best candidates; a candidate that ends in eos_id is finished. Stop "
              "when none is live or after max_len steps; return the best of the finished (and, at max_len, live) hypotheses by "
              "score / n_generated**length_penalty, with that normalised score.")
# The random tables are seeded so that greedy decoding does NOT find the best sequence; with
# length_penalty 1 (seed 1019) the best is a hypothesis still live at max_len (no <eos>).
for _id, _args in {
    "10.2-hand-table-beam-2-beats-greedy": ("hand", 0, 4, 5, 2, 0.0),
    "10.2-beam-1-equals-greedy-hand": ("hand", 0, 4, 5, 1, 0.0),
    "10.2-beam-1-equals-greedy-random": ("random", 1011, 6, 6, 1, 0.0),
    "10.2-unlimited-beam-is-exhaustive": ("random", 1023, 4, 3, 64, 0.0),
    "10.2-unlimited-beam-length-penalty-1": ("random", 1019, 4, 3, 64, 1.0),
    "10.2-unlimited-beam-length-penalty-0.6": ("random", 1035, 3, 4, 81, 0.6),
}.items():
    _add(_id, "10.2", 2, partial(_p_beam, args=_args), partial(_e_beam, *_args), _BEAM_HINT, atol=1e-5,
         robust=partial(_beam_is_clear, *_args, live_best=_id.endswith("length-penalty-1")))

def _p_beam_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_beam_size_0": _raises_value_error(lambda: ns.beam_search(_StepFn("hand"), BOS, EOS, 5, 0)),
        "raised_for_max_len_0": _raises_value_error(lambda: ns.beam_search(_StepFn("hand"), BOS, EOS, 0, 2)),
    }


_add("10.2-rejects-beam-size-0", "10.2", 1, _p_beam_rejects,
     lambda: {"raised_for_beam_size_0": np.array(True), "raised_for_max_len_0": np.array(True)},
     "Raise ValueError (naming the argument) when beam_size < 1 or max_len < 1, before decoding anything.")

#: hand-worked filtering example: probabilities 0.10, 0.50, 0.05, 0.20, 0.15 (in this order)
HAND_PROBS = (0.10, 0.50, 0.05, 0.20, 0.15)
_FILTER_SPECS = {
    # id: (logits source, top_k, top_p)
    "10.3-hand-top-p-0.8": ("hand", 0, 0.8),
    "10.3-hand-top-k-2": ("hand", 2, 1.0),
    "10.3-hand-top-k-4-then-top-p-0.72": ("hand", 4, 0.72),
    "10.3-random-top-k-10": ((1021, (4, 50)), 10, 1.0),
    "10.3-random-top-p-0.9": ((1022, (3, 20)), 0, 0.9),
    "10.3-random-3d-top-k-5-top-p-0.5": ((1023, (2, 3, 30)), 5, 0.5),
    "10.3-no-filtering": ((1024, (2, 8)), 0, 1.0),
    "10.3-top-k-larger-than-vocab": ((1025, (2, 6)), 10, 1.0),
}
#: the hand-worked kept masks (expected values only)
_FILTER_HAND_KEPT = {
    "10.3-hand-top-p-0.8": (False, True, False, True, True),  # 0.5 + 0.2 = 0.7 < 0.8, + 0.15 = 0.85
    "10.3-hand-top-k-2": (False, True, False, True, False),
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


def _filter_reference(logits: np.ndarray, top_k: int, top_p: float) -> np.ndarray:
    """Kept mask: top-k first, then top-p on the renormalised remaining probabilities (closed form per row)."""
    flat = logits.reshape(-1, logits.shape[-1])
    keep = np.ones_like(flat, dtype=bool)
    for r, row in enumerate(flat):
        order = np.argsort(-row, kind="stable")
        if 0 < top_k < row.size:
            keep[r, order[top_k:]] = False
        if top_p < 1.0:
            p = np.exp(row - row.max()) * keep[r]
            p = p / p.sum()
            before = np.cumsum(p[order]) - p[order]  # probability mass of the strictly better tokens
            keep[r, order[before >= top_p]] = False
    return keep.reshape(logits.shape)


def _filter_is_clear(key) -> bool:
    """Every row keeps clear of the top-p boundary (> 1e-4) and has distinct logits around the k-th."""
    source, top_k, top_p = _FILTER_SPECS[key]
    if source == "hand":
        return True
    logits = _filter_logits(key).double().numpy()
    rows = logits.reshape(-1, logits.shape[-1])
    if top_k and np.diff(np.sort(rows, axis=-1), axis=-1).min() <= 1e-6:
        return False
    if top_p >= 1.0:
        return True
    for row in rows:
        order = np.argsort(-row)
        keep = np.ones_like(row, dtype=bool)
        if 0 < top_k < row.size:
            keep[order[top_k:]] = False
        p = np.exp(row - row.max()) * keep
        p /= p.sum()
        before = np.cumsum(p[order]) - p[order]
        if np.min(np.abs(before[keep[order]] - top_p)) <= 1e-4:
            return False
    return True


def _p_filter(ns: ModuleType, key) -> Arrays:
    _, top_k, top_p = _FILTER_SPECS[key]
    logits = _filter_logits(key)
    out = ns.top_k_top_p_filtering(logits, top_k, top_p)
    arr = to_array(out, f"top_k_top_p_filtering(logits, top_k={top_k}, top_p={top_p})", kind="f")
    kept = np.isfinite(arr)
    return {"kept": kept, "values": np.where(kept, arr, 0.0), "removed_are_minus_inf": np.array(bool(np.all(arr[~kept] == -np.inf)))}


def _e_filter(key) -> Arrays:
    _, top_k, top_p = _FILTER_SPECS[key]
    hand = _FILTER_HAND_KEPT.get(key)
    logits = _filter_logits(key).double().numpy()
    kept = np.array(hand) if hand is not None else _filter_reference(logits, top_k, top_p)
    return {"kept": kept, "values": np.where(kept, logits, 0.0), "removed_are_minus_inf": np.array(True)}


_FILTER_HINT = ("Set removed logits to float('-inf') and leave kept ones unchanged. top_k: keep the k largest per row (0 = off, "
                "k >= vocab keeps all). Then top_p on the softmax of the REMAINING logits: sort descending and keep a token while "
                "the probability of the tokens before it is < top_p (the best token is always kept).")
for _id in _FILTER_SPECS:
    _add(_id, "10.3", 1, partial(_p_filter, key=_id), partial(_e_filter, _id), _FILTER_HINT,
         robust=partial(_filter_is_clear, _id))


def _p_filter_rejects(ns: ModuleType) -> Arrays:
    logits = _randn(1026, 5)
    return {
        "raised_for_top_p_0": _raises_value_error(lambda: ns.top_k_top_p_filtering(logits, 0, 0.0)),
        "raised_for_top_p_1.5": _raises_value_error(lambda: ns.top_k_top_p_filtering(logits, 0, 1.5)),
        "raised_for_top_k_-1": _raises_value_error(lambda: ns.top_k_top_p_filtering(logits, -1, 1.0)),
    }


_add("10.3-rejects-bad-arguments", "10.3", 1, _p_filter_rejects,
     lambda: {k: np.array(True) for k in ("raised_for_top_p_0", "raised_for_top_p_1.5", "raised_for_top_k_-1")},
     "Raise ValueError naming the argument when top_p is outside (0, 1] or top_k is negative.")


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
