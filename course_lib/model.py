"""The full encoder–decoder Transformer (chapter 8).

Mask convention (see :mod:`course_lib.masks`): bool, ``True`` = may attend,
broadcastable to ``(batch, n_heads, q_len, k_len)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention
from .embedding import TokenEmbedding
from .layers import DecoderLayer, DecoderLayerCache, EncoderLayer
from .masks import causal_mask, check_mask, decoder_self_attention_mask, padding_mask
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, _check_positions

__all__ = ["TransformerConfig", "Encoder", "Decoder", "DecoderCache", "Transformer"]

_POSITIONAL = ("sinusoidal", "learned", "none")


@dataclass
class TransformerConfig:
    """Sizes and switches of a :class:`Transformer`; defaults are the paper's base model.

    Attributes:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (paper: a shared
            byte-pair vocabulary of about 37,000 tokens for English–German).
        d_model: model width (512).
        n_heads: attention heads (8); must divide ``d_model``.
        n_encoder_layers, n_decoder_layers: stack depths (6 + 6).
        d_ff: feed-forward inner width (2048).
        dropout: residual, embedding, attention and FFN dropout (0.1).
        activation: ``"relu"`` (paper) or ``"gelu"``.
        norm_first: ``False`` = Post-LN (paper); ``True`` = Pre-LN, with a
            final LayerNorm after each stack.
        max_len: the largest number of positions.
        positional: ``"sinusoidal"`` (paper), ``"learned"`` or ``"none"`` (for
            experiments that show why positions matter).
        share_embeddings: one embedding matrix for source and target (needs
            equal vocabulary sizes).
        tie_output: the output projection reuses the target embedding matrix.
        pad_id: id of ``<pad>`` used to build default masks, or ``None``.
        fused_qkv: fused QKV projections in every attention layer.
        eps: LayerNorm epsilon.

    Raises:
        ValueError: from ``__post_init__`` for inconsistent values (naming them).

    Source: Vaswani et al. (2017), table 3 (row "base") and section 3.4.
    """

    src_vocab_size: int = 37000
    tgt_vocab_size: int = 37000
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    activation: str = "relu"
    norm_first: bool = False
    max_len: int = 512
    positional: str = "sinusoidal"
    share_embeddings: bool = False
    tie_output: bool = False
    pad_id: int | None = 0
    fused_qkv: bool = False
    eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "n_encoder_layers",
                     "n_decoder_layers", "d_ff", "max_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an int; got {value!r}")
        if self.n_heads < 1:
            raise ValueError(f"n_heads must be positive; got {self.n_heads}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive; got {getattr(self, name)}")
        for name in ("n_encoder_layers", "n_decoder_layers"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0; got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1); got {self.dropout}")
        if self.positional not in _POSITIONAL:
            raise ValueError(f"positional must be one of {_POSITIONAL}; got {self.positional!r}")
        if self.pad_id is not None and not 0 <= self.pad_id < min(self.src_vocab_size, self.tgt_vocab_size):
            raise ValueError(
                f"pad_id must be None or lie in [0, {min(self.src_vocab_size, self.tgt_vocab_size)}); got {self.pad_id}"
            )
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                "share_embeddings needs src_vocab_size == tgt_vocab_size; "
                f"got {self.src_vocab_size} and {self.tgt_vocab_size}"
            )

    @classmethod
    def paper_base(cls, vocab_size: int = 37000, **overrides: Any) -> "TransformerConfig":
        """The base model of the paper: shared vocabulary, embeddings and output weights."""
        kwargs: dict[str, Any] = dict(
            src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, share_embeddings=True, tie_output=True
        )
        kwargs.update(overrides)
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (for checkpoints)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TransformerConfig":
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``."""
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown TransformerConfig fields: {sorted(unknown)}")
        return cls(**d)


