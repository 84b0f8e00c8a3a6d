"""``feedback.md`` is feedback a student reads to the end (issue 13, item 6).

* one screen for a typical submission: a table of exercise, function, points and status; a run of untouched
  exercises is one row; no "the same error as" line per case;
* each failing exercise: one full message; the other failing cases one line each, with their own hint only
  where it matches (a float16 hint is not shown for a missing scale that the basic case shows too);
* plain numbers (no ``np.float64(...)``, four significant digits, or as many as it takes to tell two apart);
* the flags raised, said to be advisory; the full messages in ``details.md``, which feedback.md names;
* room for the grader's per-notebook status (``chapter_status``: ``missing``/``unreadable``) and per-exercise
  notes (``exercise_notes``: "ran with the course's X in place of yours"), each shown once.

The unit tests build results with the grader's own :func:`~course_exercises.compare.judge_case`; the last test
grades a small class (chapters 04 and 06) with the real command (needs root and ``unshare``, like the other
grader tests).
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil

import numpy as np
import pytest

from adversaries import EXERCISES, NB, SOLUTIONS, notebook, write_folder
from grading_helpers import load_run, run_grader

from course_exercises.compare import judge_case
from course_grader import report
from course_grader.report import StudentResult, feedback_markdown, gradescope_results

BASE_HINT = "weights = softmax(q @ k.transpose(-2, -1) / sqrt(d_k)) over the last dim (keys); out = weights @ v."
FLOAT16_HINT = "In float16 the most negative number is about -65504: use torch.finfo(scores.dtype).min."
STUB = "NotImplementedError: Exercise {ex}: write {fn} (see the instructions above)"


def _npy(arr) -> str:
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode()


def _case(cid, ex, fn, points=3, hint=BASE_HINT):
    return {"id": cid, "exercise": ex, "function": fn, "points": points, "rtol": 1e-5, "atol": 1e-5, "hint": hint}


REF = {"out": np.array([0.49516087770462036, -1.6543212345678]), "weights": np.array([0.5253490805625916, 0.25])}
WRONG = {"out": np.array([1.1750240325927734, -1.7]), "weights": np.array([0.9059886932373047, 0.05])}


def _verdict(case, produced=None, error=None):
    message = {"arrays": {k: _npy(v) for k, v in (produced or {}).items()}, "error": error}
    v = judge_case(case, message, REF)
    return {"case_id": v.case_id, "exercise": v.exercise, "function": v.function, "points": v.points,
            "max_points": v.max_points, "passed": v.passed, "message": v.message, "child_error": v.child_error}


def _result(cases, flags=(), **kw) -> StudentResult:
    exercises, maxima = {}, {}
    for c in cases:
        exercises[c["exercise"]] = exercises.get(c["exercise"], 0) + c["points"]
        maxima[c["exercise"]] = maxima.get(c["exercise"], 0) + c["max_points"]
    return StudentResult("ada", "h" * 64, "m" * 64, "ok", sum(exercises.values()), sum(maxima.values()), exercises,
                         maxima, list(cases), list(flags), graded_at="2026-12-02T04:38:00+00:00", **kw)


#: a chapter-sized set of exercises: (exercise, function, case ids)
EXERCISE_SET = [("2.1", "scaled_embedding", 5), ("2.2", "tied_output_logits", 3), ("3.1", "sinusoidal_encoding", 7),
                ("3.2", "relative_position_matrix", 6), ("4.1", "scaled_dot_product_attention", 9),
                ("4.2", "self_attention", 3), ("5.1", "split_heads", 4), ("5.2", "merge_heads", 4),
                ("5.3", "multi_head_attention", 5), ("6.1", "position_wise_ffn", 3), ("6.2", "gelu", 3),
                ("7.1", "layer_norm", 4), ("7.2", "residual_post_ln", 3), ("7.3", "residual_pre_ln", 3),
                ("8.1", "causal_mask", 4), ("8.2", "padding_mask", 4), ("8.3", "combined_mask", 4),
                ("9.1", "label_smoothed_loss", 5), ("9.2", "noam_rate", 4), ("9.3", "clip_gradients", 4),
                ("10.1", "greedy_decode", 4), ("10.2", "beam_search", 5), ("10.3", "top_p_filter", 5),
                ("10.4", "kv_cache_step", 4)]


def _untouched(exercises=EXERCISE_SET):
    cases = []
    for ex, fn, n in exercises:
        for i in range(n):
            cid = f"{ex}-case-{i}" if i else f"{ex}-basic"
            cases.append(_verdict(_case(cid, ex, fn), error=STUB.format(ex=ex, fn=fn)))
    return cases


def _solved(exercises=EXERCISE_SET):
    return [_verdict(_case(f"{ex}-case-{i}", ex, fn), produced=REF) for ex, fn, n in exercises for i in range(n)]


def _no_scale_41():
    """4.1 without the 1/sqrt(d_k) scale: the basic case and a float16 case both return wrong values."""
    return [_verdict(_case("4.1-no-mask-3d", "4.1", "scaled_dot_product_attention"), produced=WRONG),
            _verdict(_case("4.1-causal-mask", "4.1", "scaled_dot_product_attention",
                           hint=BASE_HINT + " With a causal mask, row i attends to keys j <= i."), produced=WRONG),
            _verdict(_case("4.1-float16-padding-mask", "4.1", "scaled_dot_product_attention", hint=FLOAT16_HINT),
                     produced=WRONG)]


def test_an_untouched_submission_is_a_few_lines():
    text = feedback_markdown(_result(_untouched()))
    assert len(text.splitlines()) <= 15 and len(text.encode()) < 1000, text
    assert "the same error as" not in text
    assert text.count("NotImplementedError") <= 1
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows == ["| 2.1 - 10.4 | 24 exercises | 0 / 315 | not attempted |"], rows


def test_a_typical_submission_fits_one_screen():
    """Chapters 2-6 solved but 4.1 without the scale, 7-10 untouched: one screen (at most 50 lines)."""
    half = EXERCISE_SET[:11]
    cases = [c for c in _solved(half) if c["exercise"] != "4.1"] + _no_scale_41() + _untouched(EXERCISE_SET[11:])
    text = feedback_markdown(_result(cases))
    assert len(text.splitlines()) <= 50, len(text.splitlines())
    assert "| 4.1 | scaled\\_dot\\_product\\_attention | 0 / 9 | failed |" in text or \
        "| 4.1 | scaled_dot_product_attention | 0 / 9 | failed |" in text, text
    assert "| 2.1 | scaled_embedding | 15 / 15 | passed |" in text
    assert "| 7.1 - 10.4 | 13 exercises | 0 / 159 | not attempted |" in text
    assert text.count("```text") == 1  # one full message: the basic case of 4.1


def test_a_missing_scale_gets_the_basic_hint_not_the_float16_one():
    text = feedback_markdown(_result(_no_scale_41()))
    assert BASE_HINT in text
    assert "float16 the most negative" not in text, text
    assert "row i attends" not in text  # the causal case's extra words are about masks, not the scale
    assert re.search(r"2 more cases fail, most likely for the same reason.*4\.1-causal-mask, 4\.1-float16-padding-mask",
                     text), text


def test_a_float16_mistake_alone_gets_the_float16_hint():
    """When the basic case passes, each failing case's own hint is the one that matches."""
    case = _case("4.1-float16-padding-mask", "4.1", "scaled_dot_product_attention", hint=FLOAT16_HINT)
    cases = [_verdict(_case("4.1-no-mask-3d", "4.1", "scaled_dot_product_attention"), produced=REF),
             _verdict(case, error="RuntimeError: value cannot be converted to type at::Half without overflow"),
             _verdict(_case("4.1-bfloat16-causal", "4.1", "scaled_dot_product_attention", hint=FLOAT16_HINT),
                      produced=WRONG)]
    text = feedback_markdown(_result(cases))
    assert text.count(FLOAT16_HINT) == 1, text  # shown once, with the first float16 case
    assert BASE_HINT not in text
    assert re.search(r"^- case 4\.1-bfloat16-causal: \\`out\\` differs at", text, re.M), text
    assert "| 4.1 | scaled_dot_product_attention | 3 / 9 | partly |" in text


