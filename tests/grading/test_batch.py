"""The grader against adversarial submissions (one shared run: see ``conftest.batch``).

Each submission must score 0 on the exercises it attacks (or be flagged),
keep the points of the chapters it did not attack, get a row in every report,
and leave no process behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from adversaries import live_child_processes

NAMES = sorted([  # the submission names (test_every_built_submission_is_listed keeps them in step)
    "full", "stub", "partial", "sys_exit_import", "os_exit_import", "sys_exit_call", "os_exit_call",
    "endless_loop", "alloc_8gb", "print_flood", "detached_grandchild", "patch_reports", "always_equal",
    "tensor_subclass", "forged_results", "reads_solutions", "ships_modules", "ships_modules_correct",
    "zip_traversal", "zip_bomb", "not_a_zip", "empty_submission", "nan_inf", "wrong_dtype_shape",
    "syntax_error", "not_a_notebook", "warnings_stderr", "delegates_builtin",
    # each mistake costs its own points: the course's definition stands in for a dependency (4.2 on 4.1, 8.3 on 8.2)
    "dependent_on_wrong", "standin_thief",
    # isolation attacks (each earned points or left traces on the grader before the redesign)
    "steals_expected", "runs_solution_source", "clock_stretch", "leaves_traces", "forges_channel",
    "setsid_spinners", "fills_scratch_and_forks", "raises_everywhere", "fixed_inputs_only", "deadline_flood",
    # the cases ship inside the package, in the folder the child imports from
    "reads_packaged_cases"])


def test_every_built_submission_is_listed(batch):
    assert sorted(batch.expect) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_scores(batch, name):
    e = batch.expect[name]
    row = batch.rows[name]
    for ex in e["zero"]:
        assert int(row[ex]) == 0, f"{name}: exercise {ex} should score 0, got {row[ex]}"
    for ex in e["full"]:
        assert int(row[ex]) == batch.points(ex), f"{name}: exercise {ex} should keep {batch.points(ex)}, got {row[ex]}"
    if e.get("zero_if_hidden"):
        hidden = batch.summary["sandbox"]["hides_paths"]
        for ex in e["zero_if_hidden"]:
            if hidden:
                assert int(row[ex]) == 0, f"{name}: {ex} read the hidden solutions and scored {row[ex]}"
    assert int(row["score"]) == sum(int(row[ex]) for ex in batch.summary["exercises"])
    assert int(row["max"]) == batch.manifest["max_score"]


@pytest.mark.parametrize("name", NAMES)
def test_status_flags_notes(batch, name):
    e = batch.expect[name]
    row = batch.rows[name]
    if e.get("status"):
        assert row["status"] == e["status"], f"{name}: status {row['status']}"
    assert row["status"] in ("ok", "timeout", "crashed", "memory", "unreadable", "missing", "invalid submission")
    if e.get("flag"):
        assert e["flag"] in row["flags"], f"{name}: flags {row['flags']!r}"
    if e.get("note"):
        g = batch.grade(name)  # the grader's notes, then what the child said about the notebooks
        notes = " ".join([*g["notes"], *(n for ns in g["child_notes"].values() for n in ns)])
        assert e["note"] in notes, f"{name}: notes {notes!r}"


def test_full_and_partial_exact(batch):
    assert int(batch.rows["full"]["score"]) == batch.manifest["max_score"]
    assert int(batch.rows["stub"]["score"]) == 0
    lost = batch.points("4.2") + batch.points("6.2")
    assert int(batch.rows["partial"]["score"]) == batch.manifest["max_score"] - lost


def test_dependent_exercises_run_with_the_course_definition(batch):
    """4.2 and 8.3 are right, 4.1 and 8.2 wrong: the dependent cases keep their points, and say why."""
    cases = batch.grade("dependent_on_wrong")["cases"]
    for exercise, name, own in (("4.2", "scaled_dot_product_attention", "4.1"), ("8.3", "causal_mask", "8.2")):
        mine = [c for c in cases if c["exercise"] == exercise]
        assert mine and all(c["passed"] for c in mine), [c["message"] for c in mine if not c["passed"]]
        assert all(f"ran with the course's {name} (exercise {own})" in c["note"] for c in mine), mine[0]["note"]
        assert not any(c["passed"] for c in cases if c["exercise"] == own)
    assert not any(c.get("note") for c in cases if c["exercise"] in ("4.1", "8.1", "8.2", "6.1", "6.2"))
    # a wrong dependent case tells the student the course's function was used
    stub = [c for c in batch.grade("stub")["cases"] if c["exercise"] == "8.3"]
    assert stub and all("ran with the course's causal_mask (exercise 8.2) in place of yours" in c["message"]
                        for c in stub), stub[0]["message"]


def test_standin_comes_only_after_its_exercise_is_closed(batch):
    """The thief withholds 8.2's results until the course's causal_mask reaches its namespace (it does: in 8.3's
    unit), then sends them: they arrive after 8.2's cases are closed and count for nothing."""
    g = batch.grade("standin_thief")
    assert "STANDIN-THIEF: sent 8.2" in g["stderr_tail"], g["stderr_tail"][-500:]  # the attack ran
    mine = [c for c in g["cases"] if c["exercise"] == "8.2"]
    assert mine and not any(c["passed"] for c in mine)
    assert all("no result was recorded" in c["message"] for c in mine), mine[0]["message"]


