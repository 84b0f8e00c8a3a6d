"""The cases of chapter 13 - today's block (exercises 13.1, 13.2, 13.3, 13.4).

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

from .registry import Arrays, _add, _randint, _randn, to_array, to_number
from .shared import _rejections


# ===========================================================================
# Chapter 13 - today's block
# ===========================================================================
# --- 13.1: RoPE with interleaved pairs ---------------------------------------------------------------------
_ROPE_SPECS = {
    # id: (seed, leading dims, (seq_len low, high), (d_head / 2 low, high), positions kind, base[, dtype of x])
    "13.1-drawn-prompt-positions": (1311, (2, 3), (3, 7), (2, 7), "prompt", 10000.0),
    "13.1-drawn-positions-after-a-cache-offset": (1312, (1, 2), (1, 5), (2, 5), "offset", 10000.0),
    "13.1-drawn-unordered-positions-no-leading-dims": (1313, (), (4, 9), (1, 5), "any", 10000.0),
    "13.1-drawn-base-500": (1314, (3,), (3, 6), (3, 9), "prompt", 500.0),
    "13.1-drawn-float64-x-keeps-its-dtype": (1315, (2,), (3, 7), (2, 6), "offset", 10000.0, torch.float64),
}


def _rope_args(key: str) -> tuple[torch.Tensor, torch.Tensor, float]:
    seed, lead, len_range, half_range, kind, base, *dtype = _ROPE_SPECS[key]
    seq_len = int(_randint(seed, *len_range, 1)[0])
    d_head = 2 * int(_randint(seed + 1, *half_range, 1)[0])
    x = _randn(seed + 2, *lead, seq_len, d_head).to(*dtype or [torch.float32])
    if kind == "prompt":
        positions = torch.arange(seq_len)
    elif kind == "offset":
        positions = int(_randint(seed + 3, 10, 100, 1)[0]) + torch.arange(seq_len)
    else:
        positions = _randint(seed + 3, 0, 128, seq_len)
    return x, positions, base


def _p_rope(ns: ModuleType, key: str) -> Arrays:
    x, positions, base = _rope_args(key)
    what = f"rope_interleaved(x of shape {tuple(x.shape)} and dtype {x.dtype}, positions {positions.tolist()}, base={base})"
    rotated = ns.rope_interleaved(x, positions, base)
    return {"rotated": to_array(rotated, what, kind="f"), "dtype_matches": np.array(getattr(rotated, "dtype", None) == x.dtype)}


def _rope_library(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """The library's rotate-half RoPE (``course_lib.positional.apply_rope``) on the features reordered so that the
    neighbours (2i, 2i + 1) become the pair (i, i + d/2), then put back in their order; in float64."""
    from course_lib.positional import apply_rope, rope_angles

    d = x.size(-1)
    order = torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))       # neighbours -> halves
    cos, sin = rope_angles(int(positions.max()) + 1, d, base)
    rotated = apply_rope(x.double()[..., order], cos.double()[positions], sin.double()[positions])
    return rotated[..., torch.argsort(order)]                                # halves -> neighbours


def _e_rope(key: str) -> Arrays:
    x, positions, base = _rope_args(key)
    return {"rotated": _rope_library(x, positions, base).numpy(), "dtype_matches": np.array(True)}


_ROPE_HINT = ("Pair i is (x[..., 2i], x[..., 2i + 1]) - neighbours, not the halves of apply_rope - and turns by positions * "
              "base ** (-2i / d_head): y[2i] = x[2i] cos - x[2i+1] sin, y[2i+1] = x[2i] sin + x[2i+1] cos. Use the given "
              "positions (not arange(seq_len)) and base. Return the dtype of x (dtype_matches: compute in float64 if you "
              "like, then .to(x.dtype)).")
for _id in _ROPE_SPECS:
    _add(_id, "13.1", 2, partial(_p_rope, key=_id), expected=partial(_e_rope, _id), hint=_ROPE_HINT, rtol=1e-4, atol=1e-4)


def _p_rope_hand(ns: ModuleType) -> Arrays:
    x = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    return {"rotated": to_array(ns.rope_interleaved(x, torch.tensor([1]), 10000.0),
                                "rope_interleaved([[1, 0, 1, 0]], positions [1])", kind="f")}


_add("13.1-hand-worked-example", "13.1", 1, _p_rope_hand,
     expected=lambda: {"rotated": np.array([[math.cos(1.0), math.sin(1.0), math.cos(0.01), math.sin(0.01)]])},
     hint=_ROPE_HINT, rtol=1e-5, atol=1e-6)


def _p_rope_rejects(ns: ModuleType) -> Arrays:
    x = torch.ones(3, 4)
    return _rejections({
        "odd_d_head": (lambda: ns.rope_interleaved(torch.ones(3, 5), torch.arange(3)), ("x",)),
        "1d_x": (lambda: ns.rope_interleaved(torch.ones(4), torch.arange(1)), ("x",)),
        "positions_of_another_length": (lambda: ns.rope_interleaved(x, torch.arange(4)), ("positions",)),
    })


_add("13.1-rejects-bad-arguments", "13.1", 2, _p_rope_rejects,
     expected=lambda: {"raised_for_odd_d_head": np.array(True), "raised_for_1d_x": np.array(True),
                       "raised_for_positions_of_another_length": np.array(True), "message_names_x": np.array(True),
                       "message_names_positions": np.array(True)},
     hint="Raise ValueError naming x when it has fewer than 2 dims or an odd last dim (RoPE turns pairs), and naming "
          "positions when it is not 1-D with one position per row of x.")


# --- 13.2: grouped-query attention without copying the keys -------------------------------------------------
_GQA_SPECS = {
    # id: (seed, batch, n_heads, n_kv_heads, q_len, k_len, d_k, d_v, causal)
    "13.2-drawn-grouped-8-query-heads-2-kv-heads": (1321, 2, 8, 2, 5, 5, 4, 4, False),
    "13.2-drawn-grouped-causal-queries-are-the-last-positions": (1322, 1, 6, 3, 3, 7, 4, 5, True),
    "13.2-drawn-edge-multi-query-causal": (1323, 2, 4, 1, 6, 6, 3, 3, True),
    "13.2-drawn-edge-multi-head-kv-heads-equal-heads": (1324, 1, 3, 3, 4, 6, 2, 6, False),
    "13.2-drawn-one-new-token-after-a-cache": (1325, 2, 8, 4, 1, 9, 4, 4, True),
}


def _gqa_inputs(key: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    seed, batch, n_heads, n_kv, q_len, k_len, d_k, d_v, causal = _GQA_SPECS[key]
    return (_randn(seed, batch, n_heads, q_len, d_k), _randn(seed + 1, batch, n_kv, k_len, d_k),
            _randn(seed + 2, batch, n_kv, k_len, d_v), causal)


def _p_gqa(ns: ModuleType, key: str) -> Arrays:
    q, k, v, causal = _gqa_inputs(key)
    what = (f"grouped_query_attention(q of shape {tuple(q.shape)}, k of shape {tuple(k.shape)}, v of shape "
            f"{tuple(v.shape)}, causal={causal})")
    return {"output": to_array(ns.grouped_query_attention(q, k, v, causal), what, kind="f")}


def _e_gqa(key: str) -> Arrays:
    """PyTorch's fused attention with ``enable_gqa=True`` and a bottom-right aligned causal mask, in float64."""
    q, k, v, causal = _gqa_inputs(key)
    q_len, k_len = q.size(2), k.size(2)
    mask = None
    if causal:
        mask = torch.arange(k_len)[None, :] <= torch.arange(q_len)[:, None] + (k_len - q_len)
    out = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, enable_gqa=True)
    return {"output": out.numpy()}


