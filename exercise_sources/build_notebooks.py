"""Build the exercise notebooks and their solutions from one source per chapter.

Sources: ``exercise_sources/chNN.py``; each defines ``CHAPTER``
(``"04"``), ``TITLE`` and ``CELLS``, a list of tuples:

* ``("md", text)`` - a markdown cell;
* ``("code", source)`` - a code cell, the same in both notebooks;
* ``("exercise", "4.1", source)`` - the cell the student completes. The lines
  between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` are the answer: the
  solutions notebook keeps them (without the markers), the exercises notebook
  replaces them with ``raise NotImplementedError("Exercise 4.1: ...")``;
* ``("tryit", source)`` - a cell that calls the student's functions: tagged
  ``raises-exception`` in the exercises notebook so that the untouched notebook
  still runs from top to bottom.

Every notebook gets the same header (how to check) and, at the end, a check
cell that runs ``python -m course_exercises.check NN``.

Outputs: ``exercises/NN_topic.ipynb`` (not executed, no outputs) and
``solutions/NN_topic.ipynb`` (executed in ``solutions/``, outputs kept).

Usage (from the repository root)::

    python exercise_sources/build_notebooks.py            # all chapters
    python exercise_sources/build_notebooks.py 04 05      # some chapters
    python exercise_sources/build_notebooks.py --no-execute

``test_notebooks_match_sources`` in ``test_extract.py`` fails when a committed
notebook no longer matches its source.
"""

from __future__ import annotations

import argparse
import re
import runpy
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(__file__).resolve().parent
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"

HEADER = """\
# Chapter {chapter_int} exercises: {title}

These exercises go with chapter {chapter_int} of the book. For each exercise, read the
instructions, write the body of the function where it says
`raise NotImplementedError(...)`, and run the **try it** cell below it.

**Check your work** with the course's checker, run with the course's Python environment, from a
terminal in the repository root:

```bash
.venv/bin/python -m course_exercises.check {chapter}    # this chapter; no argument = every chapter
```

(or `python -m course_exercises.check {chapter}` once the course's environment is activated), or run the
last cell of this notebook, which uses the notebook's own Python. The checker reads the **saved**
notebook file, so **save the notebook first (Ctrl+S)**.

**What is graded.** Only these statements of your code cells are run when checking: imports,
`def`/`class` statements, and constants assigned a **literal** value (a number, a string, or a
tuple/list of them, e.g. `D_MODEL = 512`). Anything else is left out, including a constant computed
at the top level (`NEG = torch.finfo(torch.float32).min` is *not* kept: compute such values inside
your function) and every variable made by demo code. Keep the function names and signatures as
given. Write the code yourself: an answer that calls the library function it re-implements (from
PyTorch or `course_lib`) is flagged for review by your instructor's grader, and the checker warns
about it.
"""

CHECK_MD = """\
## Check your work

**Save the notebook first (Ctrl+S)** — the checker reads the saved file, not what
is in this window. Then run the cell below: it prints, for every exercise of this
chapter, the points earned out of the points possible, and what to fix.
"""

CHECK_CODE = '!"{{sys.executable}}" -m course_exercises.check {chapter}'


def load_source(chapter: str) -> dict:
    """Run ``exercise_sources/chNN.py`` and return its globals (``CHAPTER``, ``TITLE``, ``NOTEBOOK``, ``CELLS``)."""
    return runpy.run_path(str(SRC / f"ch{chapter}.py"))


def _stub(exercise: str, source: str) -> str:
    lines = source.split("\n")
    try:
        begin = next(i for i, ln in enumerate(lines) if ln.strip() == BEGIN)
        end = next(i for i, ln in enumerate(lines) if ln.strip() == END)
    except StopIteration:
        raise ValueError(f"exercise {exercise}: markers {BEGIN!r}/{END!r} not found") from None
    indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
    name = re.search(r"^def (\w+)", source, re.M)
    what = f"write {name.group(1)}" if name else "write the code"
    stub = [
        f"{indent}# Your code here: replace the line below.",
        f'{indent}raise NotImplementedError("Exercise {exercise}: {what} (see the instructions above)")',
    ]
    return "\n".join(lines[:begin] + stub + lines[end + 1 :])


