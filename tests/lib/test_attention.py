"""Tests of course_lib.attention (chapters 4-5; paper sections 3.2.1-3.2.2).

Independent references: a hand-worked example, float64 formulas, and
PyTorch's built-ins (``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``)
with copied weights. ``nn.MultiheadAttention`` masks use True = *blocked*, the
opposite of the course; the ``parity`` fixture converts them.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.attention import KVCache, MultiHeadAttention, scaled_dot_product_attention
from course_lib.masks import causal_mask, padding_mask

ATOL = 1e-5


def reference_attention(q, k, v, mask=None, scale=None):
    """softmax(q k^T * scale) v in float64 with -inf masking (rows with a key only)."""
    q, k, v = (t.double() for t in (q, k, v))
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return w @ v, w


def random_mask(shape, generator=None):
    """A random bool mask in which every query row keeps at least one key."""
    m = torch.rand(shape, generator=generator) > 0.5
    m[..., 0] |= ~m.any(-1)
    return m


# ------------------------------------------------- scaled dot-product attention
def test_hand_worked_example():
    # d_k = 2: scores = [1, 0] / sqrt(2); weights = softmax; output = w @ v
    q = torch.tensor([[[1.0, 0.0]]])
    k = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    v = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])
    out, w = scaled_dot_product_attention(q, k, v)
    e = math.exp(1 / math.sqrt(2))
    w0, w1 = e / (e + 1), 1 / (e + 1)
    assert w[0, 0].tolist() == pytest.approx([w0, w1], abs=1e-6)
    assert out[0, 0].tolist() == pytest.approx([w0 * 1 + w1 * 3, w0 * 2 + w1 * 4], abs=1e-6)


SHAPES = [
    # (batch, heads, q_len, k_len, d_k, d_v)
    (2, 4, 5, 5, 8, 8),  # self-attention
    (3, 2, 4, 7, 16, 16),  # cross-attention: q_len != k_len
    (1, 8, 9, 3, 4, 6),  # d_v != d_k
]


def _mask(kind, b, h, lq, lk):
    if kind == "none":
        return None
    if kind == "padding":
        lengths = [max(1, lk - i) for i in range(b)]
        tokens = torch.stack([torch.tensor([1] * n + [0] * (lk - n)) for n in lengths])
        return padding_mask(tokens, 0)  # (b, 1, 1, lk)
    if kind == "causal":
        # the last q_len rows of a causal mask (a continuation), or its first k_len columns
        return causal_mask(lk)[..., -lq:, :] if lq <= lk else causal_mask(lq)[..., :lk]
    if kind == "arbitrary":
        return random_mask((b, h, lq, lk))
    if kind == "broadcast_2d":
        return random_mask((lq, lk))
    raise AssertionError(kind)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind", ["none", "padding", "causal", "arbitrary", "broadcast_2d"])
def test_matches_torch_sdpa(shape, kind):
    b, h, lq, lk, dk, dv = shape
    q = torch.randn(b, h, lq, dk, requires_grad=True)
    k = torch.randn(b, h, lk, dk, requires_grad=True)
    v = torch.randn(b, h, lk, dv, requires_grad=True)
    mask = _mask(kind, b, h, lq, lk)
    out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, atol=ATOL, rtol=1e-4)
    _, w_ref = reference_attention(q, k, v, mask)
    torch.testing.assert_close(w.double(), w_ref, atol=ATOL, rtol=1e-4)
    assert w.shape == (b, h, lq, lk)
    # gradients too
    g = torch.randn_like(out)
    ours = torch.autograd.grad(out, (q, k, v), g)
    theirs = torch.autograd.grad(ref, (q, k, v), g)
    for a, r in zip(ours, theirs):
        torch.testing.assert_close(a, r, atol=1e-4, rtol=1e-4)


def test_three_dim_inputs_and_custom_scale():
    q, k, v = torch.randn(3, 4, 8), torch.randn(3, 6, 8), torch.randn(3, 6, 5)
    out, _ = scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.3), atol=ATOL, rtol=1e-4)
    out_ref, _ = reference_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(out.double(), out_ref, atol=ATOL, rtol=1e-4)


def test_default_scale_is_one_over_sqrt_d_k():
    q, k, v = torch.randn(2, 5, 16), torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    a, _ = scaled_dot_product_attention(q, k, v)
    b, _ = scaled_dot_product_attention(q, k, v, scale=1 / 4)
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_weights_rows_sum_to_one_and_masked_entries_are_zero():
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    mask = random_mask((2, 3, 4, 6))
    _, w = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 4))
    assert torch.all(w[~mask] == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fully_masked_row_gives_zeros_and_zero_gradients(dtype):
    q = torch.randn(2, 2, 4, 8).to(dtype).requires_grad_()
    k = torch.randn(2, 2, 5, 8).to(dtype).requires_grad_()
    v = torch.randn(2, 2, 5, 8).to(dtype).requires_grad_()
    mask = random_mask((2, 2, 4, 5))
    mask[0, 1, 2] = False  # query row 2 of head 1 in batch 0 sees nothing
    mask[1, :, 0] = False
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert torch.all(out[0, 1, 2] == 0) and torch.all(w[0, 1, 2] == 0)
    assert torch.all(out[1, :, 0] == 0) and torch.all(w[1, :, 0] == 0)
    (out.float() ** 2).sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.all(q.grad[0, 1, 2] == 0) and torch.all(q.grad[1, :, 0] == 0)
    # the other rows still agree with a float64 reference
    out_ref, _ = reference_attention(q.detach(), k.detach(), v.detach(), mask | ~mask.any(-1, keepdim=True))
    ok = mask.any(-1)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out.detach().double()[ok], out_ref[ok], atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_partial_mask_matches_float32(dtype):
    q, k, v = torch.randn(2, 4, 6, 16), torch.randn(2, 4, 6, 16), torch.randn(2, 4, 6, 16)
    mask = causal_mask(6)
    out, _ = scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), mask)
    ref, _ = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == dtype and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, atol=5e-2, rtol=5e-2)


def test_attention_dropout_applies_only_when_asked():
    q, k, v = torch.randn(2, 2, 8, 4), torch.randn(2, 2, 8, 4), torch.ones(2, 2, 8, 4)
    clean, w_clean = scaled_dot_product_attention(q, k, v)
    dropped, w = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.testing.assert_close(w, w_clean)  # returned weights are before dropout
    assert not torch.allclose(dropped, clean)
    # v = 1: the output is the row sum of the dropped, rescaled weights; its mean stays ~1
    assert abs(dropped.mean().item() - 1.0) < 0.3


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_bad_dropout_p(p):
    q = torch.randn(1, 2, 4)
    with pytest.raises(ValueError, match="dropout_p"):
        scaled_dot_product_attention(q, q, q, dropout_p=p)


def test_sdpa_bad_shapes():
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="d_k"):
        scaled_dot_product_attention(q, torch.randn(2, 5, 7), v)
    with pytest.raises(ValueError, match="number of keys"):
        scaled_dot_product_attention(q, k, torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match="leading"):
        scaled_dot_product_attention(q, torch.randn(3, 5, 8), torch.randn(3, 5, 8))  # batch 2 vs 3
    with pytest.raises(ValueError, match="mask of shape"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="torch.bool"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(3, 5))


# -------------------------------------------------------- multi-head attention
def _pair(parity, d_model=16, n_heads=4, fused_qkv=False):
    ours = parity.randomize_(MultiHeadAttention(d_model, n_heads, fused_qkv=fused_qkv))
    theirs = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
    parity.copy_mha(ours, theirs)
    return ours.eval(), theirs.eval()


@pytest.mark.parametrize("fused_qkv", [False, True])
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("kind", ["none", "padding", "causal", "padding+causal", "arbitrary"])
def test_mha_matches_torch_multihead_attention(parity, fused_qkv, cross, kind):
    b, lq, d_model, n_heads = 3, 5, 16, 4
    lk = 7 if cross else lq
    ours, theirs = _pair(parity, d_model, n_heads, fused_qkv)
    x = torch.randn(b, lq, d_model, requires_grad=True)
    mem = torch.randn(b, lk, d_model, requires_grad=True) if cross else x
    tokens = parity.tokens_with_padding(b, lk, 9, [lk, lk - 2, 1])
    pad = padding_mask(tokens, 0)
    causal = causal_mask(lk)[..., -lq:, :]
    arbitrary = random_mask((lq, lk))
    ours_mask = {"none": None, "padding": pad, "causal": causal, "padding+causal": pad & causal, "arbitrary": arbitrary}[kind]
    kpm = parity.key_padding(pad) if "padding" in kind else None
    attn_mask = {"causal": causal[0, 0], "padding+causal": causal[0, 0], "arbitrary": arbitrary}.get(kind)
    attn_mask = None if attn_mask is None else parity.blocked(attn_mask)

    if cross:
        out, w = attend(ours, x, mem, mem, mask=ours_mask)
    else:
        out, w = attend(ours, x, mask=ours_mask)
    ref, w_ref = theirs(
        x, mem, mem, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=True, average_attn_weights=False
    )
    assert out.shape == (b, lq, d_model) and w.shape == (b, n_heads, lq, lk)
    torch.testing.assert_close(out, ref, atol=ATOL, rtol=1e-4)
    torch.testing.assert_close(w, w_ref, atol=ATOL, rtol=1e-4)
    g = torch.randn_like(out)
    inputs = (x, mem) if cross else (x,)
    for a, r in zip(torch.autograd.grad(out, inputs, g), torch.autograd.grad(ref, inputs, g)):
        torch.testing.assert_close(a, r, atol=1e-4, rtol=1e-4)


def attend(mha, *args, **kwargs):
    """``(output, weights)`` of one call: the weights read the one way there is, ``last_weights``."""
    mha.record_weights = True
    out = mha(*args, **kwargs)
    return out, mha.last_weights


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_fused_and_separate_qkv_agree(cross):
    sep = MultiHeadAttention(12, 3)
    fused = MultiHeadAttention(12, 3, fused_qkv=True)
    with torch.no_grad():
        for lin in (sep.q_proj, sep.k_proj, sep.v_proj, sep.out_proj):
            lin.bias.normal_()
        fused.qkv_proj.weight.copy_(torch.cat([sep.q_proj.weight, sep.k_proj.weight, sep.v_proj.weight]))
        fused.qkv_proj.bias.copy_(torch.cat([sep.q_proj.bias, sep.k_proj.bias, sep.v_proj.bias]))
        fused.out_proj.load_state_dict(sep.out_proj.state_dict())
    x = torch.randn(2, 5, 12)
    mem = torch.randn(2, 4, 12)
    mask = causal_mask(5) if not cross else None
    args = (x, mem, mem) if cross else (x,)
    a, wa = attend(sep, *args, mask=mask)
    b, wb = attend(fused, *args, mask=mask)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(wa, wb, atol=1e-6, rtol=1e-6)


def test_split_heads_takes_contiguous_slices_per_head():
    mha = MultiHeadAttention(8, 2)
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).view(2, 3, 8)
    s = mha.split_heads(x)
    assert s.shape == (2, 2, 3, 4)
    for b in range(2):
        for h in range(2):
            for t in range(3):
                assert torch.equal(s[b, h, t], x[b, t, 4 * h : 4 * h + 4])
    assert torch.equal(mha.merge_heads(s), x)


def test_mha_heads_are_independent_subspaces():
    """Head h's output depends only on columns h*d_k:(h+1)*d_k of the projected q, k, v."""
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 4, 8)
    _, w = attend(mha, x)
    with torch.no_grad():
        q = mha.q_proj(x)[0]
        k = mha.k_proj(x)[0]
        for h in range(2):
            sl = slice(4 * h, 4 * h + 4)
            ref = torch.softmax(q[:, sl] @ k[:, sl].T / 2.0, dim=-1)
            torch.testing.assert_close(w[0, h], ref, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mha_fully_masked_row_low_precision(dtype):
    mha = MultiHeadAttention(16, 4).to(dtype)
    x = torch.randn(2, 3, 16, dtype=dtype, requires_grad=True)
    mask = torch.ones(2, 1, 3, 3, dtype=torch.bool)
    mask[1, :, 2] = False
    out, w = attend(mha, x, mask=mask)
    assert torch.isfinite(out).all()
    assert torch.all(w[1, :, 2] == 0)
    # the blocked row's output is just the output bias (zero attention output)
    torch.testing.assert_close(out[1, 2], mha.out_proj.bias.detach().to(dtype))
    out.float().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mha.parameters())


