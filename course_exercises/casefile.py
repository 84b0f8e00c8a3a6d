"""The cases as one source, and its student copy: the same cases, with every expected value removed.

The process that runs student code must hold no reference - not in memory, not
on disk - because student code controls that whole process. A cases file
(the course's :data:`CASES_FILE`, or an instructor's ``--extra-tests`` file)
registers each case with its ``produce`` (calls the student's code on inputs)
and its ``expected`` (computes the answer).

The course's registry is split: :data:`CASES_FILE` (``cases/registry.py``, the
framework) names its parts in a literal ``PARTS`` tuple (``shared.py``, then
one file per chapter, in the same folder). :func:`cases_parts` reads them,
leaving out their relative imports (the names live in the one module they all
run in); :func:`load_parts` runs them as one module, :func:`cases_source`
joins them into one text - what the grader fingerprints, hands its reference
run, and strips. A file without ``PARTS`` is its own only part.

:func:`student_copy` rewrites such a source so that the child gets only the
first half, by *name*, never by argument position:

1. every keyword argument ``expected=``, ``robust=`` or ``standins=`` of any call
   becomes ``None`` (a stand-in is the course's own definition of an exercise
   that another exercise calls, which the grader sends to the child only once
   that exercise's cases are closed);
2. the registration calls ``Case(...)`` and ``_add(...)`` may pass by position
   only their leading, harmless parameters (:data:`POSITIONAL`); the rest by
   name, from :data:`SAFE_KEYWORDS` or :data:`STRIPPED_KEYWORDS`. A call with
   more positional arguments, a ``*args`` or ``**kwargs``, or any other keyword
   is refused (:class:`StripRefused`), and so is a definition of ``Case`` or
   ``_add`` in the source whose positional parameters are not exactly those,
   that takes ``*args``/``**kwargs``, or that has a parameter of another name:
   renaming or reordering the parameters stops the grader instead of handing
   a reference to the child;
3. top-level functions, classes and assignments that nothing else refers to
   any more (except the registry's own names, :data:`KEPT_NAMES`) - the expected-value functions, hand-worked answers, reference
   implementations, the stand-ins' source texts - are dropped, until nothing changes;
4. comments disappear (the source is regenerated with :func:`ast.unparse`).

Instructors writing an extra cases file: pass expected values only as
``expected=`` (and ``robust=``) keywords, and keep answers out of the data
that ``produce`` reads. The grader's reference run also loads each student
copy and stops when one still holds an expected value (an alias of ``Case``,
say, which this rewrite cannot see).

Design and threat model: ``course_grader/SECURITY.md``.
"""

from __future__ import annotations

import __future__
import ast
from pathlib import Path
from types import ModuleType

__all__ = ["student_copy", "StripRefused", "STRIPPED_KEYWORDS", "SAFE_KEYWORDS", "POSITIONAL", "KEPT_NAMES",
           "CASES_FILE", "CASES_DIR", "cases_parts", "cases_source", "load_parts"]

#: the course's cases registry, shipped in the package (``course_exercises/cases/registry.py``, the
#: framework), whose ``PARTS`` (``shared.py``, ``ch01_motivation.py`` ... beside it) register the cases; they
#: hold every case's ``expected()``, so the grader covers their whole folder (:data:`CASES_DIR`, byte-code
#: cache included) in the process that runs a student's code
CASES_DIR = Path(__file__).resolve().parent / "cases"
CASES_FILE = CASES_DIR / "registry.py"

#: keyword arguments whose value only the trusted side may see
STRIPPED_KEYWORDS = ("expected", "robust", "standins")
#: registration call -> the parameters it may get by position, in order (none of them secret)
POSITIONAL = {"Case": ("id", "chapter", "exercise", "points", "requires", "produce"),
              "_add": ("id", "exercise", "points", "produce")}
#: the other parameters a registration call may name: nothing secret
SAFE_KEYWORDS = frozenset({"rtol", "atol", "hint"})
#: names the grader's child reads from a cases module: never dropped
KEPT_NAMES = frozenset({"CASES", "NOTEBOOKS", "EXERCISES", "Case", "Draws", "drawing", "to_array"})
_DOCSTRING = "Student copy of a cases file, made by the course grader: every expected value was removed."


