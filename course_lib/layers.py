"""Add & Norm, the encoder layer and the decoder layer (chapter 7).

Mask convention (see :mod:`course_lib.masks`): bool, ``True`` = may attend,
broadcastable to ``(batch, n_heads, q_len, k_len)``.
"""

from __future__ import annotations

from typing import Callable

from torch import Tensor, nn

from .attention import KVCache, MultiHeadAttention
from .feedforward import PositionwiseFeedForward
from .validation import check_hidden_states

__all__ = ["ResidualSublayer", "TransformerLayer", "EncoderLayer", "DecoderLayer", "DecoderLayerCache"]


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

    Shapes:
        ``x``: ``(batch, seq_len, d_model)``; ``sublayer`` maps that shape to
        itself. Returns ``(batch, seq_len, d_model)``.

    Source: Vaswani et al. (2017), section 3.1 ("LayerNorm(x + Sublayer(x))")
    and 5.4 (residual dropout); Pre-LN: Xiong et al. (2020), "On Layer
    Normalization in the Transformer Architecture".
    """

    def __init__(self, d_model: int, dropout: float = 0.1, norm_first: bool = False, eps: float = 1e-5) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"


class TransformerLayer(nn.Module):
    """The parts of :class:`EncoderLayer` and :class:`DecoderLayer`, built once for both.

    Self-attention, cross-attention over the encoder output (decoder only:
    ``cross_attention = True``), the position-wise feed-forward network, and
    one Add & Norm (:class:`ResidualSublayer`) around each of these sublayers.

    Args:
        d_model, n_heads, d_ff: sizes (paper base: 512, 8, 2048).
        dropout: residual, attention and FFN-inner dropout (paper: 0.1).
        activation: ``"relu"`` or ``"gelu"``.
        norm_first: Pre-LN if true, Post-LN (paper) if false.
        eps: LayerNorm epsilon.
        fused_qkv: see :class:`course_lib.attention.MultiHeadAttention`.

    Raises:
        ValueError: as :class:`MultiHeadAttention` and :class:`PositionwiseFeedForward`.
    """

    cross_attention = False  # DecoderLayer: True

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
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout_p=dropout, fused_qkv=fused_qkv)
        if self.cross_attention:
            self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout_p=dropout, fused_qkv=fused_qkv)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        # one Add & Norm per sublayer: the encoder has 2, the decoder 3 (the last is around the FFN)
        self.sublayer1 = ResidualSublayer(d_model, dropout, norm_first, eps)
        self.sublayer2 = ResidualSublayer(d_model, dropout, norm_first, eps)
        if self.cross_attention:
            self.sublayer3 = ResidualSublayer(d_model, dropout, norm_first, eps)


class EncoderLayer(TransformerLayer):
    """Self-attention then the feed-forward network, each wrapped in Add & Norm.

    Args:
        d_model, n_heads, d_ff, dropout, activation, norm_first, eps, fused_qkv:
            as :class:`TransformerLayer`, which builds the sublayers.

    Shapes:
        ``x``: ``(batch, src_len, d_model)``; ``src_mask``: bool, ``True`` =
        may attend, broadcastable to ``(batch, n_heads, src_len, src_len)``
        (usually ``padding_mask(src, pad_id)`` of shape ``(batch, 1, 1, src_len)``).
        Returns ``(batch, src_len, d_model)``.

    Raises:
        ValueError: ``x`` of the wrong shape, or as ``MultiHeadAttention``.

    Source: Vaswani et al. (2017), section 3.1, figure 1 (left).
    Equivalent to :class:`torch.nn.TransformerEncoderLayer` with
    ``batch_first=True`` (tested with copied weights).
    """

    def forward(self, x: Tensor, src_mask: Tensor | None = None) -> Tensor:
        check_hidden_states(x, "x", self.d_model)
        x = self.sublayer1(x, lambda y: self.self_attn(y, mask=src_mask)[0])
        return self.sublayer2(x, self.feed_forward)


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


class DecoderLayer(TransformerLayer):
    """Masked self-attention, cross-attention over ``memory``, then the FFN.

    Each of the three sublayers is wrapped in Add & Norm
    (:class:`ResidualSublayer`). The constructor is :class:`TransformerLayer`'s
    (same arguments as :class:`EncoderLayer`), with ``cross_attention = True``.

    Shapes:
        ``x``: ``(batch, tgt_len, d_model)``; ``memory``: the encoder output
        ``(batch, src_len, d_model)``; ``tgt_mask``: bool, broadcastable to
        ``(batch, n_heads, tgt_len, tgt_len)`` (causal AND target padding);
        ``memory_mask``: bool, broadcastable to ``(batch, n_heads, tgt_len,
        src_len)`` (usually the source padding mask ``(batch, 1, 1, src_len)``);
        ``True`` = may attend. Returns ``(batch, tgt_len, d_model)``.
        With ``cache`` (a :class:`DecoderLayerCache`), ``x`` holds only the new
        positions and ``tgt_mask`` must cover ``(new_len, cached_len + new_len)``.

    Raises:
        ValueError: inputs of the wrong shape or batch size.

    Source: Vaswani et al. (2017), section 3.1, figure 1 (right).
    Equivalent to :class:`torch.nn.TransformerDecoderLayer` with
    ``batch_first=True`` (tested with copied weights).
    """

    cross_attention = True  # TransformerLayer also builds cross_attn and sublayer3

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: DecoderLayerCache | None = None,
    ) -> Tensor:
        check_hidden_states(x, "x", self.d_model)
        check_hidden_states(memory, "memory", self.d_model)
        if x.size(0) != memory.size(0):
            raise ValueError(f"batch sizes differ: x has {x.size(0)}, memory has {memory.size(0)}")
        self_cache = cache.self_attn if cache is not None else None
        cross_cache = cache.cross_attn if cache is not None else None
        x = self.sublayer1(x, lambda y: self.self_attn(y, mask=tgt_mask, cache=self_cache)[0])
        x = self.sublayer2(x, lambda y: self.cross_attn(y, memory, memory, mask=memory_mask, cache=cross_cache)[0])
        return self.sublayer3(x, self.feed_forward)
