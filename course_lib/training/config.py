"""``TrainConfig``: every setting of a training run in one checked record (chapter 9)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from ..validation import check_choice, check_int, check_number, check_probability, config_from_dict
from .loss import LOSS_CONVENTIONS

__all__ = ["TrainConfig", "AMP_MODES", "BUDGET_CLOCKS"]


_SCHEDULES = ("noam", "warmup_cosine", "warmup_constant")


_OPTIMIZERS = ("adam", "adamw")


AMP_MODES = ("auto", "off", "fp16", "bf16")


_NORMALIZATIONS = ("batches", "tokens")
#: the clocks ``time_budget_s`` can count: wall-clock time, or this process's CPU time
BUDGET_CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


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
        budget_clock: what ``time_budget_s`` counts: ``"wall"`` (elapsed
            time) or ``"cpu"`` (this process's CPU time, ``time.process_time``:
            with one thread, the work of this run alone, whatever else a
            shared machine is doing).
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
    budget_clock: str = "wall"
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
        check_choice(self.budget_clock, "budget_clock", tuple(BUDGET_CLOCKS))
        check_choice(self.schedule, "schedule", _SCHEDULES)
        check_choice(self.smoothing_convention, "smoothing_convention", LOSS_CONVENTIONS)
        check_choice(self.amp, "amp", AMP_MODES)
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
