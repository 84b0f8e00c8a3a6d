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
``course_grader/SECURITY.md``); run untrusted submissions in a separate process.

Design and threat model: ``course_grader/SECURITY.md``; the exercise/grader
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

__all__ = ["SubmissionError", "SkippedCell", "load_submission", "extract_source", "load_namespace", "code_cell_numbers", "rename_cells",
           "rename_cells_with", "MAX_NOTEBOOK_BYTES", "read_notebook", "number_code_cells", "code_cells", "Chunk",
           "extract_chunks", "extract_cells", "extract_cells_noting", "assemble_source", "install_standins",
           "remove_standins"]


class SubmissionError(ValueError):
    """A notebook that cannot be graded: missing, not a notebook, a syntax error,
    a definition that fails to run, or a required name that is not defined.

    The message says which notebook, what is wrong and where (cell number and
    line, counting the notebook's cells from 1, markdown cells included), in
    words meant for the student.

    ``status`` says which: ``"missing"`` (no such file), ``"unreadable"`` (not
    UTF-8 JSON, not an nbformat-4 notebook, a malformed cell) or ``"incomplete"``
    (a required name is not defined). A syntax error or a failing definition in
    one cell is *not* a :class:`SubmissionError` any more: that cell is skipped
    (see :func:`load_submission`).
    """

    def __init__(self, message: str, status: str = "unreadable") -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class SkippedCell:
    """A code cell whose definitions are not graded: it does not parse, or running its definitions raised.

    ``message`` is meant for the student ("cell N" counts all cells from 1, as
    everywhere in this module; callers rename it to "code cell M").
    """

    cell: int
    reason: str  # "syntax" or "raised"
    message: str


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
            f"original name ({path.name}) in the folder being checked.", status="missing"
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
    :func:`course_grader.inspect_notebooks.inspect_notebooks`, so that the
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
    """Return the path, the ``__future__`` imports and the kept chunks, in order (cells that do not parse are left out)."""
    path, cells = _read_code_cells(notebook_path)
    return (path, *extract_cells(path, cells))


def extract_cells(path: Path, cells: list[tuple[int, str]]) -> tuple[list[str], list[Chunk]]:
    """The ``__future__`` imports and the kept chunks of ``cells`` (from :func:`code_cells`), in order.

    A cell that does not parse is left out (:func:`extract_cells_noting` says which).
    """
    futures, chunks, _skipped = extract_cells_noting(path, cells)
    return futures, chunks


def _syntax_note(path: Path, number: int, exc: SyntaxError) -> str:
    code_line = (exc.text or "").rstrip("\n")
    pointer = f"\n        {code_line.strip()[:200]}" if code_line.strip() else ""
    return (f"notebook {str(path)!r}: cell {number} has a syntax error on line {exc.lineno}: {exc.msg}{pointer}\n"
            f"That cell was skipped: its definitions are not graded (the rest of the notebook is). Fix it (the "
            f"cell would not run in Jupyter either), save the notebook and check again.")


