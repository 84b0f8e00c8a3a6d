"""Checks of the case registry itself (independent of any notebook).

* the registry is well formed (ids, chapters, points, tolerances, requires);
* every ``expected()`` is deterministic, finite and of an allowed dtype;
* the hand-worked and reference values are what independent computations say;
* the inputs keep clear of ties and boundaries, so that float32 answers cannot
  flip an argmax or a top-p cut on another CPU;
* every deliberately wrong answer in ``mutants.py`` fails at least one case.
"""

from __future__ import annotations

import itertools
import math
import re
import runpy
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_exercises.check import load_cases

cases = load_cases()
_mutants = runpy.run_path(str(Path(__file__).with_name("mutants.py")))
PRELUDE, MUTANTS = _mutants["PRELUDE"], _mutants["MUTANTS"]


def test_registry_is_well_formed():
    ids = [c.id for c in cases.CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    for c in cases.CASES:
        assert re.fullmatch(r"\d+\.\d+-[a-z0-9.-]+", c.id), c.id
        assert c.id.startswith(c.exercise + "-"), c.id
        assert c.chapter in cases.NOTEBOOKS and c.chapter == f"{int(c.exercise.split('.')[0]):02d}"
        assert isinstance(c.points, int) and c.points >= 1
        if "float16" in c.id:  # float16/bfloat16 inputs: half-precision rounding (eps 2**-10 / 2**-7)
            assert 0 <= c.rtol <= 3e-2 and 0 <= c.atol <= 2e-2 and (c.rtol or c.atol), c.id
        else:
            assert 0 <= c.rtol <= 1e-3 and 0 <= c.atol <= 1e-4 and (c.rtol or c.atol), c.id
        assert c.requires == (cases.EXERCISES[c.exercise],)
        assert c.hint.strip()
    assert sorted({c.exercise for c in cases.CASES}, key=lambda e: tuple(map(int, e.split(".")))) == list(cases.EXERCISES)
    assert len(cases.EXERCISES) >= 20


def test_every_exercise_has_several_value_cases():
    for ex in cases.EXERCISES:
        value_cases = [c for c in cases.CASES if c.exercise == ex and "rejects" not in c.id]
        assert len(value_cases) >= 2, ex


@pytest.mark.parametrize("case", cases.CASES, ids=lambda c: c.id)
def test_expected_is_deterministic_and_plain(case):
    first, second = case.expected(), case.expected()
    assert first.keys() == second.keys() and first
    for key, value in first.items():
        assert isinstance(value, np.ndarray), key
        # the grader's child accepts only such keys (course_grader.child.as_plain_arrays)
        assert 0 < len(key) <= 100 and key.isascii() and key.replace("_", "").replace("-", "").replace(".", "").isalnum(), key
        assert value.dtype in (np.float64, np.int64, np.bool_), (key, value.dtype)
        assert np.array_equal(value, second[key]), key
        if value.dtype == np.float64:  # -inf only for a removed entry (10.3; the comparator matches it exactly)
            assert np.isfinite(value[value != -np.inf]).all(), key
            assert case.exercise == "10.3" or np.isfinite(value).all(), key


# ---------------------------------------------------------------------------
# Reference values checked against independent computations
# ---------------------------------------------------------------------------
def test_sinusoid_closed_form_matches_course_lib():
    from course_lib.positional import sinusoidal_encoding

    for max_len, d_model in ((10, 8), (7, 5), (64, 33)):
        ref = sinusoidal_encoding(max_len, d_model, dtype=torch.float64).numpy()
        assert np.allclose(cases._pe_closed_form(max_len, d_model), ref, atol=1e-12)


def test_shift_encodings_reference_is_the_shifted_table():
    """3.2's expected rows (the table at pos + k) equal the chapter's rotation M_k applied to the rows at pos."""
    pe = cases._pe_closed_form(30, 8)
    for k in (1, 5, -3):
        m = np.zeros((8, 8))
        for i in range(4):
            w = 1.0 / 10000.0 ** (2 * i / 8)
            c, s = math.cos(w * k), math.sin(w * k)
            m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
        pos = np.arange(3, 20)
        assert np.allclose(cases._e_peshift(torch.from_numpy(pos), 8, k)["shifted"], pe[pos] @ m.T, atol=1e-12)
    rows = cases._sinusoid_rows(torch.arange(40).reshape(4, 10), 6).numpy()  # 3.2's input builder
    assert np.allclose(rows, cases._pe_at(np.arange(40).reshape(4, 10), 6), atol=1e-12)


def test_flop_formulas_match_pytorchs_flop_counter():
    """1.1/1.2's FLOP formulas are what FlopCounterMode counts on real layers (LSTM: its gates as linear layers)."""
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    from course_lib.attention import MultiHeadAttention

    def counted(fn):
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            fn()
        return counter.get_total_flops()

    torch.manual_seed(0)
    B, n, d = 2, 7, 6
    x = torch.randn(B, n, d)
    lstm_ih, lstm_hh = nn.Linear(d, 4 * d), nn.Linear(d, 4 * d)

    def lstm_steps():  # nn.LSTM runs one fused kernel on the CPU that the counter does not see
        h = c = torch.zeros(B, d)
        for t in range(n):
            i, f, g, o = (lstm_ih(x[:, t]) + lstm_hh(h)).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)

    layers = {
        "attention": lambda: torch.softmax(x @ x.transpose(1, 2), -1) @ x,
        "multi_head_attention": lambda: MultiHeadAttention(d, n_heads=2)(x),
        "rnn": lambda: nn.RNN(d, d, batch_first=True)(x),
        "gru": lambda: nn.GRU(d, d, batch_first=True)(x),
        "lstm": lstm_steps,
        "conv": lambda: nn.Conv1d(d, d, 5, padding=2)(x.transpose(1, 2)),
    }
    for kind, fn in layers.items():
        assert counted(fn) == cases._FLOP_FORMULAS[kind](n, d, B, 5), kind


