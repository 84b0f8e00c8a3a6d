"""Checkpoints: what one holds, how it is written atomically, read, and turned back into a model (chapter 9)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .config import TrainConfig

__all__ = [
    "save_checkpoint",
    "load_checkpoint",
    "model_from_checkpoint",
    "export_for_inference",
    "rng_state",
    "set_rng_state",
]


CHECKPOINT_FORMAT = "course_lib.training.checkpoint/1"


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": json.dumps(_py_state_to_list(random.getstate()))}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _py_state_to_list(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = json.loads(state["python"])
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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
        "rng": rng_state(),
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
    """Rebuild a :class:`course_lib.model.Transformer` (or a decoder-only :class:`course_lib.language_model.LanguageModel`, whose config has ``n_layers``) from a checkpoint, in float32, in eval mode.

    Weights stored in float16 (see :func:`export_for_inference`) are cast back
    to float32.

    Args:
        ckpt: a checkpoint dict or a path to one.
        device: where to put the model.

    Raises:
        ValueError: the checkpoint has no ``model_config``.

    Source: chapter 9.
    """
    from ..language_model import LanguageModel, LanguageModelConfig
    from ..model import Transformer, TransformerConfig

    if not isinstance(ckpt, dict):
        ckpt = load_checkpoint(ckpt)
    if not ckpt.get("model_config"):
        raise ValueError("the checkpoint has no model_config: it was not saved from a course_lib Transformer")
    if "n_layers" in ckpt["model_config"]:  # a LanguageModelConfig (a decoder-only language model)
        model = LanguageModel(LanguageModelConfig.from_dict(ckpt["model_config"]))
    else:
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
