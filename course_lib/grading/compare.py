"""Read a child's result arrays without trusting them, and compare them with the reference.

Runs in the grader's parent, which never runs student code. Every array comes
from the child's result message (base64 ``.npy`` bytes, see
:mod:`course_lib.grading.child`) or from a file the grader wrote; it is
checked to be a real ``.npy`` (not an ``.npz`` archive or a pickle), loaded
with ``allow_pickle=False``, size-capped, and must be a plain ``float64``,
``int64`` or ``bool`` array. It is then compared with the reference array of
the same key - computed by running the same case, on the same inputs, on the
course's ``solutions/`` - with the case's tolerances.

Source: the exercise/grader contract (``tests/exercises/CONTRACT.md``).
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass

import numpy as np

__all__ = ["ResultError", "CaseVerdict", "read_array", "read_input_array", "decode_arrays",
           "compare_arrays", "judge_case", "is_rejection_case", "unearned_passes", "REJECTION_ALONE", "FIXED_ALONE"]

_ALLOWED = {np.dtype(np.float64): "f", np.dtype(np.int64): "i", np.dtype(np.bool_): "b"}
_INPUT_DTYPES = {*_ALLOWED, np.dtype(np.float32)}
_KIND_WORDS = {"f": "float", "i": "integer", "b": "bool"}
MAX_ARRAY_BYTES = 64 << 20


class ResultError(ValueError):
    """A result file that is missing, not a regular file, too big or not a plain array."""


def read_array(data: bytes, allowed=_ALLOWED) -> np.ndarray:
    """Parse ``.npy`` bytes into a plain ``float64``/``int64``/``bool`` array.

    Raises:
        ResultError: not ``.npy`` (e.g. an ``.npz`` zip or a pickle), object or
            structured dtype, another dtype, too big, or unreadable.
    """
    if len(data) > MAX_ARRAY_BYTES:
        raise ResultError(f"the result is too big ({len(data)} bytes)")
    if not data.startswith(b"\x93NUMPY"):
        raise ResultError("the result is not a .npy array")
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - any parse failure is a bad result
        raise ResultError(f"the result cannot be read as an array ({type(exc).__name__}: {exc})") from None
    if type(arr) is not np.ndarray:
        raise ResultError("the result is not a plain array")
    if arr.dtype not in allowed:
        raise ResultError(f"the result has dtype {arr.dtype}; expected float64, int64 or bool")
    return arr


def read_input_array(data: bytes) -> np.ndarray:
    """:func:`read_array` for a case's drawn inputs, which may also be ``float32``."""
    return read_array(data, _INPUT_DTYPES)


def decode_arrays(encoded: object, reader=read_array) -> dict[str, np.ndarray | ResultError]:
    """``{key: base64 .npy text}`` from a child's message -> ``{key: array or ResultError}`` (untrusted input)."""
    if not isinstance(encoded, dict):
        return {}
    out: dict[str, np.ndarray | ResultError] = {}
    for key, text in list(encoded.items())[:1000]:
        if not isinstance(key, str) or not isinstance(text, str) or len(key) > 200:
            continue
        if len(text) > MAX_ARRAY_BYTES * 4 // 3 + 8:
            out[key] = ResultError("the result is too big")
            continue
        try:
            out[key] = reader(base64.b64decode(text.encode("ascii"), validate=True))
        except (ValueError, UnicodeEncodeError, binascii.Error):
            out[key] = ResultError("the result is not base64 .npy data")
        except ResultError as exc:
            out[key] = exc
    return out


def compare_arrays(key: str, got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> str | None:
    """Compare one produced array with its reference; ``None`` if it passes, else a teaching message.

    Rules: same dtype kind (float/integer/bool), same shape; for floats every
    entry that is finite in the reference must be finite and within
    ``atol + rtol * |ref|`` (:func:`numpy.isclose`), and every non-finite
    reference entry (e.g. ``-inf`` for a removed logit) must be matched exactly;
    integers and bools must be equal.
    """
    kind, want = _ALLOWED[got.dtype], _ALLOWED[ref.dtype]
    if kind != want:
        hint = " (a mask must be a torch.bool tensor, True = may attend)" if want == "b" else ""
        return f"`{key}` is {_KIND_WORDS[kind]}; expected {_KIND_WORDS[want]}{hint}."
    if got.shape != ref.shape:
        return f"`{key}` has shape {tuple(got.shape)}; expected {tuple(ref.shape)}."
    if want != "f":
        wrong = got != ref
        if not wrong.any():
            return None
        first = tuple(int(i) for i in np.argwhere(wrong)[0]) if ref.ndim else ()
        where = f" first at index {first}:" if first else ""
        return (f"`{key}` differs at {int(wrong.sum())} of {ref.size} entries;{where} got {got[first]!r}, "
                f"expected {ref[first]!r}.")
    finite_ref = np.isfinite(ref)
    bad_nonfinite = finite_ref & ~np.isfinite(got)
    special_wrong = ~finite_ref & ~((got == ref) | (np.isnan(got) & np.isnan(ref)))
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.isclose(got, ref, rtol=rtol, atol=atol)
    wrong = (finite_ref & ~close) | bad_nonfinite | special_wrong
    if not wrong.any():
        return None
    idx = tuple(int(i) for i in np.argwhere(wrong)[0]) if ref.ndim else ()
    if finite_ref.any():
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(wrong & finite_ref & np.isfinite(got), np.abs(got - ref), -1.0)
        if diff.max() >= 0 and not bad_nonfinite.any():
            idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), ref.shape)) if ref.ndim else ()
    where = f" at index {idx}" if idx else ""
    msg = (f"`{key}` differs at {int(wrong.sum())} of {ref.size} entries (rtol={rtol:g}, atol={atol:g}); "
           f"e.g.{where}: got {got[idx]!r}, expected {ref[idx]!r}.")
    if bad_nonfinite.any():
        msg += f" {int(bad_nonfinite.sum())} entries are NaN or infinite where a finite number was expected."
    return msg


