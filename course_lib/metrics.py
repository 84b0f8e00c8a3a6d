"""Metrics to watch while training and evaluating a translator (chapters 9-11).

* :func:`bleu` - corpus BLEU through ``sacrebleu`` (the standard, reproducible
  implementation; never a hand-rolled BLEU, whose numbers are not comparable).
* :func:`attention_entropy` / :func:`model_attention_entropy` - how spread out
  the attention weights are, in nats.
* :func:`gradient_global_norm` - the norm that gradient clipping looks at.

Nothing here changes a model or its gradients.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import torch
from torch import Tensor, nn

from .validation import check_int, checked_by

__all__ = [
    "bleu",
    "paired_bleu_test",
    "bleu_tokenizer_for",
    "attention_entropy",
    "model_attention_entropy",
    "gradient_global_norm",
    "check_attention_weights",
]


def bleu_tokenizer_for(target_lang: str) -> str:
    """The ``sacrebleu`` tokenizer to use for a target language.

    Args:
        target_lang: an ISO 639 code such as ``"zh"``, ``"en"``, ``"de"``.

    Returns:
        ``"zh"`` for Chinese (``"zh"``, ``"cmn"`` or a ``"zh-..."`` variant:
        sacrebleu then splits Chinese characters one by one, so BLEU is a
        character-level score), ``"13a"`` (the WMT standard) otherwise.
    """
    lang = target_lang.lower()
    return "zh" if lang in ("zh", "cmn") or lang.startswith("zh-") or lang.startswith("zh_") else "13a"


def bleu(
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    target_lang: str = "zh",
    *,
    tokenize: str | None = None,
) -> float:
    """Corpus BLEU (0-100) of detokenized hypotheses against references, via ``sacrebleu``.

    Args:
        hypotheses: one detokenized output sentence per test item (``str``).
        references: either one reference ``str`` per item, or one *list* of
            reference strings per item (several correct translations; the
            lists may have different lengths).
        target_lang: the language of the hypotheses; picks the tokenizer
            (:func:`bleu_tokenizer_for`: ``"zh"`` for Chinese, ``"13a"``
            otherwise).
        tokenize: override the sacrebleu tokenizer name (e.g. ``"char"``, ``"none"``).

    Returns:
        the corpus-level BLEU score as a float in ``[0, 100]`` (sacrebleu's
        default: 4-gram, brevity penalty, no smoothing beyond sacrebleu's
        ``exp`` default).

    Raises:
        ValueError: if the numbers of hypotheses and references differ, the
            corpus is empty, or an item has no reference.

    Source: Papineni et al. (2002), "BLEU: a Method for Automatic Evaluation of
    Machine Translation"; Post (2018), "A Call for Clarity in Reporting BLEU
    Scores" (sacrebleu). The paper reports BLEU in section 6.1 / table 2.
    """
    import sacrebleu  # imported lazily: importing course_lib.metrics stays cheap

    hypotheses = list(hypotheses)
    references = list(references)
    if len(hypotheses) == 0:
        raise ValueError("hypotheses is empty: BLEU needs at least one sentence")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses and references must have the same length; got {len(hypotheses)} and {len(references)}"
        )
    streams = _reference_streams(references)
    tok = tokenize if tokenize is not None else bleu_tokenizer_for(target_lang)
    return float(sacrebleu.corpus_bleu(hypotheses, streams, tokenize=tok).score)


def _reference_streams(references: list) -> list[list[str | None]]:
    """sacrebleu's reference *streams* (stream ``j`` = the ``j``-th reference of every item; ``None`` if missing)."""
    if all(isinstance(r, str) for r in references):
        return [list(references)]
    ref_lists = [[r] if isinstance(r, str) else list(r) for r in references]
    for i, refs in enumerate(ref_lists):
        if not refs:
            raise ValueError(f"references[{i}] is empty: every hypothesis needs at least one reference")
    n = max(len(refs) for refs in ref_lists)
    return [[refs[j] if j < len(refs) else None for refs in ref_lists] for j in range(n)]


