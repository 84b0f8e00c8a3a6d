"""Token embeddings (chapter 2)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .validation import check_token_ids, checked_by

__all__ = ["TokenEmbedding"]


class TokenEmbedding(nn.Module):
    """Look up a learned vector per token id and scale it by ``sqrt(d_model)``.

    The lookup ``weight[tokens]`` equals ``one_hot(tokens) @ weight``; the scale
    keeps the embedding's magnitude comparable to the sinusoidal positional
    signal (whose entries lie in ``[-1, 1]``) when the weights are initialised
    with standard deviation ``d_model ** -0.5`` (as here) or shared with the
    output projection.

    Args:
        vocab_size: number of token ids, ``V``.
        d_model: embedding width.
        padding_idx: optional id whose vector is kept at zero and gets no
            gradient (as in :class:`torch.nn.Embedding`).
        scale: keyword-only; ``False`` leaves the vectors unscaled (GPT-2,
            Llama: their positions are not added to the embeddings, or are
            learned at the same small scale).

    Shapes:
        ``tokens``: ``(batch, seq_len)`` integer (``torch.long``/``int``) ids in
        ``[0, vocab_size)`` -> ``(batch, seq_len, d_model)`` float (the weight's
        dtype, float32 by default).

    Raises:
        ValueError: non-positive sizes; ``tokens`` not an integer tensor; an id
            outside ``[0, vocab_size)`` (named, instead of an index error deep
            inside PyTorch; checked for CPU tensors only, to avoid a device
            synchronisation per step on accelerators).

    Source: Vaswani et al. (2017), section 3.4 ("In the embedding layers, we
    multiply those weights by sqrt(d_model)").
    """

    def __init__(self, vocab_size: int, d_model: int, padding_idx: int | None = None, *, scale: bool = True) -> None:
        super().__init__()
        if vocab_size < 1 or d_model < 1:  # one message naming both sizes
            raise ValueError(f"vocab_size and d_model must be positive; got vocab_size={vocab_size}, d_model={d_model}")
        if padding_idx is not None and not 0 <= padding_idx < vocab_size:
            raise ValueError(f"padding_idx must lie in [0, {vocab_size}); got {padding_idx}")
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=d_model**-0.5)
        if padding_idx is not None:
            with torch.no_grad():
                self.embedding.weight[padding_idx].zero_()
        self.scale = math.sqrt(d_model) if scale else 1.0

    @property
    def weight(self) -> Tensor:
        """The ``(vocab_size, d_model)`` embedding matrix (shareable with the output layer)."""
        return self.embedding.weight

    def check_ids(self, tokens: Tensor, name: str = "tokens", ndim: int | None = None) -> None:
        """Raise ``ValueError`` (naming ``name``) unless ``tokens`` are integer ids in range.

        ``ndim=2`` also asks for the shape ``(batch, seq_len)``. The range
        check reads two numbers back from the device: cheap on the CPU, a
        synchronisation per step on a GPU, where it is skipped (an
        out-of-range id then fails inside the embedding lookup).
        """
        check_token_ids(tokens, name, ndim=ndim)
        if tokens.device.type == "cpu" and tokens.numel() and (
            int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size
        ):
            raise ValueError(
                f"{name} must lie in [0, {self.vocab_size}) (the vocabulary size); "
                f"got min {int(tokens.min())}, max {int(tokens.max())}"
            )

    @checked_by(check_ids)
    def forward(self, tokens: Tensor) -> Tensor:
        return self.embedding(tokens) * self.scale

    def extra_repr(self) -> str:
        scale = f"sqrt({self.d_model})" if self.scale != 1.0 else "1"
        return f"vocab_size={self.vocab_size}, d_model={self.d_model}, scale={scale}"
