"""The measurements of chapter 13 ("Today's block") that take longer than a chapter may run.

Three experiments on tiny-shakespeare characters (``$COURSE_LIB_DATA/tinyshakespeare``),
each written as a small JSON file under ``checkpoints/`` that the chapter loads and plots:

* ``blocks``: the 2017 block (``LanguageModelConfig``: Post-LayerNorm, sinusoidal
  positions added to scaled embeddings, ReLU FFN, biases) against today's block
  (``LanguageModelConfig.modern``: Pre-RMSNorm, RoPE, SwiGLU, no biases), same sizes,
  same batches, the same budget of training time per run, several seeds; the
  validation loss is measured every ``--eval-every`` seconds of training (the clock
  stops while it is measured). Both without dropout (a short run underfits).
  The clock is the process's CPU time (``time.process_time``) with one thread: on a
  machine shared with other work, wall-clock time would measure their load too; one
  thread's CPU time is the time the training itself took.
  -> ``checkpoints/ch13_blocks.json``
* ``ablation``: today's block and five variants that each set one switch back to the
  2017 block's choice (LayerNorm, sinusoidal positions, a ReLU FFN of width 4d,
  biases, Post-norm), the same budget and clock as ``blocks``, seed 0 (``--ablation-seeds``).
  -> ``checkpoints/ch13_ablation.json``
* ``length``: today's block with sinusoidal, RoPE or ALiBi positions, trained on
  windows of ``--train-len`` characters for ``--length-steps`` steps, then evaluated on
  held-out windows of 1x, 2x and 4x that length: the loss at each position.
  -> ``checkpoints/ch13_length.json``
* ``decode``: KV-cache bytes and cached decoding speed (tokens/s, the best of
  ``--decode-rounds`` rounds in which the models take turns) of a random-weight
  modern model with 8, 2 and 1 key/value heads.
  -> ``checkpoints/ch13_decode.json``

Reproduce (about 30 minutes on one core; the chapter's files came from)::

    nice python scripts/part5_ch13.py blocks --threads 1
    nice python scripts/part5_ch13.py ablation --threads 1
    nice python scripts/part5_ch13.py length --threads 1 --length-steps 600
    nice python scripts/part5_ch13.py decode --threads 1

Every run is seeded; a time budget makes the *number of steps* depend on the
machine's speed (it is recorded with each run).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from course_lib.data import CharVocabulary, lm_batches, load_tiny_shakespeare, split_text_ids
from course_lib.language_model import LanguageModel, LanguageModelConfig

OUT = Path(__file__).resolve().parent.parent / "checkpoints"
SIZES = dict(d_model=64, n_heads=4, n_layers=2)


def data():
    text = load_tiny_shakespeare()
    vocab = CharVocabulary(text)
    train, valid = split_text_ids(torch.tensor(vocab.encode(text)), 0.1)
    return vocab, train, valid


def block_config(kind: str, vocab_size: int, max_len: int, **overrides) -> LanguageModelConfig:
    """``"2017"``: the paper's block; ``"modern"``: today's (both without dropout)."""
    sizes = {**SIZES, **overrides}
    if kind == "2017":
        return LanguageModelConfig(vocab_size, d_ff=4 * sizes["d_model"], dropout=0.0, max_len=max_len, **sizes)
    return LanguageModelConfig.modern(vocab_size, max_len=max_len, **sizes)


def trainer(model, lr: float, warmup: int):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return float(loss.detach())

    return step


@torch.no_grad()
def per_position_loss(model, batches) -> list[float]:
    """Mean cross-entropy at each position over ``batches`` (nats per character)."""
    model.eval()
    total = None
    for x, y in batches:
        loss = F.cross_entropy(model(x).transpose(1, 2), y, reduction="none").mean(0)  # (seq_len,)
        total = loss if total is None else total + loss
    model.train()
    return (total / len(batches)).tolist()


def train_for(config: LanguageModelConfig, seed: int, train, held_out, args) -> dict:
    """Train ``config`` for ``args.budget`` CPU seconds; the validation loss every ``args.eval_every`` seconds."""
    torch.manual_seed(seed)
    model = LanguageModel(config)
    step = trainer(model, args.lr, args.warmup)
    batches = lm_batches(train, args.seq_len, args.batch, generator=torch.Generator().manual_seed(seed))
    clock, steps, curve, next_eval = 0.0, 0, [], 0.0
    while True:
        if clock >= next_eval:  # the clock stops while the validation loss is measured
            curve.append({"seconds": round(clock, 2), "steps": steps,
                          "valid_loss": round(statistics.fmean(per_position_loss(model, held_out)), 4)})
            next_eval += args.eval_every
        if clock >= args.budget:
            break
        x, y = next(batches)
        t0 = time.process_time()
        step(x, y)
        clock += time.process_time() - t0
        steps += 1
    return {"seed": seed, "steps": steps, "parameters": model.num_parameters(), "valid_loss": curve[-1]["valid_loss"],
            "curve": curve}


def run_blocks(args) -> None:
    vocab, train, valid = data()
    held_out = list(lm_batches(valid, args.seq_len, 32, generator=torch.Generator().manual_seed(1), n_batches=8))
    runs = []
    for seed in args.seeds:
        for kind in ("2017", "modern"):  # alternate, so load from other processes hits both alike
            run = train_for(block_config(kind, len(vocab), args.seq_len), seed, train, held_out, args)
            runs.append({"block": kind, **run})
            print(f"{kind:>6} seed {seed}: {run['steps']} steps, valid loss {run['valid_loss']:.3f}", flush=True)
    write("ch13_blocks.json", {"sizes": SIZES, "seq_len": args.seq_len, "batch": args.batch, "budget_s": args.budget,
                               "lr": args.lr, "warmup": args.warmup, "threads": args.threads, "runs": runs})


ABLATIONS = {  # today's block with one switch set back to the 2017 block's
    "LayerNorm instead of RMSNorm": dict(norm="layer"),
    "sinusoidal positions instead of RoPE": dict(positional="sinusoidal"),
    "ReLU FFN (d_ff 4d) instead of SwiGLU": dict(activation="relu", d_ff=4 * SIZES["d_model"]),
    "biases": dict(bias=True),
    "Post-norm instead of Pre-norm": dict(norm_first=False),
}


def run_ablation(args) -> None:
    vocab, train, valid = data()
    held_out = list(lm_batches(valid, args.seq_len, 32, generator=torch.Generator().manual_seed(1), n_batches=8))
    runs = []
    for seed in args.seeds[: args.ablation_seeds]:
        for name, change in {"today's block": {}, **ABLATIONS}.items():
            run = train_for(block_config("modern", len(vocab), args.seq_len, **change), seed, train, held_out, args)
            runs.append({"variant": name, "change": change, **run})
            print(f"{name:>40} seed {seed}: {run['steps']} steps, valid loss {run['valid_loss']:.3f}", flush=True)
    write("ch13_ablation.json", {"sizes": SIZES, "seq_len": args.seq_len, "batch": args.batch, "budget_s": args.budget,
                                 "lr": args.lr, "warmup": args.warmup, "threads": args.threads, "runs": runs})


def run_length(args) -> None:
    vocab, train, valid = data()
    L = args.train_len
    lengths = [L, 2 * L, 4 * L]
    evals = {n: list(lm_batches(valid, n, 16, generator=torch.Generator().manual_seed(2), n_batches=args.length_eval_batches))
             for n in lengths}
    runs = []
    for seed in args.seeds[: args.length_seeds]:
        for positional in ("sinusoidal", "rope", "alibi"):
            torch.manual_seed(seed)
            model = LanguageModel(block_config("modern", len(vocab), 4 * L, positional=positional))
            step = trainer(model, args.lr, args.warmup)
            batches = lm_batches(train, L, args.batch, generator=torch.Generator().manual_seed(seed), n_batches=args.length_steps)
            t0 = time.perf_counter()
            for x, y in batches:
                last = step(x, y)
            losses = {str(n): [round(v, 4) for v in per_position_loss(model, evals[n])] for n in lengths}
            runs.append({"positional": positional, "seed": seed, "train_loss": round(last, 4), "losses": losses})
            means = ", ".join(f"{n}: {statistics.fmean(losses[str(n)]):.3f}" for n in lengths)
            print(f"{positional:>10} seed {seed}: {time.perf_counter() - t0:.0f} s; mean valid loss {means}", flush=True)
    write("ch13_length.json", {"sizes": SIZES, "train_len": L, "lengths": lengths, "steps": args.length_steps,
                               "batch": args.batch, "lr": args.lr, "eval_windows": 16 * args.length_eval_batches,
                               "runs": runs})


@torch.no_grad()
def run_decode(args) -> None:
    from course_lib.decoding import GenerationConfig, generate

    batch, prompt_len, new = 8, 16, 128
    settings = GenerationConfig(max_len=new, eos_id=None)
    prompt = torch.randint(4, 256, (batch, prompt_len), generator=torch.Generator().manual_seed(0))
    models, rows = {}, []
    for n_kv in (8, 2, 1):
        torch.manual_seed(0)
        config = LanguageModelConfig.modern(256, d_model=256, n_heads=8, n_kv_heads=n_kv, n_layers=4, max_len=prompt_len + new + 1)
        models[n_kv] = LanguageModel(config).eval()
        generate(models[n_kv], prompt, settings)  # warm-up
    best = {n_kv: math.inf for n_kv in models}
    for _ in range(args.decode_rounds):  # the models take turns, so a change of load hits all of them
        for n_kv, model in models.items():
            t0 = time.perf_counter()
            generate(model, prompt, settings)
            best[n_kv] = min(best[n_kv], time.perf_counter() - t0)
    for n_kv, model in models.items():
        cache = model.new_cache()
        model(torch.randint(4, 256, (batch, prompt_len + new)), cache=cache)  # the cache of the whole continuation
        rows.append({"n_kv_heads": n_kv, "cache_bytes": cache.num_bytes(), "tokens_per_s": round(batch * new / best[n_kv], 1),
                     "parameters": model.num_parameters()})
        print(rows[-1], flush=True)
    write("ch13_decode.json", {"d_model": 256, "n_heads": 8, "n_layers": 4, "batch": batch, "prompt_len": prompt_len,
                               "new_tokens": new, "threads": args.threads, "rounds": args.decode_rounds, "rows": rows})


def write(name: str, payload: dict) -> None:
    path = OUT / name
    path.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {path}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment", choices=["blocks", "ablation", "length", "decode", "all"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--budget", type=float, default=60.0, help="CPU seconds of training per run (blocks)")
    ap.add_argument("--eval-every", type=float, default=10.0)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--train-len", type=int, default=64)
    ap.add_argument("--length-steps", type=int, default=1200)
    ap.add_argument("--length-seeds", type=int, default=2)
    ap.add_argument("--ablation-seeds", type=int, default=1)
    ap.add_argument("--length-eval-batches", type=int, default=4)
    ap.add_argument("--decode-rounds", type=int, default=5, help="timed rounds (decode); the best of each model is kept")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for name, run in (("blocks", run_blocks), ("ablation", run_ablation), ("length", run_length), ("decode", run_decode)):
        if args.experiment in (name, "all"):
            run(args)


if __name__ == "__main__":
    main()
