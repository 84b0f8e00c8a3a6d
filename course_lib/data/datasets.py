"""The course's data sets, a grouped train/valid/test split and a synthetic task (chapter 9)."""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import warnings
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from ..validation import check_int, check_probability
from .files import (
    read_utf8,
    DataValidationError,
    RemoteFile,
    Source,
    resolve_file,
    validate_gzip_lines,
    validate_tab_pairs,
    validate_text,
)
from .text import chinese_normalizer, english_normalizer

__all__ = [
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
]

NUM_SPECIAL_TOKENS = 4
"""Ids ``0..3`` are ``<pad> <bos> <eos> <unk>``; real tokens start at 4."""

TATOEBA_ATTRIBUTION = (
    "Tatoeba English-Mandarin sentence pairs from the Tatoeba Project (https://tatoeba.org), "
    "as packaged by ManyThings.org (https://www.manythings.org/anki/), licensed under "
    "CC-BY 2.0 FR (https://creativecommons.org/licenses/by/2.0/fr/). Each pair's third "
    "column names its Tatoeba sentence numbers and contributors."
)
"""Credit line to show wherever the Tatoeba pairs are used (required by CC-BY 2.0 FR)."""

TATOEBA_FILE = RemoteFile(
    relpath="tatoeba-cmn-eng/cmn.txt",
    sources=(
        # canonical: re-published upstream from time to time, so no fixed hash
        Source("http://www.manythings.org/anki/cmn-eng.zip", sha256=None, member="cmn.txt"),
        # commit-pinned copy, byte-identical to the course's shared copy (29,155 pairs)
        Source(
            "https://raw.githubusercontent.com/13luoyu/Transformer-machine-translation/"
            "b172d4aa468126c16f51dbf75797aaff77cf787e/cmn.txt",
            sha256="aa264a2447b26ab7c9d413f8321f9e2a779fd134b5118306b6e26a3499b3926e",
        ),
    ),
    description="Tatoeba English-Mandarin pairs",
    validate=partial(validate_tab_pairs, min_pairs=10_000),
    note="License: CC-BY 2.0 FR (tatoeba.org, manythings.org/anki); redistributable with attribution.",
)
"""Where ``cmn.txt`` comes from: the manythings.org zip, then a checksummed, commit-pinned copy."""

TINY_SHAKESPEARE_FILE = RemoteFile(
    relpath="tinyshakespeare/input.txt",
    sources=(
        Source(
            "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
            sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        ),
    ),
    description="tiny-shakespeare",
    validate=partial(validate_text, min_chars=1_000_000),
)
"""Where tiny-shakespeare (1,115,394 characters, public domain) comes from."""

MULTI30K_LICENSE = (
    "Multi30k (Elliott et al., 2016) is for non-commercial research and education only "
    "(the terms of Flickr30K): it is downloaded at run time and must never be redistributed "
    "(do not commit it or ship it in an image)."
)

_MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
_MULTI30K_FILES = {  # split -> (file stem, number of lines)
    "train": ("train", 29_000),
    "valid": ("val", 1_014),
    "test": ("test_2016_flickr", 1_000),
}
_MULTI30K_SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
}


def _multi30k_split(split: str) -> str:
    aliases = {"train": "train", "valid": "valid", "val": "valid", "validation": "valid", "test": "test"}
    if not isinstance(split, str) or split not in aliases:
        raise ValueError(f"split must be one of 'train', 'valid' (or 'val'), 'test'; got {split!r}")
    return aliases[split]


def multi30k_file(split: str, lang: str) -> RemoteFile:
    """The :class:`RemoteFile` of one Multi30k task-1 file (download-only, see :data:`MULTI30K_LICENSE`).

    Args:
        split: ``"train"``, ``"valid"`` (or ``"val"``) or ``"test"`` (test_2016_flickr).
        lang: ``"de"`` or ``"en"``.

    Returns:
        a :class:`RemoteFile` with relpath ``multi30k/<file>.<lang>.gz``.

    Raises:
        ValueError: unknown ``split`` or ``lang``.
    """
    stem, n_lines = _MULTI30K_FILES[_multi30k_split(split)]
    if lang not in ("de", "en"):
        raise ValueError(f"lang must be 'de' or 'en'; got {lang!r}")
    name = f"{stem}.{lang}.gz"
    return RemoteFile(
        relpath=f"multi30k/{name}",
        sources=(Source(_MULTI30K_URL + name, sha256=_MULTI30K_SHA256[name]),),
        description=f"Multi30k {split} ({lang})",
        validate=partial(validate_gzip_lines, n_lines=n_lines),
        note=MULTI30K_LICENSE,
    )


# ----------------------------------------------------------------------------- loaders


