"""KV-cached vs recomputing greedy decoding (chapter 10).

Generates ``--new-tokens`` tokens (default 64, no early stop) for a batch of
source sentences with ``course_lib.decoding.greedy_decode``, once with the KV
cache (each step feeds only the newest token) and once recomputing the whole
prefix every step, and compares time and logits.

Target: speed-up >= 3x at 64 new tokens, logits equal to 1e-5.

Grouped-query attention (chapter 13): a decoder-only ``LanguageModel`` with
today's block (``LanguageModelConfig.modern``, 8 heads, d_model 256, 4 layers)
continues a prompt by ``--new-tokens`` with the KV cache, once with 8
key/value heads (multi-head), 2 (grouped-query) and 1 (multi-query): the
cache's bytes at the end and tokens per second of each
(``--skip-gqa`` leaves this part out).

    python benchmarks/bench_decode.py [--new-tokens 64] [--batch 16] [--threads 2]

The last line of output is JSON: ``{"speedup": ..., "max_abs_diff": ..., ..., "gqa": [{"n_kv_heads", "cache_bytes", "tokens_per_s"}, ...]}``.
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
    ap.add_argument("--skip-gqa", action="store_true", help="leave out the grouped-query comparison")
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
    gqa = [] if args.skip_gqa else grouped_query_rows(args)
    print(json.dumps({
        "speedup": round(t_full / t_cache, 2), "max_abs_diff": max_diff, "same_tokens": bool(torch.equal(tok_c, tok_f)),
        "cached_s": round(t_cache, 4), "recompute_s": round(t_full, 4), "new_tokens": args.new_tokens,
        "batch": args.batch, "threads": args.threads, "gqa": gqa,
    }))


def grouped_query_rows(args: argparse.Namespace, n_heads: int = 8) -> list[dict]:
    """KV-cache bytes and cached decoding speed of a modern LanguageModel at n_kv_heads = n_heads, n_heads/4, 1."""
    from course_lib.decoding import GenerationConfig, generate
    from course_lib.language_model import LanguageModel, LanguageModelConfig

    prompt = torch.randint(4, args.vocab, (args.batch, args.src_len))
    rows = []
    for n_kv in (n_heads, n_heads // 4, 1):
        torch.manual_seed(0)
        config = LanguageModelConfig.modern(args.vocab, d_model=256, n_heads=n_heads, n_kv_heads=n_kv, n_layers=4,
                                            max_len=args.src_len + args.new_tokens + 1)
        model = LanguageModel(config).eval()
        cache = model.new_cache()
        with torch.no_grad():  # the cache of the whole continuation, filled by the model directly
            model(torch.cat([prompt, torch.randint(4, args.vocab, (args.batch, args.new_tokens))], dim=1), cache=cache)
        settings = GenerationConfig(max_len=args.new_tokens, eos_id=None)
        generate(model, prompt, settings)  # warm-up
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            generate(model, prompt, settings)
            best = min(best, time.perf_counter() - t0)
        rows.append({"n_kv_heads": n_kv, "cache_bytes": cache.num_bytes(), "tokens_per_s": round(args.batch * args.new_tokens / best, 1)})
        kind = "multi-head" if n_kv == n_heads else "multi-query" if n_kv == 1 else "grouped-query"
        print(f"{kind:>13} ({n_kv} key/value heads of {n_heads}): cache {cache.num_bytes() / 2**20:.2f} MiB "
              f"after {args.src_len} + {args.new_tokens} tokens x {args.batch}, {rows[-1]['tokens_per_s']:.0f} tokens/s")
    return rows


if __name__ == "__main__":
    main()