def extract_cells_noting(path: Path, cells: list[tuple[int, str]]
                         ) -> tuple[list[str], list[Chunk], list[SkippedCell]]:
    """:func:`extract_cells`, and one :class:`SkippedCell` per code cell that does not parse (or compile)."""
    futures: list[str] = []
    chunks: list[Chunk] = []
    skipped: list[SkippedCell] = []
    budget = _Budget()
    for number, raw in cells:
        source = _to_python(raw, budget)
        try:
            # Compile the whole cell (as Jupyter would run it) so that errors only the
            # compiler sees ('return' outside a function, ...) are reported too.
            compile(source, f"cell {number}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
            tree = ast.parse(source, filename=f"cell {number}")
        except SyntaxError as exc:
            skipped.append(SkippedCell(number, "syntax", _syntax_note(path, number, exc)))
            continue
        except (ValueError, OverflowError, RecursionError, MemoryError) as exc:  # e.g. null bytes
            skipped.append(SkippedCell(number, "syntax", (
                f"notebook {str(path)!r}: cell {number} cannot be compiled ({type(exc).__name__}: {str(exc)[:200]}). "
                f"That cell was skipped: its definitions are not graded (the rest of the notebook is).")))
            continue
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
    return futures, chunks, skipped


def assemble_source(path: Path, futures: list[str], chunks: list[Chunk]) -> tuple[str, list[tuple[int, int]]]:
    """Join the chunks; also return, per line of the result, ``(cell, line in cell)`` (0, 0 for headers)."""
    out: list[str] = [f"# Graded code extracted from {path.name} by course_exercises.extract"]
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


def _bound_names(text: str) -> set[str]:
    """The top-level names a kept chunk binds (def/class names, import aliases, assignment targets)."""
    names: set[str] = set()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return names
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _future_flags(futures: list[str]) -> int:
    import __future__

    flags = 0
    for text in futures:
        for name in text.replace("from __future__ import", "").replace("(", "").replace(")", "").split(","):
            feature = getattr(__future__, name.strip().split(" as ")[0], None)
            flags |= getattr(feature, "compiler_flag", 0)
    return flags


def load_submission(notebook_path: str | PathLike[str], required: Iterable[str] = ()
                    ) -> tuple[types.ModuleType, list[SkippedCell]]:
    """Run a notebook's graded code in a fresh module; return the module and the cells that were skipped.

    Only the statements kept by :func:`extract_source` run, once, in a new
    :class:`types.ModuleType` (nothing else of the notebook runs), **one code
    cell at a time**: a cell that does not parse is skipped, and so are the
    definitions of a cell whose kept statements raise when they run (the
    names it bound are restored to what they were before it ran) - each with
    one :class:`SkippedCell` note; the other cells are graded. The source is
    registered with :mod:`linecache` under the name ``"<extracted from PATH>"``
    so that tracebacks show the student's lines.

    Args:
        notebook_path: path of an ``.ipynb`` file.
        required: names the module must define (e.g. the exercise functions).

    Raises:
        SubmissionError: the notebook cannot be read at all (``status``
            ``missing`` or ``unreadable``), or a name in ``required`` is not
            defined (``incomplete``; all missing names are listed).
    """
    required = tuple(required)
    path, cells = _read_code_cells(notebook_path)
    futures, chunks, skipped = extract_cells_noting(path, cells)
    source, where = assemble_source(path, futures, chunks)
    filename = f"<extracted from {path}>"
    stem = re.sub(r"\W", "_", path.stem)
    module_name = f"submission_{stem}"
    module = types.ModuleType(module_name, f"Graded code of {path}")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    flags = _future_flags(futures)
    # one block per cell: (cell, first line in the assembled source (from 1), last line)
    blocks: list[tuple[int, int, int]] = []
    for index, (cell, _line) in enumerate(where, start=1):
        if not cell:
            continue
        if blocks and blocks[-1][0] == cell and blocks[-1][2] == index - 1:
            blocks[-1] = (cell, blocks[-1][1], index)
        else:
            blocks.append((cell, index, index))
    lines = source.split("\n")
    previous = sys.modules.get(module_name)
    sys.modules[module_name] = module  # dataclasses and typing look the module up while classes are made
    try:
        for cell, first, last in blocks:
            text = "\n".join(lines[first - 1:last])
            try:  # padded, so that line numbers are those of the assembled source
                code = compile("\n" * (first - 1) + text, filename, "exec", flags=flags, dont_inherit=True)
            except (SyntaxError, ValueError) as exc:  # only possible through odd interactions between chunks
                skipped.append(SkippedCell(cell, "syntax", (
                    f"notebook {str(path)!r}: cell {cell} cannot be compiled ({type(exc).__name__}: "
                    f"{getattr(exc, 'msg', exc)}). That cell was skipped: its definitions are not graded.")))
                continue
            names = _bound_names(text)
            before = {name: module.__dict__[name] for name in names if name in module.__dict__}
            try:
                exec(code, module.__dict__)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - the student's definitions may raise anything
                for name in names:  # this cell's definitions are lost, the earlier ones come back
                    if name in before:
                        module.__dict__[name] = before[name]
                    else:
                        module.__dict__.pop(name, None)
                try:
                    what = f"{type(exc).__name__}: {str(exc)[:300]}"
                except Exception:  # noqa: BLE001 - an exception whose __str__ raises
                    what = type(exc).__name__
                lost = ", ".join(sorted(names)[:8]) or "nothing"
                skipped.append(SkippedCell(cell, "raised", (
                    f"notebook {str(path)!r}: running the definitions and imports of cell {cell} raised "
                    f"{what}{_locate(exc, filename, where)}. That cell was skipped: its definitions ({lost}) are "
                    f"not graded (the rest of the notebook is). Only imports, def/class statements and constants "
                    f"are run when checking; make sure they run in a fresh kernel (Kernel > Restart & Run All).")))
    finally:
        if previous is None:
            sys.modules.pop(module_name, None)
        else:
            sys.modules[module_name] = previous
    skipped.sort(key=lambda s: s.cell)
    missing = [name for name in required if not hasattr(module, name)]
    if missing:
        raise SubmissionError(
            f"notebook {str(path)!r} does not define {', '.join(repr(m) for m in missing)}. "
            f"Keep each exercise's function name and signature as given (do not rename it "
            f"or delete its cell), then save the notebook.", status="incomplete"
        )
    return module, skipped


def load_namespace(notebook_path: str | PathLike[str], required: Iterable[str] = ()) -> types.ModuleType:
    """The module of :func:`load_submission` (the notes on skipped cells are dropped)."""
    return load_submission(notebook_path, required)[0]


def install_standins(module: types.ModuleType, standins: Mapping[str, str]) -> dict[str, object]:
    """Put the course's definition of each named function into ``module`` in place of the student's.

    ``standins`` maps a function name to the source text of a definition
    (the ``_STANDIN_*`` constants of the cases file). Each source runs in a
    namespace of its own (its imports never replace the student's names) and
    only the named function is copied into ``module``, so the student's
    functions that look that name up in their globals call the course's
    definition. Returns what to pass to :func:`remove_standins` to put the
    student's definitions back.

    Raises:
        ValueError: a source does not define its name.
    """
    import builtins

    previous: dict[str, object] = {}
    for name, source in standins.items():
        scope: dict[str, object] = {"__name__": f"course_standin_{name}", "__builtins__": builtins}
        exec(compile(source, f"<course's {name}>", "exec", dont_inherit=True), scope)
        if not callable(scope.get(name)):
            raise ValueError(f"the stand-in source for {name} does not define it")
        previous[name] = module.__dict__.get(name, _ABSENT)
        module.__dict__[name] = scope[name]
    return previous


_ABSENT = object()


def remove_standins(module: types.ModuleType, previous: Mapping[str, object]) -> None:
    """Undo :func:`install_standins`: the student's own definitions (or their absence) come back."""
    for name, value in previous.items():
        if value is _ABSENT:
            module.__dict__.pop(name, None)
        else:
            module.__dict__[name] = value
