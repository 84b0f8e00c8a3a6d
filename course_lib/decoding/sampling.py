"""Sampling the next token: temperature, top-k and top-p (nucleus) filtering (chapter 10)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..validation import checked_by

__all__ = [
    "top_k_filter",
    "top_p_filter",
    "choose_next_token",
    "check_top_k",
    "check_top_p",
    "check_sampling_inputs",
]


def check_top_k(logits: Tensor, top_k: int | None) -> None:
    """Raise ``ValueError`` unless ``top_k`` is ``None`` or ``>= 0``."""
    if top_k is not None and top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 or None = off); got {top_k}")


@checked_by(check_top_k)
def top_k_filter(logits: Tensor, top_k: int | None) -> Tensor:
    """Keep the ``top_k`` largest logits of each row; set the others to ``-inf``.

    ``top_k`` larger than the vocabulary is clamped to it (no error, no
    change); ``None`` or 0 means no filtering. Ties with the ``top_k``-th value
    are all kept.

    Args:
        logits: shape ``(..., V)``, float.
        top_k: number of tokens to keep.

    Returns:
        a new tensor of the same shape.

    Raises:
        ValueError: negative ``top_k``.

    Source: Fan et al. (2018), "Hierarchical Neural Story Generation"; chapter 10.
    """
    if top_k is None or top_k == 0:
        return logits.clone()
    k = min(int(top_k), logits.size(-1))
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest logit of each row
    return logits.masked_fill(logits < kth, float("-inf"))


def check_top_p(logits: Tensor, top_p: float | None) -> None:
    """Raise ``ValueError`` unless ``top_p`` is ``None`` or in ``(0, 1]``."""
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1]; got {top_p}")


@checked_by(check_top_p)
def top_p_filter(logits: Tensor, top_p: float | None) -> Tensor:
    """Nucleus filtering: keep the smallest set of most likely tokens whose probability reaches ``top_p``.

    Tokens are sorted by probability; token ``i`` (in that order) is kept if
    the total probability of the tokens before it is ``< top_p``. So the most
    likely token is always kept, and the kept set is the smallest prefix with
    total probability ``>= top_p``.

    Args:
        logits: shape ``(..., V)``, float.
        top_p: in ``(0, 1]``; ``None`` or 1.0 = no filtering.

    Returns:
        a new tensor with the removed logits set to ``-inf``.

    Raises:
        ValueError: ``top_p`` outside ``(0, 1]``.

    Source: Holtzman et al. (2020), "The Curious Case of Neural Text
    Degeneration", section 3.1; chapter 10.
    """
    if top_p is None or top_p >= 1.0:
        return logits.clone()
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (..., V) each
    probs = torch.softmax(sorted_logits.float(), dim=-1)  # (..., V), largest first
    before = probs.cumsum(dim=-1) - probs  # (..., V): probability mass strictly before each token
    remove_sorted = before >= top_p
    remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)  # (..., V), back in vocabulary order
    return logits.masked_fill(remove, float("-inf"))


def check_sampling_inputs(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> None:
    """Raise ``ValueError`` unless ``temperature >= 0`` and ``top_k``, ``top_p`` suit their filters."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = argmax); got {temperature}")
    check_top_k(logits, top_k)
    check_top_p(logits, top_p)


@checked_by(check_sampling_inputs)
def choose_next_token(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Pick one token per row: argmax if ``temperature == 0``, else sample.

    Sampling divides the logits by ``temperature``, applies
    :func:`top_k_filter` then :func:`top_p_filter`, and draws from the softmax.

    Args:
        logits: ``(batch, V)`` float.
        temperature: ``>= 0``; 0 = greedy (argmax), never a division by zero.
        top_k, top_p: see the filters.
        generator: a :class:`torch.Generator` for reproducible draws.

    Returns:
        long tensor ``(batch,)``.

    Raises:
        ValueError: negative ``temperature``.

    Source: chapter 10.
    """
    if temperature == 0:
        return logits.argmax(dim=-1)  # (batch,)
    scaled = top_p_filter(top_k_filter(logits.float() / temperature, top_k), top_p)  # (batch, V)
    probs = torch.softmax(scaled, dim=-1)  # (batch, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (batch,)
