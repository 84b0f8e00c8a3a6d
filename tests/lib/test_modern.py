"""Today's block (chapter 13) and the decoder-only language model (chapter 12), against independent references.

Each switch is checked against a reference computed without course_lib:
RMSNorm against torch.nn.RMSNorm, grouped-query attention against PyTorch's
scaled_dot_product_attention(enable_gqa=True), RoPE against a complex-number
formulation written here, a decoder layer and a whole model against Hugging
Face's Llama (random init, nothing downloaded).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention import MultiHeadAttention, share_kv_heads
from course_lib.data import CharVocabulary, chinese_side, lm_batches, split_text_ids
from course_lib.decoding import beam_generate, generate, GenerationConfig
from course_lib.language_model import LanguageModel, LanguageModelConfig, from_llama_state_dict
from course_lib.layers import EncoderLayer
from course_lib.masks import causal_mask
from course_lib.model import Transformer, TransformerConfig
from course_lib.normalization import RMSNorm, make_norm
from course_lib.positional import RotaryEmbedding, alibi_slopes, apply_rope, rope_angles


# ----------------------------------------------------------------------------- RMSNorm


@pytest.mark.skipif(not hasattr(torch.nn, "RMSNorm"), reason="torch.nn.RMSNorm needs torch >= 2.4")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rmsnorm_matches_torch(dtype):
    torch.manual_seed(0)
    ours, ref = RMSNorm(16, eps=1e-6).to(dtype), torch.nn.RMSNorm(16, eps=1e-6).to(dtype)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(16, dtype=dtype))
        ref.weight.copy_(ours.weight)
    x = 3 * torch.randn(2, 5, 16, dtype=dtype) + 1  # a non-zero mean: LayerNorm would differ
    torch.testing.assert_close(ours(x), ref(x))


def test_rmsnorm_keeps_dtype_and_names_bad_input():
    x = torch.randn(2, 3, 8, dtype=torch.bfloat16)
    assert RMSNorm(8).to(torch.bfloat16)(x).dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 8\)"):
        RMSNorm(8)(torch.randn(2, 7))
    with pytest.raises(ValueError, match="norm must be one of"):
        make_norm("batch", 8)


# ----------------------------------------------------------------------------- grouped-query attention


def sdpa_reference(mha: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """Causal grouped-query attention with PyTorch's kernel and mha's projections."""
    b, n, _ = x.shape
    q = mha.q_proj(x).view(b, n, mha.n_heads, mha.d_k).transpose(1, 2)
    k = mha.k_proj(x).view(b, n, mha.n_kv_heads, mha.d_k).transpose(1, 2)
    v = mha.v_proj(x).view(b, n, mha.n_kv_heads, mha.d_k).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return mha.out_proj(out.transpose(1, 2).reshape(b, n, -1))


@pytest.mark.parametrize("n_kv_heads", [8, 2, 1])
def test_grouped_query_attention_matches_sdpa(n_kv_heads):
    try:
        F.scaled_dot_product_attention(torch.zeros(1, 2, 1, 4), torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4), enable_gqa=True)
    except TypeError:
        pytest.skip("scaled_dot_product_attention(enable_gqa=True) needs torch >= 2.5")
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 8, n_kv_heads=n_kv_heads, bias=False)
    assert mha.k_proj.weight.shape == (n_kv_heads * 4, 32)
    x = torch.randn(3, 7, 32)
    torch.testing.assert_close(mha(x, mask=causal_mask(7)), sdpa_reference(mha, x), atol=1e-5, rtol=1e-5)


def test_grouped_query_fused_equals_separate():
    torch.manual_seed(0)
    sep = MultiHeadAttention(32, 8, n_kv_heads=2)
    fused = MultiHeadAttention(32, 8, n_kv_heads=2, fused_qkv=True)
    with torch.no_grad():
        fused.qkv_proj.weight.copy_(torch.cat([sep.q_proj.weight, sep.k_proj.weight, sep.v_proj.weight]))
        fused.qkv_proj.bias.copy_(torch.cat([sep.q_proj.bias, sep.k_proj.bias, sep.v_proj.bias]))
        fused.out_proj.load_state_dict(sep.out_proj.state_dict())
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(fused(x, mask=causal_mask(5)), sep(x, mask=causal_mask(5)))
    torch.testing.assert_close(fused.project(x, "key"), sep.k_proj(x))


def test_share_kv_heads_groups_consecutive_query_heads():
    kv = torch.arange(2.0).view(1, 2, 1, 1)  # kv heads 0 and 1
    assert share_kv_heads(kv, 6).flatten().tolist() == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="n_kv_heads must be a positive divisor of n_heads=8"):
        MultiHeadAttention(32, 8, n_kv_heads=3)


# ----------------------------------------------------------------------------- RoPE


def rope_by_complex_numbers(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE as complex multiplication: feature pair (i, i + d/2) is the complex number z_i, turned by pos * theta_i."""
    d = x.size(-1)
    z = torch.complex(x[..., : d // 2].double(), x[..., d // 2 :].double())  # (..., len, d/2)
    theta = base ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)  # (d/2,)
    pos = torch.arange(x.size(-2), dtype=torch.float64)[:, None]  # (len, 1)
    turned = z * torch.polar(torch.ones_like(pos * theta), pos * theta)  # z e^{i pos theta}
    return torch.cat([turned.real, turned.imag], dim=-1).to(x.dtype)


def test_rope_matches_complex_multiplication():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 11, 8)
    cos, sin = rope_angles(11, 8)
    torch.testing.assert_close(apply_rope(x, cos, sin), rope_by_complex_numbers(x), atol=1e-5, rtol=1e-5)


