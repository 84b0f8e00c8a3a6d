"""pytest configuration of the autograded exercise tests.

Options (see ``CONTRACT.md``):

* ``--notebooks DIR``: the folder with the ``NN_topic.ipynb`` notebooks to check
  (default: the repository's ``exercises/``; a relative path is taken from the
  directory pytest was started in);
* ``--expect-stubs``: every test passes iff the student call raises
  ``NotImplementedError`` whose message names the case's exercise - proves that
  the untouched stubs score 0 for the right reason;
* ``--chapter NN`` (repeatable): only the cases of these chapters;
* ``--exercise-results FILE``: write one JSON record per case (used by
  ``python -m course_lib.check``).

Marker: ``points(n)``, the points a case is worth.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_lib.check import load_cases
from course_lib.grading.extract import SubmissionError, load_namespace

ROOT = Path(__file__).resolve().parents[2]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("exercises", "course exercises (tests/exercises)")
    group.addoption("--notebooks", default=None, metavar="DIR",
                    help="folder holding the NN_topic.ipynb notebooks to check (default: exercises/)")
    group.addoption("--expect-stubs", action="store_true", default=False,
                    help="pass iff every exercise raises NotImplementedError naming its exercise (untouched stubs)")
    group.addoption("--chapter", action="append", default=[], metavar="NN",
                    help="only check this chapter (two digits; repeatable)")
    group.addoption("--exercise-results", default=None, metavar="FILE",
                    help="write the per-case results as JSON to FILE")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "points(n): the number of points an exercise case is worth")
    config._exercise_results = {}  # nodeid -> record, filled by the test


def _option(config: pytest.Config, name: str, default=None):
    try:
        return config.getoption(name)
    except ValueError:  # the option was not registered (conftest loaded late)
        return default


def notebooks_dir(config: pytest.Config) -> Path:
    """The folder of notebooks under test (``--notebooks``, default ``exercises/``)."""
    value = _option(config, "--notebooks")
    if not value:
        return ROOT / "exercises"
    path = Path(value)
    return path if path.is_absolute() else Path(config.invocation_params.dir) / path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chapters = {f"{int(c):02d}" for c in (_option(config, "--chapter", []) or [])}
    if not chapters:
        return
    keep, drop = [], []
    for item in items:
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")
        if case is not None and getattr(case, "chapter", None) not in chapters:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def exercise_cases():
    """The ``cases`` module (``tests/exercises/cases.py``)."""
    return load_cases(Path(__file__).with_name("cases.py"))


@pytest.fixture(scope="session")
def expect_stubs(pytestconfig: pytest.Config) -> bool:
    return bool(_option(pytestconfig, "--expect-stubs", False))


@pytest.fixture(scope="session")
def student_namespace(pytestconfig: pytest.Config, exercise_cases):
    """``get(chapter) -> module``: the notebook's graded code, loaded once per chapter.

    A notebook that cannot be loaded makes every case of its chapter fail with
    the :class:`SubmissionError` message.
    """
    folder = notebooks_dir(pytestconfig)
    loaded: dict[str, object] = {}

    def get(chapter: str):
        if chapter not in loaded:
            if not folder.is_dir():
                loaded[chapter] = f"the notebook folder {str(folder)!r} does not exist (option --notebooks)"
            else:
                try:
                    loaded[chapter] = load_namespace(folder / exercise_cases.NOTEBOOKS[chapter])
                except SubmissionError as exc:
                    loaded[chapter] = str(exc)
        value = loaded[chapter]
        if isinstance(value, str):
            raise SubmissionError(value)
        return value

    return get


@pytest.fixture
def record_result(request: pytest.FixtureRequest):
    """``record(case, kind, message="")``: remember a case's outcome for ``--exercise-results``.

    ``kind`` is ``passed``, ``not_implemented``, ``failed`` or ``error``.
    """

    def record(case, kind: str, message: str = "") -> None:
        request.config._exercise_results[request.node.nodeid] = {
            "id": case.id, "chapter": case.chapter, "exercise": case.exercise, "points": case.points,
            "kind": kind, "message": message,
        }

    return record


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = _option(session.config, "--exercise-results")
    if not path:
        return
    records = list(getattr(session.config, "_exercise_results", {}).values())
    Path(path).write_text(json.dumps({"cases": records}, indent=1), encoding="utf-8")
