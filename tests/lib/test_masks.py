"""Tests of course_lib.masks: values worked by hand, shapes, the convention, errors.

Convention under test: bool, True = may attend, broadcastable to
(batch, n_heads, q_len, k_len) -- the meaning of
torch.nn.functional.scaled_dot_product_attention.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib.masks import causal_mask, check_mask, decoder_self_attention_mask, padding_mask

T, F_ = True, False


def test_padding_mask_hand_worked():
    tokens = torch.tensor([[5, 7, 0, 0], [3, 0, 0, 0], [1, 2, 3, 4]])
    m = padding_mask(tokens, pad_id=0)
    assert m.dtype == torch.bool
    assert m.shape == (3, 1, 1, 4)
    expected = torch.tensor([[T, T, F_, F_], [T, F_, F_, F_], [T, T, T, T]])
    assert torch.equal(m[:, 0, 0, :], expected)


def test_padding_mask_other_pad_id():
    tokens = torch.tensor([[0, 9, 9], [9, 1, 2]])
    m = padding_mask(tokens, pad_id=9)
    assert torch.equal(m[:, 0, 0, :], torch.tensor([[T, F_, F_], [F_, T, T]]))


def test_causal_mask_hand_worked():
    m = causal_mask(4)
    assert m.dtype == torch.bool and m.shape == (1, 1, 4, 4)
    expected = torch.tensor(
        [
            [T, F_, F_, F_],
            [T, T, F_, F_],
            [T, T, T, F_],
            [T, T, T, T],
        ]
    )
    assert torch.equal(m[0, 0], expected)


@pytest.mark.parametrize("size", [1, 2, 7])
def test_causal_mask_rule(size):
    m = causal_mask(size)
    for i in range(size):
        for j in range(size):
            assert bool(m[0, 0, i, j]) == (j <= i)


def test_decoder_self_attention_mask_is_causal_and_padding():
    tgt = torch.tensor([[1, 4, 5, 0, 0], [1, 6, 0, 0, 0]])
    m = decoder_self_attention_mask(tgt, pad_id=0)
    assert m.shape == (2, 1, 5, 5) and m.dtype == torch.bool
    for b in range(2):
        for i in range(5):
            for j in range(5):
                assert bool(m[b, 0, i, j]) == (j <= i and int(tgt[b, j]) != 0), (b, i, j)


def test_decoder_self_attention_mask_without_pad_is_causal():
    tgt = torch.tensor([[1, 0, 0]])  # 0 is not padding here
    m = decoder_self_attention_mask(tgt, pad_id=None)
    assert torch.equal(m, causal_mask(3))


def test_course_masks_mean_the_same_as_torch_sdpa():
    """A padding mask passed to torch's SDPA blocks exactly the pad keys."""
    tokens = torch.tensor([[3, 4, 0], [5, 0, 0]])
    q = torch.randn(2, 1, 3, 4)
    k = torch.randn(2, 1, 3, 4)
    v = torch.eye(3).expand(2, 1, 3, 3)  # output row = attention weights
    w = F.scaled_dot_product_attention(q, k, v, attn_mask=padding_mask(tokens, 0))
    assert torch.all(w[0, 0, :, 2] == 0)
    assert torch.all(w[1, 0, :, 1:] == 0)
    assert torch.allclose(w[1, 0, :, 0], torch.ones(3))


# ---------------------------------------------------------------- bad input
def test_padding_mask_rejects_1d():
    with pytest.raises(ValueError, match=r"tokens.*\(batch, seq_len\)"):
        padding_mask(torch.tensor([1, 2, 0]), 0)


def test_padding_mask_rejects_float_ids():
    with pytest.raises(ValueError, match=r"integer.*float32"):
        padding_mask(torch.tensor([[1.0, 0.0]]), 0)


@pytest.mark.parametrize("size", [0, -3, 2.5, True, "4"])
def test_causal_mask_rejects_bad_size(size):
    with pytest.raises(ValueError, match="size"):
        causal_mask(size)


def test_decoder_mask_rejects_3d():
    with pytest.raises(ValueError, match="tgt"):
        decoder_self_attention_mask(torch.zeros(2, 3, 4, dtype=torch.long), 0)


@pytest.mark.parametrize(
    "shape",
    [(2, 4, 5, 6), (2, 1, 1, 6), (1, 1, 5, 6), (5, 6), (6,), (2, 4, 1, 6), (1, 6)],
)
def test_check_mask_accepts_broadcastable(shape):
    check_mask(torch.ones(shape, dtype=torch.bool), (2, 4, 5, 6))


@pytest.mark.parametrize("shape", [(3, 1, 1, 6), (2, 1, 1, 5), (6, 5), (1, 2, 4, 5, 6), (2, 3, 5, 6)])
def test_check_mask_rejects_wrong_shape(shape):
    with pytest.raises(ValueError, match=r"src_mask of shape .*not broadcastable.*\(2, 4, 5, 6\)"):
        check_mask(torch.ones(shape, dtype=torch.bool), (2, 4, 5, 6), name="src_mask")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_check_mask_rejects_non_bool(dtype):
    with pytest.raises(TypeError, match=r"tgt_mask must have dtype torch.bool"):
        check_mask(torch.ones(5, 6, dtype=dtype), (2, 4, 5, 6), name="tgt_mask")


def test_check_mask_rejects_non_tensor():
    with pytest.raises(TypeError, match="mask"):
        check_mask([[True]], (1, 1, 1, 1))


def test_check_mask_none_is_fine():
    check_mask(None, (1, 1, 1, 1))