def test_rope_scores_depend_on_relative_position_only():
    torch.manual_seed(0)
    rope = RotaryEmbedding(8, 32)
    q, k = torch.randn(8), torch.randn(8)
    q_all, k_all = rope(q.expand(1, 1, 32, 8), k.expand(1, 1, 32, 8))  # the same vectors at every position
    scores = q_all[0, 0] @ k_all[0, 0].T  # (32, 32): position m against n
    torch.testing.assert_close(scores[5, 2], scores[20, 17])  # m - n = 3 both
    torch.testing.assert_close(scores.diagonal(), torch.full((32,), float(q @ k)), atol=1e-5, rtol=1e-5)


def test_rope_errors_name_the_argument():
    with pytest.raises(ValueError, match="d_head must be a positive even int"):
        rope_angles(8, 7)
    with pytest.raises(ValueError, match="positional='rope' needs an even head width"):
        LanguageModelConfig(d_model=12, n_heads=4, positional="rope")


def test_rope_offset_continues_positions():
    rope = RotaryEmbedding(8, 16)
    x = torch.randn(1, 2, 10, 8)
    full, _ = rope(x, x)
    tail, _ = rope(x[:, :, 6:], x[:, :, 6:], offset=6)
    torch.testing.assert_close(tail, full[:, :, 6:])


# ----------------------------------------------------------------------------- ALiBi


def test_alibi_slopes_follow_the_paper():
    assert alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]  # 1/2 ... 1/256
    # 12 heads: the 8 slopes of 8 heads, then 4 of the 16-head sequence (2^-0.5, 2^-1.5, ...)
    torch.testing.assert_close(alibi_slopes(12)[8:], torch.tensor([2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5]))


def test_alibi_attention_matches_sdpa_with_a_float_mask():
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, bias=False, alibi=True)
    x = torch.randn(2, 6, 32)
    q, k, v = (t.view(2, 6, 4, 8).transpose(1, 2) for t in (mha.q_proj(x), mha.k_proj(x), mha.v_proj(x)))
    slopes = torch.tensor([2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8])  # 4 heads
    dist = torch.arange(6)[:, None] - torch.arange(6)[None, :]  # i - j
    penalty = -slopes[:, None, None] * dist  # (4, 6, 6)
    penalty = penalty.masked_fill(dist < 0, float("-inf"))  # causal
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=penalty)
    expected = mha.out_proj(ref.transpose(1, 2).reshape(2, 6, 32))
    torch.testing.assert_close(mha(x, mask=causal_mask(6)), expected, atol=1e-5, rtol=1e-5)


