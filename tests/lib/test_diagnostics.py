"""Tests of course_lib.diagnostics (chapter 11, the failure lab).

Each check must pass on a correct :class:`course_lib.model.Transformer` and fail
on a model broken on purpose in exactly the way the check looks for (no causal
mask, a causal mask off by one, no padding mask, no positional encoding, a
``-inf`` mask fill, over-confident or non-finite outputs, embeddings that
drown the positions). The measured values are compared with independent
computations: closed forms (``log V`` for uniform logits, ``sqrt(d_model / 2)``
for a sinusoidal row, exact byte counts of saved tensors), PyTorch built-ins
(``F.cross_entropy``, ``clip_grad_norm_``) and direct comparisons of model outputs.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

import course_lib.attention
from course_lib.diagnostics import (
    DiagnosticsConfig,
    Finding,
    check_attention_finite,
    check_causal_leak,
    check_embedding_scale,
    check_gradients_finite,
    check_initial_loss,
    check_model,
    check_padding_leak,
    check_permutation_blindness,
    format_findings,
    saved_tensors_nbytes,
)
from course_lib.masks import causal_mask, padding_mask
from course_lib.model import Transformer, TransformerConfig

V = 20
PAD = 0


def make_model(**overrides) -> Transformer:
    kw = dict(
        src_vocab_size=V, tgt_vocab_size=V, d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
        d_ff=64, dropout=0.0, max_len=32,
    )
    kw.update(overrides)
    return Transformer(TransformerConfig(**kw))


def make_batch(batch: int = 4, src_len: int = 7, tgt_len: int = 6, lengths=(7, 5, 4, 2)):
    """Random ids in [4, V) with right padding (course ids: 0 pad, 1 bos, 2 eos, 3 unk)."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, V, (batch, src_len), generator=g)
    for b, n in enumerate(lengths):
        src[b, n:] = PAD
    tgt_out = torch.randint(4, V, (batch, tgt_len), generator=g)
    tgt_out[1, 4:] = PAD
    tgt_in = torch.cat([torch.ones(batch, 1, dtype=torch.long), tgt_out[:, :-1]], dim=1)
    tgt_in[1, 5:] = PAD
    return src, tgt_in, tgt_out


class NoCausalMask(Transformer):
    """Broken: the decoder self-attention gets only the padding mask."""

    def decode(self, tgt, memory, *, tgt_mask=None, memory_mask=None, cache=None):
        return super().decode(tgt, memory, tgt_mask=padding_mask(tgt, PAD), memory_mask=memory_mask, cache=cache)


class CausalOffByOne(Transformer):
    """Broken: position t may also attend to position t + 1."""

    def decode(self, tgt, memory, *, tgt_mask=None, memory_mask=None, cache=None):
        n = tgt.size(1)
        leaky = torch.ones(n, n, dtype=torch.bool).tril(diagonal=1)[None, None]
        return super().decode(tgt, memory, tgt_mask=leaky, memory_mask=memory_mask, cache=cache)


class QueryAxisPaddingMask(Transformer):
    """Broken: the padding mask is broadcast over queries, (batch, 1, src_len, 1)."""

    def source_mask(self, src):
        return (src != PAD)[:, None, :, None]


