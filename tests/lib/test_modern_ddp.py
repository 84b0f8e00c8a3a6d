"""The language model trains data-parallel with the course's loop (DistributedDataParallel, gloo, CPU) - chapter 12.

Two processes that each see one batch of ``(tokens[:-1], tokens[1:])`` take
the same optimizer step as one process that sees both batches concatenated,
as the translator does (tests/lib/test_ddp.py). The workers are spawned and
waited for with a deadline.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from course_lib.language_model import LanguageModel, LanguageModelConfig
from course_lib.training import TrainConfig, train

WORLD = 2

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(
        not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
        reason="torch.distributed with the gloo backend is not available in this PyTorch build",
    ),
]


def _model() -> LanguageModel:
    torch.manual_seed(0)
    return LanguageModel(LanguageModelConfig.modern(20, d_model=16, n_heads=4, n_kv_heads=2, n_layers=1, max_len=16))


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(123)
    windows = [torch.randint(4, 20, (3, 7), generator=g) for _ in range(4)]
    return [(w[:, :-1], w[:, 1:]) for w in windows]


def _config() -> TrainConfig:
    return TrainConfig(max_steps=2, lr=1e-2, schedule="warmup_constant", warmup_steps=0, label_smoothing=0.0, pad_id=None,
                       progress=False, entropy_every=None)


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        model = _model()
        result = train(model, _batches(), _config(), device="cpu")
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        torch.save({"losses": result.losses, "grads": grads}, Path(out_dir) / f"rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


def test_language_model_two_processes_equal_one_process_on_the_combined_batch(tmp_path):
    import torch.multiprocessing as mp

    old_threads = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        ctx = mp.start_processes(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=False, start_method="spawn")
    finally:
        if old_threads is None:
            os.environ.pop("OMP_NUM_THREADS")
        else:
            os.environ["OMP_NUM_THREADS"] = old_threads
    deadline = time.monotonic() + 240
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail("the DDP workers did not finish within 240 s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    b = _batches()
    combined = [tuple(torch.cat([x, y]) for x, y in zip(b[0], b[1])), tuple(torch.cat([x, y]) for x, y in zip(b[2], b[3]))]
    model = _model()
    ref = train(model, combined, _config(), device="cpu")
    for r in ranks:
        assert r["losses"] == pytest.approx(ref.losses, rel=1e-5)
        for name, p in model.named_parameters():
            torch.testing.assert_close(r["grads"][name], p.grad, rtol=1e-4, atol=1e-6, msg=name)
