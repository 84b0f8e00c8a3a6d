"""Run the exercise cases on a folder of notebooks: the engine of the student's check command.

:func:`run_case` runs one case of the registry (:mod:`course_exercises.check`'s
``load_cases``) on the graded code of a notebook and says how it went; it is
used by the check command's child process (``python -m course_exercises.check_runner``,
started by :func:`course_exercises.check.run_checks`) and by the pytest tests of the
repository (``tests/exercises/test_exercises.py``), so that both give the same
verdicts. Nothing here needs pytest or a clone of the course: it runs from an
installed package.

Command (a child process of ``course-check``; not meant to be run by hand)::

    python -m course_exercises.check_runner --notebooks DIR --results FILE
        [--chapter NN ...] [--case-timeout SECONDS] [--expect-stubs]

writes to ``FILE`` (emptied first), per chapter, one JSON line
``{"notebook": NN, "status": "ok" | "missing" | "unreadable", "problem": str, "notes": [str]}``
(``notes``: one message per code cell that was skipped - a syntax error, a
definition that raised - so that the check command says it once, not once per
case), then one JSON line ``{"id", "kind": "started"}``
before each case and one ``{id, chapter, exercise, points, kind, message}``
after it, each flushed at once, so that a run killed from outside keeps the
finished cases and shows which one was running. ``kind`` is ``passed``,
``not_implemented``, ``failed``, ``error`` or ``timeout``.

Source: the exercise/grader contract, ``tests/exercises/CONTRACT.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import traceback
from pathlib import Path
from types import ModuleType

from .quoting import ERROR_LABEL, escape_hidden, quoted_block

__all__ = ["CaseTimeout", "time_limit", "NotebookLoader", "run_case", "student_frames", "NAME_ERROR_NOTE", "main"]

NAME_ERROR_NOTE = (
    "  Note: only the imports, def/class statements and LITERAL constants (numbers, strings, tuples of them) of your "
    "code cells are graded. A name set at the top level in any other way (e.g. NEG = torch.finfo(torch.float32).min, "
    "or a tensor made by demo code) does not exist when checking: compute it inside your function."
)


class CaseTimeout(BaseException):
    """The student's code ran past the case's time limit (a BaseException, so ``except Exception`` cannot swallow it)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`CaseTimeout` in the calling thread after ``seconds`` (no limit when 0).

    The same on Linux, macOS and Windows (no ``SIGALRM``): a watchdog thread asks the
    interpreter to raise the exception in this thread (``PyThreadState_SetAsyncExc``),
    which happens between two Python instructions. An endless Python loop stops; one
    long call into C (a single huge tensor operation) finishes first, and the check
    command's limit on the whole run (it kills the process) is the backstop.
    """
    if seconds <= 0:
        yield
        return
    target = threading.get_ident()
    lock = threading.Lock()
    state = {"armed": True, "fired": False}

    def fire() -> None:
        with lock:
            if state["armed"]:
                state["fired"] = _raise_in_thread(target, CaseTimeout)

    watchdog = threading.Timer(seconds, fire)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()
        with lock:
            state["armed"] = False
            if state["fired"]:
                _raise_in_thread(target, None)  # withdraw it if it has not been raised yet


def _raise_in_thread(thread_id: int, exception: type[BaseException] | None) -> bool:
    """Schedule ``exception`` in the thread ``thread_id`` (``None``: withdraw a scheduled one); True if done."""
    import ctypes

    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                                      None if exception is None else ctypes.py_object(exception))
    return done == 1


class NotebookLoader:
    """The graded code of each chapter's notebook in ``folder``, loaded once per chapter.

    :meth:`get` returns the module made by
    :func:`course_exercises.extract.load_submission`, or raises
    :class:`~course_exercises.extract.SubmissionError` (every time, with the
    same message and ``status``) when the notebook cannot be read at all.
    :meth:`notes` gives the cells that were skipped (a syntax error, a
    definition that raised), once per chapter, and :meth:`status` the
    notebook's status: ``ok``, ``missing`` or ``unreadable``.
    """

    def __init__(self, folder: Path, notebooks: dict[str, str]) -> None:
        self.folder = Path(folder)
        self.notebooks = notebooks
        self._loaded: dict[str, object] = {}
        self._notes: dict[str, list[str]] = {}
        self._status: dict[str, str] = {}

    def path(self, chapter: str) -> Path:
        """The notebook file of ``chapter``."""
        return self.folder / self.notebooks[chapter]

    def _load(self, chapter: str) -> None:
        from .extract import SubmissionError, load_submission

        self._notes[chapter], self._status[chapter] = [], "ok"
        if not self.folder.is_dir():
            self._loaded[chapter] = f"the notebook folder {str(self.folder)!r} does not exist (option --notebooks)"
            self._status[chapter] = "missing"
            return
        try:
            module, skipped = load_submission(self.path(chapter))
            self._loaded[chapter] = module
            self._notes[chapter] = [rename_cells(s.message, self.path(chapter)) for s in skipped]
        except SubmissionError as exc:
            self._loaded[chapter] = str(exc)
            self._status[chapter] = exc.status if exc.status in ("missing", "unreadable") else "unreadable"
        except SystemExit as exc:  # sys.exit() in a default value or a class body
            self._loaded[chapter] = (f"notebook {str(self.path(chapter))!r}: running its definitions "
                                     f"and imports raised SystemExit({exc.code!r})")
            self._status[chapter] = "unreadable"

    def get(self, chapter: str) -> ModuleType:
        from .extract import SubmissionError

        if chapter not in self._loaded:
            self._load(chapter)
        value = self._loaded[chapter]
        if isinstance(value, str):
            raise SubmissionError(value, status=self._status[chapter])
        return value

    def notes(self, chapter: str) -> list[str]:
        """One message per skipped cell of ``chapter``'s notebook ("code cell N" numbering); loads it if needed."""
        if chapter not in self._loaded:
            self._load(chapter)
        return list(self._notes[chapter])

    def status(self, chapter: str) -> str:
        """``ok``, ``missing`` or ``unreadable`` (loads the notebook if needed)."""
        if chapter not in self._loaded:
            self._load(chapter)
        return self._status[chapter]

    def problem(self, chapter: str) -> str:
        """Why the notebook cannot be checked (``""`` when it can), "code cell N" numbering."""
        if chapter not in self._loaded:
            self._load(chapter)
        value = self._loaded[chapter]
        return rename_cells(value, self.path(chapter)) if isinstance(value, str) else ""


