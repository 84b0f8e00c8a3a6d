"""The autograded exercise tests: one test per case of ``cases.py``.

Run on the student's notebooks (default ``exercises/``)::

    pytest tests/exercises/test_exercises.py                       # or: python -m course_lib.check
    pytest tests/exercises --notebooks solutions                   # CI: must all pass
    pytest tests/exercises --notebooks exercises --expect-stubs    # CI: every stub fails for the right reason
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

from course_lib.check import load_cases
from course_lib.grading.extract import SubmissionError

cases = load_cases(Path(__file__).with_name("cases.py"))


def _student_frames(exc: BaseException) -> str:
    """The traceback lines that lie in the student's extracted code (or all, if none)."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if f.filename.startswith("<extracted from")]
    lines = traceback.format_list(own or frames[-3:])
    return "".join(lines).rstrip()


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=pytest.mark.points(c.points)) for c in cases.CASES])
def test_exercise(case, student_namespace, expect_stubs, record_result):
    head = f"Exercise {case.exercise} ({case.function}), case {case.id}"

    def fail(kind: str, message: str):
        record_result(case, kind, message)
        pytest.fail(message, pytrace=False)

    problem = None
    try:
        ns = student_namespace(case.chapter)
    except SubmissionError as exc:
        problem = ("error", f"{head}: the notebook cannot be checked.\n  {exc}")
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
                                 f"{type(exc).__name__}: {exc}\n{_student_frames(exc)}")
        if problem:
            fail(*problem)
        record_result(case, "not_implemented", stub_message)
        return

    try:
        produced = case.produce(ns)
    except NotImplementedError as exc:
        problem = ("not_implemented", f"{head}: not implemented yet ({exc}).")
    except Exception as exc:  # noqa: BLE001 - the student's code may raise anything
        problem = ("failed", f"{head}: calling your code raised {type(exc).__name__}: {exc}\n{_student_frames(exc)}\n"
                             f"  Hint: {case.hint}")
    if problem:
        fail(*problem)
    message = cases.compare(case, produced, case.expected())
    if message:
        fail("failed", message)
    record_result(case, "passed")
