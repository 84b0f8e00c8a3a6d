"""Beam search: keep the ``beam_size`` best partial translations, with a length penalty (chapter 10)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..validation import check_token_ids
from .config import GenerationConfig
from .logits import constrain_logits
from .steps import eval_mode, max_new_tokens, next_token_logits, open_cache, select_rows, source_mask_for

__all__ = [
    "beam_generate",
    "beam_search",
    "length_penalty",
    "FinishedHypotheses",
    "repeat_for_beams",
    "search_is_over",
    "NEG_INF",
]


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT length penalty ``lp(L) = ((5 + L) / 6) ** alpha``; beam scores are ``log p / lp(L)``.

    ``alpha = 0`` gives 1 (raw log-probabilities, which favour short outputs);
    larger ``alpha`` favours longer ones. The paper uses ``alpha = 0.6``.

    Source: Wu et al. (2016), "Google's Neural Machine Translation System",
    section 7; Vaswani et al. (2017), section 6.1.
    """
    return ((5.0 + length) / 6.0) ** alpha


NEG_INF = float("-inf")


class FinishedHypotheses:
    """Beam search bookkeeping: the best finished hypothesis of each source sentence so far.

    ``score`` is float32 ``(batch,)`` (``-inf`` while none finished); the
    tokens (without ``<bos>``) are kept per sentence.
    """

    def __init__(self, batch: int, device: torch.device) -> None:
        self.score = torch.full((batch,), NEG_INF, device=device)
        self.tokens: list[Tensor | None] = [None] * batch

    def add(self, scores: Tensor, finishing: Tensor, ys: Tensor) -> None:
        """Keep, per sentence, its best finishing candidate if that beats the best so far.

        ``scores`` ``(batch, k)`` length-normalised, ``finishing`` ``(batch, k)``
        bool, ``ys`` ``(batch * k, 1 + t)`` the candidates' prefixes.
        """
        if not bool(finishing.any()):
            return
        k = scores.size(1)
        cand_best, cand_slot = scores.masked_fill(~finishing, NEG_INF).max(dim=-1)
        for b in (cand_best > self.score).nonzero().squeeze(-1).tolist():
            self.score[b] = cand_best[b]
            self.tokens[b] = ys[b * k + int(cand_slot[b]), 1:].clone()

    def padded(self, pad_id: int) -> Tensor:
        """The best hypotheses as ids ``(batch, out_len)``, padded with ``pad_id``."""
        out_len = max((int(x.numel()) for x in self.tokens if x is not None), default=0)
        out = torch.full((len(self.tokens), out_len), pad_id, dtype=torch.long, device=self.score.device)
        for b, toks in enumerate(self.tokens):
            if toks is not None:
                out[b, : toks.numel()] = toks
        return out


def repeat_for_beams(memory: Tensor, src_mask: Tensor | None, k: int) -> tuple[Tensor, Tensor | None]:
    """Each sentence's memory (and mask) ``k`` times in a row: batch ``b`` becomes rows ``b * k ... b * k + k - 1``."""
    rows = torch.arange(memory.size(0), device=memory.device).repeat_interleave(k)  # (batch * k,)
    return memory.index_select(0, rows), select_rows(src_mask, rows)


def search_is_over(open_logp: Tensor, best_score: Tensor, t: int, n_new: int, alpha: float) -> Tensor:
    """Bool ``(batch,)``: no open hypothesis left, or the best open one can no longer win.

    Log-probabilities only decrease, so an open hypothesis with ``log p = s``
    can at best score ``s / lp(n_new)`` (``alpha >= 0``; ``s / lp(t + 1)``
    for ``alpha < 0``). ``open_logp`` ``(batch, k)``, ``-inf`` = closed.
    """
    open_best = open_logp.max(dim=-1).values
    bound = open_best / length_penalty(n_new if alpha >= 0 else t + 1, alpha)
    return (open_best == NEG_INF) | (best_score >= bound)


