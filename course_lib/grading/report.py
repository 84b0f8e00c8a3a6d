"""The grader's reports, written only by the parent and always atomically.

Files (``DIR`` is ``--out``):

* ``DIR/grades.csv`` - one row per submission, whatever happened to it:
  ``student, score, max, <one column per exercise>, status, runtime, flags,
  submission_hash``; ``status`` is ``ok``, ``timeout``, ``crashed``,
  ``memory`` or ``invalid submission``.
* ``DIR/<student>/results.json`` - Gradescope's format: top-level ``score``,
  ``max_score``, ``execution_time``, ``output``, ``visibility``, ``tests``
  (one per case: ``name``, ``number``, ``score``, ``max_score``, ``status``,
  ``output``, ``visibility``); the instructor's flags go into a 0-point test
  with ``visibility: "hidden"``.
* ``DIR/<student>/feedback.md`` - readable feedback for the student.
* ``DIR/<student>/grade.json`` - the parent's record, used to skip an
  unchanged submission on the next run.
* ``DIR/summary.json`` - grader, Python, numpy and torch versions, the
  manifest's SHA-256, the sandbox and what it could not do, the limits, counts.

Every file is written to a temporary file in the same folder, flushed to disk
and moved into place with :func:`os.replace`, so a reader never sees half a
report and a crash never leaves one.

Source: the autograder issue ("Reports").
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["StudentResult", "atomic_write", "write_student_files", "grades_csv", "gradescope_results",
           "feedback_markdown", "STATUSES"]

STATUSES = ("ok", "timeout", "crashed", "memory", "invalid submission")


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


def _csv_safe(text: str) -> str:
    """Defuse spreadsheet formulas in free text (a cell starting with = + - @)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def grades_csv(results: list[StudentResult], exercises: list[str]) -> str:
    """The text of ``grades.csv``: a header, then one row per result (sorted by student)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["student", "score", "max", *exercises, "status", "runtime", "flags", "submission_hash"])
    for r in sorted(results, key=lambda r: r.student):
        writer.writerow([_csv_safe(r.student), r.score, r.max_score, *(r.exercises.get(e, 0) for e in exercises),
                         r.status, f"{r.runtime:.1f}", _csv_safe("; ".join(r.flags)), r.submission_hash])
    return buf.getvalue()


def gradescope_results(r: StudentResult) -> dict:
    """The Gradescope ``results.json`` object of one submission."""
    tests = []
    for c in r.cases:
        out = "Passed." if c["passed"] else c["message"]
        tests.append({
            "name": f"Exercise {c['exercise']} ({c['function']}): {c['case_id']}",
            "number": c["exercise"],
            "score": c["points"],
            "max_score": c["max_points"],
            "status": "passed" if c["passed"] else "failed",
            "output": out,
            "visibility": "visible",
        })
    if r.flags:
        tests.append({
            "name": "Instructor review (structural checks; no points)",
            "score": 0,
            "max_score": 0,
            "status": "failed",
            "output": "\n".join(r.flags),
            "visibility": "hidden",
        })
    summary = f"Score {r.score}/{r.max_score}. Status: {r.status}."
    if r.notes:
        summary += "\n" + "\n".join(f"- {n}" for n in r.notes)
    return {
        "score": r.score,
        "max_score": r.max_score,
        "execution_time": round(r.runtime, 2),
        "output": summary,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def feedback_markdown(r: StudentResult) -> str:
    """Readable feedback for the student (Markdown).

    Every failed case gets its teaching message; a case that failed with the
    same error as an earlier one (e.g. a syntax error that stops the whole
    notebook) gets one line pointing to it instead of the full text again.
    """
    lines = [f"# Feedback for {r.student}", "", f"**Score: {r.score} / {r.max_score}** (status: {r.status})", ""]
    for note in r.notes:
        lines.append(f"- {note}")
    if r.notes:
        lines.append("")
    lines += ["| exercise | points |", "|---|---|"]
    for ex in sorted(r.exercises_max, key=_exercise_key):
        lines.append(f"| {ex} | {r.exercises.get(ex, 0)} / {r.exercises_max[ex]} |")
    lines.append("")
    failed = [c for c in r.cases if not c["passed"]]
    if failed:
        lines += ["## What to fix", ""]
        first_with: dict[str, str] = {}  # an error text -> the first case that showed it in full
        for c in failed:
            error = c.get("child_error")
            if error and error in first_with:
                lines += [f"- Exercise {c['exercise']} ({c['function']}), case {c['case_id']}: the same error as "
                          f"case {first_with[error]} above.", ""]
                continue
            if error:
                first_with[error] = c["case_id"]
            lines += ["```text", c["message"], "```", ""]
    else:
        lines += ["Every check passed.", ""]
    if r.stderr_tail.strip():
        lines += ["## The end of your code's error output", "", "```text", r.stderr_tail.strip()[-1500:], "```", ""]
    return "\n".join(lines)


def _exercise_key(ex: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in ex.split("."))


def write_student_files(out_dir: Path, r: StudentResult) -> None:
    """Write ``results.json``, ``feedback.md`` and ``grade.json`` of one student (atomically)."""
    d = Path(out_dir) / r.student
    atomic_write(d / "results.json", json.dumps(gradescope_results(r), indent=1))
    atomic_write(d / "feedback.md", feedback_markdown(r))
    atomic_write(d / "grade.json", json.dumps(r.to_json(), indent=1))


def exercise_order(exercises: list[str]) -> list[str]:
    """Sort exercise numbers numerically (``2.1 < 10.1``)."""
    return sorted(set(exercises), key=_exercise_key)