def test_score_bias_is_added_and_checked():
    from course_lib.attention import scaled_dot_product_attention

    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    bias = torch.randn(3, 5)
    expected = torch.softmax(q @ k.transpose(-1, -2) / 2 + bias, dim=-1) @ v
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, score_bias=bias)[0], expected)
    with pytest.raises(ValueError, match=r"score_bias \(4, 5\) does not broadcast to the scores \(2, 3, 5\)"):
        scaled_dot_product_attention(q, k, v, score_bias=torch.zeros(4, 5))


# ----------------------------------------------------------------------------- switches, defaults, init


def test_default_config_builds_the_2017_layers():
    layer = Transformer(TransformerConfig(32, 32, 16, 2, 1, 1, 32)).encoder.layers[0]
    assert isinstance(layer.self_attn_sublayer.norm, torch.nn.LayerNorm) and layer.self_attn.rotary is None
    assert layer.ffn.linear_v is None and layer.self_attn.n_kv_heads == 2
    assert layer.self_attn.q_proj.bias is not None


def test_bias_false_leaves_no_bias_anywhere():
    model = LanguageModel(LanguageModelConfig(vocab_size=20, d_model=16, n_heads=4, n_layers=2, d_ff=32, bias=False))
    assert not [name for name, _ in model.named_parameters() if "bias" in name]
    model = Transformer(TransformerConfig(20, 20, 16, 4, 1, 1, 32, bias=False, norm_first=True))
    assert not [name for name, _ in model.named_parameters() if "bias" in name]


def test_scaled_residual_init_divides_the_branch_outputs_by_sqrt_2n():
    sizes = dict(vocab_size=20, d_model=16, n_heads=4, n_layers=3, d_ff=32)
    torch.manual_seed(0)
    plain = LanguageModel(LanguageModelConfig(**sizes))
    torch.manual_seed(0)
    scaled = LanguageModel(LanguageModelConfig(**sizes, scaled_residual_init=True))
    factor = 1 / math.sqrt(2 * 3)
    for p_layer, s_layer in zip(plain.stack.layers, scaled.stack.layers):
        torch.testing.assert_close(s_layer.self_attn.out_proj.weight, p_layer.self_attn.out_proj.weight * factor)
        torch.testing.assert_close(s_layer.ffn.linear2.weight, p_layer.ffn.linear2.weight * factor)
        torch.testing.assert_close(s_layer.ffn.linear1.weight, p_layer.ffn.linear1.weight)  # only the last projection


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="norm must be one of"):
        LanguageModelConfig(norm="batch")
    with pytest.raises(ValueError, match="activation must be one of"):
        TransformerConfig(activation="swish")
    with pytest.raises(ValueError, match="n_kv_heads must be a positive divisor"):
        LanguageModelConfig(n_kv_heads=3)
    with pytest.raises(ValueError, match="positional must be one of"):
        LanguageModelConfig(positional="xpos")


# ----------------------------------------------------------------------------- the language model


def modern_lm(**overrides) -> LanguageModel:
    torch.manual_seed(0)
    sizes = dict(d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, max_len=40)
    return LanguageModel(LanguageModelConfig.modern(vocab_size=30, **{**sizes, **overrides})).eval()


