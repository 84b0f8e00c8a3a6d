"""Concept checks: short quizzes whose numbers come from the cell that builds them.

The quiz itself is drawn by `jupyterquiz <https://pypi.org/project/jupyterquiz/>`_
(multiple-choice and numeric questions, answers shuffled, feedback per answer).
This module only builds and checks its question data and displays it so that it
works in both places the course is read:

* **JupyterLab / Notebook**: the second output is jupyterquiz's own JavaScript
  (the library and the questions), which runs when the cell is run.
* **The web book**: the first output is HTML only (the container, its styles, the
  questions as JSON and a one-line call). The book serves jupyterquiz's
  JavaScript itself (``book/_ext/page_assets.py`` writes it to
  ``_static/vendor/jupyterquiz/`` and loads it only on pages with a quiz) and
  drops the second output, so no page fetches anything from elsewhere.

Write questions without TeX (JupyterLab does not typeset inside outputs): use
Unicode (n², √d_k, ×) and ``<code>``. Example::

    from course_book.quiz import multiple_choice, numeric, answer, show_quiz
    show_quiz([
        numeric("How many ... for n = 8?", value=64, feedback="Yes: 8 × 8.",
                wrong=[(16, "That is 2n, not n².")]),
        multiple_choice("Which mask ...?", [
            answer("causal", True, "Right: ..."),
            answer("padding", False, "No: ..."),
        ]),
    ])
"""

from __future__ import annotations

import hashlib
import html
import json
import math
from numbers import Real
from typing import Any, Iterable, Sequence

__all__ = ["answer", "multiple_choice", "numeric", "quiz_bundles", "show_quiz", "QUIZ_CLASS"]

QUIZ_CLASS = "course-quiz"
"""The class of a quiz's container in the HTML (the book loads the quiz scripts where it occurs)."""

JS_MARKER = "/* course-quiz: notebook script */"
"""First line of the notebook-only JavaScript output (the book drops outputs that start with it)."""


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty str, got {value!r}")
    if "$" in value:
        raise ValueError(f"{name} must not contain '$' (no TeX in quizzes: JupyterLab would show it raw): {value!r}")
    return value


