"""Tests of course_lib.decoding (chapter 10; paper section 6.1).

Independent references: a sentence-by-sentence greedy loop written out with
``model(src, tgt)`` (no cache, no batching), a tiny "table" model whose
next-token probabilities are fixed by hand (so beam search results and
scores can be worked out on paper), and hand-computed filters.

Definition under test: no decoder generates ``<pad>`` or ``<bos>`` (their
logits are ``-inf`` before every choice), so the reference loops here forbid
them too; a model whose output bias makes them likely checks it.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course_lib.decoding import (
    apply_repetition_penalty,
    beam_search,
    block_repeated_ngrams,
    choose_next_token,
    forbid_special_tokens,
    greedy_decode,
    length_penalty,
    sample,
    top_k_filter,
    top_p_filter,
)
from course_lib.model import Transformer, TransformerConfig

PAD, BOS, EOS = 0, 1, 2
V = 19


pytestmark = pytest.mark.usefixtures("one_thread")


def random_model(seed: int = 0, eos_bias: float = 0.0) -> Transformer:
    torch.manual_seed(seed)
    cfg = TransformerConfig(
        src_vocab_size=V, tgt_vocab_size=V, d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
        d_ff=64, dropout=0.1, max_len=64,
    )
    model = Transformer(cfg)
    with torch.no_grad():  # a larger <eos> bias: some sentences end early, others do not
        model.output_projection.bias[EOS] += eos_bias
    return model.eval()


def sources() -> torch.Tensor:
    src = torch.randint(3, V, (4, 7), generator=torch.Generator().manual_seed(1))
    src[1, 5:] = PAD
    src[3, 2:] = PAD
    return src


def naive_greedy(model: nn.Module, src_row: torch.Tensor, max_len: int) -> list[int]:
    """One sentence, no padding, the whole prefix recomputed by model.forward each step.

    The argmax is taken over every token but ``<pad>`` and ``<bos>``, which
    decoding never generates (the module docstring of course_lib.decoding).
    """
    ys = [BOS]
    with torch.no_grad():
        for _ in range(max_len):
            logits = model(src_row[None], torch.tensor([ys]))[0, -1]
            logits[[PAD, BOS]] = float("-inf")
            ys.append(int(logits.argmax()))
            if ys[-1] == EOS:
                break
    return ys[1:]


def strip(row: list[int]) -> list[int]:
    out = []
    for t in row:
        out.append(t)
        if t == EOS:
            break
    return [t for t in out if t != PAD]


# ----------------------------------------------------------------------------- greedy
def test_greedy_equals_sentence_by_sentence_loop():
    model = random_model(0, eos_bias=1.0)
    src = sources()
    out = greedy_decode(model, src, max_len=12)
    lengths = (src != PAD).sum(1)
    for b in range(src.size(0)):
        assert strip(out[b].tolist()) == naive_greedy(model, src[b, : lengths[b]], 12)
    ended = [EOS in row for row in out.tolist()]
    assert any(ended) and not all(ended)  # the test covers early stopping


def test_kv_cache_equals_recomputation():
    model = random_model()
    src = sources()
    tok_c, log_c = greedy_decode(model, src, max_len=20, eos_id=None, use_cache=True, return_logits=True)
    tok_r, log_r = greedy_decode(model, src, max_len=20, eos_id=None, use_cache=False, return_logits=True)
    assert tok_c.shape == (4, 20) and torch.equal(tok_c, tok_r)
    torch.testing.assert_close(log_c, log_r, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- <pad> and <bos>
def special_heavy_model() -> Transformer:
    """A random model whose output bias makes <pad> and <bos> the argmax at many steps.

    Before <pad>/<bos> were forbidden, greedy decoding emitted them, and the
    recomputing path (which masks a generated <pad> as padding) then parted
    from the KV cache (which does not): tokens differed for greedy, sampling
    and beam search with these biases.
    """
    model = random_model(0, eos_bias=-1.0)
    with torch.no_grad():
        model.output_projection.bias[PAD] += 2.0
        model.output_projection.bias[BOS] += 1.0
    return model


def assert_no_special_tokens(out: torch.Tensor, eos_id: int | None = EOS) -> None:
    """No <bos> anywhere; <pad> only after a row's <eos> (none at all with ``eos_id=None``)."""
    for row in out.tolist():
        body = row[: row.index(eos_id)] if eos_id in row else row
        assert BOS not in row and PAD not in body, row
        assert all(t == PAD for t in row[len(body) + 1:]), row


