"""The full encoder–decoder Transformer (chapter 8).

Mask convention (see :mod:`course_lib.masks`): bool, ``True`` = may attend,
broadcastable to ``(batch, n_heads, q_len, k_len)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from torch import Tensor, nn

from .attention import MultiHeadAttention
from .embedding import TokenEmbedding
from .attention import check_kv_heads
from .feedforward import ACTIVATIONS
from .layers import DecoderLayer, DecoderLayerCache, EncoderLayer, scale_residual_branches
from .normalization import NORMS, make_norm
from .masks import causal_mask, check_mask, decoder_self_attention_mask, padding_mask
from .positional import LearnedPositionalEmbedding, PositionalEncoding, RotaryEmbedding, SinusoidalPositionalEncoding
from .validation import check_choice, check_float_input, check_hidden_states, check_int, check_probability, checked_by, config_from_dict, inputs_already_checked

__all__ = [
    "TransformerConfig",
    "check_block_switches",
    "rotary_embedding",
    "positional_encoding",
    "LayerStack",
    "Encoder",
    "Decoder",
    "DecoderCache",
    "OLD_STATE_DICT_KEYS",
    "rename_old_state_dict_keys",
    "Transformer",
]

POSITIONAL = {
    "sinusoidal": SinusoidalPositionalEncoding, "learned": LearnedPositionalEmbedding, "none": PositionalEncoding,
    "rope": PositionalEncoding, "alibi": PositionalEncoding,
}
"""The positional layer of each ``TransformerConfig.positional`` setting (``"none"``: dropout only;
``"rope"`` and ``"alibi"``: dropout only, the positions act inside the self-attention:
the queries and keys turn (:func:`rotary_embedding`), or the scores get ALiBi's distance penalty)."""


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

    The switches of today's block (Part V of the book, in preparation), whose defaults keep the 2017 model:

    Attributes:
        norm: ``"layer"`` (paper) or ``"rms"`` (RMSNorm).
        n_kv_heads: key/value heads of every attention; ``None`` = ``n_heads``
            (multi-head); a divisor of ``n_heads`` = grouped-query; 1 = multi-query.
        bias: ``False`` = no biases in any linear layer or LayerNorm.
        scaled_residual_init: multiply each residual branch's last projection
            by ``1 / sqrt(2 N)``, ``N`` the layers of its stack (:func:`course_lib.layers.scale_residual_branches`).
        scale_embedding: multiply the embeddings by ``sqrt(d_model)`` (paper).
        rope_base: the wavelength base of ``positional="rope"`` (10000).
        (``positional="rope"`` or ``"alibi"`` and ``activation="swiglu"`` are the others.)

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
    norm: str = "layer"
    n_kv_heads: int | None = None
    bias: bool = True
    scaled_residual_init: bool = False
    scale_embedding: bool = True
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_len"):
            check_int(getattr(self, name), name)
        for name in ("n_encoder_layers", "n_decoder_layers"):
            check_int(getattr(self, name), name, 0)
        check_block_switches(self)
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
        return config_from_dict(cls, d)


def check_block_switches(config: Any) -> None:
    """Raise ``ValueError`` naming the field of ``config`` that the layers cannot take (sizes, dropout, switches)."""
    if config.d_model % config.n_heads != 0:
        raise ValueError(f"d_model={config.d_model} must be divisible by n_heads={config.n_heads}")
    check_probability(config.dropout, "dropout")
    check_choice(config.positional, "positional", tuple(POSITIONAL))
    check_choice(config.norm, "norm", NORMS)
    check_choice(config.activation, "activation", ACTIVATIONS)
    if config.n_kv_heads is not None:
        check_kv_heads(config.n_kv_heads, config.n_heads)
    if config.positional == "rope" and (config.d_model // config.n_heads) % 2:
        raise ValueError(f"positional='rope' needs an even head width d_model / n_heads; got {config.d_model // config.n_heads}")


def rotary_embedding(config: Any) -> RotaryEmbedding | None:
    """The :class:`RotaryEmbedding` shared by a stack's attentions when ``config.positional == "rope"``, else ``None``."""
    if config.positional != "rope":
        return None
    return RotaryEmbedding(config.d_model // config.n_heads, config.max_len, config.rope_base)


def positional_encoding(config: TransformerConfig) -> PositionalEncoding:
    """The positional layer that ``config.positional`` names (see :data:`POSITIONAL`)."""
    return POSITIONAL[config.positional](config.d_model, config.max_len, config.dropout)


class LayerStack(nn.Module):
    """What :class:`Encoder` and :class:`Decoder` share: embedding, positions, layers, final norm.

    Args:
        config: a :class:`TransformerConfig`.
        layer: :class:`EncoderLayer` or :class:`DecoderLayer`, built with the
            config's sizes ``n_layers`` times.
        n_layers: the depth of the stack.
        vocab_size: the size of the new embedding (when ``embedding`` is ``None``).
        embedding: an existing :class:`TokenEmbedding` to use (weight sharing).

    The final LayerNorm exists in Pre-LN only (``config.norm_first``): there
    the residual stream is never normalised inside the layers. The switches
    of today's block (``norm``, ``bias``, ``n_kv_heads``, ``positional="rope"``/``"alibi"``,
    ``scaled_residual_init``, ``scale_embedding``) are read from the config.
    """

    def __init__(
        self, config: TransformerConfig, layer: type, n_layers: int, vocab_size: int, embedding: TokenEmbedding | None = None
    ) -> None:
        super().__init__()
        c = config
        self.embedding = embedding or TokenEmbedding(vocab_size, c.d_model, scale=c.scale_embedding)
        self.positional = positional_encoding(c)
        switches = dict(  # today's block (off by default)
            norm=c.norm, bias=c.bias, n_kv_heads=c.n_kv_heads, rotary=rotary_embedding(c), alibi=c.positional == "alibi",
        )
        self.layers = nn.ModuleList(
            layer(c.d_model, c.n_heads, c.d_ff, c.dropout, c.activation, c.norm_first, c.eps, c.fused_qkv, **switches)
            for _ in range(n_layers)
        )
        if c.scaled_residual_init and n_layers:
            scale_residual_branches(self.layers, n_layers)
        self.final_norm = make_norm(c.norm, c.d_model, c.eps, c.bias) if c.norm_first else nn.Identity()
        self.max_len = c.max_len
        self.n_heads = c.n_heads

    def check_tokens(self, tokens: Tensor, name: str, offset: int = 0) -> None:
        """Raise ``ValueError`` naming ``name`` unless ``tokens`` fit the stack.

        ``tokens`` must be integer ids of shape ``(batch, seq_len)`` in the
        embedding's vocabulary, with ``1 <= seq_len`` and ``offset + seq_len
        <= max_len`` (``offset``: positions already decoded, with a cache).
        """
        self.embedding.check_ids(tokens, name, ndim=2)
        length = tokens.size(1)
        if length < 1:
            raise ValueError(f"{name} must hold at least one position; got shape {tuple(tokens.shape)}")
        if offset + length > self.max_len:
            where = f"positions {offset}..{offset + length - 1}" if offset else f"{length} positions"
            raise ValueError(
                f"{name} has {where}, more than config.max_len={self.max_len}; "
                "use shorter sequences or a larger TransformerConfig.max_len"
            )


class Encoder(LayerStack):
    """Embedding + positions, ``n_encoder_layers`` :class:`EncoderLayer`, final norm in Pre-LN.

    Args:
        config: a :class:`TransformerConfig`.
        embedding: an existing :class:`TokenEmbedding` to use (weight sharing).

    Shapes:
        ``src``: ``(batch, src_len)`` long ids; ``src_mask`` (keyword-only):
        bool, ``True`` = may attend, broadcastable to ``(batch, n_heads, src_len, src_len)``.
        Returns the ``memory``: ``(batch, src_len, d_model)``.

    Source: Vaswani et al. (2017), section 3.1.
    """

    def __init__(self, config: TransformerConfig, embedding: TokenEmbedding | None = None) -> None:
        super().__init__(config, EncoderLayer, config.n_encoder_layers, config.src_vocab_size, embedding)

    def check_inputs(self, src: Tensor, *, src_mask: Tensor | None = None) -> None:
        """Raise naming ``src`` for ids that do not fit (see :meth:`LayerStack.check_tokens`) or a bad ``src_mask``."""
        self.check_tokens(src, "src")
        check_mask(src_mask, (src.size(0), self.n_heads, src.size(1), src.size(1)), "src_mask")

    @checked_by(check_inputs)
    def forward(self, src: Tensor, *, src_mask: Tensor | None = None) -> Tensor:
        x = self.positional(self.embedding(src))  # (batch, src_len, d_model)
        for layer in self.layers:
            x = layer(x, src_mask=src_mask)
        return self.final_norm(x)  # memory: (batch, src_len, d_model)


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


class Decoder(LayerStack):
    """Embedding + positions, ``n_decoder_layers`` :class:`DecoderLayer`, final norm in Pre-LN.

    Args:
        config: a :class:`TransformerConfig`.
        embedding: an existing :class:`TokenEmbedding` (shared with the encoder).

    Shapes:
        ``tgt``: ``(batch, tgt_len)`` long ids (with a cache: only the new
        positions); ``memory``: ``(batch, src_len, d_model)``. Keyword-only:
        ``tgt_mask``: bool broadcastable to ``(batch, n_heads, tgt_len, cached_len + tgt_len)``;
        ``memory_mask``: bool broadcastable to ``(batch, n_heads, tgt_len, src_len)``.
        Returns hidden states ``(batch, tgt_len, d_model)``.

    Source: Vaswani et al. (2017), section 3.1.
    """

    def __init__(self, config: TransformerConfig, embedding: TokenEmbedding | None = None) -> None:
        super().__init__(config, DecoderLayer, config.n_decoder_layers, config.tgt_vocab_size, embedding)

    def new_cache(self) -> DecoderCache:
        """An empty :class:`DecoderCache` for incremental decoding."""
        return DecoderCache(len(self.layers))

    def check_inputs(self, tgt: Tensor, memory: Tensor, *, tgt_mask: Tensor | None = None,
                     memory_mask: Tensor | None = None, cache: DecoderCache | None = None) -> None:
        """Raise naming ``tgt``, ``memory``, ``tgt_mask`` or ``memory_mask`` for inputs :meth:`forward` cannot take."""
        self.check_tokens(tgt, "tgt", offset=cache.length if cache is not None else 0)
        check_memory_and_masks(self, tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, cache=cache)

    @checked_by(check_inputs)
    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        *,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        offset = cache.length if cache is not None else 0
        x = self.positional(self.embedding(tgt), offset=offset)  # (batch, tgt_len, d_model)
        for i, layer in enumerate(self.layers):
            layer_cache = cache.layers[i] if cache is not None else None
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, cache=layer_cache)
        return self.final_norm(x)  # (batch, tgt_len, d_model)


def check_memory_and_masks(decoder: Decoder, tgt: Tensor, memory: Tensor, *, tgt_mask: Tensor | None = None,
                           memory_mask: Tensor | None = None, cache: DecoderCache | None = None) -> None:
    """The checks of :meth:`Decoder.forward` and :meth:`Transformer.decode` after ``tgt``'s, naming the bad argument.

    ``tgt``: ids already checked (:meth:`LayerStack.check_tokens`); ``memory``: ``(batch,
    src_len, d_model)`` with ``tgt``'s batch size; the masks: bool and
    broadcastable to ``(batch, n_heads, tgt_len, cached_len + tgt_len)``
    (``tgt_mask``) and ``(batch, n_heads, tgt_len, src_len)`` (``memory_mask``).
    """
    past = cache.length if cache is not None else 0
    check_hidden_states(memory, "memory", decoder.embedding.weight.size(1))
    check_float_input(memory, decoder.embedding.weight, "memory", "the decoder")
    if tgt.size(0) != memory.size(0):
        raise ValueError(f"batch sizes differ: tgt has {tgt.size(0)}, memory has {memory.size(0)}")
    batch, n_heads, tgt_len = tgt.size(0), decoder.n_heads, tgt.size(1)
    check_mask(tgt_mask, (batch, n_heads, tgt_len, past + tgt_len), "tgt_mask")
    check_mask(memory_mask, (batch, n_heads, tgt_len, memory.size(1)), "memory_mask")


OLD_STATE_DICT_KEYS = {"generator.weight": "output_projection.weight", "generator.bias": "output_projection.bias"}
"""Keys of :class:`Transformer` state dicts saved by course_lib <= 0.2 and their names now."""


def rename_old_state_dict_keys(state_dict: dict, prefix: str, *args: Any) -> None:
    """Load-state-dict pre-hook of :class:`Transformer`: rename the keys of :data:`OLD_STATE_DICT_KEYS` in place.

    Lets ``load_state_dict`` read checkpoints (e.g. ``checkpoints/en-zh.pt``)
    saved when the output layer was called ``generator``; ``prefix`` is the
    Transformer's own prefix when it is loaded as a submodule.
    """
    for old, new in OLD_STATE_DICT_KEYS.items():
        if prefix + old in state_dict and prefix + new not in state_dict:
            state_dict[prefix + new] = state_dict.pop(prefix + old)


class Transformer(nn.Module):
    """The encoder–decoder Transformer with an output projection to target logits.

    Args:
        config: a :class:`TransformerConfig` (default: the paper's base sizes).

    Methods (shapes batch-first; masks bool, ``True`` = may attend):
        ``encode(src, *, src_mask=None)``: ``(batch, src_len)`` ->
        ``memory`` ``(batch, src_len, d_model)``. Default ``src_mask``:
        ``padding_mask(src, config.pad_id)`` of shape ``(batch, 1, 1, src_len)``
        (none when ``pad_id`` is ``None``).

        ``decode(tgt, memory, *, tgt_mask=None, memory_mask=None, cache=None)``:
        ``(batch, tgt_len)`` -> logits ``(batch, tgt_len, tgt_vocab_size)``.
        Default ``tgt_mask``: causal AND target padding; with a
        :class:`DecoderCache`, ``tgt`` holds only the new positions and the
        default mask lets them see every cached position and, among
        themselves, only earlier ones.

        ``forward(src, tgt, *, src_mask=None, tgt_mask=None)``: ``encode`` then
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
        self.output_projection = nn.Linear(config.d_model, config.tgt_vocab_size, bias=config.bias)
        nn.init.xavier_uniform_(self.output_projection.weight)
        if self.output_projection.bias is not None:
            nn.init.zeros_(self.output_projection.bias)
        if config.tie_output:
            self.output_projection.weight = self.decoder.embedding.weight
        # course_lib <= 0.2 called the output layer ``generator``: keep those checkpoints loading
        self._register_load_state_dict_pre_hook(rename_old_state_dict_keys)

    def source_mask(self, src: Tensor) -> Tensor | None:
        """Default source mask: ``(batch, 1, 1, src_len)`` or ``None`` without ``pad_id``."""
        return None if self.config.pad_id is None else padding_mask(src, self.config.pad_id)  # (batch, 1, 1, src_len)

    def target_mask(self, tgt: Tensor, cache: DecoderCache | None = None) -> Tensor:
        """Default mask of the decoder self-attention for ``tgt`` ``(batch, tgt_len)``.

        Causal AND target padding, ``(batch, 1, tgt_len, tgt_len)``. With a
        non-empty ``cache``, ``tgt`` holds only the new positions: the mask
        ``(1, 1, tgt_len, cached_len + tgt_len)`` lets them see every cached
        position and, among themselves, only earlier ones (chapter 10).
        """
        if cache is None or cache.length == 0:
            return decoder_self_attention_mask(tgt, self.config.pad_id)  # (batch, 1, tgt_len, tgt_len)
        past, new = cache.length, tgt.size(1)
        return causal_mask(past + new, device=tgt.device)[:, :, past:, :]  # (1, 1, new, past + new)

    def check_encode_inputs(self, src: Tensor, *, src_mask: Tensor | None = None) -> None:
        """Check the arguments of :meth:`encode`, raising ``ValueError``/``TypeError`` naming ``src`` or ``src_mask``."""
        self.encoder.check_tokens(src, "src")
        with inputs_already_checked():  # src is checked: its default mask need not check it again
            src_mask = self.source_mask(src) if src_mask is None else src_mask
        check_mask(src_mask, (src.size(0), self.config.n_heads, src.size(1), src.size(1)), "src_mask")

    @checked_by(check_encode_inputs)
    def encode(self, src: Tensor, *, src_mask: Tensor | None = None) -> Tensor:
        """Encode ``src`` ``(batch, src_len)`` into ``memory`` ``(batch, src_len, d_model)``.

        ``src_mask``: bool, ``True`` = may attend, broadcastable to
        ``(batch, n_heads, src_len, src_len)``; default: the padding mask of
        ``src`` (``(batch, 1, 1, src_len)``). Bad input raises
        ``ValueError``/``TypeError`` naming ``src`` or ``src_mask``
        (:meth:`check_encode_inputs`). Source: section 3.1.
        """
        if src_mask is None:
            src_mask = self.source_mask(src)
        return self.encoder(src, src_mask=src_mask)

    def check_decode_inputs(self, tgt: Tensor, memory: Tensor, *, tgt_mask: Tensor | None = None,
                            memory_mask: Tensor | None = None, cache: DecoderCache | None = None) -> None:
        """Check the arguments of :meth:`decode`, raising ``ValueError``/``TypeError`` naming the bad one."""
        self.decoder.check_tokens(tgt, "tgt", offset=cache.length if cache is not None else 0)
        with inputs_already_checked():
            tgt_mask = self.target_mask(tgt, cache) if tgt_mask is None else tgt_mask
        check_memory_and_masks(self.decoder, tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, cache=cache)

    @checked_by(check_decode_inputs)
    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        *,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        """Decoder pass and output projection: logits ``(batch, tgt_len, tgt_vocab_size)``.

        Args:
            tgt: ``(batch, tgt_len)`` ids (with a ``cache``: only the new positions).
            memory: the encoder output ``(batch, src_len, d_model)``.
            tgt_mask: keyword-only; bool, broadcastable to ``(batch, n_heads,
                tgt_len, cached_len + tgt_len)``; default :meth:`target_mask`
                (causal AND target padding).
            memory_mask: keyword-only; bool, broadcastable to ``(batch,
                n_heads, tgt_len, src_len)``: which source positions
                cross-attention may read (usually the source padding mask
                ``(batch, 1, 1, src_len)``, i.e. the ``src_mask`` of :meth:`encode`).
            cache: a :class:`DecoderCache` for incremental decoding (chapter 10).

        Raises:
            ValueError/TypeError naming ``tgt``, ``memory``, ``memory_mask`` or
            ``tgt_mask`` (:meth:`check_decode_inputs`). Source: section 3.1 and 3.2.3.
        """
        if tgt_mask is None:
            tgt_mask = self.target_mask(tgt, cache)
        hidden = self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, cache=cache)
        return self.output_projection(hidden)  # (batch, tgt_len, tgt_vocab_size)

    def check_inputs(
        self, src: Tensor, tgt: Tensor, *, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None
    ) -> None:
        """Check the arguments of :meth:`forward` once, raising ``ValueError``/``TypeError`` naming the bad one.

        ``src_mask`` must suit both attentions that read the source: the
        encoder self-attention ``(batch, n_heads, src_len, src_len)`` and the
        cross-attention ``(batch, n_heads, tgt_len, src_len)``.
        """
        self.encoder.check_tokens(src, "src")
        self.decoder.check_tokens(tgt, "tgt")
        if src.size(0) != tgt.size(0):
            raise ValueError(f"batch sizes differ: src has {src.size(0)}, tgt has {tgt.size(0)}")
        batch, n_heads, src_len, tgt_len = src.size(0), self.config.n_heads, src.size(1), tgt.size(1)
        with inputs_already_checked():  # the default masks are checked too (a subclass may compute them)
            src_mask = self.source_mask(src) if src_mask is None else src_mask
            tgt_mask = self.target_mask(tgt) if tgt_mask is None else tgt_mask
        check_mask(src_mask, (batch, n_heads, src_len, src_len), "src_mask")
        check_mask(src_mask, (batch, n_heads, tgt_len, src_len), "src_mask")
        check_mask(tgt_mask, (batch, n_heads, tgt_len, tgt_len), "tgt_mask")

    @checked_by(check_inputs)
    def forward(
        self, src: Tensor, tgt: Tensor, *, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None
    ) -> Tensor:
        """``encode`` then ``decode``: logits ``(batch, tgt_len, tgt_vocab_size)``.

        ``src`` ``(batch, src_len)`` and ``tgt`` ``(batch, tgt_len)`` are
        integer ids (``tgt`` is the shifted-right decoder input); the masks
        follow the course convention (bool, ``True`` = may attend) and default
        to the padding mask of ``src`` and causal AND padding for ``tgt``.
        :meth:`check_inputs` checks the arguments once (``encode``, ``decode``
        and the layers they call do not check them again) and raises
        ``ValueError``/``TypeError`` naming the bad argument.
        Source: Vaswani et al. (2017), section 3, figure 1.
        """
        if src_mask is None:
            src_mask = self.source_mask(src)
        memory = self.encode(src, src_mask=src_mask)  # (batch, src_len, d_model)
        return self.decode(tgt, memory, tgt_mask=tgt_mask, memory_mask=src_mask)

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

