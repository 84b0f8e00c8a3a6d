"""Measure every listing the book displays, and fail when one is over the limits.

The chapters display ``course_lib``'s own source with ``show_source(obj)``.
This script finds each such call in ``book/*.ipynb``, resolves ``obj`` the way
the chapter does (it runs only the notebook's import statements), and prints
for each listing:

* ``code``: lines of code, not counting docstrings, comments and blank lines;
* ``depth``: the deepest nesting of compound statements (``if``, ``for``,
  ``while``, ``with``, ``try``, ``match``) inside a function body — a flat
  function body is depth 0, a loop with an ``if`` inside is depth 2;
* ``public``: no part of the shown name starts with an underscore.

It also lists every import of an underscore name from another module of
``course_lib`` (a private name used across modules should be public), and
every imported name that the other module's ``__all__`` does not list.

Usage::

    python scripts/listing_metrics.py            # table; exit 1 when over the limits
    python scripts/listing_metrics.py --max-code 60 --max-depth 3
"""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import json
import sys
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)
if sys.version_info >= (3, 11):
    COMPOUND = COMPOUND + (ast.TryStar,)


@dataclass
class Listing:
    chapter: str
    expression: str
    qualname: str
    code_lines: int
    depth: int
    public: bool


def _code_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    sources = []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        text = "".join(cell["source"])
        # IPython magics and shell escapes are not Python
        lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in text.splitlines()]
        sources.append("\n".join(lines))
    return sources


def _show_source_calls(tree: ast.AST) -> list[ast.expr]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == "show_source":
                found.append(node.args[0])
    return found


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def count_code_lines(source: str) -> int:
    """Lines holding code: not blank, not only a comment, not part of a docstring."""
    source = textwrap.dedent(source)
    docstrings = _docstring_lines(ast.parse(source))
    code: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in skip:
            continue
        for line in range(tok.start[0], tok.end[0] + 1):
            if line not in docstrings:
                code.add(line)
    return len(code)


def nesting_depth(source: str) -> int:
    """Deepest nesting of compound statements inside any function body of ``source``."""

    def depth(node: ast.AST, level: int) -> int:
        best = level
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                best = max(best, depth(child, 0))
            elif isinstance(child, COMPOUND):
                best = max(best, depth(child, level + 1))
            else:
                best = max(best, depth(child, level))
        return best

    return depth(ast.parse(textwrap.dedent(source)), 0)


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _is_public(obj: object) -> bool:
    """Its own name is public, and so is its module — or a public package above re-exports it."""
    if any(_private(p) for p in obj.__qualname__.split(".")):
        return False
    module = obj.__module__.split(".")
    if not any(_private(p) for p in module):
        return True
    top = obj.__qualname__.split(".")[0]
    while module and any(_private(p) for p in module):
        module = module[:-1]
    package = sys.modules.get(".".join(module))
    return package is not None and top in getattr(package, "__all__", ())


def _resolve(expression: str, namespace: dict) -> object:
    return eval(expression, namespace)  # noqa: S307 - the book's own expressions


def measure_book(book: Path) -> list[Listing]:
    listings = []
    for path in sorted(book.glob("[0-9][0-9]_*.ipynb")):
        namespace: dict = {}
        cells = _code_cells(path)
        for source in cells:
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
            exec(compile(ast.Module(body=imports, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
        for source in cells:
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            for arg in _show_source_calls(tree):
                expression = ast.unparse(arg)
                obj = inspect.unwrap(_resolve(expression, namespace))
                qualname = f"{obj.__module__}.{obj.__qualname__}"
                source_text = inspect.getsource(obj)
                public = _is_public(obj)
                listings.append(
                    Listing(path.stem[:2], expression, qualname, count_code_lines(source_text),
                            nesting_depth(source_text), public)
                )
    return listings


def private_imports(package: Path) -> list[str]:
    """``from <course_lib module> import _name`` across modules, as ``file:line name``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            internal = node.level > 0 or (node.module or "").startswith("course_lib")
            if not internal:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno} {alias.name}")
    return found


def imports_missing_from_all(package: Path) -> list[str]:
    """Names one ``course_lib`` module imports from another that the other's ``__all__`` does not list."""
    import importlib
    import importlib.util

    found = []
    for path in sorted(package.rglob("*.py")):
        here = list(path.relative_to(package.parent).with_suffix("").parts)
        if path.name == "__init__.py":
            here[-1] = "__init__"  # a package's relative imports start from the package itself
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not (node.level or (node.module or "").startswith("course_lib")):
                continue
            base = here[: len(here) - node.level] if node.level else []
            name = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
            module = importlib.import_module(name)
            listed = getattr(module, "__all__", ())
            for alias in node.names:
                if alias.name == "*" or alias.name.startswith("__"):
                    continue
                if hasattr(module, "__path__") and importlib.util.find_spec(f"{name}.{alias.name}"):
                    continue  # a submodule
                if alias.name not in listed:
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno} {name}.{alias.name}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-code", type=int, default=60, help="most lines of code a listing may have")
    parser.add_argument("--max-depth", type=int, default=3, help="deepest nesting a listing may have")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    listings = measure_book(ROOT / "book")
    width = max(len(item.qualname) for item in listings)
    print(f"{'ch':<3} {'listing':<{width}} {'code':>5} {'depth':>5} public")
    over = []
    for item in listings:
        bad = item.code_lines > args.max_code or item.depth > args.max_depth or not item.public
        mark = "  <-- over the limits" if bad else ""
        print(f"{item.chapter:<3} {item.qualname:<{width}} {item.code_lines:>5} {item.depth:>5} "
              f"{'yes' if item.public else 'NO':>6}{mark}")
        if bad:
            over.append(item)
    private = private_imports(ROOT / "course_lib")
    unlisted = imports_missing_from_all(ROOT / "course_lib")
    print(f"\n{len(listings)} listings; longest {max(i.code_lines for i in listings)} lines of code, "
          f"deepest {max(i.depth for i in listings)}; limits: {args.max_code} lines, depth {args.max_depth}, public")
    if private:
        print(f"{len(private)} import(s) of a private name from another course_lib module:")
        for line in private:
            print(f"  {line}")
    if unlisted:
        print(f"{len(unlisted)} import(s) of a name missing from the other module's __all__:")
        for line in unlisted:
            print(f"  {line}")
    if over or private or unlisted:
        print(f"FAILED: {len(over)} listing(s) over the limits, {len(private)} private import(s), "
              f"{len(unlisted)} import(s) not in __all__", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
