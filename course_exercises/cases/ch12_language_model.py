"""The cases of chapter 12 - the decoder alone: a language model (exercises 12.1, 12.2, 12.3).

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

from .registry import Arrays, _add, _pair, _randint, _randn, to_array, to_number
from .shared import _rejections


# ===========================================================================
# Chapter 12 - the decoder alone: a language model
# ===========================================================================
# --- 12.1: next-token windows with a stride ---------------------------------------------------------------
_WINDOWS_SPECS = {
    # id: (seed, (stream length low, high), (seq_len low, high), (stride low, high)); "hand" = the worked example
    "12.1-hand-ten-ids-seq-len-3-stride-3": "hand",
    "12.1-drawn-stride-equals-seq-len": (1201, (20, 40), (3, 7), None),
    "12.1-drawn-overlapping-stride-1": (1202, (8, 16), (2, 6), (1, 2)),
    "12.1-drawn-stride-below-seq-len": (1203, (25, 45), (4, 9), (2, 4)),
    "12.1-drawn-stride-above-seq-len-skips-ids": (1204, (30, 50), (2, 5), (6, 9)),
    "12.1-drawn-edge-exactly-one-window": (1205, None, (3, 8), (1, 5)),
}


def _windows_args(key: str) -> tuple[torch.Tensor, int, int]:
    spec = _WINDOWS_SPECS[key]
    if spec == "hand":
        return torch.arange(10, 20), 3, 3
    seed, length_range, seq_range, stride_range = spec
    seq_len = int(_randint(seed, *seq_range, 1)[0])
    stride = seq_len if stride_range is None else int(_randint(seed + 1, *stride_range, 1)[0])
    length = seq_len + 1 if length_range is None else int(_randint(seed + 2, *length_range, 1)[0])
    return _randint(seed + 3, 0, 1000, length), seq_len, stride


def _p_windows(ns: ModuleType, key: str) -> Arrays:
    ids, seq_len, stride = _windows_args(key)
    what = f"next_token_windows(ids of length {len(ids)}, seq_len={seq_len}, stride={stride})"
    inputs, targets = _pair(ns.next_token_windows(ids, seq_len, stride), what, ("inputs", "targets"))
    return {"inputs": to_array(inputs, f"{what}[0] (inputs)", kind="i"),
            "targets": to_array(targets, f"{what}[1] (targets)", kind="i")}


def _e_windows(key: str) -> Arrays:
    """Plain Python lists: every start s with s + seq_len + 1 <= len(ids), stepping by stride."""
    ids, seq_len, stride = _windows_args(key)
    stream = ids.tolist()
    inputs, targets, s = [], [], 0
    while s + seq_len + 1 <= len(stream):
        inputs.append(stream[s:s + seq_len])
        targets.append(stream[s + 1:s + seq_len + 1])
        s += stride
    return {"inputs": np.array(inputs, dtype=np.int64).reshape(-1, seq_len),
            "targets": np.array(targets, dtype=np.int64).reshape(-1, seq_len)}


_WINDOWS_HINT = ("Windows start at 0, stride, 2 * stride, ... while start + seq_len + 1 <= len(ids) (range(0, len(ids) - seq_len, "
                 "stride)). inputs[w] = ids[s : s + seq_len], targets[w] = ids[s + 1 : s + seq_len + 1]: the targets are the "
                 "inputs moved one id to the right. Return the pair (inputs, targets), each (n_windows, seq_len).")
for _id in _WINDOWS_SPECS:
    _add(_id, "12.1", 2, partial(_p_windows, key=_id), expected=partial(_e_windows, _id), hint=_WINDOWS_HINT)


def _p_windows_rejects(ns: ModuleType) -> Arrays:
    ids = torch.arange(12)
    return _rejections({
        "2d_ids": (lambda: ns.next_token_windows(ids.reshape(3, 4), 2, 1), ("ids",)),
        "too_short_ids": (lambda: ns.next_token_windows(torch.arange(4), 4, 1), ("ids",)),
        "seq_len_0": (lambda: ns.next_token_windows(ids, 0, 1), ("seq_len",)),
        "stride_0": (lambda: ns.next_token_windows(ids, 3, 0), ("stride",)),
    })


_add("12.1-rejects-bad-arguments", "12.1", 2, _p_windows_rejects,
     expected=lambda: {"raised_for_2d_ids": np.array(True), "raised_for_too_short_ids": np.array(True),
                       "raised_for_seq_len_0": np.array(True), "raised_for_stride_0": np.array(True),
                       "message_names_ids": np.array(True), "message_names_seq_len": np.array(True),
                       "message_names_stride": np.array(True)},
     hint="Raise ValueError naming the argument: ids not 1-D or shorter than seq_len + 1 (not even one window); seq_len or "
          "stride smaller than 1.")


# --- 12.2: perplexity over a padded batch -----------------------------------------------------------------
_PPL_SPECS = {
    # id: (seed, (batch low, high), (seq_len low, high), vocab, logit scale, padded lengths?, ignore_index)
    # the sizes are drawn so that the counted tokens range from a few to a few hundred; ignore_index "drawn": a
    # pad id drawn from the vocabulary (a real class: counting its positions changes the value)
    "12.2-drawn-padded-batch": (1221, (2, 6), (5, 40), 11, 2.0, True, -100),
    "12.2-drawn-no-padding": (1222, (2, 8), (20, 60), 6, 1.0, False, -100),
    "12.2-drawn-rows-of-very-different-lengths": (1223, (3, 7), (20, 50), 9, 3.0, "uneven", -100),
    "12.2-drawn-one-confidently-wrong-token-needs-log-softmax": (1224, (2, 4), (4, 12), 8, 1.0, "wrong", -100),
    "12.2-drawn-padding-marked-by-a-pad-id-as-ignore-index": (1225, (2, 6), (5, 40), 10, 2.0, True, "drawn"),
}
_IGNORE = -100


def _ppl_inputs(key: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    seed, batch_range, len_range, vocab, scale, padded, ignore = _PPL_SPECS[key]
    batch, seq_len = int(_randint(seed + 3, *batch_range, 1)[0]), int(_randint(seed + 4, *len_range, 1)[0])
    logits = _randn(seed, batch, seq_len, vocab, scale=scale)
    targets = _randint(seed + 1, 0, vocab, batch, seq_len)
    if ignore == "drawn":        # a pad id among the classes: no real target equals it
        ignore = int(_randint(seed + 5, 0, vocab, 1)[0])
        targets[targets == ignore] = (ignore + 1) % vocab
    if padded == "wrong":        # 120 nats on a wrong class at one position: softmax gives its target exactly 0 in float32
        logits[0, 0, (int(targets[0, 0]) + 1) % vocab] += 120.0
    if padded == "uneven":       # one full row, the others 1 to 3 tokens: token weighting differs from row weighting
        lengths = [seq_len] + _randint(seed + 2, 1, 4, batch - 1).tolist()
    elif padded is True:         # the last row always ends in padding
        lengths = _randint(seed + 2, 1, seq_len + 1, batch).tolist()
        lengths[-1] = min(lengths[-1], seq_len - 1)
    else:
        lengths = [seq_len] * batch
    for row, n in enumerate(lengths):
        targets[row, n:] = ignore
    return logits, targets, ignore


def _p_ppl(ns: ModuleType, key: str) -> Arrays:
    logits, targets, ignore = _ppl_inputs(key)
    value = ns.perplexity(logits, targets, ignore)
    return {"perplexity": to_number(value, f"perplexity(logits of shape {tuple(logits.shape)}, targets, "
                                           f"ignore_index={ignore})", kind="f")}


def _e_ppl(key: str) -> Arrays:
    logits, targets, ignore = _ppl_inputs(key)
    loss = F.cross_entropy(logits.double().transpose(1, 2), targets, ignore_index=ignore)   # mean over counted tokens
    return {"perplexity": np.array(math.exp(float(loss)))}


_PPL_HINT = ("perplexity = exp(mean cross-entropy in nats over the counted positions of the WHOLE batch), each token weighted "
             "equally (not the mean of per-row perplexities, not counting the positions whose target equals ignore_index - "
             "the argument, which is not always -100). Use log_softmax (or F.cross_entropy with ignore_index=ignore_index): "
             "log(softmax(...)) underflows to -inf for confident logits. Return one number.")
for _id in _PPL_SPECS:
    _add(_id, "12.2", 2, partial(_p_ppl, key=_id), expected=partial(_e_ppl, _id), hint=_PPL_HINT, rtol=1e-4, atol=1e-6)


#: hand-worked: uniform logits over a vocabulary of 7 give perplexity 7 (padding ignored, ignore_index 0 here)
def _p_ppl_uniform(ns: ModuleType) -> Arrays:
    targets = torch.tensor([[3, 5, 1, 0], [6, 0, 0, 0]])
    return {"perplexity": to_number(ns.perplexity(torch.zeros(2, 4, 7), targets, 0),
                                    "perplexity(uniform logits, vocab 7, ignore_index=0)", kind="f")}


_add("12.2-hand-uniform-logits-give-the-vocabulary-size", "12.2", 1, _p_ppl_uniform,
     expected=lambda: {"perplexity": np.array(7.0)}, hint=_PPL_HINT + " (Here ignore_index is 0, not -100.)",
     rtol=1e-5, atol=1e-6)


def _p_ppl_rejects(ns: ModuleType) -> Arrays:
    logits, targets = torch.zeros(2, 3, 5), torch.ones(2, 3, dtype=torch.long)
    return _rejections({
        "2d_logits": (lambda: ns.perplexity(logits[0], targets[0]), ("logits",)),
        "targets_of_another_shape": (lambda: ns.perplexity(logits, targets[:, :2]), ("targets",)),
        "nothing_counted": (lambda: ns.perplexity(logits, torch.full((2, 3), -100)), ("ignore_index",)),
    })


_add("12.2-rejects-bad-arguments", "12.2", 2, _p_ppl_rejects,
     expected=lambda: {"raised_for_2d_logits": np.array(True), "raised_for_targets_of_another_shape": np.array(True),
                       "raised_for_nothing_counted": np.array(True), "message_names_logits": np.array(True),
                       "message_names_targets": np.array(True), "message_names_ignore_index": np.array(True)},
     hint="Raise ValueError naming logits when it is not 3-D (batch, seq_len, vocab), naming targets when its shape is not "
          "logits.shape[:2], and naming ignore_index when every target equals it (nothing to average).")


# --- 12.3: the targets of a decoder-only translator ----------------------------------------------------------
_SEP, _PAD, _EOS = 3, 0, 2
_TLM_SPECS = {
    # id: (seed, batch, source length range, target length range, extra padding, sep_id, pad_id, ignore_index)
    "12.3-drawn-padded-batch": (1231, 3, (2, 6), (2, 6), 2, _SEP, _PAD, -100),
    "12.3-drawn-other-ids-and-ignore-index": (1232, 4, (1, 5), (1, 7), 1, 1, 4, -1),
    "12.3-drawn-one-pair-without-padding": (1233, 1, (3, 8), (3, 8), 0, _SEP, _PAD, -100),
    "12.3-drawn-sep-first-and-sep-last-but-one": (1234, 2, None, None, 0, _SEP, _PAD, -100),
}


def _tlm_rows(key: str) -> list[list[int]]:
    seed, batch, src_range, tgt_range, extra, sep_id, pad_id, _ = _TLM_SPECS[key]
    words = _randint(seed, 5, 40, batch, 32).tolist()       # ids 5..39: never <sep>, <pad> or <eos>
    if src_range is None:                                    # row 0: no source (<sep> first); row 1: no target (sep, eos)
        n_src, n_tgt = [0, int(_randint(seed + 1, 2, 6, 1)[0])], [int(_randint(seed + 2, 2, 6, 1)[0]), 0]
    else:
        n_src = _randint(seed + 1, *src_range, batch).tolist()
        n_tgt = _randint(seed + 2, *tgt_range, batch).tolist()
    rows = [w[:s] + [sep_id] + w[s:s + t] + [_EOS] for w, s, t in zip(words, n_src, n_tgt)]
    width = max(len(r) for r in rows) + extra
    return [r + [pad_id] * (width - len(r)) for r in rows]


def _p_tlm(ns: ModuleType, key: str) -> Arrays:
    _, _, _, _, _, sep_id, pad_id, ignore = _TLM_SPECS[key]
    tokens = torch.tensor(_tlm_rows(key), dtype=torch.long)
    before = tokens.clone()
    what = f"translation_lm_targets(tokens of shape {tuple(tokens.shape)}, sep_id={sep_id}, pad_id={pad_id}, ignore_index={ignore})"
    inputs, targets = _pair(ns.translation_lm_targets(tokens, sep_id, pad_id, ignore), what, ("inputs", "targets"))
    return {"inputs": to_array(inputs, f"{what}[0] (inputs)", kind="i"),
            "targets": to_array(targets, f"{what}[1] (targets)", kind="i"),
            "tokens_unchanged": np.array(bool(torch.equal(tokens, before)))}


def _e_tlm(key: str) -> Arrays:
    """Position by position: target t is tokens[t + 1]; counted when t + 1 is after the row's <sep> and it is no pad."""
    _, _, _, _, _, sep_id, pad_id, ignore = _TLM_SPECS[key]
    rows = _tlm_rows(key)
    inputs, targets = [], []
    for row in rows:
        sep_at = row.index(sep_id)
        inputs.append(row[:-1])
        targets.append([tok if (t + 1 > sep_at and tok != pad_id) else ignore for t, tok in enumerate(row[1:])])
    return {"inputs": np.array(inputs, dtype=np.int64), "targets": np.array(targets, dtype=np.int64),
            "tokens_unchanged": np.array(True)}


