"""English -> Chinese BLEU after a fixed wall-clock training budget (chapter 9).

Trains, with the same data, budget and recipe (``course_lib.translate.Recipe``:
optimizer, schedule, label smoothing, clipping, batches), two models of equal
size on ``--threads`` CPU threads:

* ``course_lib``: :class:`course_lib.model.Transformer`;
* the baseline: :class:`torch.nn.Transformer` with the same widths and depths,
  embeddings scaled by sqrt(d_model), the same sinusoidal positions and a tied
  output layer (defined below);

then reports held-out test BLEU (``sacrebleu``, ``tokenize='zh'``, i.e.
character-level) of each, the validation loss of each, and a paired
bootstrap test of the BLEU difference (:func:`course_lib.metrics.paired_bleu_test`:
``p_value >= 0.05`` means the difference is within what resampling the test
set alone produces). The test set is the Tatoeba test split of
:func:`course_lib.data.split_by_source` (no English sentence of the test set
occurs in training) after the recipe's length filter, which is applied to the
training, validation and test pairs alike (printed below).

    python benchmarks/bench_translate.py                 # 10 minutes per model
    python benchmarks/bench_translate.py --budget-s 60   # a quick run
    python benchmarks/bench_translate.py --eval-only     # the committed checkpoint, no training
    python benchmarks/bench_translate.py --seed 1        # another initialisation and batch order

Last output line, JSON: ``{"bleu": ..., "bleu_torch_baseline": ..., "p_value": ..., "train_s": ...}``
(``bleu``: one hypothesis per test pair against its own reference;
``*_all_refs``: one per distinct English sentence against all its references).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

import torch
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CHECKPOINT = ROOT / "checkpoints" / "en-zh.pt"


class TorchTransformerBaseline(nn.Module):
    """``torch.nn.Transformer`` wrapped with the course's call signature.

    Same sizes as a :class:`course_lib.model.Transformer` of ``config``;
    converts the course's masks (bool, ``True`` = may attend) to PyTorch's
    (``True`` = blocked). Provides ``encode``/``decode``/``forward`` so that
    ``course_lib.training.train`` and ``course_lib.decoding`` run it unchanged
    (decoding without a KV cache: ``nn.Transformer`` has none).
    """

    def __init__(self, config) -> None:
        super().__init__()
        c = self.config = config
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model)
        self.tgt_embed = nn.Embedding(c.tgt_vocab_size, c.d_model)
        for emb in (self.src_embed, self.tgt_embed):
            nn.init.normal_(emb.weight, std=c.d_model**-0.5)
        pos = torch.arange(c.max_len, dtype=torch.float64)[:, None]
        div = torch.pow(10000.0, torch.arange(0, c.d_model, 2, dtype=torch.float64) / c.d_model)
        pe = torch.zeros(c.max_len, c.d_model, dtype=torch.float64)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos / div), torch.cos(pos / div)
        self.register_buffer("pe", pe.float(), persistent=False)
        self.dropout = nn.Dropout(c.dropout)
        self.transformer = nn.Transformer(
            d_model=c.d_model, nhead=c.n_heads, num_encoder_layers=c.n_encoder_layers,
            num_decoder_layers=c.n_decoder_layers, dim_feedforward=c.d_ff, dropout=c.dropout,
            activation=c.activation, batch_first=True, norm_first=c.norm_first,
        )
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        if c.tie_output:
            self.generator.weight = self.tgt_embed.weight

    def _embed(self, emb: nn.Embedding, ids: Tensor) -> Tensor:
        return self.dropout(emb(ids) * math.sqrt(self.config.d_model) + self.pe[: ids.size(1)])

    def source_mask(self, src: Tensor) -> Tensor:
        return (src != self.config.pad_id)[:, None, None, :]

    def encode(self, src: Tensor, *, src_mask: Tensor | None = None) -> Tensor:
        mask = self.source_mask(src) if src_mask is None else src_mask
        return self.transformer.encoder(self._embed(self.src_embed, src), src_key_padding_mask=~mask[:, 0, 0, :])

    def decode(self, tgt: Tensor, memory: Tensor, *, tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None) -> Tensor:
        n = tgt.size(1)
        causal = torch.ones(n, n, dtype=torch.bool, device=tgt.device).tril()
        memory_pad = None if memory_mask is None else ~memory_mask[:, 0, 0, :]
        h = self.transformer.decoder(
            self._embed(self.tgt_embed, tgt), memory, tgt_mask=~causal,
            tgt_key_padding_mask=tgt == self.config.pad_id, memory_key_padding_mask=memory_pad,
        )
        return self.generator(h)

    def forward(self, src: Tensor, tgt: Tensor, *, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None) -> Tensor:
        src_mask = self.source_mask(src) if src_mask is None else src_mask
        return self.decode(tgt, self.encode(src, src_mask=src_mask), memory_mask=src_mask)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def _evaluate(model: nn.Module, data, pairs, beam_size: int) -> dict:
    from course_lib.translate import Translator

    return Translator(model, data.src_tokenizer, data.tgt_tokenizer).evaluate(
        pairs, beam_size=beam_size, return_hypotheses=True
    )


def main() -> None:
    from course_lib.translate import Recipe, Translator, build_data, build_model, held_out_pairs, train_translator

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-s", type=float, default=600.0, help="training wall-clock seconds per model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam-size", type=int, default=4, help="1 = greedy")
    ap.add_argument("--eval-only", action="store_true", help="evaluate --checkpoint on the test set, no training")
    ap.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--baseline-first", action="store_true", help="train the nn.Transformer baseline first")
    ap.add_argument("--save", default=None, help="save the course_lib model trained here to this checkpoint")
    ap.add_argument("--seed", type=int, default=0, help="seed of both models' initialisation and batch order")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import warnings

    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors is in prototype stage")

    if args.eval_only:
        tr = Translator.from_checkpoint(args.checkpoint)
        recipe = tr.recipe
        pairs = held_out_pairs(recipe.data, tr.src_tokenizer, tr.tgt_tokenizer)
        print(f"checkpoint {args.checkpoint}: step {tr.checkpoint['step']}, "
              f"{sum(p.numel() for p in tr.model.parameters())} parameters")
        print(f"test pairs: {len(pairs)} (length filter: English <= {recipe.data.max_src_len} and Chinese <= "
              f"{recipe.data.max_tgt_len} tokens incl. <eos>, train/valid/test alike)")
        res = tr.evaluate(pairs, beam_size=args.beam_size)
        for s, r, h in res.pop("examples"):
            print(f"  {s} | ref {r} | hyp {h}")
        print(json.dumps({"bleu": res["bleu"], "bleu_all_refs": res["bleu_all_refs"], "n_test_pairs": res["n_pairs"],
                          "beam_size": args.beam_size, "step": tr.checkpoint["step"], "train_s": None}, ensure_ascii=False))
        return

    recipe = Recipe()
    recipe = dataclasses.replace(
        recipe,
        train=dataclasses.replace(recipe.train, max_steps=10**7, time_budget_s=args.budget_s, progress=False, seed=args.seed),
        data=dataclasses.replace(recipe.data, seed=args.seed),
    )
    data = build_data(recipe)
    print(data.summary())
    print(f"length filter: English <= {recipe.data.max_src_len} BPE tokens and Chinese <= {recipe.data.max_tgt_len} "
          f"characters (both incl. <eos>), applied to train, valid and test alike")
    pairs = [(p[0], p[1]) for p in data.test.pairs]
    src_v, tgt_v = data.src_tokenizer.vocab_size, data.tgt_tokenizer.vocab_size
    config = recipe.model.transformer_config(src_v, tgt_v)
    print(f"recipe: {json.dumps(recipe.to_dict()['model'])}; {json.dumps({k: v for k, v in recipe.train.to_dict().items() if k in ('optimizer', 'lr', 'schedule', 'warmup_steps', 'label_smoothing', 'clip_grad_norm', 'weight_decay')})}")

    results: dict[str, dict] = {}
    hypotheses: dict[str, list[str]] = {}
    order = ["torch", "course_lib"] if args.baseline_first else ["course_lib", "torch"]
    for name in order:
        if name == "torch" and args.skip_baseline:
            continue
        torch.manual_seed(recipe.train.seed)
        model = build_model(recipe, src_v, tgt_v) if name == "course_lib" else TorchTransformerBaseline(config)
        t0 = time.perf_counter()
        out = args.save if (name == "course_lib" and args.save) else None
        model, _, result = train_translator(recipe, out, data=data, model=model)
        train_s = time.perf_counter() - t0
        ev = _evaluate(model, data, pairs, args.beam_size)
        hypotheses[name] = ev.pop("hypotheses")
        results[name] = {
            "bleu": ev["bleu"], "bleu_all_refs": ev["bleu_all_refs"], "steps": result.step,
            "train_s": round(result.elapsed_s, 1), "steps_per_s": round(result.step / result.elapsed_s, 2),
            "parameters": model.num_parameters(), "valid_loss": round(result.valid_history[-1]["valid_loss"], 4),
            "decode_s": ev["decode_s"],
        }
        print(f"{name}: {json.dumps(results[name])}")
        for s, r, h in ev["examples"]:
            print(f"  {s} | ref {r} | hyp {h}")

    ours = results["course_lib"]
    base = results.get("torch", {})
    test = None
    if "torch" in hypotheses:
        from course_lib.metrics import paired_bleu_test

        test = paired_bleu_test(hypotheses["torch"], hypotheses["course_lib"], [r for _, r in pairs], "zh")
        print(f"paired bootstrap (1,000 resamples of the {len(pairs)} test pairs): course_lib - nn.Transformer = "
              f"{test['difference']:+.2f} BLEU, p = {test['p_value']:.3f} "
              f"({'significant' if test['p_value'] < 0.05 else 'not significant'} at 0.05); 95% intervals "
              f"+-{test['ci95']:.2f} and +-{test['ci95_baseline']:.2f}")
    print(json.dumps({
        "bleu": ours["bleu"], "bleu_torch_baseline": base.get("bleu"),
        "bleu_all_refs": ours["bleu_all_refs"], "bleu_all_refs_torch_baseline": base.get("bleu_all_refs"),
        "train_s": ours["train_s"], "train_s_torch_baseline": base.get("train_s"),
        "steps": ours["steps"], "steps_torch_baseline": base.get("steps"),
        "steps_per_s": ours["steps_per_s"], "steps_per_s_torch_baseline": base.get("steps_per_s"),
        "parameters": ours["parameters"], "parameters_torch_baseline": base.get("parameters"),
        "valid_loss": ours["valid_loss"], "valid_loss_torch_baseline": base.get("valid_loss"),
        "p_value": None if test is None else round(test["p_value"], 4),
        "n_test_pairs": len(pairs), "beam_size": args.beam_size, "threads": args.threads, "budget_s": args.budget_s,
        "seed": args.seed,
    }))


if __name__ == "__main__":
    main()
