"""The cases of chapter 8 - masks (exercises 8.1, 8.2, 8.3, 8.4).

A part of the cases registry (``registry.py``): loaded after it, into the same module
(``course_exercise_cases``), never imported on its own; the relative imports below name where
each helper lives and are left out when the parts are put together (:mod:`course_exercises.casefile`).
"""

from __future__ import annotations

from functools import partial
from types import ModuleType

import numpy as np
import torch

from .registry import Arrays, _STANDIN_CAUSAL_MASK, _add, _raises_value_error, _randint, to_array

# ===========================================================================
# Chapter 8 - masks
# ===========================================================================
def _pad_reference(lengths: np.ndarray, seq_len: int) -> np.ndarray:
    """Enumeration: entry [b, 0, 0, j] is True iff j < lengths[b]."""
    out = np.zeros((len(lengths), 1, 1, seq_len), dtype=bool)
    for b, n in enumerate(lengths):
        for j in range(seq_len):
            out[b, 0, 0, j] = j < n
    return out


_PAD_LENGTHS = {
    "8.1-lengths-3-5-2": ([3, 5, 2], 5),
    "8.1-longer-than-every-sentence": ([1, 4], 7),
    "8.1-empty-and-full": ([0, 3, 6, 1], 6),
}


def _p_padding(ns: ModuleType, lengths, seq_len) -> Arrays:
    mask = ns.padding_mask(torch.as_tensor(lengths), seq_len)
    return {"mask": to_array(mask, "padding_mask(lengths, seq_len)", kind="b")}


_PAD_HINT = ("Entry [b, 0, 0, j] is True (may attend: a real token) iff j < lengths[b] - compare torch.arange(seq_len) with "
             "lengths[:, None] - and the result has shape (batch, 1, 1, seq_len), dtype torch.bool.")
for _id, (_lengths, _seq_len) in _PAD_LENGTHS.items():
    _add(_id, "8.1", 1, partial(_p_padding, lengths=_lengths, seq_len=_seq_len),
         expected=partial(lambda n, s: {"mask": _pad_reference(np.array(n), s)}, _lengths, _seq_len), hint=_PAD_HINT)


def _p_padding_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_2d_lengths": _raises_value_error(lambda: ns.padding_mask(torch.tensor([[3, 2]]), 4)),
        "raised_for_length_above_seq_len": _raises_value_error(lambda: ns.padding_mask(torch.tensor([3, 5]), 4)),
        "raised_for_negative_length": _raises_value_error(lambda: ns.padding_mask(torch.tensor([3, -1]), 4)),
    }


_add("8.1-rejects-bad-lengths", "8.1", 1, _p_padding_rejects,
     expected=lambda: {"raised_for_2d_lengths": np.array(True), "raised_for_length_above_seq_len": np.array(True),
                       "raised_for_negative_length": np.array(True)},
     hint="Raise ValueError naming lengths when it is not 1-D (batch,) or when a length is < 0 or > seq_len.")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_lengths() -> tuple[torch.Tensor, int]:
    return _randint(811, 0, 10, 6), 9


def _p_padding_drawn(ns: ModuleType) -> Arrays:
    lengths, seq_len = _drawn_lengths()
    return {"mask": to_array(ns.padding_mask(lengths, seq_len), "padding_mask(lengths, seq_len)", kind="b")}


_add("8.1-drawn-lengths", "8.1", 2, _p_padding_drawn, expected=lambda: {"mask": _pad_reference(_drawn_lengths()[0].numpy(), 9)}, hint=_PAD_HINT)


def _causal_reference(q_len: int, k_len: int) -> np.ndarray:
    """Enumeration: the queries are the LAST q_len of k_len positions; query i is position k_len - q_len + i."""
    out = np.zeros((1, 1, q_len, k_len), dtype=bool)
    for i in range(q_len):
        for j in range(k_len):
            out[0, 0, i, j] = j <= k_len - q_len + i
    return out


def _p_causal(ns: ModuleType, q_len, k_len) -> Arrays:
    mask = ns.causal_mask(q_len) if k_len is None else ns.causal_mask(q_len, k_len)
    return {"mask": to_array(mask, f"causal_mask({q_len}" + ("" if k_len is None else f", {k_len}") + ")", kind="b")}