def test_special_heavy_model_would_pick_pad_and_bos():
    # the premise of the tests below: unconstrained, the argmax is often <pad> or <bos>
    _, logits = greedy_decode(special_heavy_model(), sources(), 20, eos_id=None, return_logits=True)
    best = logits.argmax(-1)
    assert (best == PAD).sum() >= 5 and (best == BOS).sum() >= 1


def test_greedy_never_generates_pad_or_bos_and_cache_equals_recomputation():
    model = special_heavy_model()
    src = sources()
    for eos_id in (EOS, None):
        tok_c, log_c = greedy_decode(model, src, 20, eos_id=eos_id, use_cache=True, return_logits=True)
        tok_r, log_r = greedy_decode(model, src, 20, eos_id=eos_id, use_cache=False, return_logits=True)
        assert_no_special_tokens(tok_c, eos_id)
        assert torch.equal(tok_c, tok_r)
        torch.testing.assert_close(log_c, log_r, atol=1e-5, rtol=1e-5)
    lengths = (src != PAD).sum(1)
    out = greedy_decode(model, src, 20)
    for b in range(src.size(0)):
        assert strip(out[b].tolist()) == naive_greedy(model, src[b, : lengths[b]], 20)


def naive_sample(model: nn.Module, src_row: torch.Tensor, max_len: int, temperature: float, seed: int) -> list[int]:
    """One sentence, the whole prefix recomputed each step; softmax(logits / T) without <pad>/<bos>."""
    g = torch.Generator().manual_seed(seed)
    ys = [BOS]
    with torch.no_grad():
        for _ in range(max_len):
            logits = model(src_row[None], torch.tensor([ys]))[0, -1:].clone()
            logits[:, [PAD, BOS]] = float("-inf")
            ys.append(int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=g)))
            if ys[-1] == EOS:
                break
    return ys[1:]


@pytest.mark.parametrize("options", [dict(temperature=1.0), dict(temperature=1.5, top_k=6),
                                     dict(temperature=0.8, top_p=0.9), dict(temperature=1.0, repetition_penalty=1.3)])
def test_sampling_never_generates_pad_or_bos_and_cache_equals_recomputation(options):
    model = special_heavy_model()
    src = sources()
    runs = {use_cache: sample(model, src, 20, generator=torch.Generator().manual_seed(0), use_cache=use_cache,
                              **options) for use_cache in (True, False)}
    assert_no_special_tokens(runs[True])
    assert torch.equal(runs[True], runs[False])


def test_sampling_matches_a_sentence_by_sentence_loop_without_pad_and_bos():
    model = special_heavy_model()
    src = sources()
    lengths = (src != PAD).sum(1)
    for b in range(src.size(0)):
        row = src[b, : lengths[b]]
        for seed in (0, 1):
            ours = sample(model, row[None], 20, temperature=1.2, generator=torch.Generator().manual_seed(seed))
            assert strip(ours[0].tolist()) == naive_sample(model, row, 20, 1.2, seed), (b, seed)


