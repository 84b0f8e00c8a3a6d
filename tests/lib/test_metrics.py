"""Tests of course_lib.metrics (chapters 9-11).

Independent references: BLEU worked out by hand from its definition
(Papineni et al. 2002) for tiny corpora, sacrebleu's own command-style call,
entropies of distributions with closed forms, and ``clip_grad_norm_``'s
returned norm.
"""

from __future__ import annotations

import math

import pytest
import sacrebleu
import torch
from torch import nn

from course_lib.attention import MultiHeadAttention
from course_lib.metrics import (
    paired_bleu_test,
    attention_entropy,
    bleu,
    bleu_tokenizer_for,
    gradient_global_norm,
    model_attention_entropy,
)


# ----------------------------------------------------------------------------- BLEU
def test_bleu_identical_is_100_and_disjoint_is_0():
    refs = ["我喜欢猫。", "汤姆在看书。"]
    assert bleu(refs, refs, "zh") == pytest.approx(100.0)
    assert bleu(["狗狗狗狗狗狗", "马马马马马马"], refs, "zh") == pytest.approx(0.0)


def test_bleu_zh_is_character_level_hand_worked():
    # One sentence; tokenize='zh' splits every Chinese character:
    # hyp  = 我 喜 欢 狗 。  (5 tokens), ref = 我 喜 欢 猫 。 (5 tokens)
    # matches: 1-grams 4/5, 2-grams 2/4 (我喜, 喜欢), 3-grams 1/3 (我喜欢), 4-grams 0/2.
    # A zero 4-gram precision makes unsmoothed BLEU 0, so use a 2-sentence
    # corpus where the second sentence is perfect (5 + 5 tokens):
    # 1: 9/10, 2: 6/8, 3: 4/6, 4: 2/4; brevity penalty 1.
    hyps = ["我喜欢狗。", "他在看书。"]
    refs = ["我喜欢猫。", "他在看书。"]
    expected = 100 * math.exp((math.log(9 / 10) + math.log(6 / 8) + math.log(4 / 6) + math.log(2 / 4)) / 4)
    assert bleu(hyps, refs, "zh") == pytest.approx(expected, abs=1e-6)


def test_bleu_brevity_penalty_hand_worked():
    # hyp is the first 4 of 5 characters: all precisions are 1, BP = exp(1 - 5/4).
    hyps, refs = ["汤姆在看"], ["汤姆在看书"]
    assert bleu(hyps, refs, "zh") == pytest.approx(100 * math.exp(1 - 5 / 4), abs=1e-6)


def test_bleu_multiple_references_of_varying_number():
    hyps = ["你好。", "我喜欢猫。"]
    refs = [["嗨。", "你好。"], ["我喜欢猫。"]]
    assert bleu(hyps, refs, "zh") == pytest.approx(100.0)
    # Same as sacrebleu with None for the missing second reference.
    direct = sacrebleu.corpus_bleu(hyps, [["嗨。", "我喜欢猫。"], ["你好。", None]], tokenize="zh").score
    assert bleu(hyps, refs, "zh") == pytest.approx(direct)


def test_bleu_uses_13a_for_english():
    hyps = ["The cat sat on the mat."]
    refs = ["The cat sat on a mat."]
    assert bleu(hyps, refs, "en") == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="13a").score)
    assert bleu_tokenizer_for("en") == "13a"
    assert bleu_tokenizer_for("zh") == "zh" and bleu_tokenizer_for("zh-Hans") == "zh"


def test_bleu_errors_name_the_argument():
    with pytest.raises(ValueError, match="same length"):
        bleu(["a"], ["a", "b"], "en")
    with pytest.raises(ValueError, match="empty"):
        bleu([], [], "en")
    with pytest.raises(ValueError, match=r"references\[0\]"):
        bleu(["a"], [[]], "en")


# ----------------------------------------------------------------------------- entropy
def test_attention_entropy_closed_forms():
    uniform = torch.full((2, 3, 4, 5), 1 / 5)
    assert attention_entropy(uniform) == pytest.approx(math.log(5), rel=1e-6)
    one_hot = torch.zeros(1, 1, 3, 4)
    one_hot[..., 0] = 1.0
    assert attention_entropy(one_hot) == pytest.approx(0.0, abs=1e-7)
    p = torch.tensor([0.5, 0.25, 0.25, 0.0])
    h = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))  # 0 log 0 = 0
    assert attention_entropy(p[None]) == pytest.approx(h, rel=1e-6)


