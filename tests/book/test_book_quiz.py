"""The concept checks (course_book.quiz) and the Exercises section that end every chapter.

The browser test (tests/browser) checks that the quizzes work in the built
book; these tests check the notebooks and the module without a build.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from course_book import quiz
from course_book.quiz import answer, multiple_choice, numeric, quiz_bundles

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "book").glob("[01][0-9]_*.ipynb"))


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _questions_of(cell: dict) -> list[dict]:
    """Run the quiz cell's code with show_quiz replaced by a recorder; return the questions."""
    shown = []
    namespace: dict = {}
    source = _source(cell).replace("show_quiz(concept_check())", "_shown.append(concept_check())")
    namespace["_shown"] = shown
    exec(compile(source, f"<{cell.get('id')}>", "exec"), namespace)
    assert len(shown) == 1, "the quiz cell must end with show_quiz(concept_check())"
    return shown[0]


def test_the_chapters_are_numbered_without_gaps():
    assert len(CHAPTERS) >= 12
    assert [p.name[:2] for p in CHAPTERS] == [f"{n:02d}" for n in range(1, len(CHAPTERS) + 1)]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
def test_chapter_ends_with_concept_check_then_exercises(path):
    cells = _cells(path)
    summary = [i for i, c in enumerate(cells)
               if c["cell_type"] == "markdown" and re.search(r"(^|\n)## Summary", _source(c))]
    intro, code, exercises = cells[-3:]
    assert _source(intro).startswith("## Check your understanding"), "the concept check comes just before the Exercises"
    assert summary and summary[-1] < len(cells) - 3, "the concept check comes after the Summary"
    assert code["cell_type"] == "code" and _source(code).startswith("from course_book.quiz import")
    assert {"hide-input", "nbval-ignore-output"} <= set(code["metadata"].get("tags", []))
    text = _source(exercises)
    assert text.startswith("## Exercises"), "the page ends with its Exercises section"
    name = path.name
    assert f"](../exercises/{name})" in text, f"the section links exercises/{name}"
    assert re.search(rf"```bash\npython -m course_lib\.check {name[:2]}\n```", text), "the check command"
    assert "folder that holds the notebook" in text
    bullets = [line for line in text.splitlines() if line.startswith("- ")]
    assert 2 <= len(bullets) <= 4, f"2-4 lines on what the notebook practises, got {len(bullets)}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
def test_concept_check_is_current_and_well_formed(path):
    code = _cells(path)[-2]
    questions = _questions_of(code)
    assert 3 <= len(questions) <= 5
    for q in questions:
        assert "$" not in json.dumps(q), "no TeX in quizzes (JupyterLab does not typeset outputs)"
        if q["type"] == "multiple_choice":
            assert len(q["answers"]) >= 3 and all(a["feedback"].strip() for a in q["answers"])
        else:
            kinds = [a["type"] for a in q["answers"]]
            assert kinds[-1] == "default" and len(kinds) >= 3, "a numeric question explains a typical wrong number and the rest"
    # The stored outputs are what the cell gives now (the chapter was re-executed after its last edit).
    outputs = code["outputs"]
    assert [o["output_type"] for o in outputs] == ["display_data", "display_data"], "two outputs, no stderr"
    html, js = quiz_bundles(questions)
    assert "".join(outputs[0]["data"]["text/html"]) == html["text/html"], "stale quiz output: re-execute the chapter"
    assert "".join(outputs[1]["data"]["application/javascript"]) == js["application/javascript"]


def test_answers_need_one_correct_and_an_explanation_each():
    right, wrong = answer("a", True, "because"), answer("b", False, "because not")
    assert multiple_choice("Which?", [right, wrong])["answers"] == [right, wrong]
    with pytest.raises(ValueError, match="exactly one correct"):
        multiple_choice("Which?", [right, answer("c", True, "also")])
    with pytest.raises(ValueError, match="exactly one correct"):
        multiple_choice("Which?", [wrong, answer("c", False, "no")])
    with pytest.raises(ValueError, match="feedback"):
        answer("a", True, "")
    with pytest.raises(ValueError, match="at least 2"):
        multiple_choice("Which?", [right])
    with pytest.raises(ValueError, match="distinct"):
        multiple_choice("Which?", [right, answer("a", False, "dup")])
    with pytest.raises(ValueError, match=r"\$"):
        multiple_choice("What is $x$?", [right, wrong])
    with pytest.raises(ValueError, match="correct must be a bool"):
        answer("a", 1, "why")