_CAUSAL_HINT = ("The queries are the LAST q_len positions of the k_len keys: query i sits at position k_len - q_len + i, so "
                "entry [0, 0, i, j] is True iff j <= i + (k_len - q_len) (with k_len = None: k_len = q_len, the lower "
                "triangle). torch.tril has a `diagonal` argument. Shape (1, 1, q_len, k_len), dtype torch.bool.")
for _q, _k, _points in ((1, None, 1), (4, None, 1), (1, 5, 2), (3, 7, 3), (2, 2, 1)):
    _add(f"8.2-q-{_q}-k-{'none' if _k is None else _k}", "8.2", _points, partial(_p_causal, q_len=_q, k_len=_k),
         expected=partial(lambda q, k: {"mask": _causal_reference(q, q if k is None else k)}, _q, _k), hint=_CAUSAL_HINT)


def _p_causal_rejects(ns: ModuleType) -> Arrays:
    return {"raised_for_q_len_0": _raises_value_error(lambda: ns.causal_mask(0)),
            "raised_for_k_len_below_q_len": _raises_value_error(lambda: ns.causal_mask(4, 3))}


_add("8.2-rejects-bad-sizes", "8.2", 1, _p_causal_rejects,
     expected=lambda: {"raised_for_q_len_0": np.array(True), "raised_for_k_len_below_q_len": np.array(True)},
     hint="Raise ValueError naming q_len when it is smaller than 1, and naming k_len when k_len < q_len.")


# Inputs drawn per grading run (the grader salts the seed; see Draws). The sizes are drawn above every size of the
# fixed cases (at most 7), so a table of answers for the fixed inputs never answers a drawn case by chance.
def _drawn_q_k() -> tuple[int, int]:
    q_len = int(_randint(821, 8, 14))
    return q_len, q_len + int(_randint(822, 1, 10))


_add("8.2-drawn-q-k", "8.2", 2, lambda ns: _p_causal(ns, *_drawn_q_k()),
     expected=lambda: {"mask": _causal_reference(*_drawn_q_k())}, hint=_CAUSAL_HINT)
_add("8.2-drawn-square", "8.2", 1, lambda ns: _p_causal(ns, _drawn_q_k()[1], None),
     expected=lambda: {"mask": _causal_reference(_drawn_q_k()[1], _drawn_q_k()[1])}, hint=_CAUSAL_HINT)


def _dec_reference(tgt: np.ndarray, pad_id: int, q_len: int | None) -> np.ndarray:
    """Enumeration: [b, 0, i, j] = (tgt[b, j] != pad_id) and j <= L - q_len + i."""
    batch, length = tgt.shape
    q = length if q_len is None else q_len
    out = np.zeros((batch, 1, q, length), dtype=bool)
    for b in range(batch):
        for i in range(q):
            for j in range(length):
                out[b, 0, i, j] = bool(tgt[b, j] != pad_id) and j <= length - q + i
    return out


_DEC_TOKENS = {
    "8.3-pad-0": ([[1, 5, 6, 2, 0, 0], [1, 7, 2, 0, 0, 0]], 0, None, 1),
    "8.3-batch-3-pad-id-5": ([[1, 6, 7, 8, 2, 5, 5], [1, 2, 5, 5, 5, 5, 5], [1, 9, 9, 9, 9, 9, 2]], 5, None, 1),
    "8.3-last-query-only": ([[1, 5, 6, 2, 0, 0], [1, 7, 8, 9, 4, 3]], 0, 1, 2),
    "8.3-last-3-queries-pad-id-9": ([[1, 4, 4, 2, 9, 9, 9], [9, 9, 1, 6, 6, 6, 2]], 9, 3, 2),
}


def _p_dec_mask(ns: ModuleType, tgt, pad_id, q_len) -> Arrays:
    t = torch.as_tensor(tgt)
    mask = ns.decoder_self_attention_mask(t, pad_id) if q_len is None else ns.decoder_self_attention_mask(t, pad_id, q_len)
    return {"mask": to_array(mask, "decoder_self_attention_mask(tgt, pad_id, q_len)", kind="b")}


