"""Report folders keep history (issue 13, item 7).

Grading some chapters (``--chapters 04``) into a folder of earlier reports keeps the other chapters' grades
and replaces the regraded ones, each with when it was graded; a student graded before and missing now stays
in ``grades.csv`` (status ``missing submission``) and ``summary.json`` (``missing``); earlier reports the
grader cannot read stop the run unless ``--force``. The unit tests call :mod:`course_grader.report`; the others run the command (root
and ``unshare``, like the other grader tests).
"""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from adversaries import EXERCISES, NB, SOLUTIONS, write_folder
from grading_helpers import load_run, run_grader

from course_grader import report
from course_grader.report import StudentResult


def _case(cid: str, passed: bool, points: int = 2) -> dict:
    ex = cid.split("-")[0]
    return {"case_id": cid, "exercise": ex, "function": f"f{ex}", "points": points if passed else 0,
            "max_points": points, "passed": passed, "message": "" if passed else f"Exercise {ex}, case {cid}: wrong",
            "child_error": None}


def _record(student: str, cases: list[dict], when: str, manifest: str, **kw) -> StudentResult:
    ex, top = {}, {}
    for c in cases:
        ex[c["exercise"]] = ex.get(c["exercise"], 0) + c["points"]
        top[c["exercise"]] = top.get(c["exercise"], 0) + c["max_points"]
    return StudentResult(student, "h", manifest, kw.pop("status", "ok"), sum(ex.values()), sum(top.values()), ex,
                         top, cases, graded_at=when, **kw)


T1, T2 = "2026-11-30T10:00:00+00:00", "2026-12-02T09:30:00+00:00"


def test_merge_keeps_other_chapters_and_replaces_the_regraded_ones():
    earlier = _record("ada", [_case("4.1-a", False), _case("4.1-b", True), _case("6.1-a", True),
                              _case("8.1-a", False)], T1, "m1",
                      flags=["delegates 6.1: x", "delegates 4.1: y"],
                      notes=["Chapter 08: stopped after the time limit", "04_attention.ipynb: old note"],
                      chapter_status={"04": "ok", "06": "ok", "08": "timeout"}, status="timeout")
    now = _record("ada", [_case("4.1-a", True), _case("4.1-b", True), _case("4.2-a", True)], T2, "m2",
                  chapter_status={"04": "ok"})
    merged = report.merge_results(earlier, now, ["04"])
    assert [c["case_id"] for c in merged.cases] == ["4.1-a", "4.1-b", "4.2-a", "6.1-a", "8.1-a"]
    assert merged.exercises == {"4.1": 4, "4.2": 2, "6.1": 2, "8.1": 0}
    assert (merged.score, merged.max_score) == (8, 10)
    assert merged.chapter_graded_at == {"04": T2, "06": T1, "08": T1}
    assert merged.chapter_manifest == {"04": "m2", "06": "m1", "08": "m1"}
    assert merged.chapter_status == {"04": "ok", "06": "ok", "08": "timeout"} and merged.status == "timeout"
    assert merged.flags == ["delegates 6.1: x"]  # 4.1's old flag went with the regraded chapter
    assert merged.notes == ["Chapter 08: stopped after the time limit"]
    assert report.graded_cell(merged) == "04 2026-12-02 09:30 UTC; 06,08 2026-11-30 10:00 UTC"
    again = report.merge_results(merged, _record("ada", [_case("6.1-a", False)], T2, "m3"), ["06"])
    assert again.exercises == {"4.1": 4, "4.2": 2, "6.1": 0, "8.1": 0}  # merging again stays right


def test_merge_without_an_earlier_record_or_with_everything_regraded_is_the_run():
    now = _record("ada", [_case("4.1-a", True)], T2, "m2")
    assert report.merge_results(None, now, ["04"]).cases == now.cases
    earlier = _record("ada", [_case("4.1-a", False)], T1, "m1")
    merged = report.merge_results(earlier, _record("ada", [_case("4.1-a", True)], T2, "m2"), ["04"])
    assert merged.score == 2 and merged.chapter_graded_at == {"04": T2}