_GQA_HINT = ("Query head h reads key/value head h // (n_heads // n_kv_heads): CONSECUTIVE query heads share one (reshape q to "
             "(batch, n_kv_heads, group, q_len, d_k); a tiled order h % n_kv_heads is wrong). Scale the scores by 1/sqrt(d_k). "
             "causal=True: the queries are the LAST q_len positions, so query i sees key j when j <= i + k_len - q_len. "
             "Return the output alone, one tensor (batch, n_heads, q_len, d_v) - not (output, weights).")
for _id in _GQA_SPECS:
    _add(_id, "13.2", 2, partial(_p_gqa, key=_id), expected=partial(_e_gqa, _id), hint=_GQA_HINT, rtol=1e-4, atol=1e-5)


def _p_gqa_rejects(ns: ModuleType) -> Arrays:
    q = torch.ones(1, 8, 2, 4)
    return _rejections({
        "kv_heads_not_dividing": (lambda: ns.grouped_query_attention(q, torch.ones(1, 3, 2, 4), torch.ones(1, 3, 2, 4)),
                                  ("n_kv_heads",)),
        "k_and_v_head_counts_differ": (lambda: ns.grouped_query_attention(q, torch.ones(1, 2, 2, 4), torch.ones(1, 4, 2, 4)),
                                       ("k",)),
        "k_width_not_q_width": (lambda: ns.grouped_query_attention(q, torch.ones(1, 2, 2, 3), torch.ones(1, 2, 2, 4)),
                                ("k",)),
    })