def test_crossover_and_path_references_on_known_values():
    assert cases._crossover_by_enumeration(512, "rnn", False) == 513  # the chapter: cheaper exactly while n < d
    assert cases._crossover_by_enumeration(16, "rnn", True) == 1      # the chapter: the whole layer at n=12, d=16 costs more
    assert cases._path_by_enumeration("recurrent", 64, None, None) == 63   # the chapter's gradient cell: distance 63
    assert cases._path_by_enumeration("dilated_convolutional", 1000, 10, None) == 3
    assert cases._path_by_enumeration("dilated_convolutional", 1001, 10, None) == 4
    assert cases._path_by_enumeration("convolutional", 11, 3, None) == 5


def test_alibi_slopes_are_the_papers():
    """Press et al. (2022), section 3: 8 heads 1/2 ... 1/256; 16 heads 1/2**0.5 ... 1/256; the code's non-power-of-2 rule."""
    assert cases._alibi_slopes_reference(8) == [2.0 ** -h for h in range(1, 9)]
    assert np.allclose(cases._alibi_slopes_reference(16), [2.0 ** (-h / 2) for h in range(1, 17)])
    assert cases._alibi_slopes_reference(6) == [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]
    assert cases._alibi_slopes_reference(1) == [2.0 ** -8]


def test_scale_ratios_match_a_measurement():
    """2.3's predicted ratios and cosines agree with random rows and the real table (Monte Carlo, 2 %)."""
    from course_lib.positional import sinusoidal_encoding

    gen = torch.Generator().manual_seed(0)
    d, std = 256, 0.05
    expected = cases._e_scale([(d, std)])["ratios"][0]
    pe = sinusoidal_encoding(4000, d, dtype=torch.float64)
    w = torch.randn(4000, d, generator=gen, dtype=torch.float64) * std
    for row, table in enumerate((w, w * math.sqrt(d))):
        ratio = float(table.pow(2).sum(-1).mean().sqrt() / pe.norm(dim=-1).mean())
        cos = float(F.cosine_similarity(table[:2000] + pe[:2000], table[2000:] + pe[:2000], dim=-1).mean())
        assert ratio == pytest.approx(expected[row, 0], rel=0.02) and cos == pytest.approx(expected[row, 1], rel=0.02, abs=0.01)


def test_noam_peak_is_about_6_99e_4():
    lr = cases._e_noam("9.2-paper-base-512-4000")["lr"]
    steps = cases._NOAM_STEPS["9.2-paper-base-512-4000"][0]
    peak = lr[steps.index(4000)]
    assert peak == pytest.approx(6.9877e-4, rel=1e-4)
    assert peak == lr.max()


