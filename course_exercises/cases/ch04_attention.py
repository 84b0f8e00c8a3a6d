"""The cases of chapter 4 - scaled dot-product attention (exercises 4.1, 4.2, 4.3, 4.4).

A part of the cases registry (``registry.py``): loaded after it, into the same module
(``course_exercise_cases``), never imported on its own; the relative imports below name where
each helper lives and are left out when the parts are put together (:mod:`course_exercises.casefile`).
"""

from __future__ import annotations

import math
from functools import partial
from types import ModuleType

import numpy as np
import torch
import torch.nn.functional as F

from .registry import (
    Arrays, _STANDIN_SCALED_DOT_PRODUCT_ATTENTION, _add, _f64, _pair, _raises_value_error, _randn, to_array,
)

# ===========================================================================
# Chapter 4 - scaled dot-product attention
# ===========================================================================
def _attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                         bias: torch.Tensor | None = None) -> Arrays:
    """Closed form in float64: softmax over the allowed keys of ``q k^T / sqrt(d_k) + bias`` (allowed: the mask
    says True and the bias is not -inf); rows with no allowed key -> zeros. The output is cross-checked against
    torch's fused attention with the equivalent float mask on the rows that have an allowed key."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    allowed = torch.ones_like(scores, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask
    if bias is not None:
        bias = bias.double()
        allowed = allowed & (bias != float("-inf"))
        scores = scores + bias.masked_fill(bias == float("-inf"), 0.0)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    empty = ~allowed.any(dim=-1, keepdim=True)
    weights = torch.where(empty, torch.zeros_like(weights), weights)
    out = weights @ v
    float_mask = torch.zeros_like(scores) if bias is None else (bias + torch.zeros_like(scores))
    float_mask = float_mask.masked_fill(~(allowed | empty), float("-inf")).masked_fill(empty, 0.0)
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask)
    rows = (~empty).expand_as(out)
    assert torch.allclose(fused[rows], out[rows], atol=1e-10), "reference mismatch with torch"
    return {"out": out.numpy(), "weights": weights.numpy()}


def _attn_inputs(seed: int, lead: tuple[int, ...], q_len: int, k_len: int, d_k: int, d_v: int, mask_kind: str):
    q = _randn(seed, *lead, q_len, d_k)
    k = _randn(seed + 1, *lead, k_len, d_k)
    v = _randn(seed + 2, *lead, k_len, d_v)
    batch = lead[0]
    if mask_kind == "none":
        mask = None
    elif mask_kind == "padding":  # (batch, 1, ..., 1, k_len): sequence b has k_len - b valid keys
        lengths = torch.tensor([k_len - b for b in range(batch)])
        mask = (torch.arange(k_len)[None, :] < lengths[:, None]).view(batch, *([1] * (len(lead) - 1)), 1, k_len)
    elif mask_kind == "causal":
        mask = torch.ones(q_len, k_len, dtype=torch.bool).tril()
    elif mask_kind == "fully-masked-row":  # causal, and query row 1 of batch 0 may see nothing
        mask = torch.ones(q_len, k_len, dtype=torch.bool).tril().expand(*lead, q_len, k_len).clone()
        mask[(0,) * len(lead) + (1,)] = False
    else:  # pragma: no cover
        raise AssertionError(mask_kind)
    return q, k, v, mask


def _alibi_bias(n_heads: int, q_len: int, k_len: int) -> torch.Tensor:
    """ALiBi (Press et al., 2022): ``-slope_h * |i - j|``, slopes ``2^(-8 h / n_heads)``; shape (n_heads, q_len, k_len)."""
    slopes = 2.0 ** (-8.0 * torch.arange(1, n_heads + 1, dtype=torch.float32) / n_heads)
    distance = (torch.arange(k_len)[None, :] - torch.arange(q_len)[:, None]).abs().float()
    return -slopes[:, None, None] * distance


def _attn_bias(seed: int, lead: tuple[int, ...], q_len: int, k_len: int, bias_kind: str) -> torch.Tensor | None:
    if bias_kind == "none":
        return None
    if bias_kind == "alibi":  # (n_heads, q_len, k_len), broadcast over the batch
        return _alibi_bias(lead[-1], q_len, k_len)
    bias = _randn(seed + 3, *lead, q_len, k_len, scale=2.0)
    if bias_kind == "drawn":
        return bias
    if bias_kind == "inf-causal":  # the causal mask written into the bias: -inf above the diagonal
        return bias.masked_fill(~torch.ones(q_len, k_len, dtype=torch.bool).tril(), float("-inf"))
    if bias_kind == "inf-row":  # query row 2 of the first batch/head entry: every key -inf
        bias = bias.clone()
        bias[(0,) * len(lead) + (2,)] = float("-inf")
        bias[(0,) * len(lead) + (0, 0)] = float("-inf")  # and one single blocked entry elsewhere
        return bias
    raise AssertionError(bias_kind)  # pragma: no cover


def _call_attention(ns: ModuleType, q, k, v, mask, bias, what: str):
    if bias is None:
        result = ns.scaled_dot_product_attention(q, k, v, mask)
        call = "scaled_dot_product_attention(q, k, v, mask)"
    else:
        result = ns.scaled_dot_product_attention(q, k, v, mask, bias=bias)
        call = "scaled_dot_product_attention(q, k, v, mask, bias=bias)"
    out, weights = _pair(result, call + what, ("out", "weights"))
    return {"out": to_array(out, "out", kind="f"), "weights": to_array(weights, "weights", kind="f")}


def _p_attention(ns: ModuleType, args, bias_kind: str = "none") -> Arrays:
    q, k, v, mask = _attn_inputs(*args)
    seed, lead, q_len, k_len = args[:4]
    return _call_attention(ns, q, k, v, mask, _attn_bias(seed, lead, q_len, k_len, bias_kind), "")


def _e_attention(args, bias_kind: str = "none") -> Arrays:
    q, k, v, mask = _attn_inputs(*args)
    seed, lead, q_len, k_len = args[:4]
    return _attention_reference(q, k, v, mask, _attn_bias(seed, lead, q_len, k_len, bias_kind))


_ATTN_HINT = ("weights = softmax(q @ k.transpose(-2, -1) / sqrt(d_k)) over the last dim (keys); out = weights @ v. "
              "Blocked entries (mask False) must get weight exactly 0.")
_BIAS_HINT = ("The bias is ADDED to the scaled scores: softmax(q @ k^T / sqrt(d_k) + bias), not divided by sqrt(d_k) "
              "with them; it broadcasts like the mask (e.g. (n_heads, q_len, k_len) over the batch). ")
_INF_HINT = ("A -inf entry of the bias blocks that key exactly as mask False does: combine both into one 'allowed' tensor "
             "(mask & (bias != -inf)), fill the blocked scores with torch.finfo(scores.dtype).min and zero the blocked "
             "weights after the softmax, so that a row with no allowed key gives zeros, never NaN.")
for _id, _args, _bias, _pts, _hint in (
    ("4.1-no-mask-3d", (401, (2,), 4, 4, 8, 8, "none"), "none", 1, _ATTN_HINT),
    ("4.1-cross-lengths-heads", (402, (2, 2), 3, 5, 4, 6, "none"), "none", 1,
     _ATTN_HINT + " q_len (3) and k_len (5) differ here; d_v (6) differs from d_k (4)."),
    ("4.1-padding-mask", (403, (3, 2), 4, 5, 8, 8, "padding"), "none", 1,
     _ATTN_HINT + " The mask has shape (batch, 1, 1, k_len) and must broadcast over heads and queries; True = may attend."),
    ("4.1-causal-mask", (404, (2, 2), 5, 5, 4, 4, "causal"), "none", 1,
     _ATTN_HINT + " With a causal mask, row i has non-zero weights only for keys j <= i."),
    ("4.1-fully-masked-row", (405, (2, 2), 4, 4, 4, 4, "fully-masked-row"), "none", 1,
     "A query row whose keys are ALL masked must give zero weights and a zero output, never NaN: fill blocked scores with a large "
     "negative finite number (torch.finfo(scores.dtype).min) instead of -inf, then set the blocked weights to 0 after the softmax."),
    ("4.1-bias-alibi-heads", (416, (2, 4), 5, 6, 8, 8, "none"), "alibi", 2,
     _BIAS_HINT + "Here the bias is ALiBi's -slope_h * |i - j|, shape (n_heads, q_len, k_len)."),
    ("4.1-bias-and-padding-mask", (417, (3, 2), 4, 5, 8, 6, "padding"), "drawn", 2,
     _BIAS_HINT + "The boolean mask still blocks its keys (weight exactly 0) when a bias is given."),
    ("4.1-bias-inf-causal", (418, (2,), 5, 5, 8, 8, "none"), "inf-causal", 2, _INF_HINT),
    ("4.1-bias-inf-row-and-mask", (419, (2, 2), 4, 4, 8, 8, "causal"), "inf-row", 2, _INF_HINT),
):
    _add(_id, "4.1", _pts, partial(_p_attention, args=_args, bias_kind=_bias), expected=partial(_e_attention, _args, _bias),
         hint=_hint, atol=1e-5)


_HALF_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _p_attention_low(ns: ModuleType, args, dtype: str, bias_kind: str = "none") -> Arrays:
    q, k, v, mask = _attn_inputs(*args)
    seed, lead, q_len, k_len = args[:4]
    bias = _attn_bias(seed, lead, q_len, k_len, bias_kind)
    q, k, v = (t.to(_HALF_DTYPES[dtype]) for t in (q, k, v))
    bias = None if bias is None else bias.to(_HALF_DTYPES[dtype])
    return _call_attention(ns, q, k, v, mask, bias, f" with {dtype} inputs")


def _e_attention_low(args, dtype: str, bias_kind: str = "none") -> Arrays:
    """Torch's fused attention in float32 on the same (rounded) low-precision inputs; zeros on a fully masked row."""
    q, k, v, mask = _attn_inputs(*args)
    seed, lead, q_len, k_len = args[:4]
    bias = _attn_bias(seed, lead, q_len, k_len, bias_kind)
    q, k, v = (t.to(_HALF_DTYPES[dtype]).float() for t in (q, k, v))
    shape = (*q.shape[:-1], k.size(-2))
    full = torch.ones(shape, dtype=torch.bool) if mask is None else mask.expand(shape)
    add = torch.zeros(shape)
    if bias is not None:
        bias = bias.to(_HALF_DTYPES[dtype]).float().expand(shape)
        full = full & (bias != float("-inf"))
        add = bias.masked_fill(bias == float("-inf"), 0.0)
    empty = ~full.any(dim=-1, keepdim=True)
    safe = full | empty  # torch gives NaN on a row with no allowed key: let it see everything, then zero that row
    float_mask = add.masked_fill(~safe, float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + float_mask, dim=-1)
    out = torch.where(empty, torch.zeros_like(out), out)
    weights = torch.where(empty, torch.zeros_like(weights), weights)
    return {"out": _f64(out), "weights": _f64(weights)}


