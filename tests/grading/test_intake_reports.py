"""Intake and reports against hostile names and hostile text (no child process is started here).

The student controls every name in their submission and every byte their code
prints or raises. These tests check that

* every entry of a SUBMISSIONS folder gets a row (only OS litter is skipped,
  with a note), and an entry of the wrong form says what to submit instead;
* student ids are safe folder names and CSV cells, stay recognisable in any
  script, never take a report's name, and collide deterministically;
* the reports map each id to the name it was made from;
* nothing a student wrote can dress up ``feedback.md``, ``results.json`` or
  ``grades.csv`` (fences, headings, links, images, HTML, formulas, terminal
  escapes), while honest feedback still reads cleanly.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import sys
import unicodedata
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from course_exercises.compare import error_line
from course_grader import intake, report
from course_grader.intake import Submission, collect_notebooks, discover
from course_grader.report import StudentResult, atomic_write, feedback_markdown, grades_csv, gradescope_results

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = {"04": "04_attention.ipynb", "06": "06_feed_forward.ipynb"}
OTHER_ARCHIVES = [".tar.gz", ".tgz", ".tar", ".rar", ".7z", ".gz", ".bz2", ".xz"]
FORBIDDEN_IN_NAMES = set('/\\:*?"<>|')
WINDOWS_DEVICES = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _by_source(subs: list[Submission]) -> dict[str, Submission]:
    return {s.path.name: s for s in subs}


# ---------------------------------------------------------------------------
# 1. every submission gets a row
# ---------------------------------------------------------------------------
def test_other_archives_hidden_names_and_loose_files_get_an_invalid_row(tmp_path):
    (tmp_path / "alice").mkdir()
    _zip(tmp_path / "bob.zip", {NOTEBOOKS["04"]: b"{}"})
    for i, suffix in enumerate(OTHER_ARCHIVES):
        (tmp_path / f"student{i}{suffix}").write_bytes(b"\x1f\x8b not really")
    (tmp_path / ".carol").mkdir()
    _zip(tmp_path / ".dave.zip", {NOTEBOOKS["04"]: b"{}"})
    (tmp_path / "notes.txt").write_text("my answers")
    subs = _by_source(discover([tmp_path]))

    assert set(subs) == {"alice", "bob.zip", ".carol", ".dave.zip", "notes.txt",
                         *(f"student{i}{s}" for i, s in enumerate(OTHER_ARCHIVES))}
    assert subs["alice"].invalid is None and subs["bob.zip"].invalid is None
    for i, suffix in enumerate(OTHER_ARCHIVES):
        why = subs[f"student{i}{suffix}"].invalid
        assert why and f"a {suffix} archive" in why and "a folder or a .zip of the notebooks" in why, why
    for name in (".carol", ".dave.zip"):
        why = subs[name].invalid
        assert why and "starts with a dot" in why and "a folder or a .zip" in why, why
    assert "single file" in subs["notes.txt"].invalid and "a folder or a .zip" in subs["notes.txt"].invalid
    assert all(not s.student.startswith(".") for s in subs.values())


def test_os_litter_is_skipped_with_a_note_on_stderr(tmp_path, capsys):
    (tmp_path / "alice").mkdir()
    _zip(tmp_path / "bob.zip", {})
    (tmp_path / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (tmp_path / "Thumbs.db").write_bytes(b"x")
    (tmp_path / "__MACOSX").mkdir()
    (tmp_path / "._bob.zip").write_bytes(b"\0\5\26\7")  # AppleDouble file of bob.zip
    (tmp_path / "._erin").write_bytes(b"x")  # no erin next to it: not litter
    (tmp_path / "desktop.ini").mkdir()  # a *folder* with a litter file's name is a submission
    subs = _by_source(discover([tmp_path]))
    assert set(subs) == {"alice", "bob.zip", "._erin", "desktop.ini"}
    err = capsys.readouterr().err
    for name in (".DS_Store", "Thumbs.db", "__MACOSX", "._bob.zip"):
        assert name in err and "skipped" in err, err


def test_the_reason_from_discover_survives_collect_notebooks(tmp_path):
    (tmp_path / "alice.tar.gz").write_bytes(b"\x1f\x8b")
    (tmp_path / ".bob").mkdir()
    (tmp_path / ".bob" / NOTEBOOKS["04"]).write_bytes(b"{}")
    subs = discover([tmp_path])
    assert len(subs) == 2
    for sub in subs:
        reason = sub.invalid
        assert reason
        collect_notebooks(sub, NOTEBOOKS, ["04"])
        assert sub.invalid == reason and sub.notebooks == {} and len(sub.sha256) == 64


def test_single_submission_of_the_wrong_form_is_invalid(tmp_path):
    archive = tmp_path / "submission.tar.gz"
    archive.write_bytes(b"\x1f\x8b")
    [sub] = discover([archive], single=True)
    assert sub.invalid and ".tar.gz archive" in sub.invalid
    folder = tmp_path / ".submission"  # the instructor's own path: its name is not the student's
    folder.mkdir()
    [sub] = discover([folder], single=True, student="alice")
    assert sub.invalid is None and sub.student == "alice"


# ---------------------------------------------------------------------------
# 2. ids
# ---------------------------------------------------------------------------
def _written_into_out() -> set[str]:
    """Names the grader writes directly into --out, read from its source (``out_dir / "name"``)."""
    names = set()
    for module in ("cli.py", "report.py", "grader.py"):
        text = (ROOT / "course_grader" / module).read_text(encoding="utf-8")
        names.update(re.findall(r"out_dir\s*/\s*[\"']([^\"']+)[\"']", text))
    return names


def test_reserved_ids_cover_every_name_the_grader_writes_into_out():
    written = _written_into_out()
    assert {"grades.csv", "summary.json", "_reference"} <= written
    assert written <= intake.RESERVED_IDS


def _result(student: str, **kw) -> StudentResult:
    base = dict(student=student, submission_hash="h" * 64, manifest_hash="m", status="ok", score=1, max_score=2,
                exercises={"4.1": 1}, exercises_max={"4.1": 2},
                cases=[{"case_id": "4.1-a", "exercise": "4.1", "function": "f", "points": 1, "max_points": 1,
                        "passed": True, "message": "", "child_error": None},
                       {"case_id": "4.1-b", "exercise": "4.1", "function": "f", "points": 0, "max_points": 1,
                        "passed": False, "message": "Exercise 4.1 (f), case 4.1-b:\n  - wrong", "child_error": None}])
    base.update(kw)
    return StudentResult(**base)


def test_report_names_as_student_folders_do_not_break_the_reports(tmp_path):
    subs_dir, out = tmp_path / "subs", tmp_path / "out"
    for name in ("grades.csv", "summary.json", "_reference", "GRADES.CSV", "Summary.JSON", "alice"):
        (subs_dir / name).mkdir(parents=True)
    subs = discover([subs_dir])
    # what cli.main does with them: per-student folders first, the run's files last
    (out / "_reference").mkdir(parents=True)
    for sub in subs:
        report.write_student_files(out, _result(sub.student))
    atomic_write(out / "grades.csv", grades_csv([_result(s.student) for s in subs], ["4.1"]))
    atomic_write(out / "summary.json", json.dumps({"submissions": len(subs)}))
    assert (out / "grades.csv").is_file() and (out / "summary.json").is_file()
    ids = [s.student for s in subs]
    assert len({i.casefold() for i in ids}) == len(ids) == 6
    assert not {i.casefold() for i in ids} & intake.RESERVED_IDS
    flagged = [s for s in subs if s.path.name.casefold() in {"grades.csv", "summary.json"}]
    assert len(flagged) == 4 and all(any("reserved" in f for f in s.flags) for s in flagged)
    assert {s.path.name: s.student for s in subs}["_reference"] == "s_reference"  # ids start with a letter or digit


def test_write_student_files_refuses_an_unsafe_id(tmp_path):
    for bad in ("", ".", "..", "../x", "a/b", "grades.csv", ".hidden"):
        with pytest.raises(ValueError):
            report.write_student_files(tmp_path, _result(bad))


def test_unicode_names_stay_recognisable(tmp_path):
    names = ["李雷", "王芳", "Ñandú", "किरण", "محمد", "Ωμέγα", "Zoë Ødegård", "田中 太郎"]
    for name in names:
        (tmp_path / name).mkdir()
    ids = {s.path.name: s.student for s in discover([tmp_path])}
    assert ids["李雷"] == "李雷" and ids["王芳"] == "王芳"
    assert ids["Ñandú"] == "Ñandú" and ids["किरण"] == "किरण" and ids["محمد"] == "محمد" and ids["Ωμέγα"] == "Ωμέγα"
    assert ids["Zoë Ødegård"] == "Zoë_Ødegård" and ids["田中 太郎"] == "田中_太郎"


def test_ids_are_nfc_normalised(tmp_path):
    (tmp_path / "Jose\u0301").mkdir()  # decomposed, as macOS writes it
    [sub] = discover([tmp_path])
    assert sub.student == "Jos\u00e9" == unicodedata.normalize("NFC", sub.student)


HOSTILE_NAMES = [
    "back\\slash", "colon:star*q?", 'quote"<lt>|pipe', "new\nline", "esc\x1b[2Jape", "bidi\u202eevil", "zero\u200bwidth",
    "tab\there", "-rf", "+plus", "=HYPERLINK(1)", "@sum(1)", "_under", "~tilde", "trailing.", "CON", "nul.txt",
    "Com1.zip.d", "lpt9", "  spaced  ", "\u0301mark-first", "a" * 250, "\u00df" * 120, "\U0001f600" * 60,
    "..dots..", "x\udcffy",
]


def test_hostile_names_give_safe_unique_ids(tmp_path):
    subs_dir, out = tmp_path / "subs", tmp_path / "out"
    subs_dir.mkdir()
    for name in HOSTILE_NAMES:
        (subs_dir / name).mkdir()
    subs = discover([subs_dir])
    assert len(subs) == len(HOSTILE_NAMES)
    ids = [s.student for s in subs]
    assert len({i.casefold() for i in ids}) == len(ids)
    for sid in ids:
        assert sid and not (set(sid) & FORBIDDEN_IN_NAMES), sid
        assert all(unicodedata.category(c)[0] not in "CZ" for c in sid), ascii(sid)
        assert sid[0].isalnum() and not sid.endswith((".", " ")), sid
        assert sid == unicodedata.normalize("NFC", sid)
        assert len(sid.encode("utf-8")) <= 100 + 1 + 64, sid
        assert sid.split(".")[0].casefold() not in WINDOWS_DEVICES, sid
        (out / sid).mkdir(parents=True)  # usable as a folder of --out
    assert set(p.name for p in out.iterdir()) == set(ids)
    row = grades_csv([_result(i) for i in ids], ["4.1"]).splitlines()
    assert len(row) == len(ids) + 1  # one line per row: no id holds a line break


def test_colliding_names_get_a_suffix_from_their_name_not_their_order(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        (folder / "bob smith").mkdir(parents=True)
    (a / "bob_smith").mkdir()  # the folder whose name *is* the id keeps it
    (b / "bob?smith").mkdir()
    ids_a = {s.path.name: s.student for s in discover([a])}
    ids_b = {s.path.name: s.student for s in discover([b])}
    suffix = hashlib.sha256("bob smith".encode()).hexdigest()[:8]
    assert ids_a == {"bob_smith": "bob_smith", "bob smith": f"bob_smith~{suffix}"}
    assert ids_b["bob smith"] == f"bob_smith~{suffix}"
    assert ids_b["bob?smith"] == "bob_smith~" + hashlib.sha256("bob?smith".encode()).hexdigest()[:8]
    flagged = [s for s in discover([a]) if s.flags]
    assert [s.path.name for s in flagged] == ["bob smith"] and "duplicate" in flagged[0].flags[0]


def test_same_name_in_two_folders_gets_the_same_ids_whatever_the_order(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        (folder / "alice").mkdir(parents=True)
    forward = {str(s.path): s.student for s in discover([a, b])}
    backward = {str(s.path): s.student for s in discover([b, a])}
    assert forward == backward and len(set(forward.values())) == 2


def test_ids_differing_only_in_case_do_not_collide(tmp_path):
    (tmp_path / "Alice").mkdir()
    (tmp_path / "alice").mkdir()
    _zip(tmp_path / "ALICE.zip", {})
    ids = [s.student for s in discover([tmp_path])]
    assert len({i.casefold() for i in ids}) == 3
    assert all(i.casefold().startswith("alice~") for i in ids)


# ---------------------------------------------------------------------------
# 3. the reports map each id to its source
# ---------------------------------------------------------------------------
def test_submission_keeps_its_source_name(tmp_path):
    (tmp_path / "李雷 (copy)").mkdir()
    _zip(tmp_path / "bob.zip", {})
    subs = discover([tmp_path])
    assert {s.student: s.source for s in subs} == {"李雷__copy_": "李雷 (copy)", "bob": "bob.zip"}


def test_grades_csv_has_a_source_column_after_student():
    rows = [_result("bob_smith__2_"), _result("s_x", flags=["a\n=cmd|' /C calc'!A0", "b"])]
    sources = {"bob_smith__2_": "bob smith (2)", "s_x": "=x\r\n+y"}
    text = grades_csv(rows, ["4.1", "10.2"], sources)
    lines = text.splitlines()
    assert len(lines) == 3
    assert lines[0] == "student,source,score,max,4.1,10.2,status,runtime,flags,sandbox,submission_hash,graded"
    table = {r["student"]: r for r in csv.DictReader(io.StringIO(text))}
    assert table["bob_smith__2_"]["source"] == "bob smith (2)"
    assert table["s_x"]["source"] == "'=x\\n+y"
    assert table["s_x"]["flags"] == "a\\n=cmd|' /C calc'!A0; b"
    # without sources: the old columns, unchanged
    assert grades_csv(rows, ["4.1"]).splitlines()[0] == ("student,score,max,4.1,status,runtime,flags,sandbox,submission_hash,"
                                                         "graded")


def _defused(cell: str) -> bool:
    """A cell no spreadsheet runs: no formula start, no tab, CR or LF."""
    return cell[:1] not in ("=", "+", "-", "@") and not set(cell) & {"\t", "\r", "\n"}


LEADS = ["=", "+", "-", "@", "\t", "\r"]


@pytest.mark.parametrize("lead", LEADS)
def test_every_text_cell_is_defused(lead):
    r = _result(f"{lead}id", status=f"{lead}status", flags=[f"{lead}flag"], submission_hash=f"{lead}hash")
    r.sandbox = f"{lead}sandbox"
    row = next(csv.reader(io.StringIO(grades_csv([r], []).splitlines()[1])))
    assert len(row) == 9  # student, score, max, status, runtime, flags, sandbox, submission_hash, graded
    for cell in (row[0], row[3], row[5], row[6], row[7]):
        assert _defused(cell), row


@pytest.mark.parametrize("lead", LEADS)
def test_the_source_cell_is_defused(lead):
    row = next(csv.reader(io.StringIO(grades_csv([_result("x")], [], {"x": f"{lead}source"}).splitlines()[1])))
    assert row[1].endswith("source") and _defused(row[1]), row


def test_run_files_map_every_id_to_its_source(tmp_path):
    """What ``cli.main`` writes last: ``grades.csv`` with ``source`` and ``summary.json`` with ``sources``."""
    from course_grader.cli import write_run_files

    subs_dir, out = tmp_path / "subs", tmp_path / "out"
    for name in ("李雷", "王芳", "grades.csv", "summary.json", "_reference"):
        (subs_dir / name).mkdir(parents=True)
    (subs_dir / "alice.tar.gz").write_bytes(b"\x1f\x8b")
    subs = discover([subs_dir])
    results = [_result(s.student, status="invalid submission" if s.invalid else "ok") for s in subs]
    for r in results:
        report.write_student_files(out, r)
    write_run_files(out, subs, results, ["4.1"], {"submissions": len(results)})
    rows = list(csv.DictReader((out / "grades.csv").open(newline="", encoding="utf-8")))
    sources = {r["student"]: r["source"] for r in rows}
    assert sorted(sources.values()) == sorted(["李雷", "王芳", "grades.csv", "summary.json", "_reference",
                                               "alice.tar.gz"])
    assert sources["李雷"] == "李雷" and sources["s_reference"] == "_reference"
    assert {r["source"]: r["status"] for r in rows}["alice.tar.gz"] == "invalid submission"
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary == {"submissions": 6, "sources": sources}
    assert all((out / sid / "feedback.md").is_file() for sid in sources)


# ---------------------------------------------------------------------------
# 4. reports cannot be dressed up by student output
# ---------------------------------------------------------------------------
EVIL = ("done\n```\n# You got 100/100\n<img src=x onerror=alert(1)>\n[click here](http://evil.example)\n"
        "![pic](http://evil.example/p.png)\n~~~\n````\n<script>alert(1)</script> &amp; www.evil.com x@evil.com\n"
        "\x1b[2J\x1b[31mred\u202eevil")


def _evil_result() -> StudentResult:
    def case(cid, error):
        return {"case_id": cid, "exercise": "4.1", "function": "f", "points": 0, "max_points": 1, "passed": False,
                "message": f"Exercise 4.1 (f), case {cid}:\n  - {error_line(error)}", "child_error": error}

    return _result("alice", cases=[case("4.1-a", EVIL), case("4.1-b", EVIL), case("4.1-c", "Other: " + EVIL)],
                   notes=[f"Invalid submission: {EVIL!s}", "# heading\n## more <b>bold</b> [x](http://e.example)"],
                   flags=[f"unsafe zip member {EVIL!r} skipped"], stderr_tail=EVIL * 3)


def _markdown():
    markdown_it = pytest.importorskip("markdown_it")
    md = markdown_it.MarkdownIt("commonmark", {"linkify": True}).enable(["table", "strikethrough"])
    try:
        md.enable("linkify")
    except Exception:  # noqa: BLE001 - linkify-it-py missing: links from text are then not checked
        pass
    return md


def _walk(tokens):
    for t in tokens:
        yield t
        yield from _walk(t.children or [])


@pytest.mark.parametrize("render", [feedback_markdown, report.details_markdown])
def test_feedback_fences_cannot_be_closed_by_student_text(render):
    text = render(_evil_result())
    for fence in re.findall(r"^(`{3,})text$", text, flags=re.M):
        longest = max(len(m) for m in re.findall(r"`+", EVIL))
        assert len(fence) > longest
    assert "\x1b" not in text and "\u202e" not in text and "\\x1b[2J" in text


def test_feedback_renders_without_student_headings_links_images_or_html():
    md = _markdown()
    tokens = list(_walk(md.parse(feedback_markdown(_evil_result()))))
    kinds = [t.type for t in tokens]
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == ["Feedback for alice", "What to fix", "Flagged for review"]
    assert not {"link_open", "image", "html_block", "html_inline", "s_open", "em_open"} & set(kinds), set(kinds)
    fences = [t.content for t in tokens if t.type == "fence"]
    assert len(fences) == 1  # 4.1-a in full; 4.1-b (the same error) and 4.1-c (its own) one line each
    grader, quoted = fences[0].split("\n  Your code's error text (quoted, hidden characters escaped; at most "
                                     f"{report.CASE_ERROR_CHARS} characters shown):\n")
    assert grader == "case 4.1-a:\n  - your code raised an error (its text is quoted below)"
    assert quoted == "".join(f"  | {line}\n" for line in report.plain_text(EVIL, keep="\n").split("\n"))


def test_details_render_without_student_headings_links_images_or_html():
    md = _markdown()
    tokens = list(_walk(md.parse(report.details_markdown(_evil_result()))))
    kinds = [t.type for t in tokens]
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == ["Details for alice", "Notes", "Flags", "Every failing case",
                        "The end of your code's error output"]
    assert not {"link_open", "image", "html_block", "html_inline", "s_open", "em_open"} & set(kinds), set(kinds)
    fences = [t.content for t in tokens if t.type == "fence"]
    assert len(fences) == 3  # 4.1-a, 4.1-c (4.1-b repeats 4.1-a) and the stderr tail
    assert fences[0].startswith(report.plain_text(_evil_result().cases[0]["message"]) + "\n  Your code's error text")


def _visible_text(md, line: str) -> str:
    tokens = [t for t in _walk(md.parse(line)) if t.type in ("text", "code_inline", "text_special", "softbreak")]
    return "".join(" " if t.type == "softbreak" else t.content for t in tokens)


@pytest.mark.parametrize("text", [
    "Chapter 06: stopped after the time limit (an endless loop or very slow code?); its unfinished cases score 0.",
    "04_attention.ipynb is missing from the submission: its exercises score 0.",
    "Invalid submission: 'alice.tar.gz' is a .tar.gz archive, which the grader does not open; submit a folder.",
    "# heading <b>x</b> [l](http://e.example) ![i](p.png) *em* _em_ ~~s~~ `c` | www.evil.com a@b.example $x$ \\ &amp;",
    "- 1. + > bullet", "12) item", "bob_smith__2_", "alice~62dca8ff", "李雷",
])
def test_md_text_shows_exactly_the_text_and_nothing_else(text):
    md = _markdown()
    line = "- " + report.md_text(text)
    kinds = {t.type for t in _walk(md.parse(line))}
    assert kinds <= {"bullet_list_open", "bullet_list_close", "list_item_open", "list_item_close", "paragraph_open",
                     "paragraph_close", "inline", "text", "code_inline", "text_special"}, kinds
    assert _visible_text(md, line) == text


def test_results_json_is_declared_plain_text():
    res = gradescope_results(_evil_result())
    assert res["output_format"] == res["test_output_format"] == res["test_name_format"] == "text"
    assert all(t.get("output_format", "text") == "text" for t in res["tests"])
    dumped = json.dumps(res, ensure_ascii=False)
    assert "\x1b" not in dumped and "\u202e" not in dumped
    assert res["tests"][-1]["visibility"] == "hidden"


def test_csv_and_json_reports_hold_no_terminal_escapes():
    r = _evil_result()
    r.flags.append(EVIL)
    text = grades_csv([r], ["4.1"])
    assert "\x1b" not in text and "\u202e" not in text and len(text.splitlines()) == 2


# ---------------------------------------------------------------------------
# 5. honest feedback stays clean
# ---------------------------------------------------------------------------
def _honest_result() -> StudentResult:
    err = "NotImplementedError: Exercise 6.1: implement gelu\n  File \"06_feed_forward.ipynb\", code cell 7, line 3"

    def case(cid, ex, fn, passed, message="", error=None):
        return {"case_id": cid, "exercise": ex, "function": fn, "points": int(passed), "max_points": 1,
                "passed": passed, "message": message, "child_error": error}

    return StudentResult(
        "bob_smith", "h", "m", "timeout", 2, 5, {"4.1": 1, "6.1": 0, "6.2": 1}, {"4.1": 1, "6.1": 2, "6.2": 2}, [
            case("4.1-a", "4.1", "attention", True),
            case("6.1-a", "6.1", "gelu", False, f"Exercise 6.1 (gelu), case 6.1-a:\n  - your code raised: {err}", err),
            case("6.1-b", "6.1", "gelu", False, f"Exercise 6.1 (gelu), case 6.1-b:\n  - your code raised: {err}", err),
            case("6.2-a", "6.2", "ffn", False, "Exercise 6.2 (ffn), case 6.2-a:\n  - `y`: has shape (2, 3)\n"
                                               "  Hint: check `d_ff` and <eos> & co"),
            case("6.2-b", "6.2", "ffn", True),
        ],
        notes=["08_masks.ipynb is missing from the submission: its exercises score 0.",
               "Chapter 06: stopped after the time limit (an endless loop or very slow code?); its unfinished cases "
               "score 0."],
        stderr_tail="UserWarning: x is deprecated\n  warnings.warn(\n")


def test_honest_feedback_reads_cleanly():
    text = feedback_markdown(_honest_result())
    lines = text.splitlines()
    assert lines[0] == "# Feedback for bob_smith"
    assert "- `08_masks.ipynb` is missing from the submission: its exercises score 0." in lines
    assert ("- Chapter 06: stopped after the time limit (an endless loop or very slow code?); its unfinished cases "
            "score 0.") in lines
    assert "| 6.1 | gelu | 0 / 2 | not attempted |" in lines
    assert "| 6.2 | ffn | 1 / 2 | partly |" in lines
    assert "NotImplementedError" not in text.split("## What to fix")[1]  # an untouched exercise: its table row
    assert "```text" in lines and "````text" not in text  # the usual fence when nothing needs a longer one
    assert "  Hint: check `d_ff` and <eos> & co" in lines  # verbatim inside the fence: no entities, no escapes
    outside = re.sub(r"^```text\n.*?^```$", "", text, flags=re.M | re.S)
    assert "\\" not in outside and "&amp;" not in outside, outside
