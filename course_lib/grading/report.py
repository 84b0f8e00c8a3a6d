"""The grader's reports, written only by the parent and always atomically.

Files (``DIR`` is ``--out``):

* ``DIR/grades.csv`` - one row per submission, whatever happened to it:
  ``student, source, score, max, <one column per exercise>, status, runtime,
  flags, submission_hash``; ``source`` is the folder/file name the id was made
  from; ``status`` is ``ok``, ``timeout``, ``crashed``, ``memory`` or
  ``invalid submission``. No cell starts a spreadsheet formula or holds a
  line break.
* ``DIR/<student>/results.json`` - Gradescope's format: top-level ``score``,
  ``max_score``, ``execution_time``, ``output``, ``visibility``, ``tests``
  (one per case: ``name``, ``number``, ``score``, ``max_score``, ``status``,
  ``output``, ``visibility``); the instructor's flags go into a 0-point test
  with ``visibility: "hidden"``.
* ``DIR/<student>/feedback.md`` - readable feedback for the student.
* ``DIR/<student>/grade.json`` - the parent's record, used to skip an
  unchanged submission on the next run.
* ``DIR/summary.json`` - grader, Python, numpy and torch versions, the
  manifest's SHA-256, the sandbox and what it could not do, the limits, counts,
  and ``sources`` (student id -> the folder/file name it was made from).

Everything that may come from a student (names, error texts, output) is shown
inertly: in ``feedback.md`` inside code fences it cannot close or as escaped
text (no headings, links, images or HTML), in ``results.json`` as plain text
(``output_format: "text"``), and in every file with control characters written
out (no terminal escapes).

Every file is written to a temporary file in the same folder, flushed to disk
and moved into place with :func:`os.replace`, so a reader never sees half a
report and a crash never leaves one.

Design and threat model: ``course_lib/grading/SECURITY.md``.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import tempfile
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .intake import RESERVED_IDS

__all__ = ["StudentResult", "atomic_write", "write_student_files", "grades_csv", "gradescope_results",
           "feedback_markdown", "md_fence", "md_text", "plain_text", "student_dir", "STATUSES",
           "exercise_order"]

STATUSES = ("ok", "timeout", "crashed", "memory", "unreadable", "missing", "invalid submission")


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
        notes: remarks for the student (missing notebook, output cut, timeout ...).
        chapter_status: chapter -> ``ok``/``timeout``/``crashed``/``memory``/``missing``.
        runtime: wall-clock seconds spent on the submission.
        stderr_tail: the end of the child's stderr (the student's own output).
        graded_at: ISO time of grading.
        reused: ``True`` when taken unchanged from a previous run.
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

    def to_json(self) -> dict:
        """A JSON-able dict (``reused`` excluded)."""
        d = asdict(self)
        d.pop("reused")
        return d

    @classmethod
    def from_json(cls, d: dict) -> "StudentResult":
        """Rebuild from :meth:`to_json` output.

        Raises:
            ValueError: a field is missing or has the wrong type.
        """
        try:
            obj = cls(**{k: d[k] for k in cls.__dataclass_fields__ if k != "reused"})
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a grade record: {exc}") from None
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


_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(ch: str) -> str:
    """A control or invisible formatting character written out (``\\n``, ``\\x1b``, ``\\u202e``)."""
    if ch in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[ch]
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def _is_hidden_char(ch: str) -> bool:
    """``ch`` is a control, format (bidi override, zero-width ...), surrogate or line/paragraph separator."""
    return unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")


def plain_text(text: str, keep: str = "\n\t") -> str:
    """Untrusted text made inert for a terminal or a text viewer.

    CR LF and CR become LF; every control character (ANSI escapes, NUL ...),
    invisible format character (bidi overrides ...) and line separator except
    those in ``keep`` is written out as ``\\n``, ``\\x1b``, ``\\u202e`` ...
    """
    text = str(text).replace("\r\n", "\n").replace("\r", "\n")
    return "".join(_visible(ch) if _is_hidden_char(ch) and ch not in keep else ch for ch in text)


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
                     "submission_hash"])
    for r in sorted(results, key=lambda r: r.student):
        source = [_csv_safe(sources.get(r.student, ""))] if sources is not None else []
        writer.writerow([_csv_safe(r.student), *source, r.score, r.max_score,
                         *(r.exercises.get(e, 0) for e in exercises), _csv_safe(r.status), f"{r.runtime:.1f}",
                         _csv_safe("; ".join(r.flags)), _csv_safe(r.submission_hash)])
    return buf.getvalue()


def gradescope_results(r: StudentResult) -> dict:
    """The Gradescope ``results.json`` object of one submission.

    Every ``output`` and name is declared ``text`` (Gradescope's default,
    ``simple_format``, lets some HTML through), and control characters in it
    are written out (see :func:`plain_text`).
    """
    tests = []
    for c in r.cases:
        out = "Passed." if c["passed"] else plain_text(c["message"])
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
        summary += "\n" + "\n".join(f"- {plain_text(n)}" for n in r.notes)
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


def feedback_markdown(r: StudentResult) -> str:
    """Readable feedback for the student (Markdown).

    Every failed case gets its teaching message; a case that failed with the
    same error as an earlier one (e.g. a syntax error that stops the whole
    notebook) gets one line pointing to it instead of the full text again.

    Whatever may come from the student (ids, notes naming their files, error
    texts, their code's stderr) is shown inertly: messages in fences they
    cannot close (:func:`md_fence`), one-line text escaped (:func:`md_text`).
    """
    lines = [f"# Feedback for {md_text(r.student)}", "",
             f"**Score: {r.score} / {r.max_score}** (status: {md_text(r.status)})", ""]
    for note in r.notes:
        lines.append(f"- {md_text(note)}")
    if r.notes:
        lines.append("")
    lines += ["| exercise | points |", "|---|---|"]
    for ex in sorted(r.exercises_max, key=_exercise_key):
        lines.append(f"| {md_text(ex)} | {r.exercises.get(ex, 0)} / {r.exercises_max[ex]} |")
    lines.append("")
    failed = [c for c in r.cases if not c["passed"]]
    if failed:
        lines += ["## What to fix", ""]
        first_with: dict[str, str] = {}  # an error text -> the first case that showed it in full
        for c in failed:
            error = c.get("child_error")
            if error and error in first_with:
                lines += ["- " + md_text(f"Exercise {c['exercise']} ({c['function']}), case {c['case_id']}: the same "
                                         f"error as case {first_with[error]} above."), ""]
                continue
            if error:
                first_with[error] = c["case_id"]
            lines += [*md_fence(c["message"]), ""]
    else:
        lines += ["Every check passed.", ""]
    if r.stderr_tail.strip():
        lines += ["## The end of your code's error output", "", *md_fence(r.stderr_tail.strip()[-1500:]), ""]
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
    """Write ``results.json``, ``feedback.md`` and ``grade.json`` of one student (atomically)."""
    d = student_dir(out_dir, r.student)
    atomic_write(d / "results.json", json.dumps(gradescope_results(r), indent=1))
    atomic_write(d / "feedback.md", feedback_markdown(r))
    atomic_write(d / "grade.json", json.dumps(r.to_json(), indent=1))


def exercise_order(exercises: list[str]) -> list[str]:
    """Sort exercise numbers numerically (``2.1 < 10.1``)."""
    return sorted(set(exercises), key=_exercise_key)