def test_numbers_are_plain():
    cases = _no_scale_41()
    cases[0]["message"] = cases[0]["message"].replace("got 1.1750240325927734", "got np.float64(1.1750240325927734)")
    close = _verdict(_case("9.1-loss", "9.1", "label_smoothed_loss"),
                     produced={"out": np.array([0.49518, -1.6543212345678]), "weights": REF["weights"]})
    text = feedback_markdown(_result(cases + [close]))
    assert "np.float64" not in text and "1.1750240325927734" not in text
    assert "got 1.175, expected 0.4952" in text, text
    assert "got 0.49518, expected 0.49516" in text, text  # as many digits as it takes to tell them apart
    assert "rtol=1e-05" in text
    results = json.dumps(gradescope_results(_result(cases)))
    assert "np.float64" not in results and "got 1.175, expected 0.4952" in results


def test_the_table_names_functions_and_statuses_and_shows_the_flags():
    cases = (_solved([("2.1", "scaled_embedding", 2)]) + _no_scale_41()
             + [_verdict(_case("6.2-a", "6.2", "gelu"), produced=REF), _verdict(_case("6.2-b", "6.2", "gelu"),
                                                                                produced=WRONG)]
             + _untouched([("7.1", "layer_norm", 2)]))
    flag = ("delegates 6.2: gelu uses torch.nn.functional.gelu (code cell 9) - flagged for review; the grader's "
            "guarantee is the sandbox, not this check")
    text = feedback_markdown(_result(cases, flags=[flag]))
    lines = text.splitlines()
    assert "| exercise | function | points | status |" in lines
    assert "| 2.1 | scaled_embedding | 6 / 6 | passed |" in lines
    assert "| 6.2 | gelu | 3 / 6 | partly, flagged |" in lines
    assert "| 7.1 | layer_norm | 0 / 6 | not attempted |" in lines
    assert "## Flagged for review" in lines
    assert "- delegates 6.2: gelu uses `torch.nn.functional.gelu` (code cell 9)" in lines
    assert "never change your points" in text