def test_packaged_cases_are_covered(batch):
    """The package's cases file (every expected()) lies inside the folder the child imports from: the
    child finds its folder covered, so reading, listing or importing it gets nothing (and 6.2, which the
    submission answers with the stolen expected(), scores 0 - see test_scores)."""
    from adversaries import PACKAGED_CASES_ATTACK, PACKAGED_CASES_PROBE

    from course_exercises.casefile import CASES_FILE, cases_source

    assert CASES_FILE.is_file() and "def _e_" in cases_source(CASES_FILE)  # what there is to steal
    cases = batch.grade(PACKAGED_CASES_ATTACK)["cases"]
    # (a rejection case catches the probe's error itself: only the value cases report it)
    seen = [c["child_error"] or "" for c in cases if c["exercise"] == "6.1" and "-rejects-" not in c["case_id"]]
    assert seen and all(PACKAGED_CASES_PROBE in text for text in seen), seen
    probe = seen[0]
    assert "read: PermissionError" in probe or "read: FileNotFoundError" in probe, probe
    assert "listdir: PermissionError" in probe or "listdir: FileNotFoundError" in probe, probe
    assert "import: done" not in probe and "patched" not in probe and "other copy read" not in probe, probe
    assert not any(c["passed"] for c in cases if c["exercise"] in ("6.1", "6.2"))


def test_extra_tests_module_is_graded(batch):
    ids = [c["id"] for c in batch.manifest["cases"]]
    assert "6.2-extra-wide-range" in ids
    full = {c["case_id"]: c for c in batch.grade("full")["cases"]}
    assert full["6.2-extra-wide-range"]["passed"] is True
    stub = {c["case_id"]: c for c in batch.grade("stub")["cases"]}
    assert stub["6.2-extra-wide-range"]["passed"] is False


def test_every_submission_has_every_report(batch):
    assert sorted(batch.rows) == NAMES
    for name in NAMES:
        for f in ("results.json", "feedback.md", "grade.json"):
            assert (batch.out / name / f).is_file(), f"{name}/{f} missing"
    leftovers = [p for p in batch.out.rglob("*") if (p.name.startswith(".") or p.name.endswith(".tmp"))
                 and p != batch.out / ".lock"]  # the run's lock file stays (removing it would race a next run)
    assert leftovers == [], f"temporary files left: {leftovers}"