def load_tatoeba_en_zh(
    root: str | os.PathLike | None = None,
    *,
    with_attribution: bool = False,
    normalize: bool = True,
    download: bool = True,
) -> list[tuple[str, str]] | list[tuple[str, str, str]]:
    """Load the Tatoeba English-Mandarin pairs (manythings.org ``cmn.txt``).

    Each line of the file is ``english<TAB>chinese<TAB>attribution``; line 1
    starts with a UTF-8 byte-order mark. English sentences repeat with several
    Chinese translations (29,155 pairs, 27,661 distinct English sentences in
    the course's copy); both traditional and simplified characters occur.
    Blank lines are skipped silently; malformed lines (fewer than two columns,
    or an empty side after normalisation) are skipped with one
    :class:`UserWarning` giving their count. File order is kept.

    Licence: CC-BY 2.0 FR — show :data:`TATOEBA_ATTRIBUTION` where you use it.

    Args:
        root: optional folder holding ``tatoeba-cmn-eng/cmn.txt`` (see
            :func:`resolve_file` for the full search order).
        with_attribution: also return each pair's attribution column.
        normalize: apply :func:`normalize_english` / :func:`normalize_chinese`
            (NFKC, quotes, whitespace, punctuation; see ``course_lib.data.text``);
            ``False`` only strips surrounding whitespace.
        download: allow a download when there is no local copy.

    Returns:
        ``[(english, chinese), ...]``, or ``[(english, chinese, attribution), ...]``
        with ``with_attribution=True``.

    Raises:
        DataNotFoundError: no local copy and no download possible.
        DataValidationError: the file is not UTF-8.

    Source: Tatoeba (https://tatoeba.org) via https://www.manythings.org/anki/; chapter 9.
    """
    path = resolve_file(TATOEBA_FILE, root, download=download)
    return _read_tab_pairs(path, with_attribution=with_attribution, normalize=normalize)


def _read_tab_pairs(path: Path, *, with_attribution: bool, normalize: bool):
    text = read_utf8(path, "utf-8-sig", name=str(path))
    norm_en = english_normalizer().normalize_str if normalize else str.strip
    norm_zh = chinese_normalizer().normalize_str if normalize else str.strip
    out: list = []
    bad: list[int] = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r").lstrip("\ufeff")
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 2:
            bad.append(lineno)
            continue
        en, zh = norm_en(cols[0]), norm_zh(cols[1])
        if not en or not zh:
            bad.append(lineno)
            continue
        if with_attribution:
            out.append((en, zh, "\t".join(cols[2:]).strip()))
        else:
            out.append((en, zh))
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
        warnings.warn(
            f"{path}: skipped {len(bad)} malformed line(s) (need 'english<TAB>chinese'; lines {shown})",
            UserWarning,
            stacklevel=3,
        )
    return out


def load_tiny_shakespeare(root: str | os.PathLike | None = None, *, download: bool = True) -> str:
    """Load tiny-shakespeare as one string (1,115,394 characters, 65 distinct).

    Args:
        root: optional folder holding ``tinyshakespeare/input.txt``.
        download: allow a download when there is no local copy.

    Returns:
        the whole text, unchanged (newlines kept).

    Raises:
        DataNotFoundError: no local copy and no download possible.

    Source: Karpathy's char-rnn (public-domain text); a character-level language-modelling corpus.
    """
    path = resolve_file(TINY_SHAKESPEARE_FILE, root, download=download)
    return path.read_bytes().decode("utf-8")


def load_multi30k(
    split: str,
    root: str | os.PathLike | None = None,
    *,
    normalize: bool = True,
    download: bool = True,
) -> list[tuple[str, str]]:
    """Load one split of Multi30k task 1 (German-English image captions), raw text.

    **Download-only**: the licence (non-commercial research and education, the
    terms of Flickr30K) forbids redistribution, so the course never ships these
    files; they are fetched at run time into the user cache (or read from
    ``$COURSE_LIB_DATA/multi30k/``). Sizes: train 29,000, valid 1,014, test
    (``test_2016_flickr``) 1,000 pairs.

    Args:
        split: ``"train"``, ``"valid"`` (or ``"val"``) or ``"test"``.
        root: optional folder holding ``multi30k/<file>.{de,en}.gz``.
        normalize: apply :func:`normalize_english` to both sides (NFKC, quotes,
            whitespace); ``False`` only strips.
        download: allow a download when there is no local copy.

    Returns:
        ``[(german, english), ...]`` in file order.

    Raises:
        ValueError: unknown ``split``.
        DataNotFoundError: no local copy and no download possible.
        DataValidationError: the two files do not have the same number of lines.

    Source: Elliott et al. (2016), "Multi30K: Multilingual English-German Image
    Descriptions"; https://github.com/multi30k/dataset; chapter 9 (optional task).
    """
    split = _multi30k_split(split)
    sides = []
    for lang in ("de", "en"):
        path = resolve_file(multi30k_file(split, lang), root, download=download)
        with gzip.open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
        sides.append(text.rstrip("\n").split("\n"))
    de, en = sides
    if len(de) != len(en):
        raise DataValidationError(f"Multi30k {split}: {len(de)} German lines but {len(en)} English lines")
    norm = english_normalizer().normalize_str if normalize else str.strip
    return [(norm(d), norm(e)) for d, e in zip(de, en)]


# ----------------------------------------------------------------------------- splits


def _source_key(sentence: str) -> str:
    return " ".join(sentence.split()).casefold()


