"""Generating translations with a trained encoder-decoder (chapter 10).

* :func:`greedy_decode` - the most likely next token, one at a time.
* :func:`beam_search` - keep the ``beam_size`` best partial translations,
  with a length penalty; finished hypotheses are kept until no open one can
  beat them.
* :func:`sample` - draw the next token (temperature, top-k, top-p).
* :func:`apply_repetition_penalty`, :func:`block_repeated_ngrams`,
  :func:`top_k_filter`, :func:`top_p_filter` - the logit transformations
  used by the decoders.

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

The model must provide ``encode(src, src_mask) -> memory`` and
``decode(tgt, memory, src_mask, tgt_mask=None[, cache]) -> logits``, like
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
from typing import Callable

import torch
from torch import Tensor, nn

__all__ = [
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
    if logits.dim() != 2 or generated.dim() != 2 or generated.size(0) != logits.size(0):
        raise ValueError(
            f"logits must be (batch, V) and generated (batch, t) with the same batch; got "
            f"{tuple(logits.shape)} and {tuple(generated.shape)}"
        )
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
    ngram_size = _as_ngram_size(ngram_size, "ngram_size")
    if logits.dim() != 2 or generated.dim() != 2 or generated.size(0) != logits.size(0):
        raise ValueError(
            f"logits must be (batch, V) and generated (batch, t) with the same batch; got "
            f"{tuple(logits.shape)} and {tuple(generated.shape)}"
        )
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
# Shared helpers
# --------------------------------------------------------------------------
def _check_src(src: Tensor) -> None:
    if not isinstance(src, Tensor) or src.dim() != 2:
        shape = tuple(src.shape) if isinstance(src, Tensor) else type(src).__name__
        raise ValueError(f"src must be token ids of shape (batch, src_len); got {shape}")
    if src.dtype.is_floating_point or src.dtype == torch.bool:
        raise ValueError(f"src must be an integer tensor; got dtype {src.dtype}")


def _source_mask(model: nn.Module, src: Tensor, src_mask: Tensor | None, pad_id: int | None) -> Tensor | None:
    if src_mask is not None:
        return src_mask
    if hasattr(model, "source_mask"):
        return model.source_mask(src)
    if pad_id is None:
        return None
    from .masks import padding_mask

    return padding_mask(src, pad_id)


def _default_max_len(model: nn.Module, src: Tensor, max_len: int | None) -> int:
    if max_len is not None:
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1; got {max_len}")
        limit = getattr(getattr(model, "config", None), "max_len", None)
        if limit is not None and max_len > limit - 1:
            raise ValueError(f"max_len={max_len} needs {max_len + 1} positions but the model has max_len={limit}")
        return max_len
    # The paper: "maximum output length to input length + 50" (section 6.1).
    n = src.size(1) + 50
    limit = getattr(getattr(model, "config", None), "max_len", None)
    return min(n, limit - 1) if limit is not None else n


@contextlib.contextmanager
def _eval_mode(model: nn.Module):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _new_cache(model: nn.Module, use_cache: bool | None):
    if use_cache is False:
        return None
    if not hasattr(model, "new_cache"):
        if use_cache:
            raise ValueError(f"use_cache=True needs a model with new_cache(); {type(model).__name__} has none")
        return None
    return model.new_cache()


def _step_logits(model, ys: Tensor, memory: Tensor, src_mask: Tensor | None, cache) -> Tensor:
    """Logits ``(rows, V)`` for the next position, given the prefixes ``ys`` (with ``<bos>``)."""
    if cache is not None:
        return model.decode(ys[:, -1:], memory, src_mask, cache=cache)[:, -1]
    return model.decode(ys, memory, src_mask)[:, -1]


def _as_ngram_size(n: int, name: str) -> int:
    """``n`` as a Python int >= 0 (NumPy and torch integers accepted), else ``ValueError`` naming ``name``."""
    import operator

    try:
        value = operator.index(n)
    except TypeError:
        value = None
    if isinstance(n, bool) or value is None or value < 0:
        raise ValueError(f"{name} must be an int >= 0 (0 = off); got {n!r}")
    return value


def _check_ngram_size(n: int) -> int:
    return _as_ngram_size(n, "no_repeat_ngram_size")


def _select_rows(mask: Tensor | None, rows: Tensor) -> Tensor | None:
    if mask is None or mask.size(0) == 1:
        return mask
    return mask.index_select(0, rows)


def _generate(
    model: nn.Module,
    src: Tensor,
    choose: Callable[[Tensor], Tensor],
    max_len: int | None,
    bos_id: int,
    eos_id: int | None,
    pad_id: int,
    src_mask: Tensor | None,
    use_cache: bool | None,
    repetition_penalty: float,
    return_logits: bool,
    no_repeat_ngram_size: int = 0,
) -> Tensor | tuple[Tensor, Tensor]:
    _check_src(src)
    no_repeat_ngram_size = _check_ngram_size(no_repeat_ngram_size)
    n_new = _default_max_len(model, src, max_len)
    batch = src.size(0)
    device = src.device
    with _eval_mode(model):
        src_mask = _source_mask(model, src, src_mask, pad_id)
        memory = model.encode(src, src_mask)
        cache = _new_cache(model, use_cache)
        out = torch.full((batch, n_new), pad_id, dtype=torch.long, device=device)
        all_logits = [] if return_logits else None
        alive = torch.arange(batch, device=device)  # original rows still generating
        ys = torch.full((batch, 1), bos_id, dtype=torch.long, device=device)  # prefixes of alive rows
        mem, mask = memory, src_mask
        steps = 0
        for t in range(n_new):
            logits = _step_logits(model, ys, mem, mask, cache).float()
            if all_logits is not None:
                full = logits.new_zeros(batch, logits.size(-1))
                full[alive] = logits
                all_logits.append(full)
            logits = forbid_special_tokens(logits, pad_id, bos_id, eos_id)  # never <pad>/<bos>
            if repetition_penalty != 1.0:
                logits = apply_repetition_penalty(logits, ys[:, 1:], repetition_penalty, ignore_ids=(pad_id, bos_id))
            if no_repeat_ngram_size:
                logits = block_repeated_ngrams(logits, ys[:, 1:], no_repeat_ngram_size)
            token = choose(logits)
            out[alive, t] = token
            ys = torch.cat([ys, token[:, None]], dim=1)
            steps = t + 1
            if eos_id is None:
                continue
            running = token != eos_id
            if not bool(running.all()):
                if not bool(running.any()):
                    break
                keep = running.nonzero().squeeze(-1)
                alive, ys, mem = alive[keep], ys[keep], mem[keep]
                mask = _select_rows(mask, keep)
                if cache is not None:
                    cache.reorder(keep)
        out = out[:, :steps]
        if all_logits is not None:
            return out, torch.stack(all_logits, dim=1)
        return out


# --------------------------------------------------------------------------
# Decoders
# --------------------------------------------------------------------------
def greedy_decode(
    model: nn.Module,
    src: Tensor,
    max_len: int | None = None,
    *,
    bos_id: int = 1,
    eos_id: int | None = 2,
    pad_id: int = 0,
    src_mask: Tensor | None = None,
    use_cache: bool | None = None,
    repetition_penalty: float = 1.0,
    no_repeat_ngram_size: int = 0,
    return_logits: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Translate a batch by always taking the most likely next token.

    Args:
        model: an encoder-decoder (see the module docstring); switched to eval
            mode and ``no_grad`` for the call, then restored.
        src: source ids ``(batch, src_len)``, long, padded with ``pad_id``.
        max_len: most tokens to generate (default ``src_len + 50``, as the
            paper, capped by the model's ``config.max_len - 1``).
        bos_id, eos_id, pad_id: special ids (course default 1, 2, 0);
            ``eos_id=None`` never stops early (always ``max_len`` tokens).
            ``<pad>`` and ``<bos>`` are never generated (their logits are
            set to ``-inf``, :func:`forbid_special_tokens`); ``pad_id`` only
            fills the output after ``<eos>``.
        src_mask: bool ``(batch, 1, 1, src_len)``, ``True`` = real token;
            default ``model.source_mask(src)`` or the padding mask.
        use_cache: KV-cached incremental decoding (``True``), recompute the
            whole prefix each step (``False``), or ``None`` (default): the
            cache whenever the model has ``new_cache()``.
        repetition_penalty: see :func:`apply_repetition_penalty` (1.0 = off).
        no_repeat_ngram_size: see :func:`block_repeated_ngrams` (0 = off).
        return_logits: also return the logits of every step.

    Returns:
        ids ``(batch, out_len)`` (no ``<bos>``; ``<eos>`` then ``pad_id`` for
        finished rows); with ``return_logits``, also a float32 tensor
        ``(batch, out_len, V)`` of the next-token logits of each step (the
        model's, before the ``<pad>``/``<bos>`` ban, the repetition penalty
        and n-gram blocking; zeros for rows that had already finished).

    Raises:
        ValueError: ``src`` not 2-D integer, ``max_len`` beyond the model's
            positions, a negative ``no_repeat_ngram_size``.

    Source: chapter 10.
    """
    return _generate(
        model, src, lambda logits: logits.argmax(dim=-1), max_len, bos_id, eos_id, pad_id,
        src_mask, use_cache, repetition_penalty, return_logits, no_repeat_ngram_size,
    )


