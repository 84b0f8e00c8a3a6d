"""Generating translations with a trained encoder-decoder (chapter 10).

* :class:`GenerationConfig` - every decoding setting in one record, checked
  once when it is built.
* :func:`generate` - one token per step: greedy decoding (the argmax) or,
  with ``do_sample=True``, sampling (temperature, top-k, top-p).
* :func:`beam_generate` - keep the ``beam_size`` best partial translations,
  with a length penalty; finished hypotheses are kept until no open one can
  beat them.
* :func:`greedy_decode`, :func:`sample`, :func:`beam_search` - the same with
  keyword arguments (they build the :class:`GenerationConfig`).
* :func:`apply_repetition_penalty`, :func:`block_repeated_ngrams`,
  :func:`top_k_filter`, :func:`top_p_filter` - the logit transformations
  used by the decoders (:func:`constrain_logits`, :func:`choose_next_token`).

**Special tokens.** No decoder ever generates ``<pad>`` or ``<bos>``:
every step sets their logits (beam search: their log-probabilities) to
``-inf`` (:func:`forbid_special_tokens`) before the repetition penalty,
n-gram blocking and the choice (argmax, sampling with
temperature/top-k/top-p, or the beam's top-k). A generated
``<pad>`` would be read as padding when the prefix is recomputed (the
decoder's default mask hides it) but not by the KV cache, so the two paths
would disagree after it; ``<bos>`` only ever starts a prefix. The
exception is an id equal to ``eos_id`` (e.g. ``pad_id == eos_id``): ending
the sequence stays possible.

All decoders work on a batch and stop each sequence at its own ``<eos>``
(greedy decoding and sampling drop finished rows from the computation; beam
search stops expanding a finished sentence). By default they use the model's
KV cache when it has one: the source is encoded once and each step feeds only
the newest token (``model.new_cache()`` + ``model.decode(..., cache=cache)``).
``use_cache=False`` recomputes the whole prefix every step (same results, up
to float rounding; slower).

The model must provide ``encode(src, *, src_mask) -> memory`` and
``decode(tgt, memory, *, memory_mask[, cache]) -> logits`` (masks passed by
keyword, as everywhere in the course), like
:class:`course_lib.model.Transformer`; ``new_cache()`` is needed only with
``use_cache=True``.

Outputs: token ids of shape ``(batch, out_len)``, *without* the leading
``<bos>``, *with* the ``<eos>`` of each finished sequence, padded with
``pad_id`` after it; ``out_len`` is the longest generated length.

Mask convention (see :mod:`course_lib.masks`): bool, ``True`` = may attend;
``src_mask`` of shape ``(batch, 1, 1, src_len)``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .validation import as_int, check_choice, check_number, check_token_ids, model_setting

__all__ = [
    "GenerationConfig",
    "generate",
    "beam_generate",
    "next_tokens",
    "constrain_logits",
    "FinishedHypotheses",
    "apply_repetition_penalty",
    "block_repeated_ngrams",
    "top_k_filter",
    "top_p_filter",
    "choose_next_token",
    "forbid_special_tokens",
    "length_penalty",
    "greedy_decode",
    "beam_search",
    "sample",
]


# --------------------------------------------------------------------------
# Logit transformations
# --------------------------------------------------------------------------
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
    if not penalty > 0:
        raise ValueError(f"penalty must be > 0; got {penalty}")
    check_logits_and_generated(logits, generated)
    if penalty == 1.0 or generated.size(1) == 0:
        return logits.clone()
    seen = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, generated.long(), True)
    for i in ignore_ids:
        if 0 <= i < logits.size(1):
            seen[:, i] = False
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


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
    ngram_size = as_int(ngram_size, "ngram_size", 0, hint=" (0 = off)")
    check_logits_and_generated(logits, generated)
    n = ngram_size
    if n == 0 or generated.size(1) < n:
        return logits.clone()
    if generated.numel() and (int(generated.min()) < 0 or int(generated.max()) >= logits.size(1)):
        raise ValueError(
            f"generated must hold token ids in [0, {logits.size(1)}) (the logits' vocabulary); got ids from "
            f"{int(generated.min())} to {int(generated.max())}"
        )
    grams = generated.long().unfold(1, n, 1)  # (batch, t - n + 1, n): every n-gram so far
    if n == 1:
        match = torch.ones(grams.shape[:2], dtype=torch.bool, device=grams.device)
    else:
        prefix = generated[:, generated.size(1) - (n - 1):].long()  # (batch, n - 1): the last n - 1 tokens
        match = (grams[:, :, :-1] == prefix[:, None, :]).all(dim=-1)  # (batch, t - n + 1)
    hits = torch.zeros(logits.shape, dtype=torch.int32, device=logits.device)
    hits.scatter_add_(1, grams[:, :, -1], match.to(torch.int32))
    banned = hits > 0
    banned &= ~(banned | (logits == float("-inf"))).all(dim=-1, keepdim=True)
    return logits.masked_fill(banned, float("-inf"))


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
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 or None = off); got {top_k}")
    k = min(int(top_k), logits.size(-1))
    kth = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


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
        if top_p is not None and top_p > 1.0:
            raise ValueError(f"top_p must be in (0, 1]; got {top_p}")
        return logits.clone()
    if not top_p > 0.0:
        raise ValueError(f"top_p must be in (0, 1]; got {top_p}")
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = torch.softmax(sorted_logits.float(), dim=-1)
    before = probs.cumsum(dim=-1) - probs  # probability mass strictly before each token
    remove_sorted = before >= top_p
    remove = torch.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))


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
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = argmax); got {temperature}")
    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = top_p_filter(top_k_filter(logits.float() / temperature, top_k), top_p)
    probs = torch.softmax(scaled, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


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


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT length penalty ``lp(L) = ((5 + L) / 6) ** alpha``; beam scores are ``log p / lp(L)``.

    ``alpha = 0`` gives 1 (raw log-probabilities, which favour short outputs);
    larger ``alpha`` favours longer ones. The paper uses ``alpha = 0.6``.

    Source: Wu et al. (2016), "Google's Neural Machine Translation System",
    section 7; Vaswani et al. (2017), section 6.1.
    """
    return ((5.0 + length) / 6.0) ** alpha


