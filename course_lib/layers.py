"""Add & Norm, the encoder layer and the decoder layer (chapter 7).

Mask convention (see :mod:`course_lib.masks`): bool, ``True`` = may attend,
broadcastable to ``(batch, n_heads, q_len, k_len)``.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

import torch
from torch import Tensor, nn

from .attention import KVCache, MultiHeadAttention
from .feedforward import PositionwiseFeedForward
from .normalization import make_norm
from .positional import RotaryEmbedding
from .validation import check_hidden_states, checked_by

__all__ = [
    "ResidualSublayer", "EncoderLayer", "DecoderLayer", "DecoderLayerCache", "LEGACY_LAYER_KEYS", "rename_legacy_layer_keys",
    "scale_residual_branches",
]


class ResidualSublayer(nn.Module):
    """Add & Norm around a sublayer, in Post-LN or Pre-LN order.

    * ``norm_first=False`` (Post-LN, the paper): ``LayerNorm(x + Dropout(f(x)))``.
    * ``norm_first=True`` (Pre-LN): ``x + Dropout(f(LayerNorm(x)))``; the
      residual stream is never normalised, so a Pre-LN stack needs a final
      LayerNorm (see :class:`course_lib.model.Encoder`).

    Args:
        d_model: width of ``x``.
        dropout: residual dropout (paper: 0.1).
        norm_first: Pre-LN if true, Post-LN if false.
        eps: LayerNorm epsilon (PyTorch default 1e-5).
        norm: keyword-only; ``"layer"`` (LayerNorm, the paper) or ``"rms"``
            (:class:`course_lib.normalization.RMSNorm`, today's models).
        bias: keyword-only; ``False`` drops LayerNorm's bias.

    Shapes:
        ``x``: ``(batch, seq_len, d_model)``; ``sublayer`` maps that shape to
        itself. Returns ``(batch, seq_len, d_model)``.

    Source: Vaswani et al. (2017), section 3.1 ("LayerNorm(x + Sublayer(x))")
    and 5.4 (residual dropout); Pre-LN: Xiong et al. (2020), "On Layer
    Normalization in the Transformer Architecture".
    """

    def __init__(
        self, d_model: int, dropout: float = 0.1, norm_first: bool = False, eps: float = 1e-5, *,
        norm: str = "layer", bias: bool = True,
    ) -> None:
        super().__init__()
        self.norm = make_norm(norm, d_model, eps, bias)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"


LEGACY_LAYER_KEYS = {
    "EncoderLayer": {"sublayer1.": "self_attn_sublayer.", "sublayer2.": "ffn_sublayer.", "feed_forward.": "ffn."},
    "DecoderLayer": {
        "sublayer1.": "self_attn_sublayer.",
        "sublayer2.": "cross_attn_sublayer.",
        "sublayer3.": "ffn_sublayer.",
        "feed_forward.": "ffn.",
    },
}
"""State-dict key prefixes of layers saved before they had role names (one ``TransformerLayer`` class built both) and their names now."""


def rename_legacy_layer_keys(module: nn.Module, state_dict: dict, prefix: str, *args: object) -> None:
    """Load-state-dict pre-hook of both layers: rename the keys of :data:`LEGACY_LAYER_KEYS` in place.

    Lets old checkpoints (e.g. ``checkpoints/en-zh.pt``), saved when the
    sublayers were numbered ``sublayer1..3`` and the FFN was ``feed_forward``,
    load into the layers with role names.
    """
    for old, new in LEGACY_LAYER_KEYS[type(module).__name__].items():
        for key in [k for k in state_dict if k.startswith(prefix + old)]:
            renamed = prefix + new + key[len(prefix + old):]
            if renamed not in state_dict:
                state_dict[renamed] = state_dict.pop(key)


def attention(
    d_model: int, n_heads: int, dropout: float, fused_qkv: bool, *, bias: bool = True,
    n_kv_heads: int | None = None, rotary: RotaryEmbedding | None = None, alibi: bool = False,
) -> MultiHeadAttention:
    """One attention sublayer of a layer (the dropout on its weights is the layer's dropout)."""
    return MultiHeadAttention(
        d_model, n_heads, dropout_p=dropout, bias=bias, fused_qkv=fused_qkv, n_kv_heads=n_kv_heads, rotary=rotary,
        alibi=alibi,
    )


@torch.no_grad()
def scale_residual_branches(layers: Iterable[nn.Module], n_layers: int) -> None:
    """Multiply the last projection of every residual branch by ``1 / sqrt(2 * n_layers)``, in place.

    Those projections are each attention's ``out_proj`` and each FFN's
    ``linear2``: what every sublayer adds to the residual stream. A stack of
    ``n_layers`` layers adds ``2 n_layers`` such branches (three per decoder
    layer with cross-attention; the factor is the usual one all the same),
    so without the scale the stream's variance grows with depth at
    initialisation; with it, it stays about constant.

    Source: Radford et al. (2019), GPT-2, section 2.3 ("scale the weights of
    residual layers at initialization by a factor of 1/sqrt(N) where N is the
    number of residual layers").
    """
    factor = 1.0 / math.sqrt(2 * n_layers)
    for layer in layers:
        for branch in (getattr(layer, "self_attn", None), getattr(layer, "cross_attn", None)):
            if branch is not None:
                branch.out_proj.weight.mul_(factor)
        layer.ffn.linear2.weight.mul_(factor)


class EncoderLayer(nn.Module):
    """Self-attention then the feed-forward network, each wrapped in Add & Norm.

    Args:
        d_model, n_heads, d_ff: sizes (paper base: 512, 8, 2048).
        dropout: residual, attention and FFN-inner dropout (paper: 0.1).
        activation: ``"relu"`` or ``"gelu"``.
        norm_first: Pre-LN if true, Post-LN (paper) if false.
        eps: LayerNorm epsilon.
        fused_qkv: see :class:`course_lib.attention.MultiHeadAttention`.
        norm, bias, n_kv_heads, rotary, alibi: keyword-only switches of today's
            block (Part V, in preparation), off by default: ``norm="rms"``
            (:class:`course_lib.normalization.RMSNorm`), ``bias=False`` (no
            biases in the projections, the FFN and LayerNorm), ``n_kv_heads``
            (grouped-query attention), ``rotary`` (RoPE) and ``alibi``, as
            :class:`course_lib.attention.MultiHeadAttention`; ``activation="swiglu"``
            gates the FFN (:class:`course_lib.feedforward.PositionwiseFeedForward`).

    Used alone, with a causal ``src_mask``, this layer is the block of a
    decoder-only language model (GPT, Llama): self-attention and the FFN,
    no cross-attention (:class:`course_lib.language_model.LanguageModel`).

    Submodules (by role): ``self_attn`` and its Add & Norm ``self_attn_sublayer``;
    ``ffn`` and its Add & Norm ``ffn_sublayer``.

    Shapes:
        ``x``: ``(batch, src_len, d_model)``; ``src_mask`` (keyword-only): bool,
        ``True`` = may attend, broadcastable to ``(batch, n_heads, src_len, src_len)``
        (usually ``padding_mask(src, pad_id)`` of shape ``(batch, 1, 1, src_len)``).
        Returns ``(batch, src_len, d_model)``. With ``cache`` (a
        :class:`course_lib.attention.KVCache`, keyword-only; decoder-only
        models), ``x`` holds only the new positions and ``src_mask`` must
        cover ``(new_len, cached_len + new_len)``.

    Raises:
        ValueError/TypeError: see :meth:`check_inputs`; sizes as ``MultiHeadAttention``.

    Source: Vaswani et al. (2017), section 3.1, figure 1 (left).
    Equivalent to :class:`torch.nn.TransformerEncoderLayer` with
    ``batch_first=True`` (tested with copied weights).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        eps: float = 1e-5,
        fused_qkv: bool = False,
        *,
        norm: str = "layer",
        bias: bool = True,
        n_kv_heads: int | None = None,
        rotary: RotaryEmbedding | None = None,
        alibi: bool = False,
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.self_attn = attention(
            d_model, n_heads, dropout, fused_qkv, bias=bias, n_kv_heads=n_kv_heads, rotary=rotary, alibi=alibi
        )
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout=dropout, activation=activation, bias=bias)
        self.self_attn_sublayer = ResidualSublayer(d_model, dropout, norm_first, eps, norm=norm, bias=bias)  # Add & Norm around each
        self.ffn_sublayer = ResidualSublayer(d_model, dropout, norm_first, eps, norm=norm, bias=bias)
        self._register_load_state_dict_pre_hook(rename_legacy_layer_keys, with_module=True)

    def check_inputs(self, x: Tensor, *, src_mask: Tensor | None = None, cache: KVCache | None = None) -> None:
        """Raise naming ``x`` (not ``(batch, src_len, d_model)`` float) or ``src_mask`` (not bool, does not broadcast)."""
        check_hidden_states(x, "x", self.d_model)
        self.self_attn.check_inputs(x, mask=src_mask, cache=cache, mask_name="src_mask")

    @checked_by(check_inputs)
    def forward(self, x: Tensor, *, src_mask: Tensor | None = None, cache: KVCache | None = None) -> Tensor:
        x = self.self_attn_sublayer(x, lambda y: self.self_attn(y, mask=src_mask, cache=cache))  # (batch, src_len, d_model)
        return self.ffn_sublayer(x, self.ffn)  # (batch, src_len, d_model)


class DecoderLayerCache:
    """The two KV caches of one decoder layer: self-attention and cross-attention.

    Attributes:
        self_attn: :class:`KVCache` that grows by one entry per decoded token.
        cross_attn: static :class:`KVCache` over the encoder memory.

    Source: chapter 10 (incremental decoding).
    """

    def __init__(self) -> None:
        self.self_attn = KVCache(static=False)
        self.cross_attn = KVCache(static=True)

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search); ``index`` is ``(new_batch,)`` long."""
        self.self_attn.reorder(index)
        self.cross_attn.reorder(index)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over ``memory``, then the FFN.

    Each of the three sublayers is wrapped in Add & Norm (:class:`ResidualSublayer`).

    Args:
        d_model, n_heads, d_ff, dropout, activation, norm_first, eps, fused_qkv,
            norm, bias, n_kv_heads, rotary, alibi: as :class:`EncoderLayer` (RoPE
            and ALiBi act on the self-attention only; cross-attention compares
            positions of two different sequences).

    Submodules (by role): ``self_attn``/``self_attn_sublayer``,
    ``cross_attn``/``cross_attn_sublayer``, ``ffn``/``ffn_sublayer``.

    Shapes:
        ``x``: ``(batch, tgt_len, d_model)``; ``memory``: the encoder output
        ``(batch, src_len, d_model)``. Keyword-only: ``tgt_mask``: bool,
        broadcastable to ``(batch, n_heads, tgt_len, tgt_len)`` (causal AND
        target padding); ``memory_mask``: bool, broadcastable to ``(batch,
        n_heads, tgt_len, src_len)`` (usually the source padding mask
        ``(batch, 1, 1, src_len)``); ``True`` = may attend.
        Returns ``(batch, tgt_len, d_model)``.
        With ``cache`` (a :class:`DecoderLayerCache`), ``x`` holds only the new
        positions and ``tgt_mask`` must cover ``(new_len, cached_len + new_len)``.

    Raises:
        ValueError/TypeError: see :meth:`check_inputs`.

    Source: Vaswani et al. (2017), section 3.1, figure 1 (right).
    Equivalent to :class:`torch.nn.TransformerDecoderLayer` with
    ``batch_first=True`` (tested with copied weights).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        eps: float = 1e-5,
        fused_qkv: bool = False,
        *,
        norm: str = "layer",
        bias: bool = True,
        n_kv_heads: int | None = None,
        rotary: RotaryEmbedding | None = None,
        alibi: bool = False,
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.self_attn = attention(
            d_model, n_heads, dropout, fused_qkv, bias=bias, n_kv_heads=n_kv_heads, rotary=rotary, alibi=alibi
        )
        self.cross_attn = attention(d_model, n_heads, dropout, fused_qkv, bias=bias, n_kv_heads=n_kv_heads)  # no RoPE across
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout=dropout, activation=activation, bias=bias)
        # the Add & Norm around each (built after the sublayers: the parameter order of older versions)
        self.self_attn_sublayer = ResidualSublayer(d_model, dropout, norm_first, eps, norm=norm, bias=bias)
        self.cross_attn_sublayer = ResidualSublayer(d_model, dropout, norm_first, eps, norm=norm, bias=bias)
        self.ffn_sublayer = ResidualSublayer(d_model, dropout, norm_first, eps, norm=norm, bias=bias)
        self._register_load_state_dict_pre_hook(rename_legacy_layer_keys, with_module=True)

    def check_inputs(
        self, x: Tensor, memory: Tensor, *, tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None, cache: DecoderLayerCache | None = None,
    ) -> None:
        """Raise naming ``x``, ``memory``, ``tgt_mask`` or ``memory_mask`` for inputs :meth:`forward` cannot take."""
        check_hidden_states(x, "x", self.d_model)
        check_hidden_states(memory, "memory", self.d_model)
        if x.size(0) != memory.size(0):
            raise ValueError(f"batch sizes differ: x has {x.size(0)}, memory has {memory.size(0)}")
        self_cache, cross_cache = (cache.self_attn, cache.cross_attn) if cache is not None else (None, None)
        self.self_attn.check_inputs(x, mask=tgt_mask, cache=self_cache, mask_name="tgt_mask")
        self.cross_attn.check_inputs(x, memory, mask=memory_mask, cache=cross_cache, mask_name="memory_mask")

    @checked_by(check_inputs)
    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        *,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: DecoderLayerCache | None = None,
    ) -> Tensor:
        self_cache, cross_cache = (cache.self_attn, cache.cross_attn) if cache is not None else (None, None)
        x = self.self_attn_sublayer(x, lambda y: self.self_attn(y, mask=tgt_mask, cache=self_cache))
        x = self.cross_attn_sublayer(x, lambda y: self.cross_attn(y, memory, memory, mask=memory_mask, cache=cross_cache))
        return self.ffn_sublayer(x, self.ffn)  # (batch, tgt_len, d_model)
