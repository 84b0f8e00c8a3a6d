"""Scaled dot-product attention and multi-head attention (chapters 4 and 5).

Mask convention (see :mod:`course_lib.masks`): a bool tensor, ``True`` = may
attend, broadcastable to ``(batch, n_heads, q_len, k_len)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masks import check_mask
from .positional import RotaryEmbedding, alibi_bias, alibi_slopes
from .validation import check_float_input, check_hidden_states, check_probability, checked_by

__all__ = [
    "check_attention_inputs", "scaled_dot_product_attention", "MultiHeadAttention", "KVCache", "PROJECTION_ROLES",
    "check_kv_heads", "share_kv_heads",
]

PROJECTION_ROLES = ("query", "key", "value")
"""The three input projections of :class:`MultiHeadAttention`, in the row order of a fused QKV weight."""


def check_attention_inputs(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0, *, scale: float | None = None,
    score_bias: Tensor | None = None,
) -> None:
    """Raise for arguments :func:`scaled_dot_product_attention` cannot take, naming them.

    Raises:
        ValueError: fewer than 2 dims, mismatched ``d_k`` of ``q`` and ``k``,
            different numbers of keys and values, mismatched leading
            (batch/head) dimensions, ``d_k == 0`` without a ``scale``, a mask
            that does not broadcast to the scores, or ``dropout_p`` outside ``[0, 1)``.
        TypeError: a mask that is not ``torch.bool``.
    """
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(
            f"q, k, v need at least 2 dims (..., seq_len, d); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.size(-1) != k.size(-1):
        raise ValueError(f"q and k must share d_k (last dim); got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if k.size(-2) != v.size(-2):
        raise ValueError(f"k and v must have the same number of keys (dim -2); got k {tuple(k.shape)} and v {tuple(v.shape)}")
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            f"q, k, v must share their leading (batch, heads) dims; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1); got {dropout_p}")
    if q.size(-1) == 0 and scale is None:
        raise ValueError(f"q and k must have d_k >= 1 (last dim); got q {tuple(q.shape)}")
    check_mask(mask, (*q.shape[:-1], k.size(-2)), "mask")  # the scores: (..., q_len, k_len)
    if score_bias is not None:
        try:
            torch.broadcast_shapes(score_bias.shape, (*q.shape[:-1], k.size(-2)))
        except RuntimeError:
            raise ValueError(f"score_bias {tuple(score_bias.shape)} does not broadcast to the scores {(*q.shape[:-1], k.size(-2))}") from None


@checked_by(check_attention_inputs)
def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    *,
    scale: float | None = None,
    score_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``softmax(q k^T / sqrt(d_k)) v``, written out by hand.

    Args:
        q: queries, shape ``(..., q_len, d_k)``; ``...`` is usually
            ``(batch, n_heads)`` or ``(batch,)``.
        k: keys, shape ``(..., k_len, d_k)`` with the same leading dims as ``q``.
        v: values, shape ``(..., k_len, d_v)``.
        mask: optional bool tensor broadcastable to ``(..., q_len, k_len)``;
            ``True`` = may attend (the course's convention, the same as
            :func:`torch.nn.functional.scaled_dot_product_attention`).
        dropout_p: dropout probability applied to the attention weights
            (applied whenever ``dropout_p > 0``; pass ``0.0`` at evaluation).
        scale: multiplier of the scores; default ``1 / sqrt(d_k)``.
        score_bias: keyword-only; a float tensor added to the scaled scores,
            broadcastable to ``(..., q_len, k_len)`` (ALiBi, Press et al., 2022).

    Returns:
        ``(output, weights)``: ``output`` of shape ``(..., q_len, d_v)`` and the
        attention ``weights`` of shape ``(..., q_len, k_len)`` (before dropout,
        rows sum to 1). Both have ``q``'s dtype.

    Masked entries get the most negative finite value of the dtype (not -1e9,
    which overflows float16, and not -inf, which turns a fully masked row into
    NaN); after the softmax the masked weights are set to exactly zero. So a
    query row with no allowed key gets zero weights, a zero output and finite
    (zero) gradients.

    Raises:
        ValueError/TypeError: see :func:`check_attention_inputs`, which checks
            the arguments before the body runs (once, at the outermost checked call).

    Source: Vaswani et al. (2017), section 3.2.1, equation (1).
    """
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (..., q_len, k_len)
    if score_bias is not None:  # ALiBi: a penalty growing with distance (off by default)
        scores = scores + score_bias.to(scores.dtype)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)  # (..., q_len, k_len), rows sum to 1
    if mask is not None:
        # A fully masked row had a uniform softmax over equal (minimal) scores;
        # zero every blocked entry so such rows attend to nothing.
        weights = weights.masked_fill(~mask, 0.0)
    attn = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    return torch.matmul(attn, v), weights  # (..., q_len, d_v), (..., q_len, k_len)


