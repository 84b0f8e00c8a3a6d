"""The course's modern decoder against an equal-size Hugging Face Llama (chapters 12-13).

Both models are built from random weights, with the same sizes and today's
block (Pre-RMSNorm, RoPE, SwiGLU, grouped-query attention, no biases, tied
embeddings): ``course_lib.language_model.LanguageModel`` with
``LanguageModelConfig.modern(...)`` and ``transformers.LlamaForCausalLM``
(its default attention implementation, PyTorch's fused
``scaled_dot_product_attention``; the course's attention is written out by
hand). Their parameter counts are checked to be equal.

Both train on the same batches of tiny-shakespeare characters
(``course_lib.data.lm_batches``: random windows, ``(tokens[:-1], tokens[1:])``),
with the same optimizer (AdamW, linear warm-up then constant learning rate,
gradient clipping at 1.0) and the same number of steps. The steps alternate
in one process (course then Llama, Llama then course, ...) so load from other
processes hits both alike; each step is timed alone.

Printed: training steps per second of each and their ratio (target: course
>= 0.9x the reference), the validation loss of each after the budget (nats
per character on the last 10% of the text, the same windows for both), and
the model-FLOP utilisation (MFU) of a training step: FLOPs of one forward and
backward counted by ``torch.utils.flop_counter.FlopCounterMode`` times steps
per second, divided by this machine's peak float32 matrix-multiply rate,
measured here (best of several square matmuls). The two models do the same
arithmetic, so both MFUs use one FLOP count, the larger of the two: on the
CPU, FlopCounterMode has no formula for PyTorch's fused attention kernel
(``_scaled_dot_product_flash_attention_for_cpu``), which the reference uses,
so the reference's own count misses its attention (both counts are printed).

Usage::

    python benchmarks/bench_lm.py [--steps 300] [--threads 2] [--quick] [--device cpu]

``--quick``: 20 steps of a smaller model, the same keys. The last line is
JSON with at least ``steps_per_s_ratio`` (course / reference), ``valid_loss``,
``valid_loss_reference``, ``mfu`` and ``mfu_reference``.
Needs ``transformers`` (the dev extra); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode


def build_models(vocab_size: int, args: argparse.Namespace):
    """The course's modern LanguageModel and an equal LlamaForCausalLM, both randomly initialised."""
    import transformers

    from course_lib.language_model import LanguageModel, LanguageModelConfig

    d_ff = args.d_ff or 8 * args.d_model // 3
    torch.manual_seed(args.seed)
    course = LanguageModel(LanguageModelConfig.modern(
        vocab_size, d_model=args.d_model, n_heads=args.heads, n_kv_heads=args.kv_heads, n_layers=args.layers,
        d_ff=d_ff, max_len=args.seq_len, eps=1e-6,
    ))
    cfg = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=args.d_model, intermediate_size=d_ff, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, max_position_embeddings=args.seq_len,
        rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    torch.manual_seed(args.seed)
    reference = transformers.LlamaForCausalLM(cfg)
    return course, reference


def loss_of(model, x: torch.Tensor, y: torch.Tensor, is_reference: bool) -> torch.Tensor:
    """Mean next-character cross-entropy of a batch ``x``, ``y`` ``(batch, seq_len)``."""
    logits = model(input_ids=x).logits if is_reference else model(x)  # (batch, seq_len, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())


def make_trainer(model, is_reference: bool, args: argparse.Namespace):
    """One training step as a function of a batch, with its own AdamW and warm-up."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / args.warmup))

    def step(x: torch.Tensor, y: torch.Tensor) -> float:
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model, x, y, is_reference)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return float(loss.detach())

    return step


def flops_per_step(model, x: torch.Tensor, y: torch.Tensor, is_reference: bool) -> int:
    """FLOPs of one forward and backward pass (FlopCounterMode: matmuls, attention kernels)."""
    with FlopCounterMode(display=False) as counter:
        loss_of(model, x, y, is_reference).backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def measured_peak_flops(device: torch.device, n: int = 1024, repeats: int = 10) -> float:
    """This machine's float32 matrix-multiply rate (FLOP/s): the best of ``repeats`` ``n x n`` products."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    best = float("inf")
    for _ in range(repeats + 2):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def valid_loss(model, batches, is_reference: bool) -> float:
    model.eval()
    value = statistics.fmean(float(loss_of(model, x, y, is_reference)) for x, y in batches)
    model.train()
    return value


