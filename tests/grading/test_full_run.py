"""Every chapter: the solutions earn full marks, the untouched stubs 0; re-runs skip unchanged work.

Also the weaker ``--sandbox plain`` (no namespaces), which must still kill a
detached grandchild and keep the scores right, and the command's usage errors.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest

from adversaries import EXERCISES, NB, SOLUTIONS, build_batch, live_child_processes, notebook, write_folder
from grading_helpers import load_run, run_grader


@pytest.fixture(scope="module")
def everything(tmp_path_factory, work_tmp):
    solution_books = sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))
    if len(solution_books) < 9:
        pytest.skip("not every chapter's notebooks are built yet")
    base = tmp_path_factory.mktemp("all")
    subs = base / "subs"
    shutil.copytree(SOLUTIONS, subs / "solutions_copy")
    shutil.copytree(EXERCISES, subs / "stubs")
    out = base / "out"
    run = load_run(out, run_grader([subs, "--out", out, "--jobs", "2", "--timeout", "60"], work_tmp=work_tmp))
    run.subs = subs
    return run


def test_solutions_full_marks_every_chapter(everything):
    row = everything.rows["solutions_copy"]
    assert everything.summary["chapters"] == [f"{c:02d}" for c in range(2, 11)]
    assert int(row["score"]) == everything.manifest["max_score"] > 0
    assert row["status"] == "ok" and row["flags"] == ""


def test_stubs_zero_every_chapter_for_the_right_reason(everything):
    row = everything.rows["stubs"]
    assert int(row["score"]) == 0 and row["status"] == "ok"
    for case in everything.grade("stubs")["cases"]:
        assert f"NotImplementedError: Exercise {case['exercise']}" in case["message"], case["message"][:300]


def test_rerun_skips_unchanged_and_force_regrades(everything):
    out, subs = everything.out, everything.subs
    start = time.monotonic()
    again = load_run(out, run_grader([subs, "--out", out, "--jobs", "2"]))
    assert again.summary["unchanged_skipped"] == 2 and again.summary["graded_now"] == 0
    assert again.rows == everything.rows
    assert time.monotonic() - start < 30
    # change one submission: only that one is graded again
    (subs / "stubs" / NB["06"]).write_bytes(notebook("06"))
    changed = load_run(out, run_grader([subs, "--out", out, "--jobs", "2", "--chapters", "06"]))
    # a different chapter set is a different manifest: both are graded against it
    assert changed.summary["graded_now"] == 2
    again = load_run(out, run_grader([subs, "--out", out, "--chapters", "06"]))
    assert again.summary["graded_now"] == 0
    (subs / "stubs" / NB["06"]).write_bytes((EXERCISES / NB["06"]).read_bytes())
    again = load_run(out, run_grader([subs, "--out", out, "--chapters", "06"]))
    assert again.summary["graded_now"] == 1 and int(again.rows["stubs"]["score"]) == 0
    forced = load_run(out, run_grader([subs, "--out", out, "--chapters", "06", "--force"]))
    assert forced.summary["graded_now"] == 2


def test_plain_sandbox_kills_detached_grandchild(tmp_path, marker_dir, work_tmp):
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    expect = build_batch(subs, out, marker_dir)
    keep = {"full", "detached_grandchild", "os_exit_call"}
    for entry in subs.iterdir():
        if entry.name not in keep:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    run = load_run(out, run_grader([subs, "--out", out, "--jobs", "2", "--timeout", "8", "--chapters", "06",
                                    "--sandbox", "plain"], work_tmp=work_tmp))
    assert run.summary["sandbox"]["mode"] == "plain"
    assert run.summary["sandbox"]["statement"]["network"].startswith("NOT isolated")
    assert any("network not isolated" in n for n in run.summary["sandbox"]["notes"])
    assert int(run.rows["full"]["score"]) == run.manifest["max_score"]
    assert int(run.rows["detached_grandchild"]["score"]) == run.manifest["max_score"]
    assert run.rows["os_exit_call"]["status"] == "crashed" and int(run.rows["os_exit_call"]["6.2"]) == 0
    assert "left 1 process" in run.rows["detached_grandchild"]["flags"]
    for p in marker_dir.iterdir():
        p.unlink()
    time.sleep(1.5)
    assert list(marker_dir.iterdir()) == [] and live_child_processes(work_tmp) == []
    assert expect["full"]["status"] == "ok"


def test_single_submission_mode(tmp_path):
    sub = write_folder(tmp_path / "anything", {NB["06"]: notebook("06")})
    out = tmp_path / "out"
    run = load_run(out, run_grader([sub, "--single", "--student", "alice", "--out", out, "--chapters", "06"]))
    assert list(run.rows) == ["alice"]
    assert json.loads((out / "alice" / "results.json").read_text())["score"] == run.manifest["max_score"]


@pytest.mark.parametrize("args, words", [
    (["--jobs", "0"], "--jobs"),
    (["--memory", "512"], "memory_mb"),
    (["--chapters", "42"], "no such chapter"),
    (["--solutions", "/nonexistent"], "--solutions"),
    (["--extra-tests", "/nonexistent.py"], "--extra-tests"),
])
def test_usage_errors_exit_2(tmp_path, args, words):
    (tmp_path / "subs").mkdir()
    proc = run_grader([tmp_path / "subs", "--out", tmp_path / "out", *args])
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr


def test_missing_submissions_folder_exit_2(tmp_path):
    proc = run_grader([tmp_path / "nope", "--out", tmp_path / "out"])
    assert proc.returncode == 2 and "does not exist" in proc.stderr
