"""Shared fixtures of the ``course_lib`` unit and parity tests.

The parity tests copy weights from a ``course_lib`` module into the matching
PyTorch built-in and compare outputs. The helpers live behind the ``parity``
fixture (a namespace of functions) so that no test imports ``conftest``.

Mask conventions differ: ``course_lib`` masks are bool with ``True`` = *may
attend*, while :class:`torch.nn.MultiheadAttention` and the
``torch.nn.Transformer*`` layers use bool masks with ``True`` = *blocked*.
The helpers below convert with ``~``.
"""

from __future__ import annotations

import types

import pytest
import torch
from torch import nn


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module of tiny models (``pytestmark = pytest.mark.usefixtures("one_thread")``).

    One thread is faster than several at these sizes, and far faster on a CPU
    shared with other jobs (threads waiting for each other).
    """
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state (reproducible failures)."""
    torch.manual_seed(0)


def randomize_(module: nn.Module, std: float = 0.3) -> nn.Module:
    """Give every 1-D parameter (biases, LayerNorm gain/shift) a random value.

    ``course_lib`` initialises biases to zero and LayerNorm to (1, 0); a parity
    test with those values could not notice a bias or a LayerNorm parameter
    copied to the wrong place. Matrices keep their (random) initialisation.
    """
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 1:
                base = 1.0 if ("norm" in name and name.endswith("weight")) else 0.0
                p.copy_(base + std * torch.randn_like(p))
    return module


def _copy_linear(src: nn.Linear, dst: nn.Linear) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


def copy_mha(ours: nn.Module, theirs: nn.MultiheadAttention) -> None:
    """Copy a ``course_lib`` MultiHeadAttention into ``nn.MultiheadAttention``.

    PyTorch keeps W_Q, W_K, W_V stacked in ``in_proj_weight`` of shape
    ``(3 d_model, d_model)`` in that order.
    """
    with torch.no_grad():
        if ours.fused_qkv:
            theirs.in_proj_weight.copy_(ours.qkv_proj.weight)
            theirs.in_proj_bias.copy_(ours.qkv_proj.bias)
        else:
            theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
            theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        _copy_linear(ours.out_proj, theirs.out_proj)


def copy_encoder_layer(ours: nn.Module, theirs: nn.TransformerEncoderLayer) -> None:
    """``course_lib.layers.EncoderLayer`` -> ``nn.TransformerEncoderLayer``."""
    copy_mha(ours.self_attn, theirs.self_attn)
    with torch.no_grad():
        _copy_linear(ours.ffn.linear1, theirs.linear1)
        _copy_linear(ours.ffn.linear2, theirs.linear2)
        for mine, other in ((ours.self_attn_sublayer.norm, theirs.norm1), (ours.ffn_sublayer.norm, theirs.norm2)):
            other.weight.copy_(mine.weight)
            other.bias.copy_(mine.bias)


def copy_decoder_layer(ours: nn.Module, theirs: nn.TransformerDecoderLayer) -> None:
    """``course_lib.layers.DecoderLayer`` -> ``nn.TransformerDecoderLayer``."""
    copy_mha(ours.self_attn, theirs.self_attn)
    copy_mha(ours.cross_attn, theirs.multihead_attn)
    with torch.no_grad():
        _copy_linear(ours.ffn.linear1, theirs.linear1)
        _copy_linear(ours.ffn.linear2, theirs.linear2)
        pairs = (
            (ours.self_attn_sublayer.norm, theirs.norm1),
            (ours.cross_attn_sublayer.norm, theirs.norm2),
            (ours.ffn_sublayer.norm, theirs.norm3),
        )
        for mine, other in pairs:
            other.weight.copy_(mine.weight)
            other.bias.copy_(mine.bias)


def copy_layer_norm(ours: nn.LayerNorm, theirs: nn.LayerNorm) -> None:
    with torch.no_grad():
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)


def key_padding(mask: torch.Tensor) -> torch.Tensor:
    """Course padding mask ``(batch, 1, 1, k_len)`` (True = attend) -> PyTorch
    ``key_padding_mask`` ``(batch, k_len)`` (True = blocked)."""
    assert mask.dim() == 4 and mask.shape[1:3] == (1, 1)
    return ~mask[:, 0, 0, :]


def blocked(mask: torch.Tensor) -> torch.Tensor:
    """Course mask (True = attend) -> PyTorch ``attn_mask`` (True = blocked)."""
    return ~mask


def tokens_with_padding(batch: int, seq_len: int, vocab: int, lengths: list[int], pad_id: int = 0) -> torch.Tensor:
    """Random ids in ``[1, vocab)`` followed by ``pad_id`` after each row's length."""
    assert len(lengths) == batch
    t = torch.randint(1, vocab, (batch, seq_len))
    for b, n in enumerate(lengths):
        t[b, n:] = pad_id
    return t


@pytest.fixture
def parity() -> types.SimpleNamespace:
    """The weight-copy and mask-conversion helpers of this file."""
    return types.SimpleNamespace(
        randomize_=randomize_,
        copy_mha=copy_mha,
        copy_encoder_layer=copy_encoder_layer,
        copy_decoder_layer=copy_decoder_layer,
        copy_layer_norm=copy_layer_norm,
        key_padding=key_padding,
        blocked=blocked,
        tokens_with_padding=tokens_with_padding,
    )