def test_grades_csv_lists_missing_students_and_leaves_ungraded_cells_empty():
    ada = report.merge_results(None, _record("ada", [_case("4.1-a", True)], T2, "m2"), ["04"])
    bob = report.missing_row(_record("bob", [_case("4.1-a", True), _case("6.1-a", True)], T1, "m1"))
    rows = {r["student"]: r for r in csv.DictReader(report.grades_csv([ada, bob], ["4.1", "6.1"]).splitlines())}
    assert rows["bob"]["status"] == "missing submission" and rows["bob"]["score"] == "4"
    assert rows["ada"]["6.1"] == "" and rows["ada"]["4.1"] == "2"
    assert rows["ada"]["graded"] == "2026-12-02 09:30 UTC"


def test_load_earlier_reads_records_and_names_what_it_cannot(tmp_path):
    report.write_student_files(tmp_path, _record("ada", [_case("4.1-a", True)], T1, "m1"))
    (tmp_path / "_reference").mkdir()
    (tmp_path / "bob").mkdir()
    (tmp_path / "bob" / "grade.json").write_text("{not json")
    (tmp_path / "summary.json").write_text(json.dumps({"history": [{"started": T1}]}))
    found = report.load_earlier(tmp_path)
    assert list(found.results) == ["ada"] and found.summary["history"] == [{"started": T1}]
    assert len(found.problems) == 1 and found.problems[0].startswith("bob/grade.json")


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------
def _notebooks(base, chapters=("04", "06")) -> dict[str, bytes]:
    return {NB[c]: (base / NB[c]).read_bytes() for c in chapters}


def _rows(out) -> dict[str, dict[str, str]]:
    with open(out / "grades.csv", newline="") as fh:
        return {r["student"]: r for r in csv.DictReader(fh)}


@pytest.fixture(scope="module")
def regraded(tmp_path_factory, work_tmp):
    """Chapters 04 and 06 graded for three students; then chapter 04 alone, with ada's 04 fixed, bob's 06
    broken (not regraded: his 06 grade must stay) and cleo gone."""
    base = tmp_path_factory.mktemp("history")
    subs, out = base / "subs", base / "out"
    write_folder(subs / "ada", {**_notebooks(SOLUTIONS, ("06",)), **_notebooks(EXERCISES, ("04",))})
    write_folder(subs / "bob", _notebooks(SOLUTIONS))
    write_folder(subs / "cleo", _notebooks(SOLUTIONS))
    first = load_run(out, run_grader([subs, "--out", out, "--chapters", "04", "06", "--timeout", "30"],
                                     work_tmp=work_tmp))
    first_grades = {s: first.grade(s) for s in ("ada", "bob", "cleo")}
    write_folder(subs / "ada", _notebooks(SOLUTIONS, ("04",)))
    write_folder(subs / "bob", _notebooks(EXERCISES, ("06",)))
    shutil.rmtree(subs / "cleo")
    second = load_run(out, run_grader([subs, "--out", out, "--chapters", "04", "--timeout", "30"],
                                      work_tmp=work_tmp))
    second.first, second.first_grades, second.subs = first, first_grades, subs
    return second


def test_a_subset_run_keeps_the_other_chapters(regraded):
    first, rows = regraded.first, regraded.rows
    points = {e: first.points(e) for e in ("4.1", "4.2", "6.1", "6.2")}
    assert rows["ada"]["4.1"] == str(points["4.1"]) and rows["ada"]["6.1"] == str(points["6.1"])  # 04 regraded
    assert rows["bob"]["6.1"] == str(points["6.1"])  # 06 not regraded: his earlier grade stands
    assert int(rows["ada"]["score"]) == int(rows["ada"]["max"]) == first.manifest["max_score"]
    g = regraded.grade("ada")
    assert g["chapter_graded_at"]["06"] == regraded.first_grades["ada"]["graded_at"]
    assert g["chapter_graded_at"]["04"] == g["graded_at"]
    assert g["chapter_manifest"]["04"] == regraded.summary["manifest_sha256"]
    assert g["chapter_manifest"]["06"] == regraded.first.summary["manifest_sha256"]
    assert rows["ada"]["graded"]
    earlier = regraded.out / "_history" / f"manifest-{regraded.first.summary['manifest_sha256']}.json"
    assert earlier.is_file()


