"""The student copy of a cases file: the same cases, with every expected value removed.

The process that runs student code must hold no reference - not in memory, not
on disk - because student code controls that whole process. A cases file
(the course's :data:`CASES_FILE`, or an instructor's ``--extra-tests`` file)
registers each case with its ``produce`` (calls the student's code on inputs)
and its ``expected`` (computes the answer). :func:`student_copy` rewrites the
source so that the child gets only the first half:

1. in every call, an ``expected=``, ``robust=`` or ``standins=`` keyword
   argument becomes ``None``, and so do the matching positional arguments of
   ``Case(...)`` (7th, 11th, 12th) and of the registry helper ``_add(...)``
   (5th, 9th, 10th); a stand-in is the course's own definition of an
   exercise that another exercise calls, which the grader sends to the child
   only once that exercise's cases are closed;
2. top-level functions, classes and assignments that nothing else refers to
   any more (except the registry's own names, :data:`KEPT_NAMES`) - the expected-value functions, hand-worked answers, reference
   implementations, the stand-ins' source texts - are dropped, until nothing changes;
3. comments disappear (the source is regenerated with :func:`ast.unparse`).

Instructors writing an extra cases file: pass expected values only through
``expected=`` (or ``Case``'s 7th argument), and keep answers out of the data
that ``produce`` reads.

Design and threat model: ``course_grader/SECURITY.md``.
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["student_copy", "STRIPPED_KEYWORDS", "KEPT_NAMES", "CASES_FILE", "CASES_DIR"]

#: the course's cases registry, shipped in the package (``course_exercises/cases/cases.py``); it holds
#: every case's ``expected()``, so the grader covers its whole folder (:data:`CASES_DIR`, byte-code cache
#: included) in the process that runs a student's code
CASES_FILE = Path(__file__).resolve().parent / "cases" / "cases.py"
CASES_DIR = CASES_FILE.parent

#: keyword arguments whose value only the trusted side may see
STRIPPED_KEYWORDS = ("expected", "robust", "standins")
#: call name -> positions of its positional arguments that are expected values, robustness checks or stand-ins
_STRIPPED_POSITIONS = {"Case": (6, 10, 11), "_add": (4, 8, 9)}
#: names the grader's child reads from a cases module: never dropped
KEPT_NAMES = frozenset({"CASES", "NOTEBOOKS", "EXERCISES", "Case", "Draws", "drawing", "to_array"})
_DOCSTRING = "Student copy of a cases file, made by the course grader: every expected value was removed."


class _DropExpected(ast.NodeTransformer):
    """Replace expected values in registration calls by ``None``."""

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        for i in _STRIPPED_POSITIONS.get(name, ()):
            if i < len(node.args) and not isinstance(node.args[i], ast.Starred):
                node.args[i] = ast.Constant(None)
        for kw in node.keywords:
            if kw.arg in STRIPPED_KEYWORDS:
                kw.value = ast.Constant(None)
        return node


def _defined_names(node: ast.stmt) -> set[str]:
    """Names a removable top-level statement defines (empty: the statement is always kept)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    names = set()
    for target in targets:
        if not isinstance(target, ast.Name):
            return set()
        names.add(target.id)
    return names


def _used_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _strip_docstrings(tree: ast.Module) -> None:
    tree.body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                                               and isinstance(n.value.value, str))]
    tree.body.insert(0, ast.Expr(ast.Constant(_DOCSTRING)))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                node.body = node.body[1:] or [ast.Pass()]


def _uses_outside_self(body: list[ast.stmt]) -> dict[str, int]:
    """name -> how many top-level statements other than its own definition use it."""
    counts: dict[str, int] = {}
    for node in body:
        own = _defined_names(node)
        for name in _used_names(node) - own:
            counts[name] = counts.get(name, 0) + 1
    return counts


def student_copy(source: str, filename: str = "<cases>") -> str:
    """The source of ``source``'s cases file with every expected value and everything only it needs removed.

    Raises:
        SyntaxError: ``source`` is not Python.
    """
    tree = ast.parse(source, filename=filename)
    from_future = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    tree.body = [n for n in tree.body if n not in from_future]
    tree = _DropExpected().visit(tree)
    body = list(tree.body)
    while True:
        counts = _uses_outside_self(body)
        kept = [n for n in body if not _defined_names(n) or _defined_names(n) & KEPT_NAMES
                or any(counts.get(name) for name in _defined_names(n))]
        kept = [n for n in kept if _defined_names(n) != {"__all__"}]
        if len(kept) == len(body):
            break
        body = kept
    tree.body = from_future + body
    _strip_docstrings(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"