def test_beam_search_never_generates_pad_or_bos_and_cache_equals_recomputation():
    model = special_heavy_model()
    src = sources()
    for alpha in (0.0, 0.6):
        cached, s_c = beam_search(model, src, 3, 20, length_penalty_alpha=alpha, return_scores=True)
        recomputed, s_r = beam_search(model, src, 3, 20, length_penalty_alpha=alpha, use_cache=False,
                                      return_scores=True)
        assert_no_special_tokens(cached)
        assert torch.equal(cached, recomputed)
        torch.testing.assert_close(s_c, s_r, atol=1e-5, rtol=1e-5)
    # beam 1 is still greedy, and a score is the model's own log p (not renormalised without <pad>/<bos>)
    assert torch.equal(beam_search(model, src, 1, 20), greedy_decode(model, src, 20))
    lengths = (src != PAD).sum(1)
    for b in range(src.size(0)):
        row = src[b : b + 1, : lengths[b]]
        hyp, score = beam_search(model, row, 3, 20, length_penalty_alpha=0.6, return_scores=True)
        tokens = strip(hyp[0].tolist())
        with torch.no_grad():
            logp = model(row, torch.tensor([[BOS] + tokens[:-1]])).log_softmax(-1)[0]
        total = logp[torch.arange(len(tokens)), tokens].sum()
        assert score.item() == pytest.approx(total.item() / length_penalty(len(tokens), 0.6), rel=1e-5, abs=1e-5)


def test_forbid_special_tokens_hand_worked():
    inf = float("-inf")
    logits = torch.tensor([[5.0, 4.0, 3.0, 2.0], [1.0, 1.0, 1.0, 1.0]])
    assert forbid_special_tokens(logits, 0, 1).tolist() == [[inf, inf, 3.0, 2.0], [inf, inf, 1.0, 1.0]]
    assert logits[0, 0] == 5.0  # a new tensor
    assert forbid_special_tokens(logits, 0, 1, eos_id=0).tolist() == [[5.0, inf, 3.0, 2.0], [1.0, inf, 1.0, 1.0]]
    assert torch.equal(forbid_special_tokens(logits, None, 9), logits)  # None and ids outside the vocabulary
    assert forbid_special_tokens(logits[None], 3, 2).shape == (1, 2, 4)  # any leading shape
    with pytest.raises(ValueError, match="nothing left to generate"):
        forbid_special_tokens(torch.zeros(1, 2), 0, 1)


def test_pad_equal_to_eos_still_ends_sentences():
    # with pad_id == eos_id (a common choice for language models) <eos> must stay possible
    model = random_model(0, eos_bias=3.0)
    src = sources()
    for out in (greedy_decode(model, src, 10, pad_id=EOS), beam_search(model, src, 3, 10, pad_id=EOS),
                sample(model, src, 10, pad_id=EOS, generator=torch.Generator().manual_seed(0))):
        assert (out == EOS).any() and not (out == BOS).any()


def test_ngram_blocking_never_falls_back_to_pad_or_bos():
    # V = 19 holds 16 ordinary tokens and <eos>; with eos_id=None, no_repeat_ngram_size=1 and 20 steps,
    # every ordinary token is used up: blocking then leaves the row alone (counting <pad>/<bos>, already
    # -inf, as forbidden) instead of leaving only <pad>/<bos> (an argmax of all -inf would be <pad>,
    # and sampling would fail).
    model = random_model(0)
    src = sources()
    for out in (greedy_decode(model, src, 20, eos_id=None, no_repeat_ngram_size=1),
                sample(model, src, 20, eos_id=None, no_repeat_ngram_size=1, generator=torch.Generator().manual_seed(0))):
        assert out.shape == (4, 20)
        assert_no_special_tokens(out, eos_id=None)
        assert all(len(set(row[:17])) == 17 for row in out.tolist())  # 17 = V - 2 distinct tokens first
    inf = float("-inf")
    logits = torch.tensor([[inf, inf, 0.0, 1.0, 2.0]])
    assert torch.equal(block_repeated_ngrams(logits, torch.tensor([[2, 3, 4]]), 1), logits)
    assert block_repeated_ngrams(logits, torch.tensor([[2, 3]]), 1).tolist() == [[inf, inf, inf, inf, 2.0]]


