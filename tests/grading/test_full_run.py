"""Every chapter: the solutions earn full marks, the untouched stubs 0; re-runs skip unchanged work.

Also the ``--sandbox unsafe`` fallback (refused unless ``--unsafe-sandbox``; it must still kill
a detached grandchild and keep the scores right), and the command's usage errors.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

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
    assert everything.summary["chapters"] == [f"{c:02d}" for c in range(1, 14)]
    assert int(row["score"]) == everything.manifest["max_score"] > 0
    assert row["status"] == "ok" and row["flags"] == ""


def test_stubs_zero_every_chapter_for_the_right_reason(everything):
    row = everything.rows["stubs"]
    assert int(row["score"]) == 0 and row["status"] == "ok"
    for case in everything.grade("stubs")["cases"]:  # the child's words apart from the grader's (issue 22)
        assert f"NotImplementedError: Exercise {case['exercise']}" in case["child_error"], case["child_error"]
        assert "your code raised NotImplementedError" in case["message"], case["message"][:300]


def test_reference_reuse_skips_unchanged_and_force_regrades(everything, tmp_path):
    """``--reference`` reuses a manifest and its drawn inputs: unchanged submissions are not graded again."""
    out, subs = everything.out, everything.subs
    kept = tmp_path / "kept"
    shutil.copytree(out / "_reference", kept)
    start = time.monotonic()
    again = load_run(out, run_grader([subs, "--out", out, "--jobs", "2", "--reference", kept / "manifest.json"]))
    assert again.summary["unchanged_skipped"] == 2 and again.summary["graded_now"] == 0
    assert again.rows == everything.rows
    assert time.monotonic() - start < 30
    (subs / "stubs" / NB["06"]).write_bytes(notebook("06"))  # change one submission: only it is graded again
    changed = load_run(out, run_grader([subs, "--out", out, "--jobs", "2", "--reference", kept / "manifest.json"]))
    assert changed.summary["graded_now"] == 1
    assert int(changed.rows["stubs"]["6.1"]) == changed.points("6.1")
    forced = load_run(out, run_grader([subs, "--out", out, "--reference", kept / "manifest.json", "--force"]))
    assert forced.summary["graded_now"] == 2
    (subs / "stubs" / NB["06"]).write_bytes((EXERCISES / NB["06"]).read_bytes())


def test_every_run_draws_new_inputs(everything, tmp_path):
    """Without ``--reference`` each run draws new inputs from a new secret salt, so answers
    prepared from an earlier run's feedback do not carry over."""
    out = tmp_path / "out"
    run = load_run(out, run_grader([everything.subs, "--out", out, "--chapters", "04", "08"]))
    first = {c["id"]: c for c in everything.manifest["cases"]}
    drawn = [c for c in run.manifest["cases"] if c["draws"]]
    assert {c["chapter"] for c in drawn} == {"04", "08"}
    for c in drawn:
        assert c["draws"].keys() == first[c["id"]]["draws"].keys()
        assert [d["sha256"] for d in c["draws"].values()] != [d["sha256"] for d in first[c["id"]]["draws"].values()], c["id"]
    fixed = [c for c in run.manifest["cases"] if not c["draws"]]
    # fixed inputs (hand-worked tables, rejections) earn points only together with a drawn case of their exercise
    assert fixed and {c["exercise"] for c in fixed} <= {c["exercise"] for c in drawn}
    assert int(run.rows["solutions_copy"]["score"]) == run.manifest["max_score"]


def test_answers_prepared_in_advance_earn_nothing(everything, tmp_path):
    """A notebook that returns the previous run's reference for a drawn case fails it in the next run."""
    case = next(c for c in everything.manifest["cases"] if c["id"] == "4.1-no-mask-3d")
    base = Path(everything.summary["manifest"]).parent
    arrays = {k: np.load(base / v["file"]).tolist() for k, v in case["keys"].items()}
    cheat = notebook("04", extra=f'''
import torch
def scaled_dot_product_attention(q, k, v, mask=None):
    return torch.tensor({arrays["out"]!r}), torch.tensor({arrays["weights"]!r})
''')
    subs = write_folder(tmp_path / "subs" / "cheat", {NB["04"]: cheat}).parent
    run = load_run(tmp_path / "out", run_grader([subs, "--out", tmp_path / "out", "--chapters", "04"]))
    verdicts = {c["case_id"]: c for c in run.grade("cheat")["cases"]}
    assert not verdicts["4.1-no-mask-3d"]["passed"], "the inputs did not change between runs"