@pytest.mark.parametrize("overrides", [
    {}, {"n_kv_heads": 1}, {"positional": "alibi"}, {"positional": "sinusoidal", "norm": "layer", "activation": "gelu"},
])
def test_kv_cache_with_grouped_query_attention_equals_recomputation(overrides):
    model = modern_lm(**overrides)
    tokens = torch.randint(4, 30, (2, 12))
    full = model(tokens)  # (2, 12, 30)
    cache = model.new_cache()
    steps = [model(tokens[:, :5], cache=cache)] + [model(tokens[:, t : t + 1], cache=cache) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    n_kv = model.config.n_kv_heads
    assert cache.layers[0].key.shape == (2, n_kv, 12, 8)  # the cache holds n_kv_heads, not n_heads
    assert cache.num_bytes() == 2 * 2 * 2 * n_kv * 12 * 8 * 4  # layers * (k, v) * batch * heads * len * d_k * float32


def test_language_model_is_causal():
    model = modern_lm()
    tokens = torch.randint(4, 30, (1, 10))
    changed = tokens.clone()
    changed[0, 7] = (tokens[0, 7] + 1 - 4) % 26 + 4
    torch.testing.assert_close(model(tokens)[:, :7], model(changed)[:, :7])
    assert not torch.allclose(model(tokens)[:, 7:], model(changed)[:, 7:])


def test_generation_through_chapter_10_decoders():
    model = modern_lm()
    prompt = torch.randint(4, 30, (3, 6))
    greedy = GenerationConfig(max_len=10, eos_id=None)
    with_cache = generate(model, prompt, greedy)
    assert with_cache.shape == (3, 10)
    torch.testing.assert_close(with_cache, generate(model, prompt, GenerationConfig(max_len=10, eos_id=None, use_cache=False)))
    # greedy by hand: argmax of the last position, appended
    seq = prompt
    for _ in range(10):
        logits = model(seq)[:, -1]
        logits[:, :2] = float("-inf")  # the decoders never produce <pad> or <bos>
        seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)
    torch.testing.assert_close(with_cache, seq[:, 6:])
    top_p = GenerationConfig(max_len=8, eos_id=None, do_sample=True, top_p=0.9)
    a = generate(model, prompt, top_p, generator=torch.Generator().manual_seed(1))
    b = generate(model, prompt, top_p.__class__(**{**top_p.__dict__, "use_cache": False}), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(a, b)
    beams = GenerationConfig(max_len=8, eos_id=2, beam_size=3)
    torch.testing.assert_close(beam_generate(model, prompt, beams),
                               beam_generate(model, prompt, GenerationConfig(max_len=8, eos_id=2, beam_size=3, use_cache=False)))


def test_language_model_errors_name_the_argument():
    model = modern_lm()
    with pytest.raises(ValueError, match="tokens has 41 positions, more than config.max_len=40"):
        model(torch.zeros(1, 41, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens must be"):
        model(torch.zeros(1, 4))


# ----------------------------------------------------------------------------- data


def test_lm_batches_are_shifted_windows():
    ids = torch.arange(100)
    x, y = next(lm_batches(ids, 8, 4, generator=torch.Generator().manual_seed(0)))
    assert x.shape == y.shape == (4, 8)
    torch.testing.assert_close(y[:, :-1], x[:, 1:])
    torch.testing.assert_close(y[:, 0], x[:, 0] + 1)
    train, valid = split_text_ids(ids, 0.1)
    assert len(train) == 90 and valid[0] == 90
    with pytest.raises(ValueError, match="ids must be a 1-D tensor of at least seq_len \\+ 1 = 101"):
        next(lm_batches(ids, 100, 2))


def test_char_vocabulary_round_trip():
    vocab = CharVocabulary("hello\nworld")
    assert len(vocab) == 4 + len(set("hello\nworld"))
    assert vocab.decode(vocab.encode("low\n")) == "low\n"
    assert vocab.decode([0, 1, 2] + vocab.encode("he")) == "he"
    assert chinese_side([("a", "你好"), ("b", "再见"), ("c", "你好")]) == "你好\n再见\n"
    from course_lib.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID

    assert [vocab.stoi[t] for t in ("<pad>", "<bos>", "<eos>", "<unk>")] == [PAD_ID, BOS_ID, EOS_ID, UNK_ID]


def test_language_model_trains_with_the_course_loop():
    from course_lib.training import TrainConfig, evaluate_loss, train

    text = "to be or not to be, that is the question. " * 20
    vocab = CharVocabulary(text)
    ids = torch.tensor(vocab.encode(text))
    torch.manual_seed(0)
    model = LanguageModel(LanguageModelConfig.modern(len(vocab), d_model=32, n_heads=4, n_kv_heads=2, n_layers=1, max_len=32))
    batches = list(lm_batches(ids, 16, 8, generator=torch.Generator().manual_seed(0), n_batches=4))
    before = evaluate_loss(model, batches, pad_id=None)["loss"]
    config = TrainConfig(max_steps=40, lr=3e-3, schedule="warmup_constant", warmup_steps=1, label_smoothing=0.0, pad_id=None,
                         amp="off", seed=0, progress=False)
    train(model, lambda epoch: lm_batches(ids, 16, 8, generator=torch.Generator().manual_seed(epoch), n_batches=10), config)
    assert evaluate_loss(model, batches, pad_id=None)["loss"] < before - 0.5


def test_language_model_checkpoint_round_trip(tmp_path):
    from course_lib.training import model_from_checkpoint, save_checkpoint

    model = modern_lm(tie_embeddings=False)
    save_checkpoint(tmp_path / "lm.pt", model)
    again = model_from_checkpoint(tmp_path / "lm.pt")
    assert isinstance(again, LanguageModel) and again.config == model.config
    tokens = torch.randint(4, 30, (2, 9))
    torch.testing.assert_close(again(tokens), model(tokens))


def test_evaluate_loss_reads_inputs_and_targets_of_an_lm_batch():
    from course_lib.training import evaluate_loss

    model = modern_lm()
    x, y = torch.randint(4, 30, (2, 9)), torch.randint(4, 30, (2, 9))
    expected = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    assert evaluate_loss(model, [(x, y)], pad_id=None)["loss"] == pytest.approx(float(expected.detach()), rel=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="float16 autocast with a GradScaler needs a CUDA device; none here")
def test_fp16_grad_scaler_training_on_cuda():
    from course_lib.training import TrainConfig, train

    ids = torch.randint(4, 30, (2000,))
    torch.manual_seed(0)
    model = LanguageModel(LanguageModelConfig.modern(30, d_model=64, n_heads=4, n_kv_heads=2, n_layers=2, max_len=32))
    config = TrainConfig(max_steps=20, lr=1e-3, warmup_steps=2, amp="fp16", label_smoothing=0.0, pad_id=None, seed=0, progress=False)
    result = train(model, lambda epoch: lm_batches(ids, 32, 8, n_batches=20), config, device="cuda")
    losses = result.losses
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    assert next(model.parameters()).dtype == torch.float32  # the master weights stay float32


# ----------------------------------------------------------------------------- Hugging Face Llama


def llama_pair(n_layers: int = 2, tie: bool = True):
    transformers = pytest.importorskip("transformers", reason="transformers (the dev extra) is not installed")
    cfg = transformers.LlamaConfig(
        vocab_size=50, hidden_size=64, intermediate_size=96, num_hidden_layers=n_layers, num_attention_heads=8,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=tie,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, attention_bias=False, mlp_bias=False,
    )
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    hf.config._attn_implementation = "eager"
    ours = LanguageModel(LanguageModelConfig.modern(
        50, d_model=64, n_heads=8, n_kv_heads=2, n_layers=n_layers, d_ff=96, max_len=64, eps=1e-6, tie_embeddings=tie,
    )).eval()
    missing, unexpected = ours.load_state_dict(from_llama_state_dict(hf.state_dict()), strict=False)
    assert not unexpected and not [k for k in missing if not k.endswith("output_projection.weight") or not tie]
    return hf, ours


def test_decoder_layer_matches_llama():
    hf, ours = llama_pair(n_layers=1)
    x = torch.randn(2, 9, 64)
    positions = torch.arange(9)[None].expand(2, 9)
    cos_sin = hf.model.rotary_emb(x, positions)
    additive = torch.zeros(9, 9).masked_fill(~torch.ones(9, 9, dtype=torch.bool).tril(), float("-inf"))[None, None]
    with torch.no_grad():
        expected = hf.model.layers[0](x, attention_mask=additive, position_ids=positions, position_embeddings=cos_sin)
        expected = expected[0] if isinstance(expected, tuple) else expected
        got = ours.stack.layers[0](x, src_mask=causal_mask(9))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("tie", [True, False])
def test_small_model_matches_llama(tie):
    hf, ours = llama_pair(n_layers=2, tie=tie)
    tokens = torch.randint(0, 50, (2, 20))
    with torch.no_grad():
        expected = hf(tokens).logits
        got = ours(tokens)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
