"""The rules applied to next-token logits before a token is chosen (chapter 10).

Never ``<pad>``/``<bos>`` (:func:`forbid_special_tokens`), the repetition
penalty, n-gram blocking; :func:`next_tokens` applies them and takes the argmax
or a draw (:mod:`course_lib.decoding.sampling`).
"""

from __future__ import annotations

import operator

import torch
from torch import Tensor

from ..validation import as_int, checked_by
from .config import GenerationConfig
from .sampling import choose_next_token

__all__ = [
    "next_tokens",
    "constrain_logits",
    "apply_repetition_penalty",
    "block_repeated_ngrams",
    "forbid_special_tokens",
    "check_logits_and_generated",
    "check_repetition_penalty_inputs",
    "check_ngram_inputs",
]


def check_repetition_penalty_inputs(
    logits: Tensor, generated: Tensor, penalty: float, ignore_ids: tuple[int, ...] | list[int] = ()
) -> None:
    """Raise ``ValueError`` unless ``penalty > 0`` and the shapes suit :func:`apply_repetition_penalty`."""
    if not penalty > 0:
        raise ValueError(f"penalty must be > 0; got {penalty}")
    check_logits_and_generated(logits, generated)


@checked_by(check_repetition_penalty_inputs)
def apply_repetition_penalty(
    logits: Tensor, generated: Tensor, penalty: float, ignore_ids: tuple[int, ...] | list[int] = ()
) -> Tensor:
    """Make tokens that were already generated less likely.

    For every token id that occurs in ``generated[b]``: a positive logit is
    *divided* by ``penalty`` and a negative logit is *multiplied* by it. Both
    move the logit down for ``penalty > 1`` (a plain division would make a
    negative logit *larger*, i.e. the repeated token *more* likely - the bug
    this avoids).

    Args:
        logits: next-token logits, shape ``(batch, V)``, float.
        generated: ids produced so far, shape ``(batch, t)``, long (``t`` may be 0).
        penalty: ``> 0``; 1.0 = no change; > 1 discourages repetition.
        ignore_ids: ids never penalised (e.g. ``<pad>``, ``<bos>``).

    Returns:
        a new tensor of shape ``(batch, V)``.

    Raises:
        ValueError: ``penalty <= 0``, or shapes that do not match.

    Source: Keskar et al. (2019), "CTRL: A Conditional Transformer Language
    Model for Controllable Generation", section 4.1; chapter 10.
    """
    if penalty == 1.0 or generated.size(1) == 0:
        return logits.clone()
    seen = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, generated.long(), True)  # (batch, V)
    for i in ignore_ids:
        if 0 <= i < logits.size(1):
            seen[:, i] = False
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)  # (batch, V)
    return torch.where(seen, penalised, logits)


def check_ngram_inputs(logits: Tensor, generated: Tensor, ngram_size: int) -> None:
    """Raise ``ValueError`` for arguments :func:`block_repeated_ngrams` cannot take, naming them."""
    as_int(ngram_size, "ngram_size", 0, hint=" (0 = off)")
    check_logits_and_generated(logits, generated)
    if generated.numel() and (int(generated.min()) < 0 or int(generated.max()) >= logits.size(1)):
        raise ValueError(
            f"generated must hold token ids in [0, {logits.size(1)}) (the logits' vocabulary); got ids from "
            f"{int(generated.min())} to {int(generated.max())}"
        )


@checked_by(check_ngram_inputs)
def block_repeated_ngrams(logits: Tensor, generated: Tensor, ngram_size: int) -> Tensor:
    """Forbid every next token that would repeat an n-gram already in ``generated``.

    If the last ``n - 1`` generated tokens of row ``b`` occurred before,
    followed by token ``x``, then ``x`` gets the logit ``-inf``: no n-gram
    (``n = ngram_size``) can appear twice in an output. Unlike the
    repetition penalty this never touches a token that merely occurred
    before (妈妈, or the second 我 of a sentence, stay possible): with
    ``n = 2`` a loop like 马马马 is cut at its third character. A row in
    which *every* token would be forbidden - counting those already at
    ``-inf``, e.g. ``<pad>`` and ``<bos>`` in the decoders - is left
    unchanged (a distribution of all ``-inf`` has no sample and no
    meaningful argmax).

    Args:
        logits: next-token logits (or log-probabilities), ``(batch, V)``, float.
        generated: ids produced so far, ``(batch, t)``, long (``t`` may be 0).
        ngram_size: ``n >= 1``; 0 = off (returns a copy).

    Returns:
        a new tensor of shape ``(batch, V)``.

    Raises:
        ValueError: ``ngram_size < 0``, or shapes that do not match.

    Source: Paulus et al. (2018), "A Deep Reinforced Model for Abstractive
    Summarization", section 2.5 (trigram blocking in beam search); chapter 10.
    """
    n = operator.index(ngram_size)  # a Python int (NumPy and torch integers accepted)
    if n == 0 or generated.size(1) < n:
        return logits.clone()
    grams = generated.long().unfold(1, n, 1)  # (batch, t - n + 1, n): every n-gram so far
    if n == 1:
        match = torch.ones(grams.shape[:2], dtype=torch.bool, device=grams.device)
    else:
        prefix = generated[:, generated.size(1) - (n - 1):].long()  # (batch, n - 1): the last n - 1 tokens
        match = (grams[:, :, :-1] == prefix[:, None, :]).all(dim=-1)  # (batch, t - n + 1)
    hits = torch.zeros(logits.shape, dtype=torch.int32, device=logits.device)  # (batch, V)
    hits.scatter_add_(1, grams[:, :, -1], match.to(torch.int32))
    banned = hits > 0  # (batch, V): tokens that would complete an n-gram seen before
    banned &= ~(banned | (logits == float("-inf"))).all(dim=-1, keepdim=True)
    return logits.masked_fill(banned, float("-inf"))


