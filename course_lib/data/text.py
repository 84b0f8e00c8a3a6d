"""Text normalisation shared by the loaders and the tokenizers (chapter 9).

The rules are written once, as :mod:`tokenizers` normalizers, so that the
loaders (which clean the corpus) and the tokenizers (which clean whatever a
reader types into a demo) apply exactly the same transformation.

English (and any space-separated language; also German in Multi30k):
    1. Unicode NFKC (full-width letters -> ASCII, ``…`` -> ``...``, ligatures split);
    2. zero-width characters and the byte-order mark removed;
    3. curly quotes to straight ones: ``‘ ’ ‚ ‛ ′`` -> ``'`` and ``“ ” „ ‟ ″`` -> ``"``;
    4. every run of whitespace -> one space; leading/trailing spaces stripped;
    5. (tokenizer only, optional) lower-casing.

Chinese (character-level):
    1. Unicode NFKC (it turns the full-width ``，！？：；（）`` into ASCII, and
       ``﹐`` into ``,``), zero-width characters removed;
    2. whitespace removed, except one space between two Latin letters/digits
       (``他是一个 DJ 。`` -> ``他是一个DJ。``, but ``Tom Jackson`` keeps its space);
    3. the ASCII punctuation ``, ! ? : ; ( )`` becomes the full-width form of
       Chinese typography (``，！？：；（）``) — except ``,`` and ``:`` between
       two digits (``1,000``, ``3:30``). The corpus mixes both forms (``?``
       533 times, ``？`` 3,912 times); one form per symbol saves vocabulary and
       makes character-level BLEU fair;
    4. Chinese curly quotes ``“ ”`` and corner brackets ``「 」`` are kept (they
       are the standard Chinese quotation marks); traditional characters are
       kept as they are (no traditional -> simplified conversion).
"""

from __future__ import annotations

from tokenizers import Regex
from tokenizers import normalizers as N

__all__ = [
    "english_normalizer",
    "chinese_normalizer",
    "normalize_english",
    "normalize_chinese",
]

_ZERO_WIDTH = "[\u200b\u200c\u200d\u2060\ufeff]"


def english_normalizer(lowercase: bool = False) -> N.Normalizer:
    """The :mod:`tokenizers` normalizer for English-like text (see the module docstring).

    Args:
        lowercase: also lower-case (used by tokenizers, never by the loaders).

    Returns:
        a ``tokenizers.normalizers.Normalizer``; ``.normalize_str(text)`` applies it.
    """
    steps = [
        N.NFKC(),
        N.Replace(Regex(_ZERO_WIDTH), ""),
        N.Replace(Regex("[\u2018\u2019\u201a\u201b\u2032]"), "'"),
        N.Replace(Regex("[\u201c\u201d\u201e\u201f\u2033]"), '"'),
        N.Replace(Regex(r"\s+"), " "),
        N.Strip(),
    ]
    if lowercase:
        steps.append(N.Lowercase())
    return N.Sequence(steps)


def chinese_normalizer() -> N.Normalizer:
    """The :mod:`tokenizers` normalizer for Chinese text (see the module docstring).

    Returns:
        a ``tokenizers.normalizers.Normalizer``; ``.normalize_str(text)`` applies it.
    """
    return N.Sequence(
        [
            N.NFKC(),
            N.Replace(Regex(_ZERO_WIDTH), ""),
            N.Replace(Regex(r"\s+"), " "),
            N.Strip(),
            # keep a space only between two Latin letters/digits
            N.Replace(Regex(r"(?<![A-Za-z0-9]) | (?![A-Za-z0-9])"), ""),
            N.Replace(Regex(r"(?<![0-9]),|,(?![0-9])"), "\uff0c"),
            N.Replace(Regex(r"(?<![0-9]):|:(?![0-9])"), "\uff1a"),
            N.Replace("!", "\uff01"),
            N.Replace("?", "\uff1f"),
            N.Replace(";", "\uff1b"),
            N.Replace("(", "\uff08"),
            N.Replace(")", "\uff09"),
        ]
    )


def normalize_english(text: str) -> str:
    """Normalise one English (or German) sentence; see the module docstring for the rules.

    Args:
        text: any string.

    Returns:
        the normalised string (case kept).

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    return _apply(english_normalizer(), text)


def normalize_chinese(text: str) -> str:
    """Normalise one Chinese sentence; see the module docstring for the rules.

    Args:
        text: any string.

    Returns:
        the normalised string.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    return _apply(chinese_normalizer(), text)


def _apply(normalizer, text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str; got {type(text).__name__}")
    return normalizer.normalize_str(text)
