"""The optimizer and the learning-rate scheduler a ``TrainConfig`` asks for (chapter 9)."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .config import TrainConfig
from .schedules import noam_lr, warmup_constant_lr, warmup_cosine_lr

__all__ = ["lr_at_step", "build_optimizer", "build_scheduler"]


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
