"""The Gradescope layout after ``gradescope/lock_down.sh`` (what ``setup.sh`` runs): in ``nobody`` mode every
world-readable file is readable by student code, so exactly one copy of the solutions and of the cases may
remain, readable by root only (issue 22, item 4)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grading_helpers import ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not sys.platform.startswith("linux"),
                                reason="needs root (to become nobody) on Linux")

#: lists, as the user nobody, every regular file below ROOT that nobody can open for reading
_LIST_AS_NOBODY = """
import os, sys
root = sys.argv[1]
os.setgroups([]); os.setgid(65534); os.setuid(65534)
for folder, dirs, files in os.walk(root):
    for name in files:
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as fh:
                fh.read(1)
        except OSError:
            continue
        print(path)
"""


PACKAGES = ("course_lib", "course_book", "course_exercises", "course_grader")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _answers() -> dict[str, str]:
    """sha256 -> name of every file that holds answers: the solution notebooks and the cases."""
    files = [*(ROOT / "solutions").glob("*.ipynb"), *(ROOT / "course_exercises" / "cases").glob("*.py"),
             *(ROOT / "exercise_sources").glob("ch*.py")]
    return {_sha(p): p.name for p in files if p.stat().st_size > 0}


def _copy_course(dest: Path, with_build: bool) -> None:
    """What ``/autograder/source`` holds: the repository (and what ``pip install .`` may leave in it)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("solutions", "exercises", "exercise_sources", *PACKAGES, "gradescope"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    for name in ("README.md", "pyproject.toml"):
        shutil.copy2(ROOT / name, dest / name)
    if with_build:
        for name in PACKAGES:
            shutil.copytree(ROOT / name, dest / "build" / "lib" / name, ignore=ignore)
        (dest / "transformer_course.egg-info").mkdir()
        (dest / "transformer_course.egg-info" / "SOURCES.txt").write_text("course_exercises/cases/registry.py\n")


@pytest.fixture
def layout():
    """A Gradescope container's files in a folder nobody can enter (like ``/``): the source and an installed
    copy of the package in a site-packages, all world-readable as ``pip`` and ``unzip`` leave them."""
    base = Path(tempfile.mkdtemp(prefix="grader-gradescope-"))
    try:
        source = base / "autograder" / "source"
        _copy_course(source, with_build=True)
        site = base / "usr" / "local" / "lib" / "python3" / "dist-packages"
        for name in PACKAGES:
            shutil.copytree(ROOT / name, site / name, ignore=shutil.ignore_patterns("__pycache__"))
        subprocess.run(["chmod", "-R", "a+rX", str(base)], check=True)
        yield base, source, site / "course_exercises" / "cases"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_lock_down_leaves_one_copy_of_the_answers_and_nobody_reads_none(layout):
    base, source, cases = layout
    answers = _answers()
    assert answers, "no solution notebook or cases file found"
    proc = subprocess.run(["bash", str(ROOT / "gradescope" / "lock_down.sh"), str(source), str(cases)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    readable = subprocess.run([sys.executable, "-c", _LIST_AS_NOBODY, str(base)], capture_output=True, text=True,
                              timeout=300)
    assert readable.returncode == 0, readable.stderr[-2000:]
    listed = readable.stdout.split()
    assert any(p.endswith("/course_grader/child.py") for p in listed), "the listing itself must work"
    leaked = [p for p in listed if _sha(Path(p)) in answers]
    assert leaked == [], leaked
    assert not [p for p in listed if "/solutions/" in p or "/cases/" in p or "/exercise_sources/" in p]
    # exactly one copy of each answer file is left in the whole layout
    copies: dict[str, list[str]] = {}
    for path in base.rglob("*"):
        if path.is_file() and _sha(path) in answers:
            copies.setdefault(answers[_sha(path)], []).append(str(path))
    assert sorted(copies) == sorted(set(answers.values())), copies
    assert all(len(paths) == 1 for paths in copies.values()), {k: v for k, v in copies.items() if len(v) > 1}
    assert all(str(source / "solutions") in p[0] or str(source / "exercise_sources") in p[0] or str(cases) in p[0]
               for p in copies.values())
