"""The cases of chapter 1 - motivation: the cost of a layer, the crossover, table 1 (exercises 1.1, 1.2, 1.3).

A part of the cases registry (``registry.py``): loaded after it, into the same module
(``course_exercise_cases``), never imported on its own; the relative imports below name where
each helper lives and are left out when the parts are put together (:mod:`course_exercises.casefile`).
"""

from __future__ import annotations

import itertools
from functools import partial
from types import ModuleType
from typing import Callable

import numpy as np

from .registry import Arrays, _add, _pair, _raises_value_error, _randint, to_array

# ===========================================================================
# Chapter 1 - motivation: the cost of a layer, the crossover, table 1
# ===========================================================================
# FLOPs of the matrix products of one layer, the chapter's convention: a multiply-add is 2 FLOPs;
# biases, softmax and nonlinearities are not counted (FlopCounterMode counts the same, see test_cases.py).
_FLOP_FORMULAS: dict[str, Callable[[int, int, int, int], int]] = {
    "attention": lambda n, d, b, k: 2 * (b * n * n * d) + 2 * (b * n * n * d),        # Q K^T, then weights @ V
    "multi_head_attention": lambda n, d, b, k: 4 * (2 * b * n * d * d) + 4 * b * n * n * d,  # + Q, K, V, output
    "rnn": lambda n, d, b, k: n * (2 * (b * d * d) + 2 * (b * d * d)),                 # W_ih x_t, W_hh h_{t-1}
    "gru": lambda n, d, b, k: n * 3 * (2 * (b * d * d) + 2 * (b * d * d)),             # 3 gates
    "lstm": lambda n, d, b, k: n * 4 * (2 * (b * d * d) + 2 * (b * d * d)),            # 4 gates
    "conv": lambda n, d, b, k: 2 * b * n * (k * d) * d,                                # n outputs, k*d inputs each
}


def _p_flops(ns: ModuleType, rows) -> Arrays:
    out = []
    for kind, n, d, batch, kernel_size in rows:
        value = ns.layer_flops(kind, int(n), int(d), batch=int(batch), kernel_size=int(kernel_size))
        out.append(to_array(value, f"layer_flops({kind!r}, {int(n)}, {int(d)}, batch={int(batch)}, kernel_size={int(kernel_size)})", kind="i"))
    return {"flops": np.stack(out)}


def _e_flops(rows) -> Arrays:
    return {"flops": np.array([_FLOP_FORMULAS[kind](int(n), int(d), int(b), int(k)) for kind, n, d, b, k in rows], dtype=np.int64)}


_FLOP_HINT = ("Count 2 FLOPs per multiply-add, matrix products only: attention core 4*batch*n^2*d; multi-head attention "
              "adds four d x d projections, 8*batch*n*d^2; a recurrent step does two d x d products per gate "
              "(rnn 1 gate, gru 3, lstm 4); a convolution does kernel_size*d multiply-adds per output channel.")
_FLOP_TABLES = {
    "1.1-attention-core": [("attention", 12, 16, 2, 3), ("attention", 1, 1, 1, 3), ("attention", 100, 64, 3, 3)],
    "1.1-multi-head-attention": [("multi_head_attention", 12, 16, 2, 3), ("multi_head_attention", 50, 8, 1, 3)],
    "1.1-rnn": [("rnn", 12, 16, 2, 3), ("rnn", 7, 5, 1, 3), ("rnn", 1000, 512, 4, 3)],
    "1.1-gated-recurrent": [("gru", 7, 5, 2, 3), ("lstm", 7, 5, 2, 3), ("lstm", 64, 512, 1, 3)],
    "1.1-convolution": [("conv", 7, 5, 2, 3), ("conv", 30, 16, 1, 5), ("conv", 9, 4, 3, 1)],
}


def _flop_rows_and_draws(rows, seed: int) -> list[tuple[str, int, int, int, int]]:
    """The table's rows plus one row with drawn sizes per kind of the table (so that every case has drawn inputs)."""
    kinds = list(dict.fromkeys(row[0] for row in rows))
    n, d = _randint(seed, 1, 300, len(kinds)), _randint(seed + 1, 1, 300, len(kinds))
    b, k = _randint(seed + 2, 1, 9, len(kinds)), _randint(seed + 3, 1, 8, len(kinds))
    return list(rows) + [(kind, int(n[i]), int(d[i]), int(b[i]), int(k[i])) for i, kind in enumerate(kinds)]


