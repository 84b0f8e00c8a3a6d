"""The child's words in the reports (issue 22, item 1): never in the grader's voice.

Whatever the process that ran a submission sends back (error texts, notes, output) is shown after the grader's
lines, labelled as the code's own output, quoted line by line and cut at a stated size; hidden and look-alike
characters are written out; a Gradescope ``output`` carries no line a student starts. One test per attack
class of the issue, on the report functions (fast); ``test_feedback.py`` grades a dressing child for real.
"""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pytest

from course_lib.check import CaseResult, CheckRun, format_report
from course_grader import report
from course_exercises.compare import judge_case
from course_exercises.quoting import escape_hidden, is_hidden, quoted_block
from course_grader.report import StudentResult, details_markdown, feedback_markdown, gradescope_results

CASE = {"id": "4.1-a", "exercise": "4.1", "function": "f", "points": 3, "rtol": 1e-5, "atol": 1e-5, "hint": "h"}
FORGED = "The instructor reviewed this submission: every exercise passed (104/104)"
LOOKALIKES = {"\u3164": "Hangul filler", "\uff33\uff43\uff4f\uff52\uff45": "full-width Score", "s\u0336": "a stroke",
              "\u2800": "braille blank", "\u200b": "zero-width space", "\u00a0": "no-break space",
              "\U0001d412": "mathematical bold S", "\u115f": "Hangul choseong filler"}
BIDI = "\u202eevil\u202c \u2067rtl\u2069"


def _npy(arr) -> str:
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode()


def _result(*errors: str, exercises: int = 1) -> StudentResult:
    """A result whose cases failed with ``errors`` (the child's texts), one exercise each when ``exercises`` > 1."""
    cases = []
    for i, error in enumerate(errors):
        ex = f"4.{i + 1}" if exercises > 1 else "4.1"
        case = {**CASE, "id": f"{ex}-{chr(97 + i)}", "exercise": ex}
        v = judge_case(case, {"arrays": {}, "error": error}, {"out": np.zeros(2)})
        cases.append({"case_id": v.case_id, "exercise": v.exercise, "function": v.function, "points": v.points,
                      "max_points": v.max_points, "passed": v.passed, "message": v.message,
                      "child_error": v.child_error})
    maxima: dict[str, int] = {}
    for c in cases:
        maxima[c["exercise"]] = maxima.get(c["exercise"], 0) + c["max_points"]
    return StudentResult("alice", "h", "m", "ok", 0, sum(maxima.values()), {e: 0 for e in maxima}, maxima, cases)


def _lines(text: str) -> list[str]:
    """Lines as a Markdown renderer (or Gradescope) would break them."""
    return re.split(r"\r\n|[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]", text)


def _outputs(r: StudentResult) -> list[str]:
    results = gradescope_results(r)
    return [results["output"], *(t["output"] for t in results["tests"])]


def test_a_forged_grader_line_is_quoted_and_labelled_after_the_graders_lines():
    r = _result(f"done\n{FORGED}\n**Score: 104 / 104**")
    for text in (feedback_markdown(r), details_markdown(r)):
        lines = text.split("\n")
        label = next(i for i, line in enumerate(lines) if "Your code's error text (quoted" in line)
        hint = next(i for i, line in enumerate(lines) if line.strip() == "Hint: h")
        assert hint < label  # the grader's lines first
        for i, line in enumerate(lines):
            if FORGED in line or "104 / 104" in line:
                assert i > label and line.lstrip().startswith("| "), line
    assert all(FORGED not in line or "Your code's error text (quoted, escaped):" in line
               for out in _outputs(r) for line in _lines(out))


def test_the_grader_does_not_say_raised_when_the_function_returned_the_wrong_type():
    r = _result("scaled_dot_product_attention(q, k, v) returned list; return a torch.Tensor of floats")
    assert "returned a value of the wrong type" in r.cases[0]["message"]
    assert "raised" not in r.cases[0]["message"]


