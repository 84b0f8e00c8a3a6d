"""Structural checks of a submission's graded code, by reading it (``ast``), never running it.

Run on the source that :func:`course_exercises.extract.extract_source` keeps
from a notebook (in the grader, inside the bounded subprocess of
:mod:`course_grader.inspect_notebooks`). They produce *flags* for the
instructor - advisory, they never change a score, and each says so: the
grader's guarantee is its sandbox, not this check.

* ``delegates``: an exercise function (or a helper it calls, or a class it
  uses, defined in the same notebook) refers to the PyTorch built-in or the
  ``course_lib`` function that the exercise asks the student to re-implement,
  e.g. ``F.scaled_dot_product_attention`` in exercise 4.1, ``nn.LayerNorm`` in
  7.1, ``F.cross_entropy(..., label_smoothing=...)`` in 9.1. Names are
  resolved through the notebook's imports (``import torch.nn.functional as F``,
  ``from course_lib import masks``, ``import course_lib.masks as m`` ...), the
  function's own aliases (``fn = torch.nn.functional``, default arguments),
  ``getattr``/``vars(...)[...]``/``__dict__[...]`` with a name built from
  literals, ``sys.modules["..."]``, ``importlib.import_module("...")`` and
  ``__import__("...")``. Also flagged: an exercise name whose last binding is
  an import (``from torch.nn.functional import gelu`` instead of, or after,
  ``def gelu``), and a star import from a module that holds the built-in.
* ``dynamic``: an exercise function uses ``eval``/``exec``/``__import__``/
  ``importlib``, ``getattr`` with a computed name, ``vars``/``globals``,
  ``sys.modules`` indexed by a computed name... (which hides what it calls).
* ``reads-outside``: the graded code opens or loads a file by an absolute path,
  a ``..`` path or a ``~`` path (``open``, ``Path``, ``np.load``,
  ``torch.load`` ...), or holds such a path as a string.
* ``solutions``: the graded code mentions the course's ``solutions`` folder.

The work is linear in the size of the source (references are resolved once,
with memoisation), and at most :data:`MAX_FLAGS` flags are listed.

Design and threat model (these checks are advisory): ``course_grader/SECURITY.md``.
"""

from __future__ import annotations

import ast
import re
from collections import ChainMap
from dataclasses import dataclass, field
from typing import Mapping

__all__ = ["Flag", "BUILTINS_BY_FUNCTION", "KEYWORD_BUILTINS", "REEXPORTS", "MAX_FLAGS", "ADVISORY", "check_source",
           "defined_twice"]

