"""One call from a configuration to train/valid/test loaders and tokenizers (chapter 9)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from torch.utils.data import DataLoader

from ..validation import check_int, check_probability
from .batching import TranslationDataset, make_loader, padding_fraction
from .datasets import load_multi30k, load_tatoeba_en_zh, split_by_source
from .tokenization import TextTokenizer, train_tokenizers

__all__ = ["DataConfig", "TranslationData", "make_dataloaders", "DATASETS"]

DATASETS = ("tatoeba-en-zh", "multi30k-de-en")
"""Names accepted by :attr:`DataConfig.dataset`."""


@dataclass(frozen=True)
class DataConfig:
    """Everything that decides the data pipeline, in one small, saveable record.

    Attributes:
        dataset: ``"tatoeba-en-zh"`` (English -> Chinese, split here by English
            sentence) or ``"multi30k-de-en"`` (German -> English, official splits;
            download-only).
        reverse: swap source and target (Chinese -> English, English -> German).
        valid_fraction, test_fraction: Tatoeba only, see :func:`split_by_source`.
        split_seed: Tatoeba only, which sentences are held out.
        src_vocab_size, tgt_vocab_size: BPE vocabulary size of a BPE side; an
            optional cap (``None`` = all characters) of a character side.
        lowercase: lower-case the BPE side(s).
        char_min_frequency: a character seen fewer times in training becomes ``<unk>``.
        max_src_len, max_tgt_len: drop pairs longer than this many tokens
            (``<eos>`` included) — from *every* split alike; ``None`` keeps all.
        batch_size: pairs per batch.
        bucket_size_multiplier: batches per length bucket (training loader).
        seed: seeds the training batch order.
        num_workers: DataLoader workers.

    Raises:
        ValueError: (on creation) an unknown dataset or an out-of-range number.
    """

    dataset: str = "tatoeba-en-zh"
    reverse: bool = False
    valid_fraction: float = 0.05
    test_fraction: float = 0.05
    split_seed: int = 0
    src_vocab_size: int | None = 4000
    tgt_vocab_size: int | None = None
    lowercase: bool = False
    char_min_frequency: int = 1
    max_src_len: int | None = None
    max_tgt_len: int | None = None
    batch_size: int = 128
    bucket_size_multiplier: int = 50
    seed: int = 0
    num_workers: int = 0

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {DATASETS}; got {self.dataset!r}")
        for name in ("batch_size", "bucket_size_multiplier", "char_min_frequency"):
            check_int(getattr(self, name), name, 1)
        for name in ("max_src_len", "max_tgt_len"):
            check_int(getattr(self, name), name, 2, optional=True)
        for name in ("src_vocab_size", "tgt_vocab_size"):
            check_int(getattr(self, name), name, 5, optional=True)
        check_int(self.num_workers, "num_workers", 0)
        for name in ("valid_fraction", "test_fraction"):
            check_probability(getattr(self, name), name)
        if self.valid_fraction + self.test_fraction >= 1:
            raise ValueError("valid_fraction + test_fraction must be < 1")

    def to_dict(self) -> dict:
        """A plain dict (for a checkpoint); ``DataConfig(**d)`` rebuilds it."""
        return asdict(self)


@dataclass
class TranslationData:
    """What :func:`make_dataloaders` returns: tokenizers, datasets and loaders of one task.

    Attributes:
        config: the :class:`DataConfig` used.
        src_tokenizer, tgt_tokenizer: trained on the training split only.
        train, valid, test: :class:`TranslationDataset` s (after the length filter);
            ``.pairs`` holds their text pairs (for BLEU).
        train_loader: length-bucketed, shuffled, reproducible (``config.seed``).
        valid_loader, test_loader: consecutive pairs in dataset order, not shuffled.
    """

    config: DataConfig
    src_tokenizer: TextTokenizer
    tgt_tokenizer: TextTokenizer
    train: TranslationDataset
    valid: TranslationDataset
    test: TranslationDataset
    train_loader: DataLoader
    valid_loader: DataLoader
    test_loader: DataLoader

    def summary(self) -> str:
        """A few lines: sizes, vocabularies, lengths and the training loader's padding share."""
        lines = [f"{self.config.dataset}{' (reversed)' if self.config.reverse else ''}"]
        for name in ("train", "valid", "test"):
            ds = getattr(self, name)
            src_l = [s for s, _ in ds.lengths]
            tgt_l = [t for _, t in ds.lengths]
            lines.append(
                f"  {name:5s}: {len(ds):6d} pairs, src len mean {sum(src_l) / max(len(ds), 1):.1f} max {max(src_l, default=0)}, "
                f"tgt len mean {sum(tgt_l) / max(len(ds), 1):.1f} max {max(tgt_l, default=0)}"
            )
        lines.append(f"  src vocab {self.src_tokenizer.vocab_size} ({self.src_tokenizer.kind}), "
                     f"tgt vocab {self.tgt_tokenizer.vocab_size} ({self.tgt_tokenizer.kind})")
        sampler = self.train_loader.batch_sampler
        if hasattr(sampler, "_batches"):
            batches = sampler._batches(0)
            pad = padding_fraction([s for s, _ in self.train.lengths], batches)
            lines.append(f"  train batches/epoch {len(batches)}, source padding {pad:.1%} (length-bucketed)")
        return "\n".join(lines)


