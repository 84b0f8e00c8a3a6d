"""Encoded datasets, length-bucketed batches and the ``Batch`` a model consumes (chapter 9)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from functools import partial

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, Sampler, SequentialSampler

from ..validation import check_int, check_token_ids
from ..masks import decoder_self_attention_mask, padding_mask
from .tokenization import BOS_ID, EOS_ID, PAD_ID, TextTokenizer

__all__ = [
    "shift_right",
    "Batch",
    "collate_batch",
    "TranslationDataset",
    "BucketBatchSampler",
    "padding_fraction",
    "make_loader",
]


def shift_right(tgt: Tensor, bos_id: int, pad_id: int | None = None) -> Tensor:
    """Decoder input for teacher forcing: ``<bos>`` then the target without its last token.

    ``tgt_out = [y1, y2, <eos>]`` gives ``tgt_in = [<bos>, y1, y2]``: at position
    ``t`` the decoder sees ``<bos>, y1 .. y_(t-1)`` and must predict ``y_t``.
    With ``pad_id`` given, positions where ``tgt`` is padding are padding in the
    result too, so ``tgt_in`` and ``tgt_out`` share one padding pattern (the
    ``<eos>`` of a short row is not copied into the padding).

    Args:
        tgt: integer ids ``(batch, tgt_len)`` — the targets, each ending with ``<eos>``.
        bos_id: the id written at position 0.
        pad_id: optional padding id (see above).

    Returns:
        a new tensor of the same shape and dtype as ``tgt``.

    Raises:
        ValueError: ``tgt`` is not a 2-D integer tensor or has length 0.

    Source: Vaswani et al. (2017), section 3.1 ("output embeddings are offset
    by one position"); chapter 9.
    """
    if not isinstance(tgt, Tensor) or tgt.dim() != 2 or tgt.size(1) == 0:
        shape = tuple(tgt.shape) if isinstance(tgt, Tensor) else type(tgt).__name__
        raise ValueError(f"tgt must have shape (batch, tgt_len) with tgt_len >= 1; got {shape}")
    check_token_ids(tgt, "tgt", ndim=None)
    out = torch.empty_like(tgt)
    out[:, 0] = bos_id
    out[:, 1:] = tgt[:, :-1]
    if pad_id is not None:
        out = out.masked_fill(tgt == pad_id, pad_id)
    return out


@dataclass
class Batch:
    """One padded batch of a translation task, ready for the model.

    Attributes:
        src: source ids, ``(batch, src_len)`` long; each row ends with ``<eos>``, then ``<pad>``.
        tgt_in: decoder input, ``(batch, tgt_len)`` long; ``<bos> y1 .. y_n`` then ``<pad>``.
        tgt_out: decoder target, ``(batch, tgt_len)`` long; ``y1 .. y_n <eos>`` then ``<pad>``.
        src_mask: ``(batch, 1, 1, src_len)`` bool, ``True`` = may attend (not padding).
        tgt_mask: ``(batch, 1, tgt_len, tgt_len)`` bool, causal AND not padding.
        n_tokens: number of non-padding target tokens (the loss's denominator).

    Source: chapter 9 (masks from :mod:`course_lib.masks`, chapter 8).
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    src_mask: Tensor
    tgt_mask: Tensor
    n_tokens: int

    @property
    def size(self) -> int:
        """Number of sentence pairs in the batch."""
        return self.src.size(0)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        """A copy with every tensor on ``device`` (``n_tokens`` unchanged)."""
        return Batch(
            **{
                f.name: (getattr(self, f.name).to(device, non_blocking=non_blocking) if f.name != "n_tokens" else self.n_tokens)
                for f in fields(self)
            }
        )

    def pin_memory(self) -> "Batch":
        """A copy in pinned memory (called by ``DataLoader(pin_memory=True)``)."""
        return Batch(
            **{f.name: (getattr(self, f.name).pin_memory() if f.name != "n_tokens" else self.n_tokens) for f in fields(self)}
        )


def collate_batch(
    items: Sequence[tuple[Tensor, Tensor]], pad_id: int = PAD_ID, bos_id: int = BOS_ID
) -> Batch:
    """Pad a list of ``(src, tgt)`` id tensors into a :class:`Batch`.

    ``tgt_out`` is the padded targets (each ending with ``<eos>``);
    ``tgt_in = shift_right(tgt_out, bos_id, pad_id)``.

    Args:
        items: ``[(src, tgt), ...]``, 1-D long tensors (as given by :class:`TranslationDataset`).
        pad_id: padding id.
        bos_id: begin-of-sequence id.

    Returns:
        a :class:`Batch` (shapes in its docstring).

    Raises:
        ValueError: ``items`` is empty, or a sequence is empty or not 1-D.
    """
    if len(items) == 0:
        raise ValueError("items is empty; a batch needs at least one (src, tgt) pair")
    for i, (s, t) in enumerate(items):
        if s.dim() != 1 or t.dim() != 1 or s.numel() == 0 or t.numel() == 0:
            raise ValueError(f"items[{i}] must be two non-empty 1-D tensors; got shapes {tuple(s.shape)}, {tuple(t.shape)}")
    src = pad_sequence([s for s, _ in items], batch_first=True, padding_value=pad_id)
    tgt_out = pad_sequence([t for _, t in items], batch_first=True, padding_value=pad_id)
    tgt_in = shift_right(tgt_out, bos_id, pad_id)
    return Batch(
        src=src,
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        src_mask=padding_mask(src, pad_id),
        tgt_mask=decoder_self_attention_mask(tgt_in, pad_id),
        n_tokens=int((tgt_out != pad_id).sum()),
    )


class TranslationDataset(Dataset):
    """Encoded ``(src, tgt)`` pairs; item ``i`` is two 1-D long tensors, both ending with ``<eos>``.

    Build it with :meth:`from_pairs` (text + tokenizers) or :meth:`from_ids`
    (already numbered tokens, e.g. :func:`synthetic_copy_task`).

    Args:
        src: source id sequences (each ending with ``<eos>``).
        tgt: target id sequences (each ending with ``<eos>``, no ``<bos>``).
        pairs: optional text pairs, aligned with ``src``/``tgt`` (kept for BLEU).

    Attributes:
        pairs: the text pairs kept (after the length filter), or ``None``.
        lengths: ``[(len(src_i), len(tgt_i)), ...]``, what :class:`BucketBatchSampler` sorts by.

    Raises:
        ValueError: ``src`` and ``tgt`` (and ``pairs``) differ in length, or a sequence is empty.

    Source: chapter 9.
    """

    def __init__(self, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], pairs: Sequence[tuple] | None = None):
        if len(src) != len(tgt):
            raise ValueError(f"src and tgt must have the same length; got {len(src)} and {len(tgt)}")
        if pairs is not None and len(pairs) != len(src):
            raise ValueError(f"pairs must align with src; got {len(pairs)} pairs for {len(src)} sequences")
        self.src = [torch.as_tensor(s, dtype=torch.long) for s in src]
        self.tgt = [torch.as_tensor(t, dtype=torch.long) for t in tgt]
        for name, seqs in (("src", self.src), ("tgt", self.tgt)):
            for i, s in enumerate(seqs):
                if s.dim() != 1 or s.numel() == 0:
                    raise ValueError(f"{name}[{i}] must be a non-empty 1-D sequence of ids")
        self.pairs = list(pairs) if pairs is not None else None
        self.lengths = [(len(s), len(t)) for s, t in zip(self.src, self.tgt)]

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self.src[index], self.tgt[index]

    @classmethod
    def from_pairs(
        cls,
        pairs: Sequence[tuple],
        src_tokenizer: TextTokenizer,
        tgt_tokenizer: TextTokenizer,
        *,
        max_src_len: int | None = None,
        max_tgt_len: int | None = None,
    ) -> "TranslationDataset":
        """Encode text pairs (``src`` and ``tgt`` each get ``<eos>``), optionally dropping long ones.

        The length filter counts tokens *including* ``<eos>`` and drops a pair
        when either side is too long. Apply the same limits to every split:
        the test set then measures the task the model was trained for (short
        sentences), and the kept pairs are in ``.pairs`` for BLEU. Use ``None``
        to keep everything.

        Args:
            pairs: ``(src_text, tgt_text, ...)`` tuples.
            src_tokenizer, tgt_tokenizer: trained :class:`TextTokenizer` s.
            max_src_len, max_tgt_len: optional limits (ints >= 2) or ``None``.

        Returns:
            a :class:`TranslationDataset` (possibly shorter than ``pairs``).

        Raises:
            ValueError: a limit < 2, or a malformed pair.
            TypeError: a tokenizer is not a :class:`TextTokenizer`.
        """
        for name, tok in (("src_tokenizer", src_tokenizer), ("tgt_tokenizer", tgt_tokenizer)):
            if not isinstance(tok, TextTokenizer):
                raise TypeError(f"{name} must be a TextTokenizer; got {type(tok).__name__}")
        for name, lim in (("max_src_len", max_src_len), ("max_tgt_len", max_tgt_len)):
            check_int(lim, name, 2, optional=True)
        for i, p in enumerate(pairs):
            if not isinstance(p, (tuple, list)) or len(p) < 2 or not isinstance(p[0], str) or not isinstance(p[1], str):
                raise ValueError(f"pairs[{i}] must be a (src_text, tgt_text) tuple of str; got {p!r}")
        src = src_tokenizer.encode_batch([p[0] for p in pairs]) if pairs else []
        tgt = tgt_tokenizer.encode_batch([p[1] for p in pairs]) if pairs else []
        keep = [
            i
            for i in range(len(pairs))
            if (max_src_len is None or len(src[i]) <= max_src_len) and (max_tgt_len is None or len(tgt[i]) <= max_tgt_len)
        ]
        return cls([src[i] for i in keep], [tgt[i] for i in keep], [pairs[i] for i in keep])

    @classmethod
    def from_ids(cls, id_pairs: Sequence[tuple[Sequence[int], Sequence[int]]], eos_id: int = EOS_ID) -> "TranslationDataset":
        """Wrap already-numbered pairs (no special tokens), appending ``<eos>`` to both sides.

        Args:
            id_pairs: ``[(src_ids, tgt_ids), ...]``, e.g. from :func:`synthetic_copy_task`.
            eos_id: the id appended.

        Returns:
            a :class:`TranslationDataset` with ``pairs=None``.

        Raises:
            ValueError: a malformed pair.
        """
        src, tgt = [], []
        for i, p in enumerate(id_pairs):
            if not isinstance(p, (tuple, list)) or len(p) != 2:
                raise ValueError(f"id_pairs[{i}] must be a (src_ids, tgt_ids) pair; got {p!r:.80}")
            src.append(list(p[0]) + [eos_id])
            tgt.append(list(p[1]) + [eos_id])
        return cls(src, tgt)


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of similar-length examples, in a shuffled but reproducible order.

    Each epoch: shuffle the indices, cut them into buckets of
    ``batch_size * bucket_size_multiplier``, sort each bucket by length, cut it
    into batches, then shuffle the batches. Sentences of similar length share a
    batch (little padding), while batch composition and order still change
    every epoch. The order depends only on ``seed`` and the epoch number: the
    epoch is counted by the sampler (0 for the first ``iter``), or set with
    :meth:`set_epoch` (e.g. when resuming training).

    With ``shuffle=False`` nothing is random: buckets are consecutive indices,
    sorted by length, batches in order.

    Args:
        lengths: one length per example — an int or a tuple such as
            ``(src_len, tgt_len)`` (compared as tuples); e.g. ``dataset.lengths``.
        batch_size: examples per batch (>= 1).
        bucket_size_multiplier: batches per bucket (>= 1; 1 = sort within each batch only).
        shuffle: shuffle indices and batches.
        seed: the random seed.
        drop_last: drop the last, smaller batch of each bucket (sizes then all equal ``batch_size``).

    Yields:
        lists of dataset indices.

    Raises:
        ValueError: a bad size or an empty ``lengths``.

    Source: the length batching of Vaswani et al. (2017), section 5.1
    ("sentence pairs were batched together by approximate sequence length");
    chapter 9.
    """

    def __init__(
        self,
        lengths: Sequence,
        batch_size: int,
        bucket_size_multiplier: int = 50,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        check_int(batch_size, "batch_size", 1)
        check_int(bucket_size_multiplier, "bucket_size_multiplier", 1)
        if len(lengths) == 0:
            raise ValueError("lengths is empty; nothing to batch")
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.bucket_size_multiplier = bucket_size_multiplier
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter`` produce epoch ``epoch``'s order."""
        check_int(epoch, "epoch", 0)
        self.epoch = epoch

    def _batches(self, epoch: int) -> list[list[int]]:
        rng = random.Random(f"{self.seed}/{epoch}")
        indices = list(range(len(self.lengths)))
        if self.shuffle:
            rng.shuffle(indices)
        bucket = self.batch_size * self.bucket_size_multiplier
        batches: list[list[int]] = []
        for start in range(0, len(indices), bucket):
            chunk = sorted(indices[start : start + bucket], key=lambda i: self.lengths[i])
            for b in range(0, len(chunk), self.batch_size):
                batch = chunk[b : b + self.batch_size]
                if self.drop_last and len(batch) < self.batch_size:
                    continue
                batches.append(batch)
        if self.shuffle:
            rng.shuffle(batches)
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        epoch = self.epoch
        self.epoch += 1
        yield from self._batches(epoch)

    def __len__(self) -> int:
        n = len(self.lengths)
        if not self.drop_last:
            bucket = self.batch_size * self.bucket_size_multiplier
            full, rest = divmod(n, bucket)
            return full * self.bucket_size_multiplier + -(-rest // self.batch_size)
        return sum(
            min(self.batch_size * self.bucket_size_multiplier, n - s) // self.batch_size
            for s in range(0, n, self.batch_size * self.bucket_size_multiplier)
        )


def padding_fraction(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Share of padding positions when ``batches`` are padded to their longest member.

    Args:
        lengths: one int length per example.
        batches: lists of example indices (e.g. ``list(sampler)``).

    Returns:
        ``pad positions / all positions``, in ``[0, 1)``.

    Raises:
        ValueError: no batches.
    """
    total = real = 0
    for batch in batches:
        ls = [int(lengths[i]) for i in batch]
        if ls:
            total += max(ls) * len(ls)
            real += sum(ls)
    if total == 0:
        raise ValueError("batches is empty")
    return 1.0 - real / total


def make_loader(
    dataset: TranslationDataset,
    batch_size: int,
    *,
    shuffle: bool = True,
    bucket: bool = True,
    bucket_size_multiplier: int = 50,
    seed: int = 0,
    drop_last: bool = False,
    num_workers: int = 0,
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
) -> DataLoader:
    """A :class:`~torch.utils.data.DataLoader` that yields :class:`Batch` objects.

    Args:
        dataset: a :class:`TranslationDataset`.
        batch_size: pairs per batch.
        shuffle: new random batches each epoch (training) or a fixed order (evaluation).
        bucket: batch by length with :class:`BucketBatchSampler`; ``False``
            gives plain batches (random if ``shuffle``, else consecutive pairs
            in dataset order, so batch ``k`` holds ``dataset.pairs[k*batch_size:(k+1)*batch_size]``).
        bucket_size_multiplier, drop_last: see :class:`BucketBatchSampler`.
        seed: seeds the order (reproducible).
        num_workers: DataLoader worker processes (0 = main process; fine for these sizes).
        pad_id, bos_id: special ids for :func:`collate_batch`.

    Returns:
        a DataLoader; ``len(loader)`` is the number of batches per epoch.

    Raises:
        ValueError: a bad size or an empty dataset.
    """
    check_int(batch_size, "batch_size", 1)
    if len(dataset) == 0:
        raise ValueError("dataset is empty (did the length filter drop everything?)")
    if bucket:
        sampler: Sampler = BucketBatchSampler(
            dataset.lengths, batch_size, bucket_size_multiplier, shuffle=shuffle, seed=seed, drop_last=drop_last
        )
    else:
        base = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed)) if shuffle else SequentialSampler(dataset)
        sampler = BatchSampler(base, batch_size, drop_last=drop_last)
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        collate_fn=partial(collate_batch, pad_id=pad_id, bos_id=bos_id),
        num_workers=num_workers,
    )
