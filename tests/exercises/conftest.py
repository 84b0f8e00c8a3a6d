"""pytest configuration of the autograded exercise tests.

Options (see ``CONTRACT.md``):

* ``--notebooks DIR``: the folder with the ``NN_topic.ipynb`` notebooks to check
  (default: the repository's ``exercises/``; a relative path is taken from the
  directory pytest was started in);
* ``--expect-stubs``: every test passes iff the student call raises
  ``NotImplementedError`` whose message names the case's exercise - proves that
  the untouched stubs score 0 for the right reason;
* ``--chapter NN`` (repeatable): only the cases of these chapters;
* ``--exercise-results FILE``: append one JSON line per case to FILE as soon
  as the case has run (and a ``"started"`` line just before), flushed at once,
  so that a run killed from outside keeps the results of the finished cases
  (the format of ``python -m course_exercises.check_runner``, which the check command runs);
* ``--case-timeout SECONDS``: stop a case whose call into the student's code
  runs longer than this (a watchdog thread, on every system; 0 = no limit,
  the default). The case fails with kind ``timeout``, and the remaining cases
  of the same exercise are not run (they time out too).

Marker: ``points(n)``, the points a case is worth.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_exercises.check import load_cases
from course_exercises.check_runner import NotebookLoader

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
                    help="append the per-case results to FILE as JSON lines, each as soon as its case ends")
    group.addoption("--case-timeout", default=0.0, type=float, metavar="SECONDS",
                    help="time limit of the student's code per case (0 = none)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "points(n): the number of points an exercise case is worth")
    config._timed_out_exercises = set()  # exercises with a case that ran out of time
    path = _option(config, "--exercise-results")
    if path:
        Path(path).write_text("", encoding="utf-8")  # the records of this run only (they are appended)


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
    """The ``cases`` module (the package's ``course_exercises/cases/``: ``registry.py`` and its chapter files)."""
    return load_cases()


@pytest.fixture(scope="session")
def expect_stubs(pytestconfig: pytest.Config) -> bool:
    return bool(_option(pytestconfig, "--expect-stubs", False))


@pytest.fixture(scope="session")
def notebook_loader(pytestconfig: pytest.Config, exercise_cases) -> NotebookLoader:
    """The notebooks under test (:class:`course_exercises.check_runner.NotebookLoader`), each loaded once."""
    return NotebookLoader(notebooks_dir(pytestconfig), exercise_cases.NOTEBOOKS)


@pytest.fixture(scope="session")
def student_namespace(notebook_loader: NotebookLoader):
    """``get(chapter) -> module``: the notebook's graded code, loaded once per chapter.

    A notebook that cannot be loaded makes every case of its chapter fail with
    the :class:`~course_exercises.extract.SubmissionError` message.
    """
    return notebook_loader.get


@pytest.fixture(scope="session")
def case_timeout(pytestconfig: pytest.Config) -> float:
    """Seconds the student's code may run per case (``--case-timeout``; 0 = no limit)."""
    return float(_option(pytestconfig, "--case-timeout", 0.0) or 0.0)


def _append_record(config: pytest.Config, record: dict) -> None:
    path = _option(config, "--exercise-results")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()


@pytest.fixture
def record_result(request: pytest.FixtureRequest):
    """``record(case, kind, message="")``: write a case's outcome for ``--exercise-results``.

    ``kind`` is ``passed``, ``not_implemented``, ``failed``, ``error`` or
    ``timeout``. The record is appended (one JSON line, flushed) at once; a
    ``{"id": ..., "kind": "started"}`` line is written before the case runs.
    """
    case = getattr(request.node, "callspec", None) and request.node.callspec.params.get("case")
    if case is not None:
        _append_record(request.config, {"id": case.id, "kind": "started"})

    def record(case, kind: str, message: str = "") -> None:
        _append_record(request.config, {
            "id": case.id, "chapter": case.chapter, "exercise": case.exercise, "points": case.points,
            "kind": kind, "message": message,
        })

    return record