_SDPA = ("torch.nn.functional.scaled_dot_product_attention", "torch._C._nn.scaled_dot_product_attention",
         "torch.ops.aten.scaled_dot_product_attention", "torch.ops.aten._scaled_dot_product_attention_math",
         "torch.ops.aten._scaled_dot_product_flash_attention", "torch.ops.aten._scaled_dot_product_efficient_attention",
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
    "scale_ratios": ("course_lib.embedding", "course_lib.positional"),
    "encode_positions": ("course_lib.positional",),
    "shift_encodings": ("course_lib.positional",),
    "alibi_bias": ("course_lib.positional",),
    "scaled_dot_product_attention": _SDPA + _MHA,
    "self_attention": _SDPA + _MHA,
    "additive_attention": _SDPA + _MHA,
    "split_heads": ("course_lib.attention.MultiHeadAttention",),
    "merge_heads": ("course_lib.attention.MultiHeadAttention",),
    "multi_head_attention": _MHA,
    "head_ablation_effect": _MHA,
    "swiglu_ffn": ("course_lib.feedforward",),
    "position_wise_ffn": ("course_lib.feedforward", "torch.nn.TransformerEncoderLayer", "course_lib.layers"),
    "gelu": ("torch.nn.functional.gelu", "torch.nn.GELU", "torch.nn.modules.activation.GELU", "torch.ops.aten.gelu",
             "torch._C._nn.gelu", "course_lib.feedforward"),
    "layer_norm": _LAYER_NORM + ("course_lib.layers",),
    "pre_ln_stack": ("course_lib.layers",),
    "post_ln_stack": ("course_lib.layers",),
    "rms_norm": ("torch.nn.functional.rms_norm", "torch.nn.RMSNorm", "torch.nn.modules.normalization.RMSNorm",
                 "torch.rms_norm", "torch.ops.aten.rms_norm", "course_lib.layers"),
    "gradient_norms_by_depth": ("course_lib.layers",),
    "padding_mask": ("course_lib.masks",),
    "causal_mask": ("course_lib.masks",),
    "decoder_self_attention_mask": ("course_lib.masks",),
    "prefix_lm_mask": ("course_lib.masks",),
    "label_smoothed_loss": ("course_lib.training", "torch.autograd"),  # the statement: closed form, no autograd
    "noam_lr": ("course_lib.training", "torch.optim.lr_scheduler"),
    "noam_lr_with_peak": ("course_lib.training", "torch.optim.lr_scheduler"),
    "teacher_forcing_pair": ("course_lib.training", "course_lib.data"),
    "greedy_decode": ("course_lib.decoding",),
    "beam_search": ("course_lib.decoding",),
    "top_k_top_p_filtering": ("course_lib.decoding",),
    "banned_tokens": ("course_lib.decoding",),
    "kv_cache_step": ("course_lib.attention.KVCache", "course_lib.attention.MultiHeadAttention",
                      "torch.nn.MultiheadAttention", "torch.nn.modules.activation.MultiheadAttention",
                      "course_lib.model"),
    "next_token_windows": ("course_lib.data",),
    "translation_lm_targets": ("course_lib.data",),
    "rope_interleaved": ("course_lib.positional",),
    "grouped_query_attention": _SDPA + _MHA + ("course_lib.language_model", "course_lib.attention.share_kv_heads"),
    "kv_cache_bytes": ("course_lib.language_model", "course_lib.attention.KVCache", "course_lib.attention.MultiHeadAttention",
                       "course_lib.feedforward", "course_lib.model", "course_lib.layers"),
    "lm_parameter_count": ("course_lib.language_model", "course_lib.attention.MultiHeadAttention", "course_lib.feedforward",
                           "course_lib.normalization", "course_lib.model", "course_lib.layers"),
}
#: a name a ``course_lib`` module re-exports (``from .positional import RotaryEmbedding`` in ``attention.py``) ->
#: where the object is defined: a reference through the alias is the object's, and is flagged as that. Listed: the
#: aliases of everything that ``BUILTINS_BY_FUNCTION`` names (``tests/grading/test_units.py`` checks the
#: table against the modules, so that a new re-export of a flagged object cannot pass unseen).
REEXPORTS: dict[str, str] = {
    "course_lib.attention.RotaryEmbedding": "course_lib.positional.RotaryEmbedding",
    "course_lib.attention.alibi_bias": "course_lib.positional.alibi_bias",
    "course_lib.attention.alibi_slopes": "course_lib.positional.alibi_slopes",
    "course_lib.attention.check_mask": "course_lib.masks.check_mask",
    "course_lib.data.batching.decoder_self_attention_mask": "course_lib.masks.decoder_self_attention_mask",
    "course_lib.data.batching.padding_mask": "course_lib.masks.padding_mask",
    "course_lib.language_model.EncoderLayer": "course_lib.layers.EncoderLayer",
    "course_lib.language_model.KVCache": "course_lib.attention.KVCache",
    "course_lib.language_model.LayerStack": "course_lib.model.LayerStack",
    "course_lib.language_model.MultiHeadAttention": "course_lib.attention.MultiHeadAttention",
    "course_lib.language_model.causal_mask": "course_lib.masks.causal_mask",
    "course_lib.language_model.check_block_switches": "course_lib.model.check_block_switches",
    "course_lib.language_model.check_mask": "course_lib.masks.check_mask",
    "course_lib.language_model.decoder_self_attention_mask": "course_lib.masks.decoder_self_attention_mask",
    "course_lib.layers.KVCache": "course_lib.attention.KVCache",
    "course_lib.layers.MultiHeadAttention": "course_lib.attention.MultiHeadAttention",
    "course_lib.layers.PositionwiseFeedForward": "course_lib.feedforward.PositionwiseFeedForward",
    "course_lib.layers.RotaryEmbedding": "course_lib.positional.RotaryEmbedding",
    "course_lib.lm_train.CharVocabulary": "course_lib.data.lm.CharVocabulary",
    "course_lib.lm_train.GenerationConfig": "course_lib.decoding.config.GenerationConfig",
    "course_lib.lm_train.LanguageModel": "course_lib.language_model.LanguageModel",
    "course_lib.lm_train.LanguageModelConfig": "course_lib.language_model.LanguageModelConfig",
    "course_lib.lm_train.TrainConfig": "course_lib.training.config.TrainConfig",
    "course_lib.lm_train.TrainResult": "course_lib.training.loop.TrainResult",
    "course_lib.lm_train.chinese_side": "course_lib.data.lm.chinese_side",
    "course_lib.lm_train.cpu_supports_bf16": "course_lib.training.precision.cpu_supports_bf16",
    "course_lib.lm_train.evaluate_loss": "course_lib.training.loop.evaluate_loss",
    "course_lib.lm_train.export_for_inference": "course_lib.training.checkpoints.export_for_inference",
    "course_lib.lm_train.generate": "course_lib.decoding.greedy.generate",
    "course_lib.lm_train.init_distributed": "course_lib.training.parallel.init_distributed",
    "course_lib.lm_train.lm_batches": "course_lib.data.lm.lm_batches",
    "course_lib.lm_train.load_checkpoint": "course_lib.training.checkpoints.load_checkpoint",
    "course_lib.lm_train.load_tatoeba_en_zh": "course_lib.data.datasets.load_tatoeba_en_zh",
    "course_lib.lm_train.load_tiny_shakespeare": "course_lib.data.datasets.load_tiny_shakespeare",
    "course_lib.lm_train.model_from_checkpoint": "course_lib.training.checkpoints.model_from_checkpoint",
    "course_lib.lm_train.split_text_ids": "course_lib.data.lm.split_text_ids",
    "course_lib.lm_train.train": "course_lib.training.loop.train",
    "course_lib.model.DecoderLayer": "course_lib.layers.DecoderLayer",
    "course_lib.model.DecoderLayerCache": "course_lib.layers.DecoderLayerCache",
    "course_lib.model.EncoderLayer": "course_lib.layers.EncoderLayer",
    "course_lib.model.LearnedPositionalEmbedding": "course_lib.positional.LearnedPositionalEmbedding",
    "course_lib.model.MultiHeadAttention": "course_lib.attention.MultiHeadAttention",
    "course_lib.model.PositionalEncoding": "course_lib.positional.PositionalEncoding",
    "course_lib.model.RotaryEmbedding": "course_lib.positional.RotaryEmbedding",
    "course_lib.model.SinusoidalPositionalEncoding": "course_lib.positional.SinusoidalPositionalEncoding",
    "course_lib.model.TokenEmbedding": "course_lib.embedding.TokenEmbedding",
    "course_lib.model.causal_mask": "course_lib.masks.causal_mask",
    "course_lib.model.check_mask": "course_lib.masks.check_mask",
    "course_lib.model.decoder_self_attention_mask": "course_lib.masks.decoder_self_attention_mask",
    "course_lib.model.padding_mask": "course_lib.masks.padding_mask",
    "course_lib.model.scale_residual_branches": "course_lib.layers.scale_residual_branches",
    "course_lib.translate.GenerationConfig": "course_lib.decoding.config.GenerationConfig",
    "course_lib.translate.TrainConfig": "course_lib.training.config.TrainConfig",
    "course_lib.translate.TrainResult": "course_lib.training.loop.TrainResult",
    "course_lib.translate.Transformer": "course_lib.model.Transformer",
    "course_lib.translate.TransformerConfig": "course_lib.model.TransformerConfig",
    "course_lib.translate.beam_generate": "course_lib.decoding.beam.beam_generate",
    "course_lib.translate.export_for_inference": "course_lib.training.checkpoints.export_for_inference",
    "course_lib.translate.generate": "course_lib.decoding.greedy.generate",
    "course_lib.translate.init_distributed": "course_lib.training.parallel.init_distributed",
    "course_lib.translate.load_checkpoint": "course_lib.training.checkpoints.load_checkpoint",
    "course_lib.translate.model_from_checkpoint": "course_lib.training.checkpoints.model_from_checkpoint",
    "course_lib.translate.train": "course_lib.training.loop.train",
}
#: exercise function -> (callable, keyword) pairs whose use with that keyword is delegation.
KEYWORD_BUILTINS: dict[str, tuple[tuple[str, str], ...]] = {
    "label_smoothed_loss": (("torch.nn.functional.cross_entropy", "label_smoothing"),
                            ("torch.nn.CrossEntropyLoss", "label_smoothing"),
                            ("torch.nn.modules.loss.CrossEntropyLoss", "label_smoothing")),
}
_FILE_CALLS = {"open", "io.open", "os.open", "pathlib.Path", "pathlib.PosixPath", "numpy.load", "numpy.loadtxt",
               "numpy.fromfile", "numpy.genfromtxt", "torch.load", "json.load", "pickle.load", "os.listdir",
               "os.scandir", "os.walk", "glob.glob", "shutil.copy", "shutil.copyfile", "linecache.getlines",
               "nbformat.read", "runpy.run_path", "course_exercises.extract.load_namespace",
               "course_exercises.extract.extract_source", "builtins.open"}