def test_record_weights_is_the_one_way_to_the_weights():
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 3, 8)
    out = mha(x)
    assert isinstance(out, torch.Tensor) and out.shape == (1, 3, 8) and mha.last_weights is None
    mha.record_weights = True
    torch.testing.assert_close(mha(x), out)
    assert mha.last_weights is not None and not mha.last_weights.requires_grad
    # independent: the weights from the projections, by hand
    q, k = mha.q_proj(x).view(1, 3, 2, 4).transpose(1, 2), mha.k_proj(x).view(1, 3, 2, 4).transpose(1, 2)
    torch.testing.assert_close(mha.last_weights, torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1).detach())
    with pytest.raises(TypeError, match="need_weights"):
        mha(x, need_weights=True)


def test_mha_dropout_train_vs_eval():
    mha = MultiHeadAttention(16, 4, dropout_p=0.5)
    x = torch.randn(2, 6, 16)
    mha.train()
    assert not torch.allclose(mha(x), mha(x))
    mha.eval()
    a = mha(x)
    torch.testing.assert_close(a, mha(x), atol=0, rtol=0)
    mha.dropout_p = 0.0
    torch.testing.assert_close(a, mha(x), atol=0, rtol=0)


def test_self_attention_cache_equals_full_causal():
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    full = mha(x, mask=causal_mask(6))
    cache = KVCache()
    steps = []
    for t in range(6):
        y = mha(x[:, t : t + 1], cache=cache)  # one new query sees every cached key
        steps.append(y)
    assert cache.length == 6
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-6, rtol=1e-5)