class StripRefused(ValueError):
    """A cases source in which the stripper cannot be sure to find every expected value by name."""


# ---------------------------------------------------------------------------
# The parts of a cases registry
# ---------------------------------------------------------------------------
def _literal_parts(tree: ast.Module, path: Path) -> tuple[str, ...]:
    """The file names of a top-level literal ``PARTS = (...)`` (empty without one)."""
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "PARTS" and getattr(node, "value", None) is not None:
            names = ast.literal_eval(node.value)
            bad = [n for n in names if not isinstance(n, str) or "/" in n or "\\" in n or not n.endswith(".py")
                   or n.startswith(".")]
            if bad or not isinstance(names, (tuple, list)):
                raise ValueError(f"{path}: PARTS must name .py files beside it; got {bad or names!r}")
            return tuple(names)
    return ()


def _blank(text: str, nodes: list[ast.stmt]) -> str:
    """``text`` with the lines of ``nodes`` emptied (line numbers stay)."""
    lines = text.split("\n")
    for node in nodes:
        for i in range(node.lineno - 1, node.end_lineno):
            lines[i] = ""
    return "\n".join(lines)


def cases_parts(path: str | Path) -> list[tuple[Path, str]]:
    """``(file, text)`` of a cases file and of each file its ``PARTS`` names, in order; a part's relative imports
    (and, after the first file, ``from __future__`` imports) are emptied lines, so line numbers stay true.

    Raises:
        SyntaxError: a file is not Python.
        ValueError: ``PARTS`` names something other than ``.py`` files beside ``path``, or a missing file.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    out = [(path, text)]
    for name in _literal_parts(ast.parse(text, filename=str(path)), path):
        part = path.parent / name
        if not part.is_file():
            raise ValueError(f"{path}: PARTS names {name!r}, which is not a file beside it")
        source = part.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(part))
        drop = [n for n in tree.body if isinstance(n, ast.ImportFrom) and (n.level or n.module == "__future__")]
        out.append((part, _blank(source, drop)))
    return out


def cases_source(path: str | Path) -> str:
    """The cases file ``path`` and its parts as one source text (what the grader fingerprints and strips)."""
    return "\n".join(text.rstrip("\n") + "\n" for _, text in cases_parts(path))


def load_parts(module: ModuleType, path: str | Path) -> None:
    """Run the cases file ``path`` and its parts, in order, in ``module``'s namespace (tracebacks name each file)."""
    for i, (part, text) in enumerate(cases_parts(path)):
        flags = __future__.annotations.compiler_flag if i else 0
        code = compile(text, str(part), "exec", flags=flags, dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - the course's own trusted cases files


# ---------------------------------------------------------------------------
# The student copy
# ---------------------------------------------------------------------------
def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _check_registration_call(node: ast.Call, name: str, where: str) -> None:
    """Refuse a call of ``Case``/``_add`` that could pass a secret other than by a keyword this stripper removes."""
    positional = POSITIONAL[name]
    allowed = set(positional) | SAFE_KEYWORDS | set(STRIPPED_KEYWORDS)
    if any(isinstance(a, ast.Starred) for a in node.args):
        raise StripRefused(f"{where}: {name}(*...) hides which arguments it passes; pass them by name")
    if len(node.args) > len(positional):
        raise StripRefused(f"{where}: {name}(...) passes {len(node.args)} arguments by position; only "
                           f"{len(positional)} ({', '.join(positional)}) may be, the rest by name "
                           f"({', '.join(k + '=' for k in STRIPPED_KEYWORDS)} among them)")
    for kw in node.keywords:
        if kw.arg is None:
            raise StripRefused(f"{where}: {name}(**...) hides which arguments it passes; pass them by name")
        if kw.arg not in allowed:
            raise StripRefused(f"{where}: {name}(...) passes an unknown keyword {kw.arg!r}, which might carry an "
                               f"expected value; the known ones are {', '.join(sorted(allowed))}")


def _signature(node: ast.FunctionDef | ast.ClassDef) -> tuple[list[str], list[str], bool]:
    """(positional parameters, keyword-only parameters, takes ``*args``/``**kwargs``) of a function or a dataclass."""
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is not None:
            positional, keyword, varargs = _signature(init)
            return positional[1:], keyword, varargs  # (self)
        kw_only = any(isinstance(d, ast.Call) and any(k.arg == "kw_only" and not (isinstance(k.value, ast.Constant)
                                                                                  and k.value.value is False)
                                                      for k in d.keywords) for d in node.decorator_list)
        positional, keyword = [], []
        for field in node.body:
            if not (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)):
                continue
            annotation = ast.unparse(field.annotation)
            if annotation.split(".")[-1] == "KW_ONLY":
                kw_only = True
            elif not annotation.startswith(("ClassVar", "typing.ClassVar")):
                (keyword if kw_only else positional).append(field.target.id)
        return positional, keyword, False
    a = node.args
    return ([p.arg for p in a.posonlyargs + a.args], [p.arg for p in a.kwonlyargs],
            a.vararg is not None or a.kwarg is not None)


