"""The one way a report shows text that came from the student's code.

Whatever the process running a submission sends back - an error text, the
notes its notebook loader wrote, its captured output - is the submission's own
output, never the grader's voice: the grader and the check command show it
only through these helpers, after their own lines, under a label that says
whose text it is, quoted line by line (``| ...``), and cut at a stated number
of characters. Hidden and look-alike characters are written out
(:func:`escape_hidden`), so a quoted line cannot pass for the grader's,
reorder itself, or hide what it says.

Only the standard library: the check command and the grader's parent import it.
"""

from __future__ import annotations

import unicodedata

__all__ = ["escape_hidden", "is_hidden", "quote_lines", "quoted_block", "one_line", "OUTPUT_LABEL",
           "ERROR_LABEL", "NOTES_LABEL", "QUOTE"]

#: the prefix of every quoted line
QUOTE = "| "
#: the labels (each followed by what was cut, see :func:`label`)
OUTPUT_LABEL = "Your code's output"
ERROR_LABEL = "Your code's error text"
NOTES_LABEL = "Messages about your notebook, as your code's process sent them"

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: blocks of combining marks that draw over the letter before them (strike-through, accents piled up ...)
_COMBINING_BLOCKS = ((0x0300, 0x036F), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF), (0xFE20, 0xFE2F))
#: characters that draw nothing although Unicode calls them letters or symbols
_BLANK_LOOKING = {0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800, 0x180E, 0x17B4, 0x17B5, 0x034F}


def is_hidden(ch: str) -> bool:
    """Whether ``ch`` is shown escaped in a report.

    Controls, format characters (bidi overrides, zero-width ...), surrogates, private-use and unassigned code
    points, line and paragraph separators, spaces other than U+0020, characters that draw nothing (U+3164
    Hangul filler, U+2800 braille blank ...), combining marks from the diacritic blocks (strokes and accents
    drawn over the letter before), and every non-ASCII look-alike of an ASCII character (its NFKC form is
    ASCII: full-width ``Ｓｃｏｒｅ``, mathematical ``𝐒``, superscript digits ...).
    """
    cp = ord(ch)
    if cp < 0x80:
        return not (0x20 <= cp < 0x7F)
    cat = unicodedata.category(ch)
    if cat in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs") or cp in _BLANK_LOOKING:
        return True
    if cat in ("Mn", "Me", "Mc") and any(lo <= cp <= hi for lo, hi in _COMBINING_BLOCKS):
        return True
    return unicodedata.normalize("NFKC", ch).isascii()


def _escaped(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    cp = ord(ch)
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


def escape_hidden(text: str, keep: str = "") -> str:
    """``text`` with every character of :func:`is_hidden` written out (``\\u3164``, ``\\x1b``, ``\\n``), except
    those in ``keep`` (``"\\n"`` keeps line ends). A CR LF or a lone CR counts as one line end. Text is first
    put in NFC form, so an accent typed as a combining mark stays a letter."""
    text = unicodedata.normalize("NFC", str(text).replace("\r\n", "\n"))
    if "\n" in keep:
        text = text.replace("\r", "\n")
    return "".join(_escaped(ch) if ch not in keep and is_hidden(ch) else ch for ch in text)


def _cut(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to ``limit`` characters (after escaping) and how many characters were left out."""
    return (text, 0) if len(text) <= limit else (text[:limit], len(text) - limit)


def label(what: str, limit: int, left_out: int = 0) -> str:
    """``Your code's error text (quoted, hidden characters escaped; at most 600 characters shown, 120 cut):``"""
    cut = f", {left_out} cut" if left_out else ""
    return f"{what} (quoted, hidden characters escaped; at most {limit} characters shown{cut}):"


def quote_lines(text: str, limit: int) -> tuple[list[str], int]:
    """Untrusted ``text`` as quoted lines (``| ...``), escaped and cut at ``limit`` characters;
    ``(lines, characters left out)``."""
    body, left_out = _cut(escape_hidden(str(text).strip("\n"), keep="\n"), limit)
    return [QUOTE + line for line in body.split("\n")], left_out


def quoted_block(what: str, texts: list[str], limit: int, indent: str = "") -> list[str]:
    """The lines that show ``texts`` (untrusted, one item each) as the submission's own output: a label that
    names ``what`` and the cap, then every text quoted (:func:`quote_lines`), all of them together cut at
    ``limit`` characters. ``[]`` when there is nothing to show."""
    texts = [t for t in texts if str(t).strip()]
    if not texts:
        return []
    out, budget, left_out = [], limit, 0
    for i, text in enumerate(texts):
        if budget <= 0:
            left_out += len(escape_hidden(str(text).strip("\n"), keep="\n"))
            continue
        lines, cut = quote_lines(text, budget)
        budget -= sum(len(line) - len(QUOTE) for line in lines)
        left_out += cut
        out += ([QUOTE.rstrip()] if i and out else []) + lines
    return [indent + label(what, limit, left_out), *(indent + line for line in out)]


def one_line(what: str, text: str, limit: int) -> str:
    """Untrusted ``text`` on one line after a label: ``what: «...»`` with line ends and every hidden
    character written out (``\\n``, ``\\u202e``), cut at ``limit`` characters (the cut is said)."""
    body, left_out = _cut(escape_hidden(str(text).strip()), limit)
    cut = f" ({left_out} more characters cut)" if left_out else ""
    return f"{what} (quoted, escaped): \u00ab{body}\u00bb{cut}"
