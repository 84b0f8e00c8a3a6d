"""The instructor's grading command.

Usage::

    python -m course_grader SUBMISSIONS [SUBMISSIONS ...] --out DIR
        [--jobs N] [--timeout SECONDS] [--submission-timeout SECONDS] [--memory MB]
        [--chapters 04 05 ...] [--extra-tests PATH ...] [--force]
        [--single [--student ID]] [--solutions DIR] [--cases PATH] [--reference MANIFEST]
        [--sandbox auto|namespaces|userns|nobody|unsafe] [--unsafe-sandbox] [--no-progress]

``SUBMISSIONS`` is a folder holding one entry per student - a sub-folder or a
``.zip`` of the student's exercise notebooks, the student id being its name -
or, with ``--single``, one submission itself (Gradescope's
``/autograder/submission``).

Every entry of a SUBMISSIONS folder gets a row: one that is not a folder or
a ``.zip`` (a ``.tar.gz``, a single file, a name starting with a dot ...) as
an ``invalid submission`` saying what to submit instead; only operating-system
litter (``.DS_Store``, ``__MACOSX`` ...) is skipped, with a note on stderr.
Student ids are made file-name safe and unique (see
:func:`course_grader.intake.discover`); ``grades.csv`` (column
``source``) and ``summary.json`` (``sources``) map each id to the name it was
made from.

Reports go to ``DIR`` (see :mod:`course_grader.report`): ``grades.csv``,
``summary.json``, and per student ``results.json`` (Gradescope),
``feedback.md`` and ``grade.json``; the reference arrays and their manifest go
to ``DIR/_reference/``. ``DIR`` must be a folder (or not exist yet) and must
neither lie inside a SUBMISSIONS path nor hold one (the reports would be graded
as a submission, or written among the submissions). Every run draws new inputs from a new secret salt;
with ``--reference MANIFEST`` a run reuses that manifest and its inputs, and
then a submission whose hash did not change since it was graded against the
same manifest is skipped unless ``--force``. Do not reuse a run's inputs once
its feedback has been released: the reports show expected values, so a table
copied from them would pass the reused cases (``SECURITY.md``, known limits).

History: a report folder keeps earlier grades. Grading some chapters
(``--chapters 04 05``) into it replaces, for each student graded now, those
chapters' grades and keeps the other chapters' from their ``grade.json``, with
when and against which manifest each chapter was graded (``grades.csv`` column
``graded``; the earlier manifest is kept as ``DIR/_history/manifest-SHA.json``);
a student graded before and not among the submissions now keeps a row with
status ``missing submission`` (``summary.json``: ``missing``; ``history`` lists every
run). Earlier reports the grader cannot read (a damaged ``grade.json`` or
``summary.json``) stop the run with exit status 2 unless ``--force``, which
replaces them. A run holds an exclusive lock on ``DIR/.lock`` from before it
reads the folder until it ends: a second run started with the same ``--out``
while one is writing there stops at once with exit status 2 ("another grading
run is writing to ...").

``--solutions DIR``: the folder of the reference notebooks (``NN_topic.ipynb``
for every chapter graded); default: ``solutions/`` of the course repository the
command runs from (see :func:`course_exercises.check.clone_root`). Outside a clone it
must be given. The cases come from the package
(``course_exercises/cases/registry.py`` and its chapter files; ``--cases PATH`` for another copy), so
an installed package grades as a clone does.

``--extra-tests PATH``: a Python file with the same registry format as
the course's ``course_exercises/cases/registry.py`` (with the chapter files its ``PARTS`` names) - a list ``CASES`` of objects with ``id``,
``chapter``, ``exercise``, ``points``, ``requires``, ``produce``,
``expected``, ``rtol``, ``atol``, ``hint`` (optionally ``robust``) - and
optionally a literal ``NOTEBOOKS`` dict for new chapters. The trusted reference
run uses it as written; the student's process gets its *student copy*
(:mod:`course_exercises.casefile`): every ``expected=`` / ``robust=`` argument
becomes ``None`` and what only they used is dropped, so pass answers only
through them. The course's cases module is importable there as
``course_exercise_cases`` (e.g. ``from course_exercise_cases import Case,
to_array``); draw random inputs with its ``_randn``/``_randint`` to have them
drawn anew for every run. Its cases are checked against the solutions like the
course's own and add to the maximum score.

Exit status: 0 when every submission has its row (whatever the students'
scores), 2 for a usage or reference error (bad option, missing or failing
solutions, ``--out`` in use by another run), 1 for an unexpected error of the grader.

Design and threat model: ``course_grader/SECURITY.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from course_exercises.check import prog_name

__all__ = ["main", "build_parser", "prog_name", "write_run_files", "reference_message"]


def _chapters(values: list[str]) -> list[str]:
    out = []
    for value in values:
        for part in value.replace(",", " ").split():
            digits = part.split("_")[0].lstrip("ch").lstrip("chapter")
            if not digits.isdigit():
                raise argparse.ArgumentTypeError(f"--chapters: {part!r} is not a chapter number (e.g. 04)")
            ch = f"{int(digits):02d}"
            if ch not in out:
                out.append(ch)
    return out


#: why the grader stops on another system (its entry says so before it does anything)
LINUX_ONLY = ("the grader runs on Linux only (its sandbox is built from Linux namespaces, cgroups and seccomp): "
              "grade in a Linux container or virtual machine (e.g. Docker, WSL 2). Students check their own work "
              "with course-check, which runs on Linux, macOS and Windows.")


def build_parser() -> argparse.ArgumentParser:
    """The command's argument parser."""
    from .sandbox import Limits  # the defaults of the limits live there, once

    p = argparse.ArgumentParser(
        prog=prog_name("course-grade", "course_grader"),
        description="Grade exercise submissions in sandboxed child processes and write grades.csv, "
                    "per-student Gradescope results.json and feedback, and summary.json.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__import__('course_lib').__version__}")
    p.add_argument("submissions", nargs="+", type=Path, metavar="SUBMISSIONS",
                   help="folder of submissions (one sub-folder or .zip per student); with --single, the submission")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="report folder")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="submissions graded at once (default 1)")
    p.add_argument("--timeout", type=float, default=Limits.chapter_timeout_s, metavar="SECONDS",
                   help=f"wall-clock limit per chapter (default {Limits.chapter_timeout_s:g})")
    p.add_argument("--submission-timeout", type=float, default=None, metavar="SECONDS",
                   help="wall-clock limit per submission (default: 10 x --timeout, at most 900)")
    p.add_argument("--memory", type=int, default=4096, metavar="MB",
                   help="address-space limit of a child in MiB (default 4096, at least 1024: import torch maps ~640)")
    p.add_argument("--chapters", nargs="+", default=[], metavar="NN", help="grade only these chapters (e.g. 04 05)")
    p.add_argument("--extra-tests", nargs="+", type=Path, default=[], metavar="PATH",
                   help="extra cases modules (same Case registry format: a CASES list)")
    p.add_argument("--force", action="store_true",
                   help="regrade submissions already graded (same hash), and replace earlier reports in --out "
                        "that cannot be read (without it the grader stops)")
    p.add_argument("--single", action="store_true", help="each SUBMISSIONS path is one submission")
    p.add_argument("--student", default=None, help="with --single: the student id")
    p.add_argument("--solutions", type=Path, default=None, metavar="DIR",
                   help="folder of the reference notebooks, NN_topic.ipynb for each chapter graded (default: "
                        "solutions/ of the course repository you run this from; required outside a clone)")
    p.add_argument("--cases", type=Path, default=None, metavar="PATH",
                   help="the course's cases registry (default: the package's course_exercises/cases/registry.py, with its chapter files)")
    p.add_argument("--reference", type=Path, default=None, metavar="MANIFEST",
                   help="reuse this reference manifest.json and its drawn inputs (it must match the solutions, "
                        "cases and grader); without it every run draws new inputs. Do not reuse a run's inputs "
                        "after its feedback was released: the reports show expected values (SECURITY.md)")
    p.add_argument("--sandbox", default="auto", choices=["auto", "namespaces", "userns", "nobody", "unsafe"],
                   help="sandbox strength (default: the strongest that works here)")
    p.add_argument("--unsafe-sandbox", action="store_true",
                   help="grade even where no sandbox protects the grades (student code then runs as your user, "
                        "with your network and files); without it the grader refuses and says how to fix that")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


