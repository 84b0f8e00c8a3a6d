"""A decoder-only language model built from the course's own layers (Part V of the book: chapter 12; today's block, chapter 13, in preparation).

A GPT- or Llama-style model is the encoder layer of chapter 7 under a causal
mask: self-attention that sees only earlier positions, then the FFN; no
encoder, no cross-attention. Every difference between the 2017 block and
today's is a field of :class:`LanguageModelConfig` (a switch on the same
layers, not a second model).

Mask convention (see :mod:`course_lib.masks`): bool, ``True`` = may attend,
broadcastable to ``(batch, n_heads, q_len, k_len)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .attention import KVCache, MultiHeadAttention
from .layers import EncoderLayer
from .masks import causal_mask, check_mask, decoder_self_attention_mask
from .model import LayerStack, check_block_switches
from .validation import check_int, checked_by, config_from_dict

__all__ = ["LanguageModelConfig", "LanguageModelCache", "LanguageModel", "LLAMA_LAYER_KEYS", "from_llama_state_dict"]


@dataclass
class LanguageModelConfig:
    """Sizes and switches of a :class:`LanguageModel`; the defaults are the 2017 block.

    Attributes:
        vocab_size: number of token ids.
        d_model, n_heads, n_layers, d_ff: sizes.
        n_kv_heads: key/value heads (``None`` = ``n_heads``; 1 = multi-query).
        dropout: residual, embedding, attention and FFN dropout.
        activation: ``"relu"``, ``"gelu"`` or ``"swiglu"``.
        norm: ``"layer"`` or ``"rms"``; norm_first: Pre-LN (with a final norm).
        positional: ``"sinusoidal"``, ``"learned"``, ``"rope"``, ``"alibi"`` or ``"none"``.
        max_len: the largest number of positions (prompt and generated text).
        bias: biases in the linear layers and LayerNorm.
        tie_embeddings: the output projection reuses the embedding matrix.
        scale_embedding: multiply the embeddings by ``sqrt(d_model)`` (paper).
        scaled_residual_init: residual branches' last projections times ``1 / sqrt(2 n_layers)``.
        fused_qkv, eps, rope_base: as :class:`course_lib.model.TransformerConfig`.
        pad_id: id of ``<pad>`` hidden from attention by the default mask, or ``None``.

    :meth:`modern` gives today's block (Llama's choices).

    Source: Radford et al. (2018, 2019), GPT and GPT-2; Touvron et al. (2023), Llama.
    """

    vocab_size: int = 256
    d_model: int = 256
    n_heads: int = 8
    n_layers: int = 4
    d_ff: int = 1024
    n_kv_heads: int | None = None
    dropout: float = 0.1
    activation: str = "relu"
    norm: str = "layer"
    norm_first: bool = False
    positional: str = "sinusoidal"
    max_len: int = 256
    bias: bool = True
    tie_embeddings: bool = True
    scale_embedding: bool = True
    scaled_residual_init: bool = False
    fused_qkv: bool = False
    eps: float = 1e-5
    rope_base: float = 10000.0
    pad_id: int | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len"):
            check_int(getattr(self, name), name)
        check_block_switches(self)
        check_int(self.pad_id, "pad_id", 0, optional=True)

    @classmethod
    def modern(cls, vocab_size: int = 256, **overrides: Any) -> "LanguageModelConfig":
        """Today's block: Pre-RMSNorm, RoPE, SwiGLU (``d_ff`` about ``8/3 d_model``), no biases, no dropout, unscaled embeddings."""
        d_model = overrides.get("d_model", cls.d_model)
        kwargs: dict[str, Any] = dict(
            vocab_size=vocab_size, norm="rms", norm_first=True, positional="rope", activation="swiglu",
            d_ff=8 * d_model // 3, bias=False, dropout=0.0, scale_embedding=False,
        )
        kwargs.update(overrides)
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (for checkpoints)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LanguageModelConfig":
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``."""
        return config_from_dict(cls, d)


class LanguageModelCache:
    """One self-attention :class:`course_lib.attention.KVCache` per layer.

    Each holds ``(batch, n_kv_heads, cached_len, d_k)`` keys and values:
    grouped-query attention shrinks it by ``n_heads / n_kv_heads``.
    ``length`` is the number of positions already read; :meth:`reorder`
    selects batch rows. Source: chapter 10 (incremental decoding).
    """

    def __init__(self, n_layers: int) -> None:
        self.layers = [KVCache(static=False) for _ in range(n_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else 0

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` (``(new_batch,)`` long) of every cached tensor."""
        for cache in self.layers:
            cache.reorder(index)

    def num_bytes(self) -> int:
        """Bytes held by the cached keys and values."""
        return sum(t.numel() * t.element_size() for c in self.layers for t in (c.key, c.value) if t is not None)