_PATHY = re.compile(r"^(~|/(home|root|work|tmp|etc|proc|usr|var|mnt|srv|opt|dev|sys|run|autograder|data|media|Users)(/|$)"
                    r"|/[\w.-]+/|[A-Za-z]:\\)|(^|[/\\])\.\.([/\\]|$)")
_SOLUTIONS = re.compile(r"solutions?\b", re.I)


#: callables that run or import code given as data: always flagged in an exercise function.
_DYNAMIC = {"eval", "exec", "compile", "__import__", "importlib.import_module", "importlib.__import__",
            "runpy.run_path", "runpy.run_module"}
#: look-ups that hide what they reach when the name is computed (or the callable is passed around).
_INTROSPECTION = {"getattr", "vars", "globals", "locals", "operator.attrgetter", "operator.methodcaller",
                  "object.__getattribute__"}
_GETATTR = {"getattr", "object.__getattribute__"}
_IMPORTERS = {"__import__", "importlib.import_module", "importlib.__import__"}
_SPELLINGS = (("torch.functional.", "torch.nn.functional."), ("builtins.", ""), ("__builtins__.", ""))
#: longest reference chain followed (``a.b.c``, ``getattr(...)``...); longer ones are cut, not an error
_MAX_DEPTH = 100
#: bindings remembered per local name (``fn = F`` then ``fn = torch``)
_MAX_BINDINGS = 4
#: flags reported per notebook; the rest are counted in one last flag
MAX_FLAGS = 30
ADVISORY = "flagged for review; the grader's guarantee is the sandbox, not this check"