#: the options mapped onto fields of :class:`~course_grader.sandbox.Limits`
_LIMIT_OPTIONS = {"chapter_timeout_s": "--timeout", "submission_timeout_s": "--submission-timeout",
                  "memory_mb": "--memory"}


def _option_names(message: str) -> str:
    """``message`` with the internal ``Limits.field`` names replaced by the options that set them."""
    for name, option in _LIMIT_OPTIONS.items():
        message = message.replace(f"Limits.{name}", option)
    return message


def _limits_problem(args: argparse.Namespace) -> str:
    """What is wrong with the numeric options (``--jobs``, ``--timeout``, ``--submission-timeout``,
    ``--memory``), as one line naming the option; ``""`` when nothing is."""
    if args.jobs < 1:
        return f"--jobs must be >= 1 (submissions graded at once); got {args.jobs}"
    for option, value in (("--timeout", args.timeout), ("--submission-timeout", args.submission_timeout)):
        if value is not None and not (0 < value < float("inf")):
            return f"{option} must be a finite number of seconds > 0; got {value:g}"
    if args.memory < 1024:
        return (f"--memory must be >= 1024 (MiB of address space per child: import torch needs the room); "
                f"got {args.memory}")
    return ""


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _out_problem(given: Path, out_dir: Path, submissions: list[Path]) -> str:
    """What is wrong with ``--out`` (``given``, resolved ``out_dir``); ``""`` when nothing is.

    It must be a folder (or not exist yet), and neither inside a SUBMISSIONS path (its reports would be read as
    a student's submission on the next run) nor hold one (the reports of a student named like the submissions
    folder would be written into it).
    """
    if out_dir.exists() and not out_dir.is_dir():
        return (f"--out {str(given)!r} exists and is not a folder: name a new folder (or one of earlier "
                f"reports) for the reports")
    for sub in submissions:
        folder = sub.resolve()
        if _inside(out_dir, folder):
            where = "is" if out_dir == folder else "lies inside"
            return (f"--out {str(given)!r} {where} the SUBMISSIONS path {str(sub)!r}: the reports would be graded "
                    f"as a submission on the next run; put --out outside SUBMISSIONS")
        if _inside(folder, out_dir):
            return (f"the SUBMISSIONS path {str(sub)!r} lies inside --out {str(given)!r}: the reports would be "
                    f"written among the submissions; put --out outside SUBMISSIONS")
    return ""


