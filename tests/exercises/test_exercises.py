"""The autograded exercise tests: one test per case of the registry (``course_exercises/cases/``).

Run on the student's notebooks (default ``exercises/``)::

    pytest tests/exercises/test_exercises.py                       # or: python -m course_exercises.check
    pytest tests/exercises --notebooks solutions                   # CI: must all pass
    pytest tests/exercises --notebooks exercises --expect-stubs    # CI: every stub fails for the right reason

Each test is :func:`course_exercises.check_runner.run_case`, the function the check
command runs (so pytest and ``course-check`` give the same verdicts).
"""

from __future__ import annotations

import pytest

from course_exercises.check import load_cases
from course_exercises.check_runner import run_case

cases = load_cases()


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=pytest.mark.points(c.points)) for c in cases.CASES])
def test_exercise(case, notebook_loader, expect_stubs, record_result, case_timeout, pytestconfig):
    kind, message = run_case(case, cases, notebook_loader, expect_stubs=expect_stubs, case_timeout=case_timeout,
                             timed_out=pytestconfig._timed_out_exercises)
    record_result(case, kind, message)
    if kind != ("not_implemented" if expect_stubs else "passed"):
        pytest.fail(message, pytrace=False)