_LOW_HINT = ("In float16 the most negative number is about -65504: a fill value such as -1e9 cannot even be stored "
             "(masked_fill raises), and -inf gives NaN on a fully masked row. Use torch.finfo(scores.dtype).min, which "
             "is right for every dtype, and set the blocked weights to 0 after the softmax.")
for _id, _args, _dtype, _bias, _pts, _rtol, _atol in (
    ("4.1-float16-fully-masked-row", (4091, (2, 2), 4, 4, 8, 8, "fully-masked-row"), "float16", "none", 1, 1e-2, 3e-3),
    ("4.1-float16-bias-inf-row", (4101, (3, 2), 4, 5, 8, 8, "padding"), "float16", "inf-row", 2, 1e-2, 3e-3),
    ("4.1-bfloat16-alibi-causal", (4151, (2, 2), 5, 5, 4, 4, "causal"), "bfloat16", "alibi", 2, 3e-2, 2e-2),
):
    _add(_id, "4.1", _pts, partial(_p_attention_low, args=_args, dtype=_dtype, bias_kind=_bias),
         expected=partial(_e_attention_low, _args, _dtype, _bias), hint=_LOW_HINT + (" " + _INF_HINT if _bias == "inf-row" else ""),
         rtol=_rtol, atol=_atol)