def test_label_smoothing_convention_is_uniform_over_all_classes():
    """F.cross_entropy(label_smoothing=eps) equals the hand formula with eps/V on every class."""
    logits, target = cases._ls_inputs(901, 3, 6, 11, 0, 2)
    lp = torch.log_softmax(logits.double(), -1)
    q = torch.full_like(lp, 0.1 / 11)
    q.scatter_add_(-1, target[..., None], torch.full_like(lp[..., :1], 0.9))
    per_token = -(q * lp).sum(-1)
    keep = target != 0
    by_hand = per_token[keep].mean()
    assert float(by_hand) == pytest.approx(float(cases._e_ls((901, 3, 6, 11, 0, 2), 0.1)["loss"]), rel=1e-12)
    assert 0 < int(keep.sum()) < keep.numel()  # the case really has padding


def test_hand_table_beam_and_greedy_values():
    fn = cases._StepFn("hand")
    seq, score = cases._greedy_reference(fn, 5)
    assert seq == cases.HAND_GREEDY and math.exp(score) == pytest.approx(0.50 * 0.39)
    best, value = cases._exhaustive_reference(cases._StepFn("hand", max_calls=10**6), 3, 0.0)
    assert best == cases.HAND_BEAM2 and math.exp(value) == pytest.approx(0.40 * 0.89)


def test_attention_reference_matches_torch_on_every_unmasked_row():
    q, k, v, mask = cases._attn_inputs(405, (2, 2), 4, 4, 4, 4, "fully-masked-row")
    ref = cases._attention_reference(q, k, v, mask)
    rows = mask.any(-1)
    torch_out = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask | ~rows[..., None])
    assert np.allclose(ref["out"][rows.numpy()], torch_out.numpy()[rows.numpy()], atol=1e-12)
    assert (~rows).sum() == 1 and np.all(ref["out"][~rows.numpy()] == 0) and np.all(ref["weights"][~rows.numpy()] == 0)


def test_kv_cache_cases_cover_prefill_and_single_steps():
    chunks = {tuple(c.produce.keywords["chunks"]) for c in cases.CASES if c.exercise == "10.4" and "rejects" not in c.id}
    assert any(len(ch) > 1 and ch[0] > 1 for ch in chunks) and any(set(ch) == {1} for ch in chunks)


# ---------------------------------------------------------------------------
# Margins: no near-ties where float32 rounding could change the answer
# ---------------------------------------------------------------------------
def test_robust_cases_keep_clear_of_ties_on_their_fixed_seeds():
    robust = [c for c in cases.CASES if c.robust is not None]
    assert {c.exercise for c in robust} == {"10.1", "10.2", "10.3"}
    for case in robust:
        assert case.robust(), f"{case.id}: its fixed inputs sit at a near-tie"


@pytest.mark.parametrize("exercise", ["10.1", "10.2", "10.3"])
def test_robust_predicates_accept_some_draws(exercise):
    """The grader redraws until the predicate holds: some salts must pass it."""
    case = next(c for c in cases.CASES if c.exercise == exercise and c.robust is not None and "hand" not in c.id)
    verdicts = set()
    for n in range(60):
        with cases.drawing(cases.Draws(salt=f"probe-{n}")):
            verdicts.add(bool(case.robust()))
        if verdicts == {True, False}:
            break
    assert True in verdicts, f"{case.id}: no salt passes its robustness check"


def test_unlimited_beams_would_fail_greedy():
    """The exhaustive beam cases are only useful when greedy decoding misses the best sequence."""
    for c in cases.CASES:
        if c.exercise == "10.2" and "unlimited" in c.id:
            kind, seed, vocab, max_len, beam_size, alpha = c.produce.keywords["args"]
            min_length = c.produce.keywords.get("min_length", 0)
            greedy, _ = cases._greedy_reference(cases._StepFn(kind, seed, vocab, max_len, max_calls=10**6), max_len)
            best, _ = cases._exhaustive_reference(cases._StepFn(kind, seed, vocab, max_len, max_calls=10**6), max_len, alpha,
                                                  min_length)
            assert greedy != best, c.id