def test_unsafe_sandbox_needs_its_option_and_says_so(tmp_path, marker_dir, work_tmp):
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    expect = build_batch(subs, out, marker_dir)
    keep = {"full", "detached_grandchild", "os_exit_call"}
    for entry in subs.iterdir():
        if entry.name not in keep:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    args = [subs, "--out", out, "--jobs", "2", "--timeout", "8", "--chapters", "06", "--sandbox", "unsafe"]
    refused = run_grader(args, work_tmp=work_tmp)
    assert refused.returncode == 2 and "--unsafe-sandbox" in refused.stderr, refused.stderr[-2000:]
    assert not (out / "grades.csv").exists()
    run = load_run(out, run_grader([*args, "--unsafe-sandbox"], work_tmp=work_tmp))
    assert run.summary["sandbox"]["mode"] == "unsafe" and run.summary["sandbox"]["safe"] is False
    assert run.summary["sandbox"]["statement"]["network"].startswith("NOT isolated")
    assert run.summary["sandbox"]["statement"]["files"].startswith("NOT isolated")
    assert any("UNSAFE" in n for n in run.summary["sandbox"]["notes"])
    assert "UNSAFE" in run.proc.stderr
    assert int(run.rows["full"]["score"]) == run.manifest["max_score"]
    assert int(run.rows["detached_grandchild"]["score"]) == run.manifest["max_score"]
    assert run.rows["os_exit_call"]["status"] == "crashed" and int(run.rows["os_exit_call"]["6.2"]) == 0
    assert "left 1 process" in run.rows["detached_grandchild"]["flags"]
    # counted for the child it came from, also when another child's end found it first (--jobs 2)
    assert "left" not in run.rows["full"]["flags"] + run.rows["os_exit_call"]["flags"]
    for p in marker_dir.iterdir():
        p.unlink()
    time.sleep(1.5)
    assert list(marker_dir.iterdir()) == [] and live_child_processes(work_tmp) == []
    assert expect["full"]["status"] == "ok"


def test_nobody_sandbox_only_for_one_protected_submission(tmp_path):
    """Without namespaces the child runs as nobody in the host's /tmp: refused for a batch, and refused
    for one submission while nobody could read the course (the message names the chmod)."""
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    (tmp_path / "subs" / "alice" / NB["06"]).write_bytes(notebook("06"))
    batch = run_grader([tmp_path / "subs", "--out", tmp_path / "out", "--chapters", "06", "--sandbox", "nobody"])
    assert batch.returncode == 2 and "--single" in batch.stderr, batch.stderr[-1500:]
    single = run_grader([tmp_path / "subs" / "alice", "--single", "--out", tmp_path / "out1", "--chapters", "06",
                         "--sandbox", "nobody"])
    from course_grader.sandbox import nobody_can_reach

    if not nobody_can_reach(sys.base_prefix):  # e.g. Python under /root: nobody cannot even start it
        assert single.returncode == 2 and "nobody cannot run this Python" in single.stderr, single.stderr[-1500:]
    elif nobody_can_reach(str(SOLUTIONS)):
        assert single.returncode == 2 and "chmod -R go-rwx" in single.stderr and str(SOLUTIONS) in single.stderr, \
            single.stderr[-1500:]
    else:  # pragma: no cover - a checkout nobody cannot read
        assert single.returncode == 0


def test_extra_tests_that_would_leak_expected_are_refused(tmp_path):
    """An extra cases file that registers its cases through an alias, with ``expected`` in a ``**`` dict the
    stripper cannot see, keeps it in the student copy: the reference run sees it and the grading does not start.
    One that calls ``Case(*args, **kwargs)`` is refused by the stripper itself (by name, never by position)."""
    extra = tmp_path / "extra.py"
    extra.write_text('''
from course_exercise_cases import Case, to_array, _randn
import torch.nn.functional as F
MyCase = Case
def _x():
    return _randn(7001, 4, 6, scale=3.0)
def _produce(ns):
    return {"y": to_array(ns.gelu(_x()), "gelu(x)", kind="f")}
def _expected():
    return {"y": F.gelu(_x().double()).numpy()}
CASES = [MyCase("6.2-extra-alias", "06", "6.2", 5, ("gelu",), _produce, **{"expected": _expected}, rtol=1e-5,
                atol=1e-6, hint="exact GELU")]
''')
    subs = write_folder(tmp_path / "subs" / "stub", {NB["06"]: (EXERCISES / NB["06"]).read_bytes()}).parent
    proc = run_grader([subs, "--out", tmp_path / "out", "--chapters", "06", "--extra-tests", extra])
    assert proc.returncode == 2 and "still carries expected values" in proc.stderr, proc.stderr[-1500:]
    helper = tmp_path / "helper.py"  # the same through a helper that calls Case with *args and **kwargs
    helper.write_text(extra.read_text().replace(
        "MyCase = Case\n", "def MyCase(*args, **kwargs):\n    return Case(*args, **kwargs)\n"))
    proc = run_grader([subs, "--out", tmp_path / "out", "--chapters", "06", "--extra-tests", helper])
    assert proc.returncode == 2 and "cannot be made safely" in proc.stderr and "Case(*...)" in proc.stderr, \
        proc.stderr[-1500:]
    extra.write_text(extra.read_text().replace('**{"expected": _expected}', "expected=_expected"))
    run = load_run(tmp_path / "out", run_grader([subs, "--out", tmp_path / "out", "--chapters", "06",
                                                 "--extra-tests", extra]))
    assert int(run.rows["stub"]["score"]) == 0


def test_single_submission_mode(tmp_path):
    sub = write_folder(tmp_path / "anything", {NB["06"]: notebook("06")})
    out = tmp_path / "out"
    run = load_run(out, run_grader([sub, "--single", "--student", "alice", "--out", out, "--chapters", "06"]))
    assert list(run.rows) == ["alice"]
    assert json.loads((out / "alice" / "results.json").read_text())["score"] == run.manifest["max_score"]


@pytest.mark.parametrize("args, words", [
    (["--jobs", "0"], "--jobs"),
    (["--memory", "512"], "--memory"),
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