@dataclass
class CaseVerdict:
    """The parent's verdict on one case of one submission.

    Attributes:
        case_id, exercise, function: which case.
        points, max_points: earned (``max_points`` or 0) and possible.
        passed: all keys matched.
        message: the teaching message (empty when passed).
        child_error: the error text the child recorded (untrusted; feedback only).
    """

    case_id: str
    exercise: str
    function: str
    points: int
    max_points: int
    passed: bool
    message: str
    child_error: str | None = None


def judge_case(case: dict, message: dict | None, reference: dict[str, np.ndarray],
               chapter_status: str | None = None) -> CaseVerdict:
    """Score one case from the child's result message against the reference arrays.

    Args:
        case: the case's manifest entry (``id``, ``exercise``, ``function``,
            ``points``, ``rtol``, ``atol``, ``hint``).
        message: the child's message for this case (``{"arrays": ..., "error": ...}``;
            untrusted), or ``None`` when none arrived in the chapter's time.
        reference: ``{key: array}`` of the solutions on the same inputs.
        chapter_status: the parent's label of the chapter (``"timeout"``,
            ``"crashed"``, ...), used in the message when nothing was recorded.

    Returns:
        a :class:`CaseVerdict`; a case with no result scores 0.
    """
    head = f"Exercise {case['exercise']} ({case['function']}), case {case['id']}"
    verdict = CaseVerdict(case["id"], case["exercise"], case["function"], 0, int(case["points"]), False, "")
    message = message if isinstance(message, dict) else {}
    arrays = decode_arrays(message.get("arrays"))
    error = message.get("error") if isinstance(message.get("error"), str) else None
    verdict.child_error = error[:2400] if error else None
    problems, failed = [], False
    for key in sorted(reference):
        got = arrays.get(key, ResultError("no result was recorded"))
        if isinstance(got, ResultError):
            failed = True
            if error is None and message:
                problems.append(f"`{key}`: {got}")
            continue
        msg = compare_arrays(key, got, reference[key], float(case["rtol"]), float(case["atol"]))
        if msg:
            failed = True
            problems.append(msg)
    if not failed and reference:
        verdict.points, verdict.passed = int(case["points"]), True
        return verdict
    lines = []
    if error:
        lines.append(f"your code raised: {error}")
    elif not message:
        lines.append({"timeout": "the chapter ran out of time (an endless loop?) and was stopped",
                      "crashed": "the process stopped before this case was recorded (sys.exit / os._exit / a crash)",
                      "memory": "the process ran out of memory"}.get(chapter_status or "", "no result was recorded"))
    lines.extend(problems)
    verdict.message = head + ":\n  - " + "\n  - ".join(lines) + f"\n  Hint: {case['hint']}"
    return verdict


#: why a passed rejection case earns nothing yet (shown to the student)
REJECTION_ALONE = ("raising ValueError here is right, but no case of this exercise with inputs drawn for this run "
                   "passes yet: this check counts once the function also works on good input (a function that "
                   "raises for every input would pass it)")
#: why a passed case with fixed inputs earns nothing yet (shown to the student)
FIXED_ALONE = ("this case's inputs are fixed (and public): it counts once a case of this exercise with inputs "
               "drawn for this run passes too (a table of answers would pass it)")


def is_rejection_case(case_id: str) -> bool:
    """Whether a case only checks that bad input raises ``ValueError`` (its id has ``-rejects-``)."""
    return "-rejects-" in case_id


def unearned_passes(results) -> dict[str, str]:
    """Passed cases that earn nothing yet, with the reason.

    Args:
        results: ``(case_id, exercise, passed, drawn)`` of one submission;
            ``drawn``: the case's inputs are drawn per run (not fixed).

    A function that raises ``ValueError`` for every input passes every
    rejection case, and a table of answers passes every case with fixed
    inputs. Such passes count only once the exercise also passes a value case
    whose inputs were drawn for this run. The student's check command and the
    grader both apply this rule.
    """
    results = list(results)
    solved = {ex for cid, ex, ok, drawn in results if ok and drawn and not is_rejection_case(cid)}
    return {cid: REJECTION_ALONE if is_rejection_case(cid) else FIXED_ALONE
            for cid, ex, ok, drawn in results
            if ok and ex not in solved and (is_rejection_case(cid) or not drawn)}
