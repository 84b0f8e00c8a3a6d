"""Read the graded code out of an exercise notebook, and load it as a module.

What is graded is what the student *defined*, not what the notebook happened to
run: from every code cell, in order, only these top-level statements are kept

* ``import ...`` and ``from ... import ...``;
* ``def`` / ``async def`` / ``class`` definitions (with their decorators);
* assignments of literal constants to plain names (``D_MODEL = 512``,
  ``PAD_ID, BOS_ID = 0, 1``, ``NAMES = ("a", "b")``): values that
  :func:`ast.literal_eval` accepts.

Everything else - demo calls, prints, plots, tensors built at the top level - is
left out, and so are IPython's shell commands and magics (``!pip ...``,
``%timeit``, a ``%%bash`` cell): each cell is first translated from IPython's
syntax to plain Python the way Jupyter does it, so that a magic never counts as
a syntax error, and the translated magic calls are demo statements.

Any bytes a student hands in cost bounded time and memory here: a notebook over
:data:`MAX_NOTEBOOK_BYTES`, or JSON that is too deep, holds oversized numbers
or does not fit in memory, is a :class:`SubmissionError` (never a
``RecursionError`` or ``MemoryError``); IPython's translation, which
re-tokenises a whole cell for every magic, is used only while it stays cheap
(a cell full of magics gets the linear line rules instead), so the time taken
is linear in the size of the notebook.

Beware: keeping a definition is not the same as not running code. Decorators,
default argument values and class bodies run when the definition runs (see
``course_lib/grading/SECURITY.md``); run untrusted submissions in a separate process.

Design and threat model: ``course_lib/grading/SECURITY.md``; the exercise/grader
contract: ``tests/exercises/CONTRACT.md`` of the repository.
"""

from __future__ import annotations

import ast
import json
import linecache
import re
import sys
import traceback
import types
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Iterable, Mapping

__all__ = ["SubmissionError", "extract_source", "load_namespace", "code_cell_numbers", "rename_cells",
           "rename_cells_with", "MAX_NOTEBOOK_BYTES", "read_notebook", "number_code_cells", "code_cells", "Chunk",
           "extract_chunks", "extract_cells", "assemble_source"]


class SubmissionError(ValueError):
    """A notebook that cannot be graded: missing, not a notebook, a syntax error,
    a definition that fails to run, or a required name that is not defined.

    The message says which notebook, what is wrong and where (cell number and
    line, counting the notebook's cells from 1, markdown cells included), in
    words meant for the student.
    """


# ---------------------------------------------------------------------------
# Reading the notebook
# ---------------------------------------------------------------------------
#: largest notebook file read (bytes): a little above the grader's intake cap (20 MiB), so that
#: the cap only stops files that the grader would not accept either.
MAX_NOTEBOOK_BYTES = 24 << 20
#: the "code cell N" numbering covers this many cells at most (a real notebook has a few dozen).
MAX_NUMBERED_CELLS = 10_000


def read_notebook(notebook_path: str | PathLike[str]) -> tuple[Path, dict]:
    """Return the path and the parsed JSON object of a notebook (nbformat 4, with a ``cells`` list).

    Bounded in time and memory for any file: the size is capped
    (:data:`MAX_NOTEBOOK_BYTES`), and JSON that is too deeply nested, holds
    oversized numbers or does not fit in memory is refused.

    Raises:
        SubmissionError: missing, too large, unreadable, not UTF-8 JSON, or not
            an nbformat-4 notebook. Never anything else for bad content.
    """
    path = Path(notebook_path)
    if not path.is_file():
        where = "it is a directory" if path.is_dir() else "no such file"
        raise SubmissionError(
            f"notebook {str(path)!r} not found ({where}). Save your notebook under its "
            f"original name ({path.name}) in the folder being checked."
        )
    text = _read_text(path)
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SubmissionError(
            f"notebook {str(path)!r} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            f"a .ipynb file must be saved by Jupyter, not edited by hand. Re-download the exercise "
            f"notebook and copy your code back into it."
        ) from None
    except (ValueError, RecursionError, MemoryError) as exc:  # too deep, a 5000-digit number, too big
        raise SubmissionError(
            f"notebook {str(path)!r} cannot be read: its JSON is not what Jupyter writes "
            f"({type(exc).__name__}: {str(exc)[:120]}). Re-download the exercise notebook and copy "
            f"your code back into it."
        ) from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise SubmissionError(
            f"{str(path)!r} is JSON but not a Jupyter notebook (expected an object with a "
            f"'cells' list, nbformat 4)"
        )
    major = nb.get("nbformat")
    if isinstance(major, int) and major < 4:
        raise SubmissionError(f"notebook {str(path)!r} has nbformat {major}; expected 4 (save it with a current Jupyter)")
    return path, nb


