"""Training a Transformer: loss, learning-rate schedules, optimizer and the loop (chapter 9).

What is here, in the order chapter 9 introduces it (each module is one file
of this package; ``from course_lib.training import train`` keeps working):

* ``loss``: :func:`label_smoothed_cross_entropy` / :class:`LabelSmoothingLoss` - the
  training loss with label smoothing, ignoring padding, in two conventions.
* ``schedules``: :func:`noam_lr`, :func:`warmup_cosine_lr`, :func:`warmup_constant_lr`
  (and ``optimizer``'s :func:`lr_at_step`) - learning rate as a function of the optimizer step
  (1-based: the first update uses step 1, never a zero learning rate).
* ``optimizer``: :func:`build_optimizer`, :func:`build_scheduler` - Adam(0.9, 0.98, 1e-9) as in
  the paper, or AdamW.
* ``config``: :class:`TrainConfig`; ``loop``: :func:`train` - the loop: gradient accumulation,
  clipping, mixed precision, per-step logging of the three things to watch
  (loss, learning rate, gradient norm) plus attention entropy, validation,
  NaN/inf detection, checkpoints, exact resume, and data parallelism under
  ``torchrun`` (DistributedDataParallel); its pieces :class:`TrainState`,
  :func:`start_training`, :func:`step_batches`, :func:`train_step`,
  :class:`TrainLog`, :func:`validate`, :func:`save_train_state` and
  :func:`stop_reason`.
* ``state``: :class:`TrainState`; ``batches``: :func:`unpack_batch`, :func:`model_logits`;
  ``precision``: :func:`mixed_precision`; ``parallel``: :func:`init_distributed`,
  :func:`ddp_no_sync`, :func:`reduce_step_stats` (data parallelism).
* ``checkpoints``: :func:`save_checkpoint`, :func:`load_checkpoint`, :func:`model_from_checkpoint`,
  :func:`export_for_inference` - what a checkpoint holds and how to use it.

Batches: the loop reads objects with attributes ``src`` ``(batch, src_len)``,
``tgt_in`` ``(batch, tgt_len)`` (``<bos>`` + target), ``tgt_out``
``(batch, tgt_len)`` (target + ``<eos>``), and optionally ``src_mask``
``(batch, 1, 1, src_len)`` and ``tgt_mask`` ``(batch, 1, tgt_len, tgt_len)``
(bool, ``True`` = may attend; see :mod:`course_lib.masks`) - the ``Batch`` of
:mod:`course_lib.data` - or plain ``(src, tgt_in, tgt_out)`` tuples.

Nothing runs at import time; there is no global state.
"""

from .loss import label_smoothed_cross_entropy, LabelSmoothingLoss
from .schedules import noam_lr, warmup_cosine_lr, warmup_constant_lr
from .config import TrainConfig
from .optimizer import lr_at_step, build_optimizer, build_scheduler
from .batches import model_logits, unpack_batch
from .precision import cpu_supports_bf16, mixed_precision
from .parallel import ddp_no_sync, reduce_step_stats, init_distributed
from .checkpoints import save_checkpoint, load_checkpoint, model_from_checkpoint, export_for_inference
from .state import TrainState
from .loop import (
    TrainResult,
    TrainingDivergedError,
    train,
    start_training,
    step_batches,
    train_step,
    normalize_loss,
    mean_attention_entropy,
    raise_if_diverged,
    clip_gradients,
    TrainLog,
    validate,
    save_train_state,
    stop_reason,
    evaluate_loss,
)

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
    "model_logits",
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
