"""Structural checks of a submission's graded code, by reading it (``ast``), never running it.

Run in the grader's parent on the source that
:func:`course_lib.grading.extract.extract_source` keeps from a notebook. They
produce *flags* for the instructor - they never change a score:

* ``delegates``: an exercise function (or a helper it calls, or a class it
  uses, defined in the same notebook) refers to the PyTorch built-in or the
  ``course_lib`` function that the exercise asks the student to re-implement,
  e.g. ``F.scaled_dot_product_attention`` in exercise 4.1, ``nn.LayerNorm`` in
  7.1, ``F.cross_entropy(..., label_smoothing=...)`` in 9.1. Names are
  resolved through the notebook's imports (``import torch.nn.functional as F``,
  ``from torch.nn import LayerNorm as LN`` ...) and ``getattr`` with a literal name.
* ``dynamic``: an exercise function uses ``eval``/``exec``/``__import__``/
  ``importlib`` or ``getattr`` with a computed name (which hides what it calls).
* ``reads-outside``: the graded code opens or loads a file by an absolute path,
  a ``..`` path or a ``~`` path (``open``, ``Path``, ``np.load``,
  ``torch.load`` ...), or holds such a path as a string.
* ``solutions``: the graded code mentions the course's ``solutions`` folder.

Source: the autograder issue ("structural checks flagged for the instructor").
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = ["Flag", "BUILTINS_BY_FUNCTION", "check_source"]

_SDPA = ("torch.nn.functional.scaled_dot_product_attention", "torch._C._nn.scaled_dot_product_attention",
         "course_lib.attention.scaled_dot_product_attention")
_MHA = ("torch.nn.MultiheadAttention", "torch.nn.modules.activation.MultiheadAttention",
        "torch.nn.functional.multi_head_attention_forward", "course_lib.attention.MultiHeadAttention",
        "torch.nn.Transformer", "torch.nn.TransformerEncoderLayer", "torch.nn.TransformerDecoderLayer",
        "course_lib.layers", "course_lib.model")
_LAYER_NORM = ("torch.nn.functional.layer_norm", "torch.nn.LayerNorm", "torch.nn.modules.normalization.LayerNorm",
               "torch.layer_norm", "torch.native_layer_norm", "torch.ops.aten.layer_norm",
               "torch.ops.aten.native_layer_norm")

#: exercise function -> dotted names (or prefixes) it must not use: the built-in (PyTorch or
#: course_lib) that does what the exercise asks. Library helpers the exercise text tells the
#: student to use (e.g. the library's attention inside 5.3 multi_head_attention) are not listed.
BUILTINS_BY_FUNCTION: dict[str, tuple[str, ...]] = {
    "scaled_embedding": ("course_lib.embedding", "torch.nn.Embedding", "torch.nn.modules.sparse.Embedding"),
    "tied_output_logits": ("course_lib.embedding",),
    "sinusoidal_encoding": ("course_lib.positional",),
    "relative_position_matrix": ("course_lib.positional",),
    "scaled_dot_product_attention": _SDPA + _MHA,
    "self_attention": _SDPA + _MHA,
    "split_heads": ("course_lib.attention.MultiHeadAttention",),
    "merge_heads": ("course_lib.attention.MultiHeadAttention",),
    "multi_head_attention": _MHA,
    "position_wise_ffn": ("course_lib.feedforward", "torch.nn.TransformerEncoderLayer", "course_lib.layers"),
    "gelu": ("torch.nn.functional.gelu", "torch.nn.GELU", "torch.nn.modules.activation.GELU", "torch.ops.aten.gelu",
             "torch._C._nn.gelu", "course_lib.feedforward"),
    "layer_norm": _LAYER_NORM + ("course_lib.layers",),
    "pre_ln_sublayer": _LAYER_NORM + ("course_lib.layers",),
    "post_ln_sublayer": _LAYER_NORM + ("course_lib.layers",),
    "padding_mask": ("course_lib.masks",),
    "causal_mask": ("course_lib.masks",),
    "decoder_self_attention_mask": ("course_lib.masks",),
    "label_smoothed_loss": ("course_lib.training",),
    "noam_lr": ("course_lib.training", "torch.optim.lr_scheduler"),
    "shift_right": ("course_lib.training", "course_lib.data"),
    "greedy_decode": ("course_lib.decoding",),
    "beam_search": ("course_lib.decoding",),
    "top_k_top_p_filtering": ("course_lib.decoding",),
    "kv_cache_step": ("course_lib.attention.KVCache", "course_lib.attention.MultiHeadAttention",
                      "torch.nn.MultiheadAttention", "torch.nn.modules.activation.MultiheadAttention",
                      "course_lib.model"),
}
#: exercise function -> (callable, keyword) pairs whose use with that keyword is delegation.
KEYWORD_BUILTINS: dict[str, tuple[tuple[str, str], ...]] = {
    "label_smoothed_loss": (("torch.nn.functional.cross_entropy", "label_smoothing"),
                            ("torch.nn.CrossEntropyLoss", "label_smoothing"),
                            ("torch.nn.modules.loss.CrossEntropyLoss", "label_smoothing")),
}
_DYNAMIC = {"eval", "exec", "compile", "__import__", "importlib.import_module", "importlib.__import__", "builtins.eval",
            "builtins.exec", "runpy.run_path", "runpy.run_module"}
_FILE_CALLS = {"open", "io.open", "os.open", "pathlib.Path", "pathlib.PosixPath", "numpy.load", "numpy.loadtxt",
               "numpy.fromfile", "numpy.genfromtxt", "torch.load", "json.load", "pickle.load", "os.listdir",
               "os.scandir", "os.walk", "glob.glob", "shutil.copy", "shutil.copyfile", "linecache.getlines",
               "nbformat.read", "runpy.run_path", "course_lib.grading.extract.load_namespace",
               "course_lib.grading.extract.extract_source", "builtins.open"}
_PATHY = re.compile(r"^(~|/(home|root|work|tmp|etc|proc|usr|var|mnt|srv|opt|dev|sys|run|autograder|data|media|Users)(/|$)"
                    r"|/[\w.-]+/|[A-Za-z]:\\)|(^|[/\\])\.\.([/\\]|$)")
_SOLUTIONS = re.compile(r"solutions?\b", re.I)


@dataclass(frozen=True)
class Flag:
    """One structural finding, for the instructor (never changes a score).

    Attributes:
        code: ``delegates``, ``dynamic``, ``reads-outside`` or ``solutions``.
        chapter: two-digit chapter of the notebook.
        exercise: the exercise number, or ``""`` for the whole notebook.
        detail: what was found and where (cell number).
    """

    code: str
    chapter: str
    exercise: str
    detail: str

    def __str__(self) -> str:
        where = f" {self.exercise}" if self.exercise else f" ch{self.chapter}"
        return f"{self.code}{where}: {self.detail}"


class _Aliases:
    """Resolve names through the module's import statements."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def add_import(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    self.names[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    self.names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    self.names[a.asname or a.name] = f"{node.module}.{a.name}"

    def resolve(self, node: ast.AST) -> str | None:
        """Dotted name of ``a.b.c`` / ``getattr(a, "b")``; ``None`` when not a plain reference."""
        parts: list[str] = []
        while True:
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                  and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                  and isinstance(node.args[1].value, str)):
                parts.append(node.args[1].value)
                node = node.args[0]
            elif isinstance(node, ast.Name):
                base = self.names.get(node.id, node.id)
                return ".".join([base, *reversed(parts)])
            else:
                return None