def paired_bleu_test(
    baseline: Sequence[str],
    system: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    target_lang: str = "zh",
    *,
    n_samples: int = 1000,
    tokenize: str | None = None,
) -> dict[str, float]:
    """Is ``system`` really better (or worse) than ``baseline``? Paired bootstrap resampling via ``sacrebleu``.

    Both systems translated the same test sentences. The test set is
    resampled with replacement ``n_samples`` times (the same resample for
    both systems) and corpus BLEU recomputed each time. sacrebleu centres the
    *absolute* differences: each resample's ``|BLEU(system) - BLEU(baseline)|``
    minus the mean of these over all resamples (what chance alone produces);
    the p-value is the share of them strictly larger than the observed
    absolute difference, counting the observed one as well,
    ``(count + 1) / (n_samples + 1)`` (sacrebleu's implementation, Koehn 2004).
    So the sign does not matter: a difference of -0.01 is tested as 0.01.
    A difference with ``p_value >= 0.05`` is not significant: on a test set
    of about a thousand short sentences, BLEU moves by about a point between
    two trainings that differ only in their random seed.

    Args:
        baseline: one detokenized hypothesis per test item.
        system: one per test item, same order.
        references: one reference string, or one list of reference strings,
            per test item (as :func:`bleu`).
        target_lang: picks the tokenizer (:func:`bleu_tokenizer_for`).
        n_samples: bootstrap resamples (``>= 100``). Resampling is seeded by
            sacrebleu (environment variable ``SACREBLEU_SEED``, default
            12345), so the result is reproducible.
        tokenize: override the sacrebleu tokenizer name.

    Returns:
        ``{"bleu_baseline", "bleu", "difference", "p_value", "ci95_baseline",
        "ci95"}``: corpus BLEU of each (0-100), ``bleu - bleu_baseline``, the
        p-value of the difference (1.0 when the two BLEU scores are equal),
        and the half-width of each system's 95% bootstrap confidence interval
        (``nan`` for identical outputs: no resampling is done).

    Raises:
        ValueError: empty input, different lengths, ``n_samples < 100``.

    Source: Koehn (2004), "Statistical Significance Tests for Machine
    Translation Evaluation"; chapter 10.
    """
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    baseline, system, references = list(baseline), list(system), list(references)
    if not references:
        raise ValueError("references is empty: the test needs at least one sentence")
    if not len(baseline) == len(system) == len(references):
        raise ValueError(
            f"baseline, system and references must have the same length; got {len(baseline)}, {len(system)} "
            f"and {len(references)}"
        )
    check_int(n_samples, "n_samples", 100)
    tok = tokenize if tokenize is not None else bleu_tokenizer_for(target_lang)
    if baseline == system:
        # Nothing to test. (sacrebleu's own convention reports 1 / (n_samples + 1)
        # here: "a zero difference should not be attributed to chance".)
        score = bleu(system, references, target_lang, tokenize=tok)
        return {"bleu_baseline": score, "bleu": score, "difference": 0.0, "p_value": 1.0,
                "ci95_baseline": float("nan"), "ci95": float("nan")}
    test = PairedTest([("baseline", baseline), ("system", system)], {"BLEU": BLEU(tokenize=tok)},
                      references=_reference_streams(references), test_type="bs", n_samples=n_samples)
    _, scores = test()
    base, ours = scores["BLEU"]
    difference = float(ours.score - base.score)
    # sacrebleu counts resamples whose centred absolute difference is *strictly* larger
    # than the observed absolute one, plus one: a difference of exactly 0 would get 1 / (n + 1).
    p_value = 1.0 if difference == 0.0 else float(ours.p_value)
    return {
        "bleu_baseline": float(base.score), "bleu": float(ours.score), "difference": difference,
        "p_value": p_value, "ci95_baseline": float(base.ci), "ci95": float(ours.ci),
    }


def check_attention_weights(weights: Tensor) -> None:
    """Raise ``ValueError`` unless ``weights`` is a tensor of shape ``(..., q_len, k_len)``."""
    if not isinstance(weights, Tensor) or weights.dim() < 2:
        shape = tuple(weights.shape) if isinstance(weights, Tensor) else type(weights).__name__
        raise ValueError(f"weights must have shape (..., q_len, k_len); got {shape}")


