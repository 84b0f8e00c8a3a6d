#!/usr/bin/env python3
"""Make course_book/fonts/NotoSansSC-Regular-subset.ttf, the Chinese font of the figures.

The subset keeps, of Noto Sans SC Regular (SIL OFL 1.1, see course_book/fonts/README.md):

* every character of the course's Chinese data: the Chinese side of the Tatoeba
  English-Mandarin pairs, raw and normalised as course_lib.data loads them, and
  every character of both tokenizer vocabularies of checkpoints/en-zh.pt;
* every character of GB2312 (all two-byte code points, decoded with Python's
  gb2312 codec: the 6,763 hanzi of everyday Simplified Chinese, its punctuation
  and symbols);
* CJK Symbols and Punctuation (U+3000-U+303F), Halfwidth and Fullwidth Forms
  (U+FF00-U+FFEF) and printable ASCII;

as far as the input font has them (it must have every character of the data).

Usage, from the repository root (the data found through COURSE_LIB_DATA, or --data)::

    npm pack @expo-google-fonts/noto-sans-sc@0.4.3
    tar xzf expo-google-fonts-noto-sans-sc-0.4.3.tgz package/400Regular/NotoSansSC_400Regular.ttf
    python scripts/make_cjk_font.py package/400Regular/NotoSansSC_400Regular.ttf

The output depends only on the input font, the data and the checkpoint: the
same inputs give the same bytes (the input's timestamps are kept).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "course_book" / "fonts" / "NotoSansSC-Regular-subset.ttf"
CHECKPOINT = REPO / "checkpoints" / "en-zh.pt"
# NotoSansSC_400Regular.ttf of @expo-google-fonts/noto-sans-sc 0.4.3 (Google Fonts v40, font version 2.004).
INPUT_SHA256 = "d45f67f0a7c0ca3f256950777ce6a61cc7ce5f9696d02900cbbaac25f8aa7d16"


def gb2312_characters() -> set[str]:
    """Every character of GB2312: all two-byte code points the gb2312 codec decodes."""
    chars = set()
    for high in range(0xA1, 0xF8):
        for low in range(0xA1, 0xFF):
            try:
                chars.add(bytes([high, low]).decode("gb2312"))
            except UnicodeDecodeError:  # an unassigned code point
                pass
    return chars


def data_characters(data_root: str | None, checkpoint: Path) -> set[str]:
    """The characters of the Chinese data and of the checkpoint's tokenizer vocabularies."""
    sys.path.insert(0, str(REPO))
    from course_lib.data import TextTokenizer, load_tatoeba_en_zh
    from course_lib.training import load_checkpoint

    chars = set()
    for normalize in (False, True):
        for _, chinese in load_tatoeba_en_zh(data_root, normalize=normalize, download=False):
            chars.update(chinese)
    for text in load_checkpoint(checkpoint)["tokenizers"].values():
        chars.update("".join(TextTokenizer.from_json(text).tokenizer.get_vocab()))
    # Spaces and invisible format characters (e.g. U+200B in the raw data) are never drawn.
    return {c for c in chars if not c.isspace() and unicodedata.category(c) != "Cf"}


def wanted_characters(data_root: str | None, checkpoint: Path) -> tuple[set[str], set[str]]:
    """(characters of the data, all characters to keep)."""
    data = data_characters(data_root, checkpoint)
    ranges = [range(0x20, 0x7F), range(0x3000, 0x3040), range(0xFF00, 0xFFF0)]
    extra = {chr(code) for r in ranges for code in r} | gb2312_characters()
    return data, data | extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("font", type=Path, help="NotoSansSC_400Regular.ttf (a TrueType font)")
    parser.add_argument("--data", help="folder laid out like ../shared/data (default: COURSE_LIB_DATA)")
    parser.add_argument("--checkpoint", type=Path, default=CHECKPOINT)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    from fontTools import subset
    from fontTools.ttLib import TTFont

    digest = hashlib.sha256(args.font.read_bytes()).hexdigest()
    if digest != INPUT_SHA256:
        print(f"note: {args.font} is not the documented input (sha256 {digest}); "
              "the output will differ from the committed font", file=sys.stderr)
    font = TTFont(args.font, recalcTimestamp=False)
    have = {chr(code) for code in font.getBestCmap()}
    data, wanted = wanted_characters(args.data, args.checkpoint)
    missing = sorted(data - have)
    if missing:
        shown = " ".join(f"U+{ord(c):04X}" for c in missing[:20])
        parser.error(f"{args.font} lacks {len(missing)} character(s) of the course's data: {shown}")
    keep = sorted(wanted & have)

    options = subset.Options()
    options.name_IDs = ["*"]          # keep the copyright, licence and version records
    options.name_languages = ["*"]
    options.notdef_outline = True     # a visible box for any character left out
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=[ord(c) for c in keep])
    subsetter.subset(font)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    font.save(args.out)

    out_digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    print(f"{args.out}: {len(keep)} characters ({len(data)} from the data), "
          f"{len(font.getGlyphOrder())} glyphs, {args.out.stat().st_size:,} bytes, sha256 {out_digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
