"""Generating translations with a trained encoder-decoder (chapter 10).

One file per part, so that each search algorithm reads alone:
``greedy`` (:func:`generate`, greedy decoding and sampling), ``beam``
(:func:`beam_generate`), ``sampling`` (temperature, top-k, top-p), ``logits``
(the rules applied before a token is chosen), ``steps`` (evaluation mode,
KV cache, finished rows) and ``config`` (:class:`GenerationConfig`).

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

from .config import GenerationConfig
from .greedy import generate, greedy_decode, sample, check_generate_inputs
from .beam import (
    beam_generate,
    beam_search,
    length_penalty,
    FinishedHypotheses,
    repeat_for_beams,
    search_is_over,
    NEG_INF,
)
from .logits import (
    next_tokens,
    constrain_logits,
    apply_repetition_penalty,
    block_repeated_ngrams,
    forbid_special_tokens,
    check_logits_and_generated,
    check_repetition_penalty_inputs,
    check_ngram_inputs,
)
from .sampling import (
    top_k_filter,
    top_p_filter,
    choose_next_token,
    check_top_k,
    check_top_p,
    check_sampling_inputs,
)
from .steps import (
    max_new_tokens,
    eval_mode,
    source_mask_for,
    open_cache,
    next_token_logits,
    still_running,
    select_rows,
    keep_rows,
)

__all__ = [
    "GenerationConfig",
    "generate",
    "greedy_decode",
    "sample",
    "check_generate_inputs",
    "beam_generate",
    "beam_search",
    "length_penalty",
    "FinishedHypotheses",
    "repeat_for_beams",
    "search_is_over",
    "NEG_INF",
    "next_tokens",
    "constrain_logits",
    "apply_repetition_penalty",
    "block_repeated_ngrams",
    "forbid_special_tokens",
    "check_logits_and_generated",
    "check_repetition_penalty_inputs",
    "check_ngram_inputs",
    "top_k_filter",
    "top_p_filter",
    "choose_next_token",
    "check_top_k",
    "check_top_p",
    "check_sampling_inputs",
    "max_new_tokens",
    "eval_mode",
    "source_mask_for",
    "open_cache",
    "next_token_logits",
    "still_running",
    "select_rows",
    "keep_rows",
]
