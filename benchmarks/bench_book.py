"""Wall time of executing each chapter notebook of the book (all chapters of ``_toc.yml``).

What it measures: for every notebook chapter listed in ``_toc.yml`` (Markdown
pages such as the intro and the glossary are skipped), the wall-clock seconds
that ``nbclient`` needs to execute the whole notebook in a fresh kernel,
**kernel start-up and shut-down included** — the same work that
``jupyter-book build`` with ``execute_notebooks: force`` does for that chapter.
One kernel per chapter, chapters one after another (never in parallel, so the
timings do not compete for the CPUs). Each chapter also reports its slowest
cell (index counted from 0 over all cells, seconds from ``nbclient``'s
recorded execution timestamps).

The notebooks are executed in a temporary copy of ``book/`` (the kernel's
working directory is that copy, as with ``run_in_temp: false`` in the book's
configuration); the executed notebooks are discarded and nothing is written
back into ``book/``. A relative ``COURSE_LIB_DATA`` is made absolute (against
the directory the script is started from) so that it still points at the same
folder from inside the copy.

    python benchmarks/bench_book.py [--chapters 01 04] [--timeout 300]
                                    [--budget-s 120] [--threads N]

``--chapters`` picks chapters by prefix of their file name (``01``,
``04_attention``); ``--threads N`` sets ``OMP_NUM_THREADS`` and
``MKL_NUM_THREADS`` for the kernels (default: the environment is left as is);
``--timeout`` bounds each chapter's wall time in seconds (and therefore each
cell's).

Output: a table (chapter, seconds, cells, slowest cell, status), then, as the
LAST line, JSON::

    {"total_s": ..., "slowest": "04_attention", "slowest_s": ...,
     "chapters": {"01_motivation": ..., ...}, "over_budget": [...],
     "failed": {...}, "budget_s": 120.0, "threads": null}

``over_budget`` lists the chapters whose time exceeds ``--budget-s``; ``failed``
maps a chapter that did not execute (cell error, dead kernel, timeout) to a
one-line reason. Exit status: 0 when every chapter executed, even if some are
over budget (this is a benchmark, not a test); 1 when a chapter failed; 2 for
bad arguments (a chapter prefix that matches nothing, a missing ``_toc.yml``
entry).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass
class ChapterResult:
    """Outcome of executing one chapter notebook.

    ``seconds`` is the wall time (kernel start-up included); ``slowest_cell`` is
    ``(cell index, seconds)`` or ``None`` when no code cell recorded timing;
    ``error`` is ``None`` on success, otherwise a one-line reason.
    """

    name: str
    seconds: float
    n_code_cells: int = 0
    slowest_cell: tuple[int, float] | None = None
    error: str | None = None


@dataclass
class BenchSettings:
    """Options of one benchmark run (see the module docstring)."""

    toc: Path = REPO / "_toc.yml"
    chapters: list[str] = field(default_factory=list)
    timeout_s: float = 300.0
    budget_s: float = 120.0
    threads: int | None = None


def toc_notebooks(toc_path: Path) -> list[Path]:
    """Return the notebook files listed in a Jupyter Book ``_toc.yml``, in book order.

    Walks ``root`` and every nested ``parts``/``chapters``/``sections`` entry
    with a ``file`` key; a file is resolved relative to the directory of
    ``toc_path`` and kept when ``<file>.ipynb`` exists (Markdown pages are
    skipped). Raises ``FileNotFoundError`` for the toc itself or for an entry
    that matches no ``.ipynb``/``.md``/``.rst`` file.
    """
    import yaml  # installed with jupyter-book

    if not toc_path.is_file():
        raise FileNotFoundError(f"toc: no such file {toc_path}")
    root_dir = toc_path.parent
    toc = yaml.safe_load(toc_path.read_text(encoding="utf-8"))
    files: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    files.append(node[key])
            for key in ("parts", "chapters", "sections"):
                for child in node.get(key) or []:
                    walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(toc)
    notebooks = []
    for entry in files:
        base = root_dir / entry
        stem = base.with_suffix("") if base.suffix in {".ipynb", ".md", ".rst"} else base
        if stem.with_suffix(".ipynb").is_file():
            notebooks.append(stem.with_suffix(".ipynb"))
        elif not any(stem.with_suffix(s).is_file() for s in (".md", ".rst")):
            raise FileNotFoundError(f"toc entry {entry!r}: no .ipynb, .md or .rst file at {stem}")
    return notebooks


def select(notebooks: list[Path], prefixes: list[str]) -> list[Path]:
    """Keep the notebooks whose file name starts with one of ``prefixes`` (all when empty).

    Raises ``ValueError`` naming any prefix that matches no chapter.
    """
    if not prefixes:
        return notebooks
    unmatched = [p for p in prefixes if not any(nb.stem.startswith(p) for nb in notebooks)]
    if unmatched:
        names = ", ".join(nb.stem for nb in notebooks)
        raise ValueError(f"--chapters: {unmatched} match no chapter of the toc (chapters: {names})")
    return [nb for nb in notebooks if any(nb.stem.startswith(p) for p in prefixes)]


def _cell_seconds(cell) -> float | None:
    """Seconds between a code cell's execute_input and execute_reply timestamps, if recorded."""
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