class LanguageModel(nn.Module):
    """A decoder-only Transformer: predict every next token of ``tokens``.

    ``n_layers`` :class:`course_lib.layers.EncoderLayer` under a causal mask
    (the same layer, switches and all, as the translator's encoder), on top
    of the embedding and positions, then the output projection to logits.

    Args:
        config: a :class:`LanguageModelConfig`.

    Methods (shapes batch-first):
        ``forward(tokens, *, mask=None, cache=None)``: ``(batch, seq_len)``
        ids -> logits ``(batch, seq_len, vocab_size)``; position ``t``
        predicts token ``t + 1``. Default ``mask``: :meth:`causal_mask`.
        With a :class:`LanguageModelCache`, ``tokens`` holds only the new
        positions (incremental decoding).

        ``encode(prompt)`` / ``decode(tgt, prompt, *, cache=None)``: the
        interface of chapter 10's decoders, so that
        :func:`course_lib.decoding.generate` (greedy, sampling, top-p, the
        KV cache) continues a prompt unchanged: the *prompt plays the
        source*. ``encode`` returns the prompt ids themselves (there is no
        encoder); ``decode`` reads the prompt followed by ``tgt[:, 1:]``
        (``tgt[:, 0]`` is the decoders' ``<bos>`` placeholder, never read),
        or, with a cache, only the newest token once the prompt is cached.
        Prompts in one batch must have the same length (no padding).

    Raises:
        ValueError/TypeError naming ``tokens`` or ``mask`` (:meth:`check_inputs`).

    Source: Radford et al. (2018), "Improving Language Understanding by
    Generative Pre-Training", section 3.1; Llama: Touvron et al. (2023).
    Equal to Hugging Face's ``LlamaForCausalLM`` with the :meth:`LanguageModelConfig.modern`
    switches and copied weights (tested).
    """

    def __init__(self, config: LanguageModelConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or LanguageModelConfig()
        self.stack = LayerStack(config, EncoderLayer, config.n_layers, config.vocab_size)
        self.output_projection = nn.Linear(config.d_model, config.vocab_size, bias=config.bias)
        nn.init.xavier_uniform_(self.output_projection.weight)
        if self.output_projection.bias is not None:
            nn.init.zeros_(self.output_projection.bias)
        if config.tie_embeddings:
            self.output_projection.weight = self.stack.embedding.weight

    def causal_mask(self, tokens: Tensor, cache: LanguageModelCache | None = None) -> Tensor:
        """Default mask: causal (AND padding when ``config.pad_id`` is set), ``(batch or 1, 1, new, cached + new)``."""
        if cache is None or cache.length == 0:
            return decoder_self_attention_mask(tokens, self.config.pad_id)  # (batch, 1, len, len)
        past, new = cache.length, tokens.size(1)
        return causal_mask(past + new, device=tokens.device)[:, :, past:, :]  # (1, 1, new, past + new)

    def check_inputs(self, tokens: Tensor, *, mask: Tensor | None = None, cache: LanguageModelCache | None = None) -> None:
        """Raise naming ``tokens`` (ids that do not fit, see :meth:`course_lib.model.LayerStack.check_tokens`) or ``mask``."""
        past = cache.length if cache is not None else 0
        self.stack.check_tokens(tokens, "tokens", offset=past)
        batch, new = tokens.shape
        check_mask(mask, (batch, self.config.n_heads, new, past + new), "mask")

    @checked_by(check_inputs)
    def forward(self, tokens: Tensor, *, mask: Tensor | None = None, cache: LanguageModelCache | None = None) -> Tensor:
        offset = cache.length if cache is not None else 0
        mask = self.causal_mask(tokens, cache) if mask is None else mask  # (batch or 1, 1, new, offset + new)
        x = self.stack.positional(self.stack.embedding(tokens), offset=offset)  # (batch, new, d_model)
        for i, layer in enumerate(self.stack.layers):
            x = layer(x, src_mask=mask, cache=cache.layers[i] if cache is not None else None)
        return self.output_projection(self.stack.final_norm(x))  # (batch, new, vocab_size)

    # -- chapter 10's decoders: the prompt plays the source -------------------------------------
    def new_cache(self) -> LanguageModelCache:
        """An empty :class:`LanguageModelCache`."""
        return LanguageModelCache(len(self.stack.layers))

    def encode(self, src: Tensor, *, src_mask: Tensor | None = None) -> Tensor:
        """The prompt ``(batch, prompt_len)`` itself: the "memory" the decoders pass back to :meth:`decode`."""
        self.stack.check_tokens(src, "prompt")
        return src

    def decode(self, tgt: Tensor, memory: Tensor, *, memory_mask: Tensor | None = None,
               cache: LanguageModelCache | None = None) -> Tensor:
        """Logits ``(batch, len, vocab_size)`` for the prompt ``memory`` followed by ``tgt[:, 1:]`` (see the class docstring).

        ``memory_mask`` is ignored (prompts are not padded).
        """
        if cache is not None and cache.length > 0:
            return self(tgt, cache=cache)  # tgt: the newest token (batch, 1); the rest is cached
        return self(torch.cat([memory, tgt[:, 1:]], dim=1), cache=cache)  # (batch, prompt_len + len - 1)

    def record_attention(self, enabled: bool = True) -> None:
        """Make every attention layer keep its last weights in ``.last_weights`` (as :class:`course_lib.model.Transformer`)."""
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                module.record_weights = enabled
                if not enabled:
                    module.last_weights = None

    def num_parameters(self) -> int:
        """Number of distinct trainable parameters (shared weights counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


LLAMA_LAYER_KEYS = {
    "input_layernorm.": "self_attn_sublayer.norm.",
    "self_attn.q_proj.": "self_attn.q_proj.",
    "self_attn.k_proj.": "self_attn.k_proj.",
    "self_attn.v_proj.": "self_attn.v_proj.",
    "self_attn.o_proj.": "self_attn.out_proj.",
    "post_attention_layernorm.": "ffn_sublayer.norm.",
    "mlp.gate_proj.": "ffn.linear1.",
    "mlp.up_proj.": "ffn.linear_v.",
    "mlp.down_proj.": "ffn.linear2.",
}
"""Hugging Face Llama's names of one decoder layer's weights and the course's (the roles of chapter 7)."""


def from_llama_state_dict(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """A ``LlamaForCausalLM`` state dict renamed for a :class:`LanguageModel` with the :meth:`LanguageModelConfig.modern` switches.

    ``model.embed_tokens`` becomes the embedding, ``model.layers.i.*`` the
    layers (:data:`LLAMA_LAYER_KEYS`), ``model.norm`` the final norm and
    ``lm_head`` the output projection. The configurations must agree (sizes,
    ``n_kv_heads``, ``eps = rms_norm_eps``, ``rope_base = rope_theta``,
    ``tie_embeddings = tie_word_embeddings``). Load with
    ``model.load_state_dict(from_llama_state_dict(hf.state_dict()))``.
    """
    out = {}
    for key, value in state_dict.items():
        if key.startswith("model.layers."):
            index, rest = key[len("model.layers."):].split(".", 1)
            old = next(prefix for prefix in LLAMA_LAYER_KEYS if rest.startswith(prefix))
            out[f"stack.layers.{index}.{LLAMA_LAYER_KEYS[old]}{rest[len(old):]}"] = value
        elif key.startswith("model.embed_tokens."):
            out["stack.embedding.embedding." + key[len("model.embed_tokens."):]] = value
        elif key.startswith("model.norm."):
            out["stack.final_norm." + key[len("model.norm."):]] = value
        elif key.startswith("lm_head."):
            out["output_projection." + key[len("lm_head."):]] = value
    return out