@checked_by(check_attention_weights)
def attention_entropy(weights: Tensor) -> float:
    """Mean entropy (nats) of the rows of attention weights, ignoring fully masked rows.

    For a row ``p`` (a distribution over keys), ``H(p) = -sum_j p_j log p_j``
    (with ``0 log 0 = 0``). ``H = 0`` means every query looks at exactly one
    key; ``H = log(k_len)`` means uniform attention. A row whose weights are
    all zero (every key masked; see :mod:`course_lib.masks`) is not a
    distribution and is left out.

    Args:
        weights: attention weights, shape ``(..., q_len, k_len)`` (typically
            ``(batch, n_heads, q_len, k_len)`` from
            :attr:`course_lib.attention.MultiHeadAttention.last_weights`), any
            float dtype; each row sums to 1 or is all zeros.

    Returns:
        the mean row entropy in nats (Python float); ``nan`` if every row is
        fully masked.

    Raises:
        ValueError: if ``weights`` has fewer than 2 dimensions.

    Source: a diagnostic used in chapter 9 (attention that stays uniform, i.e.
    entropy near ``log(k_len)``, is a sign that the model has not learned to
    align; entropy collapsing to 0 early is a sign of instability). Not in the paper.
    """
    w = weights.detach().float().reshape(-1, weights.size(-1))  # (rows, k_len): one distribution per row
    alive = w.sum(dim=-1) > 0.5  # (rows,): rows of a distribution sum to 1; masked rows to 0
    if not bool(alive.any()):
        return float("nan")
    w = w[alive]
    plogp = torch.where(w > 0, w * torch.log(w.clamp_min(torch.finfo(w.dtype).tiny)), torch.zeros_like(w))  # (alive rows, k_len)
    return float(-plogp.sum(dim=-1).mean())


def model_attention_entropy(model: nn.Module) -> dict[str, float]:
    """Attention entropy of every attention layer that recorded its last weights.

    Call ``model.record_attention(True)`` (or set ``record_weights`` on the
    :class:`~course_lib.attention.MultiHeadAttention` modules) before a forward
    pass; this reads their ``last_weights``.

    Args:
        model: any module containing :class:`~course_lib.attention.MultiHeadAttention`
            layers (for example a :class:`course_lib.model.Transformer`, possibly
            wrapped in ``DistributedDataParallel``).

    Returns:
        ``{module_name: mean entropy in nats}`` for each attention layer with
        recorded weights, in module order (empty if none recorded), e.g.
        ``"encoder.layers.0.self_attn"``.

    Source: chapter 9 (what to watch during training).
    """
    from .attention import MultiHeadAttention

    out: dict[str, float] = {}
    for name, module in model.named_modules():
        if isinstance(module, MultiHeadAttention) and module.last_weights is not None:
            out[name] = attention_entropy(module.last_weights)
    return out


def gradient_global_norm(parameters: Iterable[Tensor] | Iterable[nn.Parameter] | nn.Module, norm_type: float = 2.0) -> float:
    """The global norm of all gradients, as gradient clipping computes it.

    ``||g|| = (sum over parameters of ||grad_p||^norm_type) ** (1 / norm_type)``;
    parameters without a gradient are skipped. Equal to the value returned by
    :func:`torch.nn.utils.clip_grad_norm_` (which also clips; this does not).

    Args:
        parameters: a module or an iterable of tensors/parameters.
        norm_type: the p of the p-norm (``2.0``; ``math.inf`` for the max-norm).

    Returns:
        the norm as a Python float (``0.0`` if no parameter has a gradient;
        ``inf``/``nan`` if a gradient has non-finite entries).

    Source: Pascanu et al. (2013), "On the difficulty of training recurrent
    neural networks" (clipping by global norm); chapter 9.
    """
    if isinstance(parameters, nn.Module):
        parameters = parameters.parameters()
    grads = [p.grad.detach() for p in parameters if p.grad is not None]
    if not grads:
        return 0.0
    if norm_type == math.inf:
        return float(max(g.abs().max().float() for g in grads))
    norms = torch.stack([torch.linalg.vector_norm(g.float(), norm_type) for g in grads])
    return float(torch.linalg.vector_norm(norms, norm_type))