def _solution(source: str) -> str:
    return "\n".join(ln for ln in source.split("\n") if ln.strip() not in (BEGIN, END))


def build(chapter: str) -> tuple[nbformat.NotebookNode, nbformat.NotebookNode, str]:
    """Return ``(exercises_nb, solutions_nb, file_name)`` for a chapter, not executed."""
    spec = load_source(chapter)
    assert spec["CHAPTER"] == chapter
    v4 = nbformat.v4
    books = {"exercises": v4.new_notebook(), "solutions": v4.new_notebook()}
    cells: dict[str, list] = {"exercises": [], "solutions": []}

    def add(kind: str, ex_text: str, sol_text: str, tags: tuple[str, ...] = (), sol_tags: tuple[str, ...] = ()) -> None:
        n = len(cells["exercises"])
        for which, text, cell_tags in (("exercises", ex_text, tags), ("solutions", sol_text, sol_tags)):
            cell = v4.new_markdown_cell(text) if kind == "md" else v4.new_code_cell(text)
            cell["id"] = f"ch{chapter}-{n:02d}"
            if kind != "md":
                cell["metadata"] = {"tags": list(cell_tags)} if cell_tags else {}
            cells[which].append(cell)

    header = HEADER.format(chapter=chapter, chapter_int=int(chapter), title=spec["TITLE"])
    add("md", header, header.replace("# Chapter", "# Solutions: chapter", 1))
    for item in spec["CELLS"]:
        kind = item[0]
        if kind == "md":
            add("md", item[1].strip("\n"), item[1].strip("\n"))
        elif kind == "code":
            add("code", item[1].strip("\n"), item[1].strip("\n"))
        elif kind == "exercise":
            text = item[2].strip("\n")
            add("code", _stub(item[1], text), _solution(text))
        elif kind == "tryit":
            add("code", item[1].strip("\n"), item[1].strip("\n"), tags=("raises-exception",))
        else:  # pragma: no cover
            raise ValueError(f"unknown cell kind {kind!r}")
    add("md", CHECK_MD.strip("\n"), CHECK_MD.strip("\n"))
    # nbval skips the check cell of the solutions: a `!` command never fails a cell anyway, and the
    # checker has its own tests (test_check.py); skipping it saves a pytest run per notebook.
    add("code", CHECK_CODE.format(chapter=chapter), CHECK_CODE.format(chapter=chapter), sol_tags=("nbval-skip",))
    for which, nb in books.items():
        nb.cells = cells[which]
        nb.metadata = {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        }
    return books["exercises"], books["solutions"], spec["NOTEBOOK"]


def execute(nb: nbformat.NotebookNode, cwd: Path) -> None:
    """Run every cell in a fresh kernel whose working directory is ``cwd``."""
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=300, kernel_name="python3", record_timing=False, resources={"metadata": {"path": str(cwd)}}).execute()
    for cell in nb.cells:  # keep the committed files free of volatile metadata
        cell.get("metadata", {}).pop("execution", None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("chapters", nargs="*", help="two-digit chapters (default: all)")
    parser.add_argument("--no-execute", action="store_true", help="write the solutions without running them")
    args = parser.parse_args(argv)
    chapters = args.chapters or sorted(p.stem[2:] for p in SRC.glob("ch[0-9][0-9].py"))
    for chapter in chapters:
        chapter = f"{int(chapter):02d}"
        ex_nb, sol_nb, name = build(chapter)
        (ROOT / "exercises").mkdir(exist_ok=True)
        (ROOT / "solutions").mkdir(exist_ok=True)
        nbformat.write(ex_nb, ROOT / "exercises" / name)
        if not args.no_execute:
            execute(sol_nb, ROOT / "solutions")
        nbformat.write(sol_nb, ROOT / "solutions" / name)
        print(f"wrote exercises/{name} and solutions/{name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