def _p_attention_rejects(ns: ModuleType) -> Arrays:
    q, k, v = _randn(406, 2, 3, 4), _randn(407, 2, 5, 6), _randn(408, 2, 5, 6)
    return {"raised_for_mismatched_d_k": _raises_value_error(lambda: ns.scaled_dot_product_attention(q, k, v))}


_add("4.1-rejects-mismatched-d-k", "4.1", 1, _p_attention_rejects, expected=lambda: {"raised_for_mismatched_d_k": np.array(True)},
     hint="Raise ValueError naming q and k when their last dimensions (d_k) differ.")


def _p_attention_rejects_bias(ns: ModuleType) -> Arrays:
    q, k, v = _randn(409, 2, 3, 4), _randn(410, 2, 5, 4), _randn(4111, 2, 5, 6)
    return {
        "raised_for_bool_bias": _raises_value_error(
            lambda: ns.scaled_dot_product_attention(q, k, v, None, bias=torch.ones(3, 5, dtype=torch.bool))),
        "raised_for_bias_of_wrong_shape": _raises_value_error(
            lambda: ns.scaled_dot_product_attention(q, k, v, None, bias=torch.zeros(5, 3))),
    }


_add("4.1-rejects-bad-bias", "4.1", 1, _p_attention_rejects_bias,
     expected=lambda: {"raised_for_bool_bias": np.array(True), "raised_for_bias_of_wrong_shape": np.array(True)},
     hint="Raise ValueError naming `bias` when it is not a floating-point tensor (a boolean belongs in `mask`) or when it does "
          "not broadcast to the score shape (..., q_len, k_len): check the sizes from the right (each 1 or equal, no extra "
          "dims) and raise ValueError yourself - the RuntimeError of a failed addition is not a ValueError.")


