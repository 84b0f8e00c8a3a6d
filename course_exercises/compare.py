"""Read a child's result arrays without trusting them, and compare them with the reference.

Runs in the grader's parent, which never runs student code. Every array comes
from the child's result message (base64 ``.npy`` bytes, see
:mod:`course_grader.child`) or from a file the grader wrote; it is
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
import re
from dataclasses import dataclass

import numpy as np

__all__ = ["ResultError", "CaseVerdict", "read_array", "read_input_array", "decode_arrays",
           "compare_arrays", "describe_dtype", "judge_case", "error_line", "raised_type", "raised_not_implemented",
           "raised_memory_error",
           "is_rejection_case", "is_edge_case", "unearned_passes", "REJECTION_ALONE", "FIXED_ALONE"]

_ALLOWED = {np.dtype(np.float64): "f", np.dtype(np.int64): "i", np.dtype(np.bool_): "b"}
_INPUT_DTYPES = {*_ALLOWED, np.dtype(np.float32)}
#: dtype kind -> the word the messages use
_KIND_NAMES = {"f": "float", "i": "int", "u": "int", "b": "bool"}
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
        # numpy's words repeat the child's header (its dtype text, field names ...): only the exception's
        # type is said, never its text
        why = type(exc).__name__ if type(exc).__module__ == "builtins" else "an error"
        raise ResultError(f"the result cannot be read as an array (numpy raised {why} on its header)") from None
    if type(arr) is not np.ndarray:
        raise ResultError("the result is not a plain array")
    if arr.dtype not in allowed:
        raise ResultError(f"the result has {describe_dtype(arr.dtype)}; expected float64, int64 or bool")
    return arr


def describe_dtype(dtype: np.dtype) -> str:
    """A dtype in the grader's words without any of its text: a structured or subarray dtype can carry field
    names (and titles) of any length and content, chosen by the child, so only the kind letter and the
    item size are said (``"a structured dtype (kind V, 3008 bytes per item)"``, ``"dtype kind f, 4 bytes"``)."""
    dtype = np.dtype(dtype)
    if dtype.names is not None or dtype.subdtype is not None or dtype.kind in "VOMmSUa":
        what = "a structured dtype" if dtype.names is not None else "a dtype"
        return f"{what} (kind {dtype.kind}, {dtype.itemsize} bytes per item)"
    # a plain numeric dtype: its name is numpy's (float32, int16, complex128 ...), never the child's text
    return f"dtype {dtype.name}"


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
        except ResultError as exc:  # first: a ResultError is a ValueError, and it says what is wrong
            out[key] = exc
        except (ValueError, UnicodeEncodeError, binascii.Error):
            out[key] = ResultError("the result is not base64 .npy data")
    return out


def compare_arrays(key: str, got: np.ndarray, ref: np.ndarray, rtol: float, atol: float, *,
                   verbose: bool = True) -> str | None:
    """Compare one produced array with its reference; ``None`` if it passes, else a teaching message.

    The one comparator of the course: the student's check command
    (``compare`` of the cases file) and the grader (:func:`judge_case`) both
    call it, so that honest work scores the same in both.

    Rules: same dtype kind (float, integer or bool), same shape; integers and
    bools must be equal; for floats the reference decides:

    * a finite reference entry needs a finite entry within
      ``atol + rtol * |ref|`` (:func:`numpy.isclose`): a NaN or an infinity
      there fails, whatever the tolerances;
    * a non-finite reference entry must be matched exactly: ``-inf`` (e.g. a
      removed logit) by ``-inf``, ``inf`` by ``inf``, and NaN by NaN (the
      reference is the solution's output: if it is NaN, NaN is the answer).

    Args:
        key: the result's name, used in the message.
        got: the produced array (any numpy dtype; the kinds ``f``/``i``/``u``/``b`` compare).
        ref: the reference (``float64``, ``int64`` or ``bool``).
        rtol, atol: the case's tolerances for float keys.
        verbose: also print whole small arrays (and the reference's first
            entries on a shape mismatch). The check command, whose student
            has the expected values in the cases file anyway, passes ``True``;
            the grader passes ``False`` (one reference entry per failure), so
            its feedback does not become a table of answers for inputs that a
            reused reference (``--reference``) keeps the same.
    """
    got, ref = np.asarray(got), np.asarray(ref)
    want = _KIND_NAMES[ref.dtype.kind]
    if got.dtype.kind not in _KIND_NAMES or got.dtype.names is not None:
        return f"`{key}` has {describe_dtype(got.dtype)}; expected {want}."
    if _KIND_NAMES[got.dtype.kind] != want:
        hint = " (a torch.bool tensor: True or False in each entry)" if want == "bool" else ""
        if want == "int" and got.dtype.kind == "f" and bool(np.all(np.isfinite(got))) and bool(np.all(got == np.round(got))):
            hint = " (its values are whole numbers: return integers - divide with //, not /, which gives a float; " \
                   "or convert with int(...) / .long())"
        return f"`{key}` has dtype kind {_KIND_NAMES[got.dtype.kind]}; expected {want}{hint}."
    if got.shape != ref.shape:
        msg = f"`{key}` has shape {tuple(got.shape)}; expected {tuple(ref.shape)}."
        if got.size and ref.size:
            msg += f"\n      first entries: got {_head(got)}" + (f", expected {_head(ref)}" if verbose else "")
        return msg
    if want == "float":
        return _compare_floats(key, got, ref, rtol, atol, verbose)
    if ref.ndim == 0 and want == "bool":
        return _compare_flag(key, bool(got), bool(ref))
    return _compare_exact(key, got, ref, verbose)


def _compare_floats(key: str, got: np.ndarray, ref: np.ndarray, rtol: float, atol: float,
                    verbose: bool = True) -> str | None:
    """:func:`compare_arrays` for float arrays of the same shape."""
    finite_ref = np.isfinite(ref)
    bad_nonfinite = finite_ref & ~np.isfinite(got)
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.isclose(got, ref, rtol=rtol, atol=atol)
    special_wrong = ~finite_ref & ~((got == ref) | (np.isnan(got) & np.isnan(ref)))
    wrong = (finite_ref & ~close) | bad_nonfinite | special_wrong
    if not wrong.any():
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(np.isfinite(got) & finite_ref, np.abs(got - ref), np.inf)
    worst = np.unravel_index(int(np.argmax(np.where(wrong, diff, -1.0))), ref.shape) if ref.ndim else ()
    idx = tuple(int(i) for i in worst)
    tolerances = f"rtol={rtol:g}, atol={atol:g}"
    if ref.ndim == 0:
        msg = f"`{key}` is {got.item()!r}; expected {ref.item()!r} ({tolerances})."
    else:
        msg = (f"`{key}` differs at {int(wrong.sum())} of {ref.size} entries ({tolerances}). "
               f"Worst at index {idx}: got {got[idx].item()!r}, expected {ref[idx].item()!r}.")
    if bad_nonfinite.any():
        msg += f" {int(bad_nonfinite.sum())} entries are NaN or infinite where a finite number was expected."
    if verbose and 1 < ref.size <= 12:
        msg += f"\n      got      {_fmt(got)}\n      expected {_fmt(ref)}"
    return msg


def _compare_flag(key: str, got: bool, ref: bool) -> str | None:
    """:func:`compare_arrays` for one bool; a ``raised_for_*`` key says which ``ValueError`` is missing."""
    if got == ref:
        return None
    if key.startswith("raised_for_"):
        return f"ValueError was {'not ' if ref else ''}raised for {_situation(key[len('raised_for_'):])}."
    if key.startswith("message_names_") and ref:
        words = " and ".join(f"`{w}`" for w in key[len("message_names_"):].split("_and_"))
        return f"a ValueError was raised, but its message does not name {words} (the exercise asks for it)."
    return f"`{key}` is {got}; expected {ref}."


def _compare_exact(key: str, got: np.ndarray, ref: np.ndarray, verbose: bool = True) -> str | None:
    """:func:`compare_arrays` for integer and bool arrays of the same shape."""
    wrong = got != ref
    if not wrong.any():
        return None
    if ref.ndim == 0:  # one number: say both (there is no index to name)
        return f"`{key}` is {got.item()!r}; expected {ref.item()!r}."
    first = tuple(int(i) for i in np.argwhere(wrong)[0])
    where = f"; first at index {first}" if first else ""
    msg = f"`{key}` differs at {int(wrong.sum())} of {ref.size} entries{where}"
    msg += f": got {got[first].item()!r}, expected {ref[first].item()!r}." if first else "."
    if verbose and ref.size <= 64:
        msg += f"\n      got      {_fmt(got)}\n      expected {_fmt(ref)}"
    return msg


def _fmt(x: np.ndarray) -> str:
    return np.array2string(np.asarray(x), precision=6, threshold=40, max_line_width=100)


def _head(x: np.ndarray, n: int = 4) -> str:
    """The first ``n`` entries of ``x`` (flattened), e.g. ``[0.1, 0.2, 0.3, 0.4, ...]``."""
    flat = np.asarray(x).reshape(-1)
    items = [repr(round(float(v), 6)) if flat.dtype.kind == "f" else repr(v.item()) for v in flat[:n]]
    return "[" + ", ".join(items) + (", ..." if flat.size > n else "") + "]"


def _situation(text: str) -> str:
    """``"d_model_0"`` -> ``"d_model = 0"``; ``"indivisible_d_model"`` -> ``"indivisible d_model"``."""
    m = re.fullmatch(r"(d_model|d_k|max_len|top_k|top_p|warmup|step|size|eps|beam_size)_(-?[\d.]+)", text)
    if m:
        return f"{m.group(1)} = {m.group(2)}"
    for ident in ("vocab_size", "d_model", "d_k", "v_cache", "k_cache"):
        text = text.replace(ident, ident.replace("_", "\0"))
    return text.replace("_", " ").replace("\0", "_")


@dataclass
class CaseVerdict:
    """The parent's verdict on one case of one submission.

    Attributes:
        case_id, exercise, function: which case.
        points, max_points: earned (``max_points`` or 0) and possible.
        passed: all keys matched.
        message: the teaching message (empty when passed).
        child_error: the error text the child recorded (untrusted; feedback only).
        note: the grader's note on a case run with a stand-in (:func:`.standins` words).
        held: why a case that passed earns nothing yet - ``"rejection"`` (:data:`REJECTION_ALONE`) or
            ``"fixed"`` (:data:`FIXED_ALONE`), set by the grader from :func:`unearned_passes`, else ``""``.
            The reports read this field, never the message text (which may quote what the child sent).
    """

    case_id: str
    exercise: str
    function: str
    points: int
    max_points: int
    passed: bool
    message: str
    child_error: str | None = None
    note: str = ""
    held: str = ""


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
        msg = compare_arrays(key, got, reference[key], float(case["rtol"]), float(case["atol"]), verbose=False)
        if msg:
            failed = True
            problems.append(msg)
    if not failed and reference:
        verdict.points, verdict.passed = int(case["points"]), True
        return verdict
    lines = []
    if error:
        lines.append(error_line(error))
    elif not message:
        lines.append({"timeout": "the chapter ran out of time (an endless loop?) and was stopped",
                      "crashed": "the process stopped before this case was recorded (sys.exit / os._exit / a crash)",
                      "memory": "the process ran out of memory"}.get(chapter_status or "", "no result was recorded"))
    lines.extend(problems)
    verdict.message = head + ":\n  - " + "\n  - ".join(lines) + f"\n  Hint: {case['hint']}"
    return verdict


#: a return-type problem as the child words it (``cases.ReturnTypeError``: ``f(...) returned list; return ...``)
_RETURNED = re.compile(r"^[\w.]+(?:\(.*?\))? returned .+; return ")


def error_line(error: str) -> str:
    """The grader's words for a case whose run recorded ``error`` (the child's text, untrusted, is never part
    of them: the reports quote it after the grader's lines, see :mod:`.quoting`)."""
    if _RETURNED.match(error):
        return "your function returned a value of the wrong type or shape (what it returned is described below)"
    if raised_not_implemented(error):
        return "your code raised NotImplementedError (not written yet?)"
    return "your code raised an error (its text is quoted below)"


def raised_type(error: str | None) -> str:
    """The exception type the child's runner put at the start of ``error`` (``"KeyError: 'x'"`` ->
    ``"KeyError"``; the runner writes ``f"{type(exc).__name__}: {exc}"``), else ``""``. Only the first token
    counts: a word later in the text (``KeyError: 'NotImplementedError'``) is the exception's message."""
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)(?::|$|\n)", error or "")
    return m.group(1) if m else ""


