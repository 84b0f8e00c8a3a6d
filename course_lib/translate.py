"""An English -> Chinese translator: train, evaluate and use it outside the book (chapters 9-10).

Command line (run from anywhere; data is found through ``COURSE_LIB_DATA`` or downloaded)::

    python -m course_lib.translate train --out runs/en-zh.pt --steps 3000
    python -m course_lib.translate evaluate --checkpoint checkpoints/en-zh.pt --beam-size 4
    python -m course_lib.translate translate --checkpoint checkpoints/en-zh.pt "Tom is reading a book."
    torchrun --nproc_per_node 2 -m course_lib.translate train --out runs/ddp.pt --steps 500

Library:

* :class:`Recipe` - data, model and training settings in one record (the
  defaults are the course's tuned CPU recipe; see ``checkpoints/README.md``).
* :func:`build_data`, :func:`build_model`, :func:`train_translator`.
* :class:`Translator` - a trained model with its tokenizers:
  :meth:`Translator.translate`, :meth:`Translator.evaluate`,
  :meth:`Translator.from_checkpoint`.
* :func:`held_out_pairs` - the held-out test (or validation) pairs of a data configuration.
* Decoding settings are one :class:`course_lib.decoding.GenerationConfig`.

Nothing runs at import time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields, make_dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from . import __version__
from .decoding import GenerationConfig, beam_generate, generate
from .metrics import bleu
from .model import Transformer, TransformerConfig
from .training import TrainConfig, TrainResult, export_for_inference, init_distributed, load_checkpoint, model_from_checkpoint, train
from .validation import config_from_dict, model_setting

__all__ = [
    "ModelSettings",
    "Recipe",
    "build_data",
    "build_model",
    "train_translator",
    "held_out_pairs",
    "Translator",
    "main",
]


#: The architecture of the course's translator (``checkpoints/README.md``): the fields of
#: :class:`course_lib.model.TransformerConfig` that a :class:`Recipe` sets, with their defaults.
RECIPE_ARCHITECTURE: dict[str, Any] = {
    "d_model": 128, "n_heads": 4, "n_encoder_layers": 2, "n_decoder_layers": 2, "d_ff": 512, "dropout": 0.1,
    "norm_first": False, "tie_output": True, "fused_qkv": True, "max_len": 128,
}


def _transformer_config(self, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0) -> TransformerConfig:
    """The full :class:`TransformerConfig` for the given vocabulary sizes."""
    return TransformerConfig(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, pad_id=pad_id, **asdict(self))


_FIELD_TYPES = {f.name: f.type for f in fields(TransformerConfig)}
ModelSettings = make_dataclass(
    "ModelSettings",
    [(name, _FIELD_TYPES[name], field(default=value)) for name, value in RECIPE_ARCHITECTURE.items()],
    namespace={"transformer_config": _transformer_config},
)
ModelSettings.__module__ = __name__
ModelSettings.__doc__ = """The architecture part of a :class:`Recipe` (vocabulary sizes come from the tokenizers).

    Its fields are those of :class:`course_lib.model.TransformerConfig` named
    in :data:`RECIPE_ARCHITECTURE` (same names, types and meaning; defaults
    from that mapping): ``d_model``, ``n_heads``, ``n_encoder_layers``,
    ``n_decoder_layers``, ``d_ff``, ``dropout``, ``norm_first``,
    ``tie_output`` (output layer shares the target embedding: fewer
    parameters, a smaller checkpoint), ``fused_qkv``, ``max_len`` (positions).
    ``transformer_config(src_vocab_size, tgt_vocab_size, pad_id=0)`` gives the
    full :class:`TransformerConfig`.
    """


def _default_data_config():
    from .data import DataConfig

    return DataConfig(
        dataset="tatoeba-en-zh", max_src_len=16, max_tgt_len=24, lowercase=True, src_vocab_size=4000, batch_size=32
    )


def _default_train_config() -> TrainConfig:
    from .training import cpu_supports_bf16

    return TrainConfig(
        max_steps=10000, optimizer="adamw", lr=1.5e-3, schedule="warmup_cosine", warmup_steps=150,
        label_smoothing=0.1, clip_grad_norm=1.0, weight_decay=0.01, entropy_every=100, log_every=10,
        amp="bf16" if cpu_supports_bf16() else "auto",
    )


@dataclass
class Recipe:
    """Data + model + training settings of one translator.

    Attributes:
        data: a :class:`course_lib.data.DataConfig` (which pairs, tokenizers,
            length filter - applied to train, valid and test alike -, batch size).
        model: :class:`ModelSettings`.
        train: :class:`course_lib.training.TrainConfig`.

    The defaults are the recipe of the committed checkpoint
    (``checkpoints/README.md``): a small Post-LN model (d_model 128, 2 + 2
    layers, d_ff 512, tied output layer), lower-cased BPE English (4,000) and
    character-level Chinese, pairs of at most 16 / 24 tokens, **small batches
    of 32 pairs**, AdamW with 150 warmup steps to 1.5e-3 and a cosine decay,
    label smoothing 0.1, clipping at 1.0, and bfloat16 autocast where the CPU
    supports it. On a CPU, optimizer steps per second decide what is learnt
    in minutes: in 10-minute runs on one thread, held-out BLEU (greedy) was
    26.6 with batches of 128 pairs, 30.8 with 64 and 34.8 with 32, and a
    wider model (d_model 192) did not beat the small one in equal time.
    ``max_steps`` (10,000) is the length of the committed run; for a
    wall-clock limit set ``train.time_budget_s`` (the cosine decay then
    follows elapsed time).
    """

    data: Any = field(default_factory=_default_data_config)
    model: ModelSettings = field(default_factory=ModelSettings)
    train: TrainConfig = field(default_factory=_default_train_config)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (stored in checkpoints)."""
        return {"data": self.data.to_dict(), "model": asdict(self.model), "train": self.train.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Recipe":
        """Inverse of :meth:`to_dict`."""
        from .data import DataConfig

        return cls(data=config_from_dict(DataConfig, d["data"]), model=config_from_dict(ModelSettings, d["model"]),
                   train=TrainConfig.from_dict(d["train"]))


def build_data(recipe: Recipe, root: str | os.PathLike | None = None):
    """Load, split, tokenize and batch the data of ``recipe`` (:func:`course_lib.data.make_dataloaders`)."""
    from .data import make_dataloaders

    return make_dataloaders(recipe.data, root=root)


def build_model(recipe: Recipe, src_vocab_size: int, tgt_vocab_size: int) -> Transformer:
    """A freshly initialised :class:`course_lib.model.Transformer` for ``recipe``."""
    return Transformer(recipe.model.transformer_config(src_vocab_size, tgt_vocab_size))


def _epoch_batches(loader):
    def batches(epoch: int):
        sampler = getattr(loader, "batch_sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        return loader

    return batches


def train_translator(
    recipe: Recipe,
    out: str | os.PathLike | None = None,
    *,
    data: Any = None,
    model: nn.Module | None = None,
    resume_from: str | os.PathLike | None = None,
    log_path: str | os.PathLike | None = None,
) -> tuple[nn.Module, Any, TrainResult]:
    """Train a translator with ``recipe``; return ``(model, data, result)``.

    Args:
        recipe: the settings.
        out: checkpoint path (written at the end and every
            ``recipe.train.checkpoint_every`` steps), or ``None``.
        data: a :class:`course_lib.data.TranslationData` already built from
            ``recipe.data`` (default: built here).
        model: a model to train instead of :func:`build_model`'s (for example
            an ``nn.Transformer``-based baseline with the same call signature).
        resume_from: continue from this checkpoint.
        log_path: JSON-lines training log.

    Source: chapter 9.
    """
    import dataclasses

    data = data if data is not None else build_data(recipe)
    if model is None:
        model = build_model(recipe, data.src_tokenizer.vocab_size, data.tgt_tokenizer.vocab_size)
    config = dataclasses.replace(
        recipe.train,
        checkpoint_path=str(out) if out is not None else None,
        log_path=str(log_path) if log_path is not None else recipe.train.log_path,
    )
    result = train(
        model,
        _epoch_batches(data.train_loader),
        config,
        valid_data=data.valid_loader,
        tokenizers={"src": data.src_tokenizer, "tgt": data.tgt_tokenizer},
        resume_from=resume_from,
        extra={"recipe": recipe.to_dict()},
    )
    return model, data, result


def held_out_pairs(data_config: Any, src_tokenizer: Any, tgt_tokenizer: Any, split: str = "test", root: str | os.PathLike | None = None) -> list[tuple[str, str]]:
    """The held-out ``(english, chinese)`` pairs of a data configuration, after its length filter.

    Rebuilds the split with :func:`course_lib.data.split_by_source` (same
    fractions and seed) and keeps the pairs that pass ``max_src_len`` /
    ``max_tgt_len`` under the given (checkpoint) tokenizers - the same test set
    as at training time, without retraining tokenizers.

    Args:
        data_config: a :class:`course_lib.data.DataConfig` (Tatoeba only).
        src_tokenizer, tgt_tokenizer: :class:`course_lib.data.TextTokenizer`.
        split: ``"test"`` or ``"valid"``.
        root: optional data folder.

    Raises:
        ValueError: another dataset or split name.
    """
    from .data import TranslationDataset, load_tatoeba_en_zh, split_by_source

    if data_config.dataset != "tatoeba-en-zh" or data_config.reverse:
        raise ValueError(f"held_out_pairs supports dataset='tatoeba-en-zh' (not reversed); got {data_config.dataset!r}")
    if split not in ("test", "valid"):
        raise ValueError(f"split must be 'test' or 'valid'; got {split!r}")
    pairs = load_tatoeba_en_zh(root)
    _, valid, test = split_by_source(pairs, data_config.valid_fraction, data_config.test_fraction, data_config.split_seed)
    chosen = test if split == "test" else valid
    ds = TranslationDataset.from_pairs(
        chosen, src_tokenizer, tgt_tokenizer, max_src_len=data_config.max_src_len, max_tgt_len=data_config.max_tgt_len
    )
    return [(p[0], p[1]) for p in ds.pairs]


class Translator:
    """A trained encoder-decoder with its source and target tokenizers.

    Args:
        model: a :class:`course_lib.model.Transformer` (or a module with the
            same ``encode``/``decode`` methods).
        src_tokenizer, tgt_tokenizer: :class:`course_lib.data.TextTokenizer`
            (``encode`` appends ``<eos>``; ids ``<pad>=0, <bos>=1, <eos>=2``).
        checkpoint: the checkpoint dict it came from, if any.

    Source: chapter 10.
    """

    def __init__(self, model: nn.Module, src_tokenizer: Any, tgt_tokenizer: Any, checkpoint: dict[str, Any] | None = None) -> None:
        self.model = model.eval()
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.checkpoint = checkpoint

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, device: str | torch.device = "cpu") -> "Translator":
        """Load a checkpoint written by :func:`train_translator` (full or exported float16)."""
        from .data import TextTokenizer

        ckpt = load_checkpoint(path)
        toks = ckpt.get("tokenizers") or {}
        if "src" not in toks or "tgt" not in toks:
            raise ValueError(f"{path} holds no tokenizers (expected keys 'src' and 'tgt')")
        model = model_from_checkpoint(ckpt, device)
        return cls(model, TextTokenizer.from_json(toks["src"]), TextTokenizer.from_json(toks["tgt"]), ckpt)

    @property
    def max_source_tokens(self) -> int:
        """The longest source the model accepts, in tokens including ``<eos>``: its ``config.max_len``.

        A model without ``config.max_len`` has no position limit: 10**9 here.
        """
        return int(model_setting(self.model, "max_len", 10**9))

    @property
    def recipe(self) -> Recipe | None:
        """The :class:`Recipe` stored in the checkpoint, if any."""
        d = ((self.checkpoint or {}).get("extra") or {}).get("recipe")
        return Recipe.from_dict(d) if d else None

    def translate(
        self,
        sentences: Sequence[str],
        config: GenerationConfig | None = None,
        *,
        seed: int | None = None,
        batch_size: int = 64,
        **options: Any,
    ) -> list[str]:
        """Translate English sentences; returns Chinese strings in the input order.

        Sentences are sorted by length into batches (less padding), decoded
        with one of the three strategies of chapter 10, and detokenized:

        * greedy (the default) and sampling (``do_sample=True``: ``temperature``,
          ``top_k``, ``top_p``): :func:`course_lib.decoding.generate`,
          optionally with a ``repetition_penalty``;
        * beam search (``beam_size > 1``): :func:`course_lib.decoding.beam_generate`
          with the length penalty ``((5 + len) / 6) ** length_penalty_alpha``.

        Args:
            sentences: source strings (a list, not one string).
            config: the decoding settings, a :class:`course_lib.decoding.GenerationConfig`
                (default: greedy). ``config.max_len`` (most generated tokens)
                defaults here to ``2 * src_len + 10``, capped by the model's positions.
            seed: sampling only; seeds a private ``torch.Generator`` so the
                same call gives the same output (the global RNG is untouched).
                Draws depend on how sentences fall into batches.
            batch_size: sentences per batch, ``>= 1``.
            options: fields of :class:`~course_lib.decoding.GenerationConfig`
                that replace those of ``config``, e.g. ``beam_size=4``,
                ``length_penalty_alpha=0.6``, ``do_sample=True``,
                ``temperature=0.8``, ``top_k``, ``top_p``, ``repetition_penalty``
                (CTRL, Keskar et al. 2019), ``no_repeat_ngram_size`` (no output
                repeats an n-gram of this many characters), ``max_len``.

        Raises:
            TypeError: ``sentences`` is a single string; an unknown option.
            ValueError: a sentence longer than :attr:`max_source_tokens`
                (nothing is translated then); ``batch_size < 1``; ``seed``
                without ``do_sample=True``; or a setting that
                :class:`~course_lib.decoding.GenerationConfig` rejects (``beam_size < 1``,
                beam search with sampling or a repetition penalty, sampling
                options without ``do_sample=True``, a bad value).
        """
        if isinstance(sentences, str):
            raise TypeError("sentences must be a list of str, not one str")
        config = replace(config or GenerationConfig(), **options)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {batch_size}")
        if seed is not None and not config.do_sample:
            raise ValueError("seed only applies when sampling: pass do_sample=True")
        ids = [self.src_tokenizer.encode(s) for s in sentences]
        too_long = [i for i, x in enumerate(ids) if len(x) > self.max_source_tokens]
        if too_long:
            i = too_long[0]
            raise ValueError(
                f"sentences[{i}] has {len(ids[i])} tokens (with <eos>), more than the model's "
                f"{self.max_source_tokens} positions ({len(too_long)} sentence(s) too long); split it into shorter ones"
            )
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out: list[str] = [""] * len(ids)
        device = next(self.model.parameters()).device
        generator = torch.Generator(device=device).manual_seed(int(seed)) if seed is not None else None
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            width = max(len(ids[i]) for i in idx)
            src = torch.zeros(len(idx), width, dtype=torch.long, device=device)
            for r, i in enumerate(idx):
                src[r, : len(ids[i])] = torch.tensor(ids[i])
            n_new = min(config.max_len or 2 * width + 10, self.max_source_tokens - 1)
            if config.beam_size > 1:
                tokens = beam_generate(self.model, src, replace(config, max_len=n_new))
            else:
                tokens = generate(self.model, src, replace(config, max_len=n_new), generator=generator)
            for r, text in enumerate(self.tgt_tokenizer.decode_batch(tokens.tolist())):
                out[idx[r]] = text
        return out

    def evaluate(
        self,
        pairs: Sequence[tuple[str, str]],
        *,
        beam_size: int = 1,
        batch_size: int = 64,
        return_hypotheses: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """BLEU (sacrebleu, ``tokenize='zh'``) on ``(english, chinese)`` pairs.

        Each distinct English sentence is translated once (with
        :meth:`translate`; ``kwargs`` are passed on to it).

        Returns:
            ``{"bleu": single-reference corpus BLEU over all pairs,
            "bleu_all_refs": BLEU with one hypothesis per distinct English
            sentence against all its Chinese references, "n_pairs",
            "n_sources", "decode_s", "beam_size", "examples": first 5
            (src, ref, hyp)}``, plus ``"hypotheses"`` (one per pair, in
            order) when ``return_hypotheses`` is true - e.g. for
            :func:`course_lib.metrics.paired_bleu_test`.
        """
        from .data import group_by_source

        groups = group_by_source(pairs)
        t0 = time.perf_counter()
        hyps = self.translate([g[0] for g in groups], beam_size=beam_size, batch_size=batch_size, **kwargs)
        decode_s = time.perf_counter() - t0
        by_src = {g[0]: h for g, h in zip(groups, hyps)}
        single = bleu([by_src[s] for s, _ in pairs], [r for _, r in pairs], "zh")
        multi = bleu(hyps, [g[1] for g in groups], "zh")
        examples = [(s, r, by_src[s]) for s, r in list(pairs)[:5]]
        out = {
            "bleu": round(single, 2), "bleu_all_refs": round(multi, 2), "n_pairs": len(pairs),
            "n_sources": len(groups), "decode_s": round(decode_s, 1), "beam_size": beam_size, "examples": examples,
        }
        if return_hypotheses:
            out["hypotheses"] = [by_src[s] for s, _ in pairs]
        return out


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def _add_train_args(p: argparse.ArgumentParser) -> None:
    r = Recipe()
    p.add_argument("--out", required=True, help="checkpoint to write (full: model, optimizer, scheduler, tokenizers, config, step)")
    p.add_argument("--export", default=None, help="also write a small float16 inference checkpoint here")
    p.add_argument("--log", default=None, help="JSON-lines training log (default: OUT with .log.jsonl)")
    p.add_argument("--resume", default=None, help="continue from this checkpoint")
    p.add_argument("--steps", type=int, default=r.train.max_steps, help="optimizer steps")
    p.add_argument("--budget-s", type=float, default=None, help="also stop after this many seconds")
    p.add_argument("--lr", type=float, default=r.train.lr)
    p.add_argument("--warmup-steps", type=int, default=r.train.warmup_steps)
    p.add_argument("--schedule", default=r.train.schedule, choices=["noam", "warmup_cosine", "warmup_constant"])
    p.add_argument("--optimizer", default=r.train.optimizer, choices=["adam", "adamw"])
    p.add_argument("--label-smoothing", type=float, default=r.train.label_smoothing)
    p.add_argument("--accumulation-steps", type=int, default=1)
    p.add_argument("--loss-normalization", default=r.train.loss_normalization, choices=["batches", "tokens"],
                   help="combine micro-batch losses by mean of means ('batches') or by total target tokens ('tokens')")
    p.add_argument("--amp", default=r.train.amp, choices=["auto", "off", "fp16", "bf16"],
                   help=f"mixed precision (default here: {r.train.amp}; 'bf16' where the CPU has bfloat16 instructions)")
    p.add_argument("--eval-every", type=int, default=None)
    p.add_argument("--checkpoint-every", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=r.data.batch_size)
    p.add_argument("--max-src-len", type=int, default=r.data.max_src_len)
    p.add_argument("--max-tgt-len", type=int, default=r.data.max_tgt_len)
    p.add_argument("--src-vocab-size", type=int, default=r.data.src_vocab_size)
    for name in ("d_model", "n_heads", "n_encoder_layers", "n_decoder_layers", "d_ff", "max_len"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(r.model, name))
    p.add_argument("--dropout", type=float, default=r.model.dropout)
    p.add_argument("--norm-first", action="store_true", help="Pre-LN instead of the paper's Post-LN")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: leave as is)")
    p.add_argument("--no-progress", action="store_true")


def _recipe_from_args(args: argparse.Namespace) -> Recipe:
    import dataclasses

    r = Recipe()
    data = dataclasses.replace(
        r.data, batch_size=args.batch_size, max_src_len=args.max_src_len, max_tgt_len=args.max_tgt_len,
        src_vocab_size=args.src_vocab_size, seed=args.seed,
    )
    model = dataclasses.replace(
        r.model, d_model=args.d_model, n_heads=args.n_heads, n_encoder_layers=args.n_encoder_layers,
        n_decoder_layers=args.n_decoder_layers, d_ff=args.d_ff, max_len=args.max_len, dropout=args.dropout,
        norm_first=args.norm_first,
    )
    tc = dataclasses.replace(
        r.train, max_steps=args.steps, time_budget_s=args.budget_s, lr=args.lr, warmup_steps=args.warmup_steps,
        schedule=args.schedule, optimizer=args.optimizer, label_smoothing=args.label_smoothing,
        accumulation_steps=args.accumulation_steps, loss_normalization=args.loss_normalization, amp=args.amp,
        eval_every=args.eval_every,
        checkpoint_every=args.checkpoint_every, seed=args.seed, progress=not args.no_progress,
    )
    return Recipe(data=data, model=model, train=tc)


def _cmd_train(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    rank, world = init_distributed()
    recipe = _recipe_from_args(args)
    log = args.log or (str(Path(args.out).with_suffix("")) + ".log.jsonl")
    if rank == 0:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        if not args.resume and Path(log).exists():
            Path(log).unlink()
    t0 = time.perf_counter()
    data = build_data(recipe)
    if rank == 0:
        print(data.summary(), flush=True)
    model, data, result = train_translator(recipe, args.out, data=data, resume_from=args.resume, log_path=log if rank == 0 else None)
    train_s = time.perf_counter() - t0
    if rank == 0:
        n = getattr(model, "num_parameters", lambda: sum(p.numel() for p in model.parameters()))()
        summary = {
            "steps": result.step, "train_s": round(result.elapsed_s, 1), "total_s": round(train_s, 1),
            "steps_per_s": round(len(result.history) and result.step / max(result.elapsed_s, 1e-9), 2),
            "parameters": n, "world_size": world, "stopped": result.stopped, "checkpoint": args.out,
            "final_loss": result.history[-1]["loss"] if result.history else None,
            "valid_loss": result.valid_history[-1]["valid_loss"] if result.valid_history else None,
        }
        if args.export:
            export_for_inference(args.out, args.export)
            summary["export"] = args.export
            summary["export_bytes"] = os.path.getsize(args.export)
        print(json.dumps(summary), flush=True)
    if world > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    tr = _load_translator(args.checkpoint, args.threads)
    recipe = tr.recipe
    if recipe is None:
        raise SystemExit(f"{args.checkpoint} holds no recipe: cannot rebuild its test set")
    pairs = held_out_pairs(recipe.data, tr.src_tokenizer, tr.tgt_tokenizer, split=args.split)
    if args.limit:
        pairs = pairs[: args.limit]
    res = tr.evaluate(pairs, beam_size=args.beam_size, batch_size=args.batch_size)
    for src, ref, hyp in res.pop("examples"):
        print(f"{src}\n  ref: {ref}\n  hyp: {hyp}")
    print(json.dumps(res, ensure_ascii=False))
    return 0


def _load_translator(path: str, threads: int | None = None) -> Translator:
    if threads:
        torch.set_num_threads(threads)
    if not Path(path).is_file():
        raise SystemExit(f"error: no checkpoint at {path!r} (e.g. --checkpoint checkpoints/en-zh.pt)")
    try:
        return Translator.from_checkpoint(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets one clear line
        raise SystemExit(f"error: {path!r} is not a checkpoint written by course_lib.translate train "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None


def _cmd_translate(args: argparse.Namespace) -> int:
    tr = _load_translator(args.checkpoint, args.threads)
    sentences = args.sentences or [line.strip() for line in sys.stdin if line.strip()]
    if not sentences:
        print("error: no sentences given (pass them as arguments or one per line on standard input)", file=sys.stderr)
        return 1
    if not args.sample:
        extra = [f for f, v in (("--temperature", args.temperature), ("--top-k", args.top_k), ("--top-p", args.top_p),
                                ("--seed", args.seed)) if v is not None]
        if extra:
            verb = "applies" if len(extra) == 1 else "apply"
            raise SystemExit(f"error: {', '.join(extra)} only {verb} with --sample")
    try:
        config = GenerationConfig(
            beam_size=args.beam_size, length_penalty_alpha=args.length_penalty, repetition_penalty=args.repetition_penalty,
            no_repeat_ngram_size=args.no_repeat_ngram_size, do_sample=args.sample,
            temperature=1.0 if args.temperature is None else args.temperature, top_k=args.top_k, top_p=args.top_p,
        )
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    limit = tr.max_source_tokens
    lengths = [len(tr.src_tokenizer.encode(s)) for s in sentences]
    for n, (s, k) in enumerate(zip(sentences, lengths), start=1):
        if k > limit:
            print(f"error: sentence {n} has {k} tokens, more than the model's {limit} positions: skipped "
                  f"(split it into shorter sentences): {s[:60]}{'...' if len(s) > 60 else ''}", file=sys.stderr)
    kept = [s for s, k in zip(sentences, lengths) if k <= limit]
    try:
        translations = tr.translate(kept, config, seed=args.seed) if kept else []
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    for s, t in zip(kept, translations):
        print(f"{s}\t{t}")
    return 0 if len(kept) == len(sentences) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m course_lib.translate``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m course_lib.translate", description="Train, evaluate and use the course's English->Chinese Transformer.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="train a translator (runs data-parallel under torchrun)")
    _add_train_args(p_train)
    p_eval = sub.add_parser("evaluate", help="BLEU (sacrebleu, tokenize='zh') on the held-out test pairs")
    p_eval.add_argument("--checkpoint", required=True)
    p_eval.add_argument("--beam-size", type=int, default=1)
    p_eval.add_argument("--batch-size", type=int, default=64)
    p_eval.add_argument("--split", default="test", choices=["test", "valid"])
    p_eval.add_argument("--limit", type=int, default=None, help="only the first N pairs")
    p_eval.add_argument("--threads", type=int, default=None)
    p_tr = sub.add_parser("translate", help="translate sentences given as arguments (or one per line on stdin)")
    p_tr.add_argument("--checkpoint", required=True)
    p_tr.add_argument("--beam-size", type=int, default=1, help="1 = greedy (or sampling with --sample)")
    p_tr.add_argument("--length-penalty", type=float, default=0.6, help="beam search: alpha of ((5 + len) / 6) ** alpha")
    p_tr.add_argument("--sample", action="store_true", help="sample each next token instead of the argmax")
    p_tr.add_argument("--temperature", type=float, default=None, help="with --sample: >= 0 (0 = argmax; default 1)")
    p_tr.add_argument("--top-k", type=int, default=None, help="with --sample: keep the k most likely tokens")
    p_tr.add_argument("--top-p", type=float, default=None, help="with --sample: nucleus, in (0, 1]")
    p_tr.add_argument("--seed", type=int, default=None, help="with --sample: reproducible draws")
    p_tr.add_argument("--repetition-penalty", type=float, default=1.0, help="greedy or sampling: > 1 discourages repeats")
    p_tr.add_argument("--no-repeat-ngram-size", type=int, default=0,
                      help="no output repeats an n-gram of this many characters (0 = off)")
    p_tr.add_argument("--threads", type=int, default=None)
    p_tr.add_argument("sentences", nargs="*")
    args = parser.parse_args(argv)
    return {"train": _cmd_train, "evaluate": _cmd_evaluate, "translate": _cmd_translate}[args.command](args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
