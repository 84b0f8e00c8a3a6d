"""The autograded exercise tests: one test per case of ``cases.py``.

Run on the student's notebooks (default ``exercises/``)::

    pytest tests/exercises/test_exercises.py                       # or: python -m course_lib.check
    pytest tests/exercises --notebooks solutions                   # CI: must all pass
    pytest tests/exercises --notebooks exercises --expect-stubs    # CI: every stub fails for the right reason
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import traceback
from pathlib import Path

import pytest

from course_lib.check import code_cell_numbers, load_cases, rename_cells
from course_lib.grading.extract import SubmissionError

cases = load_cases(Path(__file__).with_name("cases.py"))

_NAME_ERROR_NOTE = (
    "  Note: only the imports, def/class statements and LITERAL constants (numbers, strings, tuples of them) of your "
    "code cells are graded. A name set at the top level in any other way (e.g. NEG = torch.finfo(torch.float32).min, "
    "or a tensor made by demo code) does not exist when checking: compute it inside your function."
)


class CaseTimeout(BaseException):
    """The student's code ran past ``--case-timeout`` (a BaseException, so ``except Exception`` cannot swallow it)."""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise :class:`CaseTimeout` in the main thread after ``seconds`` (no limit when 0 or not possible here)."""
    usable = seconds > 0 and os.name == "posix" and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise CaseTimeout()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _cell_lines(notebook: Path) -> list[tuple[int, int]] | None:
    """Per line of the extracted source: ``(code cell number, line in that cell)``, or None when unknown."""
    try:  # private helpers of the extractor: fall back to the raw line numbers if they change
        from course_lib.grading.extract import _assemble, _extract

        path, futures, chunks = _extract(notebook)
        where = _assemble(path, futures, chunks)[1]
        numbers = code_cell_numbers(notebook)
        return [(numbers.get(cell, 0), line) if cell else (0, 0) for cell, line in where]
    except Exception:  # noqa: BLE001
        return None


def _student_frames(exc: BaseException, notebook: Path | None = None) -> str:
    """The traceback lines that lie in the student's extracted code (or the last 3, if none),
    with line numbers given as "code cell N, line M" of the notebook where possible."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if f.filename.startswith("<extracted from")]
    if not own:
        return "".join(traceback.format_list(frames[-3:])).rstrip()
    where = _cell_lines(notebook) if notebook is not None else None
    out = []
    for f in own:
        cell, line = where[f.lineno - 1] if where and f.lineno and 0 < f.lineno <= len(where) else (0, 0)
        place = f"code cell {cell}, line {line}" if cell else f"line {f.lineno} of the graded code"
        out.append(f"  {place}, in {f.name}")
        if f.line:
            out.append(f"    {f.line.strip()}")
    return "\n".join(out)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=pytest.mark.points(c.points)) for c in cases.CASES])
def test_exercise(case, student_namespace, expect_stubs, record_result, case_timeout, notebooks_folder, pytestconfig):
    head = f"Exercise {case.exercise} ({case.function}), case {case.id}"
    notebook = notebooks_folder / cases.NOTEBOOKS[case.chapter]

    def fail(kind: str, message: str):
        record_result(case, kind, message)
        pytest.fail(message, pytrace=False)

    timed_out = pytestconfig._timed_out_exercises
    if case.exercise in timed_out:
        fail("timeout", f"{head}: not run, because an earlier case of exercise {case.exercise} did not finish within "
                        f"the time limit ({case_timeout:g} s): is there an endless loop?")

    problem = None
    try:
        ns = student_namespace(case.chapter)
    except SubmissionError as exc:
        problem = ("error", f"{head}: the notebook cannot be checked.\n  {rename_cells(str(exc), notebook)}")
    if problem:
        fail(*problem)
    missing = [name for name in case.requires if not hasattr(ns, name)]
    if missing:
        fail("error", f"{head}: the notebook does not define {', '.join(missing)}. Keep the function name and signature "
                      f"given in the exercise, and save the notebook.")

    # pytest.fail is called outside the except blocks so that the report shows no chained traceback.
    if expect_stubs:
        try:
            case.produce(ns)
            problem = ("failed", f"{head}: the untouched stub returned a value instead of raising NotImplementedError, "
                                 f"so an empty submission could earn points.")
        except NotImplementedError as exc:
            if f"Exercise {case.exercise}" not in str(exc):
                problem = ("failed", f"{head}: the stub raised NotImplementedError({str(exc)!r}), which does not name "
                                     f"'Exercise {case.exercise}'.")
            else:
                stub_message = str(exc)
        except Exception as exc:  # noqa: BLE001 - report anything else as a broken stub or case
            problem = ("failed", f"{head}: expected the untouched stub to raise NotImplementedError, got "
                                 f"{type(exc).__name__}: {exc}\n{_student_frames(exc, notebook)}")
        if problem:
            fail(*problem)
        record_result(case, "not_implemented", stub_message)
        return

    try:
        with _time_limit(case_timeout):
            produced = case.produce(ns)
    except CaseTimeout:
        timed_out.add(case.exercise)
        problem = ("timeout", f"{head}: did not finish within the time limit ({case_timeout:g} s): is there an endless "
                              f"loop (e.g. a loop that never reaches its stop condition)?\n  Hint: {case.hint}")
    except NotImplementedError as exc:
        problem = ("not_implemented", f"{head}: not implemented yet ({exc}).")
    except Exception as exc:  # noqa: BLE001 - the student's code may raise anything
        note = f"\n{_NAME_ERROR_NOTE}" if isinstance(exc, NameError) else ""
        problem = ("failed", f"{head}: calling your code raised {type(exc).__name__}: {exc}\n"
                             f"{_student_frames(exc, notebook)}{note}\n  Hint: {case.hint}")
    if problem:
        fail(*problem)
    message = cases.compare(case, produced, case.expected())
    if message:
        fail("failed", message)
    record_result(case, "passed")
