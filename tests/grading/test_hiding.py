"""What the grader covers for the child: every copy of the packaged cases on its import paths, the files at
the top of a clone (an archive of the course left there), and how a file is covered (``/dev/null``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GRADING = Path(__file__).resolve().parents[2] / "course_grader"


def _config(tmp_path: Path, **kw):
    from course_exercises.casefile import CASES_FILE
    from course_grader.grader import GradingConfig

    base = dict(out_dir=tmp_path / "out", course_root=None, solutions_dir=tmp_path / "sol", cases_files=[CASES_FILE])
    base.update(kw)
    return GradingConfig(**base)


def test_every_copy_of_the_cases_on_the_import_paths_is_covered(tmp_path, monkeypatch):
    """Gradescope: `pip install .` puts a second course_lib in site-packages while the grader may import the
    clone's; the child has both on its import paths, so both course_exercises/cases/ folders are covered."""
    from course_grader import grader
    from course_exercises.casefile import CASES_DIR

    site = tmp_path / "site-packages"
    (site / "course_exercises" / "cases").mkdir(parents=True)
    (site / "course_exercises" / "cases" / "cases.py").write_text("def _expected(): ...\n")
    bare = tmp_path / "other-site"  # a path without the package adds nothing
    bare.mkdir()
    monkeypatch.setattr(grader, "child_sys_path", lambda: [str(CASES_DIR.parent.parent), str(site), str(bare)])
    hidden = grader.hidden_paths(_config(tmp_path))
    assert str(site / "course_exercises" / "cases") in hidden, hidden
    assert str(CASES_DIR) in hidden
    assert str(site / "course_exercises") not in hidden and str(site) not in hidden and str(bare) not in hidden


def test_files_at_the_top_of_a_clone_are_covered(tmp_path):
    """A zip of the course (solutions and cases inside) left at the clone's top is covered like its folders;
    the imported packages stay visible (the child imports them)."""
    from course_grader.grader import hidden_paths

    clone = tmp_path / "clone"
    for sub in ("course_lib", "course_exercises/cases", "solutions", "tests"):
        (clone / sub).mkdir(parents=True)
    for name in ("autograder.zip", "README.md", "pyproject.toml"):
        (clone / name).write_text("x")
    (clone / "link.zip").symlink_to(clone / "autograder.zip")
    hidden = hidden_paths(_config(tmp_path, course_root=clone))
    for name in ("autograder.zip", "README.md", "pyproject.toml", "solutions", "tests"):
        assert str(clone / name) in hidden, name
    assert str(clone / "link.zip") not in hidden  # a link is not followed (its target is covered)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_hide_covers_files_and_folders(tmp_path):
    """In a mount namespace, a covered file reads as empty and a covered folder is empty (its mode 000 keeps
    nobody out; root is checked here); the host's files are untouched."""
    secret = tmp_path / "autograder.zip"
    secret.write_text("def _expected(): return 42\n")
    folder = tmp_path / "solutions"
    folder.mkdir()
    (folder / "06.ipynb").write_text("{}")
    code = f"""
import os, sys
sys.path.insert(0, {str(GRADING)!r})
import child
assert child._hide([{str(secret)!r}, {str(folder)!r}, {str(tmp_path / 'missing')!r}]) == []
print(repr(open({str(secret)!r}).read()), os.listdir({str(folder)!r}))
"""
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["''", "[]"], proc.stdout
    assert secret.read_text().startswith("def _expected")  # outside the namespace, nothing changed