def _read_text(path: Path) -> str:
    """The file's text (UTF-8), refusing files over :data:`MAX_NOTEBOOK_BYTES`."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_NOTEBOOK_BYTES + 1)
    except OSError as exc:
        raise SubmissionError(f"notebook {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise SubmissionError(
            f"notebook {str(path)!r} is larger than {MAX_NOTEBOOK_BYTES >> 20} MiB; clear the cell "
            f"outputs (Edit > Clear All Outputs), save and try again."
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SubmissionError(f"notebook {str(path)!r} cannot be read as UTF-8 text: {exc}") from None


def number_code_cells(cells: list) -> dict[int, int]:
    """``{cell number: code-cell number}`` for the code cells among the first :data:`MAX_NUMBERED_CELLS`."""
    out: dict[int, int] = {}
    code = 0
    for number, cell in enumerate(cells[:MAX_NUMBERED_CELLS], start=1):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            code += 1
            out[number] = code
    return out


def code_cell_numbers(notebook: str | PathLike[str]) -> dict[int, int]:
    """Map this module's cell numbers (all cells, from 1) to code-cell numbers (code cells only, from 1).

    Jupyter shows no cell numbers, and a student counting "cell 4" rarely
    counts the markdown cells: messages to students (the check command's and
    the grader's feedback) say "code cell N" instead. Returns ``{}`` when the
    file cannot be read as a notebook (never raises for bad content).

    Args:
        notebook: path of an ``.ipynb`` file.
    """
    try:
        return number_code_cells(read_notebook(notebook)[1]["cells"])
    except SubmissionError:
        return {}


_CELL_REFERENCE = re.compile(r"(^|[^\w ]|(?<!code) )cell ([0-9]{1,9})\b")


def rename_cells_with(text: str, cell_numbers: Mapping[int, int]) -> str:
    """Rewrite every ``cell N`` in ``text`` as ``code cell M``, with ``cell_numbers`` (``{N: M}``).

    Pure: ``cell_numbers`` comes from :func:`code_cell_numbers` or from
    :func:`course_lib.grading.inspect_notebooks.inspect_notebooks`, so that the
    caller need not read the notebook again. Numbers not in the mapping, and
    text already saying ``code cell``, are left unchanged.
    """
    if not cell_numbers:
        return text

    def sub(m: re.Match) -> str:
        number = int(m.group(2))
        return f"{m.group(1)}code cell {cell_numbers[number]}" if number in cell_numbers else m.group(0)

    return _CELL_REFERENCE.sub(sub, text)


def rename_cells(text: str, notebook: str | PathLike[str]) -> str:
    """Rewrite every ``cell N`` (this module's numbering) in ``text`` as ``code cell M`` of ``notebook``.

    Numbers that are not code cells of ``notebook``, and text already saying
    ``code cell``, are left unchanged; an unreadable notebook leaves ``text``
    unchanged. Reads the notebook: with the numbering at hand, use
    :func:`rename_cells_with`.
    """
    return rename_cells_with(text, code_cell_numbers(notebook))


def code_cells(path: Path, nb: dict) -> list[tuple[int, str]]:
    """``[(cell_number, source), ...]`` of the code cells of a parsed notebook.

    ``cell_number`` counts every cell of the notebook from 1 (markdown cells
    included), which is the number a student sees when counting cells.

    Raises:
        SubmissionError: a cell that is not an object, a malformed ``source``.
    """
    cells: list[tuple[int, str]] = []
    for number, cell in enumerate(nb["cells"], start=1):
        if not isinstance(cell, dict):
            raise SubmissionError(f"notebook {str(path)!r}: cell {number} is not a cell object")
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise SubmissionError(f"notebook {str(path)!r}: cell {number} has a malformed 'source' field")
        cells.append((number, source))
    return cells


def _read_code_cells(notebook_path: str | PathLike[str]) -> tuple[Path, list[tuple[int, str]]]:
    """Return the path and ``[(cell_number, source), ...]`` of the code cells.

    Raises:
        SubmissionError: missing file, not UTF-8 JSON, not an nbformat-4 notebook.
    """
    path, nb = read_notebook(notebook_path)
    return path, code_cells(path, nb)


# ---------------------------------------------------------------------------
# IPython syntax -> Python
# ---------------------------------------------------------------------------
# No leading "\s*": the class already matches spaces, and "\s*[...\s...]+" is quadratic on a long blank line.
_SHELL_ASSIGN = re.compile(r"^[\w.,\s\[\]()*]+=\s*[!%]")
_HELP = re.compile(r"^\s*(\?{1,2}[\w.]+|[\w.]+\?{1,2})\s*$")
#: a line that IPython's token transforms might rewrite: an escape character first (shell, magic,
#: help, autocall), "= !"/"= %" (shell/magic assignment) or a trailing "?" (help). A superset.
_IPYTHON_LINE = re.compile(r"^[ \t\f]*[!?%,;/]|=[ \t\f]*[!%]|\?[ \t\f\\]*$", re.M)
#: IPython re-tokenises the whole cell once per transform, so a cell costs about
#: (candidate lines + 1) x its length. Above these (characters tokenised; IPython manages
#: 100 000 to 300 000 a second) the cell, or the rest of the notebook, uses the linear line rules.
_IPYTHON_CELL_COST = 50_000
_IPYTHON_NOTEBOOK_COST = 200_000


@dataclass
class _Budget:
    """What is left of one notebook's allowance for IPython's translation (in characters tokenised)."""

    left: int = _IPYTHON_NOTEBOOK_COST


def _strip_magics_fallback(source: str) -> str:
    """Replace IPython-only lines by ``pass``, keeping the line count.

    Linear in the size of the cell. Used when IPython is not importable and for
    cells too large or too full of magics for IPython's (quadratic) translation.
    A cell that starts with a cell magic (``%%``) is blanked entirely (its body
    need not be Python).
    """
    lines = source.split("\n")
    first = next((ln for ln in lines if ln.strip()), "")
    if first.lstrip().startswith("%%"):
        return "\n" * (len(lines) - 1)
    out = []
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith(("!", "%")) or _SHELL_ASSIGN.match(line) or _HELP.match(line):
            out.append(line[: len(line) - len(stripped)] + "pass")
        else:
            out.append(line)
    return "\n".join(out)


# Cell magics whose body is Python that Jupyter runs in the notebook's namespace:
# their definitions count (the magic line itself is dropped).
_PYTHON_BODY_CELL_MAGICS = re.compile(r"^%%(time|capture)\b")


def _to_python(source: str, budget: _Budget | None = None) -> str:
    """Translate one cell from IPython syntax to plain Python (as Jupyter runs it).

    IPython's own translation is used while its cost stays small (see
    :data:`_IPYTHON_CELL_COST`; ``budget`` is the notebook's allowance, spent
    here); otherwise :func:`_strip_magics_fallback`. Either way the time taken
    is linear in the size of the cell.
    """
    lines = source.split("\n")
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is not None and _PYTHON_BODY_CELL_MAGICS.match(lines[first].strip()):
        lines[first] = ""  # keep the line numbers of the body
        source = "\n".join(lines)
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - exercised through monkeypatching in the tests
        return _strip_magics_fallback(source)
    budget = budget if budget is not None else _Budget()
    candidates = sum(1 for _ in _IPYTHON_LINE.finditer(source))
    cost = (candidates + 1) * len(source)
    try:
        manager = TransformerManager()
        if candidates == 0:  # nothing for the token transforms: skip the tokeniser
            return _line_transforms(manager, source)
        if cost > min(_IPYTHON_CELL_COST, budget.left):
            return _strip_magics_fallback(_line_transforms(manager, source, cell_magic=False))
        budget.left -= cost
        return manager.transform_cell(source)
    except Exception:  # IPython gave up on odd input: keep going with the simple rules
        return _strip_magics_fallback(source)


def _line_transforms(manager, source: str, cell_magic: bool = True) -> str:
    """IPython's cheap line-based clean-up (leading blank lines and indentation, ``>>>`` prompts)
    and, with ``cell_magic``, its ``%%`` translation; ``transform_cell`` without the token transforms."""
    lines = (source if source.endswith("\n") else source + "\n").splitlines(keepends=True)
    for transform in manager.cleanup_transforms + (manager.line_transforms if cell_magic else []):
        lines = transform(lines)
    return "".join(lines)


# ---------------------------------------------------------------------------
# Choosing the statements
# ---------------------------------------------------------------------------
def _is_literal_assignment(node: ast.stmt) -> bool:
    def plain_targets(target: ast.expr) -> bool:
        if isinstance(target, ast.Name):
            return True
        if isinstance(target, (ast.Tuple, ast.List)):
            return all(plain_targets(t) for t in target.elts)
        return False

    if isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None and node.simple:
        targets, value = [node.target], node.value
    else:
        return False
    if not all(plain_targets(t) for t in targets):
        return False
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _is_kept(node: ast.stmt) -> bool:
    return isinstance(
        node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    ) or _is_literal_assignment(node)


def _is_future_import(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == "__future__"


@dataclass(frozen=True)
class Chunk:
    """A kept top-level statement of a code cell (see :func:`extract_cells`)."""

    cell: int  # cell number in the notebook (from 1)
    first_line: int  # line of the chunk's first line inside the cell (from 1)
    text: str


def extract_chunks(notebook_path: str | PathLike[str]) -> tuple[Path, list[str], list[Chunk]]:
    """Return the path, the ``__future__`` imports and the kept chunks, in order."""
    path, cells = _read_code_cells(notebook_path)
    return (path, *extract_cells(path, cells))


def extract_cells(path: Path, cells: list[tuple[int, str]]) -> tuple[list[str], list[Chunk]]:
    """The ``__future__`` imports and the kept chunks of ``cells`` (from :func:`code_cells`), in order."""
    futures: list[str] = []
    chunks: list[Chunk] = []
    budget = _Budget()
    for number, raw in cells:
        source = _to_python(raw, budget)
        try:
            # Compile the whole cell (as Jupyter would run it) so that errors only the
            # compiler sees ('return' outside a function, ...) are reported too.
            compile(source, f"cell {number}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
            tree = ast.parse(source, filename=f"cell {number}")
        except SyntaxError as exc:
            code_line = (exc.text or "").rstrip("\n")
            pointer = f"\n        {code_line.strip()}" if code_line.strip() else ""
            raise SubmissionError(
                f"notebook {str(path)!r}: cell {number} has a syntax error on line {exc.lineno}: "
                f"{exc.msg}{pointer}\nFix it (the cell would not run in Jupyter either), save the "
                f"notebook and check again."
            ) from None
        except (ValueError, OverflowError, RecursionError, MemoryError) as exc:  # e.g. null bytes
            raise SubmissionError(f"notebook {str(path)!r}: cell {number} cannot be compiled: {exc}") from None
        lines = source.split("\n")
        body = tree.body
        for i, node in enumerate(body):
            if not _is_kept(node):
                continue
            if _is_future_import(node):
                text = ast.unparse(node)
                if text not in futures:
                    futures.append(text)
                continue
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            end = node.end_lineno or node.lineno
            shares_line = node.col_offset != 0 or (i + 1 < len(body) and body[i + 1].lineno == end)
            if shares_line:  # e.g. "import os; print(os.name)": keep only the import
                chunks.append(Chunk(number, node.lineno, ast.unparse(node)))
            else:
                chunks.append(Chunk(number, start, "\n".join(lines[start - 1 : end])))
    return futures, chunks


def assemble_source(path: Path, futures: list[str], chunks: list[Chunk]) -> tuple[str, list[tuple[int, int]]]:
    """Join the chunks; also return, per line of the result, ``(cell, line in cell)`` (0, 0 for headers)."""
    out: list[str] = [f"# Graded code extracted from {path.name} by course_lib.grading.extract"]
    where: list[tuple[int, int]] = [(0, 0)]
    for text in futures:
        out.append(text)
        where.append((0, 0))
    previous_cell = None
    for chunk in chunks:
        if chunk.cell != previous_cell:
            out.append("")
            out.append(f"# --- cell {chunk.cell} ---")
            where += [(0, 0), (0, 0)]
            previous_cell = chunk.cell
        for offset, line in enumerate(chunk.text.split("\n")):
            out.append(line)
            where.append((chunk.cell, chunk.first_line + offset))
    return "\n".join(out) + "\n", where


def extract_source(notebook_path: str | PathLike[str]) -> str:
    """The graded code of a notebook, as one Python source string.

    Args:
        notebook_path: path of an ``.ipynb`` file (nbformat 4).

    Returns:
        Python source: a header comment, any ``from __future__`` imports
        (moved to the top), then for each code cell (marked ``# --- cell N ---``)
        its top-level imports, ``def``/``class`` definitions and literal constant
        assignments, in notebook order, with their original text (comments
        inside definitions included). Demo statements and IPython magics/shell
        commands are left out.

    Raises:
        SubmissionError: the file is missing or is not UTF-8 JSON / not a
            notebook; a code cell has a syntax error (message gives the cell
            number, counting all cells from 1, and the line in the cell).
    """
    path, futures, chunks = extract_chunks(notebook_path)
    return assemble_source(path, futures, chunks)[0]


def _locate(exc: BaseException, filename: str, where: list[tuple[int, int]]) -> str:
    """``" (cell 5, line 3)"`` for the deepest frame of ``exc`` inside the extracted code."""
    found = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == filename and frame.lineno and 0 < frame.lineno <= len(where):
            cell, line = where[frame.lineno - 1]
            if cell:
                found = f" (cell {cell}, line {line})"
    return found


def load_namespace(notebook_path: str | PathLike[str], required: Iterable[str] = ()) -> types.ModuleType:
    """Run a notebook's graded code in a fresh module and return that module.

    Only the statements kept by :func:`extract_source` run, once, in a new
    :class:`types.ModuleType` (nothing else of the notebook runs). The source is
    registered with :mod:`linecache` under the name
    ``"<extracted from PATH>"`` so that tracebacks show the student's lines.

    Args:
        notebook_path: path of an ``.ipynb`` file.
        required: names the module must define (e.g. the exercise functions).

    Returns:
        the module; its attributes are the notebook's definitions.

    Raises:
        SubmissionError: everything :func:`extract_source` raises; running the
            definitions raised an exception (message names the exception and,
            where possible, the cell and line); a name in ``required`` is not
            defined (all missing names are listed).
    """
    required = tuple(required)
    path, futures, chunks = extract_chunks(notebook_path)
    source, where = assemble_source(path, futures, chunks)
    filename = f"<extracted from {path}>"
    stem = re.sub(r"\W", "_", path.stem)
    module_name = f"submission_{stem}"
    module = types.ModuleType(module_name, f"Graded code of {path}")
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:  # only possible through odd interactions between cells
        cell, line = where[exc.lineno - 1] if exc.lineno and 0 < exc.lineno <= len(where) else (0, 0)
        place = f"cell {cell}, line {line}" if cell else f"line {exc.lineno} of the extracted code"
        raise SubmissionError(f"notebook {str(path)!r}: syntax error at {place}: {exc.msg}") from None
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    previous = sys.modules.get(module_name)
    sys.modules[module_name] = module  # dataclasses and typing look the module up while classes are made
    try:
        exec(code, module.__dict__)
    except Exception as exc:
        raise SubmissionError(
            f"notebook {str(path)!r}: running its definitions and imports raised "
            f"{type(exc).__name__}: {exc}{_locate(exc, filename, where)}. Only imports, "
            f"def/class statements and constants are run when checking; make sure they run "
            f"in a fresh kernel (Kernel > Restart & Run All)."
        ) from exc
    finally:
        if previous is None:
            sys.modules.pop(module_name, None)
        else:
            sys.modules[module_name] = previous
    missing = [name for name in required if not hasattr(module, name)]
    if missing:
        raise SubmissionError(
            f"notebook {str(path)!r} does not define {', '.join(repr(m) for m in missing)}. "
            f"Keep each exercise's function name and signature as given (do not rename it "
            f"or delete its cell), then save the notebook."
        )
    return module
