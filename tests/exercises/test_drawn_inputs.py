"""The cases hold on inputs drawn from other salts, as the grader draws them for every run.

For each case with drawn inputs: on several salts (redrawing while ``robust()``
says the draw sits at a tie, as the grader does), the notebooks' answers must
agree with ``expected()``. Run on ``solutions/`` this shows that the tolerances
and margins do not depend on the fixed seeds; skipped with ``--expect-stubs``.
"""

from __future__ import annotations

import pytest

from course_exercises.check import load_cases

cases = load_cases()
SALTS = [f"test-salt-{n}" for n in range(6)]


def _has_draws(case) -> bool:
    with cases.drawing(cases.Draws(salt="probe")) as draws:
        case.expected()
    return bool(draws.recorded)


DRAWN = [c for c in cases.CASES if _has_draws(c)]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in DRAWN])
def test_case_holds_on_other_draws(case, student_namespace, expect_stubs):
    if expect_stubs:
        pytest.skip("stubs: nothing to compare")
    ns = student_namespace(case.chapter)
    for salt in SALTS:
        for attempt in range(200):
            with cases.drawing(cases.Draws(salt=f"{salt}|{attempt}")):
                if case.robust is not None and not case.robust():
                    continue
                problem = cases.compare(case, case.produce(ns), case.expected())
            break
        else:
            pytest.fail(f"{case.id}: no robust draw for {salt}")
        assert problem is None, f"salt {salt!r}: {problem}"
