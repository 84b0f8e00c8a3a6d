"""Data for the course: loaders, splits, tokenizers and batches (chapter 9).

Import from here (``from course_lib.data import ...``); the imports below
say which file of this package defines each name: ``files`` (where files
come from), ``datasets``, ``text`` (normalisation), ``tokenization``,
``batching`` and ``pipeline`` (the one-call loaders).

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

Language-model text (chapter 12)
    :class:`CharVocabulary`, :func:`chinese_side` (Tatoeba's Chinese
    sentences as one text), :func:`split_text_ids`, :func:`lm_batches`
    (random windows as ``(tokens[:-1], tokens[1:])``).

Importing this package does no work (no file access, no network).
"""

from .files import (
    DataNotFoundError,
    DataValidationError,
    Source,
    RemoteFile,
    cache_dir,
    resolve_file,
    download_file,
    DATA_ENV_VAR,
    CACHE_ENV_VAR,
    USER_AGENT,
    read_utf8,
    validate_gzip_lines,
    validate_tab_pairs,
    validate_text,
)
from .datasets import (
    TATOEBA_FILE,
    TATOEBA_ATTRIBUTION,
    TINY_SHAKESPEARE_FILE,
    MULTI30K_LICENSE,
    multi30k_file,
    load_tatoeba_en_zh,
    load_tiny_shakespeare,
    load_multi30k,
    split_by_source,
    group_by_source,
    synthetic_copy_task,
    NUM_SPECIAL_TOKENS,
)
from .text import (
    english_normalizer,
    chinese_normalizer,
    normalize_english,
    normalize_chinese,
)
from .tokenization import (
    PAD_ID,
    BOS_ID,
    EOS_ID,
    UNK_ID,
    PAD,
    BOS,
    EOS,
    UNK,
    SPECIAL_TOKENS,
    TextTokenizer,
    train_bpe_tokenizer,
    train_char_tokenizer,
    train_tokenizers,
)
from .batching import (
    shift_right,
    Batch,
    collate_batch,
    TranslationDataset,
    BucketBatchSampler,
    padding_fraction,
    make_loader,
)
from .pipeline import (
    DataConfig,
    TranslationData,
    make_dataloaders,
    DATASETS,
)

from .lm import CharVocabulary, chinese_side, split_text_ids, lm_batches

__all__ = [
    "DataNotFoundError",
    "DataValidationError",
    "Source",
    "RemoteFile",
    "cache_dir",
    "resolve_file",
    "download_file",
    "DATA_ENV_VAR",
    "CACHE_ENV_VAR",
    "USER_AGENT",
    "read_utf8",
    "validate_gzip_lines",
    "validate_tab_pairs",
    "validate_text",
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
    "english_normalizer",
    "chinese_normalizer",
    "normalize_english",
    "normalize_chinese",
    "PAD_ID",
    "BOS_ID",
    "EOS_ID",
    "UNK_ID",
    "PAD",
    "BOS",
    "EOS",
    "UNK",
    "SPECIAL_TOKENS",
    "TextTokenizer",
    "train_bpe_tokenizer",
    "train_char_tokenizer",
    "train_tokenizers",
    "shift_right",
    "Batch",
    "collate_batch",
    "TranslationDataset",
    "BucketBatchSampler",
    "padding_fraction",
    "make_loader",
    "DataConfig",
    "TranslationData",
    "make_dataloaders",
    "DATASETS",
    "CharVocabulary",
    "chinese_side",
    "split_text_ids",
    "lm_batches",
]