def test_beam_reference_agrees_with_enumeration_and_the_hand_table():
    """The limited-beam reference of 10.2 is the exhaustive search when the beam holds everything, and
    reproduces the hand-worked beams (with and without min_length)."""
    for seed, vocab, max_len, alpha, min_length in ((1023, 4, 3, 0.0, 0), (1042, 4, 3, 2.0, 0), (1035, 3, 4, 0.6, 2),
                                                    (7, 3, 4, 0.6, 3)):
        fn = lambda: cases._StepFn("random", seed, vocab, max_len, max_calls=10**6)
        seq, value, _ = cases._beam_reference(fn(), max_len, vocab**max_len, alpha, min_length)
        best, best_value = cases._exhaustive_reference(fn(), max_len, alpha, min_length)
        assert seq == best and value == pytest.approx(best_value, abs=1e-12)
    hand = lambda: cases._StepFn("hand", max_calls=10**6)
    assert cases._beam_reference(hand(), 5, 2, 0.0, 0)[0] == cases.HAND_BEAM2
    seq, value, _ = cases._beam_reference(hand(), 5, 2, 0.0, 3)
    assert seq == cases.HAND_BEAM2_MIN3 and math.exp(value) == pytest.approx(0.50 * 0.31 * 0.59)
    assert cases._beam_reference(hand(), 5, 1, 0.0, 0)[0] == cases.HAND_GREEDY


def test_hand_worked_tables_of_chapters_10_and_11():
    """The hand-worked answers of 10.1, 10.5, 11.2 and 11.3 against their plain references."""
    fn = cases._BatchStepFn("hand", batch=2, vocab=6, pad_id=cases.HAND_BATCH_PAD)
    assert cases._batch_greedy_reference(fn, 5).tolist() == cases.HAND_BATCH_GREEDY
    for n, banned in cases._NGRAM_HAND_BANNED.items():
        ref = cases._banned_reference(cases._NGRAM_HAND_ROWS, n, cases._NGRAM_VOCAB)
        assert [set(np.flatnonzero(row).tolist()) for row in ref] == banned, n
    table = np.array(cases.LOOP_LOGITS)
    for n, want in cases._LOOP_HAND.items():
        generated, last = [], cases.BOS
        for _ in range(cases._LOOP_MAX_LEN):
            logits = np.where(cases._banned_reference([generated], n, 6)[0], -np.inf, table[last])
            last = int(np.argmax(logits))
            generated.append(last)
            if last == cases.EOS:
                break
        assert generated == want, n
    assert cases._floors_reference(cases._FLOORS_HAND, 0) == pytest.approx(cases._FLOORS_HAND_VALUES, abs=1e-12)
    assert cases._floors_reference(cases._FLOORS_FIXED, 0) == pytest.approx(cases._FLOORS_FIXED_VALUES, abs=1e-12)
    for key, rows in cases._DIVERGENCE_HAND.items():
        assert [cases._divergence_reference(list(losses), k) for losses, k in rows] == cases._DIVERGENCE_HAND_STEPS[key]


def test_planted_layers_have_the_dependencies_of_their_construction():
    """11.1: the expected matrices (from the construction) match a finite-difference probe of the planted layers."""
    for key, (kind, seed, _, d) in cases._PLANTED_SPECS.items():
        length = cases._planted_length(key)
        fn, x = cases._Planted(kind, seed, length, d), cases._randn(seed + 50, length, d).double()
        base = fn(x)
        probe = np.zeros((base.shape[0], length), dtype=bool)
        for j in range(length):
            moved = x.clone()
            moved[j] += 0.5
            probe[:, j] = (fn(moved) - base).abs().amax(-1).numpy() > 1e-9
        np.testing.assert_array_equal(probe, cases._planted_expected(kind, length), err_msg=kind)


def test_drawn_inputs_change_with_the_salt_and_replay_exactly():
    case = next(c for c in cases.CASES if c.id == "4.1-causal-mask")
    fixed = case.expected()
    with cases.drawing(cases.Draws(salt="a")) as a:
        ea = case.expected()
    with cases.drawing(cases.Draws(salt="b")):
        eb = case.expected()
    with cases.drawing(cases.Draws(replay=a.recorded)) as r:
        er = case.expected()
    key = sorted(fixed)[0]
    assert a.recorded and not r.recorded
    assert not np.allclose(fixed[key], ea[key]) and not np.allclose(ea[key], eb[key])
    np.testing.assert_array_equal(ea[key], er[key])
    with cases.drawing(cases.Draws(replay={})), pytest.raises(LookupError):
        case.expected()