def raised_memory_error(error: str | None) -> bool:
    """Whether the recorded exception's type is a ``MemoryError`` by its name: ``MemoryError``, numpy's
    ``_ArrayMemoryError``, torch's ``OutOfMemoryError`` (the type name, never the message's words)."""
    return raised_type(error).endswith("MemoryError")


def raised_not_implemented(error: str | None) -> bool:
    """Whether the child's runner recorded a ``NotImplementedError`` (the stub) as the case's exception."""
    return raised_type(error) == "NotImplementedError"


#: why a passed rejection case earns nothing yet (shown to the student)
REJECTION_ALONE = ("raising ValueError here is right, but no general case of this exercise with inputs drawn for "
                   "this run passes yet: this check counts once the function also works on good input (a function that "
                   "raises for every input would pass it)")
#: why a passed case with fixed inputs earns nothing yet (shown to the student)
FIXED_ALONE = ("this case's inputs are fixed (and public): it counts once a general case of this exercise with "
               "inputs drawn for this run passes too (a table of answers would pass it)")


def is_rejection_case(case_id: str) -> bool:
    """Whether a case only checks that bad input raises ``ValueError`` (its id has ``-rejects-``)."""
    return "-rejects-" in case_id


def is_edge_case(case_id: str) -> bool:
    """Whether a drawn case is a special case that a partial answer passes (its id has ``-edge-``).

    Example: exactly one window, or as many key/value heads as query heads,
    where code that ignores the exercise's point still gives the right value.
    It earns its own points but does not unlock the fixed and rejection cases.
    """
    return "-edge-" in case_id


def unearned_passes(results) -> dict[str, str]:
    """Passed cases that earn nothing yet, with the reason.

    Args:
        results: ``(case_id, exercise, passed, drawn)`` of one submission;
            ``drawn``: the case's inputs are drawn per run (not fixed).

    A function that raises ``ValueError`` for every input passes every
    rejection case, and a table of answers passes every case with fixed
    inputs. Such passes count only once the exercise also passes a general
    value case whose inputs were drawn for this run (not an edge case,
    :func:`is_edge_case`). The student's check command and the grader both
    apply this rule.
    """
    results = list(results)
    solved = {ex for cid, ex, ok, drawn in results
              if ok and drawn and not is_rejection_case(cid) and not is_edge_case(cid)}
    return {cid: REJECTION_ALONE if is_rejection_case(cid) else FIXED_ALONE
            for cid, ex, ok, drawn in results
            if ok and ex not in solved and (is_rejection_case(cid) or not drawn)}