def test_model_left_in_its_mode_and_no_grad():
    model = random_model().train()
    out = greedy_decode(model, sources(), max_len=3)
    assert model.training and not out.requires_grad


# ----------------------------------------------------------------------------- a hand-made model
class TableModel(nn.Module):
    """Next-token probabilities looked up from a dict ``prefix tuple -> {token: p}``.

    The prefix excludes ``<bos>``; unspecified prefixes predict ``<eos>``.
    ``src[:, 0]`` selects one of several tables (so batches can mix them).
    Supports ``new_cache()`` (the cache just remembers the prefixes).
    """

    def __init__(self, tables: list[dict[tuple, dict[int, float]]], vocab: int = 6) -> None:
        super().__init__()
        self.tables, self.vocab = tables, vocab
        self.dummy = nn.Parameter(torch.zeros(1))
        self.rows_seen: list[int] = []

    class Cache:
        def __init__(self):
            self.prefix = None

        def reorder(self, index):
            self.prefix = self.prefix.index_select(0, index)

    def new_cache(self):
        return TableModel.Cache()

    def encode(self, src, *, src_mask=None):
        return src[:, :1, None].float()

    def decode(self, tgt, memory, *, tgt_mask=None, memory_mask=None, cache=None):
        if cache is not None:
            cache.prefix = tgt if cache.prefix is None else torch.cat([cache.prefix, tgt], dim=1)
            tgt = cache.prefix
        self.rows_seen.append(tgt.size(0))
        logits = torch.full((tgt.size(0), tgt.size(1), self.vocab), -1e4)
        for b in range(tgt.size(0)):
            table = self.tables[int(memory[b, 0, 0])]
            dist = table.get(tuple(tgt[b, 1:].tolist()), {EOS: 1.0})
            for tok, p in dist.items():
                logits[b, -1, tok] = math.log(p)
        return logits


A, B = 3, 4
GREEDY_TRAP = {(): {A: 0.5, B: 0.4, EOS: 0.1}, (A,): {A: 0.4, B: 0.4, EOS: 0.2}, (A, A): {EOS: 1.0}, (B,): {EOS: 0.9, A: 0.05, B: 0.05}}
EARLY_EOS = {(): {EOS: 0.4, A: 0.6}, (A,): {A: 0.95, EOS: 0.05}, (A, A): {EOS: 0.95, A: 0.05}, (A, A, A): {EOS: 1.0}}


def test_beam_search_beats_greedy_on_a_hand_worked_case():
    model = TableModel([GREEDY_TRAP])
    src = torch.zeros(1, 3, dtype=torch.long)
    assert greedy_decode(model, src, max_len=5).tolist() == [[A, A, EOS]]  # p = 0.5*0.4*1 = 0.2
    tokens, score = beam_search(model, src, beam_size=2, max_len=5, length_penalty_alpha=0.0, return_scores=True)
    assert tokens.tolist() == [[B, EOS]]  # p = 0.4 * 0.9 = 0.36
    assert score.item() == pytest.approx(math.log(0.36), rel=1e-5)


def test_finished_hypotheses_are_kept_until_no_open_one_can_win():
    # Step 1 finishes "<eos>" (p 0.4) while "A" (0.6) stays open; the search
    # must go on and return "A A <eos>" (0.6 * 0.95 * 0.95 = 0.5415).
    model = TableModel([EARLY_EOS])
    src = torch.zeros(1, 3, dtype=torch.long)
    tokens, score = beam_search(model, src, beam_size=2, max_len=6, length_penalty_alpha=0.0, return_scores=True)
    assert tokens.tolist() == [[A, A, EOS]]
    assert score.item() == pytest.approx(math.log(0.6 * 0.95 * 0.95), rel=1e-5)
    # With the GNMT penalty the normalised score is log p / ((5 + 3) / 6) ** alpha.
    tokens, score = beam_search(model, src, beam_size=2, max_len=6, length_penalty_alpha=0.6, return_scores=True)
    assert tokens.tolist() == [[A, A, EOS]]
    assert score.item() == pytest.approx(math.log(0.5415) / length_penalty(3, 0.6), rel=1e-5)


