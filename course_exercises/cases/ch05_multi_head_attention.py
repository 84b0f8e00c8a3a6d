"""The cases of chapter 5 - multi-head attention (exercises 5.1, 5.2, 5.3, 5.4).

A part of the cases registry (``registry.py``): loaded after it, into the same module
(``course_exercise_cases``), never imported on its own; the relative imports below name where
each helper lives and are left out when the parts are put together (:mod:`course_exercises.casefile`).
"""

from __future__ import annotations

from functools import partial
from types import ModuleType

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .registry import (
    Arrays, _STANDIN_MERGE_HEADS, _STANDIN_SPLIT_HEADS, _add, _f64, _pair, _raises_value_error, _randn, to_array,
)
from .shared import _rejections

# ===========================================================================
# Chapter 5 - multi-head attention
# ===========================================================================
def _p_split(ns: ModuleType, args) -> Arrays:
    seed, shape, n_heads = args
    x = _randn(seed, *shape)
    return {"heads": to_array(ns.split_heads(x, n_heads), f"split_heads(x of shape {tuple(shape)}, {n_heads})", kind="f")}


def _e_split(seed, shape, n_heads) -> Arrays:
    x = _randn(seed, *shape).double().numpy()
    *lead, seq_len, d_model = shape
    heads = x.reshape(*lead, seq_len, n_heads, d_model // n_heads)
    return {"heads": np.ascontiguousarray(np.swapaxes(heads, -3, -2))}


_SPLIT_HINT = ("Reshape the last dim to (n_heads, d_k) and THEN swap the sequence and head axes (transpose(-3, -2)). "
               "Reshaping directly to (..., n_heads, seq_len, d_k) gives the right shape but mixes positions into heads. "
               "Use negative dims and x.shape[:-2] so that any number of leading dims works.")
for _id, _args, _pts in (
    ("5.1-batch-d-8-heads-2", (501, (2, 5, 8), 2), 1),
    ("5.1-batch-d-12-heads-3", (502, (1, 3, 12), 3), 1),
    ("5.1-unbatched-2d", (503, (4, 6), 3), 2),
    ("5.1-beams-4d", (504, (2, 3, 4, 8), 4), 2),
    ("5.1-d-k-1-one-head-5d", (5041, (2, 1, 2, 3, 4), 1), 1),
):
    _add(_id, "5.1", _pts, partial(_p_split, args=_args), expected=partial(_e_split, *_args), hint=_SPLIT_HINT)


def _p_split_rejects(ns: ModuleType) -> Arrays:
    return _rejections({
        "indivisible_d_model": (lambda: ns.split_heads(_randn(505, 2, 3, 10), 4), ("10", "4")),  # both numbers
        "1d_input": (lambda: ns.split_heads(_randn(506, 8), 2), ()),
    })


_add("5.1-rejects-bad-input", "5.1", 1, _p_split_rejects,
     expected=lambda: {"raised_for_indivisible_d_model": np.array(True), "raised_for_1d_input": np.array(True),
                       "message_names_10_and_4": np.array(True)},
     hint="Raise ValueError when x has fewer than 2 dims (it needs (..., seq_len, d_model)) or when d_model is not divisible "
          "by n_heads (name both numbers).")


def _p_merge(ns: ModuleType, args) -> Arrays:
    seed, shape = args
    x = _randn(seed, *shape)
    return {"merged": to_array(ns.merge_heads(x), f"merge_heads(x of shape {tuple(shape)})", kind="f")}


def _e_merge(seed, shape) -> Arrays:
    x = _randn(seed, *shape).double().numpy()
    *lead, n_heads, seq_len, d_k = shape
    return {"merged": np.swapaxes(x, -3, -2).reshape(*lead, seq_len, n_heads * d_k)}


_MERGE_HINT = ("Undo split_heads: swap the head and sequence axes back (transpose(-3, -2)) to (..., seq_len, n_heads, d_k), "
               "then reshape to (..., seq_len, n_heads * d_k) (.reshape, or .contiguous() before .view). Head h must fill "
               "columns h*d_k ... (h+1)*d_k - 1, for any number of leading dims.")
for _id, _args, _pts in (
    ("5.2-batch-heads-2-d-k-4", (511, (2, 2, 5, 4)), 1),
    ("5.2-batch-heads-3-d-k-2", (512, (1, 3, 4, 2)), 1),
    ("5.2-unbatched-3d", (513, (3, 4, 5)), 2),
    ("5.2-beams-5d", (514, (2, 3, 4, 2, 3)), 2),
):
    _add(_id, "5.2", _pts, partial(_p_merge, args=_args), expected=partial(_e_merge, *_args), hint=_MERGE_HINT)


def _p_merge_rejects(ns: ModuleType) -> Arrays:
    return {"raised_for_2d_input": _raises_value_error(lambda: ns.merge_heads(_randn(515, 3, 4)))}


_add("5.2-rejects-2d-input", "5.2", 1, _p_merge_rejects, expected=lambda: {"raised_for_2d_input": np.array(True)},
     hint="Raise ValueError when x has fewer than 3 dims (it needs (..., n_heads, seq_len, d_k)).")


def _mha_inputs(seed, batch, q_len, k_len, d_model, n_heads, mask_kind):
    query = _randn(seed, batch, q_len, d_model)
    key = query if mask_kind == "causal-self" else _randn(seed + 1, batch, k_len, d_model)
    value = query if mask_kind == "causal-self" else _randn(seed + 2, batch, k_len, d_model)
    ws = [_randn(seed + 3 + i, d_model, d_model, scale=d_model**-0.5) for i in range(4)]
    if mask_kind == "padding":
        lengths = torch.tensor([max(1, k_len - 2 * b) for b in range(batch)])
        mask = (torch.arange(k_len)[None, :] < lengths[:, None])[:, None, None, :]
    elif mask_kind == "causal-self":
        mask = torch.ones(q_len, q_len, dtype=torch.bool).tril()[None, None]
    else:
        mask = None
    return query, key, value, ws, n_heads, mask


def _interleave_qkv(w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The fused (d_model, 3 d_model) weight in the per-head layout: columns ordered (head, [q, k, v], d_k)."""
    d_model = w_q.size(0)
    d_k = d_model // n_heads
    per_head = torch.stack([w.reshape(d_model, n_heads, d_k) for w in (w_q, w_k, w_v)], dim=2)  # (d_model, h, 3, d_k)
    return per_head.reshape(d_model, 3 * d_model)


def _p_mha(ns: ModuleType, args, dtype: str = "float32") -> Arrays:
    query, key, value, (w_q, w_k, w_v, w_o), n_heads, mask = _mha_inputs(*args)
    w_qkv = _interleave_qkv(w_q, w_k, w_v, n_heads)
    if dtype == "float16":
        query, key, value, w_qkv, w_o = (t.half() for t in (query, key, value, w_qkv, w_o))
    out, weights = _pair(
        ns.multi_head_attention(query, key, value, w_qkv, w_o, n_heads, mask),
        "multi_head_attention(query, key, value, w_qkv, w_o, n_heads, mask)" + (" with float16 inputs" if dtype == "float16" else ""),
        ("out", "weights"),
    )
    return {"out": to_array(out, "out", kind="f"), "weights": to_array(weights, "weights", kind="f")}


def _e_mha(args, dtype: str = "float32") -> Arrays:
    """torch.nn.MultiheadAttention with the weights copied (it computes x @ W.T, so W is transposed). The fused weight is
    undone here with numpy (columns of head h: q at 3h*d_k, k at (3h+1)*d_k, v at (3h+2)*d_k); float16 cases run in
    float32 on the float16-rounded inputs."""
    query, key, value, (w_q, w_k, w_v, w_o), n_heads, mask = _mha_inputs(*args)
    d_model = query.size(-1)
    d_k = d_model // n_heads
    fused = _interleave_qkv(w_q, w_k, w_v, n_heads)
    work = torch.float64 if dtype == "float32" else torch.float32
    if dtype == "float16":
        query, key, value, fused, w_o = (t.half() for t in (query, key, value, fused, w_o))
    cols = fused.double().numpy().reshape(d_model, n_heads, 3, d_k)
    w_sep = [torch.from_numpy(np.ascontiguousarray(cols[:, :, j, :].reshape(d_model, d_model))).to(work) for j in range(3)]
    mha = nn.MultiheadAttention(d_model, n_heads, bias=False, batch_first=True, dtype=work)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([w.T for w in w_sep], dim=0))
        mha.out_proj.weight.copy_(w_o.T.to(work))
    kwargs = {}
    if mask is not None and mask.size(0) == 1:  # causal (1, 1, L, L): torch wants True = BLOCKED
        kwargs["attn_mask"] = ~mask[0, 0]
    elif mask is not None:  # padding (batch, 1, 1, k_len)
        kwargs["key_padding_mask"] = ~mask[:, 0, 0, :]
    mha.eval()
    with torch.no_grad():
        out, weights = mha(query.to(work), key.to(work), value.to(work), need_weights=True, average_attn_weights=False, **kwargs)
    return {"out": _f64(out), "weights": _f64(weights)}


_MHA_HINT = ("w_qkv holds the three projections side by side PER HEAD: viewed as (d_model, n_heads, 3, d_k), [:, h, 0] is head h's "
             "W^Q_h, [:, h, 1] its W^K_h, [:, h, 2] its W^V_h (not [W^Q | W^K | W^V] as three blocks of d_model columns). "
             "Project (query with W^Q, key with W^K, value with W^V), split into heads, attention per head with scale "
             "1/sqrt(d_k), merge, multiply by w_o. weights has shape (batch, n_heads, q_len, k_len).")
for _id, _args in {
    "5.3-self-4-heads": (521, 2, 5, 5, 16, 4, "none"),
    "5.3-cross-padding-mask": (522, 3, 3, 6, 8, 2, "padding"),
    "5.3-causal-self-3-heads": (523, 1, 4, 4, 12, 3, "causal-self"),
    "5.3-one-head": (524, 1, 3, 5, 8, 1, "none"),
}.items():
    _add(_id, "5.3", 2, partial(_p_mha, args=_args), expected=partial(_e_mha, _args), hint=_MHA_HINT, atol=1e-5,
         standins={"split_heads": _STANDIN_SPLIT_HEADS, "merge_heads": _STANDIN_MERGE_HEADS})

_add("5.3-float16-padding-mask", "5.3", 1, partial(_p_mha, args=(5251, 3, 3, 6, 8, 2, "padding"), dtype="float16"),
     expected=partial(_e_mha, (5251, 3, 3, 6, 8, 2, "padding"), "float16"),
     hint=_MHA_HINT + " This case runs in float16: if you mask the scores yourself, fill with torch.finfo(scores.dtype).min "
                      "(a fill value such as -1e9 overflows float16).", rtol=1e-2, atol=5e-3,
     standins={"split_heads": _STANDIN_SPLIT_HEADS, "merge_heads": _STANDIN_MERGE_HEADS})


def _ablation_inputs(seed, batch, seq_len, d_model, n_heads, mask_kind):
    x = _randn(seed, batch, seq_len, d_model)
    ws = [_randn(seed + 1 + i, d_model, d_model, scale=d_model**-0.5) for i in range(4)]
    if mask_kind == "causal":
        mask = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    elif mask_kind == "padding":  # (batch, 1, 1, seq_len): sequence b has seq_len - b real tokens
        mask = (torch.arange(seq_len)[None, :] < torch.tensor([seq_len - b for b in range(batch)])[:, None])[:, None, None, :]
    else:
        mask = None
    return x, ws, n_heads, mask


def _p_ablation(ns: ModuleType, args) -> Arrays:
    x, (w_q, w_k, w_v, w_o), n_heads, mask = _ablation_inputs(*args)
    effect = ns.head_ablation_effect(x, w_q, w_k, w_v, w_o, n_heads, mask)
    return {"effect": to_array(effect, "head_ablation_effect(x, w_q, w_k, w_v, w_o, n_heads, mask)", kind="f")}


def _e_ablation(args) -> Arrays:
    """Run the layer n_heads + 1 times in float64 (torch's fused attention per head): once whole, once per head with that
    head's output replaced by zeros before W^O; mean over (batch, position) of the L2 norm of the difference."""
    x, ws, n_heads, mask = _ablation_inputs(*args)
    x = x.double()
    w_q, w_k, w_v, w_o = (w.double() for w in ws)
    d_model = x.size(-1)
    d_k = d_model // n_heads
    heads = []
    for h in range(n_heads):
        cols = slice(h * d_k, (h + 1) * d_k)
        heads.append(F.scaled_dot_product_attention((x @ w_q)[..., cols][:, None], (x @ w_k)[..., cols][:, None],
                                                    (x @ w_v)[..., cols][:, None],
                                                    attn_mask=None if mask is None else mask.reshape(-1, 1, *mask.shape[-2:]))[:, 0])
    full = torch.cat(heads, dim=-1) @ w_o
    effect = []
    for h in range(n_heads):
        ablated = torch.cat([torch.zeros_like(t) if i == h else t for i, t in enumerate(heads)], dim=-1) @ w_o
        effect.append(torch.linalg.vector_norm(full - ablated, dim=-1).mean())
    return {"effect": _f64(torch.stack(effect))}


_ABL_HINT = ("For each head h: the full output minus the output computed with head h's attention output (batch, seq_len, d_k) "
             "set to zero BEFORE the concatenation and w_o; take the L2 norm over d_model at every (batch, position) and "
             "average those norms. Zero the head's output, not its weights or its query. The attention itself is the "
             "chapter's: scores scaled by 1/sqrt(d_k) before the softmax; the averaged norm is returned as it is.")
for _id, _args, _pts in (
    ("5.4-four-heads", (541, 2, 5, 16, 4, "none"), 2),
    ("5.4-causal-two-heads", (542, 1, 6, 8, 2, "causal"), 2),
    ("5.4-padding-three-heads", (543, 3, 4, 12, 3, "padding"), 2),
    ("5.4-one-head", (544, 2, 3, 6, 1, "none"), 1),
):
    _add(_id, "5.4", _pts, partial(_p_ablation, args=_args), expected=partial(_e_ablation, _args), hint=_ABL_HINT, atol=1e-5)


def _p_ablation_rejects(ns: ModuleType) -> Arrays:
    x, (w_q, w_k, w_v, w_o), _, _ = _ablation_inputs(545, 1, 3, 10, 2, "none")
    return {"raised_for_indivisible_d_model": _raises_value_error(
        lambda: ns.head_ablation_effect(x, w_q, w_k, w_v, w_o, 4))}


_add("5.4-rejects-indivisible-d-model", "5.4", 1, _p_ablation_rejects,
     expected=lambda: {"raised_for_indivisible_d_model": np.array(True)},
     hint="Raise ValueError naming d_model and n_heads when d_model is not divisible by n_heads.")