for _n, (_id, _rows) in enumerate(_FLOP_TABLES.items()):
    _rows_fn = partial(_flop_rows_and_draws, _rows, 131 + 10 * _n)
    _add(_id, "1.1", 2 if "gated" in _id else 1, (lambda f: lambda ns: _p_flops(ns, f()))(_rows_fn),
         expected=(lambda f: lambda: _e_flops(f()))(_rows_fn), hint=_FLOP_HINT, rtol=0.0, atol=1e-6)


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_flop_rows() -> list[tuple[str, int, int, int, int]]:
    n, d, b, k = _randint(101, 1, 300, 6), _randint(102, 1, 300, 6), _randint(103, 1, 9, 6), _randint(104, 1, 8, 6)
    return [(kind, int(n[i]), int(d[i]), int(b[i]), int(k[i])) for i, kind in enumerate(_FLOP_FORMULAS)]


_add("1.1-drawn-sizes", "1.1", 2, lambda ns: _p_flops(ns, _drawn_flop_rows()), expected=lambda: _e_flops(_drawn_flop_rows()),
     hint=_FLOP_HINT, rtol=0.0, atol=1e-6)


def _p_flops_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_unknown_kind": _raises_value_error(lambda: ns.layer_flops("transformer", 4, 8)),
        "raised_for_n_0": _raises_value_error(lambda: ns.layer_flops("rnn", 0, 8)),
        "raised_for_d_0": _raises_value_error(lambda: ns.layer_flops("attention", 4, 0)),
        "raised_for_batch_0": _raises_value_error(lambda: ns.layer_flops("lstm", 4, 8, batch=0)),
        "raised_for_kernel_size_0": _raises_value_error(lambda: ns.layer_flops("conv", 4, 8, kernel_size=0)),
    }


_add("1.1-rejects-bad-arguments", "1.1", 1, _p_flops_rejects,
     expected=lambda: {k: np.array(True) for k in ("raised_for_unknown_kind", "raised_for_n_0", "raised_for_d_0", "raised_for_batch_0",
                                                   "raised_for_kernel_size_0")},
     hint="Raise ValueError naming the argument for an unknown kind and for n, d, batch or kernel_size smaller than 1.")


def _crossover_by_enumeration(d: int, recurrent: str, projections: bool) -> int:
    attention = "multi_head_attention" if projections else "attention"
    n = 1
    while _FLOP_FORMULAS[attention](n, d, 1, 1) <= _FLOP_FORMULAS[recurrent](n, d, 1, 1):
        n += 1
    return n


def _p_crossover(ns: ModuleType, rows) -> Arrays:
    out = [to_array(ns.crossover_length(int(d), recurrent=rec, projections=proj),
                    f"crossover_length({int(d)}, recurrent={rec!r}, projections={proj})", kind="i") for d, rec, proj in rows]
    return {"n": np.stack(out)}


def _e_crossover(rows) -> Arrays:
    return {"n": np.array([_crossover_by_enumeration(int(d), rec, proj) for d, rec, proj in rows], dtype=np.int64)}


_CROSS_HINT = ("Solve attention FLOPs > recurrent FLOPs for n (the batch cancels): the core costs 4 n^2 d, the four "
               "projections add 8 n d^2; the recurrent layer costs 4 n d^2 per gate (rnn 1, gru 3, lstm 4). "
               "'More' is strict: at equality the answer is the next n.")
_CROSS_TABLES = {
    "1.2-core-vs-rnn": [(1, "rnn", False), (16, "rnn", False), (512, "rnn", False)],
    "1.2-core-vs-gated": [(16, "gru", False), (512, "lstm", False), (3, "lstm", False)],
    "1.2-with-projections": [(16, "rnn", True), (512, "gru", True), (512, "lstm", True), (1, "lstm", True)],
}


def _crossover_rows_and_draws(rows, seed: int) -> list[tuple[int, str, bool]]:
    """The table's rows plus one row with a drawn width per comparison of the table."""
    pairs = list(dict.fromkeys((rec, proj) for _, rec, proj in rows))
    d = _randint(seed, 1, 1025, len(pairs))
    return list(rows) + [(int(d[i]), rec, proj) for i, (rec, proj) in enumerate(pairs)]