def test_batched_decoding_stops_each_sequence_on_its_own():
    # Row 0 uses EARLY_EOS-like short table, row 1 a longer one; finished rows
    # are padded and dropped from later decoder calls.
    short = {(): {A: 0.9, EOS: 0.1}, (A,): {EOS: 1.0}}
    long = {(): {B: 1.0}, (B,): {B: 1.0}, (B, B): {A: 1.0}, (B, B, A): {EOS: 1.0}}
    model = TableModel([short, long])
    src = torch.tensor([[0, 5], [1, 5]])
    for use_cache in (True, False):
        model.rows_seen.clear()
        out = greedy_decode(model, src, max_len=10, use_cache=use_cache)
        assert out.tolist() == [[A, EOS, PAD, PAD], [B, B, A, EOS]]
        assert model.rows_seen == [2, 2, 1, 1]  # row 0 left the batch after its <eos>
    assert beam_search(model, src, beam_size=3, max_len=10).tolist() == [[A, EOS, PAD, PAD], [B, B, A, EOS]]


def test_beam_size_1_equals_greedy_exactly():
    for seed, bias in ((0, 1.0), (1, 2.0)):
        model = random_model(seed, eos_bias=bias)
        src = sources()
        greedy = greedy_decode(model, src, max_len=15)
        assert (greedy == EOS).any()
        for alpha in (0.0, 0.6, 1.0):
            beam = beam_search(model, src, beam_size=1, max_len=15, length_penalty_alpha=alpha)
            assert torch.equal(beam, greedy), (seed, alpha)


def test_beam_search_batch_and_cache_do_not_change_results():
    model = random_model(0, eos_bias=1.0)
    src = sources()
    batched = beam_search(model, src, beam_size=3, max_len=10)
    no_cache = beam_search(model, src, beam_size=3, max_len=10, use_cache=False)
    assert torch.equal(batched, no_cache)
    lengths = (src != PAD).sum(1)
    for b in range(src.size(0)):
        alone = beam_search(model, src[b : b + 1, : lengths[b]], beam_size=3, max_len=10)
        assert strip(alone[0].tolist()) == strip(batched[b].tolist())


def test_beam_score_is_at_least_greedy_score_without_penalty():
    model = random_model(1, eos_bias=2.0)
    src = sources()
    _, beam_scores = beam_search(model, src, beam_size=4, max_len=12, length_penalty_alpha=0.0, return_scores=True)
    _, greedy_scores = beam_search(model, src, beam_size=1, max_len=12, length_penalty_alpha=0.0, return_scores=True)
    assert torch.all(beam_scores >= greedy_scores - 1e-5)


# ----------------------------------------------------------------------------- sampling
def test_temperature_zero_is_argmax_not_a_crash():
    logits = torch.randn(5, V)
    assert torch.equal(choose_next_token(logits, temperature=0.0), logits.argmax(-1))
    model = random_model(0, eos_bias=1.0)
    assert torch.equal(sample(model, sources(), 10, temperature=0.0), greedy_decode(model, sources(), 10))


def test_top_k_larger_than_vocabulary_is_clamped():
    logits = torch.randn(3, V)
    assert torch.equal(top_k_filter(logits, 10 * V), logits)
    model = random_model()
    a = sample(model, sources(), 8, top_k=1000, generator=torch.Generator().manual_seed(0))
    b = sample(model, sources(), 8, top_k=None, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b)