# ---------------------------------------------------------------------------
# Deliberately wrong answers must fail
# ---------------------------------------------------------------------------
def _module(source: str) -> types.ModuleType:
    module = types.ModuleType("mutant")
    exec(compile(PRELUDE + source, "<mutant>", "exec"), module.__dict__)
    return module


def _fails(case, module) -> bool:
    try:
        produced = case.produce(module)
    except Exception:  # noqa: BLE001 - a crash is a failure too
        return True
    return cases.compare(case, produced, case.expected()) is not None


def test_every_exercise_has_mutants():
    assert set(MUTANTS) == set(cases.EXERCISES)


@pytest.mark.parametrize(
    "exercise, description, source",
    [pytest.param(ex, what, src, id=f"{ex}-{what}") for ex, items in MUTANTS.items() for what, src in items],
)
def test_wrong_answer_fails_some_case(exercise, description, source):
    module = _module(source)
    ex_cases = [c for c in cases.CASES if c.exercise == exercise]
    failing = [c.id for c in ex_cases if _fails(c, module)]
    assert failing, f"no case of exercise {exercise} catches: {description}"


def test_compare_messages_teach():
    case = next(c for c in cases.CASES if c.id == "4.1-fully-masked-row")
    expected = case.expected()
    produced = {k: v.copy() for k, v in expected.items()}
    produced["out"][0, 0, 1, :] = np.nan
    message = cases.compare(case, produced, expected)
    assert "Exercise 4.1 (scaled_dot_product_attention)" in message and "NaN" in message and "Hint:" in message
    produced = {"out": expected["out"][..., :2], "weights": expected["weights"]}
    assert "has shape" in cases.compare(case, produced, expected)
    produced = {"out": expected["out"], "weights": expected["weights"].astype(np.int64)}
    assert "dtype kind int" in cases.compare(case, produced, expected)
    assert cases.compare(case, expected, expected) is None


def test_to_array_explains_a_missing_return():
    with pytest.raises(TypeError, match="forget to `return`"):
        cases.to_array(None, "f(x)", kind="f")
    assert cases.to_array(torch.tensor(2.5), "x", kind="f").shape == ()
    assert cases.to_array(torch.tensor([1, 2]), "x", kind="f").dtype == np.float64
    assert cases.to_array(torch.tensor([True]), "x", kind="f").dtype == np.bool_


def test_every_exercise_has_drawn_inputs():
    """The grader draws inputs per run: every exercise needs a case whose inputs come from the draws."""
    drawn = set()
    for case in cases.CASES:
        with cases.drawing(cases.Draws(salt="any")) as draws:
            case.expected()
        if draws.recorded and "-rejects-" not in case.id:
            drawn.add(case.exercise)
    assert drawn == set(cases.EXERCISES), sorted(set(cases.EXERCISES) - drawn)


def test_a_removed_entry_is_shown_as_minus_inf():
    """Issue 22, item 5: 10.3 removing a token it should keep is told "got -inf", never a made-up 0.0."""
    case = next(c for c in cases.CASES if c.id == "10.3-random-top-p-per-row")
    expected = case.expected()
    right = torch.from_numpy(expected["values"].copy())
    wrong = right.clone()
    row, col = map(int, np.argwhere(expected["kept"])[0])
    wrong[row, col] = float("-inf")
    ns = types.SimpleNamespace(top_k_top_p_filtering=lambda *args: wrong)
    message = cases.compare(case, case.produce(ns), expected)
    assert "got -inf, expected" in message and "got 0.0" not in message, message
    assert cases.compare(case, case.produce(types.SimpleNamespace(top_k_top_p_filtering=lambda *a: right)),
                         expected) is None


def test_stacked_calls_are_named_by_their_inputs():
    """Issue 22, item 5: a wrong entry of 2.3 (a (2, 2) result per call) or 9.4 (one number per step) is named by
    the call's inputs and indexed within that call's own result."""
    case = next(c for c in cases.CASES if c.id == "2.3-paper-init-several-widths")
    expected = case.expected()
    produced = {k: v.copy() for k, v in expected.items()}
    key = next(k for k in produced if "d_model_64_" in k)
    produced[key][1, 1] += 0.5
    message = cases.compare(case, produced, expected)
    assert f"`{key}`" in message and "init_std_0.125" in key and "index (1, 1)" in message, message
    case = next(c for c in cases.CASES if c.id == "9.4-warmup-60-peak-2e-3")
    expected = case.expected()
    produced = {**expected, "lr_call_3_step_60": expected["lr_call_3_step_60"] * 2}
    assert "`lr_call_3_step_60` is 0.004" in cases.compare(case, produced, expected)