for _n, (_id, _rows) in enumerate(_CROSS_TABLES.items()):
    _rows_fn = partial(_crossover_rows_and_draws, _rows, 181 + 10 * _n)
    _add(_id, "1.2", 1, (lambda f: lambda ns: _p_crossover(ns, f()))(_rows_fn),
         expected=(lambda f: lambda: _e_crossover(f()))(_rows_fn), hint=_CROSS_HINT, rtol=0.0, atol=1e-6)


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_crossover_rows() -> list[tuple[int, str, bool]]:
    d = _randint(111, 1, 1025, 6)
    return [(int(d[i]), rec, proj) for i, (rec, proj) in enumerate(itertools.product(("rnn", "gru", "lstm"), (False, True)))]


_add("1.2-drawn-width", "1.2", 2, lambda ns: _p_crossover(ns, _drawn_crossover_rows()),
     expected=lambda: _e_crossover(_drawn_crossover_rows()), hint=_CROSS_HINT, rtol=0.0, atol=1e-6)


def _p_crossover_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_d_0": _raises_value_error(lambda: ns.crossover_length(0)),
        "raised_for_unknown_recurrent": _raises_value_error(lambda: ns.crossover_length(16, recurrent="transformer")),
    }


_add("1.2-rejects-bad-arguments", "1.2", 1, _p_crossover_rejects,
     expected=lambda: {"raised_for_d_0": np.array(True), "raised_for_unknown_recurrent": np.array(True)},
     hint="Raise ValueError naming the argument when d < 1 or recurrent is not 'rnn', 'gru' or 'lstm'.")


def _one_layer_edges(kind: str, n: int, layer: int, k: int | None, r: int | None) -> np.ndarray:
    """edges[i, j]: output position j of one layer (recurrence step) reads input position i."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    if kind == "self_attention":
        return np.ones((n, n), dtype=bool)
    if kind == "recurrent":
        return (j == i) | (j == i + 1)
    if kind == "convolutional":
        return (j - i >= 0) & (j - i <= k - 1)
    if kind == "dilated_convolutional":
        step = k ** layer
        return (j - i >= 0) & ((j - i) % step == 0) & ((j - i) // step <= k - 1)
    if kind == "restricted_self_attention":
        return np.abs(i - j) <= (r - 1) // 2
    raise AssertionError(kind)  # pragma: no cover


def _path_by_enumeration(kind: str, n: int, k: int | None, r: int | None) -> int:
    """Layers needed until input position 0 reaches output position n - 1 (breadth-first, layer by layer)."""
    reached = np.zeros(n, dtype=bool)
    reached[0] = True
    layers = 0
    while not reached[n - 1]:
        reached = (reached[:, None] & _one_layer_edges(kind, n, layers, k, r)).any(axis=0)
        layers += 1
    return layers


#: sequential operations of one layer (the paper's table 1): only the recurrence waits for its previous step
_SEQUENTIAL = {"self_attention": lambda n: 1, "recurrent": lambda n: n, "convolutional": lambda n: 1,
               "dilated_convolutional": lambda n: 1, "restricted_self_attention": lambda n: 1}


def _p_table1(ns: ModuleType, rows) -> Arrays:
    seq, path = [], []
    for kind, n, k, r in rows:
        what = f"table1_counts({kind!r}, {n}, k={k}, r={r})"
        s, p = _pair(ns.table1_counts(kind, n, k=k, r=r), what, ("sequential_operations", "maximum_path_length"))
        seq.append(to_array(s, f"{what}[0] (sequential_operations)", kind="i"))
        path.append(to_array(p, f"{what}[1] (maximum_path_length)", kind="i"))
    return {"sequential_operations": np.stack(seq), "maximum_path_length": np.stack(path)}


def _e_table1(rows) -> Arrays:
    return {"sequential_operations": np.array([_SEQUENTIAL[kind](n) for kind, n, _, _ in rows], dtype=np.int64),
            "maximum_path_length": np.array([_path_by_enumeration(kind, n, k, r) for kind, n, k, r in rows], dtype=np.int64)}


_TABLE1_HINT = ("Count layers (recurrence steps) from input position 0 to output position n-1: attention 1; recurrent n-1; "
                "a causal kernel of width k reaches k-1 positions further per layer; dilations 1, k, k^2, ... reach k^L "
                "positions after L layers; a centred window of r positions reaches (r-1)/2 further. Only the recurrence "
                "needs n sequential operations.")
_TABLE1_TABLES = {
    "1.3-self-attention": [("self_attention", n, None, None) for n in (2, 3, 10, 1000)],
    "1.3-recurrent": [("recurrent", n, None, None) for n in (2, 3, 10, 100)],
    "1.3-convolutional": [("convolutional", n, k, None) for n, k in ((2, 2), (10, 3), (11, 3), (12, 3), (100, 5), (64, 64), (65, 64))],
    "1.3-dilated-convolutional": [("dilated_convolutional", n, k, None) for n, k in ((2, 2), (8, 2), (9, 2), (27, 3), (28, 3), (100, 10), (101, 10), (125, 5), (216, 6))],
    "1.3-restricted-self-attention": [("restricted_self_attention", n, None, r) for n, r in ((2, 3), (10, 3), (11, 5), (12, 5), (100, 9), (50, 99))],
}


def _table1_rows_and_draws(rows, seed: int) -> list[tuple[str, int, int | None, int | None]]:
    """The table's rows plus two rows of the same kind with a drawn n (and k or r)."""
    kind = rows[0][0]
    n, k, r = _randint(seed, 2, 400, 2), _randint(seed + 1, 2, 12, 2), 2 * _randint(seed + 2, 1, 20, 2) + 1
    return list(rows) + [(kind, int(n[i]), int(k[i]) if "conv" in kind else None, int(r[i]) if "restricted" in kind else None)
                         for i in range(2)]


