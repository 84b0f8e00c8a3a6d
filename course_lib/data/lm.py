"""Text for a language model: a character vocabulary, a split, and batches of ``(tokens[:-1], tokens[1:])`` (chapter 12)."""

from __future__ import annotations

from typing import Iterator, Sequence

import torch
from torch import Tensor

from ..validation import check_int, check_probability, checked_by
from .tokenization import UNK_ID

__all__ = ["CharVocabulary", "chinese_side", "split_text_ids", "check_lm_batches_inputs", "lm_batches"]

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
"""The special tokens of :class:`CharVocabulary`, at the ids of the course's other tokenizers (0, 1, 2, 3)."""


class CharVocabulary:
    """One id per distinct character of a text, after the four special tokens.

    Character-level: no training, no unknown characters in the text it was
    built from (others map to ``<unk>``). ``decode`` skips the special tokens.

    Args:
        text: the text whose characters form the vocabulary (sorted, so the
            ids do not depend on the order of the text).

    Example: tiny-shakespeare has 65 characters, so 69 ids.
    """

    def __init__(self, text: str) -> None:
        self.itos = list(SPECIALS) + sorted(set(text))
        self.stoi = {ch: i for i, ch in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``'s characters (``<unk>`` for unseen ones)."""
        return [self.stoi.get(ch, UNK_ID) for ch in text]

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """The text of ``ids`` (a list or a 1-D tensor), special tokens left out."""
        ids = ids.tolist() if isinstance(ids, Tensor) else ids
        return "".join(self.itos[i] for i in ids if i >= len(SPECIALS))


def chinese_side(pairs: Sequence[tuple[str, ...]]) -> str:
    """The Chinese sentences of Tatoeba pairs (:func:`course_lib.data.load_tatoeba_en_zh`), distinct, in file order, one a line."""
    return "\n".join(dict.fromkeys(pair[1] for pair in pairs)) + "\n"


def split_text_ids(ids: Tensor, valid_fraction: float = 0.1) -> tuple[Tensor, Tensor]:
    """``(train, valid)``: the first and the last ``valid_fraction`` of a 1-D id tensor (no shuffling: no overlap of windows)."""
    check_probability(valid_fraction, "valid_fraction")
    n_valid = int(len(ids) * valid_fraction)
    return ids[: len(ids) - n_valid], ids[len(ids) - n_valid :]


def check_lm_batches_inputs(
    ids: Tensor, seq_len: int, batch_size: int, *, generator: torch.Generator | None = None, n_batches: int | None = None
) -> None:
    """Raise ``ValueError`` naming ``ids`` (not 1-D, shorter than ``seq_len + 1``), ``seq_len``, ``batch_size`` or ``n_batches``."""
    check_int(seq_len, "seq_len")
    check_int(batch_size, "batch_size")
    check_int(n_batches, "n_batches", optional=True)
    if not isinstance(ids, Tensor) or ids.dim() != 1 or len(ids) < seq_len + 1:
        raise ValueError(f"ids must be a 1-D tensor of at least seq_len + 1 = {seq_len + 1} ids; got {tuple(getattr(ids, 'shape', ()))}")


@checked_by(check_lm_batches_inputs)
def lm_batches(
    ids: Tensor, seq_len: int, batch_size: int, *, generator: torch.Generator | None = None, n_batches: int | None = None
) -> Iterator[tuple[Tensor, Tensor]]:
    """Batches of random windows of ``ids``: ``(inputs, targets)``, each ``(batch_size, seq_len)`` long.

    A window holds ``seq_len + 1`` consecutive ids; ``inputs`` is its first
    ``seq_len`` (``tokens[:-1]``), ``targets`` its last ``seq_len``
    (``tokens[1:]``): position ``t`` of the model must predict ``targets[:, t]``.

    Args:
        ids: the text's ids, 1-D, at least ``seq_len + 1`` of them.
        seq_len: positions per window (the model's context).
        batch_size: windows per batch.
        generator: for reproducible windows.
        n_batches: how many batches (``None``: without end).

    Raises:
        ValueError: ``ids`` not 1-D or shorter than ``seq_len + 1``, bad sizes
            (:func:`check_lm_batches_inputs`, when the function is called).
    """
    offsets = torch.arange(seq_len + 1)  # (seq_len + 1,)
    count = 0
    while n_batches is None or count < n_batches:
        starts = torch.randint(0, len(ids) - seq_len, (batch_size,), generator=generator)  # (batch,)
        windows = ids[starts[:, None] + offsets]  # (batch, seq_len + 1)
        yield windows[:, :-1], windows[:, 1:]
        count += 1