def _self_attn_inputs(seed, batch, seq_len, d_model, d_k, d_v, causal):
    x = _randn(seed, batch, seq_len, d_model)
    w_q = _randn(seed + 1, d_model, d_k, scale=d_model**-0.5)
    w_k = _randn(seed + 2, d_model, d_k, scale=d_model**-0.5)
    w_v = _randn(seed + 3, d_model, d_v, scale=d_model**-0.5)
    mask = torch.ones(seq_len, seq_len, dtype=torch.bool).tril() if causal else None
    return x, w_q, w_k, w_v, mask


def _p_self_attention(ns: ModuleType, args) -> Arrays:
    x, w_q, w_k, w_v, mask = _self_attn_inputs(*args)
    out, weights = _pair(ns.self_attention(x, w_q, w_k, w_v, mask), "self_attention(x, w_q, w_k, w_v, mask)", ("out", "weights"))
    return {"out": to_array(out, "out", kind="f"), "weights": to_array(weights, "weights", kind="f")}


def _e_self_attention(args) -> Arrays:
    x, w_q, w_k, w_v, mask = _self_attn_inputs(*args)
    x = x.double()
    q, k, v = x @ w_q.double(), x @ w_k.double(), x @ w_v.double()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return {"out": _f64(out), "weights": _f64(torch.softmax(scores, dim=-1))}


_SELF_HINT = ("Project first: Q = x @ w_q, K = x @ w_k, V = x @ w_v (paper convention, x times W), then scaled dot-product "
              "attention with d_k = w_q.shape[1] (not d_model).")
for _id, _args in {
    "4.2-batch-2x5": (411, 2, 5, 8, 4, 4, False),
    "4.2-d-v-differs": (412, 1, 6, 12, 3, 5, False),
    "4.2-causal": (413, 2, 4, 8, 8, 6, True),
}.items():
    _add(_id, "4.2", 2, partial(_p_self_attention, args=_args), expected=partial(_e_self_attention, _args), hint=_SELF_HINT, atol=1e-5,
         standins={"scaled_dot_product_attention": _STANDIN_SCALED_DOT_PRODUCT_ATTENTION})


