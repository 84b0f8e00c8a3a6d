"""Usage errors of ``course-grade`` (:mod:`course_grader.cli`): one line naming the option, exit status 2.

Most run ``cli.main`` in this process: it stops before starting anything, and the sandbox is replaced by a
tripwire so that a check that lets a run through fails here instead of grading inside pytest.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from adversaries import NB, notebook, write_folder
from grading_helpers import run_grader
from course_grader import cli


@pytest.fixture
def grade(tmp_path, monkeypatch, capsys):
    """``course-grade ARGS`` in this process (chapter 06 with a one-notebook --solutions): ``(status, stderr)``."""
    import course_grader.sandbox as sandbox

    def tripwire(*args, **kwargs):
        raise AssertionError("course-grade went past its usage checks")

    monkeypatch.setattr(sandbox, "Supervisor", tripwire)
    monkeypatch.setattr(sandbox, "probe_sandbox", tripwire)
    sol = write_folder(tmp_path / "sol", {NB["06"]: notebook("06")})
    (tmp_path / "subs").mkdir()
    monkeypatch.chdir(tmp_path)

    def run(*argv) -> tuple[int, str]:
        code = cli.main(["subs", "--solutions", str(sol), "--chapters", "06", "--no-progress", *map(str, argv)])
        return code, capsys.readouterr().err

    return run


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("course-grade: error: ") and "Traceback" not in err, err
    return lines[0]


def test_out_that_is_a_file_is_a_usage_error(grade, tmp_path):
    (tmp_path / "afile").write_text("x")
    code, err = grade("--out", "afile")
    assert code == 2 and "--out 'afile'" in _one_line(err) and "not a folder" in err, err
    code, err = grade("--out", "afile/reports")  # a file on the way
    assert code == 2 and "--out 'afile/reports'" in _one_line(err) and "cannot create" in err, err
    assert (tmp_path / "afile").read_text() == "x"


def test_out_and_submissions_must_not_nest(grade, tmp_path):
    for out in ("subs/inner", "subs"):  # the reports would be graded as a student on the next run
        code, err = grade("--out", out)
        line = _one_line(err)
        assert code == 2 and f"--out {out!r}" in line and "SUBMISSIONS" in line, err
    assert not (tmp_path / "subs" / "inner").exists()
    # SUBMISSIONS inside --out: a student named like the submissions folder would get its reports written into it
    code, err = grade("--out", ".")
    line = _one_line(err)
    assert code == 2 and "--out '.'" in line and "SUBMISSIONS path 'subs'" in line, err


@pytest.mark.parametrize("argv, option", [
    (["--timeout", "0"], "--timeout"),
    (["--timeout", "nan"], "--timeout"),
    (["--submission-timeout", "0"], "--submission-timeout"),
    (["--submission-timeout", "inf"], "--submission-timeout"),
    (["--memory", "800"], "--memory"),
    (["--jobs", "0"], "--jobs"),
])
def test_numeric_options_are_named(grade, tmp_path, argv, option):
    code, err = grade("--out", "out", *argv)
    line = _one_line(err)
    assert code == 2 and line.startswith(f"course-grade: error: {option} must be") and "Limits." not in line, err
    assert not (tmp_path / "out").exists()


def test_limits_field_names_become_options():
    assert cli._option_names("Limits.chapter_timeout_s must be > 0; got 0.0") == "--timeout must be > 0; got 0.0"
    assert cli._option_names("Limits.submission_timeout_s and Limits.memory_mb") == "--submission-timeout and --memory"


@pytest.mark.parametrize("argv0, shown", [
    ("/venv/bin/course-grade", "course-grade"),
    ("/venv/Scripts/course-grade.exe", "course-grade"),
    ("/repo/course_grader/__main__.py", "python -m course_grader"),
])
def test_prog_is_the_name_typed(monkeypatch, capsys, argv0, shown):
    import course_lib

    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"{shown} {course_lib.__version__}"
    assert cli.build_parser().format_usage().startswith(f"usage: {shown} ")


SOLUTIONS = Path("/tmp/sol")
WORK = "/tmp/course-grade-abc123/reference-0123456789abcdef/submission"
JSON_ERROR = ("notebook '{}/06_feed_forward.ipynb' is not valid JSON (line 2, column 1: Expecting value); a .ipynb "
              "file must be saved by Jupyter, not edited by hand. Re-download the exercise notebook and copy your "
              "code back into it.")


def test_reference_message_names_the_solutions_notebook_once():
    problems = [f"6.1-{n}: " + JSON_ERROR.format(WORK) for n in "abc"]
    message = "the solutions do not pass their own cases:\n  " + "\n  ".join(problems)
    line = cli.reference_message(message, SOLUTIONS)
    assert line == ("--solutions notebook '/tmp/sol/06_feed_forward.ipynb' is not valid JSON (line 2, column 1: "
                    "Expecting value): check the --solutions folder '/tmp/sol' (it must hold the solution notebooks "
                    "as Jupyter saved them)"), line
    # another notebook's problem and a case's own (multi-line) problem are kept, in the real paths
    other = "8.1-x: ZeroDivisionError: division by zero\n  at padding_mask() in cell 3: 1 / 0"
    missing = f"8.2-y: notebook '{WORK}/08_masks.ipynb' does not define 'causal_mask'. Keep each ..."
    text = cli.reference_message("\n  ".join([message, other, missing]), SOLUTIONS)
    assert text.count("06_feed_forward.ipynb") == 1 and WORK not in text, text
    assert "Re-download" not in text and "8.1-x: ZeroDivisionError" in text and "at padding_mask()" in text, text
    assert "--solutions notebook '/tmp/sol/08_masks.ipynb' does not define 'causal_mask'" in text, text
    # other reference errors: only the paths change
    assert cli.reference_message(f"run failed: {WORK}/04_attention.ipynb", SOLUTIONS) == \
        "run failed: /tmp/sol/04_attention.ipynb"


def test_corrupt_solutions_notebook_is_named(tmp_path):
    """A real run (the reference run fails in its sandboxed child): the message names the --solutions file."""
    sol = write_folder(tmp_path / "sol", {NB["06"]: b'{"cells": [\n'})
    (tmp_path / "subs").mkdir()
    proc = run_grader([tmp_path / "subs", "--out", tmp_path / "out", "--solutions", sol, "--chapters", "06"],
                      timeout=300)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert errors == [f"course-grade: error: --solutions notebook {str(sol.resolve() / NB['06'])!r} is not valid "
                      f"JSON (line 2, column 1: Expecting value): check the --solutions folder "
                      f"{str(sol.resolve())!r} (it must hold the solution notebooks as Jupyter saved them)"], \
        proc.stderr[-3000:]
    assert "Re-download" not in proc.stderr and "/reference-" not in proc.stderr


@pytest.mark.parametrize("platform", ["win32", "darwin"])
def test_the_grader_says_it_runs_on_linux_only(grade, monkeypatch, platform):
    """On macOS or Windows the grader stops at its entry, before anything starts, and says where to grade."""
    monkeypatch.setattr(sys, "platform", platform)
    code, err = grade("--out", "out")
    assert code == 2 and "Linux only" in _one_line(err) and "course-check" in err, err


def test_the_old_module_name_forwards_to_the_grader():
    """``python -m course_lib.grading`` (instructors' scripts, the README of earlier versions) runs course_grader."""
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "course_lib.grading", "--version"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("python -m course_grader "), (proc.stdout, proc.stderr)