def _positional(config: TransformerConfig) -> nn.Module:
    if config.positional == "sinusoidal":
        return SinusoidalPositionalEncoding(config.d_model, config.max_len, config.dropout)
    if config.positional == "learned":
        return LearnedPositionalEmbedding(config.d_model, config.max_len, config.dropout)
    return _NoPosition(config.d_model, config.max_len, config.dropout)


class _NoPosition(nn.Module):
    """Dropout only: the model sees no word order (chapter 3's experiment)."""

    def __init__(self, d_model: int, max_len: int, dropout: float) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        _check_positions(x, offset, self.max_len, self.d_model)
        return self.dropout(x)


def _check_tokens(tokens: Tensor, name: str) -> None:
    if not isinstance(tokens, Tensor) or tokens.dim() != 2:
        shape = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise ValueError(f"{name} must be token ids of shape (batch, seq_len); got {shape}")
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool or tokens.is_complex():
        raise ValueError(f"{name} must be an integer tensor of token ids; got dtype {tokens.dtype}")


def _check_length(length: int, offset: int, max_len: int, name: str) -> None:
    if length < 1:
        raise ValueError(f"{name} must hold at least one position; got length {length}")
    if offset + length > max_len:
        where = f"positions {offset}..{offset + length - 1}" if offset else f"{length} positions"
        raise ValueError(
            f"{name} has {where}, more than config.max_len={max_len}; "
            "use shorter sequences or a larger TransformerConfig.max_len"
        )


