"""Attention masks (chapter 8).

The mask convention of the whole course
---------------------------------------
A mask is a **boolean** tensor in which ``True`` means *"this query may attend
to this key"* and ``False`` means *"blocked"*. It must be broadcastable to the
attention-score shape ``(batch, n_heads, q_len, k_len)``. This is the meaning
used by :func:`torch.nn.functional.scaled_dot_product_attention`.

Beware: :class:`torch.nn.MultiheadAttention` and :class:`torch.nn.Transformer`
use the *opposite* meaning for their boolean ``attn_mask`` /
``key_padding_mask`` (``True`` = blocked). Convert with ``~mask``.

Typical shapes produced here:

* :func:`padding_mask` -> ``(batch, 1, 1, k_len)``: one row per sequence,
  broadcast over heads and over query positions.
* :func:`causal_mask` -> ``(1, 1, size, size)``: lower-triangular, broadcast over
  the batch and the heads.
* :func:`decoder_self_attention_mask` -> ``(batch, 1, tgt_len, tgt_len)``: both
  combined with a logical AND.

A query row in which every key is blocked produces a zero output and zero
attention weights in :func:`course_lib.attention.scaled_dot_product_attention`
(never NaN).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .validation import check_int, check_token_ids, checked_by

__all__ = [
    "padding_mask",
    "causal_mask",
    "decoder_self_attention_mask",
    "check_mask",
    "check_pad_id",
    "check_causal_mask_inputs",
]


def check_pad_id(pad_id: object, optional: bool = False) -> None:
    """Raise ``TypeError`` unless ``pad_id`` is an int (or ``None`` when ``optional``)."""
    if optional and pad_id is None:
        return
    if isinstance(pad_id, bool) or not isinstance(pad_id, int):
        raise TypeError(f"pad_id must be an int (the id of <pad>){' or None' if optional else ''}; got {pad_id!r}")


def check_padding_mask_inputs(tokens: Tensor, pad_id: int) -> None:
    """Check the arguments of :func:`padding_mask`: ``(batch, seq_len)`` integer ids and an int ``pad_id``."""
    check_token_ids(tokens, "tokens")
    check_pad_id(pad_id)


def check_decoder_mask_inputs(tgt: Tensor, pad_id: int | None) -> None:
    """Check the arguments of :func:`decoder_self_attention_mask`."""
    check_token_ids(tgt, "tgt")
    check_pad_id(pad_id, optional=True)


@checked_by(check_padding_mask_inputs)
def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Mask that lets every query attend only to non-padding keys.

    Args:
        tokens: integer token ids, shape ``(batch, seq_len)``.
        pad_id: the id of the padding token.

    Returns:
        bool tensor of shape ``(batch, 1, 1, seq_len)``; ``True`` where
        ``tokens != pad_id`` (may attend), ``False`` at padding positions.

    Raises:
        ValueError: if ``tokens`` is not 2-D or not an integer tensor.
        TypeError: if ``pad_id`` is not an int.

    Source: Vaswani et al. (2017) do not spell padding out; every implementation
    needs it so that attention ignores the filler tokens of short sentences.
    Derived in chapter 8.
    """
    return (tokens != pad_id)[:, None, None, :]  # (batch, 1, 1, seq_len)


def check_causal_mask_inputs(size: int, device: torch.device | str | None = None) -> None:
    """Raise ``ValueError`` unless ``size`` is a positive int."""
    check_int(size, "size")


@checked_by(check_causal_mask_inputs)
def causal_mask(size: int, device: torch.device | str | None = None) -> Tensor:
    """Lower-triangular mask: position ``i`` may attend to positions ``j <= i``.

    Args:
        size: the sequence length (number of queries = number of keys).
        device: where to create the mask (default: CPU).

    Returns:
        bool tensor of shape ``(1, 1, size, size)``; entry ``[0, 0, i, j]`` is
        ``True`` iff ``j <= i``.

    Raises:
        ValueError: if ``size`` is not a positive integer.

    Source: Vaswani et al. (2017), section 3.2.3 ("masking out ... all values in
    the input of the softmax which correspond to illegal connections").
    """
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None]  # (1, 1, size, size)


@checked_by(check_decoder_mask_inputs)
def decoder_self_attention_mask(tgt: Tensor, pad_id: int | None) -> Tensor:
    """Causal mask AND target padding mask, for the decoder's self-attention.

    Args:
        tgt: decoder input token ids, shape ``(batch, tgt_len)``.
        pad_id: padding id, or ``None`` if the batch has no padding.

    Returns:
        bool tensor of shape ``(batch, 1, tgt_len, tgt_len)`` (or
        ``(1, 1, tgt_len, tgt_len)`` when ``pad_id`` is ``None``); ``True`` =
        may attend. Every query row keeps at least its own position unless that
        position is padding, and the first position is never padding in a
        batch that starts with ``<bos>``.

    Raises:
        ValueError: as :func:`padding_mask`.

    Source: Vaswani et al. (2017), section 3.2.3; chapter 8.
    """
    causal = causal_mask(tgt.size(1), device=tgt.device)  # (1, 1, tgt_len, tgt_len)
    if pad_id is None:
        return causal
    return padding_mask(tgt, pad_id) & causal  # (batch, 1, 1, tgt_len) & causal -> (batch, 1, tgt_len, tgt_len)


def check_mask(mask: Tensor | None, scores_shape: torch.Size | tuple[int, ...], name: str = "mask") -> None:
    """Validate a mask against the shape of the attention scores.

    Args:
        mask: ``None`` or a bool tensor broadcastable to ``scores_shape``.
        scores_shape: the score shape, e.g. ``(batch, n_heads, q_len, k_len)``.
        name: the argument name to use in error messages.

    Raises:
        TypeError: if ``mask`` is not a bool tensor (a float or 0/1 integer mask
            is ambiguous: additive or multiplicative? True = keep or block?).
        ValueError: if ``mask`` is not broadcastable to ``scores_shape``.
    """
    if mask is None:
        return
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a torch.bool tensor or None; got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must have dtype torch.bool (True = may attend); got {mask.dtype}. "
            f"Convert a 0/1 mask with `{name}.bool()`; an additive float mask is not accepted."
        )
    scores_shape = tuple(scores_shape)
    ok = mask.dim() <= len(scores_shape)
    if ok:
        for m, s in zip(reversed(mask.shape), reversed(scores_shape)):
            if m not in (1, s):
                ok = False
                break
    if not ok:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} is not broadcastable to the attention scores "
            f"of shape {scores_shape} (batch, n_heads, q_len, k_len); expected e.g. "
            f"(batch, 1, 1, k_len) for padding or (1, 1, q_len, k_len) for a causal mask"
        )