def test_static_cache_projects_memory_once():
    mha = MultiHeadAttention(16, 4).eval()
    x, mem = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    full = mha(x, mem, mem)
    cache = KVCache(static=True)
    a = mha(x[:, :2], mem, mem, cache=cache)
    key = cache.key
    b = mha(x[:, 2:], torch.zeros_like(mem), torch.zeros_like(mem), cache=cache)  # memory ignored now
    assert cache.key is key and cache.length == 5
    torch.testing.assert_close(torch.cat([a, b], 1), full, atol=1e-6, rtol=1e-5)


def test_kv_cache_reorder():
    cache = KVCache(key=torch.arange(3.0).view(3, 1, 1, 1), value=torch.arange(3.0).view(3, 1, 1, 1) + 10)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.key.flatten().tolist() == [2.0, 2.0, 0.0]
    assert cache.value.flatten().tolist() == [12.0, 12.0, 10.0]


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("d_model,n_heads", [(10, 3), (512, 7), (6, 4)])
def test_d_model_not_divisible_by_n_heads(d_model, n_heads):
    with pytest.raises(ValueError, match=rf"d_model={d_model}.*n_heads={n_heads}"):
        MultiHeadAttention(d_model, n_heads)


def test_mha_bad_inputs():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match=r"query must have shape \(batch, seq_len, 8\)"):
        mha(torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match=r"key must have shape"):
        mha(x, torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match=r"batch sizes differ: query 2, key 3"):
        mha(x, torch.randn(3, 4, 8))
    with pytest.raises(ValueError, match="key and value"):
        mha(x, torch.randn(2, 4, 8), torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match="mask of shape"):
        mha(x, mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="torch.bool"):
        mha(x, mask=torch.ones(2, 1, 1, 3))


