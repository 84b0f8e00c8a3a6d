"""A character-level language model: train it, measure its perplexity and sample from it outside the book (chapter 12).

Command line (data is found through ``COURSE_LIB_DATA``, see :func:`load_lm_text`)::

    python -m course_lib.lm_train train --data tinyshakespeare --out runs/lm.pt --steps 2000
    torchrun --nproc_per_node 2 -m course_lib.lm_train train --data tinyshakespeare --out runs/lm-ddp.pt --steps 500
    python -m course_lib.lm_train sample --checkpoint checkpoints/lm-shakespeare.pt --prompt "ROMEO:" --top-p 0.9

Under ``torchrun`` the training runs data-parallel exactly as the
translator's (``python -m course_lib.translate train``): the course's loop
(:func:`course_lib.training.train`) wraps the model in
``DistributedDataParallel`` (gloo on CPUs, NCCL on GPUs) and each process
uses its share of the same stream of batches.

Library: :class:`LMRecipe`, :func:`load_lm_text`, :func:`build_lm_data`,
:func:`train_language_model`, :func:`perplexity`, :func:`lm_from_checkpoint`.
Nothing runs at import time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from . import __version__
from .data import load_tatoeba_en_zh, load_tiny_shakespeare
from .data.lm import CharVocabulary, chinese_side, lm_batches, split_text_ids
from .decoding import GenerationConfig, generate
from .language_model import LanguageModel, LanguageModelConfig
from .training import TrainConfig, TrainResult, cpu_supports_bf16, evaluate_loss, export_for_inference, init_distributed, load_checkpoint, model_from_checkpoint, train
from .validation import check_choice

__all__ = ["LM_DATASETS", "LMRecipe", "load_lm_text", "build_lm_data", "train_language_model", "perplexity", "lm_from_checkpoint", "main"]

LM_DATASETS = ("tinyshakespeare", "tatoeba-zh")
"""Texts :func:`load_lm_text` knows: tiny-shakespeare, and the Chinese side of Tatoeba English-Chinese."""


@dataclass
class LMRecipe:
    """Data, model and training settings of one character-level language model.

    Attributes:
        data: one of :data:`LM_DATASETS`.
        seq_len: context length in characters (windows of ``seq_len + 1``).
        batch_size: windows per optimizer step (per process under ``torchrun``).
        valid_fraction: the last share of the text held out.
        d_model, n_heads, n_layers, d_ff, dropout: sizes of the
            :class:`course_lib.language_model.LanguageModel` (Pre-LN, GELU,
            sinusoidal positions, tied embeddings: GPT-2's block).
        steps, time_budget_s, lr, warmup_steps: the optimizer run (AdamW,
            warmup then cosine decay; bfloat16 autocast where the CPU supports it).
        eval_every, eval_batches: validation loss every so many steps, on this many fixed batches.
        accumulation_steps: micro-batches per optimizer step.
        amp: ``"bf16"`` or ``"off"``; ``None``: bfloat16 autocast where the CPU has native bfloat16 instructions.
        seed: initialisation and batches.
    """

    data: str = "tinyshakespeare"
    seq_len: int = 128
    batch_size: int = 32
    valid_fraction: float = 0.1
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 4
    d_ff: int = 512
    dropout: float = 0.1
    steps: int = 2000
    time_budget_s: float | None = None
    lr: float = 2e-3
    warmup_steps: int = 100
    eval_every: int | None = 250
    eval_batches: int = 20
    accumulation_steps: int = 1
    amp: str | None = None
    seed: int = 0

    def model_config(self, vocab_size: int) -> LanguageModelConfig:
        """The :class:`LanguageModelConfig` of this recipe."""
        return LanguageModelConfig(
            vocab_size=vocab_size, d_model=self.d_model, n_heads=self.n_heads, n_layers=self.n_layers, d_ff=self.d_ff,
            dropout=self.dropout, norm_first=True, activation="gelu", max_len=self.seq_len, scale_embedding=False,
        )


def load_lm_text(name: str, root: str | os.PathLike | None = None) -> str:
    """The text of one of :data:`LM_DATASETS`.

    ``tinyshakespeare`` is :func:`course_lib.data.load_tiny_shakespeare`;
    ``tatoeba-zh`` is :func:`course_lib.data.chinese_side` of
    :func:`course_lib.data.load_tatoeba_en_zh` (both look in ``root``, then
    ``COURSE_LIB_DATA``, then download).

    Raises:
        ValueError: an unknown ``name``; course_lib.data.DataNotFoundError: no copy and no download.
    """
    check_choice(name, "name", LM_DATASETS)
    if name == "tatoeba-zh":
        return chinese_side(load_tatoeba_en_zh(root))
    return load_tiny_shakespeare(root)


def build_lm_data(recipe: LMRecipe, root: str | os.PathLike | None = None) -> tuple[CharVocabulary, torch.Tensor, torch.Tensor]:
    """``(vocabulary, train_ids, valid_ids)`` of ``recipe.data``: characters of the whole text, the last ``valid_fraction`` held out."""
    text = load_lm_text(recipe.data, root)
    vocab = CharVocabulary(text)
    train_ids, valid_ids = split_text_ids(torch.tensor(vocab.encode(text)), recipe.valid_fraction)
    return vocab, train_ids, valid_ids


def train_language_model(
    recipe: LMRecipe, out: str | os.PathLike | None = None, *, log_path: str | os.PathLike | None = None,
    data: tuple[CharVocabulary, torch.Tensor, torch.Tensor] | None = None, progress: bool = False,
) -> tuple[LanguageModel, CharVocabulary, TrainResult]:
    """Train a :class:`LanguageModel` with the course's loop; return ``(model, vocabulary, result)``.

    Every process draws the same windows (seeded by ``recipe.seed`` and the
    epoch); under ``torchrun`` the loop gives each its share. The checkpoint
    (``out``) stores the recipe and the alphabet in ``extra`` (see
    :func:`lm_from_checkpoint`).
    """
    vocab, train_ids, valid_ids = data if data is not None else build_lm_data(recipe)
    torch.manual_seed(recipe.seed)
    model = LanguageModel(recipe.model_config(len(vocab)))
    valid = list(lm_batches(valid_ids, recipe.seq_len, recipe.batch_size, generator=torch.Generator().manual_seed(12345),
                            n_batches=recipe.eval_batches))

    def batches(epoch: int):  # 500 steps' worth of random windows per "epoch", the same on every process
        generator = torch.Generator().manual_seed(recipe.seed * 100003 + epoch)
        return lm_batches(train_ids, recipe.seq_len, recipe.batch_size, generator=generator, n_batches=500)

    config = TrainConfig(
        max_steps=recipe.steps, time_budget_s=recipe.time_budget_s, lr=recipe.lr, warmup_steps=recipe.warmup_steps,
        schedule="warmup_cosine", label_smoothing=0.0, pad_id=None, weight_decay=0.01, clip_grad_norm=1.0,
        amp=recipe.amp or ("bf16" if cpu_supports_bf16() else "off"), accumulation_steps=recipe.accumulation_steps, eval_every=recipe.eval_every, entropy_every=None, log_every=10,
        checkpoint_path=str(out) if out is not None else None, log_path=str(log_path) if log_path is not None else None,
        seed=recipe.seed, progress=progress,
    )
    alphabet = "".join(vocab.itos[4:])
    result = train(model, batches, config, valid_data=valid, extra={"lm_recipe": dataclasses.asdict(recipe), "alphabet": alphabet})
    return model, vocab, result


def perplexity(model: LanguageModel, ids: torch.Tensor, seq_len: int, batch_size: int = 32, max_windows: int | None = None) -> float:
    """``exp`` of the mean next-character cross-entropy over consecutive, non-overlapping windows of ``ids``.

    Args:
        model: the language model; ids: 1-D ids; seq_len: positions per window;
        batch_size: windows per forward pass; max_windows: read only the first this many windows.
    """
    n = (len(ids) - 1) // seq_len
    n = min(n, max_windows) if max_windows else n
    starts = torch.arange(n) * seq_len
    offsets = torch.arange(seq_len + 1)
    windows = ids[starts[:, None] + offsets]  # (n, seq_len + 1)
    batches = [(w[:, :-1], w[:, 1:]) for w in windows.split(batch_size)]
    return math.exp(evaluate_loss(model, batches, pad_id=None)["loss"])


def lm_from_checkpoint(path: str | os.PathLike) -> tuple[LanguageModel, CharVocabulary, LMRecipe]:
    """``(model, vocabulary, recipe)`` from a checkpoint written by :func:`train_language_model` (full or exported float16)."""
    ckpt = load_checkpoint(path)
    extra = ckpt.get("extra") or {}
    if "alphabet" not in extra:
        raise ValueError(f"{path} holds no alphabet: not a checkpoint of course_lib.lm_train")
    return model_from_checkpoint(ckpt), CharVocabulary(extra["alphabet"]), LMRecipe(**extra["lm_recipe"])


# --------------------------------------------------------------------------------------------- command line


def _cmd_train(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    rank, world = init_distributed()
    recipe = LMRecipe(
        data=args.data, seq_len=args.seq_len, batch_size=args.batch_size, d_model=args.d_model, n_heads=args.n_heads,
        n_layers=args.n_layers, d_ff=args.d_ff, dropout=args.dropout, steps=args.steps, time_budget_s=args.budget_s,
        lr=args.lr, warmup_steps=args.warmup_steps, eval_every=args.eval_every, seed=args.seed,
        accumulation_steps=args.accumulation_steps, amp=args.amp,
    )
    log = args.log or (str(Path(args.out).with_suffix("")) + ".log.jsonl")
    if rank == 0:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        Path(log).unlink(missing_ok=True)
    data = build_lm_data(recipe)
    model, vocab, result = train_language_model(recipe, args.out, log_path=log if rank == 0 else None, data=data,
                                                progress=not args.no_progress)
    if rank == 0:
        summary = {
            "steps": result.step, "train_s": round(result.elapsed_s, 1), "world_size": world, "parameters": model.num_parameters(),
            "final_loss": result.history[-1]["loss"] if result.history else None,
            "valid_loss": result.valid_history[-1]["valid_loss"] if result.valid_history else None, "checkpoint": args.out,
        }
        if args.export:
            export_for_inference(args.out, args.export)
            summary["export"], summary["export_bytes"] = args.export, os.path.getsize(args.export)
        print(json.dumps(summary), flush=True)
    if world > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    return 0


def _cmd_sample(args: argparse.Namespace) -> int:
    model, vocab, _ = lm_from_checkpoint(args.checkpoint)
    prompt = torch.tensor([vocab.encode(args.prompt or "\n")])
    config = GenerationConfig(max_len=min(args.length, model.config.max_len - prompt.size(1)), eos_id=None,
                              do_sample=args.top_p is not None, top_p=args.top_p)
    generator = torch.Generator().manual_seed(args.seed) if config.do_sample else None
    print(args.prompt + vocab.decode(generate(model, prompt, config, generator=generator)[0]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m course_lib.lm_train``; returns the exit status."""
    r = LMRecipe()
    parser = argparse.ArgumentParser(prog="python -m course_lib.lm_train", description="Train and sample the course's character-level language model.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train a language model (runs data-parallel under torchrun)")
    p.add_argument("--data", default=r.data, choices=LM_DATASETS)
    p.add_argument("--out", required=True, help="checkpoint to write")
    p.add_argument("--export", default=None, help="also write a small float16 inference checkpoint here")
    p.add_argument("--log", default=None, help="JSON-lines training log (default: OUT with .log.jsonl)")
    for name in ("seq_len", "batch_size", "d_model", "n_heads", "n_layers", "d_ff", "steps", "warmup_steps", "eval_every", "seed",
                 "accumulation_steps"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(r, name))
    p.add_argument("--dropout", type=float, default=r.dropout)
    p.add_argument("--lr", type=float, default=r.lr)
    p.add_argument("--amp", default=None, choices=["bf16", "off"], help="default: bf16 where the CPU has bfloat16 instructions")
    p.add_argument("--budget-s", type=float, default=None, help="also stop after this many seconds")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: leave as is)")
    p.add_argument("--no-progress", action="store_true")
    s = sub.add_parser("sample", help="continue a prompt (greedy, or top-p sampling with --top-p)")
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--prompt", default="")
    s.add_argument("--length", type=int, default=200, help="characters to generate (capped by the model's positions)")
    s.add_argument("--top-p", type=float, default=None)
    s.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    return _cmd_train(args) if args.command == "train" else _cmd_sample(args)


if __name__ == "__main__":
    raise SystemExit(main())