def test_top_k_filter_keeps_the_k_largest():
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]])
    out = top_k_filter(logits, 2)
    assert torch.isinf(out).tolist() == [[True, False, True, False, True]]
    assert top_k_filter(logits, 2)[0, 1] == 5.0
    draws = torch.stack([choose_next_token(logits, 1.0, top_k=2) for _ in range(200)])
    assert set(draws.flatten().tolist()) <= {1, 3}
    assert torch.equal(choose_next_token(logits.repeat(4, 1), 1.0, top_k=1), torch.ones(4, dtype=torch.long))


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]])  # sorted: 0.5, 0.3, 0.15, 0.05
    logits = probs.log()
    kept = lambda p: (~torch.isinf(top_p_filter(logits, p))).nonzero()[:, 1].tolist()  # noqa: E731
    assert kept(0.5) == [1]  # 0.5 alone reaches 0.5
    assert kept(0.51) == [1, 3]
    assert kept(0.8) == [1, 3]  # 0.5 + 0.3 = 0.8
    assert kept(0.81) == [0, 1, 3]
    assert kept(0.01) == [1]  # the most likely token is always kept
    assert kept(1.0) == [0, 1, 2, 3]
    draws = torch.stack([choose_next_token(logits, 1.0, top_p=0.8) for _ in range(200)])
    assert set(draws.flatten().tolist()) <= {1, 3}


def test_repetition_penalty_lowers_seen_tokens_for_positive_and_negative_logits():
    logits = torch.tensor([[2.0, -1.0, 0.5, -3.0]])
    generated = torch.tensor([[0, 1, 1]])
    out = apply_repetition_penalty(logits, generated, 2.0)
    assert out.tolist() == [[1.0, -2.0, 0.5, -3.0]]
    before, after = torch.softmax(logits, -1), torch.softmax(out, -1)
    assert after[0, 0] < before[0, 0] and after[0, 1] < before[0, 1]
    # a plain division would have made the negative logit -0.5: more likely
    assert torch.softmax(logits / torch.tensor([2.0, 2.0, 1.0, 1.0]), -1)[0, 1] > before[0, 1]
    assert torch.equal(apply_repetition_penalty(logits, generated, 1.0), logits)
    assert apply_repetition_penalty(logits, generated, 2.0, ignore_ids=(0,))[0, 0] == 2.0


def test_repetition_penalty_in_decoding_avoids_repeats():
    model = TableModel([{(): {A: 0.6, B: 0.4}, (A,): {A: 0.6, B: 0.4}, (A, B): {EOS: 1.0}, (A, A): {EOS: 1.0}}])
    src = torch.zeros(1, 2, dtype=torch.long)
    assert greedy_decode(model, src, 5).tolist() == [[A, A, EOS]]
    assert greedy_decode(model, src, 5, repetition_penalty=2.0).tolist() == [[A, B, EOS]]


def test_block_repeated_ngrams_hand_worked():
    logits = torch.zeros(2, 6)
    # row 0: "3 4 5 3" - the last token 3 was followed by 4 before: with n=2 only 4 is banned
    # row 1: "3 4 3 5 3" - 3 was followed by 4 and by 5: both banned
    generated = torch.tensor([[0, 3, 4, 5, 3], [3, 4, 3, 5, 3]])
    inf = float("-inf")
    out = block_repeated_ngrams(logits, generated, 2)
    assert out.tolist() == [[0, 0, 0, 0, inf, 0], [0, 0, 0, 0, inf, inf]]
    # n=3: the last two tokens "5 3" (row 0) never occurred before; "5 3" (row 1) neither
    assert torch.equal(block_repeated_ngrams(logits, generated, 3), logits)
    # n=1: every token generated so far is banned
    assert block_repeated_ngrams(logits[:1], generated[:1], 1).tolist() == [[inf, 0, 0, inf, inf, inf]]
    # off, or too few tokens for one n-gram: unchanged copies
    assert torch.equal(block_repeated_ngrams(logits, generated, 0), logits)
    assert torch.equal(block_repeated_ngrams(logits, generated[:, :2], 3), logits)
    # a row where everything would be banned is left alone
    assert torch.equal(block_repeated_ngrams(torch.zeros(1, 2), torch.tensor([[0, 1, 0, 1]]), 1), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="ngram_size must be an int >= 0"):
        block_repeated_ngrams(logits, generated, -1)
    with pytest.raises(ValueError, match=r"token ids in \[0, 6\).*from 0 to 9"):
        block_repeated_ngrams(logits, torch.tensor([[0, 9, 0, 9], [1, 2, 3, 4]]), 2)
    # NumPy and torch integers are ints too
    np = pytest.importorskip("numpy")
    assert torch.equal(block_repeated_ngrams(logits, generated, np.int64(2)), out)
    assert torch.equal(block_repeated_ngrams(logits, generated, torch.tensor(2)), out)


