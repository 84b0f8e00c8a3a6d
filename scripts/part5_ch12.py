"""The measurements of chapter 12 that are too long for the book: run once, commit the small results.

    nice .venv/bin/python scripts/part5_ch12.py lm        # the two character LMs (checkpoints/lm-*.pt)
    nice .venv/bin/python scripts/part5_ch12.py compare   # causal LM vs prefix LM vs encoder-decoder, equal CPU time
    nice .venv/bin/python scripts/part5_ch12.py residual  # 1/sqrt(2N) residual scaling: early loss, 3 seeds
    nice .venv/bin/python scripts/part5_ch12.py sweep     # model sizes at a fixed compute budget

Each writes ``checkpoints/ch12/<section>.json`` (and ``lm`` the float16
checkpoints ``checkpoints/lm-shakespeare.pt`` and ``checkpoints/lm-tatoeba-zh.pt``).
Set ``COURSE_LIB_DATA`` (``make`` does). One thread per process.
Chapter 12 (``book/12_language_model.ipynb``) reads the results.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_lib.data import load_tatoeba_en_zh, split_by_source  # noqa: E402
from course_lib.data.lm import CharVocabulary, lm_batches  # noqa: E402
from course_lib.decoding import GenerationConfig, generate  # noqa: E402
from course_lib.language_model import LanguageModel, LanguageModelConfig  # noqa: E402
from course_lib.lm_train import LMRecipe, build_lm_data, perplexity, train_language_model  # noqa: E402
from course_lib.metrics import bleu, paired_bleu_test  # noqa: E402
from course_lib.model import Transformer, TransformerConfig  # noqa: E402
from course_lib.training import TrainConfig, evaluate_loss, export_for_inference, train  # noqa: E402

OUT = ROOT / "checkpoints" / "ch12"
SEP, EOS, PAD = 1, 2, 0  # <bos> doubles as the separator "<sep>" between English and Chinese


def write(name: str, payload: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(payload, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT / name}.json", flush=True)


def curve(result) -> dict:
    return {"curve_steps": [h["step"] for h in result.history], "loss": [round(h["loss"], 4) for h in result.history],
            "elapsed_s": [round(h.get("elapsed_s", 0.0), 1) for h in result.history],
            "valid_steps": [v["step"] for v in result.valid_history], "valid_loss": [round(v["valid_loss"], 4) for v in result.valid_history]}


# ----------------------------------------------------------------------------------------------- lm
def run_lm(budget: dict[str, float]) -> None:
    out = {}
    for data, seconds in budget.items():
        recipe = LMRecipe(data=data, seq_len=64, batch_size=16, steps=100000, time_budget_s=seconds, eval_every=100, seed=0)
        vocab, train_ids, valid_ids = build_lm_data(recipe)
        path = Path("/tmp") / f"ch12-lm-{data}.pt"
        model, vocab, result = train_language_model(recipe, path, data=(vocab, train_ids, valid_ids))
        small = ROOT / "checkpoints" / f"lm-{data.replace('tinyshakespeare', 'shakespeare')}.pt"
        export_for_inference(path, small)
        ppl = perplexity(model.eval(), valid_ids, recipe.seq_len, max_windows=400)
        out[data] = {"recipe": dataclasses.asdict(recipe), "steps": result.step, "train_s": round(result.elapsed_s, 1),
                     "parameters": model.num_parameters(), "vocab_size": len(vocab), "valid_perplexity": round(ppl, 3),
                     "checkpoint": str(small.relative_to(ROOT)), "checkpoint_bytes": small.stat().st_size, **curve(result)}
        print(data, out[data]["steps"], ppl, flush=True)
    write("lm", out)


# ------------------------------------------------------------------------------------------ compare
def translation_data(max_en: int = 32, max_zh: int = 16):
    """Character-level Tatoeba pairs (English lower-cased), split by source, one joint vocabulary."""
    def keep(pairs):
        return [(e.lower(), z) for e, z in pairs if len(e) <= max_en and len(z) <= max_zh]

    train_p, valid_p, test_p = (keep(p) for p in split_by_source(load_tatoeba_en_zh(), 0.05, 0.05, 0))
    vocab = CharVocabulary("".join(e + z for e, z in train_p))
    return vocab, train_p, valid_p, test_p


def prefix_lm_mask(tokens: torch.Tensor, prefix_lengths: torch.Tensor, pad_id: int = PAD) -> torch.Tensor:
    """Exercise 8.4's mask: key j visible to query i when j is in the prefix or j <= i; padding keys hidden. (batch, 1, L, L)."""
    L = tokens.size(1)
    i = torch.arange(L)[:, None]
    j = torch.arange(L)[None, :]
    allowed = (j[None] < prefix_lengths[:, None, None]) | (j <= i)[None]  # (batch, L, L)
    return (allowed & (tokens != pad_id)[:, None, :])[:, None]


