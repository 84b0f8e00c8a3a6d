"""Every figure of the book has words: a caption (numbered) and alternative text.

MyST-NB reads them from the metadata of the cell that draws the figure
(``"mystnb": {"figure": {"caption": ...}, "image": {"alt": ...}}``); without
them a screen reader announces the image's file name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[2] / "book"
CHAPTERS = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))


def _figure_cells(path: Path):
    for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        if cell["cell_type"] == "code" and any("image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
            yield index, cell


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_figure_has_a_caption_and_alt_text(path):
    missing = []
    for index, cell in _figure_cells(path):
        settings = cell.get("metadata", {}).get("mystnb", {})
        caption = settings.get("figure", {}).get("caption", "")
        alt = settings.get("image", {}).get("alt", "")
        if len(caption.strip()) < 20 or len(alt.strip()) < 20:
            missing.append(f"cell {index}: caption {caption!r:.40}, alt {alt!r:.40}")
        elif alt.strip().lower().endswith((".png", ".svg")) or len(alt) > 300:
            missing.append(f"cell {index}: alt text should describe the figure in under 300 characters")
    assert not missing, f"{path.name}: figures without words:\n" + "\n".join(missing)


def test_the_book_has_figures():
    assert sum(1 for p in CHAPTERS for _ in _figure_cells(p)) >= 40
