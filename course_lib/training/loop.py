"""The training loop (chapter 9): :func:`train` and the pieces it is made of.

:func:`start_training` builds a :class:`TrainState`, :func:`step_batches`
moves it through the data, :func:`train_step` makes one optimizer step,
:class:`TrainLog` records it, :func:`validate` and :func:`save_train_state`
run when due, and :func:`stop_reason` ends the run.
"""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import Tensor, nn

from ..validation import model_setting
from .batches import count_target_tokens, epoch_batches, group_target_tokens, model_logits, step_groups, unpack_batch
from .checkpoints import set_rng_state, load_checkpoint, save_checkpoint
from .config import BUDGET_CLOCKS, TrainConfig
from .loss import label_smoothed_cross_entropy
from .optimizer import build_optimizer, build_scheduler
from .parallel import process_rank_and_world, ddp_no_sync, reduce_step_stats
from .precision import mixed_precision
from .state import TrainState

__all__ = [
    "TrainResult",
    "TrainingDivergedError",
    "train",
    "start_training",
    "step_batches",
    "train_step",
    "normalize_loss",
    "mean_attention_entropy",
    "raise_if_diverged",
    "clip_gradients",
    "TrainLog",
    "validate",
    "save_train_state",
    "stop_reason",
    "evaluate_loss",
]


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
        model: maps ``(src, tgt_in, *, src_mask, tgt_mask)`` to logits
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
            logits = model_logits(module, src, tgt_in, src_mask, tgt_mask)  # (batch, tgt_len, V)
            total += float(label_smoothed_cross_entropy(logits, tgt_out, 0.0, pad_id, reduction="sum"))
            count += count_target_tokens(tgt_out, pad_id)
    finally:
        module.train(was_training)
    loss = total / max(count, 1)
    return {"loss": loss, "ppl": math.exp(min(loss, 50.0)), "tokens": count}


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
    ``logits = model(src, tgt_in, src_mask=src_mask, tgt_mask=tgt_mask)``, the label-smoothed
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
        model: maps ``(src, tgt_in, *, src_mask, tgt_mask)`` to logits
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
            elapsed = state.elapsed()  # seconds on the run's clock (config.budget_clock)
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
        elapsed_s=state.elapsed(), stopped=stopped or "max_steps", checkpoint=state.checkpoint,
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
    rank, world = process_rank_and_world()
    module = getattr(model, "module", model).to(device)
    d_model = model_setting(module, "d_model")
    if d_model is None and config.schedule == "noam":
        raise ValueError(
            "schedule='noam' needs the model width d_model, but the model has no config.d_model: "
            "give the model a config with d_model, or use schedule='warmup_cosine' or 'warmup_constant'"
        )
    clock = BUDGET_CLOCKS[config.budget_clock]
    start_time = clock()
    budget = config.time_budget_s

    def time_progress() -> float | None:  # the share of the time budget used: a cosine decay follows it
        if budget is None:
            return None
        return 1.0 if budget <= 0 else min((clock() - start_time) / budget, 1.0)

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
    state = TrainState(config, module, ddp_model, optimizer, scheduler, scaler, autocast, device, rank, world, start_time=start_time, clock=clock)
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
        stream = iter(epoch_batches(train_data, state.epoch))
        for _ in range(state.skip):
            if next(stream, _END) is _END:
                break
        if state.pending_rng is not None:
            # Restore the random state only now: creating a DataLoader
            # iterator draws from the global generator, which the
            # uninterrupted run did at the start of the epoch, not here.
            set_rng_state(state.pending_rng)
            state.pending_rng = None
        progressed = False
        for consumed, group in step_groups(stream, size, state.skip):
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
    group_tokens = group_target_tokens(group, config.pad_id) if by_tokens else None  # of all processes: each sees the group
    optimizer.zero_grad(set_to_none=True)
    loss_sum, n_tokens = torch.zeros((), device=state.device), 0
    for i, batch in enumerate(micro_batches):
        src, tgt_in, tgt_out, src_mask, tgt_mask = unpack_batch(batch, state.device)  # (batch, src_len), (batch, tgt_len) x 2
        last = i == len(micro_batches) - 1
        if want_entropy and last:
            model.record_attention(True)
        with ddp_no_sync(state, last):
            with state.autocast():
                logits = model_logits(state.ddp_model, src, tgt_in, src_mask, tgt_mask)  # (batch, tgt_len, V)
            loss = label_smoothed_cross_entropy(  # a scalar
                logits, tgt_out, config.label_smoothing, config.pad_id,
                convention=config.smoothing_convention, reduction="sum" if by_tokens else "mean",
            )
            scaled = normalize_loss(loss, state, group_tokens)
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        loss_sum += loss.detach()
        n_tokens += count_target_tokens(tgt_out, config.pad_id)
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
    from ..metrics import model_attention_entropy

    values = [v for v in model_attention_entropy(model).values() if not math.isnan(v)]
    model.record_attention(False)
    return sum(values) / len(values) if values else None


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
    from ..metrics import gradient_global_norm

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