_DEC_HINT = ("Combine both rules with a logical AND: key j is a real token (tgt[b, j] != pad_id, over ALL tgt_len keys) and "
             "j <= i + (tgt_len - q_len) - the queries are the last q_len positions, as causal_mask(q_len, tgt_len) says. "
             "Shape (batch, 1, q_len, tgt_len).")
for _id, (_tgt, _pad, _q, _points) in _DEC_TOKENS.items():
    _add(_id, "8.3", _points, partial(_p_dec_mask, tgt=_tgt, pad_id=_pad, q_len=_q),
         expected=partial(lambda t, p, q: {"mask": _dec_reference(np.array(t), p, q)}, _tgt, _pad, _q), hint=_DEC_HINT,
         standins={"causal_mask": _STANDIN_CAUSAL_MASK})


def _p_dec_mask_rejects(ns: ModuleType) -> Arrays:
    tgt = torch.tensor([[1, 4, 2, 0]])
    return {"raised_for_1d_tgt": _raises_value_error(lambda: ns.decoder_self_attention_mask(torch.tensor([1, 4, 2]), 0)),
            "raised_for_q_len_above_tgt_len": _raises_value_error(lambda: ns.decoder_self_attention_mask(tgt, 0, 5))}


_add("8.3-rejects-bad-shapes", "8.3", 1, _p_dec_mask_rejects,
     expected=lambda: {"raised_for_1d_tgt": np.array(True), "raised_for_q_len_above_tgt_len": np.array(True)},
     hint="Raise ValueError naming tgt when it is not 2-D, and naming q_len when it is < 1 or > tgt_len.",
     standins={"causal_mask": _STANDIN_CAUSAL_MASK})


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_dec() -> tuple[torch.Tensor, int, int]:
    return _randint(831, 0, 4, 3, 8), int(_randint(832, 0, 4)), int(_randint(833, 1, 8))


def _p_dec_mask_drawn(ns: ModuleType) -> Arrays:
    tgt, pad_id, q_len = _drawn_dec()
    return {"mask": to_array(ns.decoder_self_attention_mask(tgt, pad_id, q_len), "decoder_self_attention_mask(tgt, pad_id, q_len)",
                             kind="b")}


def _e_dec_mask_drawn() -> Arrays:
    tgt, pad_id, q_len = _drawn_dec()
    return {"mask": _dec_reference(tgt.numpy(), pad_id, q_len)}


_add("8.3-drawn-tokens", "8.3", 2, _p_dec_mask_drawn, expected=_e_dec_mask_drawn, hint=_DEC_HINT,
     standins={"causal_mask": _STANDIN_CAUSAL_MASK})


def _drawn_right_padded() -> torch.Tensor:
    """(4, 7) targets padded on the right only (pad_id 0), the common case: a drawn length per row."""
    lengths = _randint(834, 1, 8, 4)
    tokens = _randint(835, 1, 10, 4, 7)
    return torch.where(torch.arange(7)[None, :] < lengths[:, None], tokens, 0)


def _p_dec_mask_right(ns: ModuleType) -> Arrays:
    mask = ns.decoder_self_attention_mask(_drawn_right_padded(), 0)
    return {"mask": to_array(mask, "decoder_self_attention_mask(tgt, 0)", kind="b")}


# right padding only: an answer that gets the common case right but not left padding keeps these points
_add("8.3-drawn-right-padded", "8.3", 2, _p_dec_mask_right,
     expected=lambda: {"mask": _dec_reference(_drawn_right_padded().numpy(), 0, None)}, hint=_DEC_HINT,
     standins={"causal_mask": _STANDIN_CAUSAL_MASK})


def _prefix_reference(tokens: np.ndarray, prefix_lengths: np.ndarray, pad_id: int) -> np.ndarray:
    """Enumeration: [b, 0, i, j] = (tokens[b, j] != pad_id) and (j < prefix_lengths[b] or j <= i)."""
    batch, length = tokens.shape
    out = np.zeros((batch, 1, length, length), dtype=bool)
    for b in range(batch):
        for i in range(length):
            for j in range(length):
                out[b, 0, i, j] = bool(tokens[b, j] != pad_id) and (j < prefix_lengths[b] or j <= i)
    return out