def make_dataloaders(
    config: DataConfig | None = None,
    *,
    root: str | os.PathLike | None = None,
    download: bool = True,
) -> TranslationData:
    """Load a translation data set, split it, train tokenizers and build the loaders.

    Steps: load the pairs (:func:`load_tatoeba_en_zh` or :func:`load_multi30k`);
    split Tatoeba with :func:`split_by_source` (Multi30k has official splits);
    swap sides if ``config.reverse``; train the tokenizers on the training pairs
    only (BPE for English/German, characters for Chinese); encode every split
    with the same length filter; build a bucketed training loader and ordered
    evaluation loaders.

    Args:
        config: a :class:`DataConfig` (default: ``DataConfig()``, Tatoeba en -> zh).
        root: optional local data folder (see :func:`resolve_file`).
        download: allow downloads.

    Returns:
        a :class:`TranslationData`.

    Raises:
        TypeError: ``config`` is not a :class:`DataConfig`.
        DataNotFoundError: the data is not available.
        ValueError: the length filter leaves a split empty.

    Source: chapter 9.
    """
    config = DataConfig() if config is None else config
    if not isinstance(config, DataConfig):
        raise TypeError(f"config must be a DataConfig; got {type(config).__name__}")
    if config.dataset == "tatoeba-en-zh":
        pairs = load_tatoeba_en_zh(root, download=download)
        train_p, valid_p, test_p = split_by_source(
            pairs, config.valid_fraction, config.test_fraction, config.split_seed
        )
        kinds = ("bpe", "char")
    else:
        train_p, valid_p, test_p = (load_multi30k(s, root, download=download) for s in ("train", "valid", "test"))
        kinds = ("bpe", "bpe")
    if config.reverse:
        train_p, valid_p, test_p = ([(p[1], p[0]) for p in ps] for ps in (train_p, valid_p, test_p))
        kinds = kinds[::-1]
    src_tok, tgt_tok = train_tokenizers(
        train_p,
        src_kind=kinds[0],
        tgt_kind=kinds[1],
        src_vocab_size=config.src_vocab_size,
        tgt_vocab_size=config.tgt_vocab_size,
        lowercase=config.lowercase,
        char_min_frequency=config.char_min_frequency,
    )
    datasets = [
        TranslationDataset.from_pairs(
            ps, src_tok, tgt_tok, max_src_len=config.max_src_len, max_tgt_len=config.max_tgt_len
        )
        for ps in (train_p, valid_p, test_p)
    ]
    for name, ds in zip(("train", "valid", "test"), datasets):
        if len(ds) == 0:
            raise ValueError(f"the {name} split is empty after the length filter (max_src_len/max_tgt_len too small?)")
    train, valid, test = datasets
    return TranslationData(
        config=config,
        src_tokenizer=src_tok,
        tgt_tokenizer=tgt_tok,
        train=train,
        valid=valid,
        test=test,
        train_loader=make_loader(
            train,
            config.batch_size,
            shuffle=True,
            bucket=True,
            bucket_size_multiplier=config.bucket_size_multiplier,
            seed=config.seed,
            num_workers=config.num_workers,
        ),
        valid_loader=make_loader(valid, config.batch_size, shuffle=False, bucket=False, num_workers=config.num_workers),
        test_loader=make_loader(test, config.batch_size, shuffle=False, bucket=False, num_workers=config.num_workers),
    )
