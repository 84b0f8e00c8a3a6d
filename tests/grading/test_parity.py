"""The student's check command and the instructor's grader give honest work the same points.

A class of partial submissions (each exercise either solved or left as its stub) is
checked with ``course_exercises.check.run_checks`` (fixed inputs, no sandbox) and graded
by the grader (inputs drawn for the run, sandboxed child): every exercise must get
the same points from both.
"""

from __future__ import annotations

import json

import pytest

from adversaries import SOLUTIONS, write_folder
from course_exercises.check import load_cases, run_checks
from grading_helpers import load_run, run_grader

CHAPTERS = ["03", "05", "07", "09", "10"]
#: student -> exercises left as stubs
CLASS = {
    "solved_all": [],
    "half": ["3.2", "5.3", "7.3", "9.1", "10.2"],  # (5.3 calls 5.1, 5.2 and 7.2 calls 7.1: stub the callers)
    "other_half": ["3.1", "5.1", "5.3", "7.2", "7.3", "9.2", "9.3", "10.1", "10.3", "10.4"],
    "nothing": None,  # every exercise a stub
}


def _notebook(chapter: str, stubbed: list[str], exercises: dict[str, str]) -> bytes:
    cases = load_cases()
    nb = json.loads((SOLUTIONS / cases.NOTEBOOKS[chapter]).read_text(encoding="utf-8"))
    mine = [e for e in exercises if e.split(".")[0] == str(int(chapter))]
    lines = []
    for ex in mine if stubbed is None else [e for e in stubbed if e in mine]:
        fn = exercises[ex]
        lines += [f"def {fn}(*args, **kwargs):", f'    raise NotImplementedError("Exercise {ex}: write {fn}")', ""]
    if lines:
        nb["cells"].append({"cell_type": "code", "execution_count": None, "id": "stubs", "metadata": {},
                            "outputs": [], "source": "\n".join(lines)})
    return json.dumps(nb).encode()


@pytest.fixture(scope="module")
def graded(tmp_path_factory, work_tmp):
    cases = load_cases()
    base = tmp_path_factory.mktemp("parity")
    subs = base / "subs"
    for student, stubbed in CLASS.items():
        write_folder(subs / student, {cases.NOTEBOOKS[ch]: _notebook(ch, stubbed, cases.EXERCISES) for ch in CHAPTERS})
    run = load_run(base / "out", run_grader([subs, "--out", base / "out", "--jobs", "2", "--chapters", *CHAPTERS],
                                            work_tmp=work_tmp))
    return subs, run


@pytest.mark.parametrize("student", sorted(CLASS))
def test_checker_gives_the_graders_points(graded, student):
    subs, run = graded
    check = run_checks(CHAPTERS, subs / student)
    by_exercise: dict[str, int] = {}
    for r in check.results:
        by_exercise[r.exercise] = by_exercise.get(r.exercise, 0) + (r.points if r.kind == "passed" else 0)
    row = run.rows[student]
    grader = {ex: int(row[ex]) for ex in run.summary["exercises"]}
    assert by_exercise == grader, {ex: (by_exercise.get(ex), grader[ex]) for ex in grader if by_exercise.get(ex) != grader[ex]}
    stubbed = CLASS[student]
    for ex, points in grader.items():
        solved = stubbed is not None and ex not in stubbed
        assert (points == run.points(ex)) if solved else (points == 0), (ex, points)
