"""Fast automated checks for an encoder-decoder Transformer (chapter 11).

Chapter 11 reproduces the usual ways a Transformer fails: a decoder that sees
the future, outputs that depend on the amount of padding, a model blind to word
order, NaN in attention, a bad initial loss, non-finite gradients, positions
drowned by large embeddings. Each check here turns one of those failures into a
small experiment that runs in well under a second on a tiny batch and returns a
:class:`Finding` (``name``, ``ok``, ``detail``, ``value``).
:func:`check_model` runs them all; :func:`format_findings` prints the result.

The model must behave like :class:`course_lib.model.Transformer`:

* ``model(src, tgt_in)`` -> logits ``(batch, tgt_len, tgt_vocab)``, building its
  own masks (inference code calls it this way, so that is what is tested);
* ``model.encode(src)`` -> ``memory`` ``(batch, src_len, d_model)`` (permutation check);
* ``model.encoder.embedding`` and ``model.encoder.positional`` (embedding-scale
  check; the positional module must *add* its signal, as the sinusoidal and
  learned encodings do);
* attention modules with a ``record_weights`` flag and ``last_weights``
  (:class:`course_lib.attention.MultiHeadAttention`) for the attention check.

A check whose requirement is missing is *skipped* (``ok=True``,
``skipped=True``), never silently passed as tested.

Token ids follow the course convention (``<pad>`` = 0 by default, see
:mod:`course_lib.data`); masks follow :mod:`course_lib.masks` (bool, ``True`` =
may attend). Every check runs the model in eval mode (no dropout) without
changing its weights, its gradients or its train/eval mode.

:func:`saved_tensors_nbytes` measures the activation memory that autograd keeps
for the backward pass (the memory that runs out when sequences get long).

Importing this module does no work.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .validation import model_setting

__all__ = [
    "Finding",
    "DiagnosticsConfig",
    "check_causal_leak",
    "check_padding_leak",
    "check_permutation_blindness",
    "check_attention_finite",
    "check_initial_loss",
    "check_gradients_finite",
    "check_embedding_scale",
    "check_model",
    "format_findings",
    "saved_tensors_nbytes",
]


# --------------------------------------------------------------------------
# Results and settings
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Finding:
    """The result of one check.

    Attributes:
        name: the check's name, e.g. ``"causal_leak"``.
        ok: ``False`` when the check found a problem.
        detail: one or two sentences: what was measured, and on failure the
            usual cause.
        value: the measured number the decision was based on (units in
            ``detail``), or ``None``.
        skipped: ``True`` when the model lacks what the check needs (then
            ``ok`` is ``True`` and nothing was tested).
    """

    name: str
    ok: bool
    detail: str
    value: float | None = None
    skipped: bool = False

    @property
    def status(self) -> str:
        """``"PASS"``, ``"FAIL"`` or ``"SKIP"``."""
        return "SKIP" if self.skipped else ("PASS" if self.ok else "FAIL")

    def __str__(self) -> str:
        return f"[{self.status}] {self.name}: {self.detail}"


@dataclass
class DiagnosticsConfig:
    """Thresholds and settings of the checks.

    Attributes:
        pad_id: the padding id of the data (course: 0). Taken from here, not
            from the model, because a model whose padding is broken may not
            know it.
        atol: the largest change of a logit that counts as "no effect" (the
            same computation on a padded or altered input differs by float
            rounding only, about ``1e-6`` in float32).
        extra_padding: how many padding tokens the padding check appends.
        min_permutation_change: relative change of the encoder output
            (``||enc(shuffled) - shuffled(enc)|| / ||enc||``) below which the
            encoder is called blind to word order.
        check_initial_loss: run :func:`check_initial_loss` (meaningful only for
            a freshly initialised model; set ``False`` for a trained one).
        initial_loss_tolerance: allowed ``|loss - log(V)|`` in nats. Random
            logits of spread ``s`` cost about ``s**2 / 2`` nats above
            ``log(V)``; a Xavier-initialised output layer on unit-variance
            features gives ``s**2 = 2 d_model / (d_model + V)`` (up to 2 for a
            small vocabulary), hence the default 1.5.
        min_embedding_ratio, max_embedding_ratio: allowed range of
            ``mean ||token embedding|| / mean ||positional signal||``.
        seed: seed of the permutation used by the permutation check.

    Raises:
        ValueError: a negative tolerance, ``extra_padding < 1`` or an empty ratio range.
    """

    pad_id: int = 0
    atol: float = 1e-4
    extra_padding: int = 4
    min_permutation_change: float = 1e-3
    check_initial_loss: bool = True
    initial_loss_tolerance: float = 1.5
    min_embedding_ratio: float = 0.1
    max_embedding_ratio: float = 10.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("atol", "min_permutation_change", "initial_loss_tolerance", "min_embedding_ratio"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0; got {getattr(self, name)}")
        if self.extra_padding < 1:
            raise ValueError(f"extra_padding must be >= 1; got {self.extra_padding}")
        if not self.min_embedding_ratio < self.max_embedding_ratio:
            raise ValueError(
                f"min_embedding_ratio ({self.min_embedding_ratio}) must be < max_embedding_ratio ({self.max_embedding_ratio})"
            )


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------
def _unpack(batch: Any) -> tuple[Tensor, Tensor, Tensor]:
    """``(src, tgt_in, tgt_out)`` from a :class:`course_lib.data.Batch` or a 3-tuple."""
    if all(hasattr(batch, a) for a in ("src", "tgt_in", "tgt_out")):
        src, tgt_in, tgt_out = batch.src, batch.tgt_in, batch.tgt_out
    elif isinstance(batch, (tuple, list)) and len(batch) == 3:
        src, tgt_in, tgt_out = batch
    else:
        raise ValueError(
            "batch must have attributes src, tgt_in, tgt_out (a course_lib.data.Batch) "
            f"or be a (src, tgt_in, tgt_out) tuple; got {type(batch).__name__}"
        )
    for name, t in (("src", src), ("tgt_in", tgt_in), ("tgt_out", tgt_out)):
        if not isinstance(t, Tensor) or t.dim() != 2 or t.dtype.is_floating_point or t.dtype == torch.bool:
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"batch.{name} must be integer token ids of shape (batch, seq_len); got {shape}")
    if not src.size(0) == tgt_in.size(0) == tgt_out.size(0):
        raise ValueError(
            f"batch sizes differ: src {src.size(0)}, tgt_in {tgt_in.size(0)}, tgt_out {tgt_out.size(0)}"
        )
    if tgt_in.shape != tgt_out.shape:
        raise ValueError(f"tgt_in {tuple(tgt_in.shape)} and tgt_out {tuple(tgt_out.shape)} must have the same shape")
    return src, tgt_in, tgt_out


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _other_ids(ids: Tensor, vocab_size: int, pad_id: int) -> Tensor:
    """Each id replaced by a different id in ``[0, vocab_size)`` that is not ``pad_id``."""
    new = (ids + 1) % vocab_size
    new = torch.where(new == pad_id, (new + 1) % vocab_size, new)
    return new


def _max_len(model: nn.Module) -> int | None:
    return model_setting(model, "max_len")


# --------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------
@torch.no_grad()
def check_causal_leak(model: nn.Module, batch: Any, config: DiagnosticsConfig | None = None) -> Finding:
    """Do earlier decoder positions change when *later* target tokens change?

    With ``k = tgt_len // 2``, every token of ``tgt_in`` at positions ``>= k``
    is replaced by another non-padding id; the logits at positions ``< k`` must
    not move (beyond ``config.atol``). A correct causal mask guarantees it:
    position ``t`` may attend only to positions ``<= t`` (Vaswani et al., 2017,
    section 3.2.3). A leak means the model can copy the answer during teacher
    forcing: the training loss looks excellent and greedy decoding fails.

    Args:
        model: see the module docstring.
        batch: a :class:`course_lib.data.Batch` or ``(src, tgt_in, tgt_out)``,
            integer ids ``(batch, src_len)`` and ``(batch, tgt_len)``.
        config: thresholds (default :class:`DiagnosticsConfig`).

    Returns:
        a :class:`Finding` whose ``value`` is the largest absolute logit change
        at the protected positions (skipped when ``tgt_len < 2``).

    Raises:
        ValueError: a malformed batch.

    Source: Vaswani et al. (2017), section 3.2.3 (masked decoder
    self-attention); chapter 11, "The checklist".
    """
    config = config or DiagnosticsConfig()
    src, tgt_in, _ = _unpack(batch)
    name = "causal_leak"
    if tgt_in.size(1) < 2:
        return Finding(name, True, "skipped: needs tgt_len >= 2", None, skipped=True)
    k = tgt_in.size(1) // 2
    with _eval_mode(model):
        before = model(src, tgt_in)  # (batch, tgt_len, V)
        changed = tgt_in.clone()  # (batch, tgt_len)
        changed[:, k:] = _other_ids(tgt_in[:, k:], before.size(-1), config.pad_id)
        after = model(src, changed)
    diff = float((before[:, :k] - after[:, :k]).abs().max())
    ok = diff <= config.atol
    detail = (
        f"changing target tokens at positions >= {k} moved the logits at positions < {k} "
        f"by at most {diff:.2e} (limit {config.atol:g})"
    )
    if not ok:
        detail += "; the decoder sees the future: is the causal mask applied in its self-attention?"
    return Finding(name, ok, detail, diff)


@torch.no_grad()
def check_padding_leak(model: nn.Module, batch: Any, config: DiagnosticsConfig | None = None) -> Finding:
    """Do the outputs change when more padding is appended to the source?

    Appends ``config.extra_padding`` ``pad_id`` tokens to every source row (as a
    longer sentence in the same batch would) and compares the logits of all
    target positions. A model that masks padding keys gives the same logits up
    to float rounding; a model without a source padding mask, or with a mask
    broadcast over the wrong axis (e.g. ``(batch, 1, src_len, 1)`` instead of
    ``(batch, 1, 1, src_len)``), gives different translations of the same
    sentence depending on its neighbours in the batch.

    Args:
        model, batch, config: as :func:`check_causal_leak`.

    Returns:
        a :class:`Finding` whose ``value`` is the largest absolute logit change
        (skipped when the model's ``config.max_len`` leaves no room).

    Raises:
        ValueError: a malformed batch.

    Source: chapter 8 (padding masks) and chapter 11, "A padding mask that is
    missing or broadcast wrongly".
    """
    config = config or DiagnosticsConfig()
    src, tgt_in, _ = _unpack(batch)
    name = "padding_leak"
    extra = config.extra_padding
    limit = _max_len(model)
    if limit is not None:
        extra = min(extra, limit - src.size(1))
    if extra < 1:
        return Finding(name, True, "skipped: src_len already equals the model's max_len", None, skipped=True)
    padded = torch.cat([src, src.new_full((src.size(0), extra), config.pad_id)], dim=1)
    with _eval_mode(model):
        before = model(src, tgt_in)
        after = model(padded, tgt_in)
    diff = float((before - after).abs().max())
    ok = diff <= config.atol
    detail = f"appending {extra} padding tokens to the source moved the logits by at most {diff:.2e} (limit {config.atol:g})"
    if not ok:
        detail += (
            "; padding leaks into the outputs: is the source padding mask passed to the encoder and the "
            "cross-attention, with shape (batch, 1, 1, src_len)?"
        )
    return Finding(name, ok, detail, diff)


@torch.no_grad()
def check_permutation_blindness(model: nn.Module, batch: Any, config: DiagnosticsConfig | None = None) -> Finding:
    """Does the encoder output simply permute when the source tokens are shuffled?

    Self-attention and the feed-forward network treat positions as a set: without
    a positional signal, ``encode(src[:, perm]) == encode(src)[:, perm]``
    (permutation equivariance), so the model cannot tell "dog bites man" from
    "man bites dog". The check shuffles the source positions with a fixed
    permutation (seeded by ``config.seed``; never the identity) and measures the
    relative difference ``||encode(src[:, perm]) - encode(src)[:, perm]|| /
    ||encode(src)||`` (Frobenius norms). Near zero means blind to word order.

    Args:
        model, batch, config: as :func:`check_causal_leak`; the model needs ``encode``.

    Returns:
        a :class:`Finding` whose ``value`` is the relative difference
        (skipped when ``src_len < 2`` or the model has no ``encode``).

    Raises:
        ValueError: a malformed batch.

    Source: Vaswani et al. (2017), section 3.5 ("since our model contains no
    recurrence and no convolution ... we must inject some information about the
    ... position"); chapter 11, "A model blind to word order".
    """
    config = config or DiagnosticsConfig()
    src, _, _ = _unpack(batch)
    name = "permutation_blindness"
    if not hasattr(model, "encode"):
        return Finding(name, True, "skipped: the model has no encode(src) method", None, skipped=True)
    n = src.size(1)
    if n < 2:
        return Finding(name, True, "skipped: needs src_len >= 2", None, skipped=True)
    gen = torch.Generator().manual_seed(config.seed)
    perm = torch.randperm(n, generator=gen)
    if bool((perm == torch.arange(n)).all()):
        perm = torch.roll(perm, 1)
    perm = perm.to(src.device)
    with _eval_mode(model):
        memory = model.encode(src)
        shuffled = model.encode(src[:, perm])
    change = float((shuffled - memory[:, perm]).norm() / memory.norm().clamp_min(1e-30))
    ok = change > config.min_permutation_change
    detail = (
        f"shuffling the source changed the encoder output by {change:.2e} relative to simply shuffling "
        f"it (blind below {config.min_permutation_change:g})"
    )
    if not ok:
        detail += "; the encoder ignores word order: is a positional encoding added to the embeddings?"
    return Finding(name, ok, detail, change)


def _attention_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if hasattr(m, "record_weights") and hasattr(m, "last_weights")]


@torch.no_grad()
def check_attention_finite(model: nn.Module, batch: Any, config: DiagnosticsConfig | None = None) -> Finding:
    """Are all attention weights and logits finite, even for a fully padded source?

    Adds one stress row to the batch: a source made only of ``pad_id`` (every
    key masked) with the first row's target. A mask filled with ``-inf`` turns
    such a row into ``softmax([-inf, ..., -inf]) = NaN``, and the NaN then
    spreads to everything that row touches; the course's attention gives zero
    weights instead (see :mod:`course_lib.masks`). The weights are read from
    the ``last_weights`` of every attention module (``record_weights`` is
    switched on for the call and restored afterwards).

    Args:
        model, batch, config: as :func:`check_causal_leak`.

    Returns:
        a :class:`Finding` whose ``value`` is the number of tensors (attention
        layers plus the logits) that contain NaN or inf.

    Raises:
        ValueError: a malformed batch.

    Source: chapter 8 (the fill value) and chapter 11, "A mask fill of -1e9
    overflows in float16".
    """
    config = config or DiagnosticsConfig()
    src, tgt_in, _ = _unpack(batch)
    name = "attention_finite"
    stress_src = torch.cat([src, src.new_full((1, src.size(1)), config.pad_id)], dim=0)
    stress_tgt = torch.cat([tgt_in, tgt_in[:1]], dim=0)
    modules = _attention_modules(model)
    saved = [(m.record_weights, m.last_weights) for _, m in modules]
    bad: list[str] = []
    try:
        for _, m in modules:
            m.record_weights = True
            m.last_weights = None
        with _eval_mode(model):
            logits = model(stress_src, stress_tgt)
        for mod_name, m in modules:
            w = m.last_weights
            if w is not None and not bool(torch.isfinite(w).all()):
                bad.append(mod_name)
        if not bool(torch.isfinite(logits).all()):
            bad.append("logits")
    finally:
        for (_, m), (flag, last) in zip(modules, saved):
            m.record_weights, m.last_weights = flag, last
    ok = not bad
    where = f"{len(modules)} attention layers and the logits" if modules else "the logits (no attention layer records weights)"
    if ok:
        detail = f"{where} are finite, also for a source made only of padding"
    else:
        detail = (
            f"NaN/inf in {', '.join(bad)} for a batch with a fully padded source row; a mask filled with "
            f"-inf (or -1e9 in float16) makes a fully masked row NaN: fill with torch.finfo(dtype).min and "
            f"zero the masked weights"
        )
    return Finding(name, ok, detail, float(len(bad)))


@torch.no_grad()
def check_initial_loss(model: nn.Module, batch: Any, config: DiagnosticsConfig | None = None) -> Finding:
    """Is the cross-entropy of a freshly initialised model close to ``log(V)``?

    An untrained model should be unsure: uniform predictions over ``V``
    target ids give a loss of exactly ``log(V)`` nats, and random logits with a
    small spread ``s`` give about ``log(V) + s**2 / 2``. A loss far above means
    over-confident initial logits (a missing scale, a bad initialisation); far
    below means the answer leaks into the input. Plain cross-entropy without
    label smoothing, ignoring ``pad_id`` targets. Meaningless for a trained
    model (turn it off with ``config.check_initial_loss = False``).

    Args:
        model, batch, config: as :func:`check_causal_leak`.

    Returns:
        a :class:`Finding` whose ``value`` is the loss in nats.

    Raises:
        ValueError: a malformed batch.

    Source: chapter 11, "The checklist" (where the ``s**2 / 2`` excess is derived
    and measured).
    """
    config = config or DiagnosticsConfig()
    src, tgt_in, tgt_out = _unpack(batch)
    name = "initial_loss"
    with _eval_mode(model):
        logits = model(src, tgt_in)
    loss = float(F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(), ignore_index=config.pad_id))
    vocab = logits.size(-1)
    expected = math.log(vocab)
    gap = loss - expected
    ok = math.isfinite(loss) and abs(gap) <= config.initial_loss_tolerance
    detail = (
        f"loss {loss:.3f} nats vs log(V) = {expected:.3f} for V = {vocab} (difference {gap:+.3f}, "
        f"limit +-{config.initial_loss_tolerance:g})"
    )
    if not ok:
        if not math.isfinite(loss) or gap > 0:
            detail += "; far above log(V): over-confident initial logits (check the initialisation and the scales)"
        else:
            detail += "; far below log(V): the target leaks into the input (check the causal mask and shift_right)"
    return Finding(name, ok, detail, loss)


def check_gradients_finite(model: nn.Module, batch: Any, config: DiagnosticsConfig | None = None) -> Finding:
    """Does one backward pass give a finite, non-zero gradient?

    Computes the cross-entropy of the batch (eval mode: no dropout), calls
    ``backward()``, and measures the global L2 norm of all gradients (as
    :func:`torch.nn.utils.clip_grad_norm_` does). Fails on a NaN/inf norm or a
    zero norm. The parameters' previous ``.grad`` are restored afterwards, so
    the check can run in the middle of training.

    Args:
        model, batch, config: as :func:`check_causal_leak`.

    Returns:
        a :class:`Finding` whose ``value`` is the global gradient norm; the
        detail also names the first parameters with non-finite gradients and
        counts trainable parameters that received no gradient.

    Raises:
        ValueError: a malformed batch.

    Source: chapter 11, "NaN late in training" (NaN and gradient clipping).
    """
    config = config or DiagnosticsConfig()
    src, tgt_in, tgt_out = _unpack(batch)
    name = "gradients_finite"
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    saved = [p.grad for _, p in params]
    try:
        for _, p in params:
            p.grad = None
        with _eval_mode(model), torch.enable_grad():
            logits = model(src, tgt_in)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(), ignore_index=config.pad_id)
            loss.backward()
        loss = loss.detach()
        grads = [(n, p.grad) for n, p in params if p.grad is not None]
        no_grad = len(params) - len(grads)
        nonfinite = [n for n, g in grads if not bool(torch.isfinite(g).all())]
        if grads:
            norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for _, g in grads])))
        else:
            norm = 0.0
    finally:
        for (_, p), g in zip(params, saved):
            p.grad = g
    ok = math.isfinite(norm) and norm > 0.0 and not nonfinite
    detail = f"global gradient norm {norm:.3g} (loss {loss.item():.3f}); {no_grad} trainable tensors got no gradient"
    if nonfinite:
        shown = ", ".join(nonfinite[:3]) + (" ..." if len(nonfinite) > 3 else "")
        detail += f"; non-finite gradients in {len(nonfinite)} tensors ({shown}): look for overflow, log(0) or -inf masks"
    elif not ok:
        detail += "; the gradient is zero: is the loss connected to the parameters?"
    return Finding(name, ok, detail, norm)


@torch.no_grad()
def check_embedding_scale(model: nn.Module, batch: Any, config: DiagnosticsConfig | None = None) -> Finding:
    """Is the positional signal neither missing nor drowned by the token embeddings?

    The paper adds the positional encoding to embeddings multiplied by
    ``sqrt(d_model)`` (section 3.4). With the course's initialisation both
    have comparable sizes: token vectors of norm about ``sqrt(d_model)``,
    sinusoidal rows of norm exactly ``sqrt(d_model / 2)``, a ratio near
    ``sqrt(2)``. Embeddings initialised with standard deviation 1 *and* scaled
    by ``sqrt(d_model)`` are ``sqrt(d_model)`` times larger and drown the word
    order; a ratio of infinity means there is no positional signal at all.
    Measures ``mean ||embedding(src)||`` over non-padding positions divided by
    ``mean ||positional(0)||`` (the positional module applied to zeros, in eval
    mode) over the same number of positions, in the encoder.

    Args:
        model, batch, config: as :func:`check_causal_leak`; the model needs
            ``encoder.embedding`` and an additive ``encoder.positional``.

    Returns:
        a :class:`Finding` whose ``value`` is the ratio (``inf`` without a
        positional signal).

    Raises:
        ValueError: a malformed batch.

    Source: Vaswani et al. (2017), sections 3.4 and 3.5; chapter 11, "A model
    blind to word order".
    """
    config = config or DiagnosticsConfig()
    src, _, _ = _unpack(batch)
    name = "embedding_scale"
    encoder = getattr(model, "encoder", None)
    embedding = getattr(encoder, "embedding", None)
    positional = getattr(encoder, "positional", None)
    if embedding is None or positional is None:
        return Finding(name, True, "skipped: the model has no encoder.embedding / encoder.positional", None, skipped=True)
    with _eval_mode(model):
        emb = embedding(src)  # (batch, src_len, d_model)
        pos = positional(torch.zeros(1, src.size(1), emb.size(-1), dtype=emb.dtype, device=emb.device))
    real = src != config.pad_id
    emb_norm = float(emb.norm(dim=-1)[real].mean()) if bool(real.any()) else float(emb.norm(dim=-1).mean())
    pos_norm = float(pos.norm(dim=-1).mean())
    ratio = emb_norm / pos_norm if pos_norm > 0 else math.inf
    ok = config.min_embedding_ratio <= ratio <= config.max_embedding_ratio
    detail = (
        f"token embedding norm {emb_norm:.3g} / positional norm {pos_norm:.3g} = {ratio:.3g} "
        f"(allowed {config.min_embedding_ratio:g} to {config.max_embedding_ratio:g})"
    )
    if not ok:
        if pos_norm == 0:
            detail += "; there is no positional signal"
        elif ratio > config.max_embedding_ratio:
            detail += "; the positions are drowned by the token embeddings (initialised too large, or scaled twice?)"
        else:
            detail += "; the token embeddings are drowned by the positions (missing sqrt(d_model) scale?)"
    return Finding(name, ok, detail, ratio)


_CHECKS: dict[str, Callable[[nn.Module, Any, DiagnosticsConfig | None], Finding]] = {
    "causal_leak": check_causal_leak,
    "padding_leak": check_padding_leak,
    "permutation_blindness": check_permutation_blindness,
    "attention_finite": check_attention_finite,
    "initial_loss": check_initial_loss,
    "gradients_finite": check_gradients_finite,
    "embedding_scale": check_embedding_scale,
}


def check_model(
    model: nn.Module,
    batch: Any,
    config: DiagnosticsConfig | None = None,
    *,
    checks: Sequence[str] | None = None,
) -> list[Finding]:
    """Run the chapter-11 checklist on ``model`` with one small batch.

    Runs, in order: :func:`check_causal_leak`, :func:`check_padding_leak`,
    :func:`check_permutation_blindness`, :func:`check_attention_finite`,
    :func:`check_initial_loss` (only if ``config.check_initial_loss``),
    :func:`check_gradients_finite`, :func:`check_embedding_scale`. A check
    whose model call raises is reported as failed with the exception's message
    (the other checks still run). The model's weights, gradients and
    train/eval mode are left as they were.

    Args:
        model: a :class:`course_lib.model.Transformer` or a model with the same
            interface (see the module docstring).
        batch: a :class:`course_lib.data.Batch` or ``(src, tgt_in, tgt_out)``
            integer tensors ``(batch, src_len)``, ``(batch, tgt_len)``,
            ``(batch, tgt_len)``; a few short sentences are enough.
        config: thresholds (default :class:`DiagnosticsConfig`).
        checks: names of the checks to run (default: all, in the order above).

    Returns:
        one :class:`Finding` per check; ``all(f.ok for f in findings)`` is the verdict.

    Raises:
        ValueError: a malformed batch or an unknown check name.

    Source: chapter 11 (the failure lab); every check reproduces one failure
    mode of that chapter.
    """
    config = config or DiagnosticsConfig()
    _unpack(batch)  # fail early on a malformed batch
    names = list(_CHECKS) if checks is None else list(checks)
    unknown = [n for n in names if n not in _CHECKS]
    if unknown:
        raise ValueError(f"unknown check names {unknown}; choose from {list(_CHECKS)}")
    if not config.check_initial_loss and checks is None:
        names.remove("initial_loss")
    findings = []
    for n in names:
        try:
            findings.append(_CHECKS[n](model, batch, config))
        except Exception as exc:  # a crashing model is a finding, not a crash of the checklist
            findings.append(Finding(n, False, f"the model raised {type(exc).__name__}: {exc}", None))
    return findings


def format_findings(findings: Iterable[Finding]) -> str:
    """A readable report: one line per finding, then a summary line.

    Args:
        findings: :class:`Finding` objects, e.g. from :func:`check_model`.

    Returns:
        the lines ``"[PASS] name: detail"`` (or ``FAIL``/``SKIP``) joined by
        newlines, followed by ``"N of M checks passed"`` (and ``", K failed"``).
    """
    findings = list(findings)
    lines = [str(f) for f in findings]
    failed = sum(not f.ok for f in findings)
    lines.append(f"{len(findings) - failed} of {len(findings)} checks passed" + (f", {failed} failed" if failed else ""))
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------
def saved_tensors_nbytes(fn: Callable[[], Any], exclude: Iterable[Tensor] = ()) -> int:
    """Bytes of the tensors that autograd saves for the backward pass while ``fn()`` runs.

    Those saved activations are what fills the memory during training: they
    live from the forward pass until ``backward()``. Each distinct storage is
    counted once (a tensor saved by two operations, or a view of a saved
    tensor, costs its memory once), with its full size in bytes
    (``untyped_storage().nbytes()``). Parameters and other tensors listed in
    ``exclude`` (e.g. ``model.parameters()``) are not counted: they exist
    whether or not anything is saved. Measured through
    :func:`torch.autograd.graph.saved_tensors_hooks`, so it works on CPU and
    does not depend on the allocator.

    Args:
        fn: a function of no arguments that runs a forward computation (with
            gradients enabled) and returns anything; its result is discarded.
        exclude: tensors whose storages are not counted.

    Returns:
        the number of bytes (int).

    Source: chapter 11 (why memory grows with the square of the sequence length).
    """
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, int] = {}
    keep: list[Tensor] = []  # hold every saved tensor until the end: no address is reused meanwhile

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in skip and ptr not in seen:
            seen[ptr] = storage.nbytes()
        keep.append(t)
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    keep.clear()
    return sum(seen.values())
