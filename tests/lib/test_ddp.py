"""Data-parallel training (DistributedDataParallel, gloo backend, CPU) - chapter 9.

Two processes that each see one batch take the same optimizer step as one
process that sees both batches concatenated: the logged losses and the
gradients agree. The worker processes are started with ``torch.multiprocessing`` (spawn)
and waited for with a deadline, so a hang fails the test instead of blocking
the test run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from course_lib.model import Transformer, TransformerConfig
from course_lib.training import TrainConfig, train

V, PAD, WORLD = 17, 0, 2

gloo = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="torch.distributed with the gloo backend is not available in this PyTorch build",
)


pytestmark = pytest.mark.usefixtures("one_thread")


def _model() -> Transformer:
    torch.manual_seed(0)
    cfg = TransformerConfig(
        src_vocab_size=V, tgt_vocab_size=V, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1,
        d_ff=32, dropout=0.0, max_len=16,
    )
    return Transformer(cfg)


def _batches() -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Four batches of 3 pairs, no padding: every batch has the same number of target tokens."""
    g = torch.Generator().manual_seed(123)
    out = []
    for _ in range(4):
        src = torch.randint(3, V, (3, 5), generator=g)
        tgt = torch.randint(3, V, (3, 4), generator=g)
        tgt_in = torch.cat([torch.ones(3, 1, dtype=torch.long), tgt[:, :-1]], dim=1)
        out.append((src, tgt_in, tgt))
    return out


def _unequal_batches() -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Four batches like :func:`_batches` but with 1, 0, 3 and 2 padded target positions."""
    out = []
    for i, (src, tgt_in, tgt) in enumerate(_batches()):
        tgt = tgt.clone()
        tgt[: [1, 0, 3, 2][i], -1] = PAD  # the last target of the first rows is padding (ignored by the loss)
        out.append((src, tgt_in, tgt))
    return out


def _config() -> TrainConfig:
    return TrainConfig(max_steps=2, lr=1e-2, schedule="warmup_constant", warmup_steps=0, progress=False, entropy_every=None)


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        model = _model()
        result = train(model, _batches(), _config(), device="cpu")
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model_tok = _model()
        tok_config = TrainConfig(**{**_config().to_dict(), "loss_normalization": "tokens"})
        result_tok = train(model_tok, _unequal_batches(), tok_config, device="cpu")
        grads_tok = {n: p.grad.clone() for n, p in model_tok.named_parameters() if p.grad is not None}
        torch.save({"losses": result.losses, "tokens": [h["tokens"] for h in result.history], "grads": grads,
                    "losses_tok": result_tok.losses, "grads_tok": grads_tok},
                   Path(out_dir) / f"rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


@gloo
def test_two_processes_equal_one_process_on_the_combined_batch(tmp_path):
    import torch.multiprocessing as mp

    old_threads = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the spawned workers
    try:
        ctx = mp.start_processes(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=False, start_method="spawn")
    finally:
        if old_threads is None:
            os.environ.pop("OMP_NUM_THREADS")
        else:
            os.environ["OMP_NUM_THREADS"] = old_threads
    deadline = time.monotonic() + 240
    try:
        while not ctx.join(timeout=1):  # raises if a worker failed
            if time.monotonic() > deadline:
                pytest.fail("the DDP workers did not finish within 240 s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]

    # Reference: one process, each step on the concatenation of the two batches
    # the two ranks saw (rank r takes batch r of each group of WORLD batches).
    b = _batches()
    combined = [tuple(torch.cat([x, y]) for x, y in zip(b[0], b[1])), tuple(torch.cat([x, y]) for x, y in zip(b[2], b[3]))]
    model = _model()
    ref = train(model, combined, _config(), device="cpu")

    for r in ranks:
        assert r["losses"] == pytest.approx(ref.losses, rel=1e-5)  # logged loss is averaged over processes
        assert r["tokens"] == [h["tokens"] for h in ref.history]  # and so are token counts (summed)
        for name, p in model.named_parameters():
            torch.testing.assert_close(r["grads"][name], p.grad, rtol=1e-4, atol=1e-6, msg=name)
    # Both ranks hold the same (all-reduced) gradients.
    for name in ranks[0]["grads"]:
        assert torch.equal(ranks[0]["grads"][name], ranks[1]["grads"][name])

    # With unequal numbers of target tokens, loss_normalization="tokens" still
    # gives exactly the combined batch's loss and gradients.
    u = _unequal_batches()
    combined_u = [tuple(torch.cat([x, y]) for x, y in zip(u[0], u[1])), tuple(torch.cat([x, y]) for x, y in zip(u[2], u[3]))]
    model_u = _model()
    ref_u = train(model_u, combined_u, _config(), device="cpu")
    for r in ranks:
        assert r["losses_tok"] == pytest.approx(ref_u.losses, rel=1e-5)
        for name, p in model_u.named_parameters():
            torch.testing.assert_close(r["grads_tok"][name], p.grad, rtol=1e-4, atol=1e-6, msg=name)

    # ... and the same as one process accumulating the two batches.
    acc = train(_model(), b, TrainConfig(**{**_config().to_dict(), "accumulation_steps": 2}), device="cpu")
    assert acc.losses == pytest.approx(ref.losses, rel=1e-5)