_add("13.2-rejects-bad-heads", "13.2", 2, _p_gqa_rejects,
     expected=lambda: {"raised_for_kv_heads_not_dividing": np.array(True),
                       "raised_for_k_and_v_head_counts_differ": np.array(True),
                       "raised_for_k_width_not_q_width": np.array(True), "message_names_n_kv_heads": np.array(True),
                       "message_names_k": np.array(True)},
     hint="Raise ValueError naming n_kv_heads when k's number of heads does not divide q's, and naming k (the argument "
          "k, as a word of its own: 'k has 2 heads but v has 4') when k and v differ in heads or k's last dim is not "
          "q's d_k.")


# --- 13.3: the memory of the KV cache -------------------------------------------------------------------------
_KV_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
_KV_SPECS = {
    # id: (seed, dtype name, n_kv_heads: "grouped" | "multi-query" | "none" (None: as n_heads))
    "13.3-drawn-grouped-float16": (1331, "float16", "grouped"),
    "13.3-drawn-multi-query-bfloat16": (1332, "bfloat16", "multi-query"),
    "13.3-drawn-edge-n-kv-heads-none-float32": (1333, "float32", "none"),
    "13.3-drawn-grouped-float64": (1334, "float64", "grouped"),
}


def _kv_args(key: str) -> dict:
    seed, dtype, kind = _KV_SPECS[key]
    n_layers, d_head, seq_len, batch = (int(v) for v in _randint(seed, 1, 5, 4))
    n_heads = 2 ** int(_randint(seed + 1, 1, 4, 1)[0])                      # 2, 4 or 8
    n_kv = {"grouped": n_heads // 2, "multi-query": 1, "none": None}[kind]
    return dict(n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv, d_model=n_heads * (d_head + 1),
                seq_len=seq_len + 2, batch=batch, dtype=_KV_DTYPES[dtype])


def _kv_key(a: dict) -> str:
    """The result's key, named by the call's drawn inputs (a failing case shows the call to reproduce)."""
    return (f"bytes_layers_{a['n_layers']}_heads_{a['n_heads']}_kv_heads_{a['n_kv_heads']}_d_model_{a['d_model']}_len_"
            f"{a['seq_len']}_batch_{a['batch']}_{str(a['dtype']).replace('torch.', '')}")   # <= 100 characters (the grader's limit)


def _p_kv(ns: ModuleType, key: str) -> Arrays:
    a = _kv_args(key)
    what = "kv_cache_bytes(" + ", ".join(f"{k}={v}" for k, v in a.items()) + ")"
    size = to_number(ns.kv_cache_bytes(a["n_layers"], a["n_heads"], a["n_kv_heads"], a["d_model"], a["seq_len"], a["batch"],
                                       a["dtype"]), what, kind="i")
    return {_kv_key(a): size}


def _e_kv(key: str) -> Arrays:
    """Measured: one layer of the course's MultiHeadAttention, in the cache's dtype, reads the prompt with a KVCache;
    the bytes of the cached keys and values, times the number of layers."""
    from course_lib.attention import KVCache, MultiHeadAttention

    a = _kv_args(key)
    layer = MultiHeadAttention(a["d_model"], a["n_heads"], n_kv_heads=a["n_kv_heads"]).to(a["dtype"])
    cache = KVCache()
    with torch.no_grad():
        layer(torch.zeros(a["batch"], a["seq_len"], a["d_model"], dtype=a["dtype"]), cache=cache)
    per_layer = cache.key.numel() * cache.key.element_size() + cache.value.numel() * cache.value.element_size()
    return {_kv_key(a): np.array(a["n_layers"] * per_layer, dtype=np.int64)}


_KV_HINT = ("bytes = 2 (keys and values) * n_layers * batch * n_kv_heads * seq_len * (d_model // n_heads) * bytes per "
            "number (torch.empty((), dtype=dtype).element_size(): 2 for float16/bfloat16, 4 for float32, 8 for float64). "
            "n_kv_heads=None means n_heads. Return a Python int (use // for d_model // n_heads: / gives a float).")
for _id in _KV_SPECS:
    _add(_id, "13.3", 2, partial(_p_kv, key=_id), expected=partial(_e_kv, _id), hint=_KV_HINT)

#: hand-worked: Llama 2 7B (32 layers, 32 heads, d_model 4096) and 70B (80 layers, 64 heads, 8 kv heads, d_model 8192)
_KV_LLAMA = [
    ((32, 32, None, 4096, 4096, 1, torch.float16), 2 * 32 * 32 * 4096 * 128 * 2),          # 2 GiB
    ((32, 32, 8, 4096, 4096, 1, torch.float16), 2 * 32 * 8 * 4096 * 128 * 2),             # 512 MiB
    ((80, 64, 8, 8192, 4096, 4, torch.bfloat16), 2 * 80 * 4 * 8 * 4096 * 128 * 2),        # 5 GiB
]


def _p_kv_llama(ns: ModuleType) -> Arrays:
    return {f"bytes_call_{i}": to_number(ns.kv_cache_bytes(*args), f"kv_cache_bytes{args}", kind="i")
            for i, (args, _) in enumerate(_KV_LLAMA)}


_add("13.3-hand-llama-2-sizes", "13.3", 2, _p_kv_llama,
     expected=lambda: {f"bytes_call_{i}": np.array(size, dtype=np.int64) for i, (_, size) in enumerate(_KV_LLAMA)},
     hint=_KV_HINT)


def _p_kv_rejects(ns: ModuleType) -> Arrays:
    f32 = torch.float32
    return _rejections({
        "n_kv_heads_not_dividing": (lambda: ns.kv_cache_bytes(2, 8, 3, 64, 10, 1, f32), ("n_kv_heads",)),
        "n_heads_not_dividing_d_model": (lambda: ns.kv_cache_bytes(2, 4, 2, 30, 10, 1, f32), ("d_model", "n_heads")),
        "seq_len_0": (lambda: ns.kv_cache_bytes(2, 4, 2, 32, 0, 1, f32), ("seq_len",)),
        "integer_dtype": (lambda: ns.kv_cache_bytes(2, 4, 2, 32, 10, 1, torch.int64), ("dtype",)),
    })


_add("13.3-rejects-bad-arguments", "13.3", 2, _p_kv_rejects,
     expected=lambda: {"raised_for_n_kv_heads_not_dividing": np.array(True),
                       "raised_for_n_heads_not_dividing_d_model": np.array(True), "raised_for_seq_len_0": np.array(True),
                       "raised_for_integer_dtype": np.array(True), "message_names_n_kv_heads": np.array(True),
                       "message_names_d_model_and_n_heads": np.array(True), "message_names_seq_len": np.array(True),
                       "message_names_dtype": np.array(True)},
     hint="Raise ValueError naming n_kv_heads when it does not divide n_heads, both d_model and n_heads when n_heads does "
          "not divide d_model, the size that is smaller than 1 (seq_len = 0) and dtype when it is not floating point "
          "(torch.int64).")


# --- 13.4: the parameters of today's block ---------------------------------------------------------------------
_COUNT_SPECS = {
    # id: (seed, n_kv_heads kind, tie_embeddings)
    "13.4-drawn-grouped-untied": (1341, "grouped", False),
    "13.4-drawn-grouped-tied": (1342, "grouped", True),
    "13.4-drawn-multi-query-untied": (1343, "multi-query", False),
    "13.4-drawn-edge-n-kv-heads-none-tied": (1344, "none", True),
}


def _count_args(key: str) -> tuple:
    seed, kind, tied = _COUNT_SPECS[key]
    vocab, n_layers, d_head, d_ff = (int(v) for v in _randint(seed, 1, 1000, 4))
    n_heads = 2 ** int(_randint(seed + 1, 1, 4, 1)[0])
    n_kv = {"grouped": n_heads // 2, "multi-query": 1, "none": None}[kind]
    return (20 + vocab, n_heads * 2 * (1 + d_head % 4), 1 + n_layers % 4, n_heads, n_kv, 8 + d_ff % 90, tied)  # even head width (RoPE)


_COUNT_NAMES = ("vocab", "d_model", "layers", "heads", "kv_heads", "d_ff", "tied")


def _count_key(args: tuple) -> str:
    """The result's key, named by the call's drawn inputs (a failing case shows the call to reproduce)."""
    return "parameters_" + "_".join(f"{k}_{v}" for k, v in zip(_COUNT_NAMES, args))   # <= 100 characters (the grader's limit)


def _p_count(ns: ModuleType, key: str) -> Arrays:
    args = _count_args(key)
    return {_count_key(args): to_number(ns.lm_parameter_count(*args), f"lm_parameter_count{args}", kind="i")}


def _e_count(key: str) -> Arrays:
    """Counted on the model the library builds: ``LanguageModel(LanguageModelConfig.modern(...)).num_parameters()``."""
    from course_lib.language_model import LanguageModel, LanguageModelConfig

    vocab, d_model, n_layers, n_heads, n_kv, d_ff, tied = _count_args(key)
    config = LanguageModelConfig.modern(vocab, d_model=d_model, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
                                        d_ff=d_ff, tie_embeddings=tied, max_len=8)
    return {_count_key((vocab, d_model, n_layers, n_heads, n_kv, d_ff, tied)): np.array(LanguageModel(config).num_parameters(),
                                                                                       dtype=np.int64)}


_COUNT_HINT = ("Embedding vocab_size * d_model; per layer: q and output projections d_model * d_model each, k and v d_model * "
               "(n_kv_heads * d_model // n_heads) each, SwiGLU 3 * d_model * d_ff, two RMSNorm scales of d_model; no biases; "
               "a final RMSNorm (d_model); the output projection vocab_size * d_model only when the embeddings are NOT tied. "
               "Return a Python int (use // for d_model // n_heads: / gives a float).")
for _id in _COUNT_SPECS:
    _add(_id, "13.4", 2, partial(_p_count, key=_id), expected=partial(_e_count, _id), hint=_COUNT_HINT)

#: hand-worked: Llama 2 7B and 70B (Touvron et al. 2023; the sizes of their released configurations)
_COUNT_LLAMA = [
    ((32000, 4096, 32, 32, None, 11008, False), 6_738_415_616),
    ((32000, 8192, 80, 64, 8, 28672, False), 68_976_648_192),
]


def _p_count_llama(ns: ModuleType) -> Arrays:
    return {f"parameters_call_{i}": to_number(ns.lm_parameter_count(*args), f"lm_parameter_count{args}", kind="i")
            for i, (args, _) in enumerate(_COUNT_LLAMA)}


_add("13.4-hand-llama-2-7b-and-70b", "13.4", 2, _p_count_llama,
     expected=lambda: {f"parameters_call_{i}": np.array(n, dtype=np.int64) for i, (_, n) in enumerate(_COUNT_LLAMA)},
     hint=_COUNT_HINT)


def _p_count_rejects(ns: ModuleType) -> Arrays:
    return _rejections({
        "n_kv_heads_not_dividing": (lambda: ns.lm_parameter_count(100, 64, 2, 8, 3, 128, True), ("n_kv_heads",)),
        "n_heads_not_dividing_d_model": (lambda: ns.lm_parameter_count(100, 60, 2, 8, 2, 128, True), ("d_model", "n_heads")),
        "n_layers_0": (lambda: ns.lm_parameter_count(100, 64, 0, 8, 2, 128, True), ("n_layers",)),
    })


_add("13.4-rejects-bad-sizes", "13.4", 1, _p_count_rejects,
     expected=lambda: {"raised_for_n_kv_heads_not_dividing": np.array(True),
                       "raised_for_n_heads_not_dividing_d_model": np.array(True), "raised_for_n_layers_0": np.array(True),
                       "message_names_n_kv_heads": np.array(True), "message_names_d_model_and_n_heads": np.array(True),
                       "message_names_n_layers": np.array(True)},
     hint="Raise ValueError naming n_kv_heads when it does not divide n_heads, both d_model and n_heads when n_heads does "
          "not divide d_model, and the size that is smaller than 1 (n_layers = 0).")
