"""All of the grader parent's reading of a submission's notebooks, done in one bounded subprocess.

The parent grades the whole class, so it must spend bounded time and memory on
whatever bytes a student hands in, and a notebook that cannot be read must
cost only its own chapter. :func:`inspect_notebooks` therefore never parses a
notebook itself: one child process (``python -I -S -B``, an explicit
``sys.path`` holding only the course and IPython, stdin closed, output to
files, ``RLIMIT_AS``/``RLIMIT_CPU`` set, killed at a wall-clock deadline; it
imports neither torch nor the student's code) reads every notebook and returns,
per chapter,

* the structural flags of :func:`course_exercises.static_checks.check_source`
  (advisory, cell numbers already written as "code cell N");
* the code-cell numbering, for :func:`rename_cells_with` on the messages of
  the sandboxed child, so that the parent never reads the notebook again;
* the :class:`~course_exercises.extract.SubmissionError` message when the
  notebook cannot be read (hostile or broken JSON, a syntax error).

Each chapter also has its own share of the time: a slow chapter gets a flag
and the next one is still inspected. If the whole child times out or dies,
every chapter not yet inspected gets an advisory flag; nothing here raises.

Use (in the parent)::

    found = inspect_notebooks({"04": work / "submission" / "04_attention.ipynb"},
                              {"04": {"4.1": "scaled_dot_product_attention"}})
    flags += found["04"].flags
    message = rename_cells_with(message, found["04"].cell_numbers)
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Callable, Mapping

from course_exercises.extract import (SubmissionError, assemble_source, number_code_cells, code_cells, extract_cells, read_notebook,
                      rename_cells_with)
from course_exercises.static_checks import ADVISORY, check_source, defined_twice

__all__ = ["ChapterInspection", "inspect_notebooks", "rename_cells_with"]

#: most bytes of results read back from the child (flags are short; numbering is capped per notebook)
_MAX_RESULT_BYTES = 16 << 20
#: most bytes the child may write to any file (results, its stderr)
_MAX_CHILD_FILE_BYTES = 32 << 20
#: most characters kept of one flag or error message read back from the child
_MAX_TEXT = 4000
#: most flags kept per chapter (the static checks report at most 31)
_MAX_CHAPTER_FLAGS = 40
#: seconds of the timeout kept for the child's start (Python, IPython) and its last write
_START_S = 1.0

# Run by ``python -I -S -B -c``: argv[1] is the request file, argv[2] the results file.
_BOOTSTRAP = (
    "import json, sys\n"
    "with open(sys.argv[1], encoding='utf-8') as f:\n"
    "    request = json.load(f)\n"
    "sys.path += request['sys_path']\n"
    "from course_grader.inspect_notebooks import _child_main\n"
    "_child_main(request, sys.argv[2])\n"
)


@dataclass
class ChapterInspection:
    """What the parent needs of one chapter's notebook.

    Attributes:
        flags: advisory findings for the instructor (cells numbered "code cell N").
        cell_numbers: ``{cell number: code-cell number}`` (cells counted from 1,
            markdown included), for :func:`rename_cells_with`; ``{}`` when the
            notebook could not be read.
        error: why the notebook cannot be graded (the same words the sandboxed
            child gives the student), or ``None``.
    """

    flags: list[str] = field(default_factory=list)
    cell_numbers: dict[int, int] = field(default_factory=dict)
    error: str | None = None
    #: exercise -> a note for the student (an exercise function defined in two cells: the later one counts)
    notes: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------
# The parent's side
# ---------------------------------------------------------------------------
def inspect_notebooks(notebooks: Mapping[str, str | PathLike[str]], exercises: Mapping[str, Mapping[str, str]],
                      timeout_s: float = 20, memory_mb: int = 1024, *,
                      spawn: Callable[..., subprocess.Popen] | None = None,
                      kill: Callable[[subprocess.Popen], None] | None = None) -> dict[str, ChapterInspection]:
    """Inspect a submission's notebooks in one bounded subprocess (never raises).

    Args:
        notebooks: chapter -> path of its notebook (a relative path is taken from the current directory).
        exercises: chapter -> {exercise number: function name} (what
            :func:`~course_exercises.static_checks.check_source` takes).
        timeout_s: wall-clock limit for the whole inspection; each chapter
            gets a share of it.
        memory_mb: address-space limit of the subprocess.
        spawn: starts the subprocess: ``spawn(argv, **popen_keywords)``, in a
            new session (default: :class:`subprocess.Popen` with
            ``start_new_session=True``). The grader passes its supervisor's
            ``spawn``, so that its sweep of stray processes spares the inspector.
        kill: kills and reaps it (always called, also after a normal exit;
            default: ``SIGKILL`` to its process group); the grader passes its
            supervisor's ``kill_tree``.

    Returns:
        chapter -> :class:`ChapterInspection`, for every chapter of
        ``notebooks``; a chapter left uninspected (timeout, crash) has one
        advisory flag saying so and no cell numbering.
    """
    chapters = [str(ch) for ch in notebooks]
    if not chapters:
        return {}
    found: dict[str, ChapterInspection] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="course-inspect-") as tmp:
            problem = _run_child(Path(tmp), notebooks, exercises, timeout_s, memory_mb,
                                 spawn or functools.partial(subprocess.Popen, start_new_session=True), kill or _kill)
            found = _read_results(Path(tmp) / "results.jsonl", chapters)
    except Exception as exc:  # noqa: BLE001 - the parent must keep grading
        problem = f"could not be inspected: the inspector did not run ({type(exc).__name__})"
    for ch in chapters:
        if ch not in found:
            found[ch] = ChapterInspection(flags=[f"inspect ch{ch}: {problem} - {ADVISORY}"])
    return {ch: found[ch] for ch in chapters}


def _run_child(tmp: Path, notebooks: Mapping[str, str | PathLike[str]], exercises: Mapping[str, Mapping[str, str]],
               timeout_s: float, memory_mb: int, spawn: Callable[..., subprocess.Popen],
               kill: Callable[[subprocess.Popen], None]) -> str:
    """Run the inspector; return what to say of the chapters it leaves without a result."""
    request = {
        "sys_path": _child_sys_path(),
        "deadline": time.time() + max(0.0, timeout_s - _START_S),
        "memory_mb": int(memory_mb),
        "cpu_s": math.ceil(timeout_s) + 1,
        "chapters": [{"chapter": str(ch), "path": os.path.abspath(path),
                      "exercises": {str(e): str(f) for e, f in exercises.get(ch, {}).items()}}
                     for ch, path in notebooks.items()],
    }
    (tmp / "request.json").write_text(json.dumps(request), encoding="utf-8")
    command = [sys.executable, "-I", "-S", "-B", "-c", _BOOTSTRAP, str(tmp / "request.json"),
               str(tmp / "results.jsonl")]
    with open(tmp / "stderr.txt", "wb") as err:
        proc = spawn(command, stdin=subprocess.DEVNULL, stdout=err, stderr=err, cwd=tmp,
                     env={"HOME": str(tmp), "LC_ALL": "C.UTF-8", "PATH": os.defpath}, close_fds=True)
        try:
            code = proc.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            return f"could not be inspected within {timeout_s:g} s"
        finally:
            kill(proc)
    if code == 0:
        return "could not be inspected (no result)"
    how = f"signal {-code}" if code < 0 else f"exit status {code}"
    return f"could not be inspected: the inspector stopped ({how}{_last_line(tmp / 'stderr.txt')})"


def _child_sys_path() -> list[str]:
    """The folders the inspector may import from: the course, and IPython's (found without importing it)."""
    paths = [str(Path(__file__).resolve().parents[1])]
    try:
        spec = importlib.util.find_spec("IPython")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        paths.append(str(Path(list(spec.submodule_search_locations)[0]).resolve().parent))
    return list(dict.fromkeys(paths))