class Encoder(nn.Module):
    """Embedding + positions, ``n_encoder_layers`` :class:`EncoderLayer`, final norm in Pre-LN.

    Args:
        config: a :class:`TransformerConfig`.
        embedding: an existing :class:`TokenEmbedding` to use (weight sharing).

    Shapes:
        ``src``: ``(batch, src_len)`` long ids; ``src_mask``: bool, ``True`` =
        may attend, broadcastable to ``(batch, n_heads, src_len, src_len)``.
        Returns the ``memory``: ``(batch, src_len, d_model)``.

    Source: Vaswani et al. (2017), section 3.1.
    """

    def __init__(self, config: TransformerConfig, embedding: TokenEmbedding | None = None) -> None:
        super().__init__()
        c = config
        self.embedding = embedding or TokenEmbedding(c.src_vocab_size, c.d_model)
        self.positional = _positional(c)
        self.layers = nn.ModuleList(
            EncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, c.activation, c.norm_first, c.eps, c.fused_qkv)
            for _ in range(c.n_encoder_layers)
        )
        self.final_norm = nn.LayerNorm(c.d_model, eps=c.eps) if c.norm_first else nn.Identity()
        self.max_len = c.max_len

    def forward(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        _check_tokens(src, "src")
        self.embedding.check_ids(src, "src")
        _check_length(src.size(1), 0, self.max_len, "src")
        x = self.positional(self.embedding(src))
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.final_norm(x)


class DecoderCache:
    """One :class:`course_lib.layers.DecoderLayerCache` per decoder layer.

    ``length`` is the number of target positions already decoded;
    :meth:`reorder` selects batch rows (beam search).

    Source: chapter 10 (incremental decoding).
    """

    def __init__(self, n_layers: int) -> None:
        self.layers = [DecoderLayerCache() for _ in range(n_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].self_attn.length if self.layers else 0

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` (``(new_batch,)`` long) of every cached tensor."""
        for layer in self.layers:
            layer.reorder(index)


class Decoder(nn.Module):
    """Embedding + positions, ``n_decoder_layers`` :class:`DecoderLayer`, final norm in Pre-LN.

    Args:
        config: a :class:`TransformerConfig`.
        embedding: an existing :class:`TokenEmbedding` (shared with the encoder).

    Shapes:
        ``tgt``: ``(batch, tgt_len)`` long ids (with a cache: only the new
        positions); ``memory``: ``(batch, src_len, d_model)``; ``tgt_mask``:
        bool broadcastable to ``(batch, n_heads, tgt_len, cached_len + tgt_len)``;
        ``memory_mask``: bool broadcastable to ``(batch, n_heads, tgt_len, src_len)``.
        Returns hidden states ``(batch, tgt_len, d_model)``.

    Source: Vaswani et al. (2017), section 3.1.
    """

    def __init__(self, config: TransformerConfig, embedding: TokenEmbedding | None = None) -> None:
        super().__init__()
        c = config
        self.embedding = embedding or TokenEmbedding(c.tgt_vocab_size, c.d_model)
        self.positional = _positional(c)
        self.layers = nn.ModuleList(
            DecoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, c.activation, c.norm_first, c.eps, c.fused_qkv)
            for _ in range(c.n_decoder_layers)
        )
        self.final_norm = nn.LayerNorm(c.d_model, eps=c.eps) if c.norm_first else nn.Identity()
        self.max_len = c.max_len

    def new_cache(self) -> DecoderCache:
        """An empty :class:`DecoderCache` for incremental decoding."""
        return DecoderCache(len(self.layers))

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        _check_tokens(tgt, "tgt")
        self.embedding.check_ids(tgt, "tgt")
        offset = cache.length if cache is not None else 0
        _check_length(tgt.size(1), offset, self.max_len, "tgt")
        x = self.positional(self.embedding(tgt), offset=offset)
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, tgt_mask, memory_mask, cache.layers[i] if cache is not None else None)
        return self.final_norm(x)


class Transformer(nn.Module):
    """The encoder–decoder Transformer with an output projection to target logits.

    Args:
        config: a :class:`TransformerConfig` (default: the paper's base sizes).

    Methods (shapes batch-first; masks bool, ``True`` = may attend):
        ``encode(src, src_mask=None)``: ``(batch, src_len)`` ->
        ``memory`` ``(batch, src_len, d_model)``. Default ``src_mask``:
        ``padding_mask(src, config.pad_id)`` of shape ``(batch, 1, 1, src_len)``
        (none when ``pad_id`` is ``None``).

        ``decode(tgt, memory, src_mask=None, tgt_mask=None, cache=None)``:
        ``(batch, tgt_len)`` -> logits ``(batch, tgt_len, tgt_vocab_size)``.
        Default ``tgt_mask``: causal AND target padding; with a
        :class:`DecoderCache`, ``tgt`` holds only the new positions and the
        default mask lets them see every cached position and, among
        themselves, only earlier ones.

        ``forward(src, tgt, src_mask=None, tgt_mask=None)``: ``encode`` then
        ``decode``; logits ``(batch, tgt_len, tgt_vocab_size)``, float32.

    Raises:
        ValueError: ids not 2-D, mismatched batch sizes of ``src`` and ``tgt``,
            sequences longer than ``config.max_len``, or as the layers.

    Source: Vaswani et al. (2017), section 3 and figure 1; weight sharing:
    section 3.4.
    """

    def __init__(self, config: TransformerConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or TransformerConfig()
        self.encoder = Encoder(config)
        shared = self.encoder.embedding if config.share_embeddings else None
        self.decoder = Decoder(config, embedding=shared)
        self.generator = nn.Linear(config.d_model, config.tgt_vocab_size)
        nn.init.xavier_uniform_(self.generator.weight)
        nn.init.zeros_(self.generator.bias)
        if config.tie_output:
            self.generator.weight = self.decoder.embedding.weight

    def source_mask(self, src: Tensor) -> Tensor | None:
        """Default source mask: ``(batch, 1, 1, src_len)`` or ``None`` without ``pad_id``."""
        return None if self.config.pad_id is None else padding_mask(src, self.config.pad_id)

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Encode ``src`` ``(batch, src_len)`` into ``memory`` ``(batch, src_len, d_model)``.

        ``src_mask``: bool, ``True`` = may attend, broadcastable to
        ``(batch, n_heads, src_len, src_len)``; default: the padding mask of
        ``src`` (``(batch, 1, 1, src_len)``). Raises ``ValueError``/``TypeError``
        naming ``src`` or ``src_mask`` for bad input. Source: section 3.1.
        """
        _check_tokens(src, "src")
        if src_mask is None:
            src_mask = self.source_mask(src)
        check_mask(src_mask, (src.size(0), self.config.n_heads, src.size(1), src.size(1)), "src_mask")
        return self.encoder(src, src_mask)

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        """Decoder pass and output projection: logits ``(batch, tgt_len, tgt_vocab_size)``.

        Args:
            tgt: ``(batch, tgt_len)`` ids (with a ``cache``: only the new positions).
            memory: the encoder output ``(batch, src_len, d_model)``.
            src_mask: bool, broadcastable to ``(batch, n_heads, tgt_len,
                src_len)``: which source positions cross-attention may read
                (usually the source padding mask ``(batch, 1, 1, src_len)``).
            tgt_mask: bool, broadcastable to ``(batch, n_heads, tgt_len,
                cached_len + tgt_len)``; default causal AND target padding.
            cache: a :class:`DecoderCache` for incremental decoding (chapter 10).

        Raises:
            ValueError/TypeError naming ``tgt``, ``memory``, ``src_mask`` or
            ``tgt_mask``. Source: section 3.1 and 3.2.3.
        """
        _check_tokens(tgt, "tgt")
        if tgt.size(1) < 1:
            raise ValueError(f"tgt must hold at least one position; got shape {tuple(tgt.shape)}")
        if tgt.size(0) != memory.size(0):
            raise ValueError(f"batch sizes differ: tgt has {tgt.size(0)}, memory has {memory.size(0)}")
        past = cache.length if cache is not None else 0
        check_mask(src_mask, (tgt.size(0), self.config.n_heads, tgt.size(1), memory.size(1)), "src_mask")
        check_mask(tgt_mask, (tgt.size(0), self.config.n_heads, tgt.size(1), past + tgt.size(1)), "tgt_mask")
        if tgt_mask is None:
            if cache is None or cache.length == 0:
                tgt_mask = decoder_self_attention_mask(tgt, self.config.pad_id)
            else:
                past, new = cache.length, tgt.size(1)
                tgt_mask = causal_mask(past + new, device=tgt.device)[:, :, past:, :]
        hidden = self.decoder(tgt, memory, tgt_mask, src_mask, cache)
        return self.generator(hidden)

    def forward(
        self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None
    ) -> Tensor:
        """``encode`` then ``decode``: logits ``(batch, tgt_len, tgt_vocab_size)``.

        ``src`` ``(batch, src_len)`` and ``tgt`` ``(batch, tgt_len)`` are
        integer ids (``tgt`` is the shifted-right decoder input); the masks
        follow the course convention (bool, ``True`` = may attend) and default
        to the padding mask of ``src`` and causal AND padding for ``tgt``.
        Raises ``ValueError``/``TypeError`` naming the bad argument.
        Source: Vaswani et al. (2017), section 3, figure 1.
        """
        _check_tokens(src, "src")
        _check_tokens(tgt, "tgt")
        if src.size(0) != tgt.size(0):
            raise ValueError(f"batch sizes differ: src has {src.size(0)}, tgt has {tgt.size(0)}")
        memory = self.encode(src, src_mask)
        if src_mask is None:
            src_mask = self.source_mask(src)
        return self.decode(tgt, memory, src_mask, tgt_mask)

    def new_cache(self) -> DecoderCache:
        """An empty :class:`DecoderCache` for :meth:`decode` step by step."""
        return self.decoder.new_cache()

    def record_attention(self, enabled: bool = True) -> None:
        """Make every attention layer keep its last weights in ``.last_weights``.

        Each :class:`MultiHeadAttention` then stores ``(batch, n_heads, q_len,
        k_len)`` weights after every forward pass (for plots, chapter 10).
        """
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                module.record_weights = enabled
                if not enabled:
                    module.last_weights = None

    def num_parameters(self) -> int:
        """Number of distinct trainable parameters (shared weights counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

