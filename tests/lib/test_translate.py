"""Tests of course_lib.translate (the command line and the Translator) and of the committed checkpoint.

The tests that need the Tatoeba file run when ``COURSE_LIB_DATA`` points at a
folder laid out like ``../shared/data`` and are skipped otherwise.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from course_lib.translate import ModelSettings, Recipe, Translator, main, test_pairs as rebuild_test_pairs
from course_lib.training import TrainConfig, load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = ROOT / "checkpoints" / "en-zh.pt"
DATA = os.environ.get("COURSE_LIB_DATA")
HAVE_DATA = bool(DATA) and (Path(DATA) / "tatoeba-cmn-eng" / "cmn.txt").is_file()
real_data = pytest.mark.skipif(not HAVE_DATA, reason="set COURSE_LIB_DATA to a folder with tatoeba-cmn-eng/cmn.txt")


def test_recipe_round_trip_and_model_config():
    r = Recipe()
    again = Recipe.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again == r
    cfg = ModelSettings(d_model=32, n_heads=4).transformer_config(100, 50)
    assert (cfg.src_vocab_size, cfg.tgt_vocab_size, cfg.d_model, cfg.pad_id) == (100, 50, 32, 0)
    assert isinstance(r.train, TrainConfig)


@real_data
def test_cli_train_evaluate_translate(tmp_path, capsys):
    out, small = tmp_path / "tiny.pt", tmp_path / "tiny-fp16.pt"
    args = ["train", "--out", str(out), "--export", str(small), "--steps", "4", "--d-model", "16", "--n-heads", "2",
            "--n-encoder-layers", "1", "--n-decoder-layers", "1", "--d-ff", "32", "--batch-size", "16",
            "--max-src-len", "8", "--max-tgt-len", "10", "--src-vocab-size", "500", "--warmup-steps", "2", "--no-progress"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 4 and summary["world_size"] == 1
    ckpt = load_checkpoint(out)
    assert ckpt["step"] == 4 and ckpt["optimizer"] is not None and set(ckpt["tokenizers"]) == {"src", "tgt"}
    recipe = Recipe.from_dict(ckpt["extra"]["recipe"])
    assert recipe.data.max_src_len == 8 and recipe.model.d_model == 16
    log = [json.loads(x) for x in (tmp_path / "tiny.log.jsonl").read_text().splitlines()]
    every = recipe.train.log_every
    assert [x["step"] for x in log if "loss" in x] == [s for s in range(1, 5) if s % every == 0]
    assert small.stat().st_size < out.stat().st_size

    # the test set rebuilt from the checkpoint equals the one used in training
    tr = Translator.from_checkpoint(small)
    from course_lib.data import make_dataloaders

    data = make_dataloaders(recipe.data)
    rebuilt = rebuild_test_pairs(recipe.data, tr.src_tokenizer, tr.tgt_tokenizer)
    assert rebuilt == [(p[0], p[1]) for p in data.test.pairs]
    assert all(len(tr.src_tokenizer.encode(s)) <= 8 and len(tr.tgt_tokenizer.encode(t)) <= 10 for s, t in rebuilt)

    assert main(["evaluate", "--checkpoint", str(small), "--limit", "20"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["n_pairs"] == 20 and 0.0 <= res["bleu"] <= 100.0
    assert main(["translate", "--checkpoint", str(small), "--beam-size", "2", "Hello.", "I like cats."]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [x.split("\t")[0] for x in lines] == ["Hello.", "I like cats."]


def test_translator_keeps_the_input_order():
    from course_lib.data import train_bpe_tokenizer, train_char_tokenizer
    from course_lib.model import Transformer

    src_tok = train_bpe_tokenizer(["a b c d", "e f g"], vocab_size=30, min_frequency=1)
    tgt_tok = train_char_tokenizer(["一二三", "四五"])
    torch.manual_seed(0)
    model = Transformer(ModelSettings(d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32,
                                      max_len=40).transformer_config(src_tok.vocab_size, tgt_tok.vocab_size))
    tr = Translator(model, src_tok, tgt_tok)
    sentences = ["a b c d e f g a b", "a", "e f"]
    batched = tr.translate(sentences, batch_size=2)
    one_by_one = [tr.translate([s])[0] for s in sentences]
    assert batched == one_by_one
    with pytest.raises(TypeError, match="list of str"):
        tr.translate("a b")


# ----------------------------------------------------------------------------- the committed checkpoint
committed = pytest.mark.skipif(not CHECKPOINT.is_file(), reason=f"no committed checkpoint at {CHECKPOINT}")


@committed
def test_committed_checkpoint_is_small_and_documented():
    assert CHECKPOINT.stat().st_size <= 8 * 1024 * 1024
    readme = (ROOT / "checkpoints" / "README.md").read_text(encoding="utf-8")
    assert "python -m course_lib.translate train" in readme
    ckpt = load_checkpoint(CHECKPOINT)
    assert ckpt["extra"]["recipe"] and ckpt["model_config"] and set(ckpt["tokenizers"]) == {"src", "tgt"}
    assert (ROOT / "checkpoints" / "en-zh.log.jsonl").is_file()


@committed
@real_data
def test_committed_checkpoint_translates():
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    tr = Translator.from_checkpoint(CHECKPOINT)
    pairs = rebuild_test_pairs(tr.recipe.data, tr.src_tokenizer, tr.tgt_tokenizer)
    assert len(pairs) >= 1000
    res = tr.evaluate(pairs[:300])
    # The full test set scores higher (see checkpoints/README.md); this guards
    # against a checkpoint or decoder that silently broke.
    assert res["bleu"] >= 20.0, res