class DecoderTranslator(nn.Module):
    """A LanguageModel reading ``english <sep> chinese``; ``prefix=True`` lets the English part attend both ways."""

    def __init__(self, config: LanguageModelConfig, prefix: bool) -> None:
        super().__init__()
        self.lm, self.prefix = LanguageModel(config), prefix
        self.config = config

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if not self.prefix:
            return self.lm(tokens)
        prefix_lengths = (tokens == SEP).int().argmax(dim=1) + 1  # English and <sep>
        return self.lm(tokens, mask=prefix_lm_mask(tokens, prefix_lengths))

    def num_parameters(self) -> int:
        return self.lm.num_parameters()


def pad(rows: list[list[int]]) -> torch.Tensor:
    out = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
    for r, row in enumerate(rows):
        out[r, : len(row)] = torch.tensor(row)
    return out


def decoder_batches(pairs, vocab, batch_size, generator, n_batches):
    """(inputs, targets): english <sep> chinese <eos>; targets hidden (pad) on the English part."""
    for _ in range(n_batches):
        idx = torch.randint(0, len(pairs), (batch_size,), generator=generator).tolist()
        ins, outs = [], []
        for k in idx:
            e, z = vocab.encode(pairs[k][0]), vocab.encode(pairs[k][1])
            seq = e + [SEP] + z + [EOS]
            ins.append(seq[:-1])
            outs.append([PAD] * len(e) + seq[len(e) + 1 :])
        yield pad(ins), pad(outs)


def seq2seq_batches(pairs, vocab, batch_size, generator, n_batches):
    for _ in range(n_batches):
        idx = torch.randint(0, len(pairs), (batch_size,), generator=generator).tolist()
        src = pad([vocab.encode(pairs[k][0]) + [EOS] for k in idx])
        tgt = [vocab.encode(pairs[k][1]) for k in idx]
        yield src, pad([[SEP] + z for z in tgt]), pad([z + [EOS] for z in tgt])


@torch.no_grad()
def decoder_translate(model: DecoderTranslator, sentences: list[str], vocab, max_new: int = 18) -> list[str]:
    """Greedy, batched by English length (prompts of one length need no padding)."""
    model.eval()
    out = {}
    by_len: dict[int, list[str]] = {}
    for s in dict.fromkeys(sentences):
        by_len.setdefault(len(s), []).append(s)
    for group in by_len.values():
        tokens = torch.tensor([vocab.encode(s) + [SEP] for s in group])
        done = torch.zeros(len(group), dtype=torch.bool)
        for _ in range(max_new):
            logits = model(tokens)[:, -1]
            logits[:, [PAD, SEP]] = float("-inf")
            nxt = logits.argmax(-1).masked_fill(done, PAD)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
            done |= nxt == EOS
            if done.all():
                break
        for s, row in zip(group, tokens[:, len(vocab.encode(group[0])) + 1 :].tolist()):
            out[s] = vocab.decode(row[: row.index(EOS)] if EOS in row else row)
    return [out[s] for s in sentences]


def seq2seq_translate(model, sentences, vocab, max_new: int = 18):
    model.eval()
    out = {}
    uniq = list(dict.fromkeys(sentences))
    for k in range(0, len(uniq), 128):
        chunk = uniq[k : k + 128]
        ids = generate(model, pad([vocab.encode(s) + [EOS] for s in chunk]), GenerationConfig(max_len=max_new))
        for s, row in zip(chunk, ids.tolist()):
            out[s] = vocab.decode(row[: row.index(EOS)] if EOS in row else row)
    return [out[s] for s in sentences]


def comparison_models(vocab_size: int):
    common = dict(d_model=64, n_heads=4, dropout=0.1, norm_first=True, activation="gelu", max_len=64, scale_embedding=False)
    enc_dec = TransformerConfig(src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, n_encoder_layers=2, n_decoder_layers=2,
                                d_ff=256, share_embeddings=True, tie_output=True, pad_id=PAD, **common)
    n_target = Transformer(enc_dec).num_parameters()
    best = min(range(64, 513, 4), key=lambda f: abs(LanguageModel(LanguageModelConfig(vocab_size=vocab_size, n_layers=4, d_ff=f, pad_id=PAD, **common)).num_parameters() - n_target))
    dec = LanguageModelConfig(vocab_size=vocab_size, n_layers=4, d_ff=best, pad_id=PAD, **common)
    return enc_dec, dec


