"""``TrainState``: everything a training run changes, in one object."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from .config import TrainConfig

__all__ = ["TrainState"]


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
        start_time: ``clock()`` when the run started.
        clock: the clock of ``config.budget_clock`` (``time.perf_counter`` or ``time.process_time``).
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
    clock: Callable[[], float] = time.perf_counter
    checkpoint: str | None = None
    checkpoint_step: int = -1

    def elapsed(self) -> float:
        """Seconds of training so far, on the run's clock (``config.budget_clock``)."""
        return self.clock() - self.start_time
