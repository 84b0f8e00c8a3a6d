"""Tests of course_lib.model (chapter 8; paper section 3 and table 3).

Independent references: a PyTorch pipeline built from ``nn.Embedding``,
``nn.TransformerEncoder``/``nn.TransformerDecoder`` and a sinusoidal table
computed with ``math``; a parameter-count formula written out below; and
properties (causality, padding invariance, permutation equivariance, KV cache
= full recomputation).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course_lib.masks import causal_mask, decoder_self_attention_mask, padding_mask
from course_lib.model import Decoder, Encoder, Transformer, TransformerConfig

SRC_V, TGT_V = 23, 29


def small_config(**overrides) -> TransformerConfig:
    kw = dict(
        src_vocab_size=SRC_V, tgt_vocab_size=TGT_V, d_model=16, n_heads=4, n_encoder_layers=2,
        n_decoder_layers=2, d_ff=32, dropout=0.0, max_len=40,
    )
    kw.update(overrides)
    return TransformerConfig(**kw)


def small_model(parity, **overrides) -> Transformer:
    return parity.randomize_(Transformer(small_config(**overrides))).eval()


def sinusoid_table(n: int, d: int) -> torch.Tensor:
    return torch.tensor(
        [[math.sin(p / 10000 ** ((c - c % 2) / d)) if c % 2 == 0 else math.cos(p / 10000 ** ((c - c % 2) / d))
          for c in range(d)] for p in range(n)],
        dtype=torch.float32,
    )


# ---------------------------------------------------------- parameter count
def paper_base_count(V=37000, d=512, d_ff=2048, n_enc=6, n_dec=6, final_norms=0, embeddings=1) -> int:
    """Parameters of the base model, counted by hand.

    attention: W_Q, W_K, W_V, W_O with biases = 4 (d*d + d)
    FFN: d*d_ff + d_ff + d_ff*d + d
    LayerNorm: gain and shift = 2d; encoder layers have 2, decoder layers 3
    embeddings: V*d, shared by source, target and the (tied) output weight
    output layer: its bias V (its weight is the tied embedding)
    """
    attn = 4 * (d * d + d)
    ffn = d * d_ff + d_ff + d_ff * d + d
    ln = 2 * d
    encoder_layer = attn + ffn + 2 * ln
    decoder_layer = 2 * attn + ffn + 3 * ln
    return embeddings * V * d + n_enc * encoder_layer + n_dec * decoder_layer + V + final_norms * ln


def _meta_model(config: TransformerConfig) -> Transformer:
    with torch.device("meta"):  # shapes only: no 250 MB allocation, no init time
        return Transformer(config)


def test_paper_base_parameter_count():
    model = _meta_model(TransformerConfig.paper_base())
    n = model.num_parameters()
    assert n == paper_base_count() == 63_119_496
    assert 60e6 <= n <= 66e6  # the paper reports 65M for the base model (table 3)


def test_parameter_count_without_sharing_and_with_pre_ln():
    untied = _meta_model(TransformerConfig.paper_base(share_embeddings=False, tie_output=False))
    assert untied.num_parameters() == paper_base_count(embeddings=3)
    pre_ln = _meta_model(TransformerConfig.paper_base(norm_first=True))
    assert pre_ln.num_parameters() == paper_base_count(final_norms=2)


def test_num_parameters_counts_shared_weights_once():
    model = Transformer(small_config(src_vocab_size=TGT_V, share_embeddings=True, tie_output=True))
    unique = {id(p): p.numel() for p in model.parameters()}
    assert model.num_parameters() == sum(unique.values())
    naive = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert naive - model.num_parameters() == 2 * TGT_V * 16


def test_weight_sharing_uses_one_parameter():
    model = Transformer(small_config(src_vocab_size=TGT_V, share_embeddings=True, tie_output=True))
    w = model.encoder.embedding.weight
    assert model.decoder.embedding.weight is w
    assert model.output_projection.weight is w
    src, tgt = torch.randint(1, TGT_V, (2, 5)), torch.randint(1, TGT_V, (2, 4))
    model(src, tgt).sum().backward()
    assert w.grad is not None and w.grad.abs().sum() > 0
    with torch.no_grad():
        w[3].fill_(7.0)
    assert torch.all(model.output_projection.weight[3] == 7.0) and torch.all(model.decoder.embedding.weight[3] == 7.0)


def test_no_sharing_by_default():
    model = Transformer(small_config())
    ws = [model.encoder.embedding.weight, model.decoder.embedding.weight, model.output_projection.weight]
    assert len({id(w) for w in ws}) == 3


def test_tie_output_only():
    model = Transformer(small_config(tie_output=True))
    assert model.output_projection.weight is model.decoder.embedding.weight
    assert model.encoder.embedding.weight is not model.decoder.embedding.weight



@pytest.mark.parametrize("tie_output", [False, True])
def test_state_dict_with_old_generator_keys_loads(parity, tie_output):
    """State dicts saved when the output layer was called ``generator`` still load (strict)."""
    model = small_model(parity, tie_output=tie_output)
    old = {k.replace("output_projection.", "generator.", 1): v for k, v in model.state_dict().items()}
    assert "generator.bias" in old and not any(k.startswith("output_projection.") for k in old)
    fresh = Transformer(small_config(tie_output=tie_output)).eval()
    fresh.load_state_dict(old)
    src, tgt = torch.randint(1, SRC_V, (2, 5)), torch.randint(1, TGT_V, (2, 4))
    torch.testing.assert_close(fresh(src, tgt), model(src, tgt), atol=0, rtol=0)
    wrapped = nn.Sequential(Transformer(small_config(tie_output=tie_output)))  # as a submodule: prefixed keys
    wrapped.load_state_dict({"0." + k: v for k, v in old.items()})
    torch.testing.assert_close(wrapped[0].output_projection.bias, model.output_projection.bias, atol=0, rtol=0)

# ------------------------------------------------------- parity with PyTorch
def _torch_stacks(parity, model, norm_first):
    c = model.config
    enc = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(c.d_model, c.n_heads, c.d_ff, 0.0, c.activation, c.eps, batch_first=True, norm_first=norm_first),
        c.n_encoder_layers, norm=nn.LayerNorm(c.d_model, eps=c.eps) if norm_first else None, enable_nested_tensor=False,
    )
    dec = nn.TransformerDecoder(
        nn.TransformerDecoderLayer(c.d_model, c.n_heads, c.d_ff, 0.0, c.activation, c.eps, batch_first=True, norm_first=norm_first),
        c.n_decoder_layers, norm=nn.LayerNorm(c.d_model, eps=c.eps) if norm_first else None,
    )
    for mine, theirs in zip(model.encoder.layers, enc.layers):
        parity.copy_encoder_layer(mine, theirs)
    for mine, theirs in zip(model.decoder.layers, dec.layers):
        parity.copy_decoder_layer(mine, theirs)
    if norm_first:
        parity.copy_layer_norm(model.encoder.final_norm, enc.norm)
        parity.copy_layer_norm(model.decoder.final_norm, dec.norm)
    return enc.eval(), dec.eval()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_matches_torch_pipeline(parity, norm_first, activation):
    """Embedding * sqrt(d_model) + sinusoids -> nn.TransformerEncoder/Decoder -> Linear."""
    model = small_model(parity, norm_first=norm_first, activation=activation)
    enc, dec = _torch_stacks(parity, model, norm_first)
    d = model.config.d_model
    src = parity.tokens_with_padding(3, 7, SRC_V, [7, 4, 2])
    tgt = parity.tokens_with_padding(3, 5, TGT_V, [5, 3, 5])
    logits = model(src, tgt)

    w_src = model.encoder.embedding.weight.detach()
    w_tgt = model.decoder.embedding.weight.detach()
    x = w_src[src] * math.sqrt(d) + sinusoid_table(7, d)
    y = w_tgt[tgt] * math.sqrt(d) + sinusoid_table(5, d)
    src_kpm = src == 0  # PyTorch: True = blocked
    memory = enc(x, src_key_padding_mask=src_kpm)
    hidden = dec(
        y, memory, tgt_mask=~causal_mask(5)[0, 0], tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src_kpm
    )
    ref = hidden @ model.output_projection.weight.detach().T + model.output_projection.bias.detach()
    assert logits.shape == (3, 5, TGT_V)
    torch.testing.assert_close(logits, ref, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(model.encode(src), memory, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
def test_encoder_stack_matches_torch_encoder(parity, norm_first):
    model = small_model(parity, norm_first=norm_first, n_encoder_layers=3)
    enc, _ = _torch_stacks(parity, model, norm_first)
    src = parity.tokens_with_padding(2, 6, SRC_V, [6, 3])
    x = model.encoder.positional(model.encoder.embedding(src))
    x = x.detach().requires_grad_()
    ours = x
    for layer in model.encoder.layers:
        ours = layer(ours, src_mask=padding_mask(src, 0))
    ours = model.encoder.final_norm(ours)
    ref = enc(x, src_key_padding_mask=src == 0)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(model.encoder(src, src_mask=padding_mask(src, 0)), ref.detach(), atol=1e-5, rtol=1e-4)
    g = torch.randn_like(ref)
    torch.testing.assert_close(
        torch.autograd.grad(ours, x, g)[0], torch.autograd.grad(ref, x, g)[0], atol=1e-4, rtol=1e-4
    )


def test_default_masks_are_built_from_pad_id(parity):
    model = small_model(parity)
    src = parity.tokens_with_padding(2, 6, SRC_V, [6, 2])
    tgt = parity.tokens_with_padding(2, 4, TGT_V, [4, 3])
    explicit = model(src, tgt, src_mask=padding_mask(src, 0), tgt_mask=decoder_self_attention_mask(tgt, 0))
    torch.testing.assert_close(model(src, tgt), explicit, atol=0, rtol=0)
    none = small_model(parity, pad_id=None)
    none.load_state_dict(model.state_dict())
    torch.testing.assert_close(none(src, tgt), model(src, tgt, src_mask=torch.ones(1, 1, 1, 6, dtype=torch.bool), tgt_mask=causal_mask(4)))


# ------------------------------------------------------------- final norms
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
def test_pre_ln_stacks_have_a_final_layer_norm(parity, norm_first):
    model = Transformer(small_config(norm_first=norm_first)).eval()
    for stack in (model.encoder, model.decoder):
        assert isinstance(stack.final_norm, nn.LayerNorm) == norm_first
        assert isinstance(stack.final_norm, nn.Identity) == (not norm_first)
    src = torch.randint(1, SRC_V, (2, 6))
    # encoder output = last layer's output, then the final norm only in Pre-LN
    x = model.encoder.positional(model.encoder.embedding(src))
    for layer in model.encoder.layers:
        x = layer(x)
    memory = model.encode(src)
    if norm_first:
        assert not torch.allclose(memory, x, atol=1e-3)
    else:
        torch.testing.assert_close(memory, x)
    # either way the stack's output is layer-normalised (unit gain, zero shift at init)
    torch.testing.assert_close(memory.mean(-1), torch.zeros(2, 6), atol=1e-5, rtol=0)
    torch.testing.assert_close(memory.var(-1, unbiased=False), torch.ones(2, 6), atol=1e-3, rtol=0)


# ---------------------------------------------------------------- properties
def test_encoder_without_positions_is_permutation_equivariant(parity):
    model = small_model(parity, positional="none")
    src = torch.randint(1, SRC_V, (2, 7))
    perm = torch.tensor([4, 0, 6, 2, 1, 5, 3])
    torch.testing.assert_close(model.encode(src[:, perm]), model.encode(src)[:, perm], atol=1e-5, rtol=1e-4)
    # with positions the same permutation changes the result (the test can fail)
    with_pos = small_model(parity, positional="sinusoidal")
    assert not torch.allclose(with_pos.encode(src[:, perm]), with_pos.encode(src)[:, perm], atol=1e-3)


def test_future_target_tokens_never_change_earlier_logits(parity):
    model = small_model(parity)
    src = torch.randint(1, SRC_V, (2, 6))
    tgt = torch.randint(1, TGT_V, (2, 7))
    base = model(src, tgt)
    for t in (1, 3, 6):
        changed = tgt.clone()
        changed[:, t:] = torch.randint(1, TGT_V, (2, 7 - t))
        out = model(src, changed)
        torch.testing.assert_close(out[:, :t], base[:, :t], atol=1e-5, rtol=1e-4)
        assert not torch.allclose(out[:, t:], base[:, t:], atol=1e-3)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
def test_padding_never_changes_non_pad_outputs(parity, norm_first):
    model = small_model(parity, norm_first=norm_first)
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    tgt = torch.tensor([[1, 2, 3], [1, 4, 0]])
    base_memory = model.encode(src)
    base_logits = model(src, tgt)
    # (1) more padding appended to source and target
    src_long = torch.cat([src, torch.zeros(2, 3, dtype=torch.long)], 1)
    tgt_long = torch.cat([tgt, torch.zeros(2, 2, dtype=torch.long)], 1)
    keep_src, keep_tgt = src != 0, tgt != 0
    torch.testing.assert_close(model.encode(src_long)[:, :4][keep_src], base_memory[keep_src], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(model(src_long, tgt_long)[:, :3][keep_tgt], base_logits[keep_tgt], atol=1e-5, rtol=1e-4)
    # (2) different ids at masked positions, masks passed explicitly
    src_mask = padding_mask(src, 0)
    tgt_mask = decoder_self_attention_mask(tgt, 0)
    src_junk = torch.where(src == 0, torch.randint(1, SRC_V, src.shape), src)
    tgt_junk = torch.where(tgt == 0, torch.randint(1, TGT_V, tgt.shape), tgt)
    out = model(src_junk, tgt_junk, src_mask=src_mask, tgt_mask=tgt_mask)
    torch.testing.assert_close(out[keep_tgt], base_logits[keep_tgt], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(
        model.encode(src_junk, src_mask=src_mask)[keep_src], base_memory[keep_src], atol=1e-5, rtol=1e-4
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_all_padding_source_row_stays_finite(parity, dtype):
    """A source that is all padding: every encoder query row is fully masked."""
    model = small_model(parity).to(dtype)
    src = torch.tensor([[3, 4, 5], [0, 0, 0]])
    tgt = torch.tensor([[1, 2], [1, 2]])
    logits = model(src, tgt)
    assert torch.isfinite(logits).all()
    logits.float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# ------------------------------------------------------------------ KV cache
@pytest.mark.parametrize("chunks", [[1] * 6, [2, 1, 3], [6]], ids=["one_by_one", "2_1_3", "all_at_once"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
def test_kv_cache_equals_full_recomputation(parity, chunks, norm_first):
    model = small_model(parity, norm_first=norm_first, dropout=0.1)  # eval(): dropout off
    src = parity.tokens_with_padding(2, 5, SRC_V, [5, 2])
    tgt = torch.randint(1, TGT_V, (2, 6))
    src_mask = padding_mask(src, 0)
    memory = model.encode(src)
    full = model.decode(tgt, memory, memory_mask=src_mask)
    cache = model.new_cache()
    pieces, start = [], 0
    cross_keys = None
    for n in chunks:
        pieces.append(model.decode(tgt[:, start : start + n], memory, memory_mask=src_mask, cache=cache))
        start += n
        assert cache.length == start
        keys = [layer.cross_attn.key for layer in cache.layers]
        if cross_keys is not None:  # cross-attention keys computed once, then reused
            assert all(a is b for a, b in zip(keys, cross_keys))
        cross_keys = keys
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-5, rtol=1e-4)


def test_kv_cache_reorder_matches_reordered_batch(parity):
    model = small_model(parity)
    src = torch.randint(1, SRC_V, (2, 5))
    tgt = torch.randint(1, TGT_V, (2, 4))
    memory = model.encode(src)
    cache = model.new_cache()
    model.decode(tgt[:, :3], memory, cache=cache)
    index = torch.tensor([1, 1, 0])
    cache.reorder(index)
    step = model.decode(tgt[index, 3:], memory[index], cache=cache)
    full = model.decode(tgt[index], memory[index])
    torch.testing.assert_close(step[:, 0], full[:, 3], atol=1e-5, rtol=1e-4)


# ------------------------------------------------------- dropout and dtypes
def test_dropout_active_in_train_only(parity):
    model = small_model(parity, dropout=0.3)
    src, tgt = torch.randint(1, SRC_V, (2, 5)), torch.randint(1, TGT_V, (2, 4))
    model.train()
    assert not torch.allclose(model(src, tgt), model(src, tgt))
    model.eval()
    torch.testing.assert_close(model(src, tgt), model(src, tgt), atol=0, rtol=0)


def test_positional_buffer_is_not_a_parameter_and_follows_dtype(parity):
    model = small_model(parity)
    names = [n for n, _ in model.named_parameters()]
    assert not any("positional" in n for n in names)
    assert "encoder.positional.pe" not in model.state_dict()  # rebuilt, not saved
    model = model.to(torch.float64)
    assert model.encoder.positional.pe.dtype == torch.float64
    assert model.decoder.positional.pe.dtype == torch.float64
    out = model(torch.randint(1, SRC_V, (1, 4)), torch.randint(1, TGT_V, (1, 3)))
    assert out.dtype == torch.float64


def test_learned_positions_are_parameters():
    model = Transformer(small_config(positional="learned"))
    names = [n for n, _ in model.named_parameters()]
    assert "encoder.positional.embedding.weight" in names


def test_record_attention(parity):
    model = small_model(parity)
    model.record_attention(True)
    model(torch.randint(1, SRC_V, (2, 5)), torch.randint(1, TGT_V, (2, 3)))
    assert model.encoder.layers[0].self_attn.last_weights.shape == (2, 4, 5, 5)
    assert model.decoder.layers[1].self_attn.last_weights.shape == (2, 4, 3, 3)
    assert model.decoder.layers[1].cross_attn.last_weights.shape == (2, 4, 3, 5)
    model.record_attention(False)
    assert model.decoder.layers[1].cross_attn.last_weights is None


def test_config_round_trip():
    c = small_config(norm_first=True, positional="learned")
    assert TransformerConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ValueError, match="unknown.*'n_layers'"):
        TransformerConfig.from_dict({**c.to_dict(), "n_layers": 3})


def test_paper_base_defaults():
    c = TransformerConfig.paper_base()
    assert (c.d_model, c.n_heads, c.d_ff, c.n_encoder_layers, c.n_decoder_layers) == (512, 8, 2048, 6, 6)
    assert c.dropout == 0.1 and c.share_embeddings and c.tie_output and not c.norm_first


def test_encoder_decoder_classes_usable_alone():
    c = small_config()
    enc, dec = Encoder(c).eval(), Decoder(c).eval()
    memory = enc(torch.randint(1, SRC_V, (2, 5)))
    hidden = dec(torch.randint(1, TGT_V, (2, 3)), memory, tgt_mask=causal_mask(3))
    assert memory.shape == (2, 5, 16) and hidden.shape == (2, 3, 16)


# ----------------------------------------------------------------- bad input
def test_config_errors():
    with pytest.raises(ValueError, match=r"d_model=10.*n_heads=4"):
        small_config(d_model=10, n_heads=4)
    with pytest.raises(ValueError, match="positional.*'xpos'"):  # 'rope' is a setting since chapter 13
        small_config(positional="xpos")
    with pytest.raises(ValueError, match=r"share_embeddings.*23 and 29"):
        small_config(share_embeddings=True)
    with pytest.raises(ValueError, match="dropout"):
        small_config(dropout=1.0)
    with pytest.raises(ValueError, match="d_ff"):
        small_config(d_ff=0)


def test_model_bad_inputs(parity):
    model = small_model(parity)
    src, tgt = torch.randint(1, SRC_V, (2, 5)), torch.randint(1, TGT_V, (2, 4))
    with pytest.raises(ValueError, match=r"src must be token ids of shape \(batch, seq_len\)"):
        model(src[0], tgt)
    with pytest.raises(ValueError, match=r"tgt must be token ids"):
        model(src, tgt[..., None])
    with pytest.raises(ValueError, match="batch sizes differ: src has 2, tgt has 3"):
        model(src, torch.randint(1, TGT_V, (3, 4)))
    with pytest.raises(ValueError, match="batch sizes differ: tgt has 3, memory has 2"):
        model.decode(torch.randint(1, TGT_V, (3, 4)), model.encode(src))
    with pytest.raises(ValueError, match="max_len=40"):
        model(torch.randint(1, SRC_V, (2, 41)), tgt)
    with pytest.raises(ValueError, match="max_len=40"):
        model(src, torch.randint(1, TGT_V, (2, 41)))
    with pytest.raises(ValueError, match=rf"\[0, {SRC_V}\)"):
        model(torch.full((2, 5), SRC_V), tgt)
    with pytest.raises(ValueError, match=rf"\[0, {TGT_V}\)"):
        model(src, torch.full((2, 4), -1))
    with pytest.raises(ValueError, match="integer.*float32"):
        model(src.float(), tgt)
    with pytest.raises(ValueError, match="integer.*float32"):
        model(src, tgt.float())
    with pytest.raises(TypeError, match="torch.bool"):
        model(src, tgt, src_mask=torch.ones(2, 1, 1, 5))
    with pytest.raises(ValueError, match="mask of shape"):
        model(src, tgt, src_mask=torch.ones(2, 1, 1, 6, dtype=torch.bool))



def test_forward_checks_each_token_tensor_once(parity, monkeypatch):
    """``src`` passes through encode, the padding mask and the embedding: only the entry point checks it."""
    import course_lib.embedding
    import course_lib.masks

    model = small_model(parity)
    src, tgt = torch.randint(1, SRC_V, (2, 5)), torch.randint(1, TGT_V, (2, 4))
    seen = []
    for module in (course_lib.embedding, course_lib.masks):
        original = module.check_token_ids
        monkeypatch.setattr(module, "check_token_ids", lambda t, name, _f=original, **kw: (seen.append(name), _f(t, name, **kw)))
    model(src, tgt)
    assert seen == ["src", "tgt"]
    seen.clear()
    model.decode(tgt, model.encode(src))
    assert seen == ["src", "tgt"]
    seen.clear()
    course_lib.masks.padding_mask(src, 0)  # called on its own, it checks its input
    assert seen == ["tokens"]

def test_cache_longer_than_max_len(parity):
    model = small_model(parity, max_len=4)
    memory = model.encode(torch.randint(1, SRC_V, (1, 3)))
    cache = model.new_cache()
    model.decode(torch.randint(1, TGT_V, (1, 4)), memory, cache=cache)
    with pytest.raises(ValueError, match="max_len=4"):
        model.decode(torch.randint(1, TGT_V, (1, 1)), memory, cache=cache)


# ------------------------------------------------------ old state dicts load
def _old_layer_names(state_dict):
    """A state dict as saved before the role names: numbered sublayers, ``feed_forward``, ``generator``."""
    old = {}
    for key, value in state_dict.items():
        decoder = ".decoder." in f".{key}"
        key = key.replace("self_attn_sublayer.", "sublayer1.").replace("ffn.", "feed_forward.")
        key = key.replace("cross_attn_sublayer.", "sublayer2.")
        key = key.replace("ffn_sublayer.", "sublayer3." if decoder else "sublayer2.").replace("feed_forward_sublayer.", "sublayer3." if decoder else "sublayer2.")
        key = key.replace("output_projection.", "generator.")
        old[key] = value
    return old


def test_state_dicts_with_the_old_layer_names_load(parity):
    """Keys ``sublayer1..3``/``feed_forward`` of one ``TransformerLayer`` class map to the role names."""
    model = small_model(parity).eval()
    old = _old_layer_names(model.state_dict())
    assert "encoder.layers.0.sublayer2.norm.weight" in old and "decoder.layers.0.sublayer3.norm.weight" in old
    assert "decoder.layers.0.feed_forward.linear1.weight" in old and not any("ffn" in k for k in old)
    fresh = small_model(parity).eval()
    fresh.load_state_dict(old)  # strict: every key found
    for name, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value), name
    # the encoder's sublayer2 is its FFN's norm, the decoder's sublayer2 its cross-attention's
    assert torch.equal(fresh.encoder.layers[0].ffn_sublayer.norm.weight, old["encoder.layers.0.sublayer2.norm.weight"])
    assert torch.equal(fresh.decoder.layers[0].cross_attn_sublayer.norm.weight, old["decoder.layers.0.sublayer2.norm.weight"])
    src, tgt = torch.randint(1, SRC_V, (2, 5)), torch.randint(1, TGT_V, (2, 4))
    torch.testing.assert_close(fresh(src, tgt), model(src, tgt), atol=0, rtol=0)


def test_a_layer_alone_loads_its_old_state_dict(parity):
    from course_lib.layers import DecoderLayer

    layer = parity.randomize_(DecoderLayer(16, 4, 32, dropout=0.0)).eval()
    old = {k.replace("self_attn_sublayer.", "sublayer1.").replace("cross_attn_sublayer.", "sublayer2.")
           .replace("ffn_sublayer.", "sublayer3.").replace("ffn.", "feed_forward."): v for k, v in layer.state_dict().items()}
    fresh = DecoderLayer(16, 4, 32, dropout=0.0).eval()
    fresh.load_state_dict(old)
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 4, 16)
    torch.testing.assert_close(fresh(x, memory), layer(x, memory), atol=0, rtol=0)


def test_the_committed_checkpoint_loads_strictly():
    from pathlib import Path

    from course_lib.training import load_checkpoint, model_from_checkpoint

    path = Path(__file__).resolve().parents[2] / "checkpoints" / "en-zh.pt"
    saved = load_checkpoint(path)["model"]
    assert any(".sublayer1." in k for k in saved)  # saved with the old names
    model = model_from_checkpoint(path)
    for key, value in model.state_dict().items():
        assert ".sublayer" not in key and ".feed_forward." not in key, key
    assert torch.equal(model.decoder.layers[0].cross_attn_sublayer.norm.weight, saved["decoder.layers.0.sublayer2.norm.weight"])
    assert torch.equal(model.encoder.layers[0].ffn.linear1.weight, saved["encoder.layers.0.feed_forward.linear1.weight"])


def _checks_called(fn):
    """The qualified names of the ``check_*`` functions that run during ``fn()``, in call order."""
    import sys

    seen = []

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_name.startswith("check_"):
            seen.append(getattr(code, "co_qualname", code.co_name))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def test_inputs_are_checked_once_where_they_enter_the_model(parity):
    """One validation mechanism: the entry point checks, the layers and the attention inside do not."""
    from course_lib.layers import EncoderLayer

    model = small_model(parity).eval()
    src, tgt = torch.randint(1, SRC_V, (2, 5)), torch.randint(1, TGT_V, (2, 4))
    seen = _checks_called(lambda: model(src, tgt))
    assert seen.count("Transformer.check_inputs") == 1
    inner = ("MultiHeadAttention.check_inputs", "EncoderLayer.check_inputs", "DecoderLayer.check_inputs",
             "PositionwiseFeedForward.check_inputs", "check_attention_inputs", "check_hidden_states", "check_float_input")
    assert not [name for name in seen if name in inner], seen
    # called on its own, a layer checks its input once, and the attention inside it does not check again
    layer = EncoderLayer(16, 4, 32).eval()
    seen = _checks_called(lambda: layer(torch.randn(2, 3, 16)))
    assert seen.count("EncoderLayer.check_inputs") == 1 and seen.count("MultiHeadAttention.check_inputs") == 1
    assert "check_attention_inputs" not in seen and "PositionwiseFeedForward.check_inputs" not in seen
