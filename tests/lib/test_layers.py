"""Tests of course_lib.layers and course_lib.feedforward (chapters 6-7).

Independent references: LayerNorm closed forms worked by hand, and
``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``
(``batch_first=True``) with copied weights. PyTorch's bool masks mean
True = *blocked*; the ``parity`` fixture converts the course's masks.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.feedforward import PositionwiseFeedForward
from course_lib.layers import DecoderLayer, DecoderLayerCache, EncoderLayer, ResidualSublayer
from course_lib.masks import causal_mask, decoder_self_attention_mask, padding_mask

EPS = 1e-5
D_MODEL, N_HEADS, D_FF = 16, 4, 32


# ------------------------------------------------------------- Add & Norm
def test_post_ln_closed_form():
    """LayerNorm([1, 0, 0, 0]) = (x - 0.25) / sqrt(0.1875 + eps) (mean 1/4, variance 3/16)."""
    sub = ResidualSublayer(4, dropout=0.0, norm_first=False, eps=EPS)
    x = torch.tensor([[[1.0, 0.0, 0.0, 0.0]]])
    out = sub(x, lambda y: torch.zeros_like(y))
    expected = [(v - 0.25) / math.sqrt(0.1875 + EPS) for v in (1.0, 0.0, 0.0, 0.0)]
    assert out.flatten().tolist() == pytest.approx(expected, abs=1e-6)


def test_post_ln_normalises_after_the_residual_add():
    # f = identity: LayerNorm(x + x) = (2x - 0.5) / sqrt(4 * 0.1875 + eps)
    sub = ResidualSublayer(4, dropout=0.0, norm_first=False, eps=EPS)
    x = torch.tensor([[[1.0, 0.0, 0.0, 0.0]]])
    out = sub(x, lambda y: y)
    expected = [(2 * v - 0.5) / math.sqrt(0.75 + EPS) for v in (1.0, 0.0, 0.0, 0.0)]
    assert out.flatten().tolist() == pytest.approx(expected, abs=1e-6)


def test_pre_ln_closed_form():
    # f = identity: x + LayerNorm(x); the residual stream itself is not normalised
    sub = ResidualSublayer(4, dropout=0.0, norm_first=True, eps=EPS)
    x = torch.tensor([[[1.0, 0.0, 0.0, 0.0]]])
    out = sub(x, lambda y: y)
    expected = [v + (v - 0.25) / math.sqrt(0.1875 + EPS) for v in (1.0, 0.0, 0.0, 0.0)]
    assert out.flatten().tolist() == pytest.approx(expected, abs=1e-6)
    assert torch.equal(sub(x, lambda y: torch.zeros_like(y)), x)


def test_sublayer_sees_normalised_input_only_in_pre_ln():
    x = torch.tensor([[[3.0, 1.0, 1.0, 3.0]]])  # mean 2, variance 1
    seen = {}
    for norm_first in (False, True):
        sub = ResidualSublayer(4, dropout=0.0, norm_first=norm_first, eps=0.0)
        sub(x, lambda y, nf=norm_first: seen.setdefault(nf, y.clone()) * 0)
    assert torch.equal(seen[False], x)
    torch.testing.assert_close(seen[True], torch.tensor([[[1.0, -1.0, -1.0, 1.0]]]))


def test_residual_dropout_train_vs_eval():
    sub = ResidualSublayer(8, dropout=0.5, norm_first=True)
    x = torch.zeros(4, 10, 8)
    f = lambda y: torch.ones_like(y)  # noqa: E731
    sub.train()
    y = sub(x, f)
    assert set(y.unique().tolist()) == {0.0, 2.0}  # dropped, or kept and scaled by 1/(1-p)
    sub.eval()
    assert torch.equal(sub(x, f), torch.ones_like(x))


# ------------------------------------------------------------ feed-forward
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_formula(activation):
    ffn = PositionwiseFeedForward(6, 10, activation=activation)
    x = torch.randn(2, 3, 6)
    w1, b1 = ffn.linear1.weight, ffn.linear1.bias
    w2, b2 = ffn.linear2.weight, ffn.linear2.bias
    h = x @ w1.T + b1
    act = torch.clamp(h, min=0) if activation == "relu" else 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    torch.testing.assert_close(ffn(x), act @ w2.T + b2, atol=1e-6, rtol=1e-5)


def test_feed_forward_is_position_wise():
    ffn = PositionwiseFeedForward(6, 10)
    x = torch.randn(2, 5, 6)
    perm = torch.tensor([3, 0, 4, 1, 2])
    torch.testing.assert_close(ffn(x[:, perm]), ffn(x)[:, perm])


def test_feed_forward_bad_activation():
    with pytest.raises(ValueError, match="activation.*'tanh'"):
        PositionwiseFeedForward(4, 8, activation="tanh")


def test_feed_forward_bad_inputs_name_the_expected_shape_and_dtype():
    ffn = PositionwiseFeedForward(4, 8)
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 4\), e.g. \(batch, seq_len, 4\); got \(2, 3, 5\)"):
        ffn(torch.randn(2, 3, 5))
    with pytest.raises(TypeError, match=r"x has dtype torch.float16 but the weights of PositionwiseFeedForward are torch.float32"):
        ffn(torch.randn(2, 3, 4).half())
    with pytest.raises(TypeError, match=r"floating-point.*torch.int64"):
        ffn(torch.ones(2, 3, 4, dtype=torch.long))
    assert ffn(torch.randn(7, 4)).shape == (7, 4)  # any leading dimensions
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert ffn(torch.randn(2, 3, 4).bfloat16()).shape == (2, 3, 4)


# ----------------------------------------------------- parity with PyTorch
def _encoder_pair(parity, norm_first, activation, fused_qkv=False):
    ours = EncoderLayer(D_MODEL, N_HEADS, D_FF, 0.0, activation, norm_first, EPS, fused_qkv)
    parity.randomize_(ours)
    theirs = nn.TransformerEncoderLayer(
        D_MODEL, N_HEADS, D_FF, dropout=0.0, activation=activation, layer_norm_eps=EPS,
        batch_first=True, norm_first=norm_first,
    )
    parity.copy_encoder_layer(ours, theirs)
    return ours.eval(), theirs.eval()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("masks", ["none", "padding", "padding+attn"])
def test_encoder_layer_matches_torch(parity, norm_first, activation, masks):
    ours, theirs = _encoder_pair(parity, norm_first, activation)
    b, n = 3, 6
    src = parity.tokens_with_padding(b, n, 20, [6, 4, 2])
    x = torch.randn(b, n, D_MODEL, requires_grad=True)
    pad = padding_mask(src, 0)
    attn = torch.rand(n, n) > 0.3
    attn |= torch.eye(n, dtype=torch.bool)  # every row keeps its own position
    our_mask = {"none": None, "padding": pad, "padding+attn": pad & attn}[masks]
    kpm = None if masks == "none" else parity.key_padding(pad)
    attn_mask = parity.blocked(attn) if masks == "padding+attn" else None
    if masks == "padding+attn":  # keep every query row non-empty: position 0 is never padding
        our_mask = our_mask.clone()
        our_mask[..., 0] = True
        attn_mask = attn_mask.clone()
        attn_mask[:, 0] = False

    out = ours(x, src_mask=our_mask)
    ref = theirs(x, src_mask=attn_mask, src_key_padding_mask=kpm)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)
    g = torch.randn_like(out)
    torch.testing.assert_close(
        torch.autograd.grad(out, x, g)[0], torch.autograd.grad(ref, x, g)[0], atol=1e-4, rtol=1e-4
    )


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
def test_encoder_layer_matches_torch_fast_path_and_fused_qkv(parity, norm_first):
    """Under ``no_grad`` in eval, PyTorch runs its fused native kernel; compare with that too."""
    ours, theirs = _encoder_pair(parity, norm_first, "relu", fused_qkv=True)
    src = parity.tokens_with_padding(2, 5, 20, [5, 3])
    x = torch.randn(2, 5, D_MODEL)
    with torch.no_grad():
        out = ours(x, src_mask=padding_mask(src, 0))
        ref = theirs(x, src_key_padding_mask=parity.key_padding(padding_mask(src, 0)))
    keep = src != 0  # the native kernel may zero padded query rows
    torch.testing.assert_close(out[keep], ref[keep], atol=1e-5, rtol=1e-4)


def _decoder_pair(parity, norm_first, activation):
    ours = DecoderLayer(D_MODEL, N_HEADS, D_FF, 0.0, activation, norm_first, EPS)
    parity.randomize_(ours)
    theirs = nn.TransformerDecoderLayer(
        D_MODEL, N_HEADS, D_FF, dropout=0.0, activation=activation, layer_norm_eps=EPS,
        batch_first=True, norm_first=norm_first,
    )
    parity.copy_decoder_layer(ours, theirs)
    return ours.eval(), theirs.eval()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("masks", ["none", "causal", "causal+padding"])
def test_decoder_layer_matches_torch(parity, norm_first, activation, masks):
    ours, theirs = _decoder_pair(parity, norm_first, activation)
    b, t, s = 3, 5, 7  # target and source lengths differ
    src = parity.tokens_with_padding(b, s, 20, [7, 3, 1])
    tgt = parity.tokens_with_padding(b, t, 20, [5, 5, 2])
    x = torch.randn(b, t, D_MODEL, requires_grad=True)
    memory = torch.randn(b, s, D_MODEL, requires_grad=True)
    if masks == "none":
        tgt_mask = memory_mask = None
        kw = {}
    elif masks == "causal":
        tgt_mask, memory_mask = causal_mask(t), None
        kw = dict(tgt_mask=parity.blocked(causal_mask(t)[0, 0]))
    else:
        tgt_mask = decoder_self_attention_mask(tgt, 0)
        memory_mask = padding_mask(src, 0)
        kw = dict(
            tgt_mask=parity.blocked(causal_mask(t)[0, 0]),
            tgt_key_padding_mask=parity.key_padding(padding_mask(tgt, 0)),
            memory_key_padding_mask=parity.key_padding(memory_mask),
        )
    out = ours(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask)
    ref = theirs(x, memory, **kw)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)
    g = torch.randn_like(out)
    for a, r in zip(torch.autograd.grad(out, (x, memory), g), torch.autograd.grad(ref, (x, memory), g)):
        torch.testing.assert_close(a, r, atol=1e-4, rtol=1e-4)


def test_decoder_layer_cache_equals_full(parity):
    layer = parity.randomize_(DecoderLayer(D_MODEL, N_HEADS, D_FF, 0.0)).eval()
    x, memory = torch.randn(2, 5, D_MODEL), torch.randn(2, 4, D_MODEL)
    src = torch.tensor([[1, 2, 3, 0], [1, 2, 0, 0]])
    full = layer(x, memory, tgt_mask=causal_mask(5), memory_mask=padding_mask(src, 0))
    cache = DecoderLayerCache()
    steps = [layer(x[:, t : t + 1], memory, memory_mask=padding_mask(src, 0), cache=cache) for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("cls", [EncoderLayer, DecoderLayer])
def test_layer_dropout_train_vs_eval(cls):
    layer = cls(D_MODEL, N_HEADS, D_FF, dropout=0.3)
    x = torch.randn(2, 4, D_MODEL)
    args = (x,) if cls is EncoderLayer else (x, torch.randn(2, 3, D_MODEL))
    layer.train()
    assert not torch.allclose(layer(*args), layer(*args))
    layer.eval()
    torch.testing.assert_close(layer(*args), layer(*args), atol=0, rtol=0)


def test_layer_bad_inputs():
    enc = EncoderLayer(D_MODEL, N_HEADS, D_FF)
    dec = DecoderLayer(D_MODEL, N_HEADS, D_FF)
    with pytest.raises(ValueError, match=rf"x must have shape \(batch, seq_len, {D_MODEL}\)"):
        enc(torch.randn(2, 3, D_MODEL + 1))
    with pytest.raises(ValueError, match="memory must have shape"):
        dec(torch.randn(2, 3, D_MODEL), torch.randn(2, 3))
    with pytest.raises(ValueError, match="batch sizes differ: x has 2, memory has 3"):
        dec(torch.randn(2, 3, D_MODEL), torch.randn(3, 4, D_MODEL))
    with pytest.raises(ValueError, match=r"d_model=16.*n_heads=5"):
        EncoderLayer(16, 5, 32)
    with pytest.raises(ValueError, match="src_mask of shape"):
        enc(torch.randn(2, 3, D_MODEL), src_mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="src_mask must have dtype torch.bool"):
        enc(torch.randn(2, 3, D_MODEL), src_mask=torch.ones(2, 1, 1, 3))
    with pytest.raises(ValueError, match="memory_mask of shape"):
        dec(torch.randn(2, 3, D_MODEL), torch.randn(2, 4, D_MODEL), memory_mask=torch.ones(2, 1, 1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="tgt_mask of shape"):
        dec(torch.randn(2, 3, D_MODEL), torch.randn(2, 4, D_MODEL), tgt_mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="query has dtype torch.float16"):
        enc(torch.randn(2, 3, D_MODEL).half())
    with pytest.raises(TypeError, match="positional"):  # masks are keyword-only
        enc(torch.randn(2, 3, D_MODEL), torch.ones(2, 1, 1, 3, dtype=torch.bool))


def test_torch_gelu_is_the_exact_erf_form():
    """Guards the GELU parity above: both sides use the erf form, not tanh."""
    x = torch.linspace(-3, 3, 7)
    ref = torch.tensor([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.tolist()])
    torch.testing.assert_close(F.gelu(x), ref, atol=1e-6, rtol=1e-6)
