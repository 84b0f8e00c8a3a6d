"""The student's check command: run the exercise cases and print a score table.

Usage (``course-check`` is the same command, installed with the package)::

    python -m course_exercises.check              # every chapter
    python -m course_exercises.check 04           # chapter 4 only (also "4" or "04_attention")
    python -m course_exercises.check 04 05 --notebooks my_answers/
    course-check my_answers/                # a folder of notebooks, from anywhere
    course-check my_answers/ 04 05

The notebooks are read from the folder named on the command line (an argument
that is a folder and not a chapter number) or ``--notebooks DIR``; by default
from the current folder when it holds a notebook of the chapters checked (so
``!python -m course_exercises.check 04`` inside a notebook checks the notebooks next
to it), else from ``./exercises/`` (so the command works from the root of a
clone) - both relative to where the command runs, never a folder elsewhere.
Otherwise it stops (exit 2) naming the folders it looked in and how to name
another. The checker reads the *saved* notebook files: save first.

The cases ship with the package (``course_exercises/cases/``: ``registry.py`` and a file per chapter), so
the command works from an installed package as from a clone, with the same
points. It runs them in a separate process (:mod:`course_exercises.check_runner`, so
that a crash or an endless loop in the code being checked cannot take the
checker down), collects one result per case, and prints per exercise the points
earned out of the points possible, the total, and what to fix. The exit code is
0 whatever the score; it is 2 only for a usage error (an unknown chapter, a
missing folder, a folder without the notebooks of the chapters checked). A
notebook that is missing while others are there is reported once (its
exercises score 0) and its cases are not run.

Time limits: each case may run the student's code for ``--case-timeout``
seconds (default 20; the case then fails as "did not finish", and the other
cases of that exercise are skipped); the whole run is killed after
``--timeout`` seconds (default 120 per chapter checked). Every case's result
is written as soon as the case ends, so a killed run keeps the points of the
cases that finished.

It also reads (never runs) the graded code with the grader's structural checks
(:mod:`course_exercises.static_checks`) and prints a warning for each
exercise that hands its work to the library it asks you to re-implement, and it
warns when a copy of a notebook (``04_attention-Copy1.ipynb``) lies beside the
file it checks.

Source: the exercise/grader contract, ``tests/exercises/CONTRACT.md``.
"""

from __future__ import annotations

import argparse
import contextlib
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

from .casefile import CASES_FILE, load_parts
from .compare import REJECTION_ALONE, unearned_passes
from .extract import code_cell_numbers, rename_cells
from .quoting import OUTPUT_LABEL, escape_hidden, quoted_block

__all__ = ["clone_root", "prog_name", "kill_process_tree", "repository_root", "load_cases", "resolve_chapters", "default_notebooks", "is_exercise_notebook", "chapter_functions", "split_targets",
           "run_checks", "format_report", "drawn_case_ids",
           "code_cell_numbers", "rename_cells", "static_warnings", "copy_warnings", "main", "usage_error",
           "CaseResult", "CheckRun"]

CASES_MODULE = "course_exercise_cases"
#: said under "What to fix": why the grader's points for a wrong answer may differ from the checker's
DRAWN_INPUTS_NOTE = ("Note: the grader draws new inputs for every case marked as drawn, so a wrong answer may earn "
                     "different points there (and its messages show other numbers); a right answer earns the same "
                     "points in both.")
#: how a warning that the grader raises as a flag ends (see static_warnings)
FLAG_TAIL = "your instructor's grader flags this for review."
#: seconds the whole run may take, per chapter checked (the run is killed after that)
DEFAULT_TIMEOUT_PER_CHAPTER_S = 120.0
#: seconds the student's code may run in one case
DEFAULT_CASE_TIMEOUT_S = 20.0


def _is_clone(folder: Path) -> bool:
    return ((folder / "course_lib" / "__init__.py").is_file() and (folder / "solutions").is_dir()
            and (folder / "exercises").is_dir())


def clone_root(cwd: str | os.PathLike[str] | None = None) -> Path | None:
    """The course repository the commands run from, or ``None`` outside a clone.

    That is the repository holding this package (``course_lib/..``, an editable
    install), else the current folder or the nearest folder above it that is a
    clone (``course_lib/``, ``exercises/`` and ``solutions/`` side by side).
    """
    here = Path(cwd if cwd is not None else Path.cwd()).resolve()
    for folder in (Path(__file__).resolve().parents[1], here, *here.parents):
        if _is_clone(folder):
            return folder
    return None