def test_gradescope_results_schema(batch):
    for name in NAMES:
        r = batch.results(name)
        assert set(r) >= {"score", "max_score", "execution_time", "output", "visibility", "tests"}
        assert r["score"] == int(batch.rows[name]["score"])
        graded = [t for t in r["tests"] if t["max_score"] > 0]
        assert len(graded) == len(batch.manifest["cases"])
        assert sum(t["score"] for t in r["tests"]) == r["score"]
        for t in r["tests"]:
            assert set(t) >= {"name", "score", "max_score", "status", "output", "visibility"}
            assert t["status"] in ("passed", "failed")
            assert (t["status"] == "passed") == (t["score"] == t["max_score"] > 0)
    flagged = batch.results("delegates_builtin")["tests"][-1]
    assert flagged["visibility"] == "hidden" and "F.gelu" not in flagged["name"]


def test_summary_names_versions_and_manifest_hash(batch):
    s = batch.summary
    assert s["versions"]["python"] and s["versions"]["torch"] and s["versions"]["numpy"]
    manifest_bytes = Path(s["manifest"]).read_bytes()
    assert s["manifest_sha256"] == hashlib.sha256(manifest_bytes).hexdigest()
    assert s["submissions"] == len(NAMES)
    assert sum(s["statuses"].values()) == len(NAMES)
    for name in NAMES:
        assert batch.grade(name)["manifest_hash"] == s["manifest_sha256"]
    assert set(s["sandbox"]["statement"]) == {"network", "processes", "ipc", "user", "files", "keyrings", "cpu_memory",
                                              "cgroup_files", "user_namespaces", "file_locks", "file_watches"}
    assert s["sandbox"]["keyrings_denied"] is True
    assert s["sandbox"]["locks_neutral"] is True and s["sandbox"]["watches_denied"] is True  # issue 22 F5/F6
    assert s["sandbox"]["statement"]["file_locks"].startswith("no-ops (seccomp)")
    assert s["sandbox"]["statement"]["file_watches"].startswith("denied (seccomp)")
    assert s["sandbox"]["cgroups_hidden"] is True and s["sandbox"]["userns_denied"] is True
    assert s["sandbox"]["weakened"] == []
    assert s["sandbox"]["safe"] is True, "the tests run where the safe sandbox works (root, unshare)"
    assert {batch.rows[name]["sandbox"] for name in NAMES} == {s["sandbox"]["mode"]}  # plain: nothing weakened


def test_no_process_left_and_nothing_written_later(batch, marker_dir, work_tmp):
    assert live_child_processes(work_tmp) == []
    for p in marker_dir.iterdir():
        p.unlink()
    before = (batch.out / "detached_grandchild" / "results.json").read_bytes()
    time.sleep(1.5)
    assert not (batch.out / "pwned.txt").exists()
    assert list(marker_dir.iterdir()) == [], "a detached process was still running after grading"
    after = (batch.out / "detached_grandchild" / "results.json").read_bytes()
    assert before == after and b"forged" not in after
    assert live_child_processes(work_tmp) == []


def test_shipped_modules_never_imported(batch, marker_dir):
    assert not (marker_dir / "shadow-module-imported").exists()
    assert int(batch.rows["ships_modules_correct"]["score"]) == batch.manifest["max_score"]


def test_unsafe_archives_extract_nothing_outside(batch):
    base = batch.subs.parent
    assert not (base / "04_attention.ipynb").exists() and not (base.parent / "04_attention.ipynb").exists()
    flags = batch.rows["zip_traversal"]["flags"]
    assert "symbolic link in zip" in flags and "'..' in the path" in flags and "absolute path" in flags


def test_timeout_and_crash_keep_other_chapters(batch):
    g = batch.grade("endless_loop")
    assert g["chapter_status"] == {"04": "ok", "06": "timeout", "08": "ok"}
    g = batch.grade("os_exit_import")
    assert g["chapter_status"]["04"] == "crashed" and g["chapter_status"]["06"] == "ok"
    assert g["runtime"] < 60


def test_the_clock_is_the_parents(batch):
    """Files the child creates do not restart the chapter's clock: killed at --timeout (10 s)."""
    g = batch.grade("clock_stretch")
    assert g["chapter_status"] == {"04": "ok", "06": "timeout", "08": "ok"}
    assert g["runtime"] < batch.expect["clock_stretch"]["max_runtime"], g["runtime"]


