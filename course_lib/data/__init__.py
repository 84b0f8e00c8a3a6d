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

from ._batching import *  # noqa: F403 - each submodule's __all__ is the public API
from ._batching import __all__ as batching_names
from ._datasets import *  # noqa: F403
from ._datasets import __all__ as datasets_names
from ._files import *  # noqa: F403
from ._files import __all__ as files_names
from ._pipeline import *  # noqa: F403
from ._pipeline import __all__ as pipeline_names
from ._text import *  # noqa: F403
from ._text import __all__ as text_names
from ._tokenize import *  # noqa: F403
from ._tokenize import __all__ as tokenize_names

__all__ = [*files_names, *datasets_names, *text_names, *tokenize_names, *batching_names, *pipeline_names]
del files_names, datasets_names, text_names, tokenize_names, batching_names, pipeline_names