def _kill(proc: subprocess.Popen) -> None:
    """Kill the inspector's process group (it is alone in its session) and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _last_line(path: Path) -> str:
    """``": <last line of the child's stderr>"``, short and printable, or ``""``."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 2000))
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return f": {_clean(lines[-1])[:200]}" if lines else ""


def _clean(text: str) -> str:
    """``text`` as valid UTF-8, without control characters other than newlines and tabs, capped."""
    text = text[:_MAX_TEXT].encode("utf-8", "replace").decode("utf-8")
    return "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text)


def _read_results(path: Path, chapters: list[str]) -> dict[str, ChapterInspection]:
    """Parse the child's results (one JSON line per chapter); anything malformed is dropped."""
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_RESULT_BYTES)
    except OSError:
        return {}
    found: dict[str, ChapterInspection] = {}
    for line in data.split(b"\n"):
        try:
            chapter, inspection = _parse_record(json.loads(line))
        except Exception:  # noqa: BLE001 - a cut or hostile line: that chapter counts as uninspected
            continue
        if chapter in chapters and chapter not in found:
            found[chapter] = inspection
    return found


def _parse_record(record: object) -> tuple[str, ChapterInspection]:
    """Check the shape of one result record; raise ``ValueError`` when it is not as written by the child."""
    if not isinstance(record, dict) or not isinstance(record.get("chapter"), str):
        raise ValueError("not a record")
    flags, numbers, error = record.get("flags"), record.get("cell_numbers"), record.get("error")
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise ValueError("bad flags")
    if not isinstance(numbers, dict) or not all(isinstance(k, str) and k.isdigit() and len(k) < 10
                                                and type(v) is int for k, v in numbers.items()):
        raise ValueError("bad cell numbers")
    if error is not None and not isinstance(error, str):
        raise ValueError("bad error")
    notes = record.get("notes", {})
    if not isinstance(notes, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in notes.items()):
        raise ValueError("bad notes")
    return record["chapter"], ChapterInspection(
        flags=[_clean(f) for f in flags[:_MAX_CHAPTER_FLAGS]],
        cell_numbers={int(k): v for k, v in numbers.items()},
        error=None if error is None else _clean(error),
        notes={_clean(k)[:20]: _clean(v) for k, v in list(notes.items())[:_MAX_CHAPTER_FLAGS]})