_TLM_HINT = ("inputs = tokens[:, :-1], targets = tokens[:, 1:]. Target t sits at position t + 1 of tokens: keep it only when "
             "t + 1 is AFTER the row's <sep> (the first counted target is the first Chinese token, predicted at <sep>; <sep> "
             "itself and the English tokens are not counted) and it is not pad_id; put ignore_index everywhere else. Do not "
             "modify tokens (clone before masked_fill_).")
for _id in _TLM_SPECS:
    _add(_id, "12.3", 2, partial(_p_tlm, key=_id), expected=partial(_e_tlm, _id), hint=_TLM_HINT)


def _p_tlm_hand(ns: ModuleType) -> Arrays:
    tokens = torch.tensor([[7, 8, 9, 3, 21, 22, 2, 0, 0]])
    inputs, targets = _pair(ns.translation_lm_targets(tokens, 3, 0), "translation_lm_targets(the worked example, 3, 0)",
                            ("inputs", "targets"))
    return {"inputs": to_array(inputs, "inputs", kind="i"), "targets": to_array(targets, "targets", kind="i")}


_add("12.3-hand-worked-example", "12.3", 1, _p_tlm_hand,
     expected=lambda: {"inputs": np.array([[7, 8, 9, 3, 21, 22, 2, 0]]),
                       "targets": np.array([[-100, -100, -100, 21, 22, 2, -100, -100]])},
     hint=_TLM_HINT)


def _p_tlm_rejects(ns: ModuleType) -> Arrays:
    return _rejections({
        "1d_tokens": (lambda: ns.translation_lm_targets(torch.tensor([7, 3, 21, 2]), 3, 0), ("tokens",)),
        "row_without_sep": (lambda: ns.translation_lm_targets(torch.tensor([[7, 3, 21, 2], [7, 8, 21, 2]]), 3, 0),
                            ("sep_id",)),
        "row_with_two_seps": (lambda: ns.translation_lm_targets(torch.tensor([[7, 3, 21, 2], [3, 8, 3, 2]]), 3, 0),
                              ("sep_id",)),
    })


_add("12.3-rejects-bad-tokens", "12.3", 2, _p_tlm_rejects,
     expected=lambda: {"raised_for_1d_tokens": np.array(True), "raised_for_row_without_sep": np.array(True),
                       "raised_for_row_with_two_seps": np.array(True), "message_names_tokens": np.array(True),
                       "message_names_sep_id": np.array(True)},
     hint="Raise ValueError naming tokens when it is not 2-D (batch, length), and naming sep_id when a row holds no sep_id "
          "or more than one.")