def compare_one_seed(seconds: float, seed: int, n_test: int, threads: int = 1):
    """The three translators of one seed, each trained for ``seconds`` of CPU time."""
    torch.set_num_threads(threads)
    vocab, train_p, valid_p, test_p = translation_data()
    test_p = test_p[:n_test]
    enc_dec_cfg, dec_cfg = comparison_models(len(vocab))
    refs = [z for _, z in test_p]
    runs, hyps = [], {}
    for kind in ("encoder-decoder", "causal LM", "prefix LM"):
        torch.manual_seed(seed)
        model = Transformer(enc_dec_cfg) if kind == "encoder-decoder" else DecoderTranslator(dec_cfg, prefix=kind == "prefix LM")
        make = seq2seq_batches if kind == "encoder-decoder" else decoder_batches
        valid = list(make(valid_p, vocab, 64, torch.Generator().manual_seed(999), 10))
        config = TrainConfig(max_steps=100000, time_budget_s=seconds, budget_clock="cpu", lr=3e-3, warmup_steps=100, schedule="warmup_cosine",
                             label_smoothing=0.1, pad_id=PAD, clip_grad_norm=1.0, amp="off", entropy_every=None, log_every=10,
                             eval_every=100000, seed=seed, progress=False)
        result = train(model, lambda epoch, s=seed: make(train_p, vocab, 32, torch.Generator().manual_seed(s * 1000 + epoch), 500), config)
        valid_loss = evaluate_loss(model, valid, pad_id=PAD)["loss"]
        t0 = time.perf_counter()
        out = (seq2seq_translate if kind == "encoder-decoder" else decoder_translate)(model, [e for e, _ in test_p], vocab)
        hyps[kind] = out
        runs.append({"model": kind, "seed": seed, "parameters": model.num_parameters(), "steps": result.step,
                     "train_s": round(result.elapsed_s, 1), "valid_loss": round(valid_loss, 4),
                     "bleu": round(bleu(out, refs, "zh"), 2), "decode_s": round(time.perf_counter() - t0, 1),
                     "curve_steps": [h["step"] for h in result.history], "curve_loss": [round(h["loss"], 4) for h in result.history],
                     "curve_elapsed_s": [round(h.get("elapsed_s", 0.0), 1) for h in result.history],
                     "examples": [(e, z, h) for (e, z), h in list(zip(test_p, out))[:4]]})
        print(runs[-1], flush=True)
    return runs, hyps


def run_compare(seconds: float, seeds: list[int], n_test: int, jobs: int = 2) -> None:
    """Train the three translators for each seed, ``jobs`` seeds at a time (one process and one thread each)."""
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing
    vocab, train_p, _, test_p = translation_data()
    test_p = test_p[:n_test]
    _, dec_cfg = comparison_models(len(vocab))
    refs = [z for _, z in test_p]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        done = list(pool.map(compare_one_seed, [seconds] * len(seeds), seeds, [n_test] * len(seeds)))
    runs = [r for seed_runs, _ in done for r in seed_runs]
    hyps = {(kind, seed): out for seed, (_, seed_hyps) in zip(seeds, done) for kind, out in seed_hyps.items()}
    tests = []
    for seed in seeds:
        for kind in ("causal LM", "prefix LM"):
            res = paired_bleu_test(hyps[("encoder-decoder", seed)], hyps[(kind, seed)], refs, "zh")
            tests.append({"seed": seed, "baseline": "encoder-decoder", "system": kind, **{k: round(v, 4) for k, v in res.items()}})
        res = paired_bleu_test(hyps[("causal LM", seed)], hyps[("prefix LM", seed)], refs, "zh")
        tests.append({"seed": seed, "baseline": "causal LM", "system": "prefix LM", **{k: round(v, 4) for k, v in res.items()}})
    write("compare", {"seconds": seconds, "clock": "CPU time of the training process (time.process_time), one thread",
                      "seeds": seeds, "n_test": len(test_p), "n_train": len(train_p), "vocab_size": len(vocab),
                      "d_ff_decoder_only": dec_cfg.d_ff, "runs": runs, "paired_tests": tests})