def test_a_student_graded_before_and_missing_now_is_listed_as_missing(regraded):
    rows, summary = regraded.rows, regraded.summary
    assert rows["cleo"]["status"] == "missing submission"
    assert rows["cleo"]["score"] == regraded.first.rows["cleo"]["score"]
    assert rows["cleo"]["source"] == "cleo"
    assert summary["missing"] == ["cleo"] and summary["statuses"].get("missing submission") == 1
    assert [h["chapters"] for h in summary["history"]] == [["04", "06"], ["04"]]
    assert summary["history"][-1]["missing"] == ["cleo"]
    assert "missing submission" in regraded.proc.stdout
    assert (regraded.out / "cleo" / "grade.json").read_text()  # her report files are left as they were


def test_unreadable_earlier_reports_stop_the_run_unless_force(regraded, tmp_path, work_tmp):
    out = tmp_path / "out"
    shutil.copytree(regraded.out, out)
    (out / "bob" / "grade.json").write_text("{broken")
    proc = run_grader([regraded.subs, "--out", out, "--chapters", "04"], work_tmp=work_tmp)
    assert proc.returncode == 2, proc.stderr
    assert "--force" in proc.stderr and "bob/grade.json" in proc.stderr
    assert _rows(out) == _rows(regraded.out)  # nothing written
    forced = load_run(out, run_grader([regraded.subs, "--out", out, "--chapters", "04", "--force",
                                       "--timeout", "30"], work_tmp=work_tmp))
    assert forced.rows["bob"]["6.1"] == ""  # his unreadable record could not be kept: 06 is not graded now
    assert forced.rows["cleo"]["status"] == "missing submission"


def test_records_follow_the_submission_not_the_id(tmp_path, work_tmp):
    """Ids come from the names in the folder and can change between runs: a second folder ``Carol`` next to
    ``carol`` gives both a ``~hash`` id. carol's record follows her submission (nobody is listed as missing),
    and a zip that now gets the id a folder had is refused rather than handed the folder's grades."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    write_folder(subs / "carol", _notebooks(SOLUTIONS, ("06",)))
    write_folder(subs / "dan", _notebooks(SOLUTIONS, ("06",)))
    first = load_run(out, run_grader([subs, "--out", out, "--chapters", "06", "--timeout", "30"], work_tmp=work_tmp))
    assert first.rows["carol"]["score"] == first.rows["carol"]["max"]
    write_folder(subs / "Carol", _notebooks(EXERCISES, ("06",)))
    second = load_run(out, run_grader([subs, "--out", out, "--chapters", "06", "--timeout", "30"], work_tmp=work_tmp))
    assert not second.summary.get("missing"), second.summary.get("missing")
    mine = [r for r in second.rows.values() if r["source"] == "carol"]
    assert len(mine) == 1 and mine[0]["score"] == mine[0]["max"], second.rows
    # dan's folder becomes a zip of stubs: the id "dan" now names another submission
    shutil.rmtree(subs / "dan")
    import zipfile
    with zipfile.ZipFile(subs / "dan.zip", "w") as z:
        z.writestr(NB["06"], (EXERCISES / NB["06"]).read_bytes())
    proc = run_grader([subs, "--out", out, "--chapters", "06", "--timeout", "30"], work_tmp=work_tmp)
    assert proc.returncode == 2 and "dan was graded before from 'dan'" in proc.stderr and "--force" in proc.stderr, proc.stderr


def test_notes_do_not_pile_up_over_regrades():
    """Notes come from the student's process: forged ones about a kept chapter must not grow with each regrade."""
    earlier = _record("dan", [_case("1.1-a", True)], "2026-12-01 10:00 UTC", "m1",
                      notes=[f"Chapter 01 note {i}" for i in range(report.MAX_MERGED_NOTES)])
    now = _record("dan", [_case("8.1-a", True)], "2026-12-02 10:00 UTC", "m2",
                  notes=[f"Chapter 01 forged {i}" for i in range(20)])
    merged = report.merge_results(earlier, now, ["08"])
    assert len(merged.notes) == report.MAX_MERGED_NOTES and merged.notes[0] == "Chapter 01 forged 0"
