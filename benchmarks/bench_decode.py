"""KV-cached vs recomputing greedy decoding (chapter 10).

Generates ``--new-tokens`` tokens (default 64, no early stop) for a batch of
source sentences with ``course_lib.decoding.greedy_decode``, once with the KV
cache (each step feeds only the newest token) and once recomputing the whole
prefix every step, and compares time and logits.

Target: speed-up >= 3x at 64 new tokens, logits equal to 1e-5.

    python benchmarks/bench_decode.py [--new-tokens 64] [--batch 16] [--threads 2]

The last line of output is JSON: ``{"speedup": ..., "max_abs_diff": ..., ...}``.
The model has random weights (speed does not depend on training); its sizes
are those of the course's translator (``course_lib.translate.ModelSettings``).
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def main() -> None:
    from course_lib.decoding import greedy_decode
    from course_lib.model import Transformer
    from course_lib.translate import ModelSettings

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--src-len", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3, help="best of this many timings")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=3000)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    settings = ModelSettings()
    model = Transformer(settings.transformer_config(args.vocab, args.vocab)).eval()
    src = torch.randint(4, args.vocab, (args.batch, args.src_len))

    def run(use_cache: bool):
        best, result = float("inf"), None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            result = greedy_decode(model, src, args.new_tokens, eos_id=None, use_cache=use_cache, return_logits=True)
            best = min(best, time.perf_counter() - t0)
        return best, result

    run(True)  # warm-up
    t_cache, (tok_c, logits_c) = run(True)
    t_full, (tok_f, logits_f) = run(False)
    max_diff = float((logits_c - logits_f).abs().max())
    print(f"model: d_model {settings.d_model}, {settings.n_encoder_layers}+{settings.n_decoder_layers} layers, "
          f"vocab {args.vocab}, batch {args.batch}, {args.new_tokens} new tokens, {args.threads} threads")
    print(f"KV cache:     {t_cache:.3f} s ({args.batch * args.new_tokens / t_cache:.0f} tokens/s)")
    print(f"recomputing:  {t_full:.3f} s ({args.batch * args.new_tokens / t_full:.0f} tokens/s)")
    print(f"same tokens: {bool(torch.equal(tok_c, tok_f))}, max |logit difference| {max_diff:.2e}")
    print(json.dumps({
        "speedup": round(t_full / t_cache, 2), "max_abs_diff": max_diff, "same_tokens": bool(torch.equal(tok_c, tok_f)),
        "cached_s": round(t_cache, 4), "recompute_s": round(t_full, 4), "new_tokens": args.new_tokens,
        "batch": args.batch, "threads": args.threads,
    }))


if __name__ == "__main__":
    main()