def test_nothing_survives_a_submission(batch, marker_dir, work_tmp):
    """No file in the host's shared places, no SysV segment, no deep tree, no work folder."""
    import subprocess

    from adversaries import TRACE

    found = []
    for folder in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", str(marker_dir)):
        try:
            found += [os.path.join(folder, n) for n in os.listdir(folder) if TRACE in n]
        except OSError:
            pass
    assert found == [], found
    ipcs = subprocess.run(["ipcs", "-m"], capture_output=True, text=True).stdout
    assert "0x5eed1234" not in ipcs.lower(), ipcs
    assert list(work_tmp.iterdir()) == [], f"work folders left: {list(work_tmp.iterdir())}"
    assert int(batch.rows["leaves_traces"]["score"]) == batch.manifest["max_score"]


def test_forged_frames_earn_nothing(batch):
    g = batch.grade("forges_channel")
    assert g["chapter_status"]["08"] == "ok"
    assert all(not c["passed"] for c in g["cases"] if c["exercise"].startswith("4."))
    assert any("result protocol" in f for f in g["flags"]), g["flags"]


def _feedback_and_details(batch, student: str) -> str:
    return "\n".join((batch.out / student / name).read_text() for name in ("feedback.md", "details.md"))


def test_feedback_teaches(batch):
    assert "not attempted" in (batch.out / "stub" / "feedback.md").read_text()
    text = (batch.out / "stub" / "details.md").read_text()
    assert "NotImplementedError: Exercise 4.1" in text and "Hint:" in text
    text = _feedback_and_details(batch, "nan_inf")
    assert "NaN or infinite" in text
    text = _feedback_and_details(batch, "wrong_dtype_shape")
    assert "expected bool" in text and "has shape" in text


def test_warnings_cost_nothing(batch):
    assert int(batch.rows["warnings_stderr"]["score"]) == batch.manifest["max_score"]
    assert batch.rows["warnings_stderr"]["status"] == "ok"


def test_print_flood_is_cut(batch):
    g = batch.grade("print_flood")
    assert any("printed too much" in n for n in g["notes"])
    assert len(g["stderr_tail"]) <= 1500


def test_child_errors_are_only_feedback(batch):
    """The forged .json notes (error None) and symlinked .npy files earn nothing."""
    g = batch.grade("forged_results")
    forged = [c for c in g["cases"] if c["exercise"] == "4.1"]
    assert forged and all(not c["passed"] for c in forged)
    json.dumps(g)  # the record stays plain JSON


def _code_cells(notebook: Path) -> int:
    return sum(c["cell_type"] == "code" for c in json.loads(notebook.read_text(encoding="utf-8"))["cells"])


def test_feedback_numbers_code_cells_like_the_check_command(batch):
    """Cell numbers in flags and messages count code cells only, as ``course_exercises.check`` does.

    The adversarial cell is the last cell of chapter 06; counting markdown
    cells too would give a larger number that a student cannot find.
    """
    from adversaries import NB

    notebook = batch.subs / "delegates_builtin" / NB["06"]
    n_code = _code_cells(notebook)
    n_all = len(json.loads(notebook.read_text(encoding="utf-8"))["cells"])
    assert n_all > n_code  # the chapter has markdown cells, so the two numberings differ
    flags = batch.rows["delegates_builtin"]["flags"]
    assert f"code cell {n_code}" in flags, flags
    assert f"(cell {n_all})" not in flags, flags

    notebook = batch.subs / "syntax_error" / NB["06"]
    grade = batch.grade("syntax_error")
    errors = " ".join(grade["child_notes"]["06"])  # the skipped cell is said once, never once per case
    assert errors.count("has a syntax error") == 1, errors[:2000]
    assert not any("syntax error" in (c["message"] + (c.get("child_error") or "")) for c in grade["cases"])
    n_code = _code_cells(notebook)
    assert f"code cell {n_code}" in errors, errors[:2000]
    # the student sees their own file name, not the sandbox's temporary folder
    assert f"notebook '{NB['06']}'" in errors, errors[:2000]
    assert "/submission/" not in errors and "course-grade" not in errors, errors[:2000]
