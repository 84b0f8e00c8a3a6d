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

__all__ = ["repository_root", "load_cases", "resolve_chapters", "default_notebooks", "run_checks", "format_report", "main"]

CASES_MODULE = "course_exercise_cases"
DEFAULT_TIMEOUT_S = 600.0


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


@dataclass
class CaseResult:
    """The outcome of one case: ``kind`` is passed, not_implemented, failed or error."""

    id: str
    chapter: str
    exercise: str
    points: int
    kind: str = "error"
    message: str = ""


@dataclass
class CheckRun:
    """All results of one run, plus what went wrong with the run itself (if anything)."""

    notebooks: Path
    chapters: list[str]
    results: list[CaseResult] = field(default_factory=list)
    problem: str = ""


def run_checks(chapters: list[str], notebooks: Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> CheckRun:
    """Run the exercise tests of ``chapters`` (all when empty) on ``notebooks``.

    pytest runs in a child process in its own process group, killed as a whole
    after ``timeout_s`` seconds; its per-case results come back as JSON.
    """
    root = repository_root()
    cases = load_cases()
    wanted = cases.cases_for(chapters)
    run = CheckRun(notebooks=notebooks, chapters=chapters)
    by_id = {c.id: CaseResult(c.id, c.chapter, c.exercise, c.points) for c in wanted}
    with tempfile.TemporaryDirectory(prefix="course-check-") as tmp:
        report = Path(tmp) / "results.json"
        cmd = [
            sys.executable, "-m", "pytest", str(root / "tests" / "exercises" / "test_exercises.py"),
            "--notebooks", str(notebooks), "--exercise-results", str(report),
            "-p", "no:cacheprovider", "-q", "--tb=no", "--no-header", "-o", "addopts=", "--rootdir", str(root),
        ]
        for chapter in chapters:
            cmd += ["--chapter", chapter]
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg")
        popen_kwargs = {"start_new_session": True} if os.name == "posix" else {}
        with open(Path(tmp) / "pytest.log", "w+", encoding="utf-8", errors="replace") as log:
            proc = subprocess.Popen(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env, **popen_kwargs)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                if os.name == "posix":
                    os.killpg(proc.pid, signal.SIGKILL)
                else:  # pragma: no cover
                    proc.kill()
                proc.wait()
                run.problem = (
                    f"the checks did not finish within {timeout_s:g} s and were stopped: is there an endless loop "
                    f"(e.g. a decoding loop that ignores max_len)?"
                )
            log.seek(0)
            log_tail = log.read()[-3000:]
        if report.is_file():
            data = json.loads(report.read_text(encoding="utf-8"))
            for item in data.get("cases", []):
                result = by_id.get(item.get("id"))
                if result is not None:
                    result.kind = item.get("kind", "error")
                    result.message = item.get("message", "")
        elif not run.problem:
            run.problem = f"pytest ended (exit code {proc.returncode}) without writing results. Its output:\n{log_tail}"
    for result in by_id.values():
        if result.kind == "error" and not result.message:
            result.message = "no result (the run stopped before this case)"
    run.results = list(by_id.values())
    return run


def _indent(text: str, prefix: str = "      ") -> str:
    return textwrap.indent(text.rstrip(), prefix)


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
        if not failed:
            status = f"all {len(rs)} cases pass"
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
                message = r.message
                if message.startswith(f"Exercise {ex} "):  # the heading repeats what the table says
                    message = message.split("\n", 1)[1] if "\n" in message else message
                details.append(_indent(textwrap.dedent(message), "    "))
            rest = [r.id for r in failed if r.kind != "not_implemented"][max_messages:]
            if rest:
                details.append(f"  ... and {len(rest)} more failing case(s): {', '.join(rest)}")
    lines.append("  " + "-" * (len(header) + 14))
    lines.append(f"  {'Total':<9} {'':<30} {earned_total:>3}/{total:<3}")
    if run.problem:
        lines += ["", "Problem: " + run.problem]
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
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"stop the checks after this long (default {DEFAULT_TIMEOUT_S:g})")
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
    run = run_checks(chapters, notebooks, timeout_s=args.timeout)
    print(format_report(run, cases.EXERCISES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
