"""Learning-rate schedules: the learning rate as a function of the optimizer step (chapter 9).

The step is 1-based: the first update uses step 1, never a zero learning rate.
"""

from __future__ import annotations

import math

from ..validation import check_int, checked_by

__all__ = ["noam_lr", "warmup_cosine_lr", "warmup_constant_lr", "check_noam_inputs"]


def check_noam_inputs(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> None:
    """Raise ``ValueError`` unless ``step``, ``d_model`` and ``warmup_steps`` are positive (steps are 1-based)."""
    check_int(step, "step", 1, hint=" (the first optimizer step is step 1)")
    if d_model < 1 or warmup_steps < 1:
        raise ValueError(f"d_model and warmup_steps must be positive; got d_model={d_model}, warmup_steps={warmup_steps}")


@checked_by(check_noam_inputs)
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