#: a path in the reference run's work folder: ``.../reference-<hex>/submission/NN_topic.ipynb``
_REFERENCE_PATH = re.compile(r"[^'\"\s]*/reference-[0-9a-f]+/submission/(?P<name>[\w.-]+\.ipynb)")
#: the advice for students that notebook errors carry (meaningless for a solutions notebook)
_STUDENT_ADVICE = re.compile(
    r"[;.]? *(?:a \.ipynb file must be saved by Jupyter, not edited by hand\. *)?Re-download the exercise notebook "
    r"and copy your code back into it\.|\. Save your notebook under its original name \([^)]*\) in the folder "
    r"being checked\.|\nFix it \(the cell would not run in Jupyter either\), save the notebook and check again\.")
#: the start of one case's problem in a reference error (``ID: ...`` or ``ID/key: ...``, indented by two)
_PROBLEM_START = re.compile(r"^  (?:[0-9A-Za-z][0-9A-Za-z._-]*(?:/[0-9A-Za-z_.-]+)?: |bad or duplicate case id )")


def reference_message(message: str, solutions: Path) -> str:
    """A reference error (:class:`~course_grader.grader.ReferenceRunError`) as the instructor should read it.

    The reference run reads copies of the ``--solutions`` notebooks in a temporary work folder, and its notebook
    errors are worded for students. Here the copies' paths become the real ``--solutions`` paths; and a problem
    of a notebook itself (not valid JSON, not a notebook, a syntax error ...), which every case of its chapter
    reports alike, is said once, naming the ``--solutions`` notebook and what to do instead of the students'
    advice. The other problems are kept as they are.
    """
    message = _REFERENCE_PATH.sub(lambda m: str(solutions / m.group("name")), message)
    head, _, rest = message.partition("\n")
    if not head.startswith("the solutions do not pass their own cases") or not rest:
        return message
    chunks: list[str] = []
    for line in rest.split("\n"):
        if _PROBLEM_START.match(line) or not chunks:
            chunks.append(line[2:] if line.startswith("  ") else line)
        else:
            chunks[-1] += "\n" + line
    notebook_problems: list[str] = []
    others: list[str] = []
    prefix = re.compile(rf"^[^:\s]+: (?:notebook )?('{re.escape(str(solutions))}/[^']+\.ipynb')")
    for chunk in chunks:
        m = prefix.match(chunk)
        if m is None:
            others.append(chunk)
            continue
        text = _STUDENT_ADVICE.sub("", chunk[m.start(1):]).rstrip(" ;.")
        line = (f"--solutions notebook {text}: check the --solutions folder {str(solutions)!r} (it must hold the "
                f"solution notebooks as Jupyter saved them)")
        if line not in notebook_problems:
            notebook_problems.append(line)
    if not notebook_problems:
        return message
    if not others and len(notebook_problems) == 1:
        return notebook_problems[0]
    return "\n  ".join(["the --solutions notebooks do not pass their own cases:", *notebook_problems, *others])