def prog_name(script: str, module: str) -> str:
    """The command's name as the user typed it: ``script`` (e.g. ``course-grade``) when ``sys.argv[0]`` is that
    console script, else ``python -m module``."""
    base = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    for suffix in (".exe", "-script.py"):  # the console scripts' names on Windows
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
    return script if base == script else f"python -m {module}"


def repository_root() -> Path:
    """:func:`clone_root`, for the callers that need a clone.

    Raises:
        FileNotFoundError: the command runs outside a clone of the course.
    """
    root = clone_root()
    if root is None:
        raise FileNotFoundError(
            "this is not a clone of the course repository: name the folder of notebooks to check "
            "(course-check DIR or --notebooks DIR)"
        )
    return root


def load_cases(path: str | os.PathLike[str] | None = None) -> ModuleType:
    """Import the cases registry as the module ``course_exercise_cases``.

    The module is imported once per process and kept in ``sys.modules`` (the
    dataclass ``Case`` needs its module there); later calls return it.

    Args:
        path: the file to load, with the files its ``PARTS`` names; default: the package's
            ``course_exercises/cases/registry.py`` and its chapter files
            (:data:`~course_exercises.casefile.CASES_FILE`).

    Returns:
        the module, with ``CASES``, ``NOTEBOOKS``, ``EXERCISES``, ``compare`` ...
    """
    module = sys.modules.get(CASES_MODULE)
    if module is not None:
        return module
    path = Path(path) if path is not None else CASES_FILE
    spec = importlib.util.spec_from_file_location(CASES_MODULE, path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot import the exercise cases from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[CASES_MODULE] = module
    try:
        load_parts(module, path)  # the file, then the chapter files its PARTS names, as one module
    except BaseException:
        sys.modules.pop(CASES_MODULE, None)
        raise
    return module


_CHAPTER_START = re.compile(r"^(?:ch(?:apter)?)?0*(\d+)", re.I)


def resolve_chapters(args: list[str], notebooks: dict[str, str]) -> list[str]:
    """Map ``["4", "05", "06_feed_forward.ipynb"]`` to two-digit chapter keys.

    Raises:
        ValueError: an argument that names no chapter (lists the valid ones).
    """
    out: list[str] = []
    for arg in args:
        m = _CHAPTER_START.match(Path(arg).name)
        key = f"{int(m.group(1)):02d}" if m else None
        if key not in notebooks:
            valid = ", ".join(notebooks)
            raise ValueError(f"unknown chapter {arg!r}; the exercise chapters are {valid}")
        if key not in out:
            out.append(key)
    return out


def default_notebooks(cwd: Path, notebooks: dict[str, str], chapters: list[str] | tuple[str, ...] = (),
                      exercises: dict[str, str] | None = None) -> Path | None:
    """Where to look when no folder is named: ``cwd`` if it holds an exercise notebook of ``chapters`` (every
    chapter when empty), else ``cwd/exercises`` if that does, else ``None`` (never a clone's stubs elsewhere).

    With ``exercises`` (exercise number -> function), a notebook of the same name that is not an exercise
    notebook (the book's chapter, in ``book/``) does not count: see :func:`is_exercise_notebook`.
    """
    wanted = list(chapters) if chapters else list(notebooks)
    for folder in (cwd, cwd / "exercises"):
        if any((folder / notebooks[c]).is_file() and (exercises is None or is_exercise_notebook(
                folder / notebooks[c], chapter_functions(exercises, c))) for c in wanted):
            return folder
    return None


def chapter_functions(exercises: dict[str, str], chapter: str) -> list[str]:
    """The functions of a two-digit chapter's exercises."""
    return [f for ex, f in exercises.items() if f"{int(ex.split('.')[0]):02d}" == chapter]


def is_exercise_notebook(path: Path, functions: list[str]) -> bool:
    """Whether the notebook at ``path`` is an exercise notebook: a code cell runs the check command, or the code
    defines more than half of the chapter's exercise ``functions`` (a chapter of the book, with the same file
    name, does neither). An unreadable file counts (the check reports it)."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
        code = "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
    except (OSError, ValueError, AttributeError, TypeError):
        return True
    defined = sum(f"def {f}(" in code for f in functions)
    runs_check = "course_exercises.check" in code or "course_lib.check" in code  # (the name in older notebooks)
    return runs_check or defined * 2 > len(functions)


_CHAPTER_WORD = re.compile(r"(?:ch(?:apter)?)?0*\d+", re.I)


def split_targets(args: list[str]) -> tuple[list[str], list[str]]:
    """``(chapters, folders)``: an argument that names an existing folder is a folder of notebooks, unless it
    is a bare chapter number (``4``, ``04``, ``ch4``), which is always a chapter."""
    chapters, folders = [], []
    for arg in args:
        if os.path.isdir(arg) and not _CHAPTER_WORD.fullmatch(arg):
            folders.append(arg)
        else:
            chapters.append(arg)
    return chapters, folders


def static_warnings(chapters: list[str], notebooks: Path, cases: ModuleType) -> list[str]:
    """One warning line per structural flag of the grader (read only, never run) in the checked notebooks.

    Uses :func:`course_exercises.extract.extract_source` (parses the notebook)
    and :func:`course_exercises.static_checks.check_source`; a notebook that
    cannot be read gives no warning here (the tests report it).
    """
    from .extract import SubmissionError, extract_source
    from .static_checks import check_source, defined_twice

    lines: list[str] = []
    for chapter in chapters or list(cases.NOTEBOOKS):
        path = notebooks / cases.NOTEBOOKS[chapter]
        exercises = {ex: fn for ex, fn in cases.EXERCISES.items() if f"{int(ex.split('.')[0]):02d}" == chapter}
        try:
            source = extract_source(path)
        except (SubmissionError, OSError):
            continue
        flags = check_source(source, chapter, exercises)
        for exercise, note in defined_twice(source, exercises).items():
            lines.append(f"{exercise} ({exercises[exercise]}): {rename_cells(note, path)}.")
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
    """The outcome of one case: ``kind`` is passed, not_implemented, failed, error, timeout or missing (its
    notebook is not in the folder checked)."""

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
    #: chapter -> the notebook of that chapter that is not in ``notebooks`` (its cases are not run)
    missing: dict[str, str] = field(default_factory=dict)
    #: chapter -> why its notebook cannot be read at all (not JSON, not nbformat 4, ...): said once
    unreadable: dict[str, str] = field(default_factory=dict)
    #: chapter -> one message per code cell that was skipped (a syntax error, a definition that raised)
    skipped_cells: dict[str, list[str]] = field(default_factory=dict)


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


def _process_groups() -> bool:
    """POSIX: the runner starts in a session of its own, so that one kill reaches whatever it started."""
    return hasattr(os, "killpg") and hasattr(signal, "SIGKILL")


def kill_process_tree(proc: subprocess.Popen) -> None:
    """Kill ``proc`` and the processes it started, on Linux, macOS and Windows; waits for ``proc``.

    POSIX: the process group that ``start_new_session`` gave it; Windows: ``taskkill /T``
    (the tree of child processes); elsewhere the process alone.
    """
    if _process_groups():
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    elif os.name == "nt":  # pragma: no cover - Windows
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)], capture_output=True, timeout=30)
    with contextlib.suppress(OSError):
        proc.kill()
    proc.wait()


def _run_runner(chapters: list[str], notebooks: Path, timeout_s: float, case_timeout_s: float,
                by_id: dict[str, CaseResult], run: CheckRun | None = None) -> tuple[bool, int, str, list[str]]:
    """Run ``course_exercises.check_runner`` on ``chapters`` (all when empty), filling ``by_id`` with the results.

    Returns ``(killed, exit code, the end of its output, ids of the cases started)``.
    """
    started: list[str] = []
    with tempfile.TemporaryDirectory(prefix="course-check-") as tmp:
        report = Path(tmp) / "results.jsonl"
        cmd = [
            sys.executable, "-m", "course_exercises.check_runner", "--notebooks", str(Path(notebooks).resolve()),
            "--results", str(report), "--case-timeout", f"{case_timeout_s:g}",
        ]
        for chapter in chapters:
            cmd += ["--chapter", chapter]
        env = dict(os.environ, MPLBACKEND="Agg")  # (byte-code caches are written for the libraries only:
        # the notebooks' code is compiled from a string)
        here = Path(__file__).resolve().parents[1]  # the folder holding this course_lib (a clone, or site-packages)
        if here.name not in ("site-packages", "dist-packages"):  # e.g. run from a clone without an install
            env["PYTHONPATH"] = os.pathsep.join([str(here), *filter(None, [env.get("PYTHONPATH")])])
        popen_kwargs = {"start_new_session": True} if _process_groups() else {}
        killed = False
        with open(Path(tmp) / "run.log", "w+", encoding="utf-8", errors="replace") as log:
            # cwd: an empty folder of ours (``-m`` puts it first on sys.path; nothing there can shadow a module)
            os.mkdir(Path(tmp) / "cwd")
            proc = subprocess.Popen(cmd, cwd=Path(tmp) / "cwd", stdout=log, stderr=subprocess.STDOUT, env=env,
                                    **popen_kwargs)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                killed = True
                kill_process_tree(proc)
            log.seek(0)
            log_tail = log.read()[-3000:]
        if report.is_file():
            for line in report.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    item = json.loads(line)
                except ValueError:  # a line cut short by the kill
                    continue
                if isinstance(item, dict) and isinstance(item.get("notebook"), str) and run is not None:
                    chapter = item["notebook"]
                    if item.get("status") in ("missing", "unreadable"):
                        run.unreadable[chapter] = str(item.get("problem", ""))
                    notes = [str(n) for n in item.get("notes", []) if isinstance(n, str)]
                    if notes:
                        run.skipped_cells[chapter] = notes
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
    return killed, proc.returncode, log_tail, started


def run_checks(chapters: list[str], notebooks: Path, timeout_s: float | None = None,
               case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S) -> CheckRun:
    """Run the exercise cases of ``chapters`` (all when empty) on ``notebooks``.

    The cases run in a child process (``python -m course_exercises.check_runner``)
    (in its own process group where the system has them; see :func:`kill_process_tree`). Each case may run
    the student's code for ``case_timeout_s`` seconds (0 = no limit); the child
    is killed as a whole after ``timeout_s`` seconds (default: 120 s per
    chapter checked). The child appends each case's result to a JSON-lines file
    as soon as the case ends, so the cases that finished before a kill keep
    their result; the case that was running is reported as not finished.
    """
    cases = load_cases()
    wanted = cases.cases_for(chapters)
    run = CheckRun(notebooks=notebooks, chapters=chapters)
    run.missing = {ch: cases.NOTEBOOKS[ch] for ch in (chapters or list(cases.NOTEBOOKS))
                   if not (Path(notebooks) / cases.NOTEBOOKS[ch]).is_file()}
    present = [ch for ch in (chapters or list(cases.NOTEBOOKS)) if ch not in run.missing]
    if timeout_s is None:
        timeout_s = DEFAULT_TIMEOUT_PER_CHAPTER_S * len(present)
    by_id = {c.id: CaseResult(c.id, c.chapter, c.exercise, c.points) for c in wanted}
    for result in by_id.values():
        if result.chapter in run.missing:  # reported once per notebook (format_report), not run
            result.kind, result.done = "missing", True
            result.message = f"the notebook {run.missing[result.chapter]} is not in the folder checked"
    killed, returncode, log_tail, started = False, 0, "", []
    if present:
        killed, returncode, log_tail, started = _run_runner(
            chapters if not run.missing else present, notebooks, timeout_s, case_timeout_s, by_id, run)
    for result in by_id.values():  # an unreadable notebook is said once (format_report), not once per case
        if result.chapter in run.unreadable and result.done and result.kind == "error":
            result.kind = "unreadable"
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
        run.problem = "\n".join([f"the checks ended (exit code {returncode}) without results for some cases.",
                                 *quoted_block(OUTPUT_LABEL, [log_tail], 2000, indent="  ")])
        for result in unfinished:
            result.message = "no result (the run stopped before this case)"
    drawn = drawn_case_ids(cases, wanted)
    unearned = unearned_passes((r.id, r.exercise, r.kind == "passed", r.id in drawn) for r in by_id.values())
    for case_id, why in unearned.items():
        by_id[case_id].kind = "held"  # passed, but earns its points only with a drawn case (shown last, on one line)
        by_id[case_id].message = f"{why}."
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
    root = clone_root()
    try:
        shown_path = run.notebooks.resolve().relative_to(root) if root is not None else run.notebooks
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
        elif all(r.kind == "missing" for r in rs):
            status = "notebook not found"
        elif all(r.kind == "unreadable" for r in rs):
            status = "notebook cannot be read"
        elif all(r.kind == "not_implemented" for r in failed) and len(failed) == len(rs):
            status = "not implemented yet"
        else:
            status = f"{len(rs) - len(failed)} of {len(rs)} cases pass"
        lines.append(f"  {ex:<9} {exercises.get(ex, '?'):<30} {earned:>3}/{possible:<3}  {status}")
        failed = [r for r in failed if r.kind not in ("missing", "unreadable")]  # said once per notebook, below
        held = [r for r in failed if r.kind == "held"]
        really = [r for r in failed if r.kind not in ("not_implemented", "held")]
        shown = really[:max_messages]
        if shown or held:
            details.append(f"Exercise {ex} ({exercises.get(ex, '?')}):")
            for r in shown:
                details.append(f"  x {r.id}")
                details.append(_indent(textwrap.dedent(_drop_heading(r.message, ex)), "    "))
            rest = [r.id for r in really][max_messages:]
            if rest:
                details.append(f"  ... and {len(rest)} more failing case{'s' if len(rest) > 1 else ''}: {', '.join(rest)}")
            for why in sorted({r.message for r in held}):  # one line per reason, naming its cases
                these = [r.id for r in held if r.message == why]
                kind = "a rejection case" if why.startswith(REJECTION_ALONE) else "a case with fixed inputs"
                many = len(these) > 1
                details.append(f"  ~ {len(these)} case{'s pass but earn their' if many else ' passes but earns its'} "
                               f"points only once a case with drawn inputs passes too, because "
                               f"{'each' if many else 'it'} is {kind} ({', '.join(these)}):")
                details.append(_indent(textwrap.fill(why, 96), "    "))
    lines.append("  " + "-" * (len(header) + 14))
    lines.append(f"  {'Total':<9} {'':<30} {earned_total:>3}/{total:<3}")
    if run.missing:
        lines += ["", "Missing notebooks:"] + [
            f"  ! {name} (chapter {ch}) is not in {shown_path}: save your notebook there under its original name "
            f"({name})" for ch, name in run.missing.items()]
    if run.unreadable:
        lines += ["", "Notebooks that cannot be read (their exercises score 0):"] + [
            "  ! " + _indent(textwrap.dedent(why), "    ").lstrip() for _ch, why in sorted(run.unreadable.items())]
    if run.skipped_cells:
        lines += ["", "Skipped cells (only their definitions are lost; the rest of the notebook is checked):"]
        for _ch, notes in sorted(run.skipped_cells.items()):
            lines += ["  ! " + _indent(note, "    ").lstrip() for note in notes]
    if run.problem:
        lines += ["", "Problem: " + run.problem]
    if run.warnings:
        lines += ["", "Warnings:"] + ["  ! " + textwrap.fill(w, 100, subsequent_indent="    ") for w in run.warnings]
    if details:
        lines += ["", "What to fix:"] + details
        lines += ["", DRAWN_INPUTS_NOTE]
    elif earned_total == total and total:
        lines += ["", "Everything passes. Well done!"]
    flagged = [w for w in run.warnings if w.endswith(FLAG_TAIL)]
    if flagged:  # the last line says it: points are not the whole story
        lines += ["", f"Your instructor's grader will flag {len(flagged)} thing(s) above for review (see Warnings): "
                      f"flags never change points, but your instructor reads them."]
    # the student's own words (error texts, notes, output) are quoted in the messages; hidden and look-alike
    # characters are written out everywhere, so no line of them can reorder or hide what it says
    return escape_hidden("\n".join(lines), keep="\n")


def usage_error(message: str) -> int:
    """Print ``error: message`` on stderr; return the exit code of a usage error (2)."""
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m course_exercises.check``; returns the exit code (0, or 2 for a usage error)."""
    parser = argparse.ArgumentParser(
        prog=prog_name("course-check", "course_exercises.check"),
        description="Check your exercise notebooks (save them first!) and print your score per exercise.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__import__('course_lib').__version__}")
    parser.add_argument("chapters", nargs="*", metavar="CHAPTER_OR_FOLDER",
                        help="chapters to check, e.g. 04 or 4 (default: all); an argument that is a folder (and not "
                             "a chapter number) is the folder with your notebooks, as --notebooks")
    parser.add_argument("--notebooks", metavar="DIR", help="folder with the NN_topic.ipynb notebooks "
                        "(default: the current folder if it has them, else ./exercises/)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help=f"stop all the checks after this long (default {DEFAULT_TIMEOUT_PER_CHAPTER_S:g} s per chapter)")
    parser.add_argument("--case-timeout", type=float, default=DEFAULT_CASE_TIMEOUT_S, metavar="SECONDS",
                        help=f"time your code may take in one case (default {DEFAULT_CASE_TIMEOUT_S:g}; 0 = no limit)")
    args = parser.parse_args(argv)
    chapter_args, folders = split_targets(args.chapters)
    try:
        cases = load_cases()
        for arg in chapter_args:
            if not _CHAPTER_START.match(Path(arg).name):  # no chapter number: a folder that does not exist
                raise ValueError(f"no such folder or chapter: {arg!r}; name an existing folder of notebooks or a "
                                 f"chapter ({', '.join(cases.NOTEBOOKS)})")
        chapters = resolve_chapters(chapter_args, cases.NOTEBOOKS)
        named = folders + ([args.notebooks] if args.notebooks else [])
        if len(named) > 1:
            raise ValueError(f"name one folder of notebooks, not {len(named)}: {', '.join(map(repr, named))}")
    except (ValueError, FileNotFoundError) as exc:
        parser.print_usage(sys.stderr)
        return usage_error(str(exc))
    if args.notebooks or folders:
        given = args.notebooks or folders[0]
        notebooks = Path(given).resolve()
        if not notebooks.is_dir():
            return usage_error(f"--notebooks {given!r} is not a folder")
    else:
        cwd = Path.cwd()
        notebooks = default_notebooks(cwd, cases.NOTEBOOKS, chapters, cases.EXERCISES)
        if notebooks is None and default_notebooks(cwd, cases.NOTEBOOKS, chapters) == cwd:
            return usage_error(f"the notebooks in the current folder ({cwd}) are not exercise notebooks (the book's "
                               f"chapters have the same names): run the command in the folder that holds your "
                               f"exercise notebooks (exercises/ in the repository), or name that folder")
        if notebooks is None:
            parser.print_usage(sys.stderr)
            wanted = [cases.NOTEBOOKS[c] for c in (chapters or list(cases.NOTEBOOKS))]
            example = " ".join([parser.prog, "my_notebooks/", *chapters])
            return usage_error(f"no notebook {' or '.join(wanted[:2])}{', ...' if len(wanted) > 2 else ''} in the "
                               f"current folder ({cwd}) or in {cwd / 'exercises'}: run the command in the folder "
                               f"that holds your notebooks, or name that folder, e.g. {example} "
                               f"(or --notebooks DIR)")
        given = str(notebooks)
    wanted = [cases.NOTEBOOKS[c] for c in (chapters or list(cases.NOTEBOOKS))]
    if not any((notebooks / name).is_file() for name in wanted):
        if not any((notebooks / name).is_file() for name in cases.NOTEBOOKS.values()):
            others = sorted(p.name for p in notebooks.glob("*.ipynb"))
            held = f" (it holds {', '.join(others[:3])}{', ...' if len(others) > 3 else ''})" if others else ""
            return usage_error(f"no exercise notebooks (NN_*.ipynb) in {given}{held}: name the folder that holds "
                               f"your notebooks, saved under their original names (e.g. {wanted[0]})")
        return usage_error(f"{given} holds no notebook of chapter{'s' if len(chapters) > 1 else ''} "
                           f"{', '.join(chapters)} ({', '.join(wanted)}): save your notebook there under its original "
                           f"name, or name the folder that holds it")
    warnings = copy_warnings(chapter_args, chapters, notebooks, cases)
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
