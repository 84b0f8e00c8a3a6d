"""The language model's command line (``python -m course_lib.lm_train``), on one process and under ``torchrun`` - chapter 12.

The two-process run (``torchrun --nproc_per_node 2``, gloo) must take the
same optimizer steps as one process that accumulates the same two batches
per step: the launcher, the process group and DistributedDataParallel are
PyTorch's, the course's loop gives each process its share of the stream.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_lib.lm_train import LMRecipe, lm_from_checkpoint, load_lm_text, main, perplexity

TEXT = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n" * 40
SMALL = ["--data", "tinyshakespeare", "--steps", "3", "--seq-len", "16", "--batch-size", "4", "--d-model", "16", "--n-heads", "2",
         "--n-layers", "1", "--d-ff", "32", "--dropout", "0", "--warmup-steps", "1", "--eval-every", "3", "--amp", "off", "--no-progress"]


@pytest.fixture
def data_root(tmp_path, monkeypatch):
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_text(TEXT, encoding="utf-8")
    monkeypatch.setenv("COURSE_LIB_DATA", str(tmp_path))
    return tmp_path


def last_json(output: str) -> dict:
    return json.loads([line for line in output.splitlines() if line.startswith("{")][-1])


def test_train_on_one_process_then_sample(data_root, tmp_path, capsys):
    out = tmp_path / "lm.pt"
    assert main(["train", "--out", str(out), *SMALL]) == 0
    summary = last_json(capsys.readouterr().out)
    assert summary["steps"] == 3 and summary["world_size"] == 1
    model, vocab, recipe = lm_from_checkpoint(out)
    assert recipe == LMRecipe(data="tinyshakespeare", seq_len=16, batch_size=4, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                              dropout=0.0, steps=3, lr=LMRecipe.lr, warmup_steps=1, eval_every=3, amp="off")
    assert vocab.decode(vocab.encode("to be")) == "to be" and len(vocab) == 4 + len(set(TEXT))
    assert main(["sample", "--checkpoint", str(out), "--prompt", "To", "--length", "5"]) == 0
    sampled = capsys.readouterr().out.rstrip("\n")
    assert sampled.startswith("To") and len(sampled) == 7


def test_perplexity_is_exp_of_the_mean_cross_entropy():
    torch.manual_seed(0)
    from course_lib.language_model import LanguageModel, LanguageModelConfig

    model = LanguageModel(LanguageModelConfig(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=8)).eval()
    ids = torch.randint(4, 10, (26,))
    windows = torch.stack([ids[0:9], ids[8:17], ids[16:25]])  # three non-overlapping windows of 8 + 1
    with torch.no_grad():
        ce = torch.nn.functional.cross_entropy(model(windows[:, :-1]).flatten(0, 1), windows[:, 1:].flatten())
    assert perplexity(model, ids, 8, batch_size=2) == pytest.approx(float(ce.exp()), rel=1e-5)


def test_unknown_text_is_named():
    with pytest.raises(ValueError, match="name"):
        load_lm_text("wikipedia")


@pytest.mark.skipif(not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
                    reason="torch.distributed with the gloo backend is not available in this PyTorch build")
def test_torchrun_two_processes_equal_one_process_accumulating_two_batches(data_root, tmp_path, capsys):
    env = dict(os.environ, OMP_NUM_THREADS="1", COURSE_LIB_DATA=str(data_root))
    ddp = tmp_path / "ddp.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "course_lib.lm_train", "train", "--out", str(ddp), "--threads", "1", *SMALL]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            cwd=Path(__file__).resolve().parents[2])
    try:
        stdout, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its two workers
        proc.communicate()
        pytest.fail("torchrun did not finish within 240 s")
    run = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    assert run.returncode == 0, run.stderr[-2000:]
    summary = last_json(run.stdout)
    assert summary["world_size"] == 2 and summary["steps"] == 3
    single = tmp_path / "one.pt"
    assert main(["train", "--out", str(single), "--accumulation-steps", "2", *SMALL]) == 0
    capsys.readouterr()
    a, b = lm_from_checkpoint(ddp)[0].state_dict(), lm_from_checkpoint(single)[0].state_dict()
    assert a.keys() == b.keys()
    for name in a:
        if name.endswith("k_proj.bias"):  # its gradient is zero up to rounding (softmax ignores a shift of all scores): Adam amplifies the rounding
            continue
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)