def _normalise(name: str) -> str:
    """Map common public aliases to one spelling (``torch.nn.functional`` for ``F``-style imports)."""
    for short, full in (("torch.functional.", "torch.nn.functional."),):
        if name.startswith(short):
            name = full + name[len(short):]
    return name


def _matches(name: str, forbidden: tuple[str, ...]) -> str | None:
    name = _normalise(name)
    for f in forbidden:
        if name == f or name.startswith(f + "."):
            return f
    return None


def _cell_of(lines: list[str], lineno: int) -> str:
    for i in range(min(lineno, len(lines)) - 1, -1, -1):
        m = re.match(r"^# --- cell (\d+) ---$", lines[i])
        if m:
            return f"cell {m.group(1)}"
    return "the extracted code"


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                ids.add(id(body[0].value))
    return ids


def check_source(source: str, chapter: str, exercises: dict[str, str]) -> list[Flag]:
    """Flags for one notebook's extracted source.

    Args:
        source: the output of :func:`~course_lib.grading.extract.extract_source`.
        chapter: two-digit chapter of the notebook.
        exercises: exercise number -> function name, for this chapter.

    Returns:
        the flags, without duplicates, in source order. A source that does not
        parse gives no flag (the child reports the syntax error).
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    lines = source.split("\n")
    aliases = _Aliases()
    defs: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            aliases.add_import(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
            aliases.names.pop(node.name, None)  # a later def replaces an imported name
    flags: list[Flag] = []

    def add(flag: Flag) -> None:
        if flag not in flags:
            flags.append(flag)

    # -- delegation, per exercise -------------------------------------------------
    for exercise, function in sorted(exercises.items()):
        forbidden = BUILTINS_BY_FUNCTION.get(function, ())
        keyword_rules = KEYWORD_BUILTINS.get(function, ())
        if function not in defs:
            continue
        todo, visited = [function], set()
        while todo:
            name = todo.pop()
            if name in visited or name not in defs:
                continue
            visited.add(name)
            local = _Aliases()
            local.names = dict(aliases.names)
            for node in ast.walk(defs[name]):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    local.add_import(node)
            via = "" if name == function else f" (through {name}())"
            for node in ast.walk(defs[name]):
                if isinstance(node, ast.Name) and node.id in defs and node.id != name:
                    todo.append(node.id)
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    targets = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                        [f"{node.module}.{a.name}" for a in node.names if node.module]
                    for t in targets:
                        hit = _matches(t, forbidden)
                        if hit:
                            add(Flag("delegates", chapter, exercise,
                                     f"{function} imports {t}{via} ({_cell_of(lines, node.lineno)})"))
                if isinstance(node, (ast.Attribute, ast.Name, ast.Call)):
                    dotted = aliases_resolve(local, node)
                    if dotted:
                        hit = _matches(dotted, forbidden)
                        if hit and not (isinstance(node, ast.Name) and node.id == name):
                            add(Flag("delegates", chapter, exercise,
                                     f"{function} uses {_normalise(dotted)}{via} ({_cell_of(lines, node.lineno)})"))
                if isinstance(node, ast.Call):
                    callee = local.resolve(node.func)
                    if callee:
                        callee = _normalise(callee)
                        for target, keyword in keyword_rules:
                            if callee == target and any(k.arg == keyword for k in node.keywords):
                                add(Flag("delegates", chapter, exercise,
                                         f"{function} calls {target}({keyword}=...){via} "
                                         f"({_cell_of(lines, node.lineno)})"))
                        if callee in _DYNAMIC or (callee == "getattr" and len(node.args) >= 2
                                                  and not isinstance(node.args[1], ast.Constant)):
                            add(Flag("dynamic", chapter, exercise,
                                     f"{function} calls {callee}(){via} ({_cell_of(lines, node.lineno)})"))

    # -- files outside the submission, the solutions ---------------------------------
    docstrings = _docstring_nodes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callee = aliases.resolve(node.func)
            if callee and (callee in _FILE_CALLS or callee.split(".")[-1] in ("open", "load", "read_text", "read_bytes")):
                for arg in [*node.args, *(k.value for k in node.keywords)]:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _PATHY.search(arg.value):
                        add(Flag("reads-outside", chapter, "",
                                 f"{callee}({arg.value[:80]!r}) ({_cell_of(lines, node.lineno)})"))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
            if _SOLUTIONS.search(text):
                add(Flag("solutions", chapter, "", f"string {text[:80]!r} ({_cell_of(lines, node.lineno)})"))
            elif _PATHY.search(text) and len(text) < 300 and "\n" not in text:
                add(Flag("reads-outside", chapter, "", f"path-like string {text[:80]!r} "
                                                      f"({_cell_of(lines, node.lineno)})"))
        if isinstance(node, (ast.Name, ast.Attribute)):
            dotted = aliases.resolve(node)
            if dotted and _SOLUTIONS.search(dotted.split(".")[-1]) and dotted.split(".")[-1].lower().startswith("solution"):
                add(Flag("solutions", chapter, "", f"name {dotted} ({_cell_of(lines, node.lineno)})"))
    return flags


def aliases_resolve(aliases: _Aliases, node: ast.AST) -> str | None:
    """Resolve a reference (not a call's result) to a dotted name."""
    if isinstance(node, ast.Call):
        # getattr(F, "name") counts as a reference to F.name
        if isinstance(node.func, ast.Name) and node.func.id == "getattr":
            return aliases.resolve(node)
        return None
    return aliases.resolve(node)