# --------------------------------------------------------------------------
# One generation configuration
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class GenerationConfig:
    """How to generate: one record shared by every decoder, :class:`course_lib.translate.Translator` and the CLI.

    Checked once, when it is built (``__post_init__``); a bad value raises
    ``ValueError`` naming the field.

    Attributes:
        max_len: most tokens to generate; ``None`` = ``src_len + 50`` (the
            paper), capped by the model's ``config.max_len - 1``.
        bos_id, eos_id, pad_id: special ids (course default 1, 2, 0);
            ``eos_id=None`` never stops early. ``<pad>`` and ``<bos>`` are
            never generated (:func:`forbid_special_tokens`); ``pad_id`` only
            fills the output after ``<eos>``.
        use_cache: KV-cached incremental decoding (``True``), recompute the
            whole prefix each step (``False``), or ``None``: the cache whenever
            the model has ``new_cache()``.
        repetition_penalty: ``> 0``, 1.0 = off (:func:`apply_repetition_penalty`).
        no_repeat_ngram_size: ``>= 0``, 0 = off (:func:`block_repeated_ngrams`).
        do_sample: draw each next token (:func:`choose_next_token`) instead of the argmax.
        temperature, top_k, top_p: sampling only (``>= 0``; ``None``/0 = off;
            in ``(0, 1]``, ``None``/1 = off).
        beam_size: 1 = one token per step (:func:`generate`); more = beam
            search (:func:`beam_generate`), with neither sampling nor a
            repetition penalty.
        length_penalty_alpha: beam search only: ``alpha`` of :func:`length_penalty`.

    Source: chapter 10.
    """

    max_len: int | None = None
    bos_id: int = 1
    eos_id: int | None = 2
    pad_id: int = 0
    use_cache: bool | None = None
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    beam_size: int = 1
    length_penalty_alpha: float = 0.6

    def __post_init__(self) -> None:
        ints = {"bos_id": (self.bos_id, 0, ""), "pad_id": (self.pad_id, 0, ""), "eos_id": (self.eos_id, 0, ""),
                "max_len": (self.max_len, 1, ""), "top_k": (self.top_k, 0, " (0 or None = off)"),
                "no_repeat_ngram_size": (self.no_repeat_ngram_size, 0, " (0 = off)")}
        for name, (value, low, hint) in ints.items():
            if value is not None:  # NumPy and torch integers become Python ints
                object.__setattr__(self, name, as_int(value, name, low, hint=hint))
        check_choice(self.use_cache, "use_cache", (None, True, False))
        check_choice(self.do_sample, "do_sample", (True, False))
        check_number(self.repetition_penalty, "repetition_penalty", low=0, low_inclusive=False)
        check_number(self.length_penalty_alpha, "length_penalty_alpha")
        if not self.temperature >= 0:  # also rejects NaN
            raise ValueError(f"temperature must be >= 0 (0 = argmax); got {self.temperature}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1]; got {self.top_p}")
        if isinstance(self.beam_size, bool) or not isinstance(self.beam_size, int) or self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1 (an int; 1 = greedy or sampling); got {self.beam_size!r}")
        self._check_combination()

    def _check_combination(self) -> None:
        if self.beam_size > 1 and self.do_sample:
            raise ValueError(f"choose beam search (beam_size={self.beam_size}) or sampling (do_sample=True), not both")
        if self.beam_size > 1 and self.repetition_penalty != 1.0:
            raise ValueError(
                f"repetition_penalty={self.repetition_penalty} needs greedy decoding or sampling (beam_size=1); "
                f"beam search here has no repetition penalty"
            )
        if not self.do_sample:
            given = [name for name, value in (("temperature", None if self.temperature == 1.0 else self.temperature),
                                              ("top_k", self.top_k), ("top_p", self.top_p)) if value is not None]
            if given:
                verb = "applies" if len(given) == 1 else "apply"
                raise ValueError(f"{', '.join(given)} only {verb} when sampling: pass do_sample=True")


