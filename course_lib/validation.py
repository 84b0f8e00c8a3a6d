"""Input checks shared by the whole library: one place, one wording.

The public entry points (layer ``forward`` methods, decoding functions,
schedules, data helpers) call these once per call (model code through
:func:`checked_by`, at the outermost entry point only), so a wrong argument fails
at the boundary with a message that names it and says what was expected —
never deep inside a matrix product, never as a silent NaN.

Every check returns nothing and raises ``ValueError`` (wrong value or shape)
or ``TypeError`` (wrong kind of object, wrong dtype of a float input).
"""

from __future__ import annotations

import functools
import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import fields
from typing import Any, Callable, Iterator, TypeVar

import torch
from torch import Tensor

T = TypeVar("T")

__all__ = [
    "as_int",
    "autocast_enabled",
    "check_choice",
    "check_float_input",
    "check_hidden_states",
    "check_int",
    "check_number",
    "check_probability",
    "check_token_ids",
    "checked_by",
    "config_from_dict",
    "describe",
    "inputs_already_checked",
    "model_setting",
]


def describe(value: Any) -> str:
    """A short description of ``value`` for an error message: a tensor's shape, else its type."""
    return str(tuple(value.shape)) if isinstance(value, Tensor) else type(value).__name__


def check_int(value: Any, name: str, low: int | None = 1, *, optional: bool = False, hint: str = "") -> None:
    """Raise ``ValueError`` unless ``value`` is an ``int`` (not a ``bool``) and ``>= low``.

    ``low=None`` accepts any int; ``optional=True`` also accepts ``None``.
    ``hint`` is added to the message, e.g. ``" (the first optimizer step is step 1)"``.
    """
    if optional and value is None:
        return
    ok = isinstance(value, int) and not isinstance(value, bool) and (low is None or value >= low)
    if not ok:
        what = "an int" if low is None else f"an int >= {low}"
        raise ValueError(f"{name} must be {'None or ' if optional else ''}{what}{hint}; got {value!r}")


def check_number(value: Any, name: str, *, low: float | None = None, low_inclusive: bool = True) -> None:
    """Raise ``ValueError`` unless ``value`` is a finite real number (not a ``bool``) above ``low``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value >= low if low_inclusive else value > low
    if not ok:
        bound = "" if low is None else (f" >= {low}" if low_inclusive else f" > {low}")
        raise ValueError(f"{name} must be a finite number{bound}; got {value!r}")


def check_probability(value: Any, name: str, *, one_allowed: bool = False) -> None:
    """Raise ``ValueError`` unless ``0 <= value < 1`` (``<= 1`` with ``one_allowed``)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and 0 <= value and (value <= 1 if one_allowed else value < 1)
    if not ok:
        interval = "[0, 1]" if one_allowed else "[0, 1)"
        raise ValueError(f"{name} must be a probability in {interval}; got {value!r}")


def check_choice(value: Any, name: str, choices: tuple) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}; got {value!r}")


def check_token_ids(tokens: Any, name: str, *, ndim: int | None = 2, what: str = "token ids") -> None:
    """Raise ``ValueError`` unless ``tokens`` is an integer tensor (not bool, float or complex).

    With ``ndim=2`` the shape must be ``(batch, seq_len)``; ``ndim=None`` accepts any shape.
    """
    if not isinstance(tokens, Tensor) or (ndim == 2 and tokens.dim() != 2):
        shape = " of shape (batch, seq_len)" if ndim == 2 else ""
        raise ValueError(f"{name} must be {what}{shape}; got {describe(tokens)}")
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool or tokens.is_complex():
        raise ValueError(f"{name} must be an integer tensor of {what}; got dtype {tokens.dtype}")


def autocast_enabled(device_type: str) -> bool:
    """Whether ``torch.autocast`` is active for ``device_type`` (works on torch 2.2 to 2.13)."""
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:  # torch < 2.4: no device argument
        if device_type == "cpu":
            return bool(torch.is_autocast_cpu_enabled())
        return bool(torch.is_autocast_enabled())


