"""One token per step: greedy decoding (the argmax) or sampling (chapter 10)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..validation import check_token_ids
from .config import GenerationConfig
from .logits import next_tokens
from .steps import eval_mode, keep_rows, max_new_tokens, next_token_logits, open_cache, source_mask_for, still_running

__all__ = ["generate", "greedy_decode", "sample", "check_generate_inputs"]


def check_generate_inputs(src: Tensor, config: GenerationConfig) -> None:
    """Raise ``ValueError`` unless ``src`` is ``(batch, src_len)`` integer ids and ``config.beam_size == 1``.

    A plain call, not :func:`course_lib.validation.checked_by`: the model's own
    entry points (``encode``, ``decode``) still check what they receive.
    """
    check_token_ids(src, "src")
    if config.beam_size != 1:
        raise ValueError(f"generate picks one token per step; for beam_size={config.beam_size} use beam_generate")


def generate(
    model: nn.Module,
    src: Tensor,
    config: GenerationConfig = GenerationConfig(),
    *,
    src_mask: Tensor | None = None,
    generator: torch.Generator | None = None,
    return_logits: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Generate one token per step for a batch: greedy decoding, or sampling with ``config.do_sample``.

    The encoder runs once; each step scores the next token of every running
    row, picks one (:func:`next_tokens`), appends it, and drops the rows that
    produced ``<eos>`` from the computation.

    Args:
        model: an encoder-decoder (see the module docstring); switched to eval
            mode and ``no_grad`` for the call, then restored.
        src: source ids ``(batch, src_len)``, integer, padded with ``config.pad_id``.
        config: a :class:`GenerationConfig` with ``beam_size=1`` (for beams: :func:`beam_generate`).
        src_mask: bool ``(batch, 1, 1, src_len)``, ``True`` = real token;
            default ``model.source_mask(src)`` or the padding mask.
        generator: a :class:`torch.Generator` for reproducible draws (sampling).
        return_logits: also return the logits of every step.

    Returns:
        ids ``(batch, out_len)`` (no ``<bos>``; ``<eos>`` then ``pad_id`` for
        finished rows); with ``return_logits``, also a float32 tensor
        ``(batch, out_len, V)`` of the model's next-token logits of each step
        (before :func:`constrain_logits`; zeros for rows already finished).

    Raises:
        ValueError: ``src`` not 2-D integer, ``config.max_len`` beyond the
            model's positions, ``config.beam_size > 1``.

    Source: chapter 10.
    """
    check_generate_inputs(src, config)
    n_new = max_new_tokens(model, src.size(1), config.max_len)
    batch, device = src.size(0), src.device
    with eval_mode(model):
        src_mask = source_mask_for(model, src, src_mask, config.pad_id)
        memory = model.encode(src, src_mask=src_mask)  # (batch, src_len, d_model): the encoder runs once
        cache = open_cache(model, config.use_cache)
        out = torch.full((batch, n_new), config.pad_id, dtype=torch.long, device=device)  # (batch, n_new)
        alive = torch.arange(batch, device=device)  # (rows,): the original rows still generating
        ys = torch.full((batch, 1), config.bos_id, dtype=torch.long, device=device)  # (rows, 1 + t): their prefixes
        all_logits, steps = [], 0
        for t in range(n_new):
            logits = next_token_logits(model, ys, memory, src_mask, cache)  # (rows, V)
            if return_logits:
                all_logits.append(logits.new_zeros(batch, logits.size(-1)).index_copy(0, alive, logits))
            token = next_tokens(logits, ys[:, 1:], config, generator)  # (rows,)
            out[alive, t] = token
            ys = torch.cat([ys, token[:, None]], dim=1)
            steps = t + 1
            running = still_running(token, config.eos_id)
            if not bool(running.any()):
                break
            if not bool(running.all()):  # finished rows leave the computation
                alive, ys, memory, src_mask = keep_rows(running, cache, alive, ys, memory, src_mask)
    out = out[:, :steps]
    return (out, torch.stack(all_logits, dim=1)) if return_logits else out


def greedy_decode(
    model: nn.Module, src: Tensor, max_len: int | None = None, *, bos_id: int = 1, eos_id: int | None = 2,
    pad_id: int = 0, src_mask: Tensor | None = None, use_cache: bool | None = None, repetition_penalty: float = 1.0,
    no_repeat_ngram_size: int = 0, return_logits: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Translate a batch by always taking the most likely next token (:func:`generate`).

    Args:
        model, src, src_mask, return_logits: as :func:`generate`.
        max_len, bos_id, eos_id, pad_id, use_cache, repetition_penalty,
            no_repeat_ngram_size: the fields of :class:`GenerationConfig`.

    Returns:
        as :func:`generate`.

    Raises:
        ValueError: ``src`` not 2-D integer, ``max_len`` beyond the model's
            positions, a negative ``no_repeat_ngram_size``.

    Source: chapter 10.
    """
    config = GenerationConfig(
        max_len=max_len, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id, use_cache=use_cache,
        repetition_penalty=repetition_penalty, no_repeat_ngram_size=no_repeat_ngram_size,
    )
    return generate(model, src, config, src_mask=src_mask, return_logits=return_logits)


def sample(
    model: nn.Module, src: Tensor, max_len: int | None = None, *, temperature: float = 1.0, top_k: int | None = None,
    top_p: float | None = None, repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0,
    generator: torch.Generator | None = None, bos_id: int = 1, eos_id: int | None = 2, pad_id: int = 0,
    src_mask: Tensor | None = None, use_cache: bool | None = None,
) -> Tensor:
    """Translate a batch by sampling each next token (:func:`generate` with ``do_sample=True``).

    ``temperature=0`` gives exactly :func:`greedy_decode`; ``top_k`` larger
    than the vocabulary is clamped; ``top_p`` keeps the smallest set of tokens
    whose probability reaches ``top_p``. ``<pad>`` and ``<bos>`` are set to
    ``-inf`` before temperature and filters, so they are never drawn and the
    softmax renormalises over the other tokens.

    Args:
        model, src, src_mask, generator: as :func:`generate`.
        the others: the fields of :class:`GenerationConfig`.

    Returns:
        ids ``(batch, out_len)``, as :func:`greedy_decode`.

    Raises:
        ValueError: bad ``temperature``, ``top_k``, ``top_p``, or as :func:`greedy_decode`.

    Source: chapter 10; Holtzman et al. (2020); Fan et al. (2018).
    """
    config = GenerationConfig(
        max_len=max_len, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id, use_cache=use_cache, do_sample=True,
        temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=repetition_penalty,
        no_repeat_ngram_size=no_repeat_ngram_size,
    )
    return generate(model, src, config, src_mask=src_mask, generator=generator)