def rename_cells(text: str, notebook: Path) -> str:
    """:func:`course_exercises.extract.rename_cells` (imported late: this module loads fast)."""
    from .extract import rename_cells as rename

    return rename(text, notebook)


def _cell_lines(notebook: Path) -> list[tuple[int, int]] | None:
    """Per line of the extracted source: ``(code cell number, line in that cell)``, or None when unknown."""
    try:  # any failure: fall back to the raw line numbers
        from .extract import assemble_source, extract_chunks, code_cell_numbers

        path, futures, chunks = extract_chunks(notebook)
        where = assemble_source(path, futures, chunks)[1]
        numbers = code_cell_numbers(notebook)
        return [(numbers.get(cell, 0), line) if cell else (0, 0) for cell, line in where]
    except Exception:  # noqa: BLE001
        return None


def student_frames(exc: BaseException, notebook: Path | None = None) -> str:
    """The traceback lines that lie in the student's extracted code (``""`` if none),
    with line numbers given as "code cell N, line M" of the notebook where possible."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if f.filename.startswith("<extracted from")]
    if not own:  # raised by the harness or a library it called: its frames would only confuse
        return ""
    where = _cell_lines(notebook) if notebook is not None else None
    out = []
    for f in own:
        cell, line = where[f.lineno - 1] if where and f.lineno and 0 < f.lineno <= len(where) else (0, 0)
        place = f"code cell {cell}, line {line}" if cell else f"line {f.lineno} of the graded code"
        out.append(f"  {place}, in {f.name}")
        if f.line:
            out.append(f"    {f.line.strip()}")
    return "\n".join(out)


#: the most characters of one error text of the student's code the check command shows
ERROR_CHARS = 1200


def _exception_text(exc: BaseException) -> str:
    """``Type: message`` of the student's exception (its ``__str__`` may raise: then the type alone)."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - the student's __str__
        return type(exc).__name__


def is_return_type_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the cases' ``ReturnTypeError`` (a function returned a value of the wrong type)."""
    return isinstance(exc, TypeError) and type(exc).__name__ == "ReturnTypeError"


def run_case(case, cases: ModuleType, loader: NotebookLoader, *, expect_stubs: bool = False,
             case_timeout: float = 0.0, timed_out: set[str] | None = None) -> tuple[str, str]:
    """Run one case on the student's notebook; ``(kind, message)``.

    ``kind`` is ``passed`` (message empty), ``not_implemented``, ``failed``,
    ``error`` (the notebook cannot be loaded or lacks the function) or
    ``timeout`` (the student's code ran past ``case_timeout`` seconds: the
    exercise is added to ``timed_out`` and its later cases are not run).

    With ``expect_stubs`` the case is meant to meet an untouched stub: the
    answer is ``not_implemented`` (with the stub's message) when the call
    raises ``NotImplementedError`` naming the case's exercise, else ``failed``.
    """
    from .extract import SubmissionError, install_standins, remove_standins

    timed_out = set() if timed_out is None else timed_out
    head = f"Exercise {case.exercise} ({case.function}), case {case.id}"
    notebook = loader.path(case.chapter)
    if case.exercise in timed_out:
        return "timeout", (f"{head}: not run, because an earlier case of exercise {case.exercise} did not finish "
                           f"within the time limit ({case_timeout:g} s): is there an endless loop?")
    try:
        ns = loader.get(case.chapter)
    except SubmissionError as exc:
        return "error", f"{head}: the notebook cannot be checked.\n  {rename_cells(str(exc), notebook)}"
    standins = getattr(case, "standins", None) or {}
    previous = install_standins(ns, standins) if standins else {}
    try:
        kind, message = _run_on(case, cases, ns, notebook, head, expect_stubs, case_timeout, timed_out)
    finally:
        remove_standins(ns, previous)
    if previous and kind != "passed":
        message += f"\n  Note: this case {cases.standin_note(previous)}, so a mistake there costs no points here."
    return kind, message