def sample(
    model: nn.Module,
    src: Tensor,
    max_len: int | None = None,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float = 1.0,
    no_repeat_ngram_size: int = 0,
    generator: torch.Generator | None = None,
    bos_id: int = 1,
    eos_id: int | None = 2,
    pad_id: int = 0,
    src_mask: Tensor | None = None,
    use_cache: bool | None = None,
) -> Tensor:
    """Translate a batch by sampling each next token (see :func:`choose_next_token`).

    ``temperature=0`` gives exactly :func:`greedy_decode`; ``top_k`` larger
    than the vocabulary is clamped; ``top_p`` keeps the smallest set of tokens
    whose probability reaches ``top_p``. ``<pad>`` and ``<bos>`` are set to
    ``-inf`` before temperature and filters, so they are never drawn and the
    softmax renormalises over the other tokens.

    Args:
        model, src, max_len, bos_id, eos_id, pad_id, src_mask, use_cache,
            repetition_penalty, no_repeat_ngram_size: as :func:`greedy_decode`.
        temperature: ``>= 0``.
        top_k: ``None``/0 = off.
        top_p: in ``(0, 1]``; ``None``/1 = off.
        generator: for reproducible draws.

    Returns:
        ids ``(batch, out_len)``, as :func:`greedy_decode`.

    Raises:
        ValueError: bad ``temperature``, ``top_k``, ``top_p``, or as :func:`greedy_decode`.

    Source: chapter 10; Holtzman et al. (2020); Fan et al. (2018).
    """
    if not temperature >= 0:  # also rejects NaN
        raise ValueError(f"temperature must be >= 0 (0 = argmax); got {temperature}")
    if top_k is not None and top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 or None = off); got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1]; got {top_p}")
    return _generate(
        model, src, lambda logits: choose_next_token(logits, temperature, top_k, top_p, generator),
        max_len, bos_id, eos_id, pad_id, src_mask, use_cache, repetition_penalty, False, no_repeat_ngram_size,
    )