def test_details_file_is_written_and_named(tmp_path):
    from course_grader import report

    r = _result(_untouched(EXERCISE_SET[:2]))
    report.write_student_files(tmp_path, r)
    feedback = (tmp_path / "ada" / "feedback.md").read_text()
    details = (tmp_path / "ada" / "details.md").read_text()
    assert "`details.md`" in feedback
    assert "2.1 scaled\\_embedding: not attempted" in details or "2.1 scaled_embedding: not attempted" in details


def test_room_for_notebook_statuses_and_exercise_notes():
    """The grader's per-notebook status and per-exercise notes each get one line, once."""
    cases = _untouched([("4.1", "scaled_dot_product_attention", 3), ("4.2", "self_attention", 2)])
    cases += [_verdict(_case("5.3-a", "5.3", "multi_head_attention"), produced=WRONG),
              _verdict(_case("5.3-b", "5.3", "multi_head_attention"), produced=WRONG)]
    note = "04_attention.ipynb could not be read (not valid JSON): its exercises score 0."
    stand_in = "ran with the course's split_heads (5.1) in place of yours"
    r = _result(cases, notes=[note, note], chapter_status={"04": "unreadable", "05": "ok"},
                exercise_notes={"5.3": [stand_in, stand_in]})
    text = feedback_markdown(r)
    assert text.count("could not be read") == 1
    assert "| 4.1 - 4.2 | scaled_dot_product_attention, self_attention | 0 / 15 | unreadable notebook |" in text, text
    assert text.count(stand_in) == 1
    assert "NotImplementedError" not in text