def forbid_special_tokens(logits: Tensor, pad_id: int | None, bos_id: int | None, eos_id: int | None = None) -> Tensor:
    """Set the logits of ``<pad>`` and ``<bos>`` to ``-inf``: tokens a decoder never generates.

    Every decoder of this module calls it at each step, first, on the
    next-token logits (beam search: on the log-probabilities, so that beam
    scores stay the model's own ``log p``). An id equal to ``eos_id`` is left
    alone (with ``pad_id == eos_id`` the sequence must still be able to end);
    ``None`` and ids outside ``[0, V)`` are skipped.

    Args:
        logits: ``(..., V)`` float (logits or log-probabilities).
        pad_id, bos_id: the ids to forbid, or ``None``.
        eos_id: an id never forbidden, or ``None``.

    Returns:
        a new tensor of the same shape.

    Raises:
        ValueError: when no token would be left (``V`` holds only ``<pad>`` and ``<bos>``).

    Source: chapter 10.
    """
    n = logits.size(-1)
    banned = sorted({i for i in (pad_id, bos_id) if i is not None and i != eos_id and 0 <= i < n})
    if len(banned) >= n:
        raise ValueError(f"nothing left to generate: a vocabulary of {n} holds only <pad>/<bos> ids {banned}")
    out = logits.clone()
    out[..., banned] = float("-inf")
    return out


def check_logits_and_generated(logits: Tensor, generated: Tensor) -> None:
    """Raise ``ValueError`` unless ``logits`` is ``(batch, V)`` and ``generated`` ``(batch, t)``."""
    if logits.dim() != 2 or generated.dim() != 2 or generated.size(0) != logits.size(0):
        raise ValueError(
            f"logits must be (batch, V) and generated (batch, t) with the same batch; got "
            f"{tuple(logits.shape)} and {tuple(generated.shape)}"
        )


def constrain_logits(logits: Tensor, generated: Tensor, config: GenerationConfig) -> Tensor:
    """The rules of ``config`` applied to next-token logits (or log-probabilities) ``(rows, V)``.

    In this order: :func:`forbid_special_tokens`, :func:`apply_repetition_penalty`
    (when ``config.repetition_penalty != 1``), :func:`block_repeated_ngrams`
    (when ``config.no_repeat_ngram_size``); ``generated`` ``(rows, t)`` holds
    the tokens so far, without ``<bos>``.
    """
    logits = forbid_special_tokens(logits, config.pad_id, config.bos_id, config.eos_id)  # never <pad>/<bos>
    if config.repetition_penalty != 1.0:
        logits = apply_repetition_penalty(
            logits, generated, config.repetition_penalty, ignore_ids=(config.pad_id, config.bos_id)
        )
    if config.no_repeat_ngram_size:
        logits = block_repeated_ngrams(logits, generated, config.no_repeat_ngram_size)
    return logits


def next_tokens(logits: Tensor, generated: Tensor, config: GenerationConfig, generator: torch.Generator | None = None) -> Tensor:
    """One token per row, ``(rows,)`` long: :func:`constrain_logits`, then the argmax or a draw.

    With ``config.do_sample`` the draw is :func:`choose_next_token` (temperature,
    top-k, top-p) using ``generator``; otherwise the argmax (greedy decoding).
    """
    logits = constrain_logits(logits, generated, config)  # (rows, V)
    if not config.do_sample:
        return logits.argmax(dim=-1)  # (rows,)
    return choose_next_token(logits, config.temperature, config.top_k, config.top_p, generator)