def _check_registration_definition(node: ast.FunctionDef | ast.ClassDef, where: str) -> None:
    """Refuse a ``Case``/``_add`` whose parameters would let a secret pass by position or under another name."""
    name = node.name
    positional, keyword, varargs = _signature(node)
    expected_positional = list(POSITIONAL[name])
    if varargs:
        raise StripRefused(f"{where}: {name} takes *args or **kwargs; the stripper cannot see what they carry")
    if positional != expected_positional:
        raise StripRefused(f"{where}: {name}'s positional parameters are ({', '.join(positional)}); the stripper "
                           f"accepts exactly ({', '.join(expected_positional)}), everything else keyword-only (after *)")
    unknown = sorted(set(keyword) - SAFE_KEYWORDS - set(STRIPPED_KEYWORDS))
    missing = sorted(set(STRIPPED_KEYWORDS) - set(keyword))
    if unknown or missing:
        raise StripRefused(f"{where}: {name}'s keyword-only parameters {keyword} do not match what the stripper "
                           f"knows (unknown: {unknown or 'none'}; not found: {missing or 'none'}): "
                           f"{', '.join(STRIPPED_KEYWORDS)} are removed by these names only")


class _DropExpected(ast.NodeTransformer):
    """Replace expected values in calls by ``None``, by keyword name; refuse what could hide one."""

    def __init__(self, filename: str):
        self.filename = filename

    def _where(self, node: ast.AST) -> str:
        return f"{self.filename}, line {getattr(node, 'lineno', '?')}"

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        name = _call_name(node)
        if name in POSITIONAL:
            _check_registration_call(node, name, self._where(node))
        for kw in node.keywords:
            if kw.arg in STRIPPED_KEYWORDS:
                kw.value = ast.Constant(None)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        if node.name in POSITIONAL:
            _check_registration_definition(node, self._where(node))
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        if node.name in POSITIONAL:
            _check_registration_definition(node, self._where(node))
        self.generic_visit(node)
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
        StripRefused: ``source`` calls or defines ``Case``/``_add`` so that an expected value could pass other than
            by a keyword this function removes (see the module's docstring).
    """
    tree = ast.parse(source, filename=filename)
    from_future = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    tree.body = [n for n in tree.body if n not in from_future]
    tree = _DropExpected(filename).visit(tree)
    body = list(tree.body)
    while True:
        counts = _uses_outside_self(body)
        kept = [n for n in body if not _defined_names(n) or _defined_names(n) & KEPT_NAMES
                or any(counts.get(name) for name in _defined_names(n))]
        kept = [n for n in kept if _defined_names(n) not in ({"__all__"}, {"PARTS"})]
        if len(kept) == len(body):
            break
        body = kept
    tree.body = from_future + body
    _strip_docstrings(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"