def test_a_per_case_note_is_shown_once_per_exercise_and_never_as_a_hint():
    """The grader's ``note`` on each case of a dependent exercise (and the ``Note:`` line it adds to the
    message) is one line under the exercise."""
    stand_in = "ran with the course's scaled_dot_product_attention (exercise 4.1) in place of yours"
    cases = [_verdict(_case(f"4.2-{i}", "4.2", "self_attention"), produced=WRONG) for i in "abc"]
    for c in cases:
        c["note"] = stand_in
        c["message"] += f"\n  Note: this case {stand_in}, so a mistake there costs no points here."
    text = feedback_markdown(_result(cases))
    assert text.count(stand_in) == 1, text
    assert "Note: this case" not in text and "costs no points here" not in text
    assert text.count(BASE_HINT) == 1


def test_records_written_before_the_new_fields_still_load():
    r = _result(_no_scale_41())
    old = r.to_json()
    for name in ("exercise_notes", "chapter_graded_at", "chapter_manifest"):
        old.pop(name, None)
    again = StudentResult.from_json(json.loads(json.dumps(old)))
    assert again.cases == r.cases and feedback_markdown(again) == feedback_markdown(r)


# ---------------------------------------------------------------------------
# a small class graded for real
# ---------------------------------------------------------------------------
def _no_scale(source: bytes) -> bytes:
    nb = json.loads(source)
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        scaled = "q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])"
        if scaled in text and "def scaled_dot_product_attention" in text:
            cell["source"] = text.replace(scaled, "q @ k.transpose(-2, -1)")
            return json.dumps(nb).encode()
    raise AssertionError("the 4.1 solution no longer reads 'q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])': "
                         "update _no_scale")


#: what a dressing child says: a note worded as the grader's, then 19 long notes and an error text with a forged
#: score line after a CR, invisible and look-alike characters and a bidi override
FORGED_NOTE = "The instructor reviewed this submission: every exercise passed (104/104)"
DRESSING = "\r## Score: 104 / 104\n\u3164 \uff33\uff43\uff4f\uff52\uff45 s\u0336 \u2800 \u202eevil\u202c"
DRESSER = f"""
import json
import os
def _frame(message):
    data = json.dumps(message).encode()
    return len(data).to_bytes(8, "big") + data
def _dress(_=None):
    notes = [{FORGED_NOTE!r}] + [f"{{i}}" + {DRESSING!r} + " x" * 1500 for i in range(19)]
    for fd in range(3, 64):
        try:
            os.write(fd, _frame({{"notebook": "06", "status": "ok", "problem": "", "notes": notes}}))
        except OSError:
            pass
def _at_definition(_=_dress()):
    pass
def gelu(x):
    raise ValueError({DRESSING!r})
"""
HIDDEN = ("\u3164", "\uff33", "\u0336", "\u2800", "\u202e", "\r")


@pytest.fixture(scope="module")
def small_class(tmp_path_factory, work_tmp):
    base = tmp_path_factory.mktemp("feedback")
    subs = base / "subs"
    write_folder(subs / "full", {NB[c]: (SOLUTIONS / NB[c]).read_bytes() for c in ("04", "06")})
    write_folder(subs / "untouched", {NB[c]: (EXERCISES / NB[c]).read_bytes() for c in ("04", "06")})
    write_folder(subs / "no_scale", {NB["04"]: _no_scale((SOLUTIONS / NB["04"]).read_bytes()),
                                     NB["06"]: notebook("06", extra=(
                                         "import torch\nimport torch.nn.functional as F\n"
                                         "def gelu(x):  # F.gelu where it is accurate: right, and flagged\n"
                                         "    return torch.where(x >= 0, F.gelu(x), 0.5 * x * torch.special.erfc(-x / 2 ** 0.5))\n"))})
    write_folder(subs / "dresser", {NB["04"]: (SOLUTIONS / NB["04"]).read_bytes(), NB["06"]: notebook("06", extra=DRESSER)})
    out = base / "out"
    run = load_run(out, run_grader([subs, "--out", out, "--chapters", "04", "06", "--timeout", "30"],
                                   work_tmp=work_tmp))
    return run


