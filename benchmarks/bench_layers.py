"""Speed of course_lib's Transformer against an equal torch.nn.Transformer.

What is timed: one training step without the optimizer -- forward, a
cross-entropy loss over the target logits, backward -- for

* ``course``: :class:`course_lib.model.Transformer` (hand-written attention,
  masks built from ``pad_id`` inside ``forward``);
* ``torch``: the same token embedding, positional encoding and output layer
  (the very same ``course_lib`` classes, weights copied), around a
  :class:`torch.nn.Transformer` whose encoder and decoder are plain
  ``nn.TransformerEncoder``/``nn.TransformerDecoder`` stacks without the final
  LayerNorm (the course's Post-LN stacks have none), ``batch_first=True``.

Both get the same inputs and the same masks: source padding, and the causal
target mask together with target padding (PyTorch's masks are built in the
timed region too, with its True = blocked convention). Sizes: d_model 256,
4 heads, 3 + 3 layers, d_ff 1024, batch 32, source and target length 32,
vocabulary 1000, dropout 0.1 for both (``--dropout``).

Before timing, the two models are checked to give the same logits (eval mode,
dropout off). Then, after a warm-up, the two run in alternating order
(course/torch, torch/course, ...) in one process, so that load from other
processes hits both alike. The last line printed is JSON::

    {"ratio_course_over_torch": <median of the per-pair wall-clock ratios>,
     "course_ms": <median>, "torch_ms": <median>, ...,
     "cpu_time_ratio": <median of the per-pair process-CPU-time ratios>, ...}

On a machine shared with other jobs the wall-clock ratio of single pairs
scatters widely (see ``ratio_min_max``); the CPU-time ratio is less sensitive
to time spent waiting for a core (it still counts threads spinning while they
wait for each other, so compare it at ``--threads 1`` when the machine is busy).

Usage::

    python benchmarks/bench_layers.py [--threads 2] [--pairs 20] [--quick] [--profile]

``--quick`` (a smoke test for CI): batch 8, 1 warm-up step, 3 pairs.
``--profile``: also print torch.profiler's top operators of both models (to stderr).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.embedding import TokenEmbedding
from course_lib.model import Transformer, TransformerConfig
from course_lib.positional import SinusoidalPositionalEncoding


@dataclass
class BenchConfig:
    """Sizes of the benchmark (defaults: the issue's "Foundation" benchmark)."""

    d_model: int = 256
    n_heads: int = 4
    n_layers: int = 3
    d_ff: int = 1024
    batch: int = 32
    src_len: int = 32
    tgt_len: int = 32
    vocab_size: int = 1000
    dropout: float = 0.1
    pad_id: int = 0


class TorchTransformer(nn.Module):
    """Course embeddings/positions/output layer around ``torch.nn.Transformer`` (Post-LN, no final norms)."""

    def __init__(self, c: BenchConfig) -> None:
        super().__init__()
        self.pad_id = c.pad_id
        self.src_embedding = TokenEmbedding(c.vocab_size, c.d_model)
        self.tgt_embedding = TokenEmbedding(c.vocab_size, c.d_model)
        self.src_positional = SinusoidalPositionalEncoding(c.d_model, max(c.src_len, c.tgt_len), c.dropout)
        self.tgt_positional = SinusoidalPositionalEncoding(c.d_model, max(c.src_len, c.tgt_len), c.dropout)
        enc_layer = nn.TransformerEncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, batch_first=True)
        dec_layer = nn.TransformerDecoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, batch_first=True)
        self.transformer = nn.Transformer(
            c.d_model,
            c.n_heads,
            batch_first=True,
            custom_encoder=nn.TransformerEncoder(enc_layer, c.n_layers, enable_nested_tensor=False),
            custom_decoder=nn.TransformerDecoder(dec_layer, c.n_layers),
        )
        self.generator = nn.Linear(c.d_model, c.vocab_size)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        src_kpm = src == self.pad_id  # True = blocked (PyTorch's convention)
        tgt_kpm = tgt == self.pad_id
        causal = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device).triu(1)
        x = self.src_positional(self.src_embedding(src))
        y = self.tgt_positional(self.tgt_embedding(tgt))
        hidden = self.transformer(
            x, y, tgt_mask=causal, src_key_padding_mask=src_kpm, tgt_key_padding_mask=tgt_kpm,
            memory_key_padding_mask=src_kpm,
        )
        return self.generator(hidden)


def build_models(c: BenchConfig) -> tuple[Transformer, TorchTransformer]:
    """Both models with identical weights."""
    course = Transformer(
        TransformerConfig(
            src_vocab_size=c.vocab_size, tgt_vocab_size=c.vocab_size, d_model=c.d_model, n_heads=c.n_heads,
            n_encoder_layers=c.n_layers, n_decoder_layers=c.n_layers, d_ff=c.d_ff, dropout=c.dropout,
            max_len=max(c.src_len, c.tgt_len), pad_id=c.pad_id,
        )
    )
    ref = TorchTransformer(c)
    with torch.no_grad():
        ref.src_embedding.load_state_dict(course.encoder.embedding.state_dict())
        ref.tgt_embedding.load_state_dict(course.decoder.embedding.state_dict())
        ref.generator.load_state_dict(course.output_projection.state_dict())
        for ours, theirs in zip(course.encoder.layers, ref.transformer.encoder.layers):
            _copy_attention(ours.self_attn, theirs.self_attn)
            _copy_common(ours, theirs, sublayers=("self_attn_sublayer", "ffn_sublayer"))
        for ours, theirs in zip(course.decoder.layers, ref.transformer.decoder.layers):
            _copy_attention(ours.self_attn, theirs.self_attn)
            _copy_attention(ours.cross_attn, theirs.multihead_attn)
            _copy_common(ours, theirs, sublayers=("self_attn_sublayer", "cross_attn_sublayer", "ffn_sublayer"))
    return course, ref


