"""Tokenizers built with the :mod:`tokenizers` library (chapter 9).

Two kinds, both plain :class:`tokenizers.Tokenizer` objects wrapped in
:class:`TextTokenizer`:

* ``"bpe"`` — subword byte-pair encoding for English (and German): text is
  normalised (:func:`english_normalizer`, optionally lower-cased), spaces become
  ``▁`` (the SentencePiece "Metaspace" convention), punctuation is split off,
  then BPE merges learned on the training text are applied. Decoding turns
  ``▁`` back into spaces, so ``decode(encode(x)) == normalize(x)`` for any text
  whose characters were seen in training.
* ``"char"`` — one token per character for Chinese: text is normalised
  (:func:`chinese_normalizer`), split on every character (``Split`` on the
  regex ``.``) and looked up in a word-level vocabulary of the characters seen
  in training. Decoding joins the characters without spaces (``Fuse`` decoder).

Special tokens have fixed ids in both: ``<pad>``=0, ``<bos>``=1, ``<eos>``=2,
``<unk>``=3.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Regex, Tokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from ..validation import check_int
from .text import chinese_normalizer, english_normalizer

__all__ = [
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
]

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
"""The special tokens, in id order: ``SPECIAL_TOKENS[PAD_ID] == "<pad>"`` etc."""

_FORMAT = "course_lib.data.TextTokenizer"
_KINDS = ("bpe", "char")


class TextTokenizer:
    """A trained tokenizer with the course's special ids and a small, explicit API.

    Wraps a :class:`tokenizers.Tokenizer` (available as ``.tokenizer``). Build
    one with :func:`train_bpe_tokenizer`, :func:`train_char_tokenizer`,
    :func:`train_tokenizers`, :meth:`from_json` or :meth:`load`.

    Args:
        tokenizer: a :class:`tokenizers.Tokenizer` whose vocabulary maps
            ``<pad> <bos> <eos> <unk>`` to ``0 1 2 3``.
        kind: ``"bpe"`` or ``"char"`` (recorded for saving and display).
        lowercase: whether the normaliser lower-cases (recorded for display).

    Raises:
        ValueError: unknown ``kind`` or special tokens at other ids.
        TypeError: ``tokenizer`` is not a ``tokenizers.Tokenizer``.

    Source: chapter 9.
    """

    pad_id = PAD_ID
    bos_id = BOS_ID
    eos_id = EOS_ID
    unk_id = UNK_ID

    def __init__(self, tokenizer: Tokenizer, kind: str, lowercase: bool = False) -> None:
        if not isinstance(tokenizer, Tokenizer):
            raise TypeError(f"tokenizer must be a tokenizers.Tokenizer; got {type(tokenizer).__name__}")
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}; got {kind!r}")
        for want_id, token in enumerate(SPECIAL_TOKENS):
            got = tokenizer.token_to_id(token)
            if got != want_id:
                raise ValueError(f"special token {token} must have id {want_id}; the tokenizer gives {got}")
        self.tokenizer = tokenizer
        self.kind = kind
        self.lowercase = bool(lowercase)

    # ------------------------------------------------------------------ sizes and lookups
    @property
    def vocab_size(self) -> int:
        """Number of ids, special tokens included (the embedding table's row count)."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"TextTokenizer(kind={self.kind!r}, vocab_size={self.vocab_size}, lowercase={self.lowercase})"

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token`` (``None`` if it is not in the vocabulary)."""
        return self.tokenizer.token_to_id(token)

    def id_to_token(self, id: int) -> str | None:  # noqa: A002 - mirrors tokenizers' API
        """The token string of ``id`` (``None`` if out of range)."""
        return self.tokenizer.id_to_token(int(id))

    def normalize(self, text: str) -> str:
        """Apply this tokenizer's normaliser only (what ``decode(encode(text))`` should give back)."""
        _check_text(text, "text")
        return self.tokenizer.normalizer.normalize_str(text)

    def tokens(self, text: str) -> list[str]:
        """The token strings of ``text`` (no special tokens), e.g. ``['▁Hello', ',', '▁world']``."""
        _check_text(text, "text")
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    # ------------------------------------------------------------------ encode / decode
    def encode(self, text: str, add_bos: bool = False, add_eos: bool = True) -> list[int]:
        """Token ids of one text.

        Args:
            text: a string (normalised here; no need to clean it first).
            add_bos: prepend ``<bos>`` (id 1).
            add_eos: append ``<eos>`` (id 2) — the default, as a source sentence
                and a decoder target both end with it.

        Returns:
            a list of ints in ``[0, vocab_size)``; characters never seen in
            training become ``<unk>`` (id 3).

        Raises:
            TypeError: ``text`` is not a ``str``.
        """
        _check_text(text, "text")
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return ([BOS_ID] if add_bos else []) + ids + ([EOS_ID] if add_eos else [])

    def encode_batch(self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = True) -> list[list[int]]:
        """:meth:`encode` for many texts at once (the Rust side runs them in parallel).

        Raises:
            TypeError: ``texts`` is a single ``str`` or holds a non-``str``.
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str, not one str (use encode)")
        texts = list(texts)
        for i, t in enumerate(texts):
            _check_text(t, f"texts[{i}]")
        encs = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        pre = [BOS_ID] if add_bos else []
        post = [EOS_ID] if add_eos else []
        return [pre + e.ids + post for e in encs]

    def decode(self, ids, stop_at_eos: bool = True) -> str:
        """Text of a sequence of ids.

        ``<pad>`` and ``<bos>`` are dropped; decoding stops at the first ``<eos>``
        (or, with ``stop_at_eos=False``, ``<eos>`` is dropped too); ``<unk>`` is
        kept as the text ``"<unk>"`` so that unknown characters stay visible.
        BPE tokens are joined with spaces restored from ``▁``; characters are
        joined without spaces.

        Args:
            ids: a list of ints or a 1-D integer tensor, shape ``(seq_len,)``.
            stop_at_eos: cut at the first ``<eos>`` (what generated output needs).

        Returns:
            the decoded string.

        Raises:
            ValueError: ``ids`` is not 1-D, or an id is outside ``[0, vocab_size)``.
        """
        ids = _as_id_list(ids, "ids")
        out = []
        for i in ids:
            if i < 0 or i >= self.vocab_size:
                raise ValueError(f"ids holds {i}, outside [0, {self.vocab_size})")
            if i == EOS_ID:
                if stop_at_eos:
                    break
                continue
            if i in (PAD_ID, BOS_ID):
                continue
            out.append(i)
        return self.tokenizer.decode(out, skip_special_tokens=False)

    def decode_batch(self, ids, stop_at_eos: bool = True) -> list[str]:
        """:meth:`decode` for each row of a ``(batch, seq_len)`` tensor or a list of id lists."""
        if hasattr(ids, "tolist"):
            if getattr(ids, "dim", lambda: 2)() != 2:
                raise ValueError(f"ids must have shape (batch, seq_len); got {tuple(ids.shape)}")
            ids = ids.tolist()
        return [self.decode(row, stop_at_eos=stop_at_eos) for row in ids]

    # ------------------------------------------------------------------ saving
    def to_json(self) -> str:
        """Serialise to a JSON string (store it in a checkpoint; read back with :meth:`from_json`)."""
        return json.dumps(
            {
                "format": _FORMAT,
                "version": 1,
                "kind": self.kind,
                "lowercase": self.lowercase,
                "tokenizer": json.loads(self.tokenizer.to_str()),
            },
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: str) -> "TextTokenizer":
        """Rebuild a tokenizer from :meth:`to_json`'s output.

        Raises:
            ValueError: not JSON, or not a serialised :class:`TextTokenizer`.
        """
        try:
            obj = json.loads(text)
        except (TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"text is not a serialised TextTokenizer (invalid JSON: {exc})") from exc
        if not isinstance(obj, dict) or obj.get("format") != _FORMAT or "tokenizer" not in obj:
            raise ValueError(f"text is not a serialised TextTokenizer (expected format {_FORMAT!r})")
        tok = Tokenizer.from_str(json.dumps(obj["tokenizer"]))
        return cls(tok, kind=obj["kind"], lowercase=obj.get("lowercase", False))

    def save(self, path: str | os.PathLike) -> None:
        """Write :meth:`to_json` to ``path`` (UTF-8)."""
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TextTokenizer":
        """Read a tokenizer written by :meth:`save`.

        Raises:
            FileNotFoundError: no such file.
            ValueError: the file is not a serialised :class:`TextTokenizer`.
        """
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextTokenizer) and self.to_json() == other.to_json()

    __hash__ = None  # equality is by content


def _check_text(text, name: str) -> None:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str; got {type(text).__name__}")


def _as_id_list(ids, name: str) -> list[int]:
    if hasattr(ids, "tolist"):
        if hasattr(ids, "dim") and ids.dim() != 1:
            raise ValueError(f"{name} must be 1-D (seq_len,); got shape {tuple(ids.shape)} (use decode_batch)")
        ids = ids.tolist()
    try:
        return [int(i) for i in ids]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a sequence of ints; got {ids!r:.80}") from exc


def _texts(texts: Iterable[str], name: str) -> list[str]:
    if isinstance(texts, str):
        raise TypeError(f"{name} must be an iterable of str, not one str")
    texts = list(texts)
    if not texts:
        raise ValueError(f"{name} is empty; a tokenizer needs training text")
    for i, t in enumerate(texts):
        _check_text(t, f"{name}[{i}]")
    return texts


def train_bpe_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 4000,
    *,
    lowercase: bool = False,
    min_frequency: int = 2,
) -> TextTokenizer:
    """Train a subword (BPE) tokenizer, e.g. for English.

    Args:
        texts: training sentences (use the training split only).
        vocab_size: target vocabulary size including the 4 special tokens; the
            result can be smaller when the text has fewer possible merges.
        lowercase: lower-case before tokenising (smaller vocabulary, but the
            output is lower-case too).
        min_frequency: a pair must occur this often to be merged.

    Returns:
        a :class:`TextTokenizer` of kind ``"bpe"``.

    Raises:
        ValueError: ``vocab_size`` < 5 or ``min_frequency`` < 1, or no text.
        TypeError: ``texts`` is a str or holds a non-str.

    Source: Sennrich et al. (2016), "Neural Machine Translation of Rare Words
    with Subword Units"; the ``▁`` convention of SentencePiece (Kudo &
    Richardson, 2018); chapter 9.
    """
    check_int(vocab_size, "vocab_size", len(SPECIAL_TOKENS) + 1)
    check_int(min_frequency, "min_frequency", 1)
    texts = _texts(texts, "texts")
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.normalizer = english_normalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True),
            pre_tokenizers.Punctuation(behavior="isolated"),
        ]
    )
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return TextTokenizer(tok, kind="bpe", lowercase=lowercase)


def train_char_tokenizer(
    texts: Iterable[str],
    *,
    min_frequency: int = 1,
    max_vocab_size: int | None = None,
) -> TextTokenizer:
    """Train a character-level tokenizer, e.g. for Chinese (one token per character).

    Every character of the normalised text (CJK character, Latin letter, digit,
    punctuation mark, the rare space between Latin words) is one token.

    Args:
        texts: training sentences (use the training split only).
        min_frequency: a character must occur this often to get an id (rarer
            ones become ``<unk>``).
        max_vocab_size: keep at most this many ids (the most frequent
            characters), special tokens included; ``None`` = no limit.

    Returns:
        a :class:`TextTokenizer` of kind ``"char"``.

    Raises:
        ValueError: ``min_frequency`` < 1, ``max_vocab_size`` < 5, or no text.
        TypeError: ``texts`` is a str or holds a non-str.

    Source: character-level Chinese is the usual baseline for small zh models; chapter 9.
    """
    check_int(min_frequency, "min_frequency", 1)
    check_int(max_vocab_size, "max_vocab_size", len(SPECIAL_TOKENS) + 1, optional=True)
    texts = _texts(texts, "texts")
    tok = Tokenizer(models.WordLevel(unk_token=UNK))
    tok.normalizer = chinese_normalizer()
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    trainer = trainers.WordLevelTrainer(
        vocab_size=max_vocab_size if max_vocab_size is not None else 10_000_000,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return TextTokenizer(tok, kind="char")


def train_tokenizers(
    pairs: Sequence[tuple],
    *,
    src_kind: str = "bpe",
    tgt_kind: str = "char",
    src_vocab_size: int | None = 4000,
    tgt_vocab_size: int | None = None,
    lowercase: bool = False,
    char_min_frequency: int = 1,
) -> tuple[TextTokenizer, TextTokenizer]:
    """Train one tokenizer per side of a list of ``(src, tgt)`` pairs.

    The defaults fit Tatoeba English -> Chinese: BPE for the source,
    characters for the target. Pass the **training split only**, so that the
    validation and test sets measure generalisation honestly.

    Args:
        pairs: ``(src_text, tgt_text, ...)`` tuples.
        src_kind, tgt_kind: ``"bpe"`` or ``"char"``.
        src_vocab_size, tgt_vocab_size: for ``"bpe"`` the target vocabulary size
            (``None`` -> 4000); for ``"char"`` an optional cap (``None`` = every
            character seen at least ``char_min_frequency`` times).
        lowercase: lower-case the BPE side(s).
        char_min_frequency: see :func:`train_char_tokenizer`.

    Returns:
        ``(src_tokenizer, tgt_tokenizer)``.

    Raises:
        ValueError: unknown kind, empty ``pairs``, or a malformed pair.

    Source: chapter 9.
    """
    if isinstance(pairs, str) or not isinstance(pairs, Sequence) or len(pairs) == 0:
        raise ValueError("pairs must be a non-empty sequence of (src, tgt) tuples")
    for name, kind in (("src_kind", src_kind), ("tgt_kind", tgt_kind)):
        if kind not in _KINDS:
            raise ValueError(f"{name} must be one of {_KINDS}; got {kind!r}")
    for i, p in enumerate(pairs):
        if not isinstance(p, (tuple, list)) or len(p) < 2:
            raise ValueError(f"pairs[{i}] must be a (src, tgt) tuple; got {p!r}")

    def build(kind: str, texts: list[str], size: int | None) -> TextTokenizer:
        if kind == "bpe":
            return train_bpe_tokenizer(texts, size if size is not None else 4000, lowercase=lowercase)
        return train_char_tokenizer(texts, min_frequency=char_min_frequency, max_vocab_size=size)

    src = build(src_kind, [p[0] for p in pairs], src_vocab_size)
    tgt = build(tgt_kind, [p[1] for p in pairs], tgt_vocab_size)
    return src, tgt
