"""The bookkeeping every search loop shares: evaluation mode, the source mask, the KV cache, dropping finished rows."""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn

from ..validation import model_setting

__all__ = [
    "max_new_tokens",
    "eval_mode",
    "source_mask_for",
    "open_cache",
    "next_token_logits",
    "still_running",
    "select_rows",
    "keep_rows",
]


def max_new_tokens(model: nn.Module, src_len: int, max_len: int | None) -> int:
    """How many tokens to generate: ``max_len``, else ``src_len + 50`` (the paper, section 6.1).

    A model with ``config.max_len`` positions can take ``config.max_len - 1``
    generated tokens after ``<bos>``: the default is capped there and a larger
    ``max_len`` raises ``ValueError``. A model without ``config.max_len``
    (:func:`course_lib.validation.model_setting` gives ``None``) has no limit.
    """
    limit = model_setting(model, "max_len")
    if max_len is not None:
        if limit is not None and max_len > limit - 1:
            raise ValueError(f"max_len={max_len} needs {max_len + 1} positions but the model has max_len={limit}")
        return max_len
    n = src_len + 50
    return min(n, limit - 1) if limit is not None else n


@contextlib.contextmanager
def eval_mode(model: nn.Module):
    """Within the block: ``model.eval()`` and ``torch.no_grad()``; the training mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def source_mask_for(model: nn.Module, src: Tensor, src_mask: Tensor | None, pad_id: int | None) -> Tensor | None:
    """``src_mask`` if given, else ``model.source_mask(src)``, else the padding mask of ``pad_id`` (or ``None``)."""
    if src_mask is not None:
        return src_mask
    if hasattr(model, "source_mask"):
        return model.source_mask(src)
    if pad_id is None:
        return None
    from ..masks import padding_mask

    return padding_mask(src, pad_id)


def open_cache(model: nn.Module, use_cache: bool | None):
    """``model.new_cache()``, or ``None`` (recompute the prefix) with ``use_cache=False`` or a model without one."""
    if use_cache is False:
        return None
    if not hasattr(model, "new_cache"):
        if use_cache:
            raise ValueError(f"use_cache=True needs a model with new_cache(); {type(model).__name__} has none")
        return None
    return model.new_cache()


def next_token_logits(model: nn.Module, ys: Tensor, memory: Tensor, memory_mask: Tensor | None, cache) -> Tensor:
    """Float32 logits ``(rows, V)`` for the next position of the prefixes ``ys`` ``(rows, t)`` (with ``<bos>``).

    ``memory`` ``(rows, src_len, d_model)``; ``memory_mask`` the source mask.
    With a cache only the newest token is fed (the cache holds the rest).
    """
    if cache is not None:
        return model.decode(ys[:, -1:], memory, memory_mask=memory_mask, cache=cache)[:, -1].float()
    return model.decode(ys, memory, memory_mask=memory_mask)[:, -1].float()


def still_running(tokens: Tensor, eos_id: int | None) -> Tensor:
    """Bool ``(rows,)``: ``True`` where the newest token is not ``<eos>`` (every row with ``eos_id=None``)."""
    if eos_id is None:
        return torch.ones_like(tokens, dtype=torch.bool)
    return tokens != eos_id


def select_rows(x: Tensor | None, rows: Tensor) -> Tensor | None:
    """``x.index_select(0, rows)``; ``None`` and a batch of 1 (a broadcast mask) are returned unchanged."""
    if x is None or x.size(0) == 1:
        return x
    return x.index_select(0, rows)


def keep_rows(running: Tensor, cache, *tensors: Tensor | None) -> tuple[Tensor | None, ...]:
    """Drop the finished rows: ``running`` ``(rows,)`` bool; each tensor (and the cache) keeps its running rows."""
    keep = running.nonzero().squeeze(-1)
    if cache is not None:
        cache.reorder(keep)
    return tuple(select_rows(x, keep) for x in tensors)
