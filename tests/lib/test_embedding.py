"""Tests of course_lib.embedding.TokenEmbedding (chapter 2; paper section 3.4)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.embedding import TokenEmbedding


def test_lookup_equals_one_hot_matmul_times_sqrt_d_model():
    vocab_size, d_model = 11, 6
    emb = TokenEmbedding(vocab_size, d_model)
    tokens = torch.tensor([[0, 3, 10, 3], [7, 7, 1, 2]])
    out = emb(tokens)
    assert out.shape == (2, 4, d_model) and out.dtype == torch.float32
    w = emb.weight.detach()
    by_one_hot = F.one_hot(tokens, vocab_size).to(torch.float32) @ w * math.sqrt(d_model)
    by_index = w[tokens] * math.sqrt(d_model)
    torch.testing.assert_close(out, by_one_hot, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out, by_index, atol=0, rtol=0)


def test_scale_is_sqrt_d_model_for_a_known_weight():
    emb = TokenEmbedding(3, 4)
    with torch.no_grad():
        emb.weight.copy_(torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.5, 0.0, -1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]))
    out = emb(torch.tensor([[1, 2]]))
    # sqrt(4) = 2, worked by hand
    expected = torch.tensor([[[1.0, 0.0, -2.0, 0.0], [0.0, 0.0, 0.0, 2.0]]])
    assert torch.equal(out, expected)


def test_weight_is_the_embedding_parameter():
    emb = TokenEmbedding(5, 4)
    assert emb.weight is emb.embedding.weight
    assert isinstance(emb.weight, torch.nn.Parameter)
    assert emb.weight.shape == (5, 4)


def test_initial_std_is_d_model_to_minus_half():
    """Documented init: std d_model**-0.5, so scaled embeddings have unit scale."""
    d_model = 64
    emb = TokenEmbedding(2000, d_model)
    std = emb.weight.detach().std().item()
    assert abs(std - d_model**-0.5) < 0.05 * d_model**-0.5
    scaled_std = emb(torch.arange(2000)[None]).std().item()
    assert abs(scaled_std - 1.0) < 0.05


def test_gradient_reaches_only_used_rows():
    emb = TokenEmbedding(6, 3)
    emb(torch.tensor([[1, 1, 4]])).sum().backward()
    g = emb.weight.grad
    # d(sum)/dW[i] = count(i) * sqrt(d_model)
    expected = torch.zeros(6, 3)
    expected[1] = 2 * math.sqrt(3)
    expected[4] = math.sqrt(3)
    torch.testing.assert_close(g, expected)


def test_padding_idx_row_is_zero_and_gets_no_gradient():
    emb = TokenEmbedding(5, 4, padding_idx=0)
    assert torch.equal(emb.weight[0], torch.zeros(4))
    out = emb(torch.tensor([[0, 2]]))
    assert torch.equal(out[0, 0], torch.zeros(4))
    out.sum().backward()
    assert torch.equal(emb.weight.grad[0], torch.zeros(4))


def test_int32_ids_accepted():
    emb = TokenEmbedding(5, 4)
    torch.testing.assert_close(emb(torch.tensor([[1, 2]], dtype=torch.int32)), emb(torch.tensor([[1, 2]])))


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("bad", [[[0, 5]], [[-1, 2]]])
def test_out_of_range_ids(bad):
    emb = TokenEmbedding(5, 4)
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        emb(torch.tensor(bad))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bool])
def test_non_integer_ids(dtype):
    emb = TokenEmbedding(5, 4)
    with pytest.raises(ValueError, match=rf"integer.*{str(dtype).split('.')[-1]}"):
        emb(torch.ones(1, 2, dtype=dtype))


@pytest.mark.parametrize("args", [(0, 4), (5, 0), (-1, 3)])
def test_non_positive_sizes(args):
    with pytest.raises(ValueError, match="vocab_size.*d_model"):
        TokenEmbedding(*args)