for _n, (_id, _rows) in enumerate(_TABLE1_TABLES.items()):
    _rows_fn = partial(_table1_rows_and_draws, _rows, 141 + 10 * _n)
    _add(_id, "1.3", 1, (lambda f: lambda ns: _p_table1(ns, f()))(_rows_fn),
         expected=(lambda f: lambda: _e_table1(f()))(_rows_fn), hint=_TABLE1_HINT, rtol=0.0, atol=1e-6)


# Inputs drawn per grading run (the grader salts the seed; see Draws).
def _drawn_table1_rows() -> list[tuple[str, int, int | None, int | None]]:
    n, k, r = _randint(121, 2, 400, 5), _randint(122, 2, 12, 5), 2 * _randint(123, 1, 20, 5) + 1
    return [(kind, int(n[i]), int(k[i]) if "conv" in kind else None, int(r[i]) if "restricted" in kind else None)
            for i, kind in enumerate(_SEQUENTIAL)]


_add("1.3-drawn-sizes", "1.3", 2, lambda ns: _p_table1(ns, _drawn_table1_rows()), expected=lambda: _e_table1(_drawn_table1_rows()),
     hint=_TABLE1_HINT, rtol=0.0, atol=1e-6)


def _p_table1_rejects(ns: ModuleType) -> Arrays:
    return {
        "raised_for_n_1": _raises_value_error(lambda: ns.table1_counts("recurrent", 1)),
        "raised_for_unknown_kind": _raises_value_error(lambda: ns.table1_counts("lstm", 10)),
        "raised_for_kernel_1": _raises_value_error(lambda: ns.table1_counts("convolutional", 10, k=1)),
        "raised_for_missing_k": _raises_value_error(lambda: ns.table1_counts("dilated_convolutional", 10)),
        "raised_for_even_r": _raises_value_error(lambda: ns.table1_counts("restricted_self_attention", 10, r=4)),
    }


_add("1.3-rejects-bad-arguments", "1.3", 1, _p_table1_rejects,
     expected=lambda: {k: np.array(True) for k in ("raised_for_n_1", "raised_for_unknown_kind", "raised_for_kernel_1",
                                                   "raised_for_missing_k", "raised_for_even_r")},
     hint="Raise ValueError naming the argument: n < 2, an unknown kind, a convolution without an int k >= 2, "
          "a restricted attention without an odd int r >= 3.")