def beam_search(
    model: nn.Module,
    src: Tensor,
    beam_size: int = 4,
    max_len: int | None = None,
    *,
    length_penalty_alpha: float = 0.6,
    bos_id: int = 1,
    eos_id: int = 2,
    pad_id: int = 0,
    src_mask: Tensor | None = None,
    use_cache: bool | None = None,
    no_repeat_ngram_size: int = 0,
    return_scores: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Beam search with the GNMT length penalty; returns the best hypothesis per source.

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
        model, src, max_len, bos_id, eos_id, pad_id, src_mask, use_cache: as
            :func:`greedy_decode`.
        beam_size: hypotheses kept per source sentence (paper: 4).
        length_penalty_alpha: ``alpha`` of :func:`length_penalty` (paper: 0.6;
            0 = raw log-probabilities).
        no_repeat_ngram_size: no hypothesis repeats an n-gram of this size
            (:func:`block_repeated_ngrams` on each hypothesis' log-probabilities;
            0 = off).
        return_scores: also return the best scores.

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
    _check_src(src)
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be an int >= 1; got {beam_size!r}")
    no_repeat_ngram_size = _check_ngram_size(no_repeat_ngram_size)
    n_new = _default_max_len(model, src, max_len)
    batch, k = src.size(0), beam_size
    device = src.device
    neg_inf = float("-inf")
    with _eval_mode(model):
        src_mask = _source_mask(model, src, src_mask, pad_id)
        memory = model.encode(src, src_mask)
        rows = torch.arange(batch, device=device).repeat_interleave(k)  # (batch * k,)
        memory = memory.index_select(0, rows)
        mask = _select_rows(src_mask, rows)
        cache = _new_cache(model, use_cache)
        ys = torch.full((batch * k, 1), bos_id, dtype=torch.long, device=device)
        beam_logp = torch.full((batch, k), neg_inf, device=device)
        beam_logp[:, 0] = 0.0  # one open hypothesis (<bos>) per sentence at the start
        best_score = torch.full((batch,), neg_inf, device=device)
        best_tokens: list[Tensor | None] = [None] * batch
        done = torch.zeros(batch, dtype=torch.bool, device=device)
        offsets = (torch.arange(batch, device=device) * k)[:, None]  # (batch, 1)
        for t in range(1, n_new + 1):
            logits = _step_logits(model, ys, memory, mask, cache).float()
            logp = forbid_special_tokens(torch.log_softmax(logits, dim=-1), pad_id, bos_id, eos_id)  # (batch * k, V)
            if no_repeat_ngram_size:
                logp = block_repeated_ngrams(logp, ys[:, 1:], no_repeat_ngram_size)
            vocab = logp.size(-1)
            cand = (beam_logp[:, :, None] + logp.view(batch, k, vocab)).view(batch, k * vocab)
            top_scores, top_idx = cand.topk(k, dim=-1)  # (batch, k)
            parent = torch.div(top_idx, vocab, rounding_mode="floor")
            token = top_idx % vocab
            flat_parent = (offsets + parent).view(-1)
            ys = torch.cat([ys.index_select(0, flat_parent), token.view(-1, 1)], dim=1)
            if cache is not None:
                cache.reorder(flat_parent)
            valid = top_scores > neg_inf
            finishing = valid & (token == eos_id) if t < n_new else valid
            if bool(finishing.any()):
                norm = top_scores / length_penalty(t, length_penalty_alpha)
                norm = norm.masked_fill(~finishing, neg_inf)
                cand_best, cand_slot = norm.max(dim=-1)
                improved = (cand_best > best_score).nonzero().squeeze(-1).tolist()
                for b in improved:
                    best_score[b] = cand_best[b]
                    best_tokens[b] = ys[b * k + int(cand_slot[b]), 1:].clone()
            beam_logp = top_scores.masked_fill(finishing, neg_inf)
            # Can the best open hypothesis still beat the best finished one?
            open_best = beam_logp.max(dim=-1).values
            if length_penalty_alpha >= 0:
                bound = open_best / length_penalty(n_new, length_penalty_alpha)
            else:
                bound = open_best / length_penalty(t + 1, length_penalty_alpha)
            done = done | (open_best == neg_inf) | (best_score >= bound)
            beam_logp = beam_logp.masked_fill(done[:, None], neg_inf)
            if bool(done.all()):
                break
        out_len = max((int(x.numel()) for x in best_tokens if x is not None), default=0)
        out = torch.full((batch, out_len), pad_id, dtype=torch.long, device=device)
        for b, toks in enumerate(best_tokens):
            if toks is not None:
                out[b, : toks.numel()] = toks
    if return_scores:
        return out, best_score
    return out