def _copy_attention(ours: nn.Module, theirs: nn.MultiheadAttention) -> None:
    theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
    theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
    theirs.out_proj.load_state_dict(ours.out_proj.state_dict())


def _copy_common(ours: nn.Module, theirs: nn.Module, sublayers: tuple[str, ...]) -> None:
    theirs.linear1.load_state_dict(ours.ffn.linear1.state_dict())
    theirs.linear2.load_state_dict(ours.ffn.linear2.state_dict())
    for i, role in enumerate(sublayers, start=1):  # PyTorch numbers the norms in the order of the sublayers
        getattr(theirs, f"norm{i}").load_state_dict(getattr(ours, role).norm.state_dict())


def make_batch(c: BenchConfig, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random ids with trailing padding (lengths between 3/4 of the maximum and the maximum)."""

    def ids(length: int) -> torch.Tensor:
        t = torch.randint(1, c.vocab_size, (c.batch, length), generator=generator)
        lengths = torch.randint(3 * length // 4, length + 1, (c.batch,), generator=generator)
        t[torch.arange(length)[None, :] >= lengths[:, None]] = c.pad_id
        return t

    src, tgt_full = ids(c.src_len), ids(c.tgt_len + 1)
    return src, tgt_full[:, :-1], tgt_full[:, 1:]  # teacher forcing: input and shifted labels


def train_step(model: nn.Module, src, tgt_in, tgt_out, pad_id: int) -> None:
    model.zero_grad(set_to_none=True)
    logits = model(src, tgt_in)
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), ignore_index=pad_id)
    loss.backward()


def check_equal(course: nn.Module, ref: nn.Module, batch) -> float:
    """Max |logit difference| in eval mode (dropout off); raises if the models differ."""
    course.eval(), ref.eval()
    with torch.no_grad():
        src, tgt_in, _ = batch
        diff = (course(src, tgt_in) - ref(src, tgt_in)).abs().max().item()
    course.train(), ref.train()
    if diff > 1e-3:
        raise RuntimeError(f"the two models disagree (max |logit difference| {diff:.2e}); the comparison is void")
    return diff


def profile(models: dict[str, nn.Module], batch, pad_id: int, steps: int = 3) -> None:
    from torch.profiler import ProfilerActivity, profile as torch_profile

    for name, model in models.items():
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                train_step(model, *batch, pad_id)
        print(f"\n=== {name}: top operators by self CPU time ({steps} steps) ===", file=sys.stderr)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18), file=sys.stderr)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--pairs", type=int, default=20, help="alternating timed pairs (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per model first (default 3)")
    p.add_argument("--dropout", type=float, default=0.1, help="dropout of both models (default 0.1)")
    p.add_argument("--quick", action="store_true", help="smoke test: batch 8, 1 warm-up, 3 pairs")
    p.add_argument("--profile", action="store_true", help="print torch.profiler tables to stderr")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    c = BenchConfig(dropout=args.dropout)
    pairs, warmup = args.pairs, args.warmup
    if args.quick:
        c.batch, pairs, warmup = 8, 3, 1
    course, ref = build_models(c)
    batch = make_batch(c, torch.Generator().manual_seed(args.seed))
    max_diff = check_equal(course, ref, batch)

    models = {"course": course, "torch": ref}
    for _ in range(warmup):
        for m in models.values():
            train_step(m, *batch, c.pad_id)
    if args.profile:
        profile(models, batch, c.pad_id)

    times: dict[str, list[float]] = {"course": [], "torch": []}
    cpu: dict[str, list[float]] = {"course": [], "torch": []}
    for i in range(pairs):
        order = ("course", "torch") if i % 2 == 0 else ("torch", "course")
        for name in order:
            t0, c0 = time.perf_counter(), time.process_time()
            train_step(models[name], *batch, c.pad_id)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    ratios = [a / b for a, b in zip(times["course"], times["torch"])]
    cpu_ratios = [a / b for a, b in zip(cpu["course"], cpu["torch"])]
    result = {
        "ratio_course_over_torch": round(statistics.median(ratios), 3),
        "course_ms": round(1000 * statistics.median(times["course"]), 2),
        "torch_ms": round(1000 * statistics.median(times["torch"]), 2),
        "ratio_of_medians": round(statistics.median(times["course"]) / statistics.median(times["torch"]), 3),
        "ratio_min_max": [round(min(ratios), 3), round(max(ratios), 3)],
        "cpu_time_ratio": round(statistics.median(cpu_ratios), 3),
        "pairs": pairs,
        "threads": args.threads,
        "batch": c.batch,
        "dropout": c.dropout,
        "max_logit_diff_eval": max_diff,
        "torch_version": torch.__version__,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