def beam_generate(
    model: nn.Module,
    src: Tensor,
    config: GenerationConfig = GenerationConfig(beam_size=4),
    *,
    src_mask: Tensor | None = None,
    return_scores: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Beam search with ``config.beam_size`` hypotheses per sentence and the GNMT length penalty.

    Each step expands every open hypothesis by every token and keeps the
    ``k`` candidates with the highest total log-probability. A kept candidate
    ending in ``<eos>`` (every one, at the last step) is finished, scored
    ``log p / lp(L)`` (:func:`length_penalty`, ``L`` counting ``<eos>``), and
    leaves the beam (:class:`FinishedHypotheses`); a sentence is done when
    no open hypothesis can beat its best finished one (:func:`search_is_over`).

    Args:
        model, src, src_mask: as :func:`generate`.
        config: a :class:`GenerationConfig` (``beam_size``, ``length_penalty_alpha``,
            ``max_len``, the special ids, ``use_cache``, ``no_repeat_ngram_size``).
        return_scores: also return the best scores.

    Returns:
        ids ``(batch, out_len)`` as :func:`generate`; with ``return_scores``,
        also float32 ``(batch,)`` length-normalised log-probabilities.

    Source: chapter 10; Wu et al. (2016), section 7.
    """
    check_token_ids(src, "src")  # the model checks the rest when it encodes
    n_new = max_new_tokens(model, src.size(1), config.max_len)
    batch, k, alpha, device = src.size(0), config.beam_size, config.length_penalty_alpha, src.device
    with eval_mode(model):
        src_mask = source_mask_for(model, src, src_mask, config.pad_id)
        memory, mask = repeat_for_beams(model.encode(src, src_mask=src_mask), src_mask, k)  # (batch * k, ...)
        cache = open_cache(model, config.use_cache)
        ys = torch.full((batch * k, 1), config.bos_id, dtype=torch.long, device=device)  # (batch * k, 1 + t)
        beam_logp = torch.full((batch, k), NEG_INF, device=device)  # (batch, k): log p of each open hypothesis
        beam_logp[:, 0] = 0.0  # one open hypothesis (<bos>) per sentence at the start
        finished = FinishedHypotheses(batch, device)
        done = torch.zeros(batch, dtype=torch.bool, device=device)
        offsets = (torch.arange(batch, device=device) * k)[:, None]  # (batch, 1): first row of each sentence
        for t in range(1, n_new + 1):
            logits = next_token_logits(model, ys, memory, mask, cache)  # (batch * k, V)
            logp = constrain_logits(torch.log_softmax(logits, dim=-1), ys[:, 1:], config)  # (batch * k, V)
            vocab = logp.size(-1)
            # expand: every open hypothesis by every token; keep the k best of the k * V candidates
            cand = (beam_logp[:, :, None] + logp.view(batch, k, vocab)).view(batch, k * vocab)  # (batch, k * V)
            top_logp, top_idx = cand.topk(k, dim=-1)  # (batch, k)
            parent = (offsets + torch.div(top_idx, vocab, rounding_mode="floor")).view(-1)  # (batch * k,) rows
            token = top_idx % vocab  # (batch, k)
            ys = torch.cat([ys.index_select(0, parent), token.view(-1, 1)], dim=1)
            if cache is not None:
                cache.reorder(parent)
            # freeze the finished: a kept candidate ending in <eos>, or every one at the last step
            finishing = (top_logp > NEG_INF) & ((token == config.eos_id) | (t == n_new))
            finished.add(top_logp / length_penalty(t, alpha), finishing, ys)
            beam_logp = top_logp.masked_fill(finishing, NEG_INF)
            done = done | search_is_over(beam_logp, finished.score, t, n_new, alpha)
            beam_logp = beam_logp.masked_fill(done[:, None], NEG_INF)
            if bool(done.all()):
                break
    out = finished.padded(config.pad_id)
    return (out, finished.score) if return_scores else out


def beam_search(
    model: nn.Module, src: Tensor, beam_size: int = 4, max_len: int | None = None, *,
    length_penalty_alpha: float = 0.6, bos_id: int = 1, eos_id: int = 2, pad_id: int = 0,
    src_mask: Tensor | None = None, use_cache: bool | None = None, no_repeat_ngram_size: int = 0,
    return_scores: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Beam search with the GNMT length penalty (:func:`beam_generate`); the best hypothesis per source.

    Each step expands every open hypothesis by every token and keeps the
    ``beam_size`` candidates with the highest total log-probability. A kept
    candidate that ends in ``<eos>`` leaves the beam and joins the *finished*
    hypotheses, scored ``log p / lp(L)`` (:func:`length_penalty`, ``L`` counts
    the generated tokens including ``<eos>``); the others stay open. A source
    sentence is done when no open hypothesis remains or when the best open one
    *cannot win* any more: log-probabilities only decrease, so an open
    hypothesis with log-probability ``s`` can at best score
    ``s / lp(max_len)`` (``alpha >= 0``) - if the best finished score is at
    least that, the search stops. At ``max_len`` open hypotheses are finished
    as they are (without ``<eos>``).

    With ``beam_size=1`` the single kept candidate is the argmax, so the
    result equals :func:`greedy_decode` exactly.

    ``<pad>`` and ``<bos>`` are never generated: their log-probabilities
    are set to ``-inf`` (:func:`forbid_special_tokens`) without
    renormalising the others, so a score is still the model's own
    ``log p(hypothesis | source)`` (what teacher forcing computes) divided
    by the length penalty.

    Args:
        model, src, src_mask, return_scores: as :func:`beam_generate`.
        beam_size: hypotheses kept per source sentence (paper: 4).
        length_penalty_alpha: ``alpha`` of :func:`length_penalty` (paper: 0.6;
            0 = raw log-probabilities).
        no_repeat_ngram_size: no hypothesis repeats an n-gram of this size
            (:func:`block_repeated_ngrams` on each hypothesis' log-probabilities;
            0 = off).
        max_len, bos_id, eos_id, pad_id, use_cache: as :class:`GenerationConfig`.

    Returns:
        ids ``(batch, out_len)`` as :func:`greedy_decode`; with
        ``return_scores``, also float32 ``(batch,)`` length-normalised
        log-probabilities of the returned hypotheses.

    Raises:
        ValueError: ``beam_size < 1``, a negative ``no_repeat_ngram_size``,
            or as :func:`greedy_decode`.

    Source: Vaswani et al. (2017), section 6.1 ("beam search with a beam size
    of 4 and length penalty alpha = 0.6 ... terminate early when possible");
    Wu et al. (2016), section 7; chapter 10.
    """
    config = GenerationConfig(
        max_len=max_len, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id, use_cache=use_cache, beam_size=beam_size,
        length_penalty_alpha=length_penalty_alpha, no_repeat_ngram_size=no_repeat_ngram_size,
    )
    return beam_generate(model, src, config, src_mask=src_mask, return_scores=return_scores)