def check_kv_heads(n_kv_heads: int, n_heads: int) -> None:
    """Raise ``ValueError`` unless ``n_kv_heads`` is a positive int dividing ``n_heads``."""
    if not isinstance(n_kv_heads, int) or n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ValueError(
            f"n_kv_heads must be a positive divisor of n_heads={n_heads} (each key/value head serves "
            f"n_heads / n_kv_heads query heads); got {n_kv_heads!r}"
        )


@dataclass
class KVCache:
    """Keys and values of one attention layer, kept between decoding steps.

    Attributes:
        key: ``(batch, n_kv_heads, cached_len, d_k)`` or ``None`` before the
            first step (``n_kv_heads = n_heads`` unless the attention is
            grouped-query: the cache holds the shared heads once).
        value: ``(batch, n_kv_heads, cached_len, d_k)`` or ``None``.
        static: ``False`` for decoder self-attention (each step appends the new
            position's key and value); ``True`` for cross-attention (the keys and
            values of the encoder ``memory`` are computed once and reused).

    Source: chapter 10 (incremental decoding); not in the paper.
    """

    key: Tensor | None = None
    value: Tensor | None = None
    static: bool = False

    @property
    def length(self) -> int:
        """Number of cached positions (0 when empty)."""
        return 0 if self.key is None else self.key.size(-2)

    def reorder(self, index: Tensor) -> None:
        """Select batch rows in place (beam search): ``key = key[index]``.

        Args:
            index: long tensor of shape ``(new_batch,)`` with row indices.
        """
        if self.key is not None:
            self.key = self.key.index_select(0, index)
            self.value = self.value.index_select(0, index)


