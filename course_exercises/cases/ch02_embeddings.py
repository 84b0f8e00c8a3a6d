"""The cases of chapter 2 - embeddings (exercises 2.1, 2.2, 2.3).

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

from .registry import Arrays, _add, _f64, _raises_value_error, _randint, _randn, to_array
from .shared import _pe_closed_form, _per_call, _rejections

# ===========================================================================
# Chapter 2 - embeddings
# ===========================================================================
def _emb_inputs(seed: int, token_shape: tuple[int, ...], vocab: int, d_model: int):
    return _randint(seed, 0, vocab, *token_shape), _randn(seed + 1, vocab, d_model)


def _padded_emb_inputs(seed: int, token_shape: tuple[int, ...], vocab: int, d_model: int, pad: int):
    tokens, weight = _emb_inputs(seed, token_shape, vocab, d_model)
    tokens[..., -2:] = pad  # the last two positions of every sequence are padding; the weight's pad row is not zero
    return tokens, weight


def _p_scaled_embedding(ns: ModuleType, args) -> Arrays:
    seed, token_shape, vocab, d_model = args
    tokens, weight = _emb_inputs(seed, token_shape, vocab, d_model)
    return {"embedded": to_array(ns.scaled_embedding(tokens, weight), "scaled_embedding(tokens, weight)", kind="f")}


def _e_scaled_embedding(seed, token_shape, vocab, d_model) -> Arrays:
    tokens, weight = _emb_inputs(seed, token_shape, vocab, d_model)
    return {"embedded": _f64(F.embedding(tokens, weight.double()) * math.sqrt(d_model))}


_EMB_HINT = "Look up the rows of `weight` (weight[tokens]) and multiply by math.sqrt(d_model), where d_model = weight.shape[1] (paper section 3.4)."
for _id, _args in {
    "2.1-batch-2x5": (201, (2, 5), 11, 8),
    "2.1-batch-3x7-wide": (202, (3, 7), 50, 64),
    "2.1-single-token": (203, (1, 1), 3, 1),
    "2.1-three-dim-tokens": (204, (2, 3, 4), 9, 6),
}.items():
    _add(_id, "2.1", 1, partial(_p_scaled_embedding, args=_args),
         expected=partial(_e_scaled_embedding, *_args), hint=_EMB_HINT)


def _p_scaled_embedding_pad(ns: ModuleType, args) -> Arrays:
    seed, token_shape, vocab, d_model, pad = args
    tokens, weight = _padded_emb_inputs(seed, token_shape, vocab, d_model, pad)
    return {"embedded": to_array(ns.scaled_embedding(tokens, weight, padding_idx=pad),
                                 f"scaled_embedding(tokens, weight, padding_idx={pad})", kind="f")}


def _e_scaled_embedding_pad(seed, token_shape, vocab, d_model, pad) -> Arrays:
    tokens, weight = _padded_emb_inputs(seed, token_shape, vocab, d_model, pad)
    # F.embedding's own padding_idx only stops the gradient; the output row is zeroed here
    keep = (tokens != pad).double()[..., None]
    return {"embedded": _f64(F.embedding(tokens, weight.double()) * math.sqrt(d_model) * keep)}


_EMB_PAD_HINT = ("Positions holding padding_idx must come out as zero vectors, whatever the weight's row padding_idx holds "
                 "(F.embedding(..., padding_idx=...) only blocks the gradient); other positions are weight[tokens] * sqrt(d_model).")
for _id, _args in {
    "2.1-padding-idx-0": (206, (3, 6), 12, 8, 0),
    "2.1-padding-idx-last-id": (207, (2, 2, 5), 7, 4, 6),
}.items():
    _add(_id, "2.1", 2, partial(_p_scaled_embedding_pad, args=_args),
         expected=partial(_e_scaled_embedding_pad, *_args), hint=_EMB_PAD_HINT)


def _p_embedding_rejects(ns: ModuleType) -> Arrays:
    weight = _randn(205, 5, 4)
    return _rejections({
        "id_equal_to_vocab_size": (lambda: ns.scaled_embedding(torch.tensor([[0, 5]]), weight), ("tokens",)),
        "negative_id": (lambda: ns.scaled_embedding(torch.tensor([[-1, 2]]), weight), ("tokens",)),
        "float_tokens": (lambda: ns.scaled_embedding(torch.tensor([[0.0, 1.0]]), weight), ("tokens",)),
        "bool_tokens": (lambda: ns.scaled_embedding(torch.tensor([[True, False]]), weight), ("tokens",)),
        "padding_idx_5": (lambda: ns.scaled_embedding(torch.tensor([[0, 1]]), weight, padding_idx=5), ("padding_idx",)),
    })


_add("2.1-rejects-bad-tokens", "2.1", 1, _p_embedding_rejects,
     expected=lambda: {k: np.array(True) for k in ("raised_for_id_equal_to_vocab_size", "raised_for_negative_id", "raised_for_float_tokens",
                                                   "raised_for_bool_tokens", "raised_for_padding_idx_5",
                                                   "message_names_tokens", "message_names_padding_idx")},
     hint="Raise ValueError (naming `tokens`) when tokens is not an integer tensor (float or bool) or an id lies outside "
          "[0, vocab_size), and (naming `padding_idx`) when padding_idx is not None and outside [0, vocab_size).")


def _p_tied(ns: ModuleType, args) -> Arrays:
    seed, batch, seq_len, vocab, d_model = args
    hidden, weight = _randn(seed, batch, seq_len, d_model), _randn(seed + 1, vocab, d_model)
    return {"logits": to_array(ns.tied_output_logits(hidden, weight), "tied_output_logits(hidden, weight)", kind="f")}


def _e_tied(seed, batch, seq_len, vocab, d_model) -> Arrays:
    hidden, weight = _randn(seed, batch, seq_len, d_model), _randn(seed + 1, vocab, d_model)
    return {"logits": _f64(F.linear(hidden.double(), weight.double()))}


_TIED_HINT = "logits = hidden @ weight.T: the embedding matrix (vocab_size, d_model) is reused, transposed, as the output projection."
for _id, _args in {"2.2-batch-2x4": (211, 2, 4, 10, 8), "2.2-batch-1x6-vocab-30": (212, 1, 6, 30, 16)}.items():
    _add(_id, "2.2", 1, partial(_p_tied, args=_args),
         expected=partial(_e_tied, *_args), hint=_TIED_HINT, atol=1e-5)


def _p_tied_rejects(ns: ModuleType) -> Arrays:
    hidden, weight = _randn(213, 2, 3, 8), _randn(214, 10, 6)
    return {"raised_for_mismatched_d_model": _raises_value_error(lambda: ns.tied_output_logits(hidden, weight))}


_add("2.2-rejects-mismatched-width", "2.2", 1, _p_tied_rejects, expected=lambda: {"raised_for_mismatched_d_model": np.array(True)},
     hint="Raise ValueError when hidden.shape[-1] != weight.shape[1] (both must be d_model).")


def _e_scale(rows) -> Arrays:
    out = []
    for d_model, init_std in rows:
        pe_sq = float((_pe_closed_form(7, d_model) ** 2).sum(axis=1).mean())  # every row: d_model / 2 (even d_model)
        row = []
        for factor in (1.0, math.sqrt(d_model)):
            emb_sq = d_model * (init_std * factor) ** 2                        # E ||row||^2 = d_model * std^2
            row.append([math.sqrt(emb_sq / pe_sq), pe_sq / (pe_sq + emb_sq)])
        out.append(row)
    return {"ratios": np.array(out, dtype=np.float64)}


def _scale_labels(rows) -> list[str]:
    return [f"d_model_{int(d)}_init_std_{float(s):.6g}".replace("+", "") for d, s in rows]


def _p_scale(ns: ModuleType, rows) -> Arrays:
    return _per_call("ratios", _scale_labels(rows), np.stack([
        to_array(ns.scale_ratios(int(d), float(s)), f"scale_ratios({int(d)}, {float(s)!r})", kind="f") for d, s in rows]))


def _e_scale_per_call(rows) -> Arrays:
    return _per_call("ratios", _scale_labels(rows), _e_scale(rows)["ratios"])


_SCALE_HINT = ("An embedding row with N(0, init_std^2) entries has E||row||^2 = d_model * init_std^2 (times d_model once "
               "scaled by sqrt(d_model)); a positional row of even width has ||PE||^2 = d_model / 2 exactly. Column 0 is "
               "sqrt(E||row||^2) / ||PE||, column 1 is ||PE||^2 / (||PE||^2 + E||row||^2); row 0 unscaled, row 1 scaled.")
def _scale_rows_and_draw(rows, seed: int) -> list[tuple[int, float]]:
    """The rows plus one with a drawn even width and the initialisation rule of the first row."""
    d = 2 * int(_randint(seed, 1, 1025))
    std = d ** -0.5 if rows[0][1] == rows[0][0] ** -0.5 else rows[0][1]
    return list(rows) + [(d, std)]


for _n, (_id, _rows) in enumerate({
    "2.3-paper-init-512": [(512, 512 ** -0.5)],
    "2.3-paper-init-several-widths": [(8, 8 ** -0.5), (64, 0.125), (1024, 1 / 32)],
    "2.3-unit-std": [(16, 1.0), (512, 1.0)],
    "2.3-small-std-wide": [(2, 0.02), (4096, 0.02)],
}.items()):
    _rows_fn = partial(_scale_rows_and_draw, _rows, 231 + _n)
    _add(_id, "2.3", 1, (lambda f: lambda ns: _p_scale(ns, f()))(_rows_fn), expected=(lambda f: lambda: _e_scale_per_call(f()))(_rows_fn),
         hint=_SCALE_HINT, rtol=1e-6, atol=1e-9)


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_scale_rows() -> list[tuple[int, float]]:
    d, s = 2 * _randint(221, 1, 1025, 3), _randint(222, 1, 2001, 3)
    return [(int(d[i]), int(s[i]) / 1000) for i in range(3)]


_add("2.3-drawn-widths", "2.3", 2, lambda ns: _p_scale(ns, _drawn_scale_rows()), expected=lambda: _e_scale_per_call(_drawn_scale_rows()),
     hint=_SCALE_HINT, rtol=1e-6, atol=1e-9)


def _p_scale_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_odd_d_model": _raises_value_error(lambda: ns.scale_ratios(7, 0.1)),
        "raised_for_std_0": _raises_value_error(lambda: ns.scale_ratios(8, 0.0)),
    }


_add("2.3-rejects-bad-arguments", "2.3", 1, _p_scale_rejects,
     expected=lambda: {"raised_for_odd_d_model": np.array(True), "raised_for_std_0": np.array(True)},
     hint="Raise ValueError naming d_model when it is odd or smaller than 2, and naming init_std when it is not > 0.")
