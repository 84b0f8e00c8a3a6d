"""Data for the course: loaders, splits, tokenizers and batches (chapter 9).

Import everything from here (``from course_lib.data import ...``); the
underscore submodules are an implementation detail.

Where files come from
    :func:`resolve_file` looks for each file under ``root=``, then
    ``$COURSE_LIB_DATA``, then the user cache (``$COURSE_LIB_CACHE`` or
    ``pooch.os_cache("course_lib")``), and finally downloads it there —
    atomically, checked by sha256 where the source is fixed and by parsing.
    Offline with no copy: :class:`DataNotFoundError` says where to put one.

Data sets
    :func:`load_tatoeba_en_zh` (English-Chinese, CC-BY 2.0 FR, see
    :data:`TATOEBA_ATTRIBUTION`), :func:`load_tiny_shakespeare`,
    :func:`load_multi30k` (German-English, download-only) and
    :func:`synthetic_copy_task`. :func:`split_by_source` holds out whole source
    sentences.

Text
    :func:`normalize_english`, :func:`normalize_chinese`; tokenizers from the
    ``tokenizers`` library: :func:`train_bpe_tokenizer` (subwords),
    :func:`train_char_tokenizer` (characters), :func:`train_tokenizers`, all
    wrapped in :class:`TextTokenizer`. Special ids: ``PAD_ID=0, BOS_ID=1,
    EOS_ID=2, UNK_ID=3``.

Batches
    :class:`TranslationDataset`, :class:`BucketBatchSampler`,
    :func:`collate_batch` -> :class:`Batch` (``src, tgt_in, tgt_out, src_mask,
    tgt_mask, n_tokens``), :func:`shift_right`, :func:`make_loader`, and the
    one-call :func:`make_dataloaders` (:class:`DataConfig` -> :class:`TranslationData`).

Importing this package does no work (no file access, no network).
"""

from ._batching import (
    Batch,
    BucketBatchSampler,
    TranslationDataset,
    collate_batch,
    make_loader,
    padding_fraction,
    shift_right,
)
from ._datasets import (
    MULTI30K_LICENSE,
    NUM_SPECIAL_TOKENS,
    TATOEBA_ATTRIBUTION,
    TATOEBA_FILE,
    TINY_SHAKESPEARE_FILE,
    group_by_source,
    load_multi30k,
    load_tatoeba_en_zh,
    load_tiny_shakespeare,
    multi30k_file,
    split_by_source,
    synthetic_copy_task,
)
from ._files import (
    CACHE_ENV_VAR,
    DATA_ENV_VAR,
    DataNotFoundError,
    DataValidationError,
    RemoteFile,
    Source,
    cache_dir,
    download_file,
    resolve_file,
)
from ._pipeline import DATASETS, DataConfig, TranslationData, make_dataloaders
from ._text import chinese_normalizer, english_normalizer, normalize_chinese, normalize_english
from ._tokenize import (
    BOS,
    BOS_ID,
    EOS,
    EOS_ID,
    PAD,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK,
    UNK_ID,
    TextTokenizer,
    train_bpe_tokenizer,
    train_char_tokenizer,
    train_tokenizers,
)

__all__ = [
    # files
    "DataNotFoundError",
    "DataValidationError",
    "RemoteFile",
    "Source",
    "cache_dir",
    "resolve_file",
    "download_file",
    "DATA_ENV_VAR",
    "CACHE_ENV_VAR",
    # data sets
    "TATOEBA_FILE",
    "TATOEBA_ATTRIBUTION",
    "TINY_SHAKESPEARE_FILE",
    "MULTI30K_LICENSE",
    "multi30k_file",
    "load_tatoeba_en_zh",
    "load_tiny_shakespeare",
    "load_multi30k",
    "split_by_source",
    "group_by_source",
    "synthetic_copy_task",
    "NUM_SPECIAL_TOKENS",
    # text
    "english_normalizer",
    "chinese_normalizer",
    "normalize_english",
    "normalize_chinese",
    # tokenizers
    "PAD",
    "BOS",
    "EOS",
    "UNK",
    "PAD_ID",
    "BOS_ID",
    "EOS_ID",
    "UNK_ID",
    "SPECIAL_TOKENS",
    "TextTokenizer",
    "train_bpe_tokenizer",
    "train_char_tokenizer",
    "train_tokenizers",
    # batches
    "shift_right",
    "Batch",
    "collate_batch",
    "TranslationDataset",
    "BucketBatchSampler",
    "padding_fraction",
    "make_loader",
    # one call
    "DATASETS",
    "DataConfig",
    "TranslationData",
    "make_dataloaders",
]
