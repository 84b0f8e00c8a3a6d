"""The student's check command: run the exercise tests and print a score table.

Usage (from anywhere inside the course repository)::

    python -m course_lib.check              # every chapter
    python -m course_lib.check 04           # chapter 4 only (also "4" or "04_attention")
    python -m course_lib.check 04 05 --notebooks my_answers/

The notebooks are read from ``--notebooks DIR``; by default from the current
directory when it holds exercise notebooks (so ``!python -m course_lib.check 04``
inside a notebook checks the notebooks next to it), else from the repository's
``exercises/``. The checker reads the *saved* notebook files: save first.

It runs ``pytest tests/exercises`` in a separate process (so that a crash or an
endless loop in the code being checked cannot take the checker down), collects
one result per case, and prints per exercise the points earned out of the points
possible, the total, and what to fix. The exit code is 0 whatever the score; it
is 2 only for a usage error (an unknown chapter, a missing folder).

Time limits: each case may run the student's code for ``--case-timeout``
seconds (default 20; the case then fails as "did not finish", and the other
cases of that exercise are skipped); the whole run is killed after
``--timeout`` seconds (default 120 per chapter checked). Every case's result
is written as soon as the case ends, so a killed run keeps the points of the
cases that finished.

It also reads (never runs) the graded code with the grader's structural checks
(:mod:`course_lib.grading.static_checks`) and prints a warning for each
exercise that hands its work to the library it asks you to re-implement, and it
warns when a copy of a notebook (``04_attention-Copy1.ipynb``) lies beside the
file it checks.

Source: the exercise/grader contract, ``tests/exercises/CONTRACT.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from .grading.compare import unearned_passes
from .grading.extract import code_cell_numbers, rename_cells

__all__ = ["repository_root", "load_cases", "resolve_chapters", "default_notebooks", "run_checks", "format_report",
           "drawn_case_ids",
           "code_cell_numbers", "rename_cells", "static_warnings", "copy_warnings", "main"]

CASES_MODULE = "course_exercise_cases"
#: seconds the whole run may take, per chapter checked (the run is killed after that)
DEFAULT_TIMEOUT_PER_CHAPTER_S = 120.0
#: seconds the student's code may run in one case
DEFAULT_CASE_TIMEOUT_S = 20.0


def repository_root() -> Path:
    """The course repository that holds this package (``course_lib/..``).

    Raises:
        FileNotFoundError: ``tests/exercises/cases.py`` is not there (e.g. the
            package was installed without the repository).
    """
    root = Path(__file__).resolve().parents[1]
    if not (root / "tests" / "exercises" / "cases.py").is_file():
        raise FileNotFoundError(
            f"the exercise tests were not found under {root / 'tests' / 'exercises'}; run the checker from a "
            f"clone of the course repository with `pip install -e .`"
        )
    return root


def load_cases(path: str | os.PathLike[str] | None = None) -> ModuleType:
    """Import ``tests/exercises/cases.py`` as the module ``course_exercise_cases``.

    The module is imported once per process and kept in ``sys.modules`` (the
    dataclass ``Case`` needs its module there); later calls return it.

    Args:
        path: the file to load; default: the repository's ``tests/exercises/cases.py``.

    Returns:
        the module, with ``CASES``, ``NOTEBOOKS``, ``EXERCISES``, ``compare`` ...
    """
    module = sys.modules.get(CASES_MODULE)
    if module is not None:
        return module
    path = Path(path) if path is not None else repository_root() / "tests" / "exercises" / "cases.py"
    spec = importlib.util.spec_from_file_location(CASES_MODULE, path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot import the exercise cases from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[CASES_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(CASES_MODULE, None)
        raise
    return module


def resolve_chapters(args: list[str], notebooks: dict[str, str]) -> list[str]:
    """Map ``["4", "05", "06_feed_forward.ipynb"]`` to two-digit chapter keys.

    Raises:
        ValueError: an argument that names no chapter (lists the valid ones).
    """
    out: list[str] = []
    for arg in args:
        m = re.match(r"^(?:ch(?:apter)?)?0*(\d+)", Path(arg).name, re.I)
        key = f"{int(m.group(1)):02d}" if m else None
        if key not in notebooks:
            valid = ", ".join(notebooks)
            raise ValueError(f"unknown chapter {arg!r}; the exercise chapters are {valid}")
        if key not in out:
            out.append(key)
    return out


def default_notebooks(cwd: Path, root: Path, notebooks: dict[str, str]) -> Path:
    """The current directory if it holds an exercise notebook, else ``root/exercises``."""
    if any((cwd / name).is_file() for name in notebooks.values()):
        return cwd
    return root / "exercises"


def static_warnings(chapters: list[str], notebooks: Path, cases: ModuleType) -> list[str]:
    """One warning line per structural flag of the grader (read only, never run) in the checked notebooks.

    Uses :func:`course_lib.grading.extract.extract_source` (parses the notebook)
    and :func:`course_lib.grading.static_checks.check_source`; a notebook that
    cannot be read gives no warning here (the tests report it).
    """
    from course_lib.grading.extract import SubmissionError, extract_source
    from course_lib.grading.static_checks import check_source

    lines: list[str] = []
    for chapter in chapters or list(cases.NOTEBOOKS):
        path = notebooks / cases.NOTEBOOKS[chapter]
        exercises = {ex: fn for ex, fn in cases.EXERCISES.items() if f"{int(ex.split('.')[0]):02d}" == chapter}
        try:
            flags = check_source(extract_source(path), chapter, exercises)
        except (SubmissionError, OSError):
            continue
        for flag in flags:
            detail = rename_cells(flag.detail, path)
            if flag.code == "delegates":
                lines.append(f"{flag.exercise} ({exercises.get(flag.exercise, '?')}): {detail}. The exercise asks you to "
                             f"write this yourself: your instructor's grader flags this for review.")
            elif flag.code == "dynamic":
                lines.append(f"{flag.exercise} ({exercises.get(flag.exercise, '?')}): {detail}, which hides what it "
                             f"calls: your instructor's grader flags this for review.")
            else:
                lines.append(f"{cases.NOTEBOOKS[chapter]}: {flag.code}: {detail}: your instructor's grader flags this "
                             f"for review.")
    return lines


def copy_warnings(args: list[str], chapters: list[str], notebooks: Path, cases: ModuleType) -> list[str]:
    """Warnings when the file a student names, or a copy lying beside the checked notebook, is not what is read.

    The checker always reads ``NN_topic.ipynb`` from the notebook folder; a
    ``04_attention-Copy1.ipynb`` (Jupyter's "Duplicate") is never checked.
    """
    lines: list[str] = []
    names = [cases.NOTEBOOKS[c] for c in (chapters or list(cases.NOTEBOOKS))]
    for arg in args:
        name = Path(arg).name
        if name.endswith(".ipynb") and name not in cases.NOTEBOOKS.values():
            chapter = resolve_chapters([arg], cases.NOTEBOOKS)[0]
            lines.append(f"you named {name}, but the checker always reads {cases.NOTEBOOKS[chapter]} in the notebook "
                         f"folder: that is the file checked. Rename your notebook to {cases.NOTEBOOKS[chapter]} "
                         f"(keep a backup) to check it.")
    if notebooks.is_dir():
        for name in names:
            stem = name[: -len(".ipynb")]
            for other in sorted(notebooks.glob(f"{glob_escape(stem)}*.ipynb")):
                if other.name != name:
                    lines.append(f"{other.name} lies beside {name}; only {name} is checked.")
    return lines


def glob_escape(text: str) -> str:
    """``text`` with glob wildcards escaped."""
    return re.sub(r"([*?\[])", r"[\1]", text)


@dataclass
class CaseResult:
    """The outcome of one case: ``kind`` is passed, not_implemented, failed, error or timeout."""

    id: str
    chapter: str
    exercise: str
    points: int
    kind: str = "error"
    message: str = ""
    done: bool = False


@dataclass
class CheckRun:
    """All results of one run, plus what went wrong with the run itself (if anything)."""

    notebooks: Path
    chapters: list[str]
    results: list[CaseResult] = field(default_factory=list)
    problem: str = ""
    warnings: list[str] = field(default_factory=list)


def drawn_case_ids(cases: ModuleType, wanted: list) -> set[str]:
    """Ids of the cases whose inputs the grader draws per run (their ``expected()`` draws random inputs)."""
    out = set()
    for case in wanted:
        with cases.drawing(cases.Draws(salt="check")) as draws:
            try:
                case.expected()
            except Exception:  # noqa: BLE001 - a broken case is reported by the tests, not here
                continue
        if draws.recorded:
            out.add(case.id)
    return out


def run_checks(chapters: list[str], notebooks: Path, timeout_s: float | None = None,
               case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S) -> CheckRun:
    """Run the exercise tests of ``chapters`` (all when empty) on ``notebooks``.

    pytest runs in a child process in its own process group. Each case may run
    the student's code for ``case_timeout_s`` seconds (0 = no limit); the child
    is killed as a whole after ``timeout_s`` seconds (default: 120 s per
    chapter checked). The child appends each case's result to a JSON-lines file
    as soon as the case ends, so the cases that finished before a kill keep
    their result; the case that was running is reported as not finished.
    """
    root = repository_root()
    cases = load_cases()
    wanted = cases.cases_for(chapters)
    if timeout_s is None:
        timeout_s = DEFAULT_TIMEOUT_PER_CHAPTER_S * (len(chapters) or len(cases.NOTEBOOKS))
    run = CheckRun(notebooks=notebooks, chapters=chapters)
    by_id = {c.id: CaseResult(c.id, c.chapter, c.exercise, c.points) for c in wanted}
    started: list[str] = []
    with tempfile.TemporaryDirectory(prefix="course-check-") as tmp:
        report = Path(tmp) / "results.jsonl"
        cmd = [
            sys.executable, "-m", "pytest", str(root / "tests" / "exercises" / "test_exercises.py"),
            "--notebooks", str(notebooks), "--exercise-results", str(report), "--case-timeout", f"{case_timeout_s:g}",
            "-p", "no:cacheprovider", "-q", "--tb=no", "--no-header", "-o", "addopts=", "--rootdir", str(root),
        ]
        for chapter in chapters:
            cmd += ["--chapter", chapter]
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg")
        popen_kwargs = {"start_new_session": True} if os.name == "posix" else {}
        killed = False
        with open(Path(tmp) / "pytest.log", "w+", encoding="utf-8", errors="replace") as log:
            proc = subprocess.Popen(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env, **popen_kwargs)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                killed = True
                if os.name == "posix":
                    os.killpg(proc.pid, signal.SIGKILL)
                else:  # pragma: no cover
                    proc.kill()
                proc.wait()
            log.seek(0)
            log_tail = log.read()[-3000:]
        if report.is_file():
            for line in report.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    item = json.loads(line)
                except ValueError:  # a line cut short by the kill
                    continue
                result = by_id.get(item.get("id")) if isinstance(item, dict) else None
                if result is None:
                    continue
                if item.get("kind") == "started":
                    started.append(result.id)
                else:
                    result.kind = item.get("kind", "error")
                    result.message = item.get("message", "")
                    result.done = True
    unfinished = [r for r in by_id.values() if not r.done]
    if killed:
        running = [i for i in started if not by_id[i].done]
        for result in unfinished:
            if result.id in running:
                result.kind = "timeout"
                result.message = (f"did not finish within the time limit (endless loop?): the checks were stopped "
                                  f"after {timeout_s:g} s while this case was running.")
            else:
                result.kind = "error"
                result.message = "not run: the checks were stopped before this case (see the case that did not finish)."
        run.problem = (
            f"the checks did not finish within {timeout_s:g} s and were stopped: is there an endless loop "
            f"(e.g. a decoding loop that ignores max_len)? The cases that finished keep their points."
        )
    elif unfinished:
        run.problem = f"pytest ended (exit code {proc.returncode}) without results for some cases. Its output:\n{log_tail}"
        for result in unfinished:
            result.message = "no result (the run stopped before this case)"
    drawn = drawn_case_ids(cases, wanted)
    unearned = unearned_passes((r.id, r.exercise, r.kind == "passed", r.id in drawn) for r in by_id.values())
    for case_id, why in unearned.items():
        by_id[case_id].kind = "failed"
        by_id[case_id].message = f"Exercise {by_id[case_id].exercise}, case {case_id}: {why}."
    run.results = list(by_id.values())
    return run


def _indent(text: str, prefix: str = "      ") -> str:
    return textwrap.indent(text.rstrip(), prefix)


def _drop_heading(message: str, exercise: str) -> str:
    """Drop the ``Exercise N.M (function), case ID:`` prefix (the table says it), keeping the rest of that line."""
    m = re.match(rf"Exercise {re.escape(exercise)} \([^)]*\), case [\w.-]+:[ \t]*", message)
    if not m:
        return message
    rest = message[m.end():]
    if rest.startswith("\n"):  # the heading was the whole first line
        rest = rest[1:]
    return rest


def format_report(run: CheckRun, exercises: dict[str, str], max_messages: int = 2) -> str:
    """The score table and the failure messages, as text (ASCII only)."""
    lines: list[str] = []
    which = f"chapter{'s' if len(run.chapters) > 1 else ''} {', '.join(run.chapters)}" if run.chapters else "all chapters"
    try:
        shown_path = run.notebooks.resolve().relative_to(repository_root())
    except ValueError:
        shown_path = run.notebooks
    lines.append(f"Checking the notebooks in {shown_path} ({which})")
    lines.append("")
    header = f"  {'Exercise':<9} {'Function':<30} {'Points':>7}  Status"
    lines.append(header)
    lines.append("  " + "-" * (len(header) + 14))
    order: list[str] = []
    for r in run.results:
        if r.exercise not in order:
            order.append(r.exercise)
    total = earned_total = 0
    details: list[str] = []
    for ex in order:
        rs = [r for r in run.results if r.exercise == ex]
        possible = sum(r.points for r in rs)
        earned = sum(r.points for r in rs if r.kind == "passed")
        total += possible
        earned_total += earned
        failed = [r for r in rs if r.kind != "passed"]
        timed_out = [r for r in failed if r.kind == "timeout"]
        if not failed:
            status = f"all {len(rs)} cases pass"
        elif timed_out:
            status = f"{len(rs) - len(failed)} of {len(rs)} cases pass; did not finish (endless loop?)"
        elif all(r.kind == "not_implemented" for r in failed) and len(failed) == len(rs):
            status = "not implemented yet"
        else:
            status = f"{len(rs) - len(failed)} of {len(rs)} cases pass"
        lines.append(f"  {ex:<9} {exercises.get(ex, '?'):<30} {earned:>3}/{possible:<3}  {status}")
        shown = [r for r in failed if r.kind != "not_implemented"][:max_messages]
        if shown:
            details.append(f"Exercise {ex} ({exercises.get(ex, '?')}):")
            for r in shown:
                details.append(f"  x {r.id}")
                details.append(_indent(textwrap.dedent(_drop_heading(r.message, ex)), "    "))
            rest = [r.id for r in failed if r.kind != "not_implemented"][max_messages:]
            if rest:
                details.append(f"  ... and {len(rest)} more failing case(s): {', '.join(rest)}")
    lines.append("  " + "-" * (len(header) + 14))
    lines.append(f"  {'Total':<9} {'':<30} {earned_total:>3}/{total:<3}")
    if run.problem:
        lines += ["", "Problem: " + run.problem]
    if run.warnings:
        lines += ["", "Warnings:"] + ["  ! " + textwrap.fill(w, 100, subsequent_indent="    ") for w in run.warnings]
    if details:
        lines += ["", "What to fix:"] + details
    elif earned_total == total and total:
        lines += ["", "Everything passes. Well done!"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m course_lib.check``; returns the exit code (0, or 2 for a usage error)."""
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.check",
        description="Check your exercise notebooks (save them first!) and print your score per exercise.",
    )
    parser.add_argument("chapters", nargs="*", help="chapters to check, e.g. 04 or 4 (default: all)")
    parser.add_argument("--notebooks", metavar="DIR", help="folder with the NN_topic.ipynb notebooks "
                        "(default: the current folder if it has them, else the repository's exercises/)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help=f"stop all the checks after this long (default {DEFAULT_TIMEOUT_PER_CHAPTER_S:g} s per chapter)")
    parser.add_argument("--case-timeout", type=float, default=DEFAULT_CASE_TIMEOUT_S, metavar="SECONDS",
                        help=f"time your code may take in one case (default {DEFAULT_CASE_TIMEOUT_S:g}; 0 = no limit)")
    args = parser.parse_args(argv)
    try:
        root = repository_root()
        cases = load_cases()
        chapters = resolve_chapters(args.chapters, cases.NOTEBOOKS)
    except (ValueError, FileNotFoundError) as exc:
        parser.print_usage(sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.notebooks:
        notebooks = Path(args.notebooks).resolve()
        if not notebooks.is_dir():
            print(f"error: --notebooks {args.notebooks!r} is not a folder", file=sys.stderr)
            return 2
    else:
        notebooks = default_notebooks(Path.cwd(), root, cases.NOTEBOOKS)
    warnings = copy_warnings(args.chapters, chapters, notebooks, cases)
    if warnings:  # before the (slow) run, so that a student checking the wrong file sees it at once
        for line in warnings:
            print("Warning: " + line)
        print()
    run = run_checks(chapters, notebooks, timeout_s=args.timeout, case_timeout_s=args.case_timeout)
    run.warnings = static_warnings(chapters, notebooks, cases)
    print(format_report(run, cases.EXERCISES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