# ----------------------------------------------------------------------------------------- residual
def run_residual(seeds: list[int], steps: int, n_layers: int = 24, lr: float = 1e-3, warmup: int = 30) -> None:
    recipe = LMRecipe(seq_len=64, batch_size=16)
    vocab, train_ids, valid_ids = build_lm_data(recipe)
    valid = list(lm_batches(valid_ids, 64, 16, generator=torch.Generator().manual_seed(7), n_batches=10))
    runs = []
    for scaled in (False, True):
        for seed in seeds:
            torch.manual_seed(seed)
            cfg = LanguageModelConfig(vocab_size=len(vocab), d_model=64, n_heads=4, n_layers=n_layers, d_ff=256, dropout=0.0,
                                      norm_first=True, activation="gelu", max_len=64, scale_embedding=False, scaled_residual_init=scaled)
            model = LanguageModel(cfg)
            config = TrainConfig(max_steps=steps, lr=lr, warmup_steps=warmup, schedule="warmup_cosine", label_smoothing=0.0, pad_id=None,
                                 clip_grad_norm=None, amp="off", entropy_every=None, log_every=5, seed=seed, progress=False)
            result = train(model, lambda epoch, s=seed: lm_batches(train_ids, 64, 16, generator=torch.Generator().manual_seed(s * 1000 + epoch), n_batches=500), config)
            runs.append({"scaled": scaled, "seed": seed, "valid_loss": round(evaluate_loss(model, valid, pad_id=None)["loss"], 4),
                         "steps": [h["step"] for h in result.history], "loss": [round(h["loss"], 4) for h in result.history],
                         "grad_norm": [round(h.get("grad_norm") or float("nan"), 3) for h in result.history]})
            print(scaled, seed, runs[-1]["valid_loss"], flush=True)
    write("residual", {"n_layers": n_layers, "d_model": 64, "steps": steps, "lr": lr, "warmup_steps": warmup, "seeds": seeds, "runs": runs})


# -------------------------------------------------------------------------------------------- sweep
SIZES = [(32, 2), (64, 2), (96, 3), (128, 4)]


def non_embedding_parameters(model: LanguageModel) -> int:
    return model.num_parameters() - model.stack.embedding.embedding.weight.numel()


def run_sweep(budget_flops: float, seeds: list[int]) -> None:
    recipe = LMRecipe(seq_len=64, batch_size=16)
    vocab, train_ids, valid_ids = build_lm_data(recipe)
    valid = list(lm_batches(valid_ids, 64, 16, generator=torch.Generator().manual_seed(7), n_batches=20))
    tokens_per_step = 64 * 16
    runs = []
    for d_model, n_layers in SIZES:
        for seed in seeds:
            torch.manual_seed(seed)
            model = LanguageModel(LMRecipe(d_model=d_model, n_layers=n_layers, d_ff=4 * d_model, dropout=0.0, seq_len=64).model_config(len(vocab)))
            n = non_embedding_parameters(model)
            steps = max(20, round(budget_flops / (6 * n * tokens_per_step)))
            config = TrainConfig(max_steps=steps, lr=2e-3, warmup_steps=max(10, steps // 10), schedule="warmup_cosine", label_smoothing=0.0,
                                 pad_id=None, amp="off", entropy_every=None, log_every=10, seed=seed, progress=False)
            t0 = time.perf_counter()
            train(model, lambda epoch, s=seed: lm_batches(train_ids, 64, 16, generator=torch.Generator().manual_seed(s * 1000 + epoch), n_batches=500), config)
            runs.append({"budget_flops": budget_flops, "d_model": d_model, "n_layers": n_layers, "seed": seed, "non_embedding_parameters": n, "steps": steps,
                         "tokens": steps * tokens_per_step, "train_s": round(time.perf_counter() - t0, 1),
                         "valid_loss": round(evaluate_loss(model, valid, pad_id=None)["loss"], 4)})
            print(runs[-1], flush=True)
    old = json.loads((OUT / "sweep.json").read_text()) if (OUT / "sweep.json").exists() else {"runs": []}
    runs = [dict(r, budget_flops=r.get("budget_flops", old.get("budget_flops"))) for r in old["runs"]
            if r.get("budget_flops", old.get("budget_flops")) != budget_flops] + runs  # other budgets are kept
    write("sweep", {"budgets_flops": sorted({r["budget_flops"] for r in runs}), "flops_rule": "6 * non-embedding parameters * tokens", "seq_len": 64,
                    "batch_size": 16, "seeds": seeds, "runs": runs})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("section", choices=["lm", "compare", "residual", "sweep"])
    p.add_argument("--seconds", type=float, default=None, help="lm: per model; compare: per run")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2, help="compare: seeds trained at once, one process each")
    p.add_argument("--seeds", type=int, nargs="*", default=None, help="sweep: seeds (default 0)")
    p.add_argument("--budget-steps", type=int, nargs="*", default=None, help="sweep: budgets, in steps of the largest model (default 60 200)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if a.section == "lm":
        s = a.seconds or 240.0
        run_lm({"tinyshakespeare": s, "tatoeba-zh": s * 0.75})
    elif a.section == "compare":
        run_compare(a.seconds or 200.0, [0, 1], n_test=500, jobs=a.jobs)
    elif a.section == "residual":
        run_residual([0, 1, 2], steps=300)
    else:
        for budget_steps in a.budget_steps or [60, 200]:  # steps of the 128-wide, 4-layer model that the budget pays for
            run_sweep(6 * 786_432 * 64 * 16 * budget_steps, a.seeds or [0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