def test_one_number_answers_of_the_wrong_shape_or_size_say_what_came_back():
    """A result of 12.2/13.3/13.4 that is not one number (a shape-(3,) tensor, an int past 64 bits, a tuple) fails as
    a return of the wrong type - the harness's conversion is never reported as the student's code raising."""
    from course_exercises.check_runner import is_return_type_error
    from course_exercises.compare import error_line

    def produce(case_id, **functions):
        case = next(c for c in cases.CASES if c.id == case_id)
        with pytest.raises(TypeError) as info:
            case.produce(types.SimpleNamespace(**functions))
        assert is_return_type_error(info.value), info.value
        assert error_line(str(info.value)).startswith("your function returned a value of the wrong type or shape"), info.value
        return str(info.value)

    text = produce("12.2-drawn-padded-batch", perplexity=lambda logits, targets, ignore_index=-100: torch.ones(3))
    assert "returned a value of the wrong shape (Tensor of shape (3,)); return one number" in text, text
    assert "cannot reshape" not in text
    text = produce("13.3-drawn-grouped-float16", kv_cache_bytes=lambda *args: 12 + 2**64)
    assert "outside the 64-bit range" in text and "return a Python int" in text, text
    text = produce("13.4-hand-llama-2-7b-and-70b", lm_parameter_count=lambda *args: torch.tensor([1, 2]))
    assert "wrong shape" in text and "a Python int or a 0-dim tensor" in text, text
    out = torch.zeros(1, 8, 5, 4)
    text = produce("13.2-drawn-grouped-8-query-heads-2-kv-heads",
                   grouped_query_attention=lambda q, k, v, causal=False: (out, torch.zeros(1, 8, 5, 5)))
    assert "returned tuple of length 2" in text and "one tensor, not a tuple" in text and "stack" not in text, text
    case = next(c for c in cases.CASES if c.id == "12.2-hand-uniform-logits-give-the-vocabulary-size")
    assert case.produce(types.SimpleNamespace(perplexity=lambda *a: torch.tensor([7.0])))["perplexity"].shape == ()


def test_a_whole_number_float_where_an_int_is_asked_says_to_use_floor_division():
    """13.3/13.4 copied with ``d_model / n_heads`` return an integer-valued float: the message says an int is wanted."""
    case = next(c for c in cases.CASES if c.id == "13.3-hand-llama-2-sizes")
    expected = case.expected()
    produced = {k: v.astype(np.float64) for k, v in expected.items()}
    message = cases.compare(case, produced, expected)
    assert "dtype kind float; expected int (its values are whole numbers: return integers - divide with //, not /" \
        in message, message
    assert "Return a Python int (use // for d_model // n_heads" in message, message
    produced = {k: v.astype(np.float64) + 0.5 for k, v in expected.items()}
    assert "whole numbers" not in cases.compare(case, produced, expected)


def test_one_letter_argument_names_are_matched_as_words():
    """13.2's "message names k": the letter k inside another word ("key heads mismatch") does not name k."""
    names = sys.modules["course_exercise_cases"]._names
    assert names("k has 2 heads but v has 4", "k") and names("got k (1, 2, 2, 3)", "k") and names("`k`", "k")
    assert not names("key heads mismatch", "k") and not names("n_kv_heads", "k") and not names("max", "x")
    assert names("seq_len must be >= 1", "seq_len") and names("n_heads=4", "n_heads")


def test_every_exercise_with_an_edge_case_has_a_general_drawn_case():
    """An edge case (``-edge-``) unlocks nothing, so its exercise needs another drawn value case."""
    from course_exercises.compare import is_edge_case, is_rejection_case

    drawn = [c for c in cases.CASES if "-drawn-" in c.id and not is_rejection_case(c.id)]
    general = {c.exercise for c in drawn if not is_edge_case(c.id)}
    edge = {c.exercise for c in drawn if is_edge_case(c.id)}
    assert edge and edge <= general, sorted(edge - general)
