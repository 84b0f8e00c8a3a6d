"""Training a Transformer: loss, learning-rate schedules, optimizer and the loop (chapter 9).

What is here, in the order chapter 9 introduces it:

* :func:`label_smoothed_cross_entropy` / :class:`LabelSmoothingLoss` - the
  training loss with label smoothing, ignoring padding, in two conventions.
* :func:`noam_lr`, :func:`warmup_cosine_lr`, :func:`warmup_constant_lr` and
  :func:`lr_at_step` - learning rate as a function of the optimizer step
  (1-based: the first update uses step 1, never a zero learning rate).
* :func:`build_optimizer`, :func:`build_scheduler` - Adam(0.9, 0.98, 1e-9) as in
  the paper, or AdamW.
* :class:`TrainConfig` and :func:`train` - the loop: gradient accumulation,
  clipping, mixed precision, per-step logging of the three things to watch
  (loss, learning rate, gradient norm) plus attention entropy, validation,
  NaN/inf detection, checkpoints, exact resume, and data parallelism under
  ``torchrun`` (DistributedDataParallel); its pieces :class:`TrainState`,
  :func:`start_training`, :func:`step_batches`, :func:`train_step`,
  :class:`TrainLog`, :func:`validate`, :func:`save_train_state` and
  :func:`stop_reason`.
* :func:`save_checkpoint`, :func:`load_checkpoint`, :func:`model_from_checkpoint`,
  :func:`export_for_inference` - what a checkpoint holds and how to use it.

Batches: the loop reads objects with attributes ``src`` ``(batch, src_len)``,
``tgt_in`` ``(batch, tgt_len)`` (``<bos>`` + target), ``tgt_out``
``(batch, tgt_len)`` (target + ``<eos>``), and optionally ``src_mask``
``(batch, 1, 1, src_len)`` and ``tgt_mask`` ``(batch, 1, tgt_len, tgt_len)``
(bool, ``True`` = may attend; see :mod:`course_lib.masks`) - the ``Batch`` of
:mod:`course_lib.data` - or plain ``(src, tgt_in, tgt_out)`` tuples.

Nothing runs at import time; there is no global state.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import Tensor, nn

from .validation import check_choice, check_int, check_number, check_probability, check_token_ids, config_from_dict, model_setting

__all__ = [
    "label_smoothed_cross_entropy",
    "LabelSmoothingLoss",
    "noam_lr",
    "warmup_cosine_lr",
    "warmup_constant_lr",
    "lr_at_step",
    "build_optimizer",
    "build_scheduler",
    "TrainConfig",
    "TrainResult",
    "TrainingDivergedError",
    "train",
    "TrainState",
    "start_training",
    "step_batches",
    "train_step",
    "unpack_batch",
    "ddp_no_sync",
    "normalize_loss",
    "mean_attention_entropy",
    "reduce_step_stats",
    "raise_if_diverged",
    "clip_gradients",
    "TrainLog",
    "validate",
    "save_train_state",
    "stop_reason",
    "evaluate_loss",
    "save_checkpoint",
    "load_checkpoint",
    "model_from_checkpoint",
    "export_for_inference",
    "init_distributed",
    "cpu_supports_bf16",
    "mixed_precision",
]

_CONVENTIONS = ("pytorch", "annotated")
_SCHEDULES = ("noam", "warmup_cosine", "warmup_constant")
_OPTIMIZERS = ("adam", "adamw")
_AMP = ("auto", "off", "fp16", "bf16")
_NORMALIZATIONS = ("batches", "tokens")
CHECKPOINT_FORMAT = "course_lib.training.checkpoint/1"


# --------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------
def label_smoothed_cross_entropy(
    logits: Tensor,
    target: Tensor,
    label_smoothing: float = 0.0,
    pad_id: int | None = 0,
    *,
    convention: str = "pytorch",
    reduction: str = "mean",
) -> Tensor:
    """Cross-entropy against a label-smoothed target distribution, ignoring padding.

    Each target token ``y`` is replaced by a distribution ``q`` and the loss is
    the cross-entropy ``H(q, p) = -sum_c q_c log p_c`` with
    ``p = softmax(logits)``. Two conventions for ``q`` (``eps = label_smoothing``,
    ``V`` = number of classes):

    * ``"pytorch"`` (default; identical to
      ``F.cross_entropy(..., label_smoothing=eps, ignore_index=pad_id)``):
      ``q = (1 - eps) * onehot(y) + eps / V`` - the smoothing mass is spread
      over *all* ``V`` classes, the target and ``<pad>`` included, so the
      target gets ``1 - eps + eps / V``.
    * ``"annotated"`` (the Annotated Transformer, Rush 2018): the target gets
      exactly ``1 - eps``, ``<pad>`` gets 0, and ``eps / (V - 2)`` goes to each
      other class (``eps / (V - 1)`` when ``pad_id`` is ``None``). The
      Annotated Transformer minimises ``KL(q || p) = H(q, p) - H(q)``; ``H(q)``
      is a constant, so the gradients are the same as here, but its reported
      loss is lower by ``H(q)``.

    With uniform predictions the loss is ``log(V)`` in both conventions (any
    ``q`` summing to one); its minimum, reached at ``p = q``, is the entropy
    ``H(q)`` (0 only without smoothing).

    A ``<pad>`` logit of ``-inf`` (a model that masks ``<pad>`` out of its
    output): the annotated loss and its gradient stay finite, since ``q``
    gives ``<pad>`` nothing; the pytorch loss is ``+inf``, like
    ``F.cross_entropy``, since its ``q`` gives ``<pad>`` ``eps / V``.

    Args:
        logits: unnormalised scores, shape ``(..., V)``, any float dtype
            (computed in float32).
        target: class ids, shape ``(...)`` (the leading shape of ``logits``),
            integer dtype, values in ``[0, V)``.
        label_smoothing: ``eps`` in ``[0, 1)`` (paper: 0.1, section 5.4).
        pad_id: target id to ignore (no loss, not counted), or ``None``.
        convention: ``"pytorch"`` or ``"annotated"`` (see above).
        reduction: ``"mean"`` (average over non-padding positions; 0 if there
            are none), ``"sum"``, or ``"none"`` (per position, 0 at padding).

    Returns:
        a float32 scalar (``"mean"``/``"sum"``) or a tensor of ``target``'s
        shape (``"none"``), in nats.

    Raises:
        ValueError: mismatched shapes, a non-integer ``target``, ``eps`` outside
            ``[0, 1)``, an unknown ``convention``/``reduction``, or the
            annotated convention with fewer than 3 classes.

    Source: Vaswani et al. (2017), section 5.4 ("label smoothing of value
    eps_ls = 0.1"); Szegedy et al. (2016), "Rethinking the Inception
    Architecture", section 7.
    """
    if logits.dim() < 1 or logits.shape[:-1] != target.shape:
        raise ValueError(
            f"logits must have shape target.shape + (V,); got logits {tuple(logits.shape)} and target {tuple(target.shape)}"
        )
    check_token_ids(target, "target", ndim=None, what="class ids")
    check_probability(label_smoothing, "label_smoothing")
    check_choice(convention, "convention", _CONVENTIONS)
    check_choice(reduction, "reduction", ("mean", "sum", "none"))
    n_classes = logits.size(-1)
    logp = torch.log_softmax(logits.float(), dim=-1)
    keep = torch.ones_like(target, dtype=torch.bool) if pad_id is None else target != pad_id
    safe_target = target.masked_fill(~keep, 0).long()
    logp_target = logp.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)
    nll = -logp_target
    if label_smoothing == 0.0:
        per_token = nll
    elif convention == "pytorch":
        per_token = (1.0 - label_smoothing) * nll + label_smoothing * (-logp.mean(dim=-1))
    else:
        others = n_classes - 1 - (0 if pad_id is None else 1)
        if others < 1:
            raise ValueError(f"the annotated convention needs at least 3 classes (with pad); got V={n_classes}")
        # Sum of log p over the classes that get eps / others: all but <pad> and the target. <pad> is
        # summed around, not subtracted: a model that never predicts it has log p = -inf there, and
        # (-inf) - (-inf) would be NaN although q gives <pad> nothing. (A target at -inf stays in
        # the sum: its loss is +inf.)
        if pad_id is None:
            rest = logp.sum(dim=-1)
        else:
            rest = logp[..., :pad_id].sum(dim=-1) + logp[..., pad_id + 1 :].sum(dim=-1)
        rest = rest - logp_target.masked_fill(torch.isinf(logp_target), 0.0)
        per_token = (1.0 - label_smoothing) * nll + label_smoothing * (-rest / others)
    per_token = per_token.masked_fill(~keep, 0.0)
    if reduction == "none":
        return per_token
    total = per_token.sum()
    if reduction == "sum":
        return total
    return total / keep.sum().clamp_min(1)


class LabelSmoothingLoss(nn.Module):
    """Module form of :func:`label_smoothed_cross_entropy` (same arguments, same shapes).

    Args:
        label_smoothing: ``eps`` in ``[0, 1)``.
        pad_id: the ignored target id, or ``None``.
        convention: ``"pytorch"`` (eps spread over all classes) or
            ``"annotated"`` (over all but the target and ``<pad>``).
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    ``forward(logits (..., V), target (...))`` returns the loss in nats.

    Source: Vaswani et al. (2017), section 5.4.
    """

    def __init__(self, label_smoothing: float = 0.1, pad_id: int | None = 0, convention: str = "pytorch", reduction: str = "mean") -> None:
        super().__init__()
        check_choice(convention, "convention", _CONVENTIONS)
        check_probability(label_smoothing, "label_smoothing")
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id
        self.convention = convention
        self.reduction = reduction

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return label_smoothed_cross_entropy(
            logits, target, self.label_smoothing, self.pad_id, convention=self.convention, reduction=self.reduction
        )

    def extra_repr(self) -> str:
        return f"label_smoothing={self.label_smoothing}, pad_id={self.pad_id}, convention={self.convention!r}"


# --------------------------------------------------------------------------
# Learning-rate schedules (step is 1-based: the step of the first update is 1)
# --------------------------------------------------------------------------
def noam_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The paper's schedule: ``factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)``.

    Linear warmup for ``warmup_steps`` steps, then decay proportional to the
    inverse square root of the step. The peak is at ``step == warmup_steps``
    and equals ``factor * (d_model * warmup_steps) ** -0.5`` (about 6.99e-4
    for ``d_model=512, warmup_steps=4000``); at ``4 * warmup_steps`` it is half
    the peak.

    Args:
        step: the optimizer step, ``>= 1`` (step 0 would give a zero learning
            rate: the first update would be wasted).
        d_model: model width (> 0).
        warmup_steps: warmup length in steps (> 0; paper: 4000).
        factor: a multiplier (the Annotated Transformer's ``factor``; 1.0 = paper).

    Returns:
        the learning rate (float, > 0).

    Raises:
        ValueError: ``step < 1``, or non-positive ``d_model``/``warmup_steps``.

    Source: Vaswani et al. (2017), section 5.3, equation (3).
    """
    check_int(step, "step", 1, hint=" (the first optimizer step is step 1)")
    if d_model < 1 or warmup_steps < 1:
        raise ValueError(f"d_model and warmup_steps must be positive; got d_model={d_model}, warmup_steps={warmup_steps}")
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def warmup_cosine_lr(step: int, peak_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0, progress: float | None = None) -> float:
    """Linear warmup to ``peak_lr``, then a half-cosine decay to ``min_lr``.

    ``lr = peak_lr * step / warmup_steps`` for ``step <= warmup_steps`` (so step
    1 is already non-zero), then
    ``min_lr + (peak_lr - min_lr) * (1 + cos(pi * t)) / 2`` with
    ``t = (step - warmup_steps) / (total_steps - warmup_steps)`` clipped to
    ``[0, 1]`` (``min_lr`` after ``total_steps``).

    Args:
        step: the optimizer step, ``>= 1``.
        peak_lr: the learning rate at the end of warmup.
        warmup_steps: ``>= 0`` (0: start at the peak).
        total_steps: step at which the decay reaches ``min_lr``.
        min_lr: the floor.
        progress: if given, use ``max(t, progress)`` as the decay fraction
            (lets a wall-clock-limited run decay by elapsed time).

    Returns:
        the learning rate (float).

    Raises:
        ValueError: ``step < 1`` or inconsistent arguments.

    Source: Loshchilov & Hutter (2017), "SGDR" (cosine annealing); warmup as
    in the paper, section 5.3.
    """
    check_int(step, "step", 1, hint=" (the first optimizer step is step 1)")
    if warmup_steps < 0 or total_steps < 1:
        raise ValueError(f"need warmup_steps >= 0 and total_steps >= 1; got {warmup_steps}, {total_steps}")
    if step <= warmup_steps:
        return peak_lr * step / warmup_steps
    span = max(total_steps - warmup_steps, 1)
    t = min(max((step - warmup_steps) / span, 0.0), 1.0)
    if progress is not None:
        t = min(max(t, progress), 1.0)
    return min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))