def share_kv_heads(x: Tensor, n_heads: int) -> Tensor:
    """Repeat the key/value heads for grouped-query attention: ``(batch, n_kv_heads, len, d_k)`` -> ``(batch, n_heads, len, d_k)``.

    Query head ``h`` reads key/value head ``h // (n_heads // n_kv_heads)``:
    consecutive query heads form a group that shares one key and one value
    (as :func:`torch.nn.functional.scaled_dot_product_attention` with
    ``enable_gqa=True`` and Hugging Face's ``repeat_kv``). Returns ``x``
    itself when there is nothing to share (multi-head attention).

    Source: Ainslie et al. (2023), "GQA", section 2.2; Shazeer (2019),
    "Fast Transformer Decoding" (multi-query: one shared head).
    """
    n_rep = n_heads // x.size(1)
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)  # (batch, n_heads, len, d_k)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with optional fused QKV projection and a KV cache.

    ``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_O`` with
    ``head_i = Attention(Q W_Q_i, K W_K_i, V W_V_i)``; every head has width
    ``d_k = d_model // n_heads``.

    Args:
        d_model: model width.
        n_heads: number of heads; must divide ``d_model``.
        dropout_p: dropout probability on the attention weights (paper: the
            same rate as elsewhere; PyTorch's layers apply it here too).
        bias: whether the projections have biases.
        fused_qkv: use one ``(3 d_model, d_model)`` projection for Q, K and V
            (one matmul for self-attention). Gives exactly the results of three
            separate projections holding the same weights. For cross-attention
            the fused weight is sliced.
        n_kv_heads: keyword-only; the number of key/value heads (default
            ``n_heads``: multi-head attention). Fewer, dividing ``n_heads``:
            grouped-query attention (the key and value projections, and the
            KV cache, shrink by ``n_heads / n_kv_heads``); 1: multi-query.
        rotary: keyword-only; a :class:`course_lib.positional.RotaryEmbedding`
            that turns the queries and keys by their positions (RoPE), or
            ``None`` (the paper: positions are added to the embeddings).
        alibi: keyword-only; add ALiBi's distance penalty ``-slope_h |i - j|``
            to every head's scores (:func:`course_lib.positional.alibi_bias`).

    Shapes (batch first):
        ``query``: ``(batch, q_len, d_model)``; ``key``/``value``:
        ``(batch, k_len, d_model)`` (default: ``query``, i.e. self-attention);
        ``mask`` (keyword-only): bool, ``True`` = may attend, broadcastable to
        ``(batch, n_heads, q_len, k_len)``.
        Returns ``output`` ``(batch, q_len, d_model)``.

    Attention weights: set ``record_weights = True`` on the module (or call
    :meth:`course_lib.model.Transformer.record_attention`); every forward pass
    then keeps its weights, detached, in ``last_weights``
    ``(batch, n_heads, q_len, k_len)``. This is the one way to read them.

    KV cache: pass a :class:`KVCache`. With ``static=False`` the projected keys
    and values of the new positions are appended to the cache (decoder
    self-attention, one or more new tokens per step); with ``static=True`` they
    are computed from ``key``/``value`` on the first call and reused afterwards
    (cross-attention over the encoder memory). The results equal recomputing
    attention over the whole prefix.

    Raises:
        ValueError: ``d_model % n_heads != 0`` (naming both numbers); inputs
            whose last dim is not ``d_model``; mismatched batch sizes.

    Source: Vaswani et al. (2017), section 3.2.2 and figure 2.
    """

    def __init__(
        self, d_model: int, n_heads: int, dropout_p: float = 0.0, bias: bool = True, fused_qkv: bool = False, *,
        n_kv_heads: int | None = None, rotary: RotaryEmbedding | None = None, alibi: bool = False,
    ) -> None:
        super().__init__()
        check_probability(dropout_p, "dropout_p")
        if n_heads < 1 or d_model < 1 or d_model % n_heads != 0:
            raise ValueError(
                f"d_model={d_model} must be a positive multiple of n_heads={n_heads} "
                f"(each head gets d_k = d_model / n_heads)"
            )
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        check_kv_heads(n_kv_heads, n_heads)
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.d_k = d_model // n_heads
        self.kv_dim = n_kv_heads * self.d_k  # width of the key and value projections
        self.dropout_p = dropout_p
        self.fused_qkv = fused_qkv
        self.rotary = rotary
        if alibi:
            self.register_buffer("alibi_slopes", alibi_slopes(n_heads), persistent=False)  # (n_heads,)
        else:
            self.alibi_slopes = None
        if fused_qkv:
            self.qkv_proj = nn.Linear(d_model, d_model + 2 * self.kv_dim, bias=bias)
        else:
            self.q_proj = nn.Linear(d_model, d_model, bias=bias)
            self.k_proj = nn.Linear(d_model, self.kv_dim, bias=bias)
            self.v_proj = nn.Linear(d_model, self.kv_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.record_weights = False
        self.last_weights: Tensor | None = None
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        for lin in self._linears():
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)

    def _linears(self) -> list[nn.Linear]:
        if self.fused_qkv:
            return [self.qkv_proj, self.out_proj]
        return [self.q_proj, self.k_proj, self.v_proj, self.out_proj]

    # -- projections -------------------------------------------------------
    def project(self, x: Tensor, role: str) -> Tensor:
        """Project ``x`` ``(batch, seq_len, d_model)`` with W_Q (``role="query"``), W_K (``"key"``) or W_V (``"value"``).

        With ``fused_qkv`` the rows of the fused weight that belong to that
        projection are used (query rows first, then key, then value).
        """
        if role not in PROJECTION_ROLES:  # a tuple lookup: this runs three times per attention call
            raise ValueError(f"role must be one of {PROJECTION_ROLES}; got {role!r}")
        i = PROJECTION_ROLES.index(role)
        if not self.fused_qkv:
            return (self.q_proj, self.k_proj, self.v_proj)[i](x)
        start = (0, self.d_model, self.d_model + self.kv_dim)[i]  # the fused rows: query, key, value
        rows = slice(start, start + (self.d_model if i == 0 else self.kv_dim))
        bias = None if self.qkv_proj.bias is None else self.qkv_proj.bias[rows]
        return F.linear(x, self.qkv_proj.weight[rows], bias)

    def project_qkv(
        self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(query W_Q, key W_K, value W_V)``, each ``(batch, len, d_model)`` (heads not split yet).

        ``key`` defaults to ``query`` and ``value`` to ``key``. With
        ``fused_qkv`` and self-attention (``key`` and ``value`` omitted) the
        three projections are one matrix product with the ``(3 d_model,
        d_model)`` weight, chunked into three.
        """
        if self.fused_qkv and key is None and value is None:
            q, k, v = self.qkv_proj(query).split([self.d_model, self.kv_dim, self.kv_dim], dim=-1)
            return q, k, v
        key = query if key is None else key
        value = key if value is None else value
        return self.project(query, "query"), self.project(key, "key"), self.project(value, "value")

    def project_with_cache(
        self, query: Tensor, key: Tensor | None, value: Tensor | None, cache: KVCache
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Queries ``(batch, n_heads, len, d_k)``, keys and values ``(batch, n_kv_heads, len, d_k)``, using ``cache``.

        * ``cache.static`` (cross-attention over the encoder memory): the keys
          and values are projected on the first call, stored, and reused
          afterwards (``key``/``value`` are then ignored); only the queries
          are projected.
        * otherwise (decoder self-attention): the keys and values of the new
          positions are appended to the cached ones along the length axis,
          so the queries attend to every position decoded so far. With RoPE
          the new queries and keys are turned first, from position
          ``cache.length`` on (the cached keys are stored turned).

        Source: chapter 10 (incremental decoding).
        """
        if cache.static and cache.key is not None:
            return self.split_heads(self.project(query, "query")), cache.key, cache.value
        q, k, v = (self.split_heads(t) for t in self.project_qkv(query, key, value))
        q, k = self.rotate(q, k, offset=cache.length)
        if not cache.static and cache.key is not None:
            k = torch.cat([cache.key, k], dim=2)
            v = torch.cat([cache.value, v], dim=2)
        cache.key, cache.value = k, v
        return q, k, v

    def split_heads(self, x: Tensor) -> Tensor:
        """``(batch, seq_len, n * d_k)`` -> ``(batch, n, seq_len, d_k)``: ``n`` is ``n_heads`` (or ``n_kv_heads`` for keys and values).

        A ``view`` to ``(batch, seq_len, n_heads, d_k)`` then a ``transpose``:
        reshaping straight to ``(batch, n_heads, seq_len, d_k)`` would mix
        positions into heads (chapter 5 shows the wrong result).
        """
        batch, seq_len, _ = x.shape
        return x.view(batch, seq_len, -1, self.d_k).transpose(1, 2)

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """RoPE on queries and keys split into heads, from position ``offset``; unchanged without ``rotary``."""
        return (q, k) if self.rotary is None else self.rotary(q, k, offset)

    def merge_heads(self, x: Tensor) -> Tensor:
        """``(batch, n_heads, seq_len, d_k)`` -> ``(batch, seq_len, d_model)``."""
        batch, _, seq_len, _ = x.shape
        return x.transpose(1, 2).contiguous().view(batch, seq_len, self.d_model)

    # -- forward -------------------------------------------------------------
    def check_inputs(
        self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None, *,
        mask: Tensor | None = None, cache: KVCache | None = None, mask_name: str = "mask",
    ) -> None:
        """Raise for inputs :meth:`forward` cannot take, naming ``query``, ``key``, ``value`` or the mask.

        ``mask_name`` is the name the caller knows the mask by (a layer passes
        ``"src_mask"``, ``"tgt_mask"`` or ``"memory_mask"``).

        Raises:
            ValueError: a shape other than ``(batch, seq_len, d_model)``,
                mismatched batch sizes, keys and values of different lengths,
                or a mask that does not broadcast to ``(batch, n_heads, q_len, k_len)``.
            TypeError: an input that is not floating point, or whose dtype
                differs from the weights' outside ``torch.autocast``; a mask
                that is not ``torch.bool``.
        """
        key = query if key is None else key
        value = key if value is None else value
        for name, t in (("query", query), ("key", key), ("value", value)):
            check_hidden_states(t, name, self.d_model)
        if not (query.size(0) == key.size(0) == value.size(0)):
            raise ValueError(f"batch sizes differ: query {query.size(0)}, key {key.size(0)}, value {value.size(0)}")
        if key.size(1) != value.size(1):
            raise ValueError(f"key and value must have the same length; got {key.size(1)} and {value.size(1)}")
        weight = self.qkv_proj.weight if self.fused_qkv else self.q_proj.weight
        for name, t in (("query", query), ("key", key), ("value", value)):
            check_float_input(t, weight, name, "MultiHeadAttention")
        check_mask(mask, (query.size(0), self.n_heads, query.size(1), self.keys_after(key, cache)), mask_name)

    @staticmethod
    def keys_after(key: Tensor, cache: KVCache | None) -> int:
        """How many keys the queries see: ``key``'s length, with a cache the cached ones too."""
        if cache is None:
            return key.size(1)
        if cache.static:
            return cache.length or key.size(1)
        return cache.length + key.size(1)

    @checked_by(check_inputs)
    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Attend from ``query`` to ``key``/``value`` (self-attention when both are omitted).

        Args:
            query: ``(batch, q_len, d_model)``.
            key: ``(batch, k_len, d_model)``; default ``query``.
            value: ``(batch, k_len, d_model)``; default ``key``.
            mask: bool, ``True`` = may attend, broadcastable to
                ``(batch, n_heads, q_len, k_len)`` (with a cache, ``k_len``
                counts the cached positions too).
            cache: optional :class:`KVCache` (:meth:`project_with_cache`, chapter 10).

        Returns:
            ``(batch, q_len, d_model)``. With ``record_weights`` set, the
            weights ``(batch, n_heads, q_len, k_len)`` are kept in ``last_weights``.

        Raises:
            ValueError/TypeError: see :meth:`check_inputs`.
        """
        if cache is None:
            q, k, v = (self.split_heads(t) for t in self.project_qkv(query, key, value))  # q (batch, n_heads, len, d_k)
            q, k = self.rotate(q, k)  # RoPE: rotate q and k by their positions; no-op when off
        else:  # incremental decoding (chapter 10)
            q, k, v = self.project_with_cache(query, key, value, cache)
        k, v = share_kv_heads(k, self.n_heads), share_kv_heads(v, self.n_heads)  # (batch, n_heads, k_len, d_k)
        dropout_p = self.dropout_p if self.training else 0.0
        # ALiBi: a score bias (n_heads, q_len, k_len); without it, the call of chapter 5 unchanged
        alibi = {} if self.alibi_slopes is None else {"score_bias": alibi_bias(self.alibi_slopes, q.size(2), k.size(2))}
        out, weights = scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=dropout_p, **alibi)  # (batch, n_heads, q_len, d_k)
        if self.record_weights:
            self.last_weights = weights.detach()  # (batch, n_heads, q_len, k_len)
        return self.out_proj(self.merge_heads(out))  # (batch, q_len, d_model)

    def extra_repr(self) -> str:
        kv = f", n_kv_heads={self.n_kv_heads}" if self.n_kv_heads != self.n_heads else ""
        return f"d_model={self.d_model}, n_heads={self.n_heads}{kv}, d_k={self.d_k}, fused_qkv={self.fused_qkv}"