@pytest.mark.parametrize("fused_qkv", [True, False])
def test_mha_input_dtype_must_match_the_weights(fused_qkv):
    mha = MultiHeadAttention(8, 2, fused_qkv=fused_qkv)
    x = torch.randn(2, 3, 8)
    with pytest.raises(TypeError, match=r"query has dtype torch.float16 but the weights of MultiHeadAttention are torch.float32"):
        mha(x.half())
    with pytest.raises(TypeError, match=r"key has dtype torch.float64"):
        mha(x, x.double())
    with pytest.raises(TypeError, match=r"query must be a floating-point tensor; got dtype torch.int64"):
        mha(torch.ones(2, 3, 8, dtype=torch.long))
    # matching dtypes work, and so do mixed dtypes under autocast (autocast casts them)
    assert mha.double()(x.double())[0].dtype == torch.float64
    mha.float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert mha(x.bfloat16()).shape == (2, 3, 8)
        with pytest.raises(TypeError, match="query has dtype torch.float64"):  # autocast does not cast float64
            mha(x.double())


@pytest.mark.parametrize("fused", [False, True], ids=["separate", "fused"])
def test_project_takes_a_role_name(fused):
    """``project(x, role)``: the role's own projection, also as rows of a fused weight."""
    mha = MultiHeadAttention(8, 2, fused_qkv=fused)
    x = torch.randn(2, 3, 8)
    with torch.no_grad():
        if fused:
            weights = dict(zip(("query", "key", "value"), mha.qkv_proj.weight.split(8)))
            biases = dict(zip(("query", "key", "value"), mha.qkv_proj.bias.split(8)))
        else:
            weights = {"query": mha.q_proj.weight, "key": mha.k_proj.weight, "value": mha.v_proj.weight}
            biases = {"query": mha.q_proj.bias, "key": mha.k_proj.bias, "value": mha.v_proj.bias}
        for role in ("query", "key", "value"):
            torch.testing.assert_close(mha.project(x, role), x @ weights[role].T + biases[role])
    with pytest.raises(ValueError, match=r"role must be one of \('query', 'key', 'value'\); got 1"):
        mha.project(x, 1)