def _number(value: object, name: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    if isinstance(value, int) or float(value).is_integer() and abs(float(value)) < 2**53:
        return int(value) if float(value).is_integer() else float(value)
    return float(value)


def answer(text: str, correct: bool, feedback: str) -> dict[str, Any]:
    """One answer of a multiple-choice question, with the explanation shown when it is clicked."""
    if not isinstance(correct, bool):
        raise ValueError(f"correct must be a bool, got {correct!r}")
    return {"answer": _text(text, "text"), "correct": correct, "feedback": _text(feedback, "feedback")}


def multiple_choice(question: str, answers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A question with one correct answer among ``answers`` (made by :func:`answer`); shown shuffled."""
    answers = list(answers)
    if len(answers) < 2:
        raise ValueError(f"answers must hold at least 2 answers, got {len(answers)}")
    for a in answers:
        if not isinstance(a, dict) or set(a) != {"answer", "correct", "feedback"}:
            raise ValueError(f"answers must be made by answer(text, correct, feedback), got {a!r}")
    n_correct = sum(a["correct"] for a in answers)
    if n_correct != 1:
        raise ValueError(f"answers must have exactly one correct answer, got {n_correct}")
    texts = [a["answer"] for a in answers]
    if len(set(texts)) != len(texts):
        raise ValueError(f"answers must be distinct, got {texts}")
    return {"question": _text(question, "question"), "type": "multiple_choice", "answers": answers}


def numeric(
    question: str,
    value: Real,
    feedback: str,
    *,
    tolerance: Real = 0,
    wrong: Iterable[tuple[Real, str]] = (),
    otherwise: str = "Not this one. Work it out again from the formula in this chapter.",
) -> dict[str, Any]:
    """A question answered by typing a number (then Enter).

    ``value`` is the correct answer (computed in the cell, never typed in);
    with ``tolerance`` > 0 any answer in ``[value - tolerance, value + tolerance)``
    counts. ``wrong`` lists the numbers a typical mistake gives, each with its
    explanation; ``otherwise`` answers everything else.
    """
    value = _number(value, "value")
    tolerance = _number(tolerance, "tolerance")
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    if tolerance:
        correct = {"type": "range", "range": [value - tolerance, value + tolerance], "correct": True}
    else:
        correct = {"type": "value", "value": value, "correct": True}
    correct["feedback"] = _text(feedback, "feedback")
    answers = [correct]
    for w_value, w_feedback in wrong:
        w_value = _number(w_value, "wrong value")
        if abs(w_value - value) <= tolerance:
            raise ValueError(f"wrong value {w_value} is within tolerance of the correct value {value}")
        answers.append({"type": "value", "value": w_value, "correct": False,
                        "feedback": _text(w_feedback, "wrong feedback")})
    answers.append({"type": "default", "feedback": _text(otherwise, "otherwise")})
    return {"question": _text(question, "question"), "type": "numeric", "answers": answers}


def _check_questions(questions: object) -> list[dict[str, Any]]:
    if not isinstance(questions, (list, tuple)) or not questions:
        raise ValueError("questions must be a non-empty list of questions made by multiple_choice() or numeric()")
    for q in questions:
        if not isinstance(q, dict) or q.get("type") not in ("multiple_choice", "numeric"):
            raise ValueError(f"questions must be made by multiple_choice() or numeric(), got {q!r}")
    return list(questions)


def _as_html(questions: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The questions with their texts escaped: jupyterquiz shows them as HTML, where ``<bos>`` would vanish."""
    def escape(d: dict[str, Any]) -> dict[str, Any]:
        return {k: html.escape(v, quote=False) if k in ("question", "answer", "feedback") and isinstance(v, str) else v
                for k, v in d.items()}

    return [{**escape(q), "answers": [escape(a) for a in q["answers"]]} for q in questions]


def _json_for_script(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")


def quiz_bundles(questions: Sequence[dict[str, Any]], *, shuffle_answers: bool = True,
                 max_width: int = 720) -> tuple[dict[str, Any], dict[str, str]]:
    """The two MIME bundles :func:`show_quiz` displays: (HTML for the book, JavaScript for Jupyter).

    The HTML bundle also holds the quiz in Chinese for the book's Chinese
    edition (``course_book.i18n``). The container's id is derived from the
    questions (no random state), so re-running a chapter gives the same output.
    """
    from jupyterquiz.dynamic.loader import load_questions_script
    from jupyterquiz.dynamic.renderer import build_script

    from . import i18n

    questions = _check_questions(questions)
    if not isinstance(shuffle_answers, bool):
        raise ValueError(f"shuffle_answers must be a bool, got {shuffle_answers!r}")
    data = _json_for_script(_as_html(questions))
    div_id = "courseQuiz" + hashlib.sha1(data.encode()).hexdigest()[:12]
    n = len(questions)
    html = _quiz_html(div_id, data, shuffle_answers, max_width, "Concept check",
                      f"Concept check: {n} question{'s' if n != 1 else ''}. "
                      "Run this cell in Jupyter, or read the web book, to answer them.")
    catalog = i18n.Catalog.load()
    zh_html = _quiz_html(div_id, _json_for_script(_as_html(i18n.translate_questions(questions, catalog))), shuffle_answers,
                         max_width, catalog.gettext("Concept check"),
                         catalog.gettext(f"Concept check: {n} question{'s' if n != 1 else ''}. "
                                         "Run this cell in Jupyter, or read the web book, to answer them."))
    prefix, static, url = load_questions_script(_as_html(questions), div_id)
    script = (
        f"{JS_MARKER}\n"
        f'document.querySelectorAll("#{div_id} .course-quiz-fallback").forEach(function (e) {{ e.remove(); }});\n'
        + build_script(prefix, static, url, div_id, True)
    )
    text = f"<concept check: {n} question{'s' if n != 1 else ''}>"
    html_bundle = {"text/html": html, "text/plain": text, i18n.MIME_TYPE: catalog.payload(**{"text/html": zh_html})}
    return html_bundle, {"application/javascript": script}


def _quiz_html(div_id: str, data: str, shuffle_answers: bool, max_width: int, label: str, fallback: str) -> str:
    from jupyterquiz.dynamic.renderer import build_styles, render_div

    # jupyterquiz's default palette, in the book's blue; white text on the coloured box.
    color_dict = {
        "--jq-multiple-choice-bg": "#2f4b7c", "--jq-mc-button-bg": "#fafafa",
        "--jq-mc-button-border": "#e0e0e0e0", "--jq-mc-button-inset-shadow": "#555555",
        "--jq-many-choice-bg": "#2f4b7c", "--jq-numeric-bg": "#2f4b7c",
        "--jq-numeric-input-bg": "#c0c0c0", "--jq-numeric-input-label": "#101010",
        "--jq-numeric-input-shadow": "#999999", "--jq-string-bg": "#2f4b7c",
        "--jq-incorrect-color": "#b00020", "--jq-correct-color": "#00701a",
        "--jq-text-color": "#fafafa", "--jq-link-color": "#9abafa",
    }
    container = render_div(div_id, False, shuffle_answers, False, 1_000_000, max_width, 10, "left")
    container = container.replace("<div ", f'<div class="{QUIZ_CLASS}" role="group" aria-label="{label}" ', 1)
    return (
        f"{container}<p class=\"course-quiz-fallback\">{fallback}</p></div>\n"
        f"{build_styles(div_id, color_dict)}\n"
        f'<script type="text/javascript">(function () {{\n'
        f'  if (typeof courseQuiz === "undefined") {{ return; }}\n'
        f'  courseQuiz.show("{div_id}", {data});\n'
        f"}})();</script>"
    )


def show_quiz(questions: Sequence[dict[str, Any]], *, shuffle_answers: bool = True) -> None:
    """Display a concept check made of ``questions`` (see :func:`multiple_choice`, :func:`numeric`)."""
    from IPython.display import display

    html_bundle, js_bundle = quiz_bundles(questions, shuffle_answers=shuffle_answers)
    display(html_bundle, raw=True)
    display(js_bundle, raw=True)
