"""Reading batches: ``Batch`` objects or ``(src, tgt_in, tgt_out)`` tuples, grouped for gradient accumulation."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import torch
from torch import Tensor

__all__ = ["unpack_batch", "model_logits", "count_target_tokens", "epoch_batches", "group_target_tokens", "step_groups"]


def count_target_tokens(tgt_out: Tensor, pad_id: int | None) -> int:
    """Target tokens that count in the loss (all of them when ``pad_id`` is ``None``)."""
    return int((tgt_out != pad_id).sum()) if pad_id is not None else tgt_out.numel()


def unpack_batch(batch: Any, device: torch.device | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """``(src, tgt_in, tgt_out, src_mask, tgt_mask)`` of one batch, moved to ``device`` if given.

    A batch is a :class:`course_lib.data.Batch` (any object with attributes
    ``src``, ``tgt_in``, ``tgt_out`` and optionally ``src_mask``,
    ``tgt_mask``) or a ``(src, tgt_in, tgt_out)`` tuple, whose masks are
    ``None`` (the model then builds them). A language model's batch
    ``(inputs, targets)`` (:func:`course_lib.data.lm_batches`) gives ``src = None``. Shapes: see the module docstring.

    Raises:
        ValueError: a tuple that does not have three items.
        TypeError: an object without those attributes.
    """
    if isinstance(batch, (tuple, list)):
        if len(batch) not in (2, 3):
            raise ValueError(
                f"a tuple batch must be (src, tgt_in, tgt_out), or (tokens[:-1], tokens[1:]) for a language model; "
                f"got {len(batch)} items"
            )
        parts = (*batch, None, None) if len(batch) == 3 else (None, *batch, None, None)
    else:
        try:
            parts = (batch.src, batch.tgt_in, batch.tgt_out, getattr(batch, "src_mask", None), getattr(batch, "tgt_mask", None))
        except AttributeError as exc:
            raise TypeError(
                f"a batch needs attributes src, tgt_in, tgt_out (like course_lib.data.Batch) or must be a "
                f"(src, tgt_in, tgt_out) tuple; got {type(batch).__name__}"
            ) from exc
    if device is None:
        return parts
    return tuple(None if t is None else t.to(device, non_blocking=True) for t in parts)  # type: ignore[return-value]


def epoch_batches(train_data: Any, epoch: int) -> Iterable[Any]:
    return train_data(epoch) if callable(train_data) else train_data


def step_groups(it: Iterator[Any], size: int, consumed: int) -> Iterator[tuple[int, list[Any]]]:
    """Yield (raw batches consumed so far, group of `size` raw batches) from an iterator."""
    group: list[Any] = []
    for batch in it:
        group.append(batch)
        consumed += 1
        if len(group) == size:
            yield consumed, group
            group = []


def group_target_tokens(group: list[Any], pad_id: int | None) -> int:
    """Target tokens of all the batches of ``group`` (at least 1)."""
    return max(1, sum(count_target_tokens(unpack_batch(b)[2], pad_id) for b in group))


def model_logits(model: Any, src: Tensor | None, tgt_in: Tensor, src_mask: Tensor | None, tgt_mask: Tensor | None) -> Tensor:
    """Logits ``(batch, tgt_len, V)``: ``model(src, tgt_in, *, src_mask, tgt_mask)``, or ``model(tgt_in)`` for a language model (``src is None``)."""
    if src is None:
        return model(tgt_in)
    return model(src, tgt_in, src_mask=src_mask, tgt_mask=tgt_mask)