_PREFIX = {
    "8.4-hand-two-sentences": ([[4, 5, 6, 7, 8, 0], [4, 9, 3, 0, 0, 0]], [3, 1], 0, 2),
    "8.4-prefix-0-is-causal": ([[3, 4, 5, 2, 2]], [0], 2, 1),
    "8.4-whole-sentence-prefix": ([[3, 4, 5, 1, 1], [6, 7, 8, 9, 6]], [3, 5], 1, 1),
    "8.4-prefix-covers-padding": ([[5, 6, 0, 0], [5, 6, 7, 8]], [4, 2], 0, 1),
}


def _p_prefix(ns: ModuleType, tokens, prefix_lengths, pad_id) -> Arrays:
    mask = ns.prefix_lm_mask(torch.as_tensor(tokens), torch.as_tensor(prefix_lengths), pad_id)
    return {"mask": to_array(mask, "prefix_lm_mask(tokens, prefix_lengths, pad_id)", kind="b")}


_PREFIX_HINT = ("Entry [b, 0, i, j] is True iff key j is a real token (tokens[b, j] != pad_id) AND (j < prefix_lengths[b] OR "
                "j <= i): every query sees the whole prefix of its own sentence (bidirectional), and the positions after "
                "it causally. Each sentence has its own prefix length: compare torch.arange(L) with prefix_lengths[:, None]. "
                "Shape (batch, 1, L, L), dtype torch.bool.")
for _id, (_tokens, _prefix, _pad, _points) in _PREFIX.items():
    _add(_id, "8.4", _points, partial(_p_prefix, tokens=_tokens, prefix_lengths=_prefix, pad_id=_pad),
         expected=partial(lambda t, p, pad: {"mask": _prefix_reference(np.array(t), np.array(p), pad)}, _tokens, _prefix, _pad),
         hint=_PREFIX_HINT)


def _p_prefix_rejects(ns: ModuleType) -> Arrays:
    tokens = torch.tensor([[4, 5, 6, 0], [4, 5, 0, 0]])
    return {
        "raised_for_prefix_of_wrong_batch": _raises_value_error(lambda: ns.prefix_lm_mask(tokens, torch.tensor([2]), 0)),
        "raised_for_prefix_above_seq_len": _raises_value_error(lambda: ns.prefix_lm_mask(tokens, torch.tensor([2, 5]), 0)),
        "raised_for_negative_prefix": _raises_value_error(lambda: ns.prefix_lm_mask(tokens, torch.tensor([-1, 2]), 0)),
    }


_add("8.4-rejects-bad-prefix-lengths", "8.4", 1, _p_prefix_rejects,
     expected=lambda: {"raised_for_prefix_of_wrong_batch": np.array(True), "raised_for_prefix_above_seq_len": np.array(True),
                       "raised_for_negative_prefix": np.array(True)},
     hint="Raise ValueError naming prefix_lengths unless it has shape (batch,) with every value in [0, seq_len].")


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_prefix() -> tuple[torch.Tensor, torch.Tensor, int]:
    return _randint(841, 0, 4, 4, 7), _randint(842, 0, 8, 4), int(_randint(843, 0, 4))


def _p_prefix_drawn(ns: ModuleType) -> Arrays:
    tokens, prefix, pad_id = _drawn_prefix()
    return {"mask": to_array(ns.prefix_lm_mask(tokens, prefix, pad_id), "prefix_lm_mask(tokens, prefix_lengths, pad_id)", kind="b")}


def _e_prefix_drawn() -> Arrays:
    tokens, prefix, pad_id = _drawn_prefix()
    return {"mask": _prefix_reference(tokens.numpy(), prefix.numpy(), pad_id)}


_add("8.4-drawn-tokens", "8.4", 2, _p_prefix_drawn, expected=_e_prefix_drawn, hint=_PREFIX_HINT)
