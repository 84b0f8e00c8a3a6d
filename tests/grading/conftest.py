"""Fixtures of the grader's own tests: one shared grading run per scenario (session scope).

The grader is always started as its own process (``python -m course_grader``),
as an instructor would: it makes itself a child subreaper and kills child
processes it did not start, which must not happen inside pytest's process.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from adversaries import BATCH_CHAPTERS, EXERCISES, EXTRA_CASES, SOLUTIONS, build_batch  # noqa: E402
from grading_helpers import load_run, run_grader  # noqa: E402


def _need_notebooks() -> None:
    names = ["04_attention.ipynb", "06_feed_forward.ipynb", "08_masks.ipynb"]
    missing = [str(d / n) for d in (SOLUTIONS, EXERCISES) for n in names if not (d / n).is_file()]
    if missing:
        pytest.skip("course notebooks not built yet: " + ", ".join(missing))


@pytest.fixture(scope="session")
def marker_dir():
    """A world-writable folder outside pytest's private tmp, where adversaries leave traces."""
    d = Path(tempfile.mkdtemp(prefix="grader-markers-"))
    os.chmod(d, 0o777)
    yield d
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


@pytest.fixture(scope="session")
def work_tmp():
    """The graders' ``TMPDIR`` in these tests: outside pytest's private tmp (the children,
    running as nobody, must reach their work folders), mode 0711."""
    d = Path(tempfile.mkdtemp(prefix="grader-work-"))
    os.chmod(d, 0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def batch(tmp_path_factory, marker_dir, work_tmp):
    """Every adversarial submission, graded in one run (chapters 04, 06, 08, 2 jobs, 10 s per chapter)."""
    _need_notebooks()
    base = tmp_path_factory.mktemp("batch")
    os.chmod(base, 0o755)
    subs, out = base / "subs", base / "out"
    subs.mkdir()
    expect = build_batch(subs, out, marker_dir)
    extra = base / "extra_cases.py"
    extra.write_text(EXTRA_CASES)
    proc = run_grader([subs, "--out", out, "--jobs", "2", "--timeout", "10", "--chapters", *BATCH_CHAPTERS,
                       "--extra-tests", extra], work_tmp=work_tmp)
    run = load_run(out, proc)
    run.expect = expect
    run.subs = subs
    return run