def split_by_source(
    pairs: Sequence[tuple],
    valid_fraction: float = 0.05,
    test_fraction: float = 0.05,
    seed: int = 0,
) -> tuple[list, list, list]:
    """Split pairs into train/valid/test so that no source sentence spans two splits.

    Pairs are grouped by their first element (the source sentence, compared
    case-insensitively and with whitespace collapsed), so an English sentence
    and *all* its translations land in the same split — otherwise the model
    would be tested on sentences it was trained on. Each group goes to a split
    by a hash of ``(seed, sentence)`` (sha256, independent of ``PYTHONHASHSEED``
    and of the other pairs): the split is deterministic, and a sentence keeps
    its split when the corpus grows upstream. Sizes are therefore close to, not
    exactly, the requested fractions of the *pairs* (on Tatoeba's 29,155 pairs
    the defaults give about 1,450 test and 1,450 valid pairs). Order within
    each split follows the input.

    Args:
        pairs: a sequence of tuples ``(source, target, ...)``.
        valid_fraction: share of source sentences for validation, in ``[0, 1)``.
        test_fraction: share of source sentences for testing, in ``[0, 1)``.
        seed: changes which sentences are held out.

    Returns:
        ``(train, valid, test)``: three lists of the input tuples.

    Raises:
        ValueError: a fraction outside ``[0, 1)``, their sum ``>= 1``, or an
            element of ``pairs`` that is not a tuple/list whose first item is a str.

    Source: standard practice (grouped hold-out); chapter 9.
    """
    for name, frac in (("valid_fraction", valid_fraction), ("test_fraction", test_fraction)):
        check_probability(frac, name)
    if valid_fraction + test_fraction >= 1:
        raise ValueError(
            f"valid_fraction + test_fraction must be < 1; got {valid_fraction} + {test_fraction}"
        )
    check_int(seed, "seed", None)
    train: list = []
    valid: list = []
    test: list = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) < 2 or not isinstance(pair[0], str):
            raise ValueError(f"pairs[{i}] must be a (source, target, ...) tuple of str; got {pair!r}")
        digest = hashlib.sha256(f"{seed}\x00{_source_key(pair[0])}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2.0**64
        if u < test_fraction:
            test.append(pair)
        elif u < test_fraction + valid_fraction:
            valid.append(pair)
        else:
            train.append(pair)
    return train, valid, test


def group_by_source(pairs: Sequence[tuple]) -> list[tuple[str, list[str]]]:
    """Group pairs by source sentence: ``[(source, [target, target, ...]), ...]``.

    Useful for BLEU with all references: an English sentence with three Chinese
    translations is scored once, against all three. Grouping uses the exact
    source string; groups appear in the order of their first pair.

    Args:
        pairs: ``(source, target, ...)`` tuples.

    Returns:
        a list of ``(source, targets)``.

    Raises:
        ValueError: an element is not a tuple/list of at least two items.
    """
    groups: dict[str, list[str]] = {}
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) < 2:
            raise ValueError(f"pairs[{i}] must be a (source, target, ...) tuple; got {pair!r}")
        groups.setdefault(pair[0], []).append(pair[1])
    return list(groups.items())


# ----------------------------------------------------------------------------- synthetic


def synthetic_copy_task(
    n: int,
    min_len: int,
    max_len: int,
    vocab_size: int,
    reverse: bool = False,
    seed: int = 0,
) -> list[tuple[list[int], list[int]]]:
    """Random sequences and their copies (or reversals): a task needing no file.

    The first sanity check for an encoder-decoder: a correct model learns to
    copy in a few hundred steps; one with a broken mask or a shifted target
    does not. Token ids are drawn uniformly from ``[4, vocab_size)`` — ids
    ``0..3`` are reserved for ``<pad> <bos> <eos> <unk>`` — and carry no special
    tokens; :meth:`TranslationDataset.from_ids` appends ``<eos>``.

    Args:
        n: number of examples (>= 1).
        min_len: shortest sequence (>= 1).
        max_len: longest sequence (>= min_len), lengths uniform in ``[min_len, max_len]``.
        vocab_size: total vocabulary size including the 4 special ids (>= 5).
        reverse: target is the reversed source instead of a copy.
        seed: the same seed always gives the same examples (Python's
            :class:`random.Random`, stable across platforms).

    Returns:
        ``[(src_ids, tgt_ids), ...]``, two lists of ints each, same length.

    Raises:
        ValueError: an argument out of range (the message names it).

    Source: the copy task of the Annotated Transformer (Rush, 2018); chapter 9.
    """
    for name, value, low in (("n", n, 1), ("min_len", min_len, 1), ("vocab_size", vocab_size, NUM_SPECIAL_TOKENS + 1)):
        check_int(value, name, low)
    check_int(max_len, "max_len", min_len, hint=" (min_len)")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(min_len, max_len)
        src = [rng.randrange(NUM_SPECIAL_TOKENS, vocab_size) for _ in range(length)]
        tgt = src[::-1] if reverse else list(src)
        out.append((src, tgt))
    return out
