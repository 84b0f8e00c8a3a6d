"""The grader's reports, written only by the parent and always atomically.

Files (``DIR`` is ``--out``):

* ``DIR/grades.csv`` - one row per submission, whatever happened to it:
  ``student, source, score, max, <one column per exercise>, status, runtime,
  flags, submission_hash, graded``; ``source`` is the folder/file name the id
  was made from; ``status`` is ``ok``, ``timeout``, ``crashed``, ``memory``,
  ``unreadable``, ``missing`` (a notebook), ``invalid submission`` or
  ``missing submission`` (graded before, not among the submissions now);
  ``graded`` says when each chapter was graded; an exercise never graded for
  the student is empty. No cell starts a spreadsheet formula
  or holds a line break.
* ``DIR/<student>/results.json`` - Gradescope's format: top-level ``score``,
  ``max_score``, ``execution_time``, ``output``, ``visibility``, ``tests``
  (one per case: ``name``, ``number``, ``score``, ``max_score``, ``status``,
  ``output``, ``visibility``); the instructor's flags go into a 0-point test
  with ``visibility: "hidden"``.
* ``DIR/<student>/feedback.md`` - the student's one-screen feedback
  (:func:`feedback_markdown`); ``DIR/<student>/details.md`` - every failing
  case's full message (:func:`details_markdown`).
* ``DIR/<student>/grade.json`` - the parent's record, used to skip an
  unchanged submission on the next run and to keep the chapters a later run
  does not grade (:func:`merge_results`).
* ``DIR/summary.json`` - grader, Python, numpy and torch versions, the
  manifest's SHA-256, the sandbox and what it could not do, the limits, counts,
  and ``sources`` (student id -> the folder/file name it was made from).

Everything that may come from a student (names, error texts, output) is shown
inertly: in ``feedback.md`` inside code fences it cannot close or as escaped
text (no headings, links, images or HTML), in ``results.json`` as plain text
(``output_format: "text"``), and in every file with control, invisible and
look-alike characters written out (no terminal escapes). What the child sent
(its error texts, its notes about a notebook, its stderr) is moreover never
worded as the grader's: it comes after the grader's lines, labelled as the
code's own output, quoted line by line and cut at a stated size
(:mod:`.quoting`); in ``results.json`` each such text is one line.

Every file is written to a temporary file in the same folder, flushed to disk
and moved into place with :func:`os.replace`, so a reader never sees half a
report and a crash never leaves one.

Design and threat model: ``course_grader/SECURITY.md``.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from course_exercises.compare import FIXED_ALONE, REJECTION_ALONE, raised_not_implemented
from .intake import RESERVED_IDS
from course_exercises.quoting import ERROR_LABEL, NOTES_LABEL, OUTPUT_LABEL, escape_hidden, one_line, quoted_block

__all__ = ["StudentResult", "atomic_write", "write_student_files", "grades_csv", "gradescope_results",
           "feedback_markdown", "md_fence", "md_text", "plain_text", "student_dir", "STATUSES",
           "exercise_order", "details_markdown", "plain_numbers", "exercise_status", "EXERCISE_STATUSES",
           "DETAILS_FILE", "chapter_of", "EarlierReports", "load_earlier", "merge_results", "stamp_chapters",
           "missing_row", "graded_cell", "MISSING_SUBMISSION", "MAX_HISTORY", "MAX_MERGED_NOTES"]

#: ``unreadable``/``missing``: a notebook could not be read / is not in the submission (the grader's, per run);
#: ``missing submission``: graded before, not among the submissions now (a row kept by :func:`missing_row`)
STATUSES = ("ok", "timeout", "crashed", "memory", "unreadable", "missing", "invalid submission",
            "missing submission")
#: fields added after the first grade records were written (an older ``grade.json`` lacks them)
_LATER_FIELDS = ("exercise_notes", "chapter_graded_at", "chapter_manifest", "child_notes")
_LATER_TEXT_FIELDS = ("sandbox",)  # strings added later still: records written before them get ""
#: the most characters of the child's own text (:mod:`.quoting`) each report shows: the notes about the
#: notebooks, and the error text of one case (feedback.md shows one case per exercise in full)
FEEDBACK_NOTES_CHARS, DETAILS_NOTES_CHARS, CASE_ERROR_CHARS = 1200, 8000, 800
#: the most characters of the child's error texts feedback.md shows in all (the rest: details.md)
FEEDBACK_ERRORS_CHARS = 2400
#: ... and the most characters of it in one Gradescope ``output`` (each on one line)
GRADESCOPE_CHARS = 600


@dataclass
class StudentResult:
    """Everything the parent decided about one submission.

    Attributes:
        student: the student id.
        submission_hash: SHA-256 of the submission (see :mod:`.intake`).
        manifest_hash: SHA-256 of the reference manifest it was graded against.
        status: one of :data:`STATUSES`.
        score, max_score: points earned and possible.
        exercises: exercise number -> points earned.
        exercises_max: exercise number -> points possible.
        cases: one dict per case (``case_id``, ``exercise``, ``function``,
            ``points``, ``max_points``, ``passed``, ``message``, ``child_error``).
        flags: findings for the instructor (never change the score).
        notes: the grader's remarks for the student (missing notebook, output cut, timeout ...), shown
            once each, one line each.
        chapter_status: chapter -> ``ok``/``timeout``/``crashed``/``memory``/``missing``/``unreadable``
            (the last two make every exercise of the chapter one status in the feedback).
        runtime: wall-clock seconds spent on the submission.
        stderr_tail: the end of the child's stderr (the student's own output).
        graded_at: ISO time of grading.
        reused: ``True`` when taken unchanged from a previous run.
        exercise_notes: exercise -> remarks shown once under that exercise (e.g. "ran with the course's
            split_heads (5.1) in place of yours").
        chapter_graded_at: chapter -> ISO time it was graded (chapters kept from earlier runs keep theirs).
        chapter_manifest: chapter -> SHA-256 of the manifest it was graded against.
        child_notes: chapter -> what the child said about that notebook (why it cannot be read, one note per
            skipped cell): untrusted text, only ever shown quoted after the grader's lines (:mod:`.quoting`).
        sandbox: the sandbox of the run that last graded this submission, in words (the mode, and whether it was
            unsafe or weaker than that machine allows: :func:`course_grader.cli.sandbox_cell`); a column of
            ``grades.csv``, so a weakened run shows on every row it graded.
    """

    student: str
    submission_hash: str
    manifest_hash: str
    status: str
    score: int
    max_score: int
    exercises: dict[str, int] = field(default_factory=dict)
    exercises_max: dict[str, int] = field(default_factory=dict)
    cases: list[dict] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    chapter_status: dict[str, str] = field(default_factory=dict)
    runtime: float = 0.0
    stderr_tail: str = ""
    graded_at: str = ""
    reused: bool = False
    exercise_notes: dict[str, list[str]] = field(default_factory=dict)
    chapter_graded_at: dict[str, str] = field(default_factory=dict)
    chapter_manifest: dict[str, str] = field(default_factory=dict)
    child_notes: dict[str, list[str]] = field(default_factory=dict)
    sandbox: str = ""

    def to_json(self) -> dict:
        """A JSON-able dict (``reused`` excluded)."""
        d = asdict(self)
        d.pop("reused")
        return d

    @classmethod
    def from_json(cls, d: dict) -> "StudentResult":
        """Rebuild from :meth:`to_json` output (also a record written before the fields in
        :data:`_LATER_FIELDS` existed: they get their defaults).

        Raises:
            ValueError: a field is missing or has the wrong type.
        """
        if not isinstance(d, dict):
            raise ValueError("not a grade record: not an object")
        try:
            obj = cls(**{k: d[k] for k in cls.__dataclass_fields__
                         if k != "reused" and (k in d or k not in (*_LATER_FIELDS, *_LATER_TEXT_FIELDS))})
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a grade record: {exc}") from None
        if not all(isinstance(getattr(obj, name), str) for name in _LATER_TEXT_FIELDS):
            raise ValueError("not a grade record: bad sandbox")
        for name in _LATER_FIELDS:
            value = getattr(obj, name)
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise ValueError(f"not a grade record: bad {name}")
        if not isinstance(obj.cases, list) or not all(isinstance(c, dict) for c in obj.cases):
            raise ValueError("not a grade record: bad cases")
        if obj.status not in STATUSES or not isinstance(obj.score, int):
            raise ValueError("not a grade record: bad status or score")
        return obj


def atomic_write(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and :func:`os.replace`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def plain_text(text: str, keep: str = "\n\t") -> str:
    """Untrusted text made inert for a terminal or a text viewer.

    CR LF and CR become LF (when LF is kept); every control character (ANSI escapes, NUL ...), invisible
    format character (bidi overrides ...), line separator and look-alike character except those in ``keep``
    is written out as ``\\n``, ``\\x1b``, ``\\u202e``, ``\\u3164`` ... (:func:`.quoting.escape_hidden`).
    """
    return escape_hidden(text, keep=keep)


def _csv_safe(text: str) -> str:
    """A CSV cell from untrusted text: one line, and no spreadsheet formula.

    Tabs, line ends and other control characters are written out (``\\t``,
    ``\\r``, ``\\n`` ...), so none can start or split a cell; a cell starting
    with ``= + - @`` gets a leading ``'``.
    """
    text = plain_text(text, keep="")
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def grades_csv(results: list[StudentResult], exercises: list[str], sources: dict[str, str] | None = None) -> str:
    """The text of ``grades.csv``: a header, then one row per result (sorted by student).

    An exercise the student's record does not have (a chapter never graded for them) is an empty cell, not 0;
    ``sandbox`` says which sandbox last graded the row (a run in a weaker sandbox than its machine allows says so
    on every row it graded); the last column, ``graded``, says when each chapter was graded (:func:`graded_cell`).

    Args:
        results: one per submission.
        exercises: the exercise columns, in order.
        sources: student id -> the folder/file name it was made from; when
            given, a ``source`` column follows ``student``.
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    source_col = ["source"] if sources is not None else []
    writer.writerow(["student", *source_col, "score", "max", *exercises, "status", "runtime", "flags",
                     "sandbox", "submission_hash", "graded"])
    for r in sorted(results, key=lambda r: r.student):
        source = [_csv_safe(sources.get(r.student, ""))] if sources is not None else []
        points = (r.exercises.get(e, 0) if e in r.exercises or e in r.exercises_max else "" for e in exercises)
        writer.writerow([_csv_safe(r.student), *source, r.score, r.max_score, *points, _csv_safe(r.status),
                         f"{r.runtime:.1f}", _csv_safe("; ".join(r.flags)), _csv_safe(r.sandbox), _csv_safe(r.submission_hash),
                         _csv_safe(graded_cell(r))])
    return buf.getvalue()


def gradescope_results(r: StudentResult) -> dict:
    """The Gradescope ``results.json`` object of one submission.

    Every ``output`` and name is declared ``text`` (Gradescope's default,
    ``simple_format``, lets some HTML through), and control characters in it
    are written out (see :func:`plain_text`). The lines are the grader's: the
    child's own text (an error text, its notes about a notebook) follows them,
    labelled and on one line each with its line ends written out
    (:func:`.quoting.one_line`), so none of it can start a line there.
    """
    tests = []
    for c in r.cases:
        out = "Passed." if c["passed"] else plain_text(plain_numbers(c["message"]))
        if not c["passed"] and c.get("child_error"):
            out += "\n" + one_line(ERROR_LABEL, c["child_error"], GRADESCOPE_CHARS)
        tests.append({
            "name": plain_text(f"Exercise {c['exercise']} ({c['function']}): {c['case_id']}"),
            "number": c["exercise"],
            "score": c["points"],
            "max_score": c["max_points"],
            "status": "passed" if c["passed"] else "failed",
            "output": out,
            "output_format": "text",
            "visibility": "visible",
        })
    if r.flags:
        tests.append({
            "name": "Instructor review (structural checks; no points)",
            "score": 0,
            "max_score": 0,
            "status": "failed",
            "output": plain_text("\n".join(r.flags)),
            "output_format": "text",
            "visibility": "hidden",
        })
    summary = f"Score {r.score}/{r.max_score}. Status: {r.status}."
    if r.notes:
        summary += "\n" + "\n".join(f"- {plain_text(n, keep='')}" for n in dict.fromkeys(r.notes))
    for ch, texts in sorted(r.child_notes.items()):
        summary += "\n" + one_line(f"{NOTES_LABEL} (chapter {plain_text(ch, keep='')})",
                                   "\n".join(dict.fromkeys(texts)),
                                   GRADESCOPE_CHARS)
    return {
        "score": r.score,
        "max_score": r.max_score,
        "execution_time": round(r.runtime, 2),
        "output": summary,
        "output_format": "text",
        "test_output_format": "text",
        "test_name_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def md_fence(text: str, info: str = "text") -> list[str]:
    """Lines of a fenced code block showing untrusted ``text`` verbatim.

    The fence is one backtick longer than the longest backtick run in the text
    (at least three), so no line of it can close the block; control characters
    are written out (see :func:`plain_text`).
    """
    body = plain_text(text)
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", body)), default=0))
    return [fence + info, *body.split("\n"), fence]


def _escape_underscores(match: re.Match) -> str:
    """Keep a ``_`` run inside a word (``06_feed_forward``: never emphasis), escape the others."""
    text, start, end = match.string, match.start(), match.end()
    inside = start > 0 and end < len(text) and text[start - 1].isalnum() and text[end].isalnum()
    return match.group() if inside else "\\_" * (end - start)


def _md_escape(text: str) -> str:
    """Backslash-escape the Markdown in one line of text, and make ``& < >`` entities.

    ``\\ ` * _ ~ [ ] | # $ @`` (code, emphasis, strike-through, links, images,
    table cells, headings, math, mentions), the dots of ``www.`` and of
    ``name.tld`` and the colon of ``://`` (autolinks). ``_`` inside a word is
    left alone.
    """
    text = re.sub(r"[\\`*~\[\]|#$@]", lambda m: "\\" + m.group(), html.escape(text, quote=False))
    text = re.sub(r"_+", _escape_underscores, text)
    text = re.sub(r"(?<=[^\W_])\.(?=[^\W\d_])", r"\\.", text)
    return text.replace("://", "\\://")


_LINKY = re.compile(r"[^\W_]\.[^\W\d_]|@|://", re.IGNORECASE)  # what a renderer could turn into a link


def _md_word(word: str) -> str:
    """One word of untrusted text as inert Markdown.

    A word that looks like a file name, address or e-mail (``06_feed_forward.ipynb``,
    ``evil.com``, ``a@b.c``) becomes a code span - shown as it is, never a link -
    with the quotes or brackets around it and the punctuation after it left
    outside; any other word is escaped (:func:`_md_escape`).
    """
    m = re.fullmatch(r"([\"'(\[{<]*)(.*?)([\"')\]}>.,;:!?]*)", word)
    lead, core, trail = m.groups()
    if _LINKY.search(core) and not re.search(r"[`|\\]", core):
        return _md_escape(lead) + f"`{core}`" + _md_escape(trail)
    return _md_escape(word)


def md_text(text: str) -> str:
    """Untrusted ``text`` as one line of inert Markdown (a list item, a heading, a table cell).

    Line ends become spaces and other control characters are written out
    (:func:`plain_text`); file names and addresses become code spans, the rest
    is escaped (:func:`_md_word`), and a leading ``-``, ``+`` or ``1.`` cannot
    start a list. Ordinary words, numbers and punctuation such as ``: ( ) , -``
    stay as they are.
    """
    text = plain_text(re.sub(r"[\r\n\t]+", " ", str(text)), keep="")
    out = "".join(part if part.isspace() else _md_word(part) for part in re.split(r"(\s+)", text))
    m = re.match(r"[-+]|\d{1,9}[.)](?=\s|$)", out)
    return out if m is None else out[:m.end() - 1] + "\\" + out[m.end() - 1:]


# ---------------------------------------------------------------------------
# Plain numbers
# ---------------------------------------------------------------------------
#: ``np.float64(-1.654)``, ``np.int64(3)``, ``np.True_``, ``tensor(0.5)``: the repr of a NumPy / torch scalar
_SCALAR_REPR = re.compile(r"\bnp\.(?:float|int|uint|complex)\d*\((?P<v>[^()]*)\)|\bnp\.(?P<b>True|False)_|"
                          r"\bnumpy\.(?:float|int)\d*\((?P<n>[^()]*)\)")
_FLOAT = r"-?(?:\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)"
#: ``got A, expected B``: a pair shown with enough digits to tell A from B
_PAIR = re.compile(rf"(?P<pre>\b(?:got|is) )(?P<a>{_FLOAT})(?P<mid>[,;] expected )(?P<b>{_FLOAT})")
#: a float with more digits than a reader needs (five or more after the point)
_LONG_FLOAT = re.compile(r"(?<![\w.])-?\d+\.\d{5,}(?:[eE][+-]?\d+)?(?![\w.])")
#: both, in one pass (a pair's digits are not shortened again)
_NUMBERS = re.compile(f"{_PAIR.pattern}|{_LONG_FLOAT.pattern}")


def _short(x: float, digits: int = 4) -> str:
    """``x`` with ``digits`` significant digits, as a reader writes it (``-1.654``, ``0.0001234``, ``2.5e+08``)."""
    if x != x or x in (float("inf"), float("-inf")):
        return repr(x)
    if 1 <= abs(x) < 1e9:  # fixed notation: 12345.678 -> 12346, not 1.235e+04
        decimals = max(0, digits - len(str(int(abs(x)))))
        text = f"{x:.{decimals}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return f"{x:.{digits}g}"


def _pair(m: re.Match) -> str:
    a, b = float(m.group("a")), float(m.group("b"))
    digits = 4
    while digits < 17 and a != b and _short(a, digits) == _short(b, digits):
        digits += 1
    return f"{m.group('pre')}{_short(a, digits)}{m.group('mid')}{_short(b, digits)}"


def plain_numbers(text: str) -> str:
    """``text`` with numbers as a person writes them.

    The repr of a NumPy scalar becomes its value (``np.float64(-1.6543)`` -> ``-1.6543``, ``np.True_`` ->
    ``True``); ``got A, expected B`` shows both with four significant digits, or as many more as it takes to
    tell them apart; any other float with five or more decimals gets four significant digits
    (``1.1750240325927734`` -> ``1.175``). Integers, tolerances (``1e-05``) and indices are left alone.
    """
    text = _SCALAR_REPR.sub(lambda m: m.group("v") if m.group("v") is not None else m.group("b") or m.group("n"),
                            str(text))
    return _NUMBERS.sub(lambda m: _pair(m) if m.group("a") is not None else _short(float(m.group())), text)


# ---------------------------------------------------------------------------
# feedback.md and details.md
# ---------------------------------------------------------------------------
#: the exercise statuses of the feedback table (a flag adds ``, flagged``)
EXERCISE_STATUSES = ("passed", "partly", "failed", "not attempted", "missing notebook", "unreadable notebook")
#: the chapter statuses (``StudentResult.chapter_status``) that make every exercise of the chapter one status
_CHAPTER_STATUS_WORDS = {"missing": "missing notebook", "unreadable": "unreadable notebook"}
#: a flag's exercise: ``delegates 4.1: ...``, ``dynamic 10.2: ...``
_FLAG_EXERCISE = re.compile(r"^[a-z][a-z-]* (\d+\.\d+):")
#: a flag's chapter: ``reads-outside ch04: ...`` or an exercise's
_FLAG_CHAPTER = re.compile(r"^[a-z][a-z-]* (?:ch(\d\d)|(\d+)\.\d+):")
_ADVISORY_TAIL = re.compile(r" - flagged for review; the grader's guarantee is the sandbox, not this check$")
#: the most lines of flags, hidden-exercise names ... feedback.md shows before pointing to details.md
_MAX_FLAG_LINES = 8
DETAILS_FILE = "details.md"


def chapter_of(exercise: str) -> str:
    """``"4.1"`` -> ``"04"`` (the chapter of an exercise number)."""
    head = str(exercise).split(".")[0]
    return f"{int(head):02d}" if head.isdigit() else head


def _flag_exercise(flag: str) -> str | None:
    m = _FLAG_EXERCISE.match(flag)
    return m.group(1) if m else None


def _flag_chapter(flag: str) -> str | None:
    m = _FLAG_CHAPTER.match(flag)
    if not m:
        return None
    return m.group(1) or f"{int(m.group(2)):02d}"


def _not_implemented(c: dict) -> bool:
    """Whether the case failed because the child's runner recorded a ``NotImplementedError`` (its type, the
    first token of the error text; the word elsewhere in the text is the exception's message)."""
    return not c["passed"] and raised_not_implemented(c.get("child_error"))


def exercise_status(r: StudentResult, exercise: str) -> str:
    """One of :data:`EXERCISE_STATUSES` for ``exercise`` of ``r`` (flags not included)."""
    chapter = r.chapter_status.get(chapter_of(exercise))
    if chapter in _CHAPTER_STATUS_WORDS:
        return _CHAPTER_STATUS_WORDS[chapter]
    got, top = r.exercises.get(exercise, 0), r.exercises_max.get(exercise, 0)
    cases = [c for c in r.cases if c["exercise"] == exercise]
    if top and got >= top:
        return "passed"
    if cases and all(_not_implemented(c) for c in cases):
        return "not attempted"
    return "partly" if got > 0 else "failed"


def _function_of(r: StudentResult, exercise: str) -> str:
    return next((c["function"] for c in r.cases if c["exercise"] == exercise), "")


def _split_message(c: dict) -> tuple[list[str], str]:
    """A case's message as ``(problems, hint)``: each problem one string (with its continuation lines)."""
    message = plain_numbers(c.get("message") or "")
    head = f"Exercise {c['exercise']} ({c['function']}), case {c['case_id']}"
    body = message[len(head):] if message.startswith(head) else message
    body = body[1:] if body.startswith(":") else body
    body = re.sub(r"\n  Note: [^\n]*", "", body)  # the grader's per-case note: shown once per exercise
    hint = ""
    if "\n  Hint: " in body:
        body, _, hint = body.partition("\n  Hint: ")
    problems: list[str] = []
    for line in body.split("\n"):
        if line.startswith("  - ") or not problems:
            problems.append(line[4:] if line.startswith("  - ") else line.strip())
        else:
            problems[-1] += "\n" + line
    return [p for p in problems if p.strip()], hint.strip()


def _one_line(text: str, limit: int = 160) -> str:
    line = text.strip().split("\n")[0]
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


def _case_block(c: dict, limit: int = CASE_ERROR_CHARS) -> list[str]:
    """A failing case in full, as a fence: ``case ID:``, its problems, its hint, then the code's error text
    (quoted, at most ``limit`` characters; when ``limit`` is 0, a pointer to details.md)."""
    problems, hint = _split_message(c)
    text = f"case {c['case_id']}:\n" + "\n".join(f"  - {p}" for p in problems)
    if hint:
        text += f"\n  Hint: {hint}"
    if limit > 0:
        quoted = _quoted_error(c, limit)
    else:
        quoted = [f"  ({ERROR_LABEL}: in {DETAILS_FILE}; this file shows at most {FEEDBACK_ERRORS_CHARS} "
                  f"characters of them.)"] if c.get("child_error") else []
    return md_fence("\n".join([text, *quoted]))


def _quoted_error(c: dict, limit: int = CASE_ERROR_CHARS) -> list[str]:
    """The case's error text as the child sent it: labelled, quoted, capped (``[]`` when there is none)."""
    return quoted_block(ERROR_LABEL, [c["child_error"]], limit, indent="  ") if c.get("child_error") else []


def _error_excerpt(c: dict, limit: int = 120) -> str:
    """`` - Your code's error text (quoted, escaped): «TypeError: ...»``: the first line of the case's error text
    for a one-line item ("" when there is none)."""
    error = (c.get("child_error") or "").strip()
    return " - " + one_line(ERROR_LABEL, error.split("\n")[0], limit) if error else ""


def child_notes_block(r: StudentResult, limit: int) -> list[str]:
    """What the child said about the notebooks (why one cannot be read, the cells it skipped), as the
    submission's own text: a heading, then a fence with the labelled, quoted notes, at most ``limit``
    characters in all (the cap is said in the label). ``[]`` when it said nothing."""
    texts = [f"{ch}: {note}" for ch, notes in sorted(r.child_notes.items()) for note in dict.fromkeys(notes)]
    block = quoted_block(NOTES_LABEL, texts, limit)
    return ["## Messages from your code's run", "", *md_fence("\n".join(block)), ""] if block else []


def _exercise_fixes(r: StudentResult, exercise: str, shown_errors: dict[str, str],
                    budget: list[int] | None = None) -> list[str]:
    """The "What to fix" lines of one exercise that lost points.

    The exercise's first failing case is shown in full (its problems and its hint). If the exercise's first
    value case (its most basic one) fails, the other failing cases that return wrong values most likely fail
    for the same reason and their hints, written for what is special about them (float16, masks ...), would
    not match: they are listed on one line. Every other failing case (one that raised an error of its own, or
    any when the first value case passes) gets one line with its own first problem and its own hint (when not
    already shown). A case that failed with an error shown before is listed on that line too.
    """
    cases = [c for c in r.cases if c["exercise"] == exercise]
    held = [c for c in cases if not c["passed"] and _held_reason(c)]  # passed, earns nothing yet (as the checker)
    failing = [c for c in cases if not c["passed"] and c not in held]
    title = f"**{md_text(exercise)} {md_text(_function_of(r, exercise))}** " \
            f"({r.exercises.get(exercise, 0)} / {r.exercises_max.get(exercise, 0)})"
    lines = [title, ""]
    for note in _exercise_notes(r, exercise):
        lines += [f"- {md_text(note)}", ""]
    if not failing:
        return lines + _held_lines(held) + [""]
    errors = {c.get("child_error") for c in failing}
    if len(errors) == 1 and None not in errors and next(iter(errors)) in shown_errors:
        earlier = shown_errors[next(iter(errors))]
        return lines + [f"- every case fails with the same error as {md_text(earlier)} above.", ""]
    values = [c for c in cases if "-rejects-" not in c["case_id"]]
    basic_failed = bool(values) and not values[0]["passed"]
    first, rest = failing[0], failing[1:]
    budget = [FEEDBACK_ERRORS_CHARS] if budget is None else budget  # characters of error text left to show
    limit = min(CASE_ERROR_CHARS, budget[0])
    budget[0] -= min(limit, len(escape_hidden(first.get("child_error") or "", keep="\n")))
    lines += [*_case_block(first, limit), ""]
    if first.get("child_error"):
        shown_errors.setdefault(first["child_error"], exercise)
    own_errors: set[str] = set()
    hints = {_split_message(first)[1]}
    same_error, same_reason = [], []
    for c in rest:
        error = c.get("child_error")
        if error and (error == first.get("child_error") or error in own_errors or error in shown_errors):
            same_error.append(c["case_id"])  # an error already shown
            continue
        if basic_failed and not error:
            same_reason.append(c["case_id"])  # wrong values while the basic case fails too
            continue
        problems, hint = _split_message(c)
        text = f"case {c['case_id']}: " + _one_line(problems[0] if problems else "failed") + _error_excerpt(c)
        if hint and hint not in hints:
            text += f" Hint: {hint}"
            hints.add(hint)
        lines.append(f"- {md_text(text)}")
        if error:
            own_errors.add(error)
    for same, why in ((same_error, " with an error shown above"),
                      (same_reason, ", most likely for the same reason (fix the case above first)")):
        if same:
            lines.append(f"- {len(same)} more case{'s' if len(same) > 1 else ''} "
                         f"fail{'' if len(same) > 1 else 's'}{why}: " + md_text(", ".join(same)) + ".")
    lines += _held_lines(held)
    if lines[-1]:
        lines.append("")
    return lines


def _held_reason(c: dict) -> str:
    """``"a rejection case"`` / ``"a case with fixed inputs"`` for a case that passed but earns nothing yet
    (:func:`.compare.unearned_passes`), else ``""``."""
    held = c.get("held")  # the grader's structured field, never a search of the message (it may quote the child)
    return "a rejection case" if held == "rejection" else "a case with fixed inputs" if held == "fixed" else ""


def _held_lines(held: list[dict]) -> list[str]:
    """One line per reason for the cases that pass but earn their points only once a drawn case passes (the
    check command's ``~`` lines)."""
    out = []
    for kind in dict.fromkeys(map(_held_reason, held)):
        these = [c["case_id"] for c in held if _held_reason(c) == kind]
        why = REJECTION_ALONE if kind == "a rejection case" else FIXED_ALONE
        verb = "pass but earn their points" if len(these) > 1 else "passes but earns its points"
        out.append("- " + md_text(f"{len(these)} case{'s' if len(these) > 1 else ''} {verb} "
                                  f"only once a case with drawn inputs passes too, because "
                                  f"{'each' if len(these) > 1 else 'it'} is {kind} "
                                  f"({', '.join(these)}): {why}."))
    return out


def _exercise_notes(r: StudentResult, exercise: str) -> list[str]:
    """The notes of one exercise, each once: ``r.exercise_notes[exercise]`` and the ``note`` of its cases (the
    grader's "ran with the course's X in place of yours")."""
    notes = list(r.exercise_notes.get(exercise, []))
    notes += [c["note"] for c in r.cases if c["exercise"] == exercise and isinstance(c.get("note"), str) and c["note"]]
    return list(dict.fromkeys(notes))


def _table_rows(r: StudentResult, flagged: set[str]) -> list[str]:
    """The feedback table; a run of two or more unflagged exercises not attempted (or whose notebook is
    missing or unreadable) is one row."""
    rows: list[tuple[list[str], str]] = []
    for ex in sorted(r.exercises_max, key=_exercise_key):
        status = exercise_status(r, ex)
        collapsible = status in ("not attempted", *_CHAPTER_STATUS_WORDS.values()) and ex not in flagged
        if collapsible and rows and rows[-1][1] == status:
            rows[-1][0].append(ex)
        else:
            rows.append(([ex], status if collapsible else ""))
    out = ["| exercise | function | points | status |", "|---|---|---|---|"]
    for exs, run_status in rows:
        got = sum(r.exercises.get(e, 0) for e in exs)
        top = sum(r.exercises_max.get(e, 0) for e in exs)
        if len(exs) == 1:
            status = exercise_status(r, exs[0]) + (", flagged" if exs[0] in flagged else "")
            out.append(f"| {md_text(exs[0])} | {md_text(_function_of(r, exs[0]))} | {got} / {top} | "
                       f"{status} |")
        else:
            names = ", ".join(_function_of(r, e) for e in exs) if len(exs) <= 3 else f"{len(exs)} exercises"
            out.append(f"| {md_text(exs[0])} - {md_text(exs[-1])} | {md_text(names)} | {got} / {top} | "
                       f"{run_status} |")
    return out


def _graded_line(r: StudentResult) -> str:
    """When the chapters were graded: one time, or each time with its chapters."""
    times = _chapter_times(r)
    if len(times) <= 1:
        when = next(iter(times), _when(r.graded_at))
        return f"graded {when}" if when else ""
    return "graded " + "; ".join(f"chapter{'s' if len(chs) > 1 else ''} {', '.join(chs)} {t}"
                                 for t, chs in sorted(times.items(), reverse=True))


def _chapter_times(r: StudentResult) -> dict[str, list[str]]:
    """Each time chapters of ``r`` were graded (as :func:`_when` writes it) -> those chapters."""
    times: dict[str, list[str]] = {}
    for ch in sorted({chapter_of(e) for e in r.exercises_max}):
        times.setdefault(_when(r.chapter_graded_at.get(ch) or r.graded_at), []).append(ch)
    return times


def _when(iso: str) -> str:
    """``2026-12-02T04:38:00+00:00`` -> ``2026-12-02 04:38 UTC``."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d)(?::\d\d(?:\.\d+)?)?(?:\+00:00|Z)", iso or "")
    return f"{m.group(1)} {m.group(2)} UTC" if m else (iso or "")


def _flag_lines(flags: list[str], limit: int | None) -> list[str]:
    shown = list(dict.fromkeys(_ADVISORY_TAIL.sub("", plain_numbers(f)) for f in flags))
    out = [f"- {md_text(f)}" for f in (shown if limit is None else shown[:limit])]
    if limit is not None and len(shown) > limit:
        out.append(f"- ... and {len(shown) - limit} more (see {md_text(DETAILS_FILE)}).")
    return out


def feedback_markdown(r: StudentResult) -> str:
    """Feedback for the student (Markdown) that fits one screen for a typical submission.

    * A title, the score and when it was graded (each chapter's time when they differ), the status when it is
      not ``ok``; the notes (one line each, once: a missing or unreadable notebook, a cell that was skipped, a
      timeout ...).
    * A table: exercise, function, points, status (:func:`exercise_status`, ``, flagged`` when a static check
      flagged it); a run of exercises not attempted, or of a missing or unreadable notebook, is one row.
    * "What to fix": for each exercise that lost points and was attempted, its first failing case in full
      (problems and hint) and one line for each other failing case, or one line for those that most likely
      fail for the same reason (see :func:`_exercise_fixes`); numbers are plain (:func:`plain_numbers`).
    * The flags raised (advisory: they never change points).
    * Where the full messages are: :data:`DETAILS_FILE` (every case, the code's error output).

    Whatever may come from the student (ids, notes naming their files, error texts) is shown inertly:
    messages in fences they cannot close (:func:`md_fence`), one-line text escaped (:func:`md_text`).
    """
    flagged = {e for e in map(_flag_exercise, r.flags) if e}
    head = f"**Score: {r.score} / {r.max_score}**"
    graded = _graded_line(r)
    if graded:
        head += f" - {graded}"
    if r.status != "ok":
        head += f" - status: {md_text(r.status)}"
    lines = [f"# Feedback for {md_text(r.student)}", "", head, ""]
    notes = list(dict.fromkeys(r.notes))
    lines += [f"- {md_text(n)}" for n in notes]
    if notes:
        lines.append("")
    lines += [*_table_rows(r, flagged), ""]
    if any(exercise_status(r, e) == "not attempted" for e in r.exercises_max):
        lines += ["Not attempted: the function still raises NotImplementedError (the stub); write it, then check it "
                  "with `python -m course_exercises.check NN`.", ""]
    to_fix = [e for e in sorted(r.exercises_max, key=_exercise_key)
              if exercise_status(r, e) in ("partly", "failed")]
    if to_fix:
        lines += ["## What to fix", ""]
        shown_errors: dict[str, str] = {}
        budget = [FEEDBACK_ERRORS_CHARS]
        for ex in to_fix:
            lines += _exercise_fixes(r, ex, shown_errors, budget)
    elif r.score >= r.max_score:
        lines += ["Every check passed.", ""]
    if r.flags:
        lines += ["## Flagged for review", "",
                  "Structural checks for your instructor; they never change your points.", "",
                  *_flag_lines(r.flags, _MAX_FLAG_LINES), ""]
    extra = " and the end of your code's error output" if r.stderr_tail.strip() else ""
    lines += [f"Every case's full message{extra}: {md_text(DETAILS_FILE)} in this folder.", ""]
    lines += child_notes_block(r, FEEDBACK_NOTES_CHARS)  # the submission's own text: last, quoted, capped
    return "\n".join(lines)


def _untouched_line(r: StudentResult, exercise: str) -> str:
    """One line for an exercise not attempted (or whose notebook is missing or unreadable): its status, the
    first line of the error its first case raised, and its hint."""
    first = next((c for c in r.cases if c["exercise"] == exercise and not c["passed"]), None)
    text = f"{exercise} {_function_of(r, exercise)}: {exercise_status(r, exercise)}"
    if first is not None:
        problems, hint = _split_message(first)
        if problems:
            text += f" - {_one_line(problems[0], 200)}" + _error_excerpt(first)
        if hint:
            text += f" Hint: {hint}"
    return f"- {md_text(text)}"


def details_markdown(r: StudentResult) -> str:
    """``details.md``: everything behind :func:`feedback_markdown` - each failing case's full message (a case
    that failed with the same error as an earlier one points to it), every note and flag, when each chapter
    was graded, and the end of the code's error output. For the instructor (and the curious student)."""
    lines = [f"# Details for {md_text(r.student)}", "",
             f"Score {r.score} / {r.max_score}; status {md_text(r.status)}; submission "
             f"{md_text(r.submission_hash[:16] or '?')}; manifest {md_text(r.manifest_hash[:16] or '?')}.", ""]
    chapters = sorted({chapter_of(e) for e in r.exercises_max})
    if chapters:
        lines += ["| chapter | status | graded | manifest |", "|---|---|---|---|"]
        for ch in chapters:
            lines.append(f"| {md_text(ch)} | {md_text(r.chapter_status.get(ch, '') or '-')} | "
                         f"{md_text(_when(r.chapter_graded_at.get(ch) or r.graded_at) or '-')} | "
                         f"{md_text((r.chapter_manifest.get(ch) or r.manifest_hash)[:16] or '-')} |")
        lines.append("")
    if r.notes:
        lines += ["## Notes", "", *[f"- {md_text(n)}" for n in dict.fromkeys(r.notes)], ""]
    exercise_notes = [(e, n) for e in sorted(r.exercises_max, key=_exercise_key) for n in _exercise_notes(r, e)]
    if exercise_notes:
        lines += [*[f"- {md_text(e)}: {md_text(n)}" for e, n in exercise_notes], ""]
    if r.flags:
        lines += ["## Flags", "", *_flag_lines(r.flags, None), ""]
    untouched = [e for e in sorted(r.exercises_max, key=_exercise_key)
                 if exercise_status(r, e) in ("not attempted", *_CHAPTER_STATUS_WORDS.values())]
    failed = [c for c in r.cases if not c["passed"] and c["exercise"] not in untouched]
    if untouched:
        lines += ["## Not attempted or not readable", "", *map(lambda e: _untouched_line(r, e), untouched), ""]
    if failed:
        lines += ["## Every failing case", ""]
        first_with: dict[str, str] = {}
        for c in failed:
            error = c.get("child_error")
            if error and error in first_with:
                lines += ["- " + md_text(f"Exercise {c['exercise']} ({c['function']}), case {c['case_id']}: the same "
                                         f"error as case {first_with[error]} above."), ""]
                continue
            if error:
                first_with[error] = c["case_id"]
            lines += [*md_fence("\n".join([plain_numbers(c["message"]), *_quoted_error(c)])), ""]
    lines += child_notes_block(r, DETAILS_NOTES_CHARS)
    if r.stderr_tail.strip():
        lines += ["## The end of your code's error output", "",
                  *md_fence("\n".join(quoted_block(OUTPUT_LABEL + " on stderr", [r.stderr_tail.strip()[-1500:]],
                                                    1500))), ""]
    return "\n".join(lines)


def _exercise_key(ex: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in ex.split("."))


def student_dir(out_dir: Path, student: str) -> Path:
    """``out_dir/student``, after checking that the id is one plain folder name that is not a report's.

    Raises:
        ValueError: the id is empty, has a path separator or NUL, starts with a
            dot, or is one of :data:`~.intake.RESERVED_IDS` (ids from
            :func:`~.intake.discover` never are).
    """
    if (not student or student.startswith(".") or any(c in student for c in "/\\\0")
            or student.casefold() in RESERVED_IDS):
        raise ValueError(f"unsafe student id {student!r}")
    return Path(out_dir) / student


def write_student_files(out_dir: Path, r: StudentResult) -> None:
    """Write ``results.json``, ``feedback.md``, ``details.md`` and ``grade.json`` of one student (atomically)."""
    d = student_dir(out_dir, r.student)
    atomic_write(d / "results.json", json.dumps(gradescope_results(r), indent=1))
    atomic_write(d / "feedback.md", feedback_markdown(r))
    atomic_write(d / DETAILS_FILE, details_markdown(r))
    atomic_write(d / "grade.json", json.dumps(r.to_json(), indent=1))


def exercise_order(exercises: list[str]) -> list[str]:
    """Sort exercise numbers numerically (``2.1 < 10.1``)."""
    return sorted(set(exercises), key=_exercise_key)


# ---------------------------------------------------------------------------
# History: a report folder keeps the chapters it does not regrade
# ---------------------------------------------------------------------------
#: the overall statuses, the one that wins first when chapters graded at different times are merged
_STATUS_ORDER = ("invalid submission", "timeout", "memory", "crashed", "unreadable", "missing", "ok")
#: the status of a student graded before whose submission is not among this run's
MISSING_SUBMISSION = "missing submission"
#: how many runs ``summary.json`` remembers
MAX_HISTORY = 200


@dataclass
class EarlierReports:
    """What a report folder holds from earlier runs (see :func:`load_earlier`).

    Attributes:
        results: student id -> the record in ``DIR/<student>/grade.json``.
        summary: the earlier ``summary.json`` (``{}`` when there is none).
        problems: files that exist but cannot be read as the grader's reports (``"bob/grade.json: ..."``).
    """

    results: dict[str, StudentResult] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def load_earlier(out_dir: Path) -> EarlierReports:
    """The earlier reports of ``out_dir``: every ``<student>/grade.json`` and ``summary.json``.

    Folders that are not student folders (``_reference``, names starting with a dot, files) are skipped; a
    ``grade.json`` or ``summary.json`` that cannot be read is listed in ``problems`` (never raised).
    """
    found = EarlierReports()
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return found
    summary = out_dir / "summary.json"
    if summary.is_file():
        try:
            found.summary = json.loads(summary.read_text(encoding="utf-8"))
            if not isinstance(found.summary, dict):
                raise ValueError("not an object")
        except (OSError, ValueError, RecursionError) as exc:
            found.summary = {}
            found.problems.append(f"summary.json: {type(exc).__name__}: {exc}"[:300])
    for entry in sorted(out_dir.iterdir()):
        try:
            student_dir(out_dir, entry.name)
        except ValueError:
            continue
        record = entry / "grade.json"
        if entry.is_symlink() or not entry.is_dir() or not record.is_file():
            continue
        try:
            r = StudentResult.from_json(json.loads(record.read_text(encoding="utf-8")))
            if r.student != entry.name:
                raise ValueError(f"it is the record of {r.student!r}")
        except (OSError, ValueError, RecursionError) as exc:
            found.problems.append(f"{entry.name}/grade.json: {type(exc).__name__}: {exc}"[:300])
            continue
        found.results[r.student] = r
    return found


def _mentions(text: str, chapters: set[str]) -> bool:
    """Whether a note or flag is about one of ``chapters`` (``Chapter 04``, ``04_attention.ipynb``, ``4.1``)."""
    for ch in chapters:
        if re.search(rf"\b(?:[Cc]hapter |ch){ch}\b|\b{ch}_\w+\.ipynb|(?<![\d.]){int(ch)}\.\d+\b", text):
            return True
    return False


def stamp_chapters(r: StudentResult, chapters: list[str]) -> StudentResult:
    """Record in ``r`` that ``chapters`` were graded at ``r.graded_at`` against ``r.manifest_hash``."""
    for ch in chapters:
        r.chapter_graded_at[ch] = r.graded_at
        r.chapter_manifest[ch] = r.manifest_hash
    return r


#: most notes a merged record keeps (this run's first, then the earlier ones about the kept chapters)
MAX_MERGED_NOTES = 40

def merge_results(earlier: StudentResult | None, now: StudentResult, chapters: list[str]) -> StudentResult:
    """One student's record after grading ``chapters`` now: ``now`` for those chapters, ``earlier`` for the others.

    The chapters graded now replace whatever the earlier record had for them (cases, points, chapter status,
    the notes and flags about them); the earlier record's other chapters are kept with the time and manifest
    they were graded with (``chapter_graded_at``, ``chapter_manifest``). Score, maximum and per-exercise points
    are summed again over the merged cases; the status is the worst of the run's and the kept chapters'
    (:data:`_STATUS_ORDER`). The submission hash, run time, error output and ``graded_at`` are the run's.
    """
    now = stamp_chapters(now, chapters)
    if earlier is None:
        return now
    graded = set(chapters)
    kept_cases = [c for c in earlier.cases if chapter_of(c["exercise"]) not in graded]
    if not kept_cases:
        return now
    kept = {chapter_of(c["exercise"]) for c in kept_cases}
    cases = sorted(kept_cases + list(now.cases), key=lambda c: _exercise_key(c["exercise"]))  # stable: case order
    exercises: dict[str, int] = {}
    exercises_max: dict[str, int] = {}
    for c in cases:
        exercises[c["exercise"]] = exercises.get(c["exercise"], 0) + int(c["points"])
        exercises_max[c["exercise"]] = exercises_max.get(c["exercise"], 0) + int(c["max_points"])
    chapter_status = {**{ch: s for ch, s in earlier.chapter_status.items() if ch in kept}, **now.chapter_status}
    statuses = {now.status, *(s for ch, s in earlier.chapter_status.items() if ch in kept)}
    if earlier.status == "invalid submission":
        statuses.add("invalid submission")
    status = next((s for s in _STATUS_ORDER if s in statuses), now.status)
    merged = StudentResult(
        student=now.student, submission_hash=now.submission_hash, manifest_hash=now.manifest_hash, status=status,
        score=sum(int(c["points"]) for c in cases), max_score=sum(int(c["max_points"]) for c in cases),
        exercises=exercises, exercises_max=exercises_max, cases=cases,
        flags=list(dict.fromkeys([*now.flags, *(f for f in earlier.flags if _mentions(f, kept)
                                                and _flag_chapter(f) not in graded)])),
        # capped: the child's notes are student-controlled text, and regrades must not pile them up
        notes=list(dict.fromkeys([*now.notes, *(n for n in earlier.notes if _mentions(n, kept)
                                                and not _mentions(n, graded))]))[:MAX_MERGED_NOTES],
        chapter_status=chapter_status, runtime=now.runtime, stderr_tail=now.stderr_tail, graded_at=now.graded_at,
        exercise_notes={**{e: n for e, n in earlier.exercise_notes.items() if chapter_of(e) in kept},
                        **now.exercise_notes},
        chapter_graded_at={**{ch: earlier.chapter_graded_at.get(ch) or earlier.graded_at for ch in kept},
                           **now.chapter_graded_at},
        chapter_manifest={**{ch: earlier.chapter_manifest.get(ch) or earlier.manifest_hash for ch in kept},
                          **now.chapter_manifest},
        child_notes={**{ch: n for ch, n in earlier.child_notes.items() if ch in kept}, **now.child_notes},
        sandbox=now.sandbox)
    return merged


def missing_row(earlier: StudentResult) -> StudentResult:
    """The ``grades.csv`` row of a student graded before and not in this run's submissions: the earlier
    points, status ``missing submission`` (their report files are left as they were)."""
    d = earlier.to_json()
    d["status"] = MISSING_SUBMISSION
    row = StudentResult.from_json(d)
    row.reused = True
    return row


def graded_cell(r: StudentResult) -> str:
    """When each chapter was graded, for ``grades.csv``: one time, or ``04,05 TIME; 02,03 TIME``."""
    times = _chapter_times(r)
    if len(times) <= 1:
        return next(iter(times), _when(r.graded_at))
    return "; ".join(f"{','.join(chs)} {t}" for t, chs in sorted(times.items(), reverse=True))