def test_numeric_questions():
    q = numeric("How many?", 12, "Yes.", wrong=[(15, "That forgets the padding.")])
    assert q["answers"][0] == {"type": "value", "value": 12, "correct": True, "feedback": "Yes."}
    assert q["answers"][1]["value"] == 15 and q["answers"][1]["correct"] is False
    assert q["answers"][-1]["type"] == "default"
    r = numeric("Value?", 1.7320508, "Yes.", tolerance=0.0015)
    assert r["answers"][0]["range"] == pytest.approx([1.7305508, 1.7335508])
    with pytest.raises(ValueError, match="within tolerance"):
        numeric("Value?", 1.732, "Yes.", tolerance=0.01, wrong=[(1.73, "close")])
    for bad in (float("nan"), True, "3"):
        with pytest.raises(ValueError, match="value"):
            numeric("Value?", bad, "Yes.")


def test_bundles_are_deterministic_and_stay_on_the_page():
    questions = [numeric("How many?", 12, "Yes.", wrong=[(15, "No.")])]
    html, js = quiz_bundles(questions)
    assert quiz_bundles(questions) == (html, js), "no random ids: re-running a chapter gives the same output"
    other, _ = quiz_bundles([numeric("How many?", 13, "Yes.")])
    ids = [re.search(r'id="(courseQuiz\w+)"', h["text/html"]).group(1) for h in (html, other)]
    assert ids[0] != ids[1], "two quizzes on a page need two ids"
    assert 'class="course-quiz"' in html["text/html"] and "courseQuiz.show(" in html["text/html"]
    assert "http" not in html["text/html"], "the book's part of a quiz fetches nothing"
    assert "function show_questions" not in html["text/html"], "the library is served by the book, not inlined"
    assert js["application/javascript"].startswith(quiz.JS_MARKER + "\n")
    assert "function show_questions" in js["application/javascript"], "Jupyter gets jupyterquiz's own script"
    with pytest.raises(ValueError, match="questions"):
        quiz_bundles([])


def _page_assets():
    spec = importlib.util.spec_from_file_location("page_assets", ROOT / "book" / "_ext" / "page_assets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_book_extension_agrees_with_the_module_and_writes_the_library(tmp_path):
    page_assets = _page_assets()
    assert page_assets.QUIZ_JS_MARKER == quiz.JS_MARKER
    assert page_assets.QUIZ_MARKER == f'class="{quiz.QUIZ_CLASS}"'
    app = SimpleNamespace(outdir=str(tmp_path), builder=SimpleNamespace(format="html"))
    page_assets._write_jupyterquiz(app, None)
    library = (tmp_path / "_static" / "vendor" / "jupyterquiz" / "jupyterquiz.js").read_text(encoding="utf-8")
    assert "function show_questions" in library and "class Question" in library
    assert "MIT" in (tmp_path / "_static" / "vendor" / "jupyterquiz" / "LICENSE.txt").read_text(encoding="utf-8")
    assert (ROOT / "book" / "_assets" / "course_quiz.js").is_file()


def test_texts_are_shown_as_text_not_html():
    """jupyterquiz puts texts into the page as HTML: "<bos>" would vanish, so the texts are escaped."""
    questions = [quiz.multiple_choice("What comes first, <bos> or <eos>?", [
        quiz.answer("<bos>", True, "Right: <bos> starts every target & 1 < 2."),
        quiz.answer("<eos>", False, "No: <eos> ends it.")])]
    html, js = quiz.quiz_bundles(questions)
    for text in (html["text/html"], js["application/javascript"]):
        assert "&lt;bos&gt; or &lt;eos&gt;?" in text and "&amp; 1 &lt; 2." in text
        assert "<bos>" not in text