def inf_fill_attention(q, k, v, mask=None, dropout_p=0.0, *, scale=None):
    """Broken attention: masked scores set to -inf, so a fully masked row is NaN."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def broken(cls, **overrides) -> Transformer:
    torch.manual_seed(0)
    model = make_model(**overrides)
    model.__class__ = cls
    return model


# ------------------------------------------------------------------ the whole checklist
def test_correct_model_passes_every_check():
    findings = check_model(make_model(), make_batch())
    assert [f.name for f in findings] == [
        "causal_leak", "padding_leak", "permutation_blindness", "attention_finite",
        "initial_loss", "gradients_finite", "embedding_scale",
    ]
    assert all(isinstance(f, Finding) for f in findings)
    assert all(f.ok and not f.skipped for f in findings), format_findings(findings)


def test_check_model_leaves_the_model_untouched():
    model = make_model().train()
    before = copy.deepcopy(model.state_dict())
    p = next(model.parameters())
    p.grad = torch.full_like(p, 0.5)
    check_model(model, make_batch())
    assert model.training
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0)
    torch.testing.assert_close(p.grad, torch.full_like(p, 0.5))
    assert all(q.grad is None for q in list(model.parameters())[1:])
    assert all(not m.record_weights and m.last_weights is None
               for m in model.modules() if isinstance(m, course_lib.attention.MultiHeadAttention))


def test_check_model_options_and_errors():
    model, batch = make_model(), make_batch()
    names = [f.name for f in check_model(model, batch, DiagnosticsConfig(check_initial_loss=False))]
    assert "initial_loss" not in names and len(names) == 6
    assert [f.name for f in check_model(model, batch, checks=["padding_leak"])] == ["padding_leak"]
    with pytest.raises(ValueError, match="unknown check names"):
        check_model(model, batch, checks=["nope"])
    with pytest.raises(ValueError, match="tgt_in"):
        check_model(model, (batch[0], batch[1][:, :3], batch[2]))
    with pytest.raises(ValueError, match="batch must have"):
        check_model(model, batch[:2])
    with pytest.raises(ValueError, match="integer token ids"):
        check_model(model, (batch[0].float(), batch[1], batch[2]))


def test_a_model_that_raises_is_a_failed_finding():
    # a target longer than max_len: a single check raises, check_model reports it and goes on
    model = make_model(max_len=8)
    src, tgt_in, tgt_out = make_batch()
    long_batch = (src, torch.cat([tgt_in, tgt_in], 1), torch.cat([tgt_out, tgt_out], 1))
    with pytest.raises(ValueError, match="max_len"):
        check_initial_loss(model, long_batch)
    findings = check_model(model, long_batch)
    assert len(findings) == 7
    failed = {f.name: f for f in findings if not f.ok}
    assert "initial_loss" in failed and "raised ValueError" in failed["initial_loss"].detail
    assert failed.keys() == {"causal_leak", "padding_leak", "attention_finite", "initial_loss", "gradients_finite"}


@pytest.mark.parametrize(
    "field, value", [("atol", -1.0), ("extra_padding", 0), ("min_embedding_ratio", 20.0), ("initial_loss_tolerance", -0.1)]
)
def test_config_validation(field, value):
    with pytest.raises(ValueError, match=field):
        DiagnosticsConfig(**{field: value})


def test_format_findings():
    text = format_findings([Finding("a", True, "fine", 0.0), Finding("b", False, "bad", 1.0), Finding("c", True, "n/a", None, True)])
    assert text.splitlines() == ["[PASS] a: fine", "[FAIL] b: bad", "[SKIP] c: n/a", "2 of 3 checks passed, 1 failed"]


# ------------------------------------------------------------------ causal leak
def test_causal_leak_passes_on_a_causal_decoder():
    f = check_causal_leak(make_model(), make_batch())
    assert f.ok and f.value <= 1e-5


@pytest.mark.parametrize("cls", [NoCausalMask, CausalOffByOne])
def test_causal_leak_fails_without_a_correct_causal_mask(cls):
    model, (src, tgt_in, tgt_out) = broken(cls), make_batch()
    f = check_causal_leak(model, (src, tgt_in, tgt_out))
    assert not f.ok and f.value > 1e-2 and "causal mask" in f.detail
    # independent evidence of the leak: position k - 1 changes when position k changes
    k = tgt_in.size(1) // 2
    changed = tgt_in.clone()
    changed[:, k] = (changed[:, k] + 1) % V
    with torch.no_grad():
        delta = (model.eval()(src, tgt_in)[:, k - 1] - model(src, changed)[:, k - 1]).abs().max()
    assert delta > 1e-3


# ------------------------------------------------------------------ padding leak
def test_padding_leak_passes_with_the_padding_mask():
    model, (src, tgt_in, tgt_out) = make_model().eval(), make_batch()
    f = check_padding_leak(model, (src, tgt_in, tgt_out))
    assert f.ok and f.value <= 1e-5
    # independent: the same sentences with 4 more pads give the same logits
    padded = F.pad(src, (0, 4), value=PAD)
    with torch.no_grad():
        torch.testing.assert_close(model(padded, tgt_in), model(src, tgt_in), rtol=1e-5, atol=1e-5)


def test_padding_leak_fails_without_a_padding_mask():
    f = check_padding_leak(broken(Transformer, pad_id=None), make_batch())
    assert not f.ok and f.value > 1e-2 and "padding mask" in f.detail


def test_padding_leak_fails_with_a_mask_on_the_wrong_axis():
    # the (batch, 1, src_len, 1) mask broadcasts in encoder self-attention (q_len = k_len) and
    # is refused by cross-attention (q_len = tgt_len): the check raises, check_model reports it
    model = broken(QueryAxisPaddingMask)
    with pytest.raises(ValueError, match="not broadcastable"):
        check_padding_leak(model, make_batch())
    (f,) = check_model(model, make_batch(), checks=["padding_leak"])
    assert not f.ok and "not broadcastable" in f.detail


def test_padding_leak_skipped_when_no_room():
    src, tgt_in, tgt_out = make_batch()
    f = check_padding_leak(make_model(max_len=src.size(1)), (src, tgt_in, tgt_out))
    assert f.ok and f.skipped


# ------------------------------------------------------------------ permutation blindness
def test_permutation_check_passes_with_positions():
    f = check_permutation_blindness(make_model(), make_batch())
    assert f.ok and f.value > 0.01


def test_permutation_check_fails_without_positions():
    model, (src, tgt_in, tgt_out) = broken(Transformer, positional="none").eval(), make_batch()
    f = check_permutation_blindness(model, (src, tgt_in, tgt_out))
    assert not f.ok and f.value < 1e-5 and "positional" in f.detail
    # independent: without positions the encoder is permutation-equivariant
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    with torch.no_grad():
        torch.testing.assert_close(model.encode(src[:, perm]), model.encode(src)[:, perm], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ attention NaN
def test_attention_check_passes_with_the_library_attention():
    f = check_attention_finite(make_model(), make_batch())
    assert f.ok and f.value == 0.0 and "6 attention layers" in f.detail  # 2 encoder + 2 x 2 decoder


def test_attention_check_fails_with_an_inf_fill(monkeypatch):
    monkeypatch.setattr(course_lib.attention, "scaled_dot_product_attention", inf_fill_attention)
    model = make_model()
    f = check_attention_finite(model, make_batch())
    assert not f.ok and "encoder.layers.0.self_attn" in f.detail and "logits" in f.detail
    # independent: the fully padded row really is NaN with this attention
    src = torch.zeros(1, 5, dtype=torch.long)
    with torch.no_grad():
        assert torch.isnan(model.eval()(src, torch.ones(1, 3, dtype=torch.long))).all()


# ------------------------------------------------------------------ initial loss
def test_initial_loss_equals_cross_entropy_and_log_v_for_uniform_logits():
    model, (src, tgt_in, tgt_out) = make_model().eval(), make_batch()
    f = check_initial_loss(model, (src, tgt_in, tgt_out))
    with torch.no_grad():
        expected = F.cross_entropy(model(src, tgt_in).transpose(1, 2), tgt_out, ignore_index=PAD)
    assert f.ok and f.value == pytest.approx(float(expected), rel=1e-6)
    with torch.no_grad():  # zero output layer: every logit 0, uniform prediction, loss exactly log(V)
        model.output_projection.weight.zero_()
        model.output_projection.bias.zero_()
    assert check_initial_loss(model, (src, tgt_in, tgt_out)).value == pytest.approx(math.log(V), rel=1e-6)


def test_initial_loss_fails_for_overconfident_logits():
    model = make_model()
    with torch.no_grad():
        model.output_projection.weight.mul_(30.0)
    f = check_initial_loss(model, make_batch())
    assert not f.ok and f.value > math.log(V) + 5 and "over-confident" in f.detail


# ------------------------------------------------------------------ gradients
def test_gradient_norm_matches_clip_grad_norm():
    model, (src, tgt_in, tgt_out) = make_model(), make_batch()
    f = check_gradients_finite(model, (src, tgt_in, tgt_out))
    reference = copy.deepcopy(model).eval()
    F.cross_entropy(reference(src, tgt_in).transpose(1, 2), tgt_out, ignore_index=PAD).backward()
    total = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm=float("inf"))
    assert f.ok and f.value == pytest.approx(float(total), rel=1e-5)


def test_gradient_check_fails_on_non_finite_gradients():
    model = make_model()
    with torch.no_grad():
        model.output_projection.bias[5] = float("inf")
    f = check_gradients_finite(model, make_batch())
    assert not f.ok and not math.isfinite(f.value)


# ------------------------------------------------------------------ embedding scale
def test_embedding_scale_near_sqrt2_for_the_course_initialisation():
    # token vectors: N(0, 1/d) entries times sqrt(d) -> norm about sqrt(d);
    # a sinusoidal row has norm exactly sqrt(d / 2) (sin^2 + cos^2 = 1 per pair)
    d = 128
    model = make_model(d_model=d)
    src = torch.randint(4, V, (16, 20), generator=torch.Generator().manual_seed(2))
    f = check_embedding_scale(model, (src, src, src))
    assert f.ok and f.value == pytest.approx(math.sqrt(2), rel=0.08)
    assert f"{math.sqrt(d / 2):.3g}" in f.detail


def test_embedding_scale_fails_for_large_embeddings_and_missing_positions():
    model = make_model(d_model=128)
    with torch.no_grad():
        model.encoder.embedding.embedding.weight.normal_(0.0, 1.0)  # nn.Embedding's default init, then x sqrt(d)
    f = check_embedding_scale(model, make_batch())
    assert not f.ok and f.value > 10 and "drowned" in f.detail
    f = check_embedding_scale(broken(Transformer, positional="none"), make_batch())
    assert not f.ok and f.value == math.inf and "no positional signal" in f.detail


# ------------------------------------------------------------------ saved tensors
def test_saved_tensors_nbytes_closed_forms():
    x = torch.randn(3, 5, requires_grad=True)
    assert saved_tensors_nbytes(lambda: torch.softmax(x, dim=-1)) == 3 * 5 * 4  # softmax keeps its output
    assert saved_tensors_nbytes(lambda: x * 2.0) == 0  # a constant factor keeps nothing
    a, b = torch.randn(4, 6, requires_grad=True), torch.randn(6, 2, requires_grad=True)
    assert saved_tensors_nbytes(lambda: a @ b) == (4 * 6 + 6 * 2) * 4  # matmul keeps both inputs
    assert saved_tensors_nbytes(lambda: a @ b, exclude=[a, b]) == 0
    # a saved view keeps its whole storage alive: a[:2] costs all of a
    assert saved_tensors_nbytes(lambda: a[:2] @ b) == (4 * 6 + 6 * 2) * 4
    y_bytes = saved_tensors_nbytes(lambda: (lambda y: y * y)(x.exp()))  # exp keeps y; y * y keeps y twice
    assert y_bytes == 3 * 5 * 4  # one storage counted once


def test_saved_tensors_of_attention_grow_with_the_square_of_the_length():
    # q, k, v: (batch, heads, L, d_k) float32; attention keeps q, k, v and the (batch, heads, L, L) weights
    batch, heads, d_k = 2, 3, 8
    for L in (4, 16):
        q, k, v = (torch.randn(batch, heads, L, d_k, requires_grad=True) for _ in range(3))
        n = saved_tensors_nbytes(lambda: course_lib.attention.scaled_dot_product_attention(q, k, v)[0])
        assert n == 4 * (3 * batch * heads * L * d_k + batch * heads * L * L)
