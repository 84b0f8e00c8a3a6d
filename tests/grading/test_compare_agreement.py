"""The student's check command and the grader judge an array with one comparator, so they agree.

``compare`` of the cases file (the check command) and :func:`course_exercises.compare.judge_case`
(the grader, on the arrays a child sent) must pass and fail the same results: NaN, infinities,
shapes, dtypes and tolerances included. No child process is started here.
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest

from course_exercises.check import load_cases
from course_exercises.compare import compare_arrays, judge_case

cases = load_cases()
CASE = next(c for c in cases.CASES if c.id == "4.1-fully-masked-row")
RTOL, ATOL = CASE.rtol, CASE.atol
NAN, INF = float("nan"), float("inf")

#: (description, produced, reference)
PAIRS = [
    ("exact floats", np.array([1.0, -2.0]), np.array([1.0, -2.0])),
    ("within tolerance", np.array([1.0 + 1e-9, -2.0]), np.array([1.0, -2.0])),
    ("outside tolerance", np.array([1.1, -2.0]), np.array([1.0, -2.0])),
    ("NaN where NaN is expected", np.array([NAN, 1.0]), np.array([NAN, 1.0])),
    ("a number where NaN is expected", np.array([0.0, 1.0]), np.array([NAN, 1.0])),
    ("NaN where a number is expected", np.array([NAN, 1.0]), np.array([0.0, 1.0])),
    ("-inf where -inf is expected", np.array([-INF, 1.0]), np.array([-INF, 1.0])),
    ("+inf where -inf is expected", np.array([INF, 1.0]), np.array([-INF, 1.0])),
    ("a huge number where -inf is expected", np.array([-1e300, 1.0]), np.array([-INF, 1.0])),
    ("inf where a number is expected", np.array([INF, 1.0]), np.array([1e300, 1.0])),
    ("NaN where inf is expected", np.array([NAN]), np.array([INF])),
    ("0-dim float", np.array(0.5), np.array(0.5)),
    ("0-dim float off", np.array(0.6), np.array(0.5)),
    ("wrong shape", np.ones((2, 3)), np.ones((3, 2))),
    ("extra axis", np.ones((1, 4)), np.ones(4)),
    ("float for bool", np.ones((2, 2)), np.ones((2, 2), bool)),
    ("int for float", np.array([1, 2]), np.array([1.0, 2.0])),
    ("bool for int", np.array([True]), np.array([1])),
    ("equal ints", np.array([1, 3]), np.array([1, 3])),
    ("different ints", np.array([1, 2]), np.array([1, 3])),
    ("equal bools", np.array([[True, False]]), np.array([[True, False]])),
    ("different bools", np.array([[True, True]]), np.array([[True, False]])),
    ("raised as expected", np.array(True), np.array(True)),
    ("not raised", np.array(False), np.array(True)),
]


def _npy_text(arr: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _grader_passes(got: np.ndarray, ref: np.ndarray) -> bool:
    manifest_case = {"id": CASE.id, "exercise": CASE.exercise, "function": CASE.function, "points": 1,
                     "rtol": RTOL, "atol": ATOL, "hint": CASE.hint}
    return judge_case(manifest_case, {"arrays": {"k": _npy_text(got)}, "error": None}, {"k": ref}).passed


@pytest.mark.parametrize("what, got, ref", PAIRS, ids=[p[0] for p in PAIRS])
def test_checker_and_grader_agree(what, got, ref):
    checker_passes = cases.compare(CASE, {"k": got}, {"k": ref}) is None
    assert checker_passes == _grader_passes(got, ref), what
    assert checker_passes == (compare_arrays("k", got, ref, RTOL, ATOL) is None), what


@pytest.mark.parametrize("what, passes", [
    ("NaN where NaN is expected", True), ("-inf where -inf is expected", True), ("a number where NaN is expected", False),
    ("NaN where a number is expected", False), ("+inf where -inf is expected", False),
    ("a huge number where -inf is expected", False), ("inf where a number is expected", False),
    ("NaN where inf is expected", False), ("wrong shape", False), ("float for bool", False), ("int for float", False),
])
def test_the_rule_for_special_values_shapes_and_dtypes(what, passes):
    _, got, ref = next(p for p in PAIRS if p[0] == what)
    assert (compare_arrays("k", got, ref, 1e9, 1e9) is None) == passes, what


def test_both_name_the_same_problem():
    got, ref = np.array([NAN, 1.0]), np.array([0.0, 1.0])
    message = compare_arrays("k", got, ref, RTOL, ATOL)
    assert "NaN or infinite" in message
    assert message in cases.compare(CASE, {"k": got}, {"k": ref})
