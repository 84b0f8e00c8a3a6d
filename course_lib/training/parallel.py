"""Data parallelism under ``torchrun``: process ranks, gradient synchronisation, statistics over processes."""

from __future__ import annotations

import contextlib
import os

import torch
from torch import Tensor

from .state import TrainState

__all__ = ["ddp_no_sync", "reduce_step_stats", "init_distributed", "process_rank_and_world"]


def process_rank_and_world() -> tuple[int, int]:
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


def ddp_no_sync(state: TrainState, last: bool) -> contextlib.AbstractContextManager:
    """``ddp_model.no_sync()`` for every micro-batch but the ``last`` under DDP, else a no-op context.

    DDP all-reduces the gradients during ``backward()``; inside ``no_sync`` it
    only accumulates them locally, so one optimizer step communicates once.
    """
    return contextlib.nullcontext() if (last or state.world == 1) else state.ddp_model.no_sync()


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