@dataclass(frozen=True)
class Flag:
    """One structural finding, for the instructor (never changes a score).

    Attributes:
        code: ``delegates``, ``dynamic``, ``reads-outside``, ``solutions``, or
            ``more`` (how many findings were left out).
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
        return f"{self.code}{where}: {self.detail} - {ADVISORY}"


# ---------------------------------------------------------------------------
# Names: what a reference in the notebook may refer to
# ---------------------------------------------------------------------------
def _normalise(name: str) -> str:
    """One spelling per object: ``torch.functional.x`` as ``torch.nn.functional.x``, ``builtins.getattr`` as ``getattr``."""
    for short, full in _SPELLINGS:
        if name.startswith(short):
            name = full + name[len(short):]
    return name


def _defined_at(name: str) -> str:
    """``name`` with a re-exported alias replaced by where the object is defined (:data:`REEXPORTS`:
    ``course_lib.attention.RotaryEmbedding.forward`` -> ``course_lib.positional.RotaryEmbedding.forward``)."""
    parts = name.split(".")
    for i in range(len(parts), 1, -1):
        home = REEXPORTS.get(".".join(parts[:i]))
        if home is not None:
            return ".".join([home, *parts[i:]])
    return name


def _matches(name: str, forbidden: frozenset[str]) -> str | None:
    """The entry of ``forbidden`` that ``name`` is, or lies inside (``course_lib.masks.causal_mask`` in ``course_lib.masks``),
    by its own path or, for a re-exported alias, by where the object is defined."""
    name = _normalise(name)
    for path in dict.fromkeys((name, _defined_at(name))):
        parts = path.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in forbidden:
                return prefix
    return None


def _related(module: str, forbidden: frozenset[str]) -> bool:
    """Whether ``from module import *`` may bring in something of ``forbidden`` (also through a re-export)."""
    module = _normalise(module)
    if any(f == module or f.startswith(module + ".") or module.startswith(f + ".") for f in forbidden):
        return True
    return any(alias.startswith(module + ".") and _matches(alias, forbidden) for alias in REEXPORTS)


def _import_targets(node: ast.Import | ast.ImportFrom) -> list[tuple[str, str]]:
    """``[(bound name, dotted target), ...]`` of an import; the bound name is ``"*"`` for a star import."""
    if isinstance(node, ast.Import):
        return [(a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0]) for a in node.names]
    if not node.module or node.level:
        return []
    return [(a.asname or a.name, node.module if a.name == "*" else f"{node.module}.{a.name}") for a in node.names]


def _imported_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    """What an import statement imports (``course_lib.masks.causal_mask``, ``torch.nn.functional``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not node.module or node.level:
        return []
    return [node.module if a.name == "*" else f"{node.module}.{a.name}" for a in node.names]


def _const_str(node: ast.AST, strings: Mapping[str, str], depth: int = 0) -> str | None:
    """The value of a string built from literals (``"ge" + "lu"``, ``f"ge{'lu'}"``, ``"".join(["ge", "lu"])``)
    and names bound to such strings (``strings``); ``None`` for anything else."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.Name):
        return strings.get(node.id)
    parts: list[ast.AST] | None = None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        parts = [node.left, node.right]
    elif isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.FormattedValue) and v.format_spec is None and v.conversion == -1
                 else v for v in node.values]
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
          and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple))):
        sep = _const_str(node.func.value, strings, depth + 1)
        items = [_const_str(e, strings, depth + 1) for e in node.args[0].elts]
        return None if sep is None or None in items else sep.join(items)[:1000]
    if parts is None:
        return None
    values = [_const_str(p, strings, depth + 1) for p in parts]
    return None if None in values else "".join(values)[:1000]


@dataclass
class _Module:
    """The notebook's top-level bindings, as they are once every cell has run.

    Attributes:
        names: imported name -> dotted target (``F`` -> ``torch.nn.functional``).
        defs: name -> its ``def``/``class`` node (the last one of that name).
        imported: name -> (dotted target, line) for the names whose last binding is an import.
        stars: ``(module, line)`` of each ``from module import *``.
        strings: name -> value of the top-level names bound to a string literal.
    """

    names: dict[str, str] = field(default_factory=dict)
    defs: dict[str, ast.AST] = field(default_factory=dict)
    imported: dict[str, tuple[str, int]] = field(default_factory=dict)
    stars: list[tuple[str, int]] = field(default_factory=list)
    strings: dict[str, str] = field(default_factory=dict)
    #: name -> every ``def``/``class`` node of that name, in order: a cell that fails (and is skipped by the
    #: grader) can leave an EARLIER definition in force, so each one is checked
    all_defs: dict[str, list] = field(default_factory=dict)


def _module_bindings(tree: ast.Module) -> _Module:
    """The top-level bindings of ``tree``, in source order (a later binding replaces an earlier one)."""
    module = _Module()
    for node in tree.body:
        _bind_top_level(module, node)
    return module


def _bind_top_level(module: _Module, node: ast.stmt) -> None:
    """Record what one top-level statement binds (imports, definitions, assignments)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        for bound, target in _import_targets(node):
            _bind_import(module, bound, target, node.lineno)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        _unbind(module, node.name)
        module.defs[node.name] = node
        module.all_defs.setdefault(node.name, []).append(node)
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        for name, value in _bound_pairs(node):
            _unbind(module, name)
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                module.strings[name] = value.value


def _bind_import(module: _Module, bound: str, target: str, line: int) -> None:
    """Record one name a top-level import binds (``*``: a star import)."""
    if bound == "*":
        module.stars.append((target, line))
        return
    _unbind(module, bound)
    module.names[bound] = target
    module.imported[bound] = (target, line)


def _unbind(module: _Module, name: str) -> None:
    """Forget what ``name`` was bound to (a new binding follows)."""
    for table in (module.names, module.defs, module.imported, module.strings):
        table.pop(name, None)


class _Scope:
    """The names visible inside one top-level definition: its own bindings over the module's."""

    def __init__(self, module: _Module) -> None:
        self.module = module
        self.local: dict[str, list[str]] = {}
        self.strings: ChainMap[str, str] = ChainMap({}, module.strings)

    def bind(self, name: str, targets: tuple[str, ...]) -> None:
        known = self.local.setdefault(name, [])
        for t in targets:
            if t not in known and len(known) < _MAX_BINDINGS:
                known.append(t)

    def lookup(self, name: str) -> tuple[str, ...]:
        if name in self.local:
            return tuple(self.local[name])
        return self.lookup_global(name)

    def lookup_global(self, name: str) -> tuple[str, ...]:
        return (self.module.names.get(name, name),)


class _Resolver:
    """The dotted names an expression may refer to (``()`` when none), memoised so that a walk is linear.

    Follows attributes, imports, local aliases (``fn = torch.nn.functional``,
    default arguments), ``getattr(x, "name")`` with a literal or folded name,
    ``importlib.import_module("m")``/``__import__("m")``, ``sys.modules["m"]``,
    ``vars(x)["name"]``/``x.__dict__["name"]`` and ``globals()["name"]``.
    """

    def __init__(self, scope: _Scope) -> None:
        self.scope = scope
        self.memo: dict[int, tuple[str, ...]] = {}

    def __call__(self, node: ast.AST, depth: int = 0) -> tuple[str, ...]:
        if id(node) in self.memo:
            return self.memo[id(node)]
        if depth > _MAX_DEPTH:
            return ()
        out = self._resolve(node, depth)
        self.memo[id(node)] = out
        return out

    def _resolve(self, node: ast.AST, depth: int) -> tuple[str, ...]:
        """:meth:`__call__` without the memo."""
        if isinstance(node, ast.Name):
            return self.scope.lookup(node.id)
        if isinstance(node, ast.Attribute):
            return tuple(f"{base}.{node.attr}" for base in self(node.value, depth + 1))
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        if isinstance(node, ast.Subscript):
            return self._item(self(node.value, depth + 1), _const_str(node.slice, self.scope.strings))
        return ()

    def _call(self, node: ast.Call, depth: int) -> tuple[str, ...]:
        """What a call returns, for the calls that return a named object."""
        out: list[str] = []
        for callee in map(_normalise, self(node.func, depth + 1)):
            out += self._call_result(callee, node, depth)
        return tuple(out)

    def _call_result(self, callee: str, node: ast.Call, depth: int) -> list[str]:
        """What ``node`` returns when its callee is ``callee`` (one of the names it may refer to)."""
        args = node.args
        name = _const_str(args[0], self.scope.strings) if args else None
        attribute = _const_str(args[1], self.scope.strings) if len(args) >= 2 else None
        if callee in _GETATTR and attribute is not None:
            return [f"{base}.{attribute}" for base in self(args[0], depth + 1)]
        if callee in _IMPORTERS and name:
            return [name if callee != "__import__" or _has_fromlist(node) else name.split(".")[0]]
        if callee == "vars" and len(args) == 1:
            return [f"{base}.__dict__" for base in self(args[0], depth + 1)]
        if callee in ("globals", "vars", "locals") and not args:
            return ["<globals>"]
        if callee.endswith(".get") and name is not None:
            return list(self._item((callee[: -len(".get")],), name))
        if callee.endswith((".__getattribute__", ".__getattr__")) and name is not None:
            return [f"{callee.rsplit('.', 1)[0]}.{name}"]
        return []

    def _item(self, bases: tuple[str, ...], key: str | None) -> tuple[str, ...]:
        """``base[key]`` for the mappings that hold named objects (modules, namespaces)."""
        if key is None:
            return ()
        out: list[str] = []
        for base in map(_normalise, bases):
            out += self._item_of(base, key)
        return tuple(out)

    def _item_of(self, base: str, key: str) -> list[str]:
        """``base[key]`` for one (normalised) base."""
        if base == "sys.modules":
            return [key]
        if base.endswith(".__dict__"):
            return [f"{base[: -len('.__dict__')]}.{key}"]
        if base == "<globals>":
            return list(self.scope.lookup_global(key))
        return []


def _has_fromlist(node: ast.Call) -> bool:
    """``__import__(name, g, l, fromlist)`` returns ``name`` itself (not its top package) with a non-empty fromlist."""
    value = node.args[3] if len(node.args) >= 4 else next((k.value for k in node.keywords if k.arg == "fromlist"), None)
    return value is not None and not (isinstance(value, (ast.List, ast.Tuple)) and not value.elts) \
        and not (isinstance(value, ast.Constant) and not value.value)


def _bind_locals(nodes: list[ast.AST], scope: _Scope, resolve: _Resolver) -> None:
    """Record a definition's own imports, assignments of names and default arguments (``nodes``: all of
    its nodes), in source order."""
    nodes = [n for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.NamedExpr,
                                                ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    nodes.sort(key=lambda n: (n.lineno, n.col_offset))
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for bound, target in (t for t in _import_targets(node) if t[0] != "*"):
                scope.bind(bound, (target,))
            continue
        for name, value in _bound_pairs(node):
            _bind_local(name, value, scope, resolve)


def _bind_local(name: str, value: ast.AST, scope: _Scope, resolve: _Resolver) -> None:
    """Record ``name = value`` inside a definition: a folded string, or the names ``value`` may refer to."""
    text = _const_str(value, scope.strings)
    if text is not None:
        scope.strings.maps[0][name] = text
    elif resolve(value):
        scope.bind(name, resolve(value))


def _bound_pairs(node: ast.AST) -> list[tuple[str, ast.AST]]:
    """``[(name, value node), ...]`` that an assignment, a walrus or a signature's defaults bind."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = node.args
        positional = a.posonlyargs + a.args
        pairs = list(zip([p.arg for p in positional[len(positional) - len(a.defaults):]], a.defaults))
        return pairs + [(p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
    if isinstance(node, ast.NamedExpr):
        return [(node.target.id, node.value)]
    if isinstance(node, ast.AnnAssign):
        return [(node.target.id, node.value)] if isinstance(node.target, ast.Name) and node.value else []
    pairs: list[tuple[str, ast.AST]] = []
    for target in node.targets:  # ast.Assign
        pairs += _unpacked(target, node.value)
    return pairs


def _unpacked(target: ast.AST, value: ast.AST) -> list[tuple[str, ast.AST]]:
    """``[(name, value node), ...]`` of ``target = value``, tuples unpacked (``a, b = 1, 2``)."""
    pairs: list[tuple[str, ast.AST]] = []
    todo = [(target, value)]
    while todo:
        t, v = todo.pop()
        if isinstance(t, ast.Name):
            pairs.append((t.id, v))
            continue
        if isinstance(t, (ast.Tuple, ast.List)) and isinstance(v, (ast.Tuple, ast.List)) and len(t.elts) == len(v.elts):
            todo += list(zip(t.elts, v.elts))
    return pairs


# ---------------------------------------------------------------------------
# What one definition does
# ---------------------------------------------------------------------------
@dataclass
class _Facts:
    """What one top-level definition refers to (line numbers in the extracted source).

    Attributes:
        uses: ``(dotted name, line)`` of every reference that resolves to a dotted name.
        imports: ``(dotted name, line)`` of every import, static or through a call.
        calls: ``(callee, keyword names, line)`` of every call with a resolved callee.
        dynamic: ``(subject, what it does, line)``: code that hides what it calls.
        helpers: the notebook's other definitions it names.
    """

    uses: list[tuple[str, int]] = field(default_factory=list)
    imports: list[tuple[str, int]] = field(default_factory=list)
    calls: list[tuple[str, frozenset[str], int]] = field(default_factory=list)
    dynamic: list[tuple[str, str, int]] = field(default_factory=list)
    helpers: set[str] = field(default_factory=set)


def _facts(definition: ast.AST, module: _Module) -> _Facts:
    """Walk one definition once (decorators, defaults and bases included)."""
    scope = _Scope(module)
    resolve = _Resolver(scope)
    nodes = list(ast.walk(definition))
    _bind_locals(nodes, scope, resolve)
    facts = _Facts()
    callees = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
    for node in nodes:
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name) and node.id in module.defs and node.id not in scope.local:
            facts.helpers.add(node.id)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            facts.imports += [(t, line) for t in _imported_names(node)]
        if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
            _reference_facts(node, resolve(node), id(node) in callees, facts)
        if isinstance(node, ast.Call):
            _call_facts(node, resolve, scope, facts)
        if isinstance(node, ast.Subscript) and _const_str(node.slice, scope.strings) is None:
            facts.dynamic += [(base, f"indexes {base} with a computed name", line)
                              for base in map(_normalise, resolve(node.value))
                              if base in ("sys.modules", "<globals>") or base.endswith(".__dict__")]
    return facts


def _reference_facts(node: ast.AST, resolved: tuple[str, ...], called: bool, facts: _Facts) -> None:
    """The facts of one reference to a name: the dotted names used, dynamic code referred to (not called)."""
    line = getattr(node, "lineno", 0)
    facts.uses += [(d, line) for d in resolved if "." in d]
    facts.dynamic += [(d, f"refers to {d}", line) for d in map(_normalise, resolved)
                      if (d in _DYNAMIC or d in _INTROSPECTION) and not called]


def _call_facts(node: ast.Call, resolve: _Resolver, scope: _Scope, facts: _Facts) -> None:
    """The facts of one call: keywords, dynamic code, imports through a call."""
    keywords = frozenset(k.arg for k in node.keywords if k.arg)
    for callee in map(_normalise, resolve(node.func)):
        facts.calls.append((callee, keywords, node.lineno))
        name = _const_str(node.args[0], scope.strings) if node.args else None
        if callee in _DYNAMIC:
            facts.dynamic.append((callee, f"calls {callee}()", node.lineno))
        if callee in _IMPORTERS and name:
            facts.imports.append((name, node.lineno))
        if callee in _GETATTR:
            if len(node.args) < 2 or not isinstance(node.args[1], ast.Constant):
                facts.dynamic.append((callee, f"calls {callee}() with a computed name", node.lineno))
        elif callee in _INTROSPECTION:
            facts.dynamic.append((callee, f"calls {callee}()", node.lineno))


# ---------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------
def _cell_names(lines: list[str]) -> list[str]:
    """For each line number (from 1; index 0 unused), the cell it comes from: ``"cell 5"``."""
    out, current = ["the extracted code"], "the extracted code"
    for line in lines:
        m = re.match(r"^# --- cell (\d+) ---$", line)
        if m:
            current = f"cell {m.group(1)}"
        out.append(current)
    return out


class _Findings:
    """Flags without duplicates, in the order found (one per key)."""

    def __init__(self, chapter: str, cells: list[str]) -> None:
        self.chapter = chapter
        self.cells = cells
        self.flags: dict[tuple, Flag] = {}

    def cell(self, line: int) -> str:
        return self.cells[line] if 0 < line < len(self.cells) else "the extracted code"

    def add(self, code: str, exercise: str, key: tuple, detail: str, line: int) -> None:
        where = self.cell(line)
        self.flags.setdefault((code, exercise, key, where), Flag(code, self.chapter, exercise, f"{detail} ({where})"))

    def result(self) -> list[Flag]:
        flags = list(self.flags.values())
        if len(flags) > MAX_FLAGS:
            left_out = len(flags) - MAX_FLAGS
            flags = flags[:MAX_FLAGS] + [Flag("more", self.chapter, "", f"{left_out} more findings not listed")]
        return flags


def check_source(source: str, chapter: str, exercises: dict[str, str]) -> list[Flag]:
    """Flags for one notebook's extracted source.

    Args:
        source: the output of :func:`~course_exercises.extract.extract_source`.
        chapter: two-digit chapter of the notebook.
        exercises: exercise number -> function name, for this chapter.

    Returns:
        the flags, without duplicates, in source order (at most
        :data:`MAX_FLAGS`, then one ``more`` flag). A source that does not
        parse gives no flag (the child reports the syntax error).
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    findings = _Findings(chapter, _cell_names(source.split("\n")))
    try:
        module = _module_bindings(tree)
        facts: dict[str, _Facts] = {}
        for exercise, function in sorted(exercises.items()):
            _check_exercise(exercise, function, module, facts, findings)
        _check_files(tree, module, findings)
    except RecursionError:  # a pathological source: report what was found so far
        pass
    return findings.result()


def defined_twice(source: str, exercises: dict[str, str]) -> dict[str, str]:
    """Exercise -> a note for the student, for each exercise function defined at the top level of more than one
    cell: ``"scaled_dot_product_attention is defined in cell 3 and cell 7: the later one (cell 7) is the one
    checked and graded"`` (cells as in the extracted source; :func:`~.inspect_notebooks.rename_cells_with`
    turns them into "code cell N")."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    cells = _cell_names(source.split("\n"))
    notes = {}
    for exercise, function in sorted(exercises.items()):
        where = list(dict.fromkeys(cells[n.lineno] if 0 < n.lineno < len(cells) else "the extracted code"
                                   for n in tree.body
                                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function))
        if len(where) > 1:
            notes[exercise] = (f"{function} is defined in {', '.join(where[:-1])} and {where[-1]}: the later one "
                               f"({where[-1]}) is the one checked and graded")
    return notes


def _check_exercise(exercise: str, function: str, module: _Module, facts: dict[str, _Facts],
                    findings: _Findings) -> None:
    """Delegation and dynamic code in ``function`` and the notebook's definitions it uses."""
    forbidden = frozenset(BUILTINS_BY_FUNCTION.get(function, ()))
    if function in module.imported:
        target, line = module.imported[function]
        findings.add("delegates", exercise, ("imported", target), f"{function} is imported from {target}, "
                     f"not written in the notebook", line)
    for star, line in module.stars:
        if _related(star, forbidden):
            findings.add("delegates", exercise, ("star", star), f"from {star} import * can bring in the built-in "
                         f"that {function} re-implements", line)
    todo, visited = [function], set()
    while todo:
        name = todo.pop()
        if name in visited or name not in module.defs:
            continue
        visited.add(name)
        if name not in facts:
            facts[name] = _facts(module.defs[name], module)
        via = "" if name == function else f" (through {name}())"
        for definition in module.all_defs.get(name) or [module.defs[name]]:
            found = facts[name] if definition is module.defs[name] else _facts(definition, module)
            todo += sorted(found.helpers)
            _flag_definition(exercise, function, found, via, forbidden, findings)


def _flag_definition(exercise: str, function: str, found: _Facts, via: str, forbidden: frozenset[str],
                     findings: _Findings) -> None:
    """Flag what one definition used by ``function`` (``via``: through which helper) delegates or hides."""
    named = [(t, line, f"imports {t}") for t, line in found.imports]
    named += [(d, line, f"uses {_normalise(d)}") for d, line in found.uses]
    for target, line, what in named:
        hit = _matches(target, forbidden)
        if hit:
            findings.add("delegates", exercise, (hit, via), f"{function} {what}{via}", line)
    for callee, keywords, line in found.calls:
        for target, keyword in KEYWORD_BUILTINS.get(function, ()):
            if callee == target and keyword in keywords:
                findings.add("delegates", exercise, (target, keyword, via),
                             f"{function} calls {target}({keyword}=...){via}", line)
    for subject, what, line in found.dynamic:
        findings.add("dynamic", exercise, (subject, via), f"{function} {what}{via}", line)


def _check_files(tree: ast.Module, module: _Module, findings: _Findings) -> None:
    """Files outside the submission and the course's solutions, anywhere in the graded code."""
    resolve = _Resolver(_Scope(module))
    nodes = list(ast.walk(tree))
    docstrings = _docstring_nodes(nodes)
    for node in nodes:
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Call):
            _flag_file_call(node, resolve, findings)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            _flag_string(node.value, line, findings)
        if isinstance(node, (ast.Name, ast.Attribute)):
            for dotted in (d for d in resolve(node) if d.split(".")[-1].lower().startswith("solution")):
                findings.add("solutions", "", ("name", dotted), f"name {dotted}", line)


def _flag_file_call(node: ast.Call, resolve: _Resolver, findings: _Findings) -> None:
    """Flag a call that opens or loads a literal path outside the submission."""
    paths = [arg.value for arg in [*node.args, *(k.value for k in node.keywords)]
             if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _PATHY.search(arg.value)]
    for callee in map(_normalise, resolve(node.func)):
        if callee in _FILE_CALLS or callee.split(".")[-1] in ("open", "load", "read_text", "read_bytes"):
            for path in paths:
                findings.add("reads-outside", "", (callee, path), f"{callee}({path[:80]!r})", node.lineno)


def _flag_string(text: str, line: int, findings: _Findings) -> None:
    """Flag a string (not a docstring) that names the solutions or looks like a path outside the submission."""
    if _SOLUTIONS.search(text):
        findings.add("solutions", "", ("string", text), f"string {text[:80]!r}", line)
    elif len(text) < 300 and "\n" not in text and _PATHY.search(text):
        findings.add("reads-outside", "", ("string", text), f"path-like string {text[:80]!r}", line)


def _docstring_nodes(nodes: list[ast.AST]) -> set[int]:
    """``id()`` of the docstring constants among ``nodes``."""
    ids = set()
    for node in nodes:
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                ids.add(id(body[0].value))
    return ids
