"""Helpers that the cases of several chapters use (a part of the cases registry, see ``registry.py``).

``_value_error_text`` and ``_rejections`` (the ``rejects`` cases of 2.1, 5.1, 9.2), ``_per_call`` (one key
per call of a stacked result: 2.3, 9.4), the sinusoidal closed form ``_pe_at`` / ``_pe_closed_form``
(chapter 3, and the positional norms of 2.3).
"""

from __future__ import annotations

import math
import re
from typing import Callable

import numpy as np

from .registry import Arrays


def _value_error_text(fn: Callable[[], object]) -> str | None:
    """The message of the ``ValueError`` that ``fn()`` raises (``None`` when it raises none); ``NotImplementedError``
    propagates."""
    try:
        fn()
    except NotImplementedError:
        raise
    except ValueError as exc:
        return str(exc)
    except Exception:
        return None
    return None


def _rejections(checks: dict) -> Arrays:
    """``raised_for_<situation>``: ``fn()`` raises ``ValueError``, for each ``situation -> (fn, words)``; and
    ``message_names_<w1>_and_<w2>``: every such ``ValueError`` raised names the words the statement promises."""
    out: Arrays = {}
    named: dict[str, bool] = {}
    for situation, (fn, words) in checks.items():
        text = _value_error_text(fn)
        out[f"raised_for_{situation}"] = np.array(text is not None)
        if words:
            key = "message_names_" + "_and_".join(words)
            named[key] = named.get(key, True) and (text is None or all(_names(text, w) for w in words))
    return {**out, **{k: np.array(v) for k, v in named.items()}}


def _names(text: str, word: str) -> bool:
    """Whether a message names ``word``: as a part of the text, or - for a one-letter argument (``k``, ``x``), which
    nearly any sentence contains - as a name of its own (not a letter of another word or identifier)."""
    if len(word) > 1:
        return word in text
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", text) is not None


def _per_call(name: str, labels: list[str], stacked: np.ndarray) -> Arrays:
    """One key per call of a stacked result, named by the call's inputs (``ratios_call_1_d_model_64_init_std_0.125``),
    so that a message names the call it is about and indexes only that call's own result."""
    return {f"{name}_call_{i}_{label}": np.asarray(value) for i, (label, value) in enumerate(zip(labels, stacked))}


def _pe_closed_form(max_len: int, d_model: int) -> np.ndarray:
    return _pe_at(np.arange(max_len), d_model)


def _pe_at(positions: np.ndarray, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The sinusoidal rows of the given integer positions, entry by entry with ``math``: ``positions.shape + (d_model,)``."""
    flat = np.asarray(positions).reshape(-1)
    pe = np.zeros((flat.size, d_model))
    for row, pos in enumerate(flat.tolist()):
        for col in range(d_model):
            i2 = col - (col % 2)  # the "2i" of the paper
            angle = pos / (base ** (i2 / d_model))
            pe[row, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    return pe.reshape(*np.shape(positions), d_model)