async def _execute(nb, workdir: Path, timeout_s: float):
    """Execute ``nb`` in a new kernel with ``workdir`` as working directory; bound the wall time."""
    from nbclient import NotebookClient

    kernel = nb.metadata.get("kernelspec", {}).get("name", "python3")
    client = NotebookClient(nb, timeout=int(timeout_s) + 1, kernel_name=kernel,
                            resources={"metadata": {"path": str(workdir)}}, record_timing=True)
    task = asyncio.ensure_future(client.async_execute())
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            task.cancel()
            try:
                await task
            except BaseException:  # noqa: BLE001 - whatever the cancelled run raises, it timed out
                pass
            raise asyncio.TimeoutError
        task.result()
    finally:
        # On a timeout the cancelled execution normally shuts its kernel down;
        # make sure no kernel process outlives the chapter either way.
        km = client.km
        if km is not None and km.has_kernel:
            try:
                await km.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001 - best effort cleanup
                pass


def run_chapter(path: Path, workdir: Path, timeout_s: float) -> ChapterResult:
    """Execute one chapter notebook (a copy of ``path``) in ``workdir`` and time it."""
    import nbformat
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    n_code = sum(c.cell_type == "code" for c in nb.cells)
    error = None
    t0 = time.perf_counter()
    try:
        asyncio.run(_execute(nb, workdir, timeout_s))
    except asyncio.TimeoutError:
        error = f"timeout: not finished after {timeout_s:g} s"
    except CellExecutionError as exc:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # drop the traceback's colour codes
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        error = "cell error: " + (lines[-1] if lines else type(exc).__name__)
    except DeadKernelError as exc:
        error = f"dead kernel: {exc}"
    except Exception as exc:  # noqa: BLE001 - reported, and the exit status becomes 1
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - t0
    timed = [(i, s) for i, c in enumerate(nb.cells) if c.cell_type == "code"
             for s in [_cell_seconds(c)] if s is not None]
    slowest = max(timed, key=lambda t: t[1]) if timed else None
    return ChapterResult(path.stem, seconds, n_code, slowest, error)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chapters", nargs="+", default=[], metavar="PREFIX",
                    help="chapters to run, by file-name prefix (default: all notebooks of the toc)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per chapter (default 300)")
    ap.add_argument("--budget-s", type=float, default=120.0,
                    help="a chapter slower than this is listed in over_budget (default 120)")
    ap.add_argument("--threads", type=int, default=None,
                    help="set OMP_NUM_THREADS/MKL_NUM_THREADS for the kernels (default: leave as is)")
    ap.add_argument("--toc", type=Path, default=REPO / "_toc.yml", help="the book's _toc.yml")
    args = ap.parse_args(argv)
    settings = BenchSettings(args.toc.resolve(), args.chapters, args.timeout, args.budget_s, args.threads)
    if settings.timeout_s <= 0:
        ap.error(f"--timeout must be > 0 seconds, got {settings.timeout_s}")
    if settings.threads is not None and settings.threads < 1:
        ap.error(f"--threads must be >= 1, got {settings.threads}")
    try:
        chapters = select(toc_notebooks(settings.toc), settings.chapters)
    except (FileNotFoundError, ValueError) as exc:
        ap.error(str(exc))

    # The kernels inherit this process's environment.
    if settings.threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(settings.threads)
    if os.environ.get("COURSE_LIB_DATA"):
        os.environ["COURSE_LIB_DATA"] = os.path.abspath(os.environ["COURSE_LIB_DATA"])

    results: list[ChapterResult] = []
    with tempfile.TemporaryDirectory(prefix="bench_book_") as tmp:
        book_dir = chapters[0].parent if chapters else settings.toc.parent / "book"
        workdir = Path(tmp) / book_dir.name
        shutil.copytree(book_dir, workdir, ignore=shutil.ignore_patterns(
            "_build", "_vendor", ".ipynb_checkpoints", "__pycache__", ".pytest_cache"))
        for path in chapters:
            copy = workdir / path.relative_to(book_dir) if path.is_relative_to(book_dir) else workdir / path.name
            if not copy.exists():
                shutil.copy2(path, copy)
            print(f"running {path.stem} ...", file=sys.stderr, flush=True)
            res = run_chapter(copy, copy.parent, settings.timeout_s)
            print(f"  {res.seconds:.1f} s" + (f"  FAILED ({res.error})" if res.error else ""),
                  file=sys.stderr, flush=True)
            results.append(res)

    width = max([len(r.name) for r in results] + [7])
    print(f"{'chapter':<{width}}  {'seconds':>8}  {'cells':>5}  {'slowest cell':>14}  status")
    for r in results:
        slow = f"#{r.slowest_cell[0]} {r.slowest_cell[1]:.1f} s" if r.slowest_cell else "-"
        status = ("FAILED: " + r.error) if r.error else (
            "over budget" if r.seconds > settings.budget_s else "ok")
        print(f"{r.name:<{width}}  {r.seconds:8.1f}  {r.n_code_cells:5d}  {slow:>14}  {status}")
    total = sum(r.seconds for r in results)
    slowest = max(results, key=lambda r: r.seconds) if results else None
    print(f"{'total':<{width}}  {total:8.1f}")
    summary = {
        "total_s": round(total, 1),
        "slowest": slowest.name if slowest else None,
        "slowest_s": round(slowest.seconds, 1) if slowest else None,
        "chapters": {r.name: round(r.seconds, 1) for r in results},
        "over_budget": [r.name for r in results if r.seconds > settings.budget_s],
        "failed": {r.name: r.error for r in results if r.error},
        "budget_s": settings.budget_s,
        "threads": settings.threads,
    }
    print(json.dumps(summary))
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