def warmup_constant_lr(step: int, peak_lr: float, warmup_steps: int) -> float:
    """Linear warmup to ``peak_lr`` over ``warmup_steps`` steps, then constant.

    Args:
        step: the optimizer step, ``>= 1``; peak_lr: the plateau;
        warmup_steps: ``>= 0``.

    Returns:
        ``peak_lr * min(1, step / warmup_steps)`` (``peak_lr`` if ``warmup_steps == 0``).

    Source: chapter 9 (the simplest warmup).
    """
    check_int(step, "step", 1, hint=" (the first optimizer step is step 1)")
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0; got {warmup_steps}")
    return peak_lr if warmup_steps == 0 else peak_lr * min(1.0, step / warmup_steps)


# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------
@dataclass
class TrainConfig:
    """Everything :func:`train` needs besides the model and the data.

    Attributes:
        max_steps: number of optimizer steps to run (the stopping point, and
            the end of the cosine decay).
        time_budget_s: stop after this many seconds of training (``None`` =
            no limit). With ``schedule="warmup_cosine"`` the decay then also
            follows elapsed time (``max`` of step and time fractions), so a
            wall-clock-limited run still ends at ``min_lr`` (not reproducible
            step for step: use ``max_steps`` for that).
        optimizer: ``"adam"`` (the paper) or ``"adamw"`` (decoupled weight decay).
        lr: peak learning rate of the ``warmup_*`` schedules.
        schedule: ``"noam"`` (paper, eq. 3), ``"warmup_cosine"`` or ``"warmup_constant"``.
        warmup_steps: warmup length in optimizer steps (paper: 4000).
        min_lr: floor of the cosine decay.
        noam_factor: multiplier of the ``"noam"`` schedule (1.0 = paper).
        betas, adam_eps: Adam's betas and epsilon (paper: 0.9, 0.98, 1e-9).
        weight_decay: AdamW only; applied to matrices (``dim >= 2``), not to
            biases and LayerNorm gains.
        label_smoothing: ``eps_ls`` (paper 0.1); ``smoothing_convention``:
            ``"pytorch"`` or ``"annotated"`` (see :func:`label_smoothed_cross_entropy`).
        pad_id: the padding id of the targets (ignored by the loss).
        clip_grad_norm: clip the global gradient norm to this (``None`` = off).
        accumulation_steps: micro-batches per optimizer step (per process
            under DDP); the scheduler steps once per optimizer step.
        loss_normalization: how the micro-batch losses of one optimizer step
            (``accumulation_steps`` micro-batches times the number of
            processes) are combined. ``"batches"``: each micro-batch's mean
            loss divided by the number of micro-batches - the mean of the
            means, equal to the loss of the combined batch only when every
            micro-batch has the same number of target tokens. ``"tokens"``:
            the summed token losses divided by the group's total number of
            target tokens - exactly the loss (and gradient) of the combined
            batch, whatever the lengths (chapter 11). With one micro-batch
            and one process the two are the same.
        amp: ``"auto"`` (float16 autocast + GradScaler on CUDA, off on CPU),
            ``"off"``, ``"fp16"`` (CUDA only) or ``"bf16"`` (bfloat16 autocast,
            CPU or CUDA, no scaler).
        log_every: keep a history entry (and update the progress bar) every
            this many steps; 1 = every step.
        entropy_every: measure attention entropy every this many steps (needs
            a model with ``record_attention``; 0/None = never).
        eval_every: validation loss every this many steps (and at the end) if
            validation data is given; ``None`` = only at the end.
        checkpoint_every: save a checkpoint every this many steps (needs
            ``checkpoint_path``); ``None`` = only at the end.
        checkpoint_path: where to save (``None`` = never); a ``{step}`` in
            the name is replaced by the step (keeps one file per checkpoint).
        log_path: append one JSON line per history entry to this file.
        seed: seeds torch, Python's ``random`` at the start (not on resume,
            which restores the saved random states instead).
        progress: show a ``tqdm`` progress bar (rank 0 only).

    Raises:
        ValueError: from ``__post_init__`` for an unknown name or a bad value.

    Source: Vaswani et al. (2017), section 5 (training); chapter 9.
    """

    max_steps: int = 1000
    time_budget_s: float | None = None
    optimizer: str = "adamw"
    lr: float = 1e-3
    schedule: str = "warmup_cosine"
    warmup_steps: int = 300
    min_lr: float = 0.0
    noam_factor: float = 1.0
    betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    weight_decay: float = 0.01
    label_smoothing: float = 0.1
    smoothing_convention: str = "pytorch"
    pad_id: int | None = 0
    clip_grad_norm: float | None = 1.0
    accumulation_steps: int = 1
    loss_normalization: str = "batches"
    amp: str = "auto"
    log_every: int = 1
    entropy_every: int | None = 10
    eval_every: int | None = None
    checkpoint_every: int | None = None
    checkpoint_path: str | None = None
    log_path: str | None = None
    seed: int = 0
    progress: bool = True

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)  # type: ignore[assignment]
        check_int(self.max_steps, "max_steps")
        check_choice(self.optimizer, "optimizer", _OPTIMIZERS)
        check_choice(self.schedule, "schedule", _SCHEDULES)
        check_choice(self.smoothing_convention, "smoothing_convention", _CONVENTIONS)
        check_choice(self.amp, "amp", _AMP)
        check_choice(self.loss_normalization, "loss_normalization", _NORMALIZATIONS)
        check_int(self.accumulation_steps, "accumulation_steps")
        noam = self.schedule == "noam"
        check_int(self.warmup_steps, "warmup_steps", 1 if noam else 0, hint=" for the noam schedule" if noam else "")
        check_probability(self.label_smoothing, "label_smoothing")
        if self.clip_grad_norm is not None and self.clip_grad_norm <= 0:
            raise ValueError(f"clip_grad_norm must be positive or None; got {self.clip_grad_norm}")
        check_int(self.log_every, "log_every")
        if self.time_budget_s is not None and self.time_budget_s < 0:
            raise ValueError(f"time_budget_s must be >= 0 or None; got {self.time_budget_s}")
        check_number(self.lr, "lr", low=0, low_inclusive=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (stored in checkpoints)."""
        d = asdict(self)
        d["betas"] = list(self.betas)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``.

        Reads configurations saved before ``eps`` was renamed ``adam_eps``
        (``eps`` also names the LayerNorm epsilon and label smoothing).
        """
        if "eps" in d and "adam_eps" not in d:
            d = {("adam_eps" if k == "eps" else k): v for k, v in d.items()}
        return config_from_dict(cls, d)


def lr_at_step(step: int, config: TrainConfig, d_model: int, progress: float | None = None) -> float:
    """The learning rate that optimizer step ``step`` (1-based) uses under ``config``.

    Args:
        step: ``>= 1``.
        config: picks the schedule and its parameters.
        d_model: model width (used by ``"noam"`` only; may be ``None`` otherwise).
        progress: elapsed-time fraction for a time-limited cosine decay.

    Returns:
        the learning rate (float, > 0 for step 1 whenever ``config.lr > 0``).

    Source: chapter 9.
    """
    if config.schedule == "noam":
        return noam_lr(step, d_model, config.warmup_steps, config.noam_factor)
    if config.schedule == "warmup_cosine":
        return warmup_cosine_lr(step, config.lr, config.warmup_steps, config.max_steps, config.min_lr, progress)
    return warmup_constant_lr(step, config.lr, config.warmup_steps)


def build_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """Adam or AdamW over the trainable parameters of ``model``.

    The base learning rate is 1.0: :func:`build_scheduler` multiplies it by the
    absolute learning rate of each step. PyTorch's fused implementation is
    used (``fused=True``: the same update, one kernel for all parameters;
    much faster than the per-parameter loop on CPU). For AdamW, weight decay applies to
    parameters with ``dim >= 2`` only (matrices and embeddings).

    Args:
        model: the module to optimise (shared weights appear once).
        config: ``optimizer``, ``betas``, ``adam_eps``, ``weight_decay``.

    Returns:
        a :class:`torch.optim.Adam` or :class:`torch.optim.AdamW`.

    Source: Vaswani et al. (2017), section 5.3 (Adam, beta1 0.9, beta2 0.98,
    eps 1e-9); Loshchilov & Hutter (2019) (AdamW).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    # The fused implementation (one kernel for all parameters) is much faster
    # than the per-parameter loop on CPU for small models; same update rule.
    fused = all(p.dtype in (torch.float32, torch.float16, torch.bfloat16) for p in params)
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=1.0, betas=config.betas, eps=config.adam_eps, fused=fused)
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=1.0, betas=config.betas, eps=config.adam_eps, fused=fused)


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    config: TrainConfig,
    d_model: int,
    progress_fn: Callable[[], float | None] | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A :class:`~torch.optim.lr_scheduler.LambdaLR` that follows :func:`lr_at_step`.

    Call ``scheduler.step()`` once after each ``optimizer.step()`` (never per
    micro-batch). The scheduler's internal counter starts at 0 while the
    schedule's steps start at 1, so the lambda evaluates step ``count + 1``:
    the first update uses ``lr_at_step(1)`` (non-zero), the second
    ``lr_at_step(2)``, and so on - no zero and no repeated value at the start.

    Args:
        optimizer: from :func:`build_optimizer` (base lr 1.0).
        config: the schedule.
        d_model: for ``"noam"`` (may be ``None`` for the other schedules).
        progress_fn: returns the elapsed-time fraction (or ``None``) for a
            time-limited cosine decay.

    Source: chapter 9.
    """

    def factor(count: int) -> float:
        progress = progress_fn() if progress_fn is not None else None
        return lr_at_step(count + 1, config, d_model, progress)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# --------------------------------------------------------------------------
# Batches, devices, distributed
# --------------------------------------------------------------------------
def _count_tokens(tgt_out: Tensor, pad_id: int | None) -> int:
    """Target tokens that count in the loss (all of them when ``pad_id`` is ``None``)."""
    return int((tgt_out != pad_id).sum()) if pad_id is not None else tgt_out.numel()


def unpack_batch(batch: Any, device: torch.device | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """``(src, tgt_in, tgt_out, src_mask, tgt_mask)`` of one batch, moved to ``device`` if given.

    A batch is a :class:`course_lib.data.Batch` (any object with attributes
    ``src``, ``tgt_in``, ``tgt_out`` and optionally ``src_mask``,
    ``tgt_mask``) or a ``(src, tgt_in, tgt_out)`` tuple, whose masks are
    ``None`` (the model then builds them). Shapes: see the module docstring.

    Raises:
        ValueError: a tuple that does not have three items.
        TypeError: an object without those attributes.
    """
    if isinstance(batch, (tuple, list)):
        if len(batch) != 3:
            raise ValueError(f"a tuple batch must be (src, tgt_in, tgt_out); got {len(batch)} items")
        parts = (*batch, None, None)
    else:
        try:
            parts = (batch.src, batch.tgt_in, batch.tgt_out, getattr(batch, "src_mask", None), getattr(batch, "tgt_mask", None))
        except AttributeError as exc:
            raise TypeError(
                f"a batch needs attributes src, tgt_in, tgt_out (like course_lib.data.Batch) or must be a "
                f"(src, tgt_in, tgt_out) tuple; got {type(batch).__name__}"
            ) from exc
    if device is None:
        return parts
    return tuple(None if t is None else t.to(device, non_blocking=True) for t in parts)  # type: ignore[return-value]


def _dist_info() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_distributed(backend: str | None = None) -> tuple[int, int]:
    """Initialise ``torch.distributed`` from the ``torchrun`` environment, if any.

    Reads ``WORLD_SIZE``/``RANK``/``MASTER_ADDR``/``MASTER_PORT`` (set by
    ``torchrun``). Does nothing when ``WORLD_SIZE`` is unset or 1, or when a
    process group already exists.

    Args:
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (CUDA); default ``"nccl"``
            when CUDA is available, else ``"gloo"``.

    Returns:
        ``(rank, world_size)``.

    Source: PyTorch documentation, "torchrun (Elastic Launch)" and
    ``DistributedDataParallel``; chapter 9.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return dist.get_rank(), dist.get_world_size()


def cpu_supports_bf16() -> bool:
    """Whether this CPU has native bfloat16 matrix instructions (AVX512-BF16 or AMX).

    With them, ``amp="bf16"`` (bfloat16 autocast) makes CPU training faster
    (about 1.3-2x for the course's models on an AVX512-BF16 machine); without
    them bfloat16 is emulated and slower than float32.

    Source: chapter 9 (mixed precision); PyTorch's oneDNN backend check.
    """
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _epoch_stream(train_data: Any, epoch: int) -> Iterable[Any]:
    return train_data(epoch) if callable(train_data) else train_data


def mixed_precision(amp: str, device: str | torch.device) -> tuple[Callable[[], Any], Any]:
    """The autocast context factory and gradient scaler for a mixed-precision setting.

    Used by :func:`train` around every forward pass (the loss and the
    backward pass run outside autocast; autocast already produced float32
    where it matters, e.g. the softmax and the loss inputs).

    Args:
        amp: ``"off"`` (float32), ``"bf16"`` (bfloat16 autocast on the
            device's type - CPU or CUDA; no scaler: bfloat16 has float32's
            exponent range, so gradients do not underflow), ``"fp16"``
            (float16 autocast with a :class:`torch.amp.GradScaler`, CUDA only:
            float16 gradients below ~6e-8 flush to zero unless the loss is
            scaled up first), or ``"auto"`` (``"fp16"`` on CUDA, ``"off"``
            elsewhere).
        device: where the model runs (``torch.device`` or a string like ``"cpu"``).

    Returns:
        ``(autocast, scaler)``: ``autocast()`` makes a fresh context manager
        (``contextlib.nullcontext`` when off); ``scaler`` is a
        ``GradScaler`` for ``"fp16"``, else ``None``.

    Raises:
        ValueError: an unknown ``amp``, or ``amp="fp16"`` on a non-CUDA device.

    Source: chapter 9 (mixed precision); Micikevicius et al. (2018), "Mixed
    Precision Training" (loss scaling).
    """
    device = torch.device(device)
    check_choice(amp, "amp", _AMP)
    if amp == "auto":
        amp = "fp16" if device.type == "cuda" else "off"
    if amp == "off":
        return contextlib.nullcontext, None
    if amp == "fp16":
        if device.type != "cuda":
            raise ValueError("amp='fp16' needs a CUDA device (float16 autocast on CPU is not supported); use 'bf16' or 'off'")
        scaler = torch.amp.GradScaler("cuda")
        return (lambda: torch.autocast("cuda", dtype=torch.float16)), scaler
    return (lambda: torch.autocast(device.type, dtype=torch.bfloat16)), None


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": json.dumps(_py_state_to_list(random.getstate()))}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _py_state_to_list(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = json.loads(state["python"])
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------
def _serialize_tokenizers(tokenizers: dict[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, tok in (tokenizers or {}).items():
        if isinstance(tok, str):
            out[name] = tok
        elif hasattr(tok, "to_json"):
            out[name] = tok.to_json()
        elif hasattr(tok, "to_str"):
            out[name] = tok.to_str()
        else:
            raise TypeError(f"tokenizer {name!r} ({type(tok).__name__}) has no to_json()/to_str(); pass a JSON string")
    return out


def _atomic_torch_save(obj: dict[str, Any], path: str | os.PathLike) -> Path:
    """``torch.save`` to ``path`` through a temporary file and a rename: never a half-written checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)
    return path


def _model_config_dict(model: nn.Module) -> dict[str, Any] | None:
    config = getattr(model, "config", None)
    return config.to_dict() if hasattr(config, "to_dict") else None


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    *,
    step: int = 0,
    train_config: TrainConfig | None = None,
    tokenizers: dict[str, Any] | None = None,
    scaler: Any = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint atomically (temporary file, then rename).

    The file is a ``torch.save`` dict of tensors, numbers and strings only, so
    :func:`load_checkpoint` can read it with ``weights_only=True`` (no pickled
    code is executed). Keys: ``format``, ``step``, ``model`` (state dict),
    ``model_config`` (``model.config.to_dict()`` when the model has one),
    ``optimizer``, ``scheduler``, ``scaler`` (or ``None``), ``train_config``,
    ``tokenizers`` (``{name: JSON string}``, from ``to_json()``), ``rng``
    (torch and Python random states, for exact resume) and ``extra``.

    Args:
        path: destination file (parent folders are created).
        model: the model (a ``DistributedDataParallel`` wrapper is unwrapped).
        optimizer, scheduler, scaler: their ``state_dict()`` is stored if given.
        step: optimizer steps done.
        train_config: stored as a dict.
        tokenizers: ``{"src": ..., "tgt": ...}`` objects with ``to_json()``
            (e.g. :class:`course_lib.data.TextTokenizer`) or JSON strings.
        extra: any further JSON-like data (e.g. the data position).

    Returns:
        the path written.

    Source: chapter 9.
    """
    module = getattr(model, "module", model)
    ckpt = {
        "format": CHECKPOINT_FORMAT,
        "step": int(step),
        "model": module.state_dict(),
        "model_config": _model_config_dict(module),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "train_config": train_config.to_dict() if train_config is not None else None,
        "tokenizers": _serialize_tokenizers(tokenizers),
        "rng": _rng_state(),
        "extra": dict(extra or {}),
    }
    return _atomic_torch_save(ckpt, path)


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (``weights_only=True``).

    Args:
        path: the file.
        map_location: where to put the tensors (default CPU).

    Returns:
        the checkpoint dict (see :func:`save_checkpoint` for its keys).

    Raises:
        FileNotFoundError: no such file (naming it).
        ValueError: the file is not a course_lib checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    ckpt = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a course_lib checkpoint (expected format {CHECKPOINT_FORMAT!r})")
    return ckpt


def model_from_checkpoint(ckpt: dict[str, Any] | str | os.PathLike, device: str | torch.device = "cpu") -> nn.Module:
    """Rebuild a :class:`course_lib.model.Transformer` from a checkpoint, in float32, in eval mode.

    Weights stored in float16 (see :func:`export_for_inference`) are cast back
    to float32.

    Args:
        ckpt: a checkpoint dict or a path to one.
        device: where to put the model.

    Raises:
        ValueError: the checkpoint has no ``model_config``.

    Source: chapter 9.
    """
    from .model import Transformer, TransformerConfig

    if not isinstance(ckpt, dict):
        ckpt = load_checkpoint(ckpt)
    if not ckpt.get("model_config"):
        raise ValueError("the checkpoint has no model_config: it was not saved from a course_lib Transformer")
    model = Transformer(TransformerConfig.from_dict(ckpt["model_config"]))
    state = {k: (v.float() if v.is_floating_point() else v) for k, v in ckpt["model"].items()}
    model.load_state_dict(state)
    return model.to(device).eval()


def export_for_inference(
    ckpt: dict[str, Any] | str | os.PathLike, out_path: str | os.PathLike, dtype: torch.dtype = torch.float16
) -> Path:
    """Write a small inference-only copy of a checkpoint: no optimizer, weights in ``dtype``.

    Keeps ``model_config``, ``train_config``, ``tokenizers``, ``step`` and
    ``extra``; drops the optimizer, scheduler, scaler and random states (so it
    cannot be resumed). :func:`model_from_checkpoint` casts the weights back
    to float32. Float16 halves the size; the rounding changes logits slightly
    (chapter 9 measures the effect on BLEU).

    Args:
        ckpt: a checkpoint dict or path; out_path: the destination;
        dtype: ``torch.float16`` (default), ``torch.bfloat16`` or ``torch.float32``.

    Returns:
        the path written.
    """
    if not isinstance(ckpt, dict):
        ckpt = load_checkpoint(ckpt)
    small = {
        "format": CHECKPOINT_FORMAT,
        "step": ckpt["step"],
        "model": {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in ckpt["model"].items()},
        "model_config": ckpt.get("model_config"),
        "optimizer": None,
        "scheduler": None,
        "scaler": None,
        "train_config": ckpt.get("train_config"),
        "tokenizers": ckpt.get("tokenizers", {}),
        "rng": None,
        "extra": dict(ckpt.get("extra") or {}, weights_dtype=str(dtype).replace("torch.", "")),
    }
    return _atomic_torch_save(small, out_path)


# --------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------
_END = object()


class TrainingDivergedError(FloatingPointError):
    """Raised by :func:`train` when the loss (or, without a GradScaler, the gradient norm) is NaN or infinite."""


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        step: optimizer steps done in total (including those before a resume).
        history: one dict per logged step: ``step``, ``loss`` (training loss
            of that step, label-smoothed, mean over the step's micro-batches
            and processes), ``lr`` (used by that step), ``grad_norm`` (global
            norm before clipping), ``attn_entropy`` (mean over attention
            layers, nats, or ``None``), ``tokens`` (target tokens of the step,
            all processes), ``elapsed_s``.
        valid_history: ``{"step", "valid_loss", "valid_ppl"}`` dicts.
        elapsed_s: wall-clock seconds of this call.
        stopped: ``"max_steps"``, ``"time_budget"`` or ``"callback"``.
        checkpoint: the last checkpoint written, or ``None``.
    """

    step: int
    history: list[dict[str, Any]] = field(default_factory=list)
    valid_history: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float = 0.0
    stopped: str = "max_steps"
    checkpoint: str | None = None

    @property
    def losses(self) -> list[float]:
        """The logged training losses, in order."""
        return [h["loss"] for h in self.history]


@torch.no_grad()
def evaluate_loss(model: nn.Module, batches: Iterable[Any], pad_id: int | None = 0, device: str | torch.device | None = None) -> dict[str, float]:
    """Mean per-token cross-entropy (no label smoothing) over validation batches.

    Args:
        model: maps ``(src, tgt_in, src_mask, tgt_mask)`` to logits
            ``(batch, tgt_len, V)``; put in eval mode for the call and restored.
        batches: batches as for :func:`train`.
        pad_id: padding id of ``tgt_out``.
        device: default: the model's device.

    Returns:
        ``{"loss": nats per target token, "ppl": exp(loss), "tokens": count}``.

    Source: chapter 9 (perplexity = exp of the per-token cross-entropy).
    """
    module = getattr(model, "module", model)
    device = torch.device(device) if device is not None else next(module.parameters()).device
    was_training = module.training
    module.eval()
    total, count = 0.0, 0
    try:
        for batch in batches:
            src, tgt_in, tgt_out, src_mask, tgt_mask = unpack_batch(batch, device)
            logits = module(src, tgt_in, src_mask, tgt_mask)
            total += float(label_smoothed_cross_entropy(logits, tgt_out, 0.0, pad_id, reduction="sum"))
            count += _count_tokens(tgt_out, pad_id)
    finally:
        module.train(was_training)
    loss = total / max(count, 1)
    return {"loss": loss, "ppl": math.exp(min(loss, 50.0)), "tokens": count}


def _groups(it: Iterator[Any], size: int, consumed: int) -> Iterator[tuple[int, list[Any]]]:
    """Yield (raw batches consumed so far, group of `size` raw batches) from an iterator."""
    group: list[Any] = []
    for batch in it:
        group.append(batch)
        consumed += 1
        if len(group) == size:
            yield consumed, group
            group = []


@dataclass
class TrainState:
    """Everything a training run changes, in one object.

    :func:`start_training` builds it (fresh or from a checkpoint), each
    :func:`train_step` advances it by one optimizer step, :func:`step_batches`
    moves it through the data, and :func:`save_train_state` writes it to a
    checkpoint that :func:`start_training` can resume from.

    Attributes:
        config: the run's :class:`TrainConfig`.
        model: the module being trained (never a wrapper): what is saved,
            clipped and asked for its attention entropy.
        ddp_model: what the forward pass calls: a ``DistributedDataParallel``
            wrapper of ``model`` when several processes train, else ``model``.
        optimizer, scheduler: from :func:`build_optimizer` and :func:`build_scheduler`.
        scaler: a ``torch.amp.GradScaler`` (``amp="fp16"``) or ``None``.
        autocast: makes the forward pass's autocast context (:func:`mixed_precision`).
        device: where the model and the batches are.
        rank, world: this process's rank and the number of processes.
        step: optimizer steps done, those before a resume included.
        epoch, skip: the epoch being read, and how many of its batches a
            resumed run skips.
        position: ``{"epoch", "batch"}`` reached by the last step (stored in
            checkpoints as the data position).
        pending_rng: the random states of the checkpoint resumed from, until
            :func:`step_batches` restores them.
        start_time: ``time.perf_counter()`` when the run started.
        checkpoint: the last checkpoint file written, or ``None``.
        checkpoint_step: the step of the last :func:`save_train_state` call (-1: none).
    """

    config: TrainConfig
    model: nn.Module
    ddp_model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: Any
    autocast: Callable[[], Any]
    device: torch.device
    rank: int = 0
    world: int = 1
    step: int = 0
    epoch: int = 0
    skip: int = 0
    position: dict[str, int] = field(default_factory=dict)
    pending_rng: dict[str, Any] | None = None
    start_time: float = 0.0
    checkpoint: str | None = None
    checkpoint_step: int = -1


def train(
    model: nn.Module,
    train_data: Callable[[int], Iterable[Any]] | Iterable[Any],
    config: TrainConfig | None = None,
    *,
    valid_data: Iterable[Any] | None = None,
    tokenizers: dict[str, Any] | None = None,
    resume_from: str | os.PathLike | dict[str, Any] | None = None,
    device: str | torch.device | None = None,
    extra: dict[str, Any] | None = None,
    callback: Callable[[int, nn.Module], bool | None] | None = None,
) -> TrainResult:
    """Train ``model`` with teacher forcing; return the logged history.

    The loop, built from named pieces: :func:`start_training` (seeds or a
    checkpoint, optimizer, scheduler, scaler, in a :class:`TrainState`),
    :func:`step_batches` (the batches of each step, epoch after epoch),
    :func:`train_step` (one optimizer step), :class:`TrainLog` (history, log
    file, progress bar), :func:`validate`, :func:`save_train_state` and
    :func:`stop_reason` (callback, ``max_steps``, time budget).

    One optimizer step: for each of ``accumulation_steps`` micro-batches,
    ``logits = model(src, tgt_in, src_mask, tgt_mask)``, the label-smoothed
    loss against ``tgt_out`` (mean over its non-padding tokens) divided by
    ``accumulation_steps`` (or, with ``loss_normalization="tokens"``, the sum
    over its tokens divided by the tokens of the whole step),
    ``backward()``; then unscale (fp16), clip the
    global gradient norm, ``optimizer.step()``, ``scheduler.step()`` (once per
    optimizer step, not per micro-batch).

    Data: ``train_data`` is either a callable ``epoch -> iterable of batches``
    (it must give the same batches for the same epoch, e.g. shuffle with a
    generator seeded by the epoch: this is what makes resuming exact) or a
    re-iterable sequence of batches (a list, used again each epoch). A tail
    of an epoch too short for a full optimizer step is dropped.

    Data parallelism: if ``torch.distributed`` is initialised (e.g. under
    ``torchrun``, see :func:`init_distributed`) the model is wrapped in
    ``DistributedDataParallel`` and every process reads the same stream but
    uses only its share: of each run of ``world_size * accumulation_steps``
    batches, process ``r`` takes batches ``r * accumulation_steps`` to
    ``(r + 1) * accumulation_steps - 1``. DDP averages the gradients, so two
    processes with one batch each take the same step as one process with
    ``accumulation_steps=2`` over both batches (and as one process on the
    concatenated batch when the two batches have the same number of target
    tokens, or always with ``loss_normalization="tokens"``). Logged losses
    are those of the whole step (all processes); only rank 0 shows the
    progress bar, writes logs and checkpoints.

    Watch (logged per step): the loss, the learning rate, the gradient norm
    (before clipping) and the attention entropy (every ``entropy_every``
    steps). A NaN/inf loss stops training with :class:`TrainingDivergedError`.

    Resume: pass ``resume_from`` (a path or a checkpoint dict saved by this
    function) with the same model architecture, data and config: the model,
    optimizer, scheduler, scaler, random states and data position are
    restored, so the following losses equal those of an uninterrupted run
    (exactly, on CPU).

    Args:
        model: maps ``(src, tgt_in, src_mask, tgt_mask)`` to logits
            ``(batch, tgt_len, V)`` (a :class:`course_lib.model.Transformer`, or
            any module with that call signature). Moved to ``device``.
        train_data: see above.
        config: a :class:`TrainConfig` (default: ``TrainConfig()``).
        valid_data: batches for the validation loss (a re-iterable), or ``None``.
        tokenizers: stored in checkpoints (``{"src": ..., "tgt": ...}``).
        resume_from: checkpoint to continue from.
        device: default CUDA if available, else CPU.
        extra: JSON-like data stored in every checkpoint (e.g. data settings).
        callback: called as ``callback(step, model)`` after every optimizer
            step (on every process); returning ``True`` stops training
            (``stopped="callback"``), e.g. early stopping on a metric. The
            model is in training mode; decoders switch to eval mode and back.

    Returns:
        a :class:`TrainResult`.

    Raises:
        TrainingDivergedError: non-finite loss (message names the step, the
            learning rate and what usually causes it).
        ValueError: an epoch without a single full optimizer step, a bad config.

    Source: Vaswani et al. (2017), section 5; chapter 9.
    """
    config = config or TrainConfig()
    state = start_training(model, config, device, resume_from)
    log = TrainLog(config, state.rank, state.step)
    state.ddp_model.train()
    stopped = None
    try:
        for group in step_batches(train_data, state):
            entry = train_step(state, group)  # forward, loss, backward, clip, optimizer and scheduler steps
            elapsed = time.perf_counter() - state.start_time
            log.log_step(dict(entry, elapsed_s=round(elapsed, 3)))
            if _due(config.eval_every, state.step):
                validate(state, valid_data, log)
            if _due(config.checkpoint_every, state.step):
                save_train_state(state, tokenizers, extra)
            stopped = stop_reason(state, elapsed, callback)
            if stopped is not None:
                break
        if not _due(config.eval_every, state.step):  # a last validation, unless this step had one
            validate(state, valid_data, log)
        if config.checkpoint_path and state.checkpoint_step != state.step:
            save_train_state(state, tokenizers, extra)
    finally:
        log.close()
        if hasattr(state.model, "record_attention"):
            state.model.record_attention(False)
    return TrainResult(
        step=state.step, history=log.history, valid_history=log.valid_history,
        elapsed_s=time.perf_counter() - state.start_time, stopped=stopped or "max_steps", checkpoint=state.checkpoint,
    )


def _due(every: int | None, step: int) -> bool:
    """Whether something done every ``every`` steps (``0``/``None``: never) is due at ``step``."""
    return bool(every) and step % every == 0


def start_training(
    model: nn.Module,
    config: TrainConfig,
    device: str | torch.device | None = None,
    resume_from: str | os.PathLike | dict[str, Any] | None = None,
) -> TrainState:
    """Set up a run: device, seeds or a checkpoint, DDP wrapper, optimizer, scheduler, scaler.

    A fresh run seeds torch and Python's ``random`` with ``config.seed``; a
    resumed one loads the model, optimizer, scheduler and scaler states, the
    step and the data position of ``resume_from`` (its random states are
    restored later, by :func:`step_batches`). Under ``torch.distributed``
    the model is wrapped in ``DistributedDataParallel``.

    Args:
        model: the model (a ``DistributedDataParallel`` wrapper is used as it
            is); moved to ``device``.
        config: the run's settings.
        device: default CUDA if available, else CPU.
        resume_from: a checkpoint path or dict from :func:`save_train_state`.

    Returns:
        the :class:`TrainState` of step 0, or of the checkpoint's step.

    Raises:
        ValueError: ``schedule="noam"`` with a model that has no
            ``config.d_model``; ``amp="fp16"`` without CUDA.
    """
    device = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rank, world = _dist_info()
    module = getattr(model, "module", model).to(device)
    d_model = model_setting(module, "d_model")
    if d_model is None and config.schedule == "noam":
        raise ValueError(
            "schedule='noam' needs the model width d_model, but the model has no config.d_model: "
            "give the model a config with d_model, or use schedule='warmup_cosine' or 'warmup_constant'"
        )
    start_time = time.perf_counter()
    budget = config.time_budget_s

    def time_progress() -> float | None:  # the share of the time budget used: a cosine decay follows it
        if budget is None:
            return None
        return 1.0 if budget <= 0 else min((time.perf_counter() - start_time) / budget, 1.0)

    ckpt = None
    if resume_from is not None:
        ckpt = resume_from if isinstance(resume_from, dict) else load_checkpoint(resume_from, map_location="cpu")
        module.load_state_dict(ckpt["model"])
    else:
        torch.manual_seed(config.seed)
        random.seed(config.seed)
    if world > 1 and not isinstance(model, nn.parallel.DistributedDataParallel):
        ddp_model: nn.Module = nn.parallel.DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)
    else:
        ddp_model = model if isinstance(model, nn.parallel.DistributedDataParallel) else module
    optimizer = build_optimizer(module, config)
    scheduler = build_scheduler(optimizer, config, d_model, time_progress)
    autocast, scaler = mixed_precision(config.amp, device)
    state = TrainState(config, module, ddp_model, optimizer, scheduler, scaler, autocast, device, rank, world, start_time=start_time)
    if ckpt is not None:
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        if scaler is not None and ckpt.get("scaler") is not None:
            scaler.load_state_dict(ckpt["scaler"])
        position = (ckpt.get("extra") or {}).get("data_position", {})
        state.step, state.epoch, state.skip = int(ckpt["step"]), int(position.get("epoch", 0)), int(position.get("batch", 0))
        state.pending_rng = ckpt.get("rng")
    state.position = {"epoch": state.epoch, "batch": state.skip}
    return state


def step_batches(train_data: Callable[[int], Iterable[Any]] | Iterable[Any], state: TrainState) -> Iterator[list[Any]]:
    """Yield, step after step, the ``world * accumulation_steps`` batches of one optimizer step.

    Reads epoch ``state.epoch`` of ``train_data`` (see :func:`train`),
    skipping the ``state.skip`` batches a resumed run has already used, then
    the following epochs, while ``state.step < config.max_steps``; the tail of
    an epoch too short for a whole step is dropped. Keeps ``state.position``
    (epoch, batches read) up to date for the checkpoints. A resumed run's
    random states are restored once the first epoch's iterator exists.

    Raises:
        ValueError: an epoch that does not give one whole optimizer step.
    """
    size = state.world * state.config.accumulation_steps
    while state.step < state.config.max_steps:
        stream = iter(_epoch_stream(train_data, state.epoch))
        for _ in range(state.skip):
            if next(stream, _END) is _END:
                break
        if state.pending_rng is not None:
            # Restore the random state only now: creating a DataLoader
            # iterator draws from the global generator, which the
            # uninterrupted run did at the start of the epoch, not here.
            _set_rng_state(state.pending_rng)
            state.pending_rng = None
        progressed = False
        for consumed, group in _groups(stream, size, state.skip):
            progressed = True
            state.position = {"epoch": state.epoch, "batch": consumed}  # consumed counts from state.skip
            yield group
        if not progressed and state.skip == 0:
            raise ValueError(
                f"epoch {state.epoch} of train_data gave no full optimizer step (needs {size} batches: "
                f"world_size {state.world} x accumulation_steps {state.config.accumulation_steps})"
            )
        state.epoch, state.skip = state.epoch + 1, 0
        state.position = {"epoch": state.epoch, "batch": 0}


def train_step(state: TrainState, group: list[Any]) -> dict[str, Any]:
    """One optimizer step over this process's micro-batches of ``group``; return the step's log entry.

    ``group`` holds the ``world * accumulation_steps`` batches of the step;
    this process uses its ``accumulation_steps`` of them (see :func:`train`).
    The gradients are zeroed first (so that afterwards ``.grad`` holds this
    step's gradients), then for each micro-batch: the forward pass under
    autocast, the label-smoothed loss against ``tgt_out``, and the backward
    pass of the loss divided by :func:`normalize_loss` (gradients add up over
    the micro-batches; DDP averages them over the processes after the last
    one). Then: unscale (float16), clip the global norm, optimizer step,
    scheduler step (once per optimizer step, never per micro-batch).

    Returns:
        ``{"step", "loss", "lr", "grad_norm", "attn_entropy", "tokens"}``:
        the step number, its loss (all micro-batches and processes), the
        learning rate it used, the gradient norm before clipping, the mean
        attention entropy of its last micro-batch (every
        ``config.entropy_every`` steps, else ``None``) and its target tokens.

    Raises:
        TrainingDivergedError: a non-finite loss, or (without a scaler) gradient norm.
    """
    config, model, optimizer, scaler = state.config, state.model, state.optimizer, state.scaler
    state.step += 1
    lr = optimizer.param_groups[0]["lr"]  # the learning rate of this update
    micro_batches = group[state.rank * config.accumulation_steps : (state.rank + 1) * config.accumulation_steps]
    want_entropy = hasattr(model, "record_attention") and _due(config.entropy_every, state.step)
    by_tokens = config.loss_normalization == "tokens"
    group_tokens = _group_tokens(group, config.pad_id) if by_tokens else None  # of all processes: each sees the group
    optimizer.zero_grad(set_to_none=True)
    loss_sum, n_tokens = torch.zeros((), device=state.device), 0
    for i, batch in enumerate(micro_batches):
        src, tgt_in, tgt_out, src_mask, tgt_mask = unpack_batch(batch, state.device)
        last = i == len(micro_batches) - 1
        if want_entropy and last:
            model.record_attention(True)
        with ddp_no_sync(state, last):
            with state.autocast():
                logits = state.ddp_model(src, tgt_in, src_mask, tgt_mask)
            loss = label_smoothed_cross_entropy(
                logits, tgt_out, config.label_smoothing, config.pad_id,
                convention=config.smoothing_convention, reduction="sum" if by_tokens else "mean",
            )
            scaled = normalize_loss(loss, state, group_tokens)
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        loss_sum += loss.detach()
        n_tokens += _count_tokens(tgt_out, config.pad_id)
    entropy = mean_attention_entropy(model) if want_entropy else None
    step_loss, step_tokens = reduce_step_stats(state, normalize_loss(loss_sum, state, group_tokens), n_tokens)
    raise_if_diverged(state.step, lr, step_loss)
    if scaler is not None:
        scaler.unscale_(optimizer)  # the true gradients, in float32, before clipping
    grad_norm = clip_gradients(model, config.clip_grad_norm)  # the norm before clipping
    if scaler is not None:
        scaler.step(optimizer)  # skipped if a gradient is inf/NaN
        scaler.update()
    else:
        raise_if_diverged(state.step, lr, step_loss, grad_norm)
        optimizer.step()
    state.scheduler.step()
    return {
        "step": state.step, "loss": step_loss, "lr": lr, "grad_norm": grad_norm, "attn_entropy": entropy, "tokens": step_tokens,
    }


def _group_tokens(group: list[Any], pad_id: int | None) -> int:
    """Target tokens of all the batches of ``group`` (at least 1)."""
    return max(1, sum(_count_tokens(unpack_batch(b)[2], pad_id) for b in group))


def ddp_no_sync(state: TrainState, last: bool) -> contextlib.AbstractContextManager:
    """``ddp_model.no_sync()`` for every micro-batch but the ``last`` under DDP, else a no-op context.

    DDP all-reduces the gradients during ``backward()``; inside ``no_sync`` it
    only accumulates them locally, so one optimizer step communicates once.
    """
    return contextlib.nullcontext() if (last or state.world == 1) else state.ddp_model.no_sync()


def normalize_loss(loss: Tensor, state: TrainState, group_tokens: int | None) -> Tensor:
    """A micro-batch loss (or the step's sum of them) scaled so that the step's gradient is the right mean.

    ``loss_normalization="batches"`` (``group_tokens`` is ``None``): the mean
    loss divided by ``accumulation_steps``. ``"tokens"``: the summed token
    loss times ``world / group_tokens``, ``group_tokens`` being the target
    tokens of all processes' micro-batches; DDP divides the summed gradients
    by ``world``, which the factor ``world`` undoes.
    """
    if group_tokens is not None:
        return loss * (state.world / group_tokens)
    return loss / state.config.accumulation_steps


def mean_attention_entropy(model: nn.Module) -> float | None:
    """Mean attention entropy (nats) of the layers that recorded attention, then stop recording.

    ``None`` when no layer has a value (see
    :func:`course_lib.metrics.model_attention_entropy`).
    """
    from .metrics import model_attention_entropy

    values = [v for v in model_attention_entropy(model).values() if not math.isnan(v)]
    model.record_attention(False)
    return sum(values) / len(values) if values else None


def reduce_step_stats(state: TrainState, loss: Tensor, n_tokens: int) -> tuple[float, int]:
    """The step's loss, averaged over the processes, and its target tokens, summed over them.

    Args:
        loss: this process's share of the step loss (a scalar tensor).
        n_tokens: this process's target tokens.

    Returns:
        ``(loss, tokens)`` as Python numbers (one ``all_reduce`` under DDP).
    """
    stats = torch.stack([loss, torch.tensor(float(n_tokens), device=state.device)])
    if state.world > 1:
        import torch.distributed as dist

        dist.all_reduce(stats)
        stats[0] /= state.world
    return float(stats[0]), int(stats[1])


def raise_if_diverged(step: int, lr: float, loss: float, grad_norm: float | None = None) -> None:
    """Raise :class:`TrainingDivergedError` when the step's ``loss``, or its ``grad_norm`` if given, is NaN or infinite.

    The message names the step and the learning rate, and what usually causes it.
    """
    if not math.isfinite(loss):
        raise TrainingDivergedError(
            f"training loss is {loss} at step {step} (lr {lr:.3g}). Stopped. Usual causes: a "
            f"learning rate too high or a warmup too short, float16 overflow without a GradScaler, "
            f"or a bad batch (e.g. logits of all -inf). Lower lr, lengthen warmup_steps, enable "
            f"gradient clipping, or resume from the last good checkpoint."
        )
    if grad_norm is not None and not math.isfinite(grad_norm):
        raise TrainingDivergedError(
            f"gradient norm is {grad_norm} at step {step} (loss {loss:.4f}, lr {lr:.3g}). Stopped: "
            f"an overflow in the backward pass; lower the learning rate or use float32."
        )


def clip_gradients(model: nn.Module, max_norm: float | None) -> float:
    """Clip the global gradient norm of ``model`` to ``max_norm`` (``None``: no clipping); return the norm before.

    The norm treats all gradients as one vector (parameters without a
    gradient are skipped); :func:`torch.nn.utils.clip_grad_norm_` rescales
    them in place when it exceeds ``max_norm``.
    """
    params = [p for p in model.parameters() if p.grad is not None]
    if max_norm is not None:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    from .metrics import gradient_global_norm

    return gradient_global_norm(params)


class TrainLog:
    """What a run records: its history, a JSON-lines file and a progress bar.

    Only rank 0 writes ``config.log_path`` (one JSON line per entry, appended)
    and shows the ``tqdm`` bar (when ``config.progress``).

    Attributes:
        history: the logged step entries (see :class:`TrainResult`).
        valid_history: the validation entries.
    """

    def __init__(self, config: TrainConfig, rank: int = 0, initial_step: int = 0) -> None:
        from tqdm.auto import tqdm

        self.log_every = config.log_every
        self.history: list[dict[str, Any]] = []
        self.valid_history: list[dict[str, Any]] = []
        self.file = open(config.log_path, "a", encoding="utf-8") if (config.log_path and rank == 0) else None
        disable = not config.progress or rank != 0
        self.bar = tqdm(total=config.max_steps, initial=initial_step, disable=disable, dynamic_ncols=True, desc="train")

    def log_step(self, entry: dict[str, Any]) -> None:
        """Keep a step's entry every ``log_every`` steps, and whenever it has an attention entropy."""
        if entry["step"] % self.log_every == 0 or entry["attn_entropy"] is not None:
            self.history.append(entry)
            self.write(entry)
            loss, lr, gnorm = f"{entry['loss']:.3f}", f"{entry['lr']:.2e}", f"{entry['grad_norm']:.2f}"
            self.bar.set_postfix(loss=loss, lr=lr, gnorm=gnorm, refresh=False)
        self.bar.update(1)

    def log_validation(self, entry: dict[str, Any]) -> None:
        """Keep a ``{"step", "valid_loss", "valid_ppl"}`` entry and print it above the bar."""
        self.valid_history.append(entry)
        self.write(entry)
        self.bar.write(f"step {entry['step']}: valid loss {entry['valid_loss']:.4f} (ppl {entry['valid_ppl']:.2f})")

    def write(self, entry: dict[str, Any]) -> None:
        """Append ``entry`` to the log file as one JSON line (when there is a file)."""
        if self.file is not None:
            self.file.write(json.dumps(entry) + "\n")
            self.file.flush()

    def close(self) -> None:
        """Close the bar and the file."""
        self.bar.close()
        if self.file is not None:
            self.file.close()


def validate(state: TrainState, valid_data: Iterable[Any] | None, log: TrainLog) -> None:
    """Log the validation loss of ``valid_data`` at ``state.step`` (rank 0; nothing when there is no data).

    The loss is :func:`evaluate_loss`'s plain cross-entropy per target token,
    in eval mode (no dropout, no label smoothing); ``valid_ppl`` is its exp.
    """
    if valid_data is None or state.rank != 0:
        return
    v = evaluate_loss(state.model, valid_data, state.config.pad_id, state.device)
    log.log_validation({"step": state.step, "valid_loss": v["loss"], "valid_ppl": v["ppl"]})


def save_train_state(state: TrainState, tokenizers: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> None:
    """Write ``state`` to ``config.checkpoint_path`` with :func:`save_checkpoint` (rank 0 only).

    A ``{step}`` in the path is replaced by the step. The checkpoint holds the
    model, optimizer, scheduler and scaler states, the step, the config, the
    ``tokenizers``, the random states and ``extra`` plus the data position:
    all that :func:`start_training` needs to resume exactly. Without a
    ``checkpoint_path`` nothing is written. Sets ``state.checkpoint_step``
    (and ``state.checkpoint`` when a file is written).
    """
    state.checkpoint_step = state.step
    path = state.config.checkpoint_path
    if path and state.rank == 0:
        path = path.format(step=state.step) if "{step}" in path else path
        save_checkpoint(
            path, state.model, state.optimizer, state.scheduler, step=state.step, train_config=state.config,
            tokenizers=tokenizers, scaler=state.scaler, extra=dict(extra or {}, data_position=state.position),
        )
        state.checkpoint = str(path)


def stop_reason(state: TrainState, elapsed: float, callback: Callable[[int, nn.Module], bool | None] | None = None) -> str | None:
    """Why training stops after this step: ``"callback"``, ``"max_steps"``, ``"time_budget"``, or ``None`` (go on).

    ``callback(step, model)`` is called first, at every step; returning
    ``True`` stops. ``elapsed`` is the run's seconds so far, compared with
    ``config.time_budget_s``.
    """
    if callback is not None and callback(state.step, state.model):
        return "callback"
    if state.step >= state.config.max_steps:
        return "max_steps"
    budget = state.config.time_budget_s
    if budget is not None and elapsed >= budget:
        return "time_budget"
    return None
