"""The synthetic copy task: time to 100% exact-match accuracy on CPU (chapter 9).

A small :class:`course_lib.model.Transformer` learns to copy random token
sequences (:func:`course_lib.data.synthetic_copy_task`); every ``--eval-every``
steps it greedy-decodes a fixed held-out set and the run stops at the first
evaluation with 100% exact-match accuracy (every sequence copied exactly,
``<eos>`` included). Target: under 60 s of CPU training. The evaluation time
is counted in the total.

    python benchmarks/bench_copy_task.py [--threads 2] [--limit-s 120]

Last output line, JSON: ``{"seconds_to_100": ..., "steps": ..., "accuracy": ...}``
(``seconds_to_100`` is ``null`` if the limit was reached first).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

import torch


@dataclass
class CopyTaskSettings:
    """Sizes of the copy-task run (small enough for a test with tighter limits)."""

    vocab_size: int = 14  # 4 special ids + 10 symbols
    min_len: int = 3
    max_len: int = 10
    n_train: int = 4096
    n_test: int = 256
    batch_size: int = 64
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 128
    lr: float = 3e-3
    warmup_steps: int = 50
    max_steps: int = 800  # end of the cosine decay (the run stops earlier at 100%)
    eval_every: int = 25
    seed: int = 0


def run_copy_task(settings: CopyTaskSettings, limit_s: float, log=print) -> dict:
    """Train until 100% exact match on the held-out set, ``max_steps`` or ``limit_s`` seconds.

    Returns ``{"seconds_to_100", "steps", "accuracy", "train_s"}``.
    """
    from course_lib.data import EOS_ID, TranslationDataset, make_loader, synthetic_copy_task
    from course_lib.decoding import greedy_decode
    from course_lib.model import Transformer, TransformerConfig
    from course_lib.training import TrainConfig, train

    s = settings
    torch.manual_seed(s.seed)
    train_ds = TranslationDataset.from_ids(synthetic_copy_task(s.n_train, s.min_len, s.max_len, s.vocab_size, seed=s.seed))
    test_pairs = synthetic_copy_task(s.n_test, s.min_len, s.max_len, s.vocab_size, seed=s.seed + 1)
    test_ds = TranslationDataset.from_ids(test_pairs)  # a different seed: held-out sequences
    test_loader = make_loader(test_ds, s.n_test, shuffle=False, bucket=False)
    loader = make_loader(train_ds, s.batch_size, shuffle=True, seed=s.seed)
    model = Transformer(TransformerConfig(
        src_vocab_size=s.vocab_size, tgt_vocab_size=s.vocab_size, d_model=s.d_model, n_heads=s.n_heads,
        n_encoder_layers=s.n_layers, n_decoder_layers=s.n_layers, d_ff=s.d_ff, dropout=0.0, max_len=s.max_len + 4,
    ))

    def accuracy() -> float:
        correct = total = 0
        for batch in test_loader:
            out = greedy_decode(model, batch.src, max_len=s.max_len + 1)
            for row, target in zip(out.tolist(), batch.tgt_out.tolist()):
                want = target[: target.index(EOS_ID) + 1]
                correct += row[: len(want)] == want
                total += 1
        return correct / total

    def epoch_batches(epoch: int):
        loader.batch_sampler.set_epoch(epoch)
        return loader

    t0 = time.perf_counter()
    state = {"acc": 0.0}

    def check(step: int, _model) -> bool:
        if step % s.eval_every and step < s.max_steps:
            return False
        state["acc"] = accuracy()
        log(f"step {step}: exact match {state['acc']:.1%}, {time.perf_counter() - t0:.1f} s")
        return state["acc"] == 1.0

    cfg = TrainConfig(
        max_steps=s.max_steps, time_budget_s=limit_s, lr=s.lr, schedule="warmup_cosine", warmup_steps=s.warmup_steps,
        label_smoothing=0.0, progress=False, entropy_every=None, seed=s.seed,
    )
    result = train(model, epoch_batches, cfg, device="cpu", callback=check)
    elapsed = time.perf_counter() - t0
    acc = state["acc"]
    return {"seconds_to_100": round(elapsed, 1) if acc == 1.0 else None, "steps": result.step, "accuracy": acc,
            "train_s": round(elapsed, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit-s", type=float, default=120.0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = run_copy_task(CopyTaskSettings(), args.limit_s)
    out["threads"] = args.threads
    out["target_s"] = 60
    print(json.dumps(out))


if __name__ == "__main__":
    main()