def _ngrams(row: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(row[i : i + n]) for i in range(len(row) - n + 1)]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_output_repeats_an_ngram(n):
    model = random_model(eos_bias=-50.0)  # never stops: long outputs that would loop
    src = sources()
    plain = greedy_decode(model, src, 30).tolist()
    assert any(len(set(_ngrams(r, n))) < len(_ngrams(r, n)) for r in plain)  # the test has something to block
    g = torch.Generator().manual_seed(0)
    for out in (greedy_decode(model, src, 30 if n > 1 else 15, no_repeat_ngram_size=n),
                beam_search(model, src, beam_size=3, max_len=30 if n > 1 else 15, no_repeat_ngram_size=n),
                sample(model, src, 30 if n > 1 else 15, no_repeat_ngram_size=n, generator=g)):
        for row in out.tolist():
            grams = _ngrams(row, n)
            assert len(set(grams)) == len(grams), row


def test_ngram_blocking_larger_than_the_output_changes_nothing():
    model = random_model(eos_bias=2.0)
    src = sources()
    assert torch.equal(greedy_decode(model, src, 10, no_repeat_ngram_size=11), greedy_decode(model, src, 10))
    assert torch.equal(beam_search(model, src, 3, 10, no_repeat_ngram_size=11), beam_search(model, src, 3, 10))
    # cache and recomputation agree with blocking on
    assert torch.equal(greedy_decode(model, src, 20, no_repeat_ngram_size=2, use_cache=True),
                       greedy_decode(model, src, 20, no_repeat_ngram_size=2, use_cache=False))


def test_ngram_blocking_in_a_table_model():
    # A A A ... is the greedy path; with bigram blocking "A A" may occur once, so the third token must differ
    model = TableModel([{(): {A: 0.6, B: 0.4}, (A,): {A: 0.6, B: 0.4}, (A, A): {A: 0.7, EOS: 0.3},
                         (A, A, B): {EOS: 1.0}, (A, A, A): {EOS: 1.0}}])
    src = torch.zeros(1, 2, dtype=torch.long)
    assert greedy_decode(model, src, 5).tolist() == [[A, A, A, EOS]]
    assert greedy_decode(model, src, 5, no_repeat_ngram_size=2).tolist() == [[A, A, EOS]]


def test_decoding_errors_name_the_argument():
    model = random_model()
    with pytest.raises(ValueError, match="temperature"):
        sample(model, sources(), 3, temperature=-1.0)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        sample(model, sources(), 3, temperature=float("nan"))
    with pytest.raises(ValueError, match="top_p"):
        sample(model, sources(), 3, top_p=1.5)
    with pytest.raises(ValueError, match="top_k"):
        top_k_filter(torch.randn(2, 3), -1)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, sources(), beam_size=0)
    with pytest.raises(ValueError, match="no_repeat_ngram_size must be an int >= 0"):
        beam_search(model, sources(), no_repeat_ngram_size=-2)
    with pytest.raises(ValueError, match="no_repeat_ngram_size must be an int >= 0"):
        greedy_decode(model, sources(), no_repeat_ngram_size=1.5)
    with pytest.raises(ValueError, match="src"):
        greedy_decode(model, torch.tensor([3, 4, 5]))
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(model, sources(), max_len=500)
    with pytest.raises(ValueError, match="penalty"):
        apply_repetition_penalty(torch.randn(1, 3), torch.zeros(1, 1, dtype=torch.long), 0.0)