def _additive_inputs(seed, batch, q_len, k_len, d_q, d_k, d_v, d_att, mask_kind):
    q = _randn(seed, batch, q_len, d_q)
    k = _randn(seed + 1, batch, k_len, d_k)
    v = _randn(seed + 2, batch, k_len, d_v)
    w_q = _randn(seed + 3, d_q, d_att, scale=d_q**-0.5)
    w_k = _randn(seed + 4, d_k, d_att, scale=d_k**-0.5)
    w_score = _randn(seed + 5, d_att)
    if mask_kind == "none":
        mask = None
    elif mask_kind == "padding":  # (batch, 1, k_len): sequence b has k_len - b keys
        mask = (torch.arange(k_len)[None, :] < torch.tensor([k_len - b for b in range(batch)])[:, None])[:, None, :]
    elif mask_kind == "causal":
        mask = torch.ones(q_len, k_len, dtype=torch.bool).tril()
    elif mask_kind == "fully-masked-row":  # causal, and query 1 of batch 0 may see nothing
        mask = torch.ones(q_len, k_len, dtype=torch.bool).tril().expand(batch, q_len, k_len).clone()
        mask[0, 1] = False
    else:  # pragma: no cover
        raise AssertionError(mask_kind)
    return q, k, v, w_q, w_k, w_score, mask


def _p_additive(ns: ModuleType, args) -> Arrays:
    q, k, v, w_q, w_k, w_score, mask = _additive_inputs(*args)
    out, weights = _pair(ns.additive_attention(q, k, v, w_q, w_k, w_score, mask),
                         "additive_attention(q, k, v, w_q, w_k, w_score, mask)", ("out", "weights"))
    return {"out": to_array(out, "out", kind="f"), "weights": to_array(weights, "weights", kind="f")}


def _additive_reference(q, k, v, w_q, w_k, w_score, mask) -> Arrays:
    """einsum in float64: score[b, i, j] = sum_a w_score[a] tanh((q W_q)[b, i, a] + (k W_k)[b, j, a])."""
    q, k, v, w_q, w_k, w_score = (t.double() for t in (q, k, v, w_q, w_k, w_score))
    hidden = torch.tanh(torch.einsum("bid,da->bia", q, w_q)[:, :, None, :] + torch.einsum("bjd,da->bja", k, w_k)[:, None, :, :])
    scores = torch.einsum("bija,a->bij", hidden, w_score)
    allowed = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask.expand_as(scores)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    empty = ~allowed.any(-1, keepdim=True)
    weights = torch.where(empty, torch.zeros_like(weights), weights)
    return {"out": _f64(torch.einsum("bij,bjd->bid", weights, v)), "weights": _f64(weights)}


def _e_additive(args) -> Arrays:
    return _additive_reference(*_additive_inputs(*args))


_ADD_HINT = ("score[b, i, j] = w_score . tanh(q[b, i] @ w_q + k[b, j] @ w_k): broadcast the projected queries "
             "(batch, q_len, 1, d_att) against the projected keys (batch, 1, k_len, d_att), take tanh, then the dot "
             "product with w_score over d_att. No 1/sqrt scale; softmax over the keys (last dim); out = weights @ v.")
for _id, _args, _pts, _extra in (
    ("4.3-no-mask", (431, 2, 3, 5, 6, 6, 4, 8, "none"), 2, ""),
    ("4.3-cross-widths-padding", (432, 3, 4, 6, 5, 7, 3, 6, "padding"), 2,
     " Here d_q (5) and d_k (7) differ: additive attention needs no common width, each side has its own matrix."),
    ("4.3-causal-self", (433, 1, 5, 5, 4, 4, 4, 10, "causal"), 2, " With a causal mask row i has weights only for keys j <= i."),
    ("4.3-fully-masked-row", (434, 2, 4, 4, 6, 6, 5, 8, "fully-masked-row"), 2,
     " A query row with no allowed key must give zero weights and a zero output, never NaN."),
):
    _add(_id, "4.3", _pts, partial(_p_additive, args=_args), expected=partial(_e_additive, _args), hint=_ADD_HINT + _extra, atol=1e-5)