def _run_on(case, cases: ModuleType, ns: ModuleType, notebook: Path, head: str, expect_stubs: bool,
            case_timeout: float, timed_out: set[str]) -> tuple[str, str]:
    """:func:`run_case` once the notebook is loaded (and the stand-ins are in place)."""
    missing = [name for name in case.requires if not hasattr(ns, name)]
    if missing:
        return "error", (f"{head}: the notebook does not define {', '.join(missing)}. Keep the function name and "
                         f"signature given in the exercise, and save the notebook.")

    if expect_stubs:
        try:
            case.produce(ns)
        except NotImplementedError as exc:
            if f"Exercise {case.exercise}" not in str(exc):
                return "failed", (f"{head}: the stub raised NotImplementedError({str(exc)!r}), which does not name "
                                  f"'Exercise {case.exercise}'.")
            return "not_implemented", str(exc)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - report anything else as a broken stub or case
            return "failed", (f"{head}: expected the untouched stub to raise NotImplementedError, got "
                              f"{type(exc).__name__}: {exc}\n{student_frames(exc, notebook)}")
        return "failed", (f"{head}: the untouched stub returned a value instead of raising NotImplementedError, "
                          f"so an empty submission could earn points.")

    try:
        with time_limit(case_timeout):
            produced = case.produce(ns)
    except CaseTimeout:
        timed_out.add(case.exercise)
        return "timeout", (f"{head}: did not finish within the time limit ({case_timeout:g} s): is there an endless "
                           f"loop (e.g. a loop that never reaches its stop condition)?\n  Hint: {case.hint}")
    except NotImplementedError as exc:
        return "not_implemented", f"{head}: not implemented yet ({exc})."
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the student's code may raise anything
        if is_return_type_error(exc):  # the one return-type rule (cases.to_array): one line, no frames
            return "failed", f"{head}: {exc}"
        name = escape_hidden(type(exc).__name__)[:80]
        lines = [f"{head}: calling your code raised {name}", student_frames(exc, notebook),
                 NAME_ERROR_NOTE if isinstance(exc, NameError) else "", f"  Hint: {case.hint}",
                 *quoted_block(ERROR_LABEL, [_exception_text(exc)], ERROR_CHARS, indent="  ")]
        return "failed", "\n".join(line for line in lines if line)
    message = cases.compare(case, produced, case.expected())
    return ("failed", message) if message else ("passed", "")


def main(argv: list[str] | None = None) -> int:
    """Run the cases of the chosen chapters on ``--notebooks``, writing one JSON line per case to ``--results``."""
    from .check import load_cases

    parser = argparse.ArgumentParser(prog="python -m course_exercises.check_runner",
                                     description="The check command's child process (see course-check).")
    parser.add_argument("--notebooks", required=True, type=Path, metavar="DIR")
    parser.add_argument("--results", required=True, type=Path, metavar="FILE")
    parser.add_argument("--chapter", action="append", default=[], metavar="NN")
    parser.add_argument("--case-timeout", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--expect-stubs", action="store_true")
    args = parser.parse_args(argv)
    cases = load_cases()
    chapters = [f"{int(c):02d}" for c in args.chapter]
    loader = NotebookLoader(args.notebooks, cases.NOTEBOOKS)
    timed_out: set[str] = set()
    with open(args.results, "w", encoding="utf-8") as fh:
        def write(record: dict) -> None:
            fh.write(json.dumps(record) + "\n")
            fh.flush()

        reported: set[str] = set()
        for case in cases.cases_for(chapters):
            if case.chapter not in reported:  # once per notebook: its status and the cells that were skipped
                reported.add(case.chapter)
                write({"notebook": case.chapter, "status": loader.status(case.chapter),
                       "problem": loader.problem(case.chapter), "notes": loader.notes(case.chapter)})
            write({"id": case.id, "kind": "started"})
            kind, message = run_case(case, cases, loader, expect_stubs=args.expect_stubs,
                                     case_timeout=args.case_timeout, timed_out=timed_out)
            write({"id": case.id, "chapter": case.chapter, "exercise": case.exercise, "points": case.points,
                   "kind": kind, "message": message})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