def test_attention_entropy_ignores_fully_masked_rows():
    w = torch.zeros(1, 1, 3, 4)
    w[0, 0, 0] = 0.25  # uniform row: log 4
    w[0, 0, 1] = torch.tensor([1.0, 0, 0, 0])  # entropy 0
    # row 2: all zeros (every key masked) -> ignored, not counted as 0
    assert attention_entropy(w) == pytest.approx(math.log(4) / 2, rel=1e-6)
    assert math.isnan(attention_entropy(torch.zeros(2, 3)))


def test_attention_entropy_bad_shape():
    with pytest.raises(ValueError, match="q_len, k_len"):
        attention_entropy(torch.ones(3))


def test_model_attention_entropy_reads_last_weights():
    model = nn.Sequential(MultiHeadAttention(8, 2), MultiHeadAttention(8, 2))
    assert model_attention_entropy(model) == {}
    x = torch.randn(2, 5, 8)
    model[0].record_weights = True
    model[0](x)
    w = model[0].last_weights
    out = model_attention_entropy(model)
    assert list(out) == ["0"]
    rows = w.detach().reshape(-1, 5)
    expected = float((-(rows * rows.log()).sum(-1)).mean())
    assert out["0"] == pytest.approx(expected, rel=1e-5)


# ----------------------------------------------------------------------------- gradient norm
def test_gradient_global_norm_matches_clip_grad_norm_and_hand_value():
    a = nn.Parameter(torch.zeros(2))
    b = nn.Parameter(torch.zeros(1))
    c = nn.Parameter(torch.zeros(3))  # no grad: skipped
    a.grad = torch.tensor([3.0, 0.0])
    b.grad = torch.tensor([4.0])
    assert gradient_global_norm([a, b, c]) == pytest.approx(5.0)
    assert gradient_global_norm([a, b], norm_type=math.inf) == pytest.approx(4.0)
    model = nn.Linear(4, 3)
    model(torch.randn(5, 4)).pow(2).sum().backward()
    ours = gradient_global_norm(model)
    theirs = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e9))
    assert ours == pytest.approx(theirs, rel=1e-6)
    assert gradient_global_norm([c]) == 0.0


# ----------------------------------------------------------------------------- paired bootstrap
_REFS = ["我喜欢猫。", "他是老师。", "今天很冷。", "我们走吧。", "这本书很好。", "汤姆在看书。"] * 20
_WORSE = ["我喜欢狗。", "他是学生。", "今天很热。", "你们走吧。", "这本书不好。", "汤姆在写书。"] * 20


def test_paired_bleu_test_scores_equal_corpus_bleu_and_finds_a_clear_win():
    res = paired_bleu_test(_WORSE, _REFS, _REFS, "zh", n_samples=200)
    assert res["bleu"] == pytest.approx(100.0)
    assert res["bleu_baseline"] == pytest.approx(bleu(_WORSE, _REFS, "zh"))
    assert res["difference"] == pytest.approx(res["bleu"] - res["bleu_baseline"])
    assert res["p_value"] < 0.05
    assert res["ci95_baseline"] > 0


def test_paired_bleu_test_a_one_sentence_difference_is_not_significant():
    system = list(_WORSE)
    system[0] = _REFS[0]  # one sentence of 120 fixed
    res = paired_bleu_test(_WORSE, system, _REFS, "zh", n_samples=300)
    assert 0 < res["difference"] < 2
    assert res["p_value"] > 0.05


def test_paired_bleu_test_identical_outputs_and_bad_input():
    res = paired_bleu_test(_WORSE, _WORSE, _REFS, "zh")
    assert res["difference"] == 0.0 and res["p_value"] == 1.0
    with pytest.raises(ValueError, match="same length; got 120, 119 and 120"):
        paired_bleu_test(_WORSE, _WORSE[:-1], _REFS)
    with pytest.raises(ValueError, match="n_samples must be an int >= 100; got 10"):
        paired_bleu_test(_WORSE, _REFS, _REFS, n_samples=10)
    with pytest.raises(ValueError, match="n_samples must be an int >= 100; got 100.5"):
        paired_bleu_test(_WORSE, _REFS, _REFS, n_samples=100.5)
    # different outputs with the same BLEU: no evidence of a difference (sacrebleu alone says p = 1/(n+1))
    res = paired_bleu_test(["", ""], ["", "x"], ["a", "b"], "zh", n_samples=100)
    assert res["difference"] == 0.0 and res["p_value"] == 1.0
    with pytest.raises(ValueError, match="references is empty"):
        paired_bleu_test([], [], [])


def test_paired_bleu_test_takes_several_references_per_item():
    refs = [[r, r + "了"] for r in _REFS]
    res = paired_bleu_test(_WORSE, _REFS, refs, "zh", n_samples=200)
    assert res["bleu"] == pytest.approx(bleu(_REFS, refs, "zh"))
    assert res["bleu_baseline"] == pytest.approx(bleu(_WORSE, refs, "zh"))