def _p_additive_rejects(ns: ModuleType) -> Arrays:
    q, k, v, w_q, w_k, w_score, _ = _additive_inputs(435, 1, 2, 3, 4, 6, 5, 8, "none")
    return {
        "raised_for_w_q_not_matching_q": _raises_value_error(lambda: ns.additive_attention(q, k, v, w_k, w_k, w_score)),
        "raised_for_attention_widths_differ": _raises_value_error(
            lambda: ns.additive_attention(q, k, v, w_q, w_k[:, :5], w_score)),
        "raised_for_w_score_width": _raises_value_error(lambda: ns.additive_attention(q, k, v, w_q, w_k, w_score[:5])),
    }


_add("4.3-rejects-bad-widths", "4.3", 1, _p_additive_rejects,
     expected=lambda: {k: np.array(True) for k in ("raised_for_w_q_not_matching_q", "raised_for_attention_widths_differ",
                                                    "raised_for_w_score_width")},
     hint="Raise ValueError naming the argument when w_q's rows do not match q's last dim, w_k's rows k's, or when w_q, w_k and "
          "w_score do not share the attention width d_att.")


def _score_std_inputs(kind: str, seed: int, shape: tuple[int, ...]):
    if kind == "unit":
        return torch.ones(shape), torch.ones(shape)
    if kind == "constant":
        return torch.full(shape, 0.5), torch.full(shape, 3.0)
    return _randn(seed, *shape).abs() + 0.1, _randn(seed + 1, *shape).abs() + 0.1


def _p_score_std(ns: ModuleType, kind, seed, shape) -> Arrays:
    q_std, k_std = _score_std_inputs(kind, seed, shape)
    std, scale = _pair(ns.dot_product_score_std(q_std, k_std), "dot_product_score_std(q_std, k_std)", ("std", "scale"))
    return {"std": to_array(std, "std", kind="f"), "scale": to_array(scale, "scale", kind="f")}


def _e_score_std(kind, seed, shape) -> Arrays:
    """Var(sum_i q_i k_i) = sum_i Var(q_i) Var(k_i) for independent zero-mean components (footnote 4, unequal variances)."""
    q_std, k_std = (t.double().numpy() for t in _score_std_inputs(kind, seed, shape))
    std = np.array(np.sqrt(np.sum(q_std**2 * k_std**2, axis=-1)), dtype=np.float64)
    return {"std": std, "scale": np.array(1.0 / std, dtype=np.float64)}


_STD_HINT = ("For independent zero-mean components, Var(q_i k_i) = Var(q_i) Var(k_i) = q_std_i^2 k_std_i^2, and the variances of "
             "the d_k terms add: std(q . k) = sqrt(sum_i q_std_i^2 k_std_i^2), summed over the last dim only; scale = 1 / std. "
             "With unit variances this is sqrt(d_k) and the paper's 1/sqrt(d_k).")
for _id, _kind, _seed, _shape, _pts in (
    ("4.4-unit-variance-d-k-64", "unit", 0, (64,), 1),
    ("4.4-unit-variance-per-head", "unit", 0, (8, 16), 1),
    ("4.4-constant-stds", "constant", 0, (10,), 1),
    ("4.4-drawn-stds", "drawn", 441, (32,), 2),
    ("4.4-drawn-stds-per-head", "drawn", 443, (2, 4, 8), 2),
):
    _add(_id, "4.4", _pts, partial(_p_score_std, kind=_kind, seed=_seed, shape=_shape),
         expected=partial(_e_score_std, _kind, _seed, _shape), hint=_STD_HINT, atol=1e-5)


def _p_score_std_rejects(ns: ModuleType) -> Arrays:
    q_std, k_std = _score_std_inputs("unit", 0, (4,))
    return {
        "raised_for_shapes_differ": _raises_value_error(lambda: ns.dot_product_score_std(q_std, torch.ones(5))),
        "raised_for_negative_std": _raises_value_error(lambda: ns.dot_product_score_std(q_std, -k_std)),
    }


_add("4.4-rejects-bad-stds", "4.4", 1, _p_score_std_rejects,
     expected=lambda: {"raised_for_shapes_differ": np.array(True), "raised_for_negative_std": np.array(True)},
     hint="Raise ValueError naming q_std and k_std when their shapes differ, or when a standard deviation is negative.")