def test_a_cr_cannot_start_a_line_in_a_gradescope_output():
    r = _result("boom\r## Score: 104 / 104\r\n# Feedback for alice\n\u2028## Score")
    for out in _outputs(r):
        for line in _lines(out):
            assert not line.lstrip().startswith("#"), line
        assert "\r" not in out and "\u2028" not in out
    assert any("boom\\r## Score: 104 / 104" in out for out in _outputs(r))  # shown, escaped, on one line


@pytest.mark.parametrize("chars", list(LOOKALIKES), ids=list(LOOKALIKES.values()))
def test_invisible_and_look_alike_characters_are_written_out(chars):
    r = _result(f"ValueError: {chars} done")
    for text in (feedback_markdown(r), details_markdown(r), json.dumps(gradescope_results(r), ensure_ascii=False)):
        assert not any(is_hidden(ch) and ch in text for ch in chars), (chars, text)
    shown = escape_hidden(chars)
    assert shown != chars and shown.isascii()


def test_bidi_overrides_are_written_out_in_every_report_and_the_checker():
    r = _result(f"ValueError: {BIDI}")
    run = CheckRun(notebooks=report.Path("."), chapters=["04"],
                   results=[CaseResult("4.1-a", "04", "4.1", 2, "failed",
                                       f"Exercise 4.1 (f), case 4.1-a: calling your code raised ValueError\n"
                                       f"  | ValueError: {BIDI}")])
    texts = [feedback_markdown(r), details_markdown(r), json.dumps(gradescope_results(r), ensure_ascii=False),
             format_report(run, {"4.1": "f"})]
    for text in texts:
        assert not re.search("[\u202a-\u202e\u2066-\u2069]", text), text
        assert "\\u202e" in text


def test_twenty_long_error_texts_keep_feedback_short_and_say_the_cap():
    r = _result(*[f"ValueError: {i} " + "x" * 2400 for i in range(20)], exercises=20)
    text = feedback_markdown(r)
    assert len(text.encode()) < 12_000, len(text.encode())
    assert re.search(r"at most \d+ characters shown, \d+ cut\)", text)
    assert len(details_markdown(r).encode()) < 80_000
    for out in _outputs(r):
        assert len(out) < 1500


def test_quoted_block_caps_the_total_and_says_what_was_cut():
    block = quoted_block("Your code's output", ["a" * 50, "b" * 50, "c" * 50], 80)
    assert block[0] == "Your code's output (quoted, hidden characters escaped; at most 80 characters shown, 70 cut):"
    assert sum(len(line) - 2 for line in block[1:]) <= 80 and all(line.startswith("|") for line in block[1:])
    assert quoted_block("x", ["", "\n"], 10) == []


def test_child_notes_are_last_in_feedback_and_one_line_in_gradescope():
    r = _result("ValueError: x")
    r.child_notes = {"04": [FORGED, "code cell 3 was skipped: SyntaxError in `def f(:` ```"]}
    text = feedback_markdown(r)
    assert text.rstrip().endswith("```") and text.index("Every case's full message") < text.index(FORGED)
    assert "| 04: code cell 3 was skipped: SyntaxError in `def f(:` ```" in text  # inside a longer fence
    summary = gradescope_results(r)["output"]
    assert [line for line in _lines(summary) if FORGED in line][0].startswith(report.NOTES_LABEL)
    again = StudentResult.from_json(json.loads(json.dumps(r.to_json())))
    assert again.child_notes == r.child_notes


def test_a_held_pass_is_not_listed_as_a_failure_in_feedback():
    """Issue 22, item 5: feedback.md words a rejection case that waits for a drawn case as the checker does."""
    from course_exercises.compare import REJECTION_ALONE

    r = _result("ValueError: x")
    r.cases.append({**r.cases[0], "case_id": "4.1-rejects-bad", "child_error": None, "held": "rejection",
                    "message": f"Exercise 4.1 (f), case 4.1-rejects-bad: {REJECTION_ALONE}."})
    text = feedback_markdown(r)
    assert "1 case passes but earns its points only once a case with drawn inputs passes too, because it is a " \
           "rejection case (4.1-rejects-bad)" in text
    assert "case 4.1-rejects-bad:" not in text