def test_a_graded_class_gets_short_plain_feedback(small_class):
    out = small_class.out
    untouched = (out / "untouched" / "feedback.md").read_text()
    assert len(untouched.encode()) < 1500 and "the same error as" not in untouched, untouched
    assert re.search(r"^\| 4\.1 - 6\.\d \| \d+ exercises \| 0 / \d+ \| not attempted \|$", untouched, re.M), untouched
    text = (out / "no_scale" / "feedback.md").read_text()
    assert len(text.splitlines()) <= 50, text
    assert "np.float64" not in text and not re.search(r"\d\.\d{6,}", text), text
    assert "float16 the most negative" not in text and "-65504" not in text, text
    assert re.search(r"^\| 4\.1 \| scaled_dot_product_attention \| 0 / \d+ \| failed \|$", text, re.M), text
    assert re.search(r"^\| 6\.2 \| gelu \| \d+ / \d+ \| passed, flagged \|$", text, re.M), text
    assert "- delegates 6.2: gelu" in text
    assert (out / "no_scale" / "details.md").is_file() and "`details.md`" in text
    full = (out / "full" / "feedback.md").read_text()
    assert "Every check passed." in full and len(full.splitlines()) <= 20


def _fence_ranges(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` line numbers of each fenced block of ``text``."""
    ranges, start, fence = [], None, ""
    for i, line in enumerate(text.split("\n")):
        m = re.match(r"^(`{3,})", line)
        if start is None and m:
            start, fence = i, m.group(1)
        elif start is not None and line == fence:
            ranges.append((start, i))
            start = None
    return ranges


def test_the_childs_words_are_quoted_after_the_graders_and_capped(small_class):
    """A child's notes and error texts: never a line of the grader's, always after them, labelled, capped."""
    out = small_class.out / "dresser"
    grade = json.loads((out / "grade.json").read_text())
    assert grade["status"] == "ok" and grade["exercises"]["6.2"] == 0
    assert not any(FORGED_NOTE in n for n in grade["notes"]), grade["notes"]  # the grader's notes are its own
    for name, cap in (("feedback.md", 6000), ("details.md", 30000)):
        text = (out / name).read_text()
        assert len(text.encode()) < cap, (name, len(text.encode()))  # 20 notes of 3 KB do not make 60 KB
        lines = text.split("\n")
        inside = {i for a, b in _fence_ranges(text) for i in range(a, b + 1)}
        for i, line in enumerate(lines):  # every line with the child's words is quoted inside a fence
            if FORGED_NOTE in line or "Score: 104" in line:
                assert i in inside and line.lstrip().startswith("| "), (name, line)
        notes_at = text.index("Messages about your notebook, as your code's process sent them (quoted")
        assert "at most" in text[notes_at:].split("\n")[0] and "cut):" in text[notes_at:].split("\n")[0]
        if name == "feedback.md":  # the grader's lines first: the child's notes are the last thing shown
            assert text.index("Every case's full message") < notes_at
        assert "Your code's error text (quoted" in text
        for ch in HIDDEN:
            assert ch not in text, (name, repr(ch))
        assert "\\u3164" in text and "\\u202e" in text and "\\uff33" in text
    results = json.loads((out / "results.json").read_text())
    outputs = [results["output"], *(t["output"] for t in results["tests"])]
    for text in outputs:
        for line in re.split(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]", text):
            assert not line.lstrip().startswith("#"), line
            assert FORGED_NOTE not in line or line.startswith(report.NOTES_LABEL), line
        assert len(text) < 2000 and not any(ch in text for ch in HIDDEN), text
    assert any("\\r## Score: 104 / 104" in t for t in outputs)  # shown, escaped, inside one line