def main() -> None:
    from course_lib.data import CharVocabulary, lm_batches, load_tiny_shakespeare, split_text_ids

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=None, help="default 8/3 d_model")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--valid-batches", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="20 steps of a smaller model (a smoke test)")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.batch, args.seq_len, args.d_model, args.layers, args.warmup, args.valid_batches = 20, 8, 64, 64, 2, 5, 5
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    text = load_tiny_shakespeare()
    vocab = CharVocabulary(text)
    train_ids, valid_ids = split_text_ids(torch.tensor(vocab.encode(text)), 0.1)
    batches = list(lm_batches(train_ids, args.seq_len, args.batch, generator=torch.Generator().manual_seed(args.seed),
                              n_batches=args.steps))
    held_out = [(x.to(device), y.to(device)) for x, y in lm_batches(
        valid_ids, args.seq_len, args.batch, generator=torch.Generator().manual_seed(1), n_batches=args.valid_batches)]

    course, reference = (m.to(device).train() for m in build_models(len(vocab), args))
    n_course = sum(p.numel() for p in course.parameters())
    n_ref = sum(p.numel() for p in reference.parameters())
    if n_course != n_ref:
        raise SystemExit(f"parameter counts differ: course {n_course}, reference {n_ref}")
    x0, y0 = (t.to(device) for t in batches[0])
    flops = flops_per_step(course, x0, y0, False)
    flops_ref = flops_per_step(reference, x0, y0, True)
    peak = measured_peak_flops(device)

    steps = {"course": make_trainer(course, False, args), "reference": make_trainer(reference, True, args)}
    times: dict[str, list[float]] = {"course": [], "reference": []}
    losses: dict[str, list[float]] = {"course": [], "reference": []}
    for i, (x, y) in enumerate(batches):
        x, y = x.to(device), y.to(device)
        for name in ("course", "reference") if i % 2 == 0 else ("reference", "course"):
            sync(device)
            t0 = time.perf_counter()
            losses[name].append(steps[name](x, y))
            sync(device)
            times[name].append(time.perf_counter() - t0)
    skip = min(3, len(batches) - 1)  # the first steps warm up allocators and kernels
    rate = {name: (len(t) - skip) / sum(t[skip:]) for name, t in times.items()}
    v_course, v_ref = valid_loss(course, held_out, False), valid_loss(reference, held_out, True)
    model_flops = max(flops, flops_ref)  # the same computation; a kernel FlopCounterMode cannot see counts 0
    mfu, mfu_ref = model_flops * rate["course"] / peak, model_flops * rate["reference"] / peak

    print(f"models: d_model {args.d_model}, {args.layers} layers, {args.heads} heads ({args.kv_heads} key/value), "
          f"{n_course:,} parameters each; batch {args.batch} x {args.seq_len} characters; {args.steps} steps; "
          f"{args.threads} threads on {device}; reference attention: {reference.config._attn_implementation}")
    print(f"steps/s: course {rate['course']:.2f}, reference {rate['reference']:.2f}, "
          f"ratio {rate['course'] / rate['reference']:.3f} (target >= 0.9)")
    print(f"final training loss: course {losses['course'][-1]:.3f}, reference {losses['reference'][-1]:.3f}")
    print(f"validation loss (nats/char): course {v_course:.3f}, reference {v_ref:.3f}")
    print(f"FLOPs per step counted: course {flops / 1e9:.3f} G, reference {flops_ref / 1e9:.3f} G"
          + (" (the reference's fused attention kernel is not counted on this device: both MFUs use the larger count)"
             if flops != flops_ref else ""))
    print(f"measured fp32 matmul peak {peak / 1e9:.1f} GFLOP/s; MFU course {mfu:.2%}, reference {mfu_ref:.2%}")
    print(json.dumps({
        "steps_per_s_ratio": round(rate["course"] / rate["reference"], 4),
        "valid_loss": round(v_course, 4), "valid_loss_reference": round(v_ref, 4),
        "mfu": round(mfu, 4), "mfu_reference": round(mfu_ref, 4),
        "steps_per_s": round(rate["course"], 3), "steps_per_s_reference": round(rate["reference"], 3),
        "flops_per_step": model_flops, "flops_counted": flops, "flops_counted_reference": flops_ref, "peak_flops": round(peak),
        "parameters": n_course, "steps": args.steps, "threads": args.threads, "device": str(device),
        "seed": args.seed, "quick": args.quick, "valid_ppl": round(math.exp(v_course), 3),
        "valid_ppl_reference": round(math.exp(v_ref), 3),
    }))


if __name__ == "__main__":
    main()