def sandbox_cell(info: SandboxInfo) -> str:
    """The ``sandbox`` column of ``grades.csv`` for the rows this run grades: the mode, and in capitals when it
    was unsafe or weaker than this machine allows (so the weakening shows beside every grade it concerns)."""
    return (info.mode + ("" if info.safe else " (UNSAFE)")
            + (" (WEAKER than this machine allows: see summary.json)" if info.weakened else ""))


def weakened_line(info: SandboxInfo) -> str:
    """One line saying that the sandbox is weaker than this machine should allow, and why."""
    return (f"the sandbox is WEAKER than this machine allows: grading in mode {info.mode!r} because "
            + " | ".join(info.weakened)[:1500]
            + " (fix what failed, see course_grader/SECURITY.md; or name the mode with --sandbox)")


def _print_table(results, out=sys.stdout) -> None:
    rows = [("student", "score", "status", "runtime", "flags")]
    for r in sorted(results, key=lambda r: r.student):
        status = r.status + (" (unchanged)" if r.reused and r.status != "missing submission" else "")
        rows.append((r.student, f"{r.score}/{r.max_score}", status,
                     f"{r.runtime:.1f}s", str(len(r.flags))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)


def write_run_files(out_dir: Path, subs, results, exercises: list[str], summary: dict,
                    earlier_sources: dict[str, str] | None = None) -> None:
    """Write ``grades.csv`` and ``summary.json`` (atomically), both mapping each id to its source.

    ``grades.csv`` gets a ``source`` column and ``summary`` a ``"sources"`` key:
    student id -> the folder/file name the id was made from
    (:attr:`~course_grader.intake.Submission.source`); ``earlier_sources`` gives it for the rows of
    students graded before and missing now.
    """
    from .report import atomic_write, grades_csv

    sources = {**(earlier_sources or {}), **{sub.student: sub.source for sub in subs}}
    sources = dict(sorted(sources.items()))
    atomic_write(out_dir / "grades.csv", grades_csv(results, exercises, sources))
    atomic_write(out_dir / "summary.json", json.dumps({**summary, "sources": sources}, indent=1))


def _keep_earlier_manifest(out_dir: Path, reusing: Path | None) -> None:
    """Before a new reference replaces ``DIR/_reference/`` (the reference run removes it), keep a copy of the
    earlier manifest as ``DIR/_history/manifest-<sha256>.json``: the chapters this run does not grade keep the
    grades made with it, and their records name its SHA-256 (``chapter_manifest`` in ``grade.json``)."""
    import hashlib

    from .report import atomic_write

    current = out_dir / "_reference" / "manifest.json"
    if reusing is not None or current.is_symlink() or not current.is_file():
        return
    try:
        data = current.read_bytes()
    except OSError:
        return
    atomic_write(out_dir / "_history" / f"manifest-{hashlib.sha256(data).hexdigest()}.json", data)



def match_earlier(earlier: "EarlierReports", subs: list) -> str:
    """Key the earlier records by what each was made from (its ``source``), not by the student id.

    Ids are made from the names in the submissions folder and can change between runs (a second folder
    ``Carol`` next to ``carol`` gives both a ``~hash`` id): a record whose source is a submission of this run
    moves to that submission's id, so grades follow the submission and nobody is listed as missing by mistake.
    Returns a description of the ids whose earlier record was made from another submission (empty when none):
    merging those would hand one student's grades to another.
    """
    sources = earlier.summary.get("sources") if isinstance(earlier.summary.get("sources"), dict) else {}
    by_source = {str(src): sid for sid, src in sources.items() if sid in earlier.results}
    moved: dict[str, object] = {}
    for sub in subs:
        old = by_source.get(sub.source)
        if old is not None and old != sub.student:
            moved[sub.student] = earlier.results[old]
            moved[sub.student].student = sub.student
            print(f"course-grade: the earlier record of {old} ({sub.source}) is now kept under {sub.student}",
                  file=sys.stderr)
    for sid in {by_source[sub.source] for sub in subs if sub.student in moved}:
        earlier.results.pop(sid, None)
    earlier.results.update(moved)
    kept = dict(sources)
    for sub in subs:
        if sub.student in moved:
            kept[sub.student] = sub.source
    clashes = [f"{sub.student} was graded before from {kept[sub.student]!r}, now it is {sub.source!r}"
               for sub in subs if sub.student in earlier.results and sub.student in kept
               and str(kept[sub.student]) != sub.source]
    return "; ".join(clashes[:5])

#: the file in ``--out`` a run holds an exclusive ``flock`` on from before it reads the folder until it ends
LOCK_FILE = ".lock"


def take_out_lock(out_dir: Path) -> int | None:
    """Open ``out_dir/.lock`` and take an exclusive, non-blocking ``flock`` on it: the descriptor (close it to
    release the lock; the kernel releases it too when the process ends), or ``None`` when another run holds
    it. Only the parent locks (it is not sandboxed; the descriptor is not inherited by the children)."""
    import fcntl

    fd = os.open(out_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        raise
    return fd


def main(argv: list[str] | None = None) -> int:
    """Run the grading command; returns the exit status (see the module docstring).

    Note: makes the current process a child subreaper and kills any child
    process it did not start (see :class:`~course_grader.sandbox.Supervisor`);
    run it as a process of its own. Holds the lock of ``--out`` (:func:`take_out_lock`) while it reads and
    writes the folder: a second run into the same folder stops with status 2.
    """
    held: list[int] = []
    try:
        return _main(argv, held)
    finally:
        for fd in held:
            os.close(fd)


def _main(argv: list[str] | None, held: list[int]) -> int:
    """:func:`main`; the lock's descriptor goes into ``held``."""
    args = build_parser().parse_args(argv)
    if not sys.platform.startswith("linux"):
        print(f"course-grade: error: {LINUX_ONLY}", file=sys.stderr)
        return 2
    from .grader import (GradingConfig, ReferenceRunError, build_reference, grade_submission, grader_fingerprint,
                         invalid_result, new_work_base, previous_result, versions)
    from .intake import discover, submission_hash
    from .report import MAX_HISTORY, exercise_order, load_earlier, merge_results, missing_row, write_student_files
    from .grader import reachable_by_nobody
    from .sandbox import Limits, Supervisor, probe_sandbox, remove_tree

    def fail(msg: str) -> int:
        print(f"course-grade: error: {msg}", file=sys.stderr)
        return 2

    problem = _limits_problem(args)
    if problem:
        return fail(problem)
    try:
        chapters = _chapters(args.chapters)
        sub_timeout = args.submission_timeout if args.submission_timeout is not None else min(10 * args.timeout, 900)
        limits = Limits(chapter_timeout_s=args.timeout, submission_timeout_s=sub_timeout, memory_mb=args.memory)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        return fail(_option_names(str(exc)))
    from course_exercises.casefile import CASES_FILE
    from course_exercises.check import clone_root
    from .grader import cases_notebooks

    root = clone_root()
    cases = (args.cases or CASES_FILE).resolve()
    for path, what in [(cases, "--cases"), *((p, "--extra-tests") for p in args.extra_tests)]:
        if not path.is_file():
            return fail(f"{what} {str(path)!r} is not a file")
    if args.solutions is None and root is None:
        return fail("this is not a clone of the course repository, so there is no default for --solutions: pass "
                    "--solutions DIR, the folder of the solution notebooks (NN_topic.ipynb)")
    solutions = (args.solutions or root / "solutions").resolve()
    if not solutions.is_dir():
        return fail(f"--solutions {str(solutions)!r} is not a folder")
    try:
        known = cases_notebooks([cases, *(p.resolve() for p in args.extra_tests)])
    except (ReferenceRunError, OSError, SyntaxError, UnicodeDecodeError) as exc:
        return fail(f"cannot read the chapters of the cases: {exc}")
    unknown = [c for c in chapters if c not in known]
    if unknown:
        return fail(f"--chapters {', '.join(unknown)}: no such chapter (known: {', '.join(sorted(known))})")
    missing = [known[c] for c in (chapters or sorted(known)) if not (solutions / known[c]).is_file()]
    if missing:
        return fail(f"--solutions {str(solutions)!r} lacks the solution notebooks of the chapters graded: "
                    f"{', '.join(missing)} (point --solutions at the folder that holds them, or grade fewer "
                    f"chapters with --chapters)")
    out_dir = args.out.resolve()
    try:
        subs = discover(args.submissions, single=args.single, student=args.student)
    except (FileNotFoundError, ValueError) as exc:
        return fail(str(exc))
    problem = _out_problem(args.out, out_dir, args.submissions)
    if problem:
        return fail(problem)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file on the way, no permission ...
        return fail(f"--out {str(args.out)!r}: cannot create the report folder ({exc.strerror or exc}): name a "
                    f"folder you can write to")
    os.chmod(out_dir, 0o700)  # grades and feedback are private; the children never see this folder anyway
    try:
        lock = take_out_lock(out_dir)
    except OSError as exc:
        return fail(f"--out {str(args.out)!r}: cannot lock the report folder ({exc.strerror or exc}): name a "
                    f"folder you can write to")
    if lock is None:
        return fail(f"another grading run is writing to --out {str(args.out)!r} ({out_dir}): wait for it to "
                    f"end, or use another --out")
    held.append(lock)
    earlier = load_earlier(out_dir)  # before anything is written: the chapters this run does not grade are kept
    if earlier.problems and not args.force:
        return fail(f"--out {str(args.out)!r} holds reports the grader cannot read, so it cannot keep their "
                    f"grades: {'; '.join(earlier.problems[:5])}"
                    f"{f' (and {len(earlier.problems) - 5} more)' if len(earlier.problems) > 5 else ''}. "
                    f"Name another folder, or pass --force to replace them")
    for problem in earlier.problems:
        print(f"course-grade: --force: replacing unreadable {problem}", file=sys.stderr)
    clash = match_earlier(earlier, subs)
    if clash and not args.force:
        return fail(f"--out {str(args.out)!r}: {clash}. Grade into another folder, or pass --force to replace "
                    f"those records")
    config = GradingConfig(out_dir=out_dir, course_root=root, solutions_dir=solutions,
                           cases_files=[cases, *(p.resolve() for p in args.extra_tests)], chapters=chapters,
                           limits=limits, jobs=args.jobs, force=args.force, reference_manifest=args.reference,
                           hide=[p.resolve() for p in args.submissions], sandbox=args.sandbox)
    started = time.monotonic()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    supervisor = Supervisor()
    work_base = new_work_base()
    log = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    try:
        try:
            info = probe_sandbox(work_base, supervisor, args.sandbox, allow_unsafe=args.unsafe_sandbox,
                                 single=args.single)
        except (RuntimeError, ValueError) as exc:  # UnsafeSandboxError included
            return fail(str(exc))
        if info.mode == "nobody":
            reachable = reachable_by_nobody(config, single=args.single)
            info.permissions_checked = not reachable
            if reachable:
                info.notes.append("UNSAFE: nobody can read " + ", ".join(reachable))
            if reachable and not args.unsafe_sandbox:
                return fail("without namespaces the student's process runs as nobody and could read: "
                            + ", ".join(reachable) + ". Fix: chmod -R go-rwx " + " ".join(reachable)
                            + " (or pass --unsafe-sandbox)")
        log(f"sandbox: {info.mode}" + ("" if info.safe else " (UNSAFE: grades are not protected)"))
        for what, sentence in info.describe()["statement"].items():
            log(f"  {what}: {sentence}")
        for note in info.notes:
            log(f"sandbox note: {note}")
        if info.weakened:
            log(f"course-grade: WARNING: {weakened_line(info)}")
        _keep_earlier_manifest(out_dir, args.reference)
        try:
            ref = build_reference(config, supervisor, info, work_base, log=log)
        except ReferenceRunError as exc:
            return fail(reference_message(str(exc), solutions))
        results = []
        unattributed_strays = 0
        lock = threading.Lock()
        todo = []
        for sub in subs:
            try:
                sub.sha256 = submission_hash(sub, config.intake)
            except Exception:  # noqa: BLE001 - an odd submission must not stop the class's grading
                sub.sha256 = ""
            prev = None if args.force else previous_result(out_dir, sub, ref)
            if prev is not None:
                results.append(prev)
            else:
                todo.append(sub)

        def one(sub):
            try:
                r = grade_submission(sub, ref, config, supervisor, info, work_base)
            except Exception as exc:  # noqa: BLE001 - every submission gets a row
                r = invalid_result(sub, ref, f"the grader failed on it ({type(exc).__name__}: {exc})")
                r.status = "crashed"
                r.notes = [f"The grader could not grade this submission ({type(exc).__name__}); "
                           f"tell the instructor."]
            r.sandbox = sandbox_cell(info)
            sub.notebooks.clear()  # the bytes are in the work folder no more: do not keep a class's notebooks
            r = merge_results(earlier.results.get(r.student), r, ref.chapters)
            write_student_files(out_dir, r)
            return r

        bar = None
        if not args.no_progress and todo:
            from tqdm import tqdm

            bar = tqdm(total=len(todo), desc="grading", unit="submission", file=sys.stderr)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(one, sub) for sub in todo]
            for fut in as_completed(futures):
                r = fut.result()
                with lock:
                    results.append(r)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix_str(f"{r.student}: {r.score}/{r.max_score} {r.status}", refresh=False)
        if bar is not None:
            bar.close()
        supervisor.sweep()
        unattributed_strays = supervisor.unattributed  # strays whose child is unknown (only without a PID namespace)
        # Rewrite every report now that no child runs any more.
        for r in results:
            write_student_files(out_dir, r)
        present = {sub.student for sub in subs}
        missing = [missing_row(r) for sid, r in sorted(earlier.results.items()) if sid not in present]
        for r in missing:
            log(f"{r.student}: graded before ({r.graded_at}), not among the submissions now: listed as "
                f"'missing submission'")
        exercises = exercise_order([*ref.exercises(), *(e for r in [*results, *missing] for e in r.exercises_max)])
        statuses: dict[str, int] = {}
        for r in [*results, *missing]:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        run_entry = {"started": started_at, "chapters": ref.chapters, "manifest_sha256": ref.sha256,
                     "graded_now": sorted(r.student for r in results if not r.reused),
                     "unchanged": sorted(r.student for r in results if r.reused),
                     "missing": [r.student for r in missing]}
        history = earlier.summary.get("history") if isinstance(earlier.summary.get("history"), list) else []
        earlier_sources = earlier.summary.get("sources") if isinstance(earlier.summary.get("sources"), dict) else {}
        summary = {
            "grader": {"name": "course_grader", "sha256": grader_fingerprint(),
                       "argv": [str(a) for a in (argv if argv is not None else sys.argv[1:])]},
            "versions": versions(),
            "child_versions": ref.manifest.get("child_versions", {}),
            "platform": platform.platform(),
            "manifest_sha256": ref.sha256,
            "manifest": str(ref.path),
            "max_score": ref.manifest["max_score"],
            "chapters": ref.chapters,
            "exercises": exercises,
            "sandbox": info.describe(),
            "limits": asdict(limits),
            "intake_limits": asdict(config.intake),
            "jobs": args.jobs,
            "submissions": len(results),
            "missing": [r.student for r in missing],
            "history": [*history, run_entry][-MAX_HISTORY:],
            "graded_now": sum(1 for r in results if not r.reused),
            "unchanged_skipped": sum(1 for r in results if r.reused),
            "statuses": statuses,
            "unattributed_strays_killed": unattributed_strays,
            "started": started_at,
            "seconds": round(time.monotonic() - started, 2),
        }
        write_run_files(out_dir, subs, [*results, *missing], exercises, summary,
                        {r.student: str(earlier_sources.get(r.student, "")) for r in missing})
        _print_table([*results, *missing])
        gone = f", {len(missing)} graded before and missing now" if missing else ""
        print(f"\n{len(results)} submissions ({summary['graded_now']} graded now, "
              f"{summary['unchanged_skipped']} unchanged{gone}) in {summary['seconds']:.1f}s; "
              f"sandbox {info.mode}{'' if info.safe else ' (UNSAFE)'}; reports in {out_dir}")
        if info.weakened:  # said again last, where an instructor looks
            log(f"course-grade: WARNING: {weakened_line(info)}")
        return 0
    finally:
        supervisor.sweep()
        remove_tree(work_base)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
