"""Tests of course_lib.positional (chapter 3; paper section 3.5).

Reference values come from ``math.sin``/``math.cos`` (Python floats, i.e.
float64), never from the table under test.
"""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, sinusoidal_encoding


def reference(pos: int, col: int, d_model: int) -> float:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same angle)."""
    two_i = col - (col % 2)
    angle = pos / 10000 ** (two_i / d_model)
    return math.sin(angle) if col % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize("d_model", [8, 7, 1, 2, 512])
def test_values_at_chosen_positions(d_model):
    pe = sinusoidal_encoding(60, d_model, dtype=torch.float64)
    assert pe.shape == (60, d_model)
    for pos in (0, 1, 2, 17, 59):
        for col in sorted({0, 1, d_model // 2, d_model - 2, d_model - 1} & set(range(d_model))):
            assert pe[pos, col].item() == pytest.approx(reference(pos, col, d_model), abs=1e-12), (pos, col)


def test_hand_worked_row():
    # d_model = 4: frequencies 1 and 1/100; position 1
    pe = sinusoidal_encoding(2, 4, dtype=torch.float64)
    expected = [math.sin(1.0), math.cos(1.0), math.sin(0.01), math.cos(0.01)]
    assert pe[1].tolist() == pytest.approx(expected, abs=1e-15)
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]


def test_odd_d_model_shape_and_last_column_is_sine():
    d_model = 7
    pe = sinusoidal_encoding(10, d_model)
    assert pe.shape == (10, 7)
    # columns 0,2,4,6 are sines (zero at pos 0), 1,3,5 cosines (one at pos 0)
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    angle = 3 / 10000 ** (6 / 7)
    assert pe[3, 6].item() == pytest.approx(math.sin(angle), abs=1e-7)


def test_large_positions_computed_in_float64():
    """At pos 10,000 the angle is ~1e4 rad: float32 arithmetic would be off by ~1e-3."""
    d_model, pos = 16, 10_000
    pe64 = sinusoidal_encoding(pos + 1, d_model, dtype=torch.float64)
    ref = torch.tensor([reference(pos, c, d_model) for c in range(d_model)], dtype=torch.float64)
    torch.testing.assert_close(pe64[pos], ref, atol=1e-12, rtol=0)
    pe32 = sinusoidal_encoding(pos + 1, d_model)  # default float32: computed in float64, then cast
    assert pe32.dtype == torch.float32
    torch.testing.assert_close(pe32[pos], ref.to(torch.float32), atol=1e-6, rtol=0)


def test_relative_position_is_a_rotation():
    """PE[p + k] = R(k w_i) PE[p] for each (sin, cos) pair (paper section 3.5's motivation)."""
    d_model, p, k = 10, 13, 5
    pe = sinusoidal_encoding(40, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        w = 1 / 10000 ** (2 * i / d_model)
        s, c = pe[p, 2 * i].item(), pe[p, 2 * i + 1].item()
        s2 = s * math.cos(k * w) + c * math.sin(k * w)
        c2 = c * math.cos(k * w) - s * math.sin(k * w)
        assert pe[p + k, 2 * i].item() == pytest.approx(s2, abs=1e-12)
        assert pe[p + k, 2 * i + 1].item() == pytest.approx(c2, abs=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_dtype_argument(dtype):
    pe = sinusoidal_encoding(5, 6, dtype=dtype)
    assert pe.dtype == dtype
    torch.testing.assert_close(pe, sinusoidal_encoding(5, 6, dtype=torch.float64).to(dtype))


@pytest.mark.parametrize("args", [(0, 4), (4, 0), (-1, 4), (4.0, 4), (4, True)])
def test_sinusoidal_encoding_bad_sizes(args):
    with pytest.raises(ValueError, match="max_len|d_model"):
        sinusoidal_encoding(*args)


# ------------------------------------------------------------ the modules
def test_module_adds_the_table():
    mod = SinusoidalPositionalEncoding(d_model=6, max_len=20, dropout=0.0)
    x = torch.randn(2, 5, 6)
    ref = torch.tensor([[reference(p, c, 6) for c in range(6)] for p in range(5)], dtype=torch.float32)
    torch.testing.assert_close(mod(x), x + ref, atol=1e-6, rtol=0)
    ref_off = torch.tensor([[reference(p, c, 6) for c in range(6)] for p in range(3, 8)], dtype=torch.float32)
    torch.testing.assert_close(mod(x, offset=3), x + ref_off, atol=1e-6, rtol=0)


def test_buffer_is_not_a_parameter_and_moves_with_to():
    mod = SinusoidalPositionalEncoding(d_model=6, max_len=20, dropout=0.0)
    assert list(mod.parameters()) == []
    assert "pe" in dict(mod.named_buffers())
    mod = mod.to(torch.float64)
    assert mod.pe.dtype == torch.float64
    x = torch.randn(1, 4, 6, dtype=torch.float64)
    assert mod(x).dtype == torch.float64
    mod = mod.to(torch.bfloat16)
    assert mod.pe.dtype == torch.bfloat16


def test_output_keeps_input_dtype():
    mod = SinusoidalPositionalEncoding(d_model=4, max_len=8, dropout=0.0)
    assert mod(torch.zeros(1, 3, 4, dtype=torch.float16)).dtype == torch.float16


def test_dropout_train_vs_eval():
    mod = SinusoidalPositionalEncoding(d_model=16, max_len=50, dropout=0.5)
    x = torch.randn(4, 50, 16)
    mod.train()
    y = mod(x)
    clean = x + mod.pe[:50]
    zeros = (y == 0).float().mean().item()
    assert 0.4 < zeros < 0.6  # about half dropped
    kept = y != 0
    torch.testing.assert_close(y[kept], 2 * clean[kept])  # inverted dropout scale 1/(1-p)
    mod.eval()
    torch.testing.assert_close(mod(x), clean)


def test_too_long_sequence():
    mod = SinusoidalPositionalEncoding(d_model=4, max_len=8, dropout=0.0)
    with pytest.raises(ValueError, match="max_len=8"):
        mod(torch.zeros(1, 9, 4))
    with pytest.raises(ValueError, match="max_len=8"):
        mod(torch.zeros(1, 3, 4), offset=6)
    with pytest.raises(ValueError, match="offset"):
        mod(torch.zeros(1, 3, 4), offset=-1)


def test_wrong_input_shape():
    mod = SinusoidalPositionalEncoding(d_model=4, max_len=8)
    with pytest.raises(ValueError, match=r"\(batch, seq_len, 4\)"):
        mod(torch.zeros(1, 3, 5))
    with pytest.raises(ValueError, match=r"\(batch, seq_len, 4\)"):
        mod(torch.zeros(3, 4))


def test_learned_positions_start_at_the_scale_of_the_scaled_token_embeddings():
    # token rows: std d_model**-0.5, times sqrt(d_model) -> norm about sqrt(d_model);
    # learned position rows with init_std 1 -> norm about sqrt(d_model) too.
    from course_lib.embedding import TokenEmbedding

    torch.manual_seed(0)
    d_model = 256
    tok = TokenEmbedding(vocab_size=1000, d_model=d_model)
    pos = LearnedPositionalEmbedding(d_model=d_model, max_len=512, dropout=0.0)
    with torch.no_grad():
        tok_norm = tok(torch.arange(1000)[None]).norm(dim=-1).mean()
        pos_norm = pos.embedding.weight.norm(dim=-1).mean()
    assert 0.8 < float(tok_norm / pos_norm) < 1.25
    assert abs(float(pos.embedding.weight.detach().std()) - 1.0) < 0.02
    small = LearnedPositionalEmbedding(d_model=d_model, max_len=512, init_std=0.02)
    assert abs(float(small.embedding.weight.detach().std()) - 0.02) < 0.001
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=f"init_std must be a finite number > 0; got {bad}"):
            LearnedPositionalEmbedding(d_model=8, init_std=bad)


def test_learned_positions_pass_the_embedding_scale_check():
    from course_lib.diagnostics import check_embedding_scale
    from course_lib.model import Transformer, TransformerConfig

    torch.manual_seed(0)
    cfg = TransformerConfig(src_vocab_size=50, tgt_vocab_size=50, d_model=64, n_heads=4, n_encoder_layers=1,
                            n_decoder_layers=1, d_ff=128, positional="learned")
    src = torch.randint(4, 50, (4, 12))
    finding = check_embedding_scale(Transformer(cfg), (src, src, src))
    assert finding.ok, finding.detail


def test_learned_positions_add_their_rows():
    mod = LearnedPositionalEmbedding(d_model=4, max_len=10, dropout=0.0)
    assert [n for n, _ in mod.named_parameters()] == ["embedding.weight"]
    x = torch.randn(2, 3, 4)
    w = mod.embedding.weight.detach()
    torch.testing.assert_close(mod(x), x + w[:3])
    torch.testing.assert_close(mod(x, offset=7), x + w[7:10])
    with pytest.raises(ValueError, match="max_len=10"):
        mod(x, offset=8)