def check_float_input(x: Tensor, weight: Tensor, name: str, layer: str) -> None:
    """Raise ``TypeError`` when ``x`` is not a float tensor of ``weight``'s dtype (outside autocast).

    Without this check a float16 input into float32 weights fails deep inside
    ``F.linear`` with "mat1 and mat2 must have the same dtype". Under
    ``torch.autocast`` mixed dtypes are expected (autocast casts them), so
    only a float64 input is rejected there (autocast leaves float64 alone).
    """
    if not torch.is_floating_point(x):
        raise TypeError(f"{name} must be a floating-point tensor; got dtype {x.dtype}")
    if x.dtype == weight.dtype:
        return
    # autocast casts float32/float16/bfloat16 inputs of matrix products, never float64
    if x.dtype == torch.float64 or not autocast_enabled(x.device.type):
        hint = " (torch.autocast does not cast float64)" if x.dtype == torch.float64 else ", or run inside torch.autocast"
        raise TypeError(
            f"{name} has dtype {x.dtype} but the weights of {layer} are {weight.dtype}: convert one to the "
            f"other (e.g. x.to({weight.dtype}) or module.to({x.dtype})){hint}"
        )


def model_setting(model: Any, field: str, default: Any = None) -> Any:
    """``model.config.<field>`` when the model has a config with that field, else ``default``.

    The one place that reads a model's configuration defensively, so a model
    without ``config`` (e.g. a student's module) gets the same, stated default
    everywhere.
    """
    value = getattr(getattr(model, "config", None), field, None)
    return default if value is None else value


def config_from_dict(cls: type[T], d: dict[str, Any]) -> T:
    """Build the configuration dataclass ``cls`` from ``d``; unknown keys raise ``ValueError``.

    The inverse of ``dataclasses.asdict`` for the flat configurations
    (``TransformerConfig``, ``TrainConfig``, ...): a key the class does not
    have is named instead of being silently dropped.
    """
    unknown = set(d) - {f.name for f in fields(cls)}
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields: {sorted(unknown)}")
    return cls(**d)


def as_int(value: Any, name: str, low: int | None = 1, *, hint: str = "") -> int:
    """``value`` as a Python ``int`` (NumPy and torch integers accepted), checked as :func:`check_int`.

    Raises ``ValueError`` with :func:`check_int`'s message for a ``bool``, a
    non-integer (``1.5``) or a value below ``low``.
    """
    import operator

    try:
        number = operator.index(value)
    except TypeError:
        number = None
    check_int(value if number is None or isinstance(value, bool) else number, name, low, hint=hint)
    return number


def check_hidden_states(x: Any, name: str, d_model: int) -> None:
    """Raise ``ValueError`` unless ``x`` is a tensor of shape ``(batch, seq_len, d_model)``."""
    if not isinstance(x, Tensor) or x.dim() != 3 or x.size(-1) != d_model:
        raise ValueError(f"{name} must have shape (batch, seq_len, {d_model}); got {describe(x)}")


_INSIDE_CHECKED_CALL: ContextVar[bool] = ContextVar("course_lib_inside_checked_call", default=False)


@contextmanager
def inputs_already_checked() -> Iterator[None]:
    """Within the block, the entry points decorated with :func:`checked_by` skip their checks.

    For a check function that derives values from inputs it has just checked
    (e.g. the default masks of ``src``): the calls that derive them need not
    check ``src`` again.
    """
    token = _INSIDE_CHECKED_CALL.set(True)
    try:
        yield
    finally:
        _INSIDE_CHECKED_CALL.reset(token)


def checked_by(check: Callable[..., Any]) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorate a public entry point with the check of its arguments: the course's one validation mechanism.

    Every public function and layer ``forward`` that takes data from a
    learner is decorated; the algorithm in its body carries no guards.

    ``check`` receives the entry point's arguments (``self`` included for a
    method) and raises for bad ones, naming them. It runs first, unless an
    outer entry point has already checked the same inputs; the body then runs
    as in :func:`inputs_already_checked`, so the entry points it calls skip
    their checks. So ``Transformer.forward(src, tgt)`` checks ``src`` once
    (and no layer checks anything), although ``src`` passes through
    ``encode``, the padding mask, the embedding and every layer, each of which
    checks its input when called on its own.
    """

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def entry_point(*args: Any, **kwargs: Any) -> T:
            if _INSIDE_CHECKED_CALL.get():
                return fn(*args, **kwargs)
            check(*args, **kwargs)
            with inputs_already_checked():
                return fn(*args, **kwargs)

        return entry_point

    return decorate