# ---------------------------------------------------------------------------
# The child's side (runs under ``python -I -S -B``)
# ---------------------------------------------------------------------------
class _ChapterTimeout(BaseException):
    """Raised by the interval timer when a chapter has used its share (a BaseException, so that
    ``except Exception`` clauses of the parsing code cannot swallow it)."""


def _child_main(request: dict, results_path: str) -> None:
    """Inspect each chapter of ``request`` in turn, appending one JSON line per chapter to ``results_path``."""
    _limit_resources(request["memory_mb"], request["cpu_s"])
    try:  # import IPython now, so that its start-up does not count against the first chapter
        import IPython.core.inputtransformer2  # noqa: F401
    except ImportError:
        pass
    signal.signal(signal.SIGALRM, _on_alarm)
    items = request["chapters"]
    with open(results_path, "a", encoding="utf-8") as out:
        for i, item in enumerate(items):
            share = max(0.05, (request["deadline"] - time.time()) / (len(items) - i))
            try:
                record = _inspect_with_timer(item, share)
            except _ChapterTimeout:  # the alarm rang just as the chapter finished
                record = _uninspected(item["chapter"], f"could not be inspected within {share:.1f} s")
            out.write(json.dumps(record, ensure_ascii=True) + "\n")
            out.flush()


def _limit_resources(memory_mb: int, cpu_s: int) -> None:
    """Cap the child's address space, CPU time, file sizes and core dumps."""
    import resource

    limits = [(resource.RLIMIT_AS, memory_mb << 20), (resource.RLIMIT_CPU, cpu_s),
              (resource.RLIMIT_FSIZE, _MAX_CHILD_FILE_BYTES), (resource.RLIMIT_CORE, 0)]
    for which, value in limits:
        hard = value + 1 if which == resource.RLIMIT_CPU else value  # SIGXCPU first, then SIGKILL
        resource.setrlimit(which, (value, hard))


def _on_alarm(signum: int, frame: object) -> None:
    raise _ChapterTimeout()


def _inspect_with_timer(item: dict, share_s: float) -> dict:
    """:func:`_inspect_chapter` within ``share_s`` seconds; a chapter over time or memory gets a flag."""
    record = _uninspected(item["chapter"], "")
    signal.setitimer(signal.ITIMER_REAL, share_s)
    try:
        return _inspect_chapter(item, record)
    except _ChapterTimeout:
        problem = f"could not be inspected within {share_s:.1f} s (its share of the time)"
    except MemoryError:
        problem = "could not be inspected within the memory limit"
    except Exception as exc:  # noqa: BLE001 - odd input must cost only this chapter
        problem = f"could not be inspected ({type(exc).__name__})"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    record["flags"] = _uninspected(item["chapter"], problem)["flags"]
    return record


def _uninspected(chapter: str, problem: str) -> dict:
    """The record of a chapter without results; ``problem`` (if any) becomes its one flag."""
    flags = [f"inspect ch{chapter}: {problem} - {ADVISORY}"] if problem else []
    return {"chapter": chapter, "flags": flags, "cell_numbers": {}, "error": None}


def _inspect_chapter(item: dict, record: dict) -> dict:
    """Fill ``record`` with the chapter's numbering, then its flags or its error; return it."""
    try:
        path, nb = read_notebook(item["path"])
        numbers = number_code_cells(nb["cells"])
        record["cell_numbers"] = {str(k): v for k, v in numbers.items()}
        cells = code_cells(path, nb)
        del nb
        source = assemble_source(path, *extract_cells(path, cells))[0]
    except SubmissionError as exc:
        record["error"] = _clean(str(exc))
        return record
    flags = check_source(source, item["chapter"], item["exercises"])
    record["flags"] = [_clean(rename_cells_with(str(f), numbers)) for f in flags]
    record["notes"] = {ex: _clean(rename_cells_with(note, numbers))
                       for ex, note in defined_twice(source, item["exercises"]).items()}
    return record