# --------------------------------------------------------------------------
# The pieces of a generation loop
# --------------------------------------------------------------------------
NEG_INF = float("-inf")


def check_logits_and_generated(logits: Tensor, generated: Tensor) -> None:
    """Raise ``ValueError`` unless ``logits`` is ``(batch, V)`` and ``generated`` ``(batch, t)``."""
    if logits.dim() != 2 or generated.dim() != 2 or generated.size(0) != logits.size(0):
        raise ValueError(
            f"logits must be (batch, V) and generated (batch, t) with the same batch; got "
            f"{tuple(logits.shape)} and {tuple(generated.shape)}"
        )


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
    from .masks import padding_mask

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
    logits = constrain_logits(logits, generated, config)
    if not config.do_sample:
        return logits.argmax(dim=-1)
    return choose_next_token(logits, config.temperature, config.top_k, config.top_p, generator)


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


# --------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------
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
    check_token_ids(src, "src")
    if config.beam_size != 1:
        raise ValueError(f"generate picks one token per step; for beam_size={config.beam_size} use beam_generate")
    n_new = max_new_tokens(model, src.size(1), config.max_len)
    batch, device = src.size(0), src.device
    with eval_mode(model):
        src_mask = source_mask_for(model, src, src_mask, config.pad_id)
        memory = model.encode(src, src_mask=src_mask)  # the encoder runs once
        cache = open_cache(model, config.use_cache)
        out = torch.full((batch, n_new), config.pad_id, dtype=torch.long, device=device)
        alive = torch.arange(batch, device=device)  # the original rows still generating
        ys = torch.full((batch, 1), config.bos_id, dtype=torch.long, device=device)  # their prefixes
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
    check_token_ids(src, "src")
    n_new = max_new_tokens(model, src.size(1), config.max_len)
    batch, k, alpha, device = src.size(0), config.beam_size, config.length_penalty_alpha, src.device
    with eval_mode(model):
        src_mask = source_mask_for(model, src, src_mask, config.pad_id)
        memory, mask = repeat_for_beams(model.encode(src, src_mask=src_mask), src_mask, k)  # (batch * k, ...)
        cache = open_cache(model, config.use_cache)
        ys = torch.full((batch * k, 1), config.bos_id, dtype=torch.long, device=device)
        beam_logp = torch.full((batch, k), NEG_INF, device=device)
        beam_logp[:, 0] = 0.0  # one open hypothesis (<bos>) per sentence at the start
        finished = FinishedHypotheses(batch, device)
        done = torch.zeros(batch, dtype=torch.bool, device=device)
        offsets = (torch.arange(batch, device=device) * k)[:, None]  # (batch, 1): first row of each sentence
        for t in range(1, n_new + 1):
            logits = next_token_logits(model, ys, memory, mask, cache)
            logp = constrain_logits(torch.log_softmax(logits, dim=-1), ys[:, 1:], config)  # (batch * k, V)
            vocab = logp.size(-1)
            # expand: every open hypothesis by every token; keep the k best of the k * V candidates
            cand = (beam_logp[:, :, None] + logp.view(batch, k, vocab)).view(batch, k * vocab)
            top_logp, top_idx = cand.topk(k, dim=-1)  # (batch, k)
            parent = (offsets + torch.div(top_idx, vocab, rounding_mode="floor")).view(-1)
            token = top_idx % vocab
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


# --------------------------------------------------------------------------
# Decoders: keyword arguments -> one GenerationConfig
# --------------------------------------------------------------------------
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
