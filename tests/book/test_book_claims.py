"""Claims of exact equality in the book's prose are backed by what a cell printed (issue 23, item 5).

A recurring slip of the book: a sentence says that two computations give
"exactly the same" (or "identical", "bit for bit" equal) results while the cell
next to it prints a small non-zero difference (the KV cache's logits once
differed from recomputation by 3.6e-06 while the summary said "exactly the
same results"). This test finds every such phrase in the chapters' markdown
and in their concept checks, and requires, for each one, either

* a hedge in the same sentence ("almost", "nearly", "up to float rounding", ...),
* or an entry in ``CLAIMS`` below that names the cell whose printed output
  proves the equality: the printed line must contain the given text and show
  ``True`` or a zero, never a non-zero number such as ``3.6e-06``,
* or an entry in ``CLAIMS`` that says why the sentence is not a claim about
  floating-point results (kept short, read by a reviewer).

An unregistered phrase, a registered one that is no longer in the book, or
evidence that does not show exact equality fails with a message naming the
chapter and the sentence.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "book").glob("[01][0-9]_*.ipynb"))

EXACT = re.compile(
    r"\b(exactly the same|exactly equal|identical(?:ly)?|bit[- ]for[- ]bit|"
    r"the same (?:results?|logits|outputs?|numbers|values|gradients?)|"
    r"(?:results?|logits|outputs?|values) (?:are |is )?(?:exactly )?equal)\b",
    re.IGNORECASE,
)
HEDGE = re.compile(r"\b(almost|nearly|roughly|approximately|up to|float rounding|within|close to)\b", re.IGNORECASE)
# a printed number that is not zero: 3.6e-06, 0.0012, 2 (but not 0, 0.0, 0.000, 0.0e+00)
NONZERO = re.compile(r"(?<![\w.])(?!0+(?:\.0*)?(?:e[+-]?\d+)?(?![\w.]))\d+(?:\.\d*)?(?:e[+-]?\d+)?(?![\w.])", re.IGNORECASE)

# (chapter prefix, a fragment of the sentence) -> evidence {"cell": id, "prints": text} or {"not_float": reason}
CLAIMS: dict[tuple[str, str], dict[str, str]] = {
    ("01", "The arithmetic is identical in every bar"): {
        "not_float": "the same operations are run in every bar; a statement about the work, not about results"},
    ("04", "the two *the* rows are **identical**"): {
        "not_float": "both rows come from the same query vector and the same keys: one computation, repeated"},
    ("05", "the same output as with course_lib"): {
        "not_float": "a wrong answer of the concept check, marked wrong"},
    ("07", "both stacks receive exactly the same gradient at the top"): {
        "not_float": "by construction: the loss is sum(w * x_24), so its gradient is the tensor w itself in both stacks"},
}


def _sentence(text: str, start: int, end: int) -> str:
    """The sentence (or list item) around text[start:end], on one line."""
    left = max(text.rfind(". ", 0, start), text.rfind(".\n", 0, start), text.rfind("\n\n", 0, start),
               text.rfind("\n* ", 0, start), text.rfind("\n- ", 0, start))
    right = min((i for i in (text.find(". ", end), text.find(".\n", end), text.find("\n\n", end)) if i >= 0),
                default=len(text))
    return " ".join(text[left + 1:right + 1].split())


def exact_claims(path: Path) -> list[tuple[str, str]]:
    """(cell id, sentence) for every exact-equality phrase in the markdown and the concept check of a chapter."""
    found = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code" and not str(cell.get("id", "")).startswith("concept-check"):
            continue
        text = "".join(cell["source"])
        for match in EXACT.finditer(text):
            found.append((cell.get("id", ""), _sentence(text, match.start(), match.end())))
    return found


def printed_lines(path: Path, cell_id: str) -> list[str]:
    """The lines a code cell printed (streams and plain-text results), from the committed outputs."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell.get("id") == cell_id:
            text = ""
            for out in cell.get("outputs", []):
                text += "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
            return text.splitlines()
    raise KeyError(f"{path.name} has no cell {cell_id!r}")


def shows_equality(line: str, prints: str) -> bool:
    """True when the printed line, after the quoted text, reports True or only zeros."""
    rest = line.split(prints, 1)[1] if prints in line else line
    if re.search(r"\bFalse\b", rest):
        return False
    return bool(re.search(r"\bTrue\b", rest)) or not NONZERO.search(rest)


def check_chapter(path: Path, claims: dict = CLAIMS) -> list[str]:
    """Problems of one chapter: unbacked exact claims, evidence that shows a difference, stale entries."""
    prefix, problems, used = path.name[:2], [], set()
    for _cell_id, sentence in exact_claims(path):
        if HEDGE.search(sentence):
            continue
        keys = [key for key in claims if key[0] == prefix and key[1] in sentence]
        if not keys:
            problems.append(f"{path.name}: an exact-equality claim without evidence: {sentence!r} — hedge it, or "
                            "register in CLAIMS the cell that prints the equality")
            continue
        used.update(keys)
        entry = claims[keys[0]]
        if "not_float" in entry:
            continue
        lines = [line for line in printed_lines(path, entry["cell"]) if entry["prints"] in line]
        if not lines:
            problems.append(f"{path.name}: cell {entry['cell']} no longer prints {entry['prints']!r}")
        elif differing := [line for line in lines if not shows_equality(line, entry["prints"])]:
            problems.append(f"{path.name}: {sentence!r} claims exact equality, but cell {entry['cell']} prints "
                            f"{differing[0].strip()!r}")
    for key in claims:
        if key[0] == prefix and key not in used:
            problems.append(f"{path.name}: CLAIMS entry {key[1]!r} is no longer in the chapter; remove it")
    return problems


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_exact_claims_are_backed_by_their_cells(path):
    assert check_chapter(path) == []


def test_the_check_catches_the_kinds_of_slip_it_is_for(tmp_path):
    """A claim without an entry, a claim whose cell prints a non-zero difference, and a stale entry."""
    cells = [
        {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": [
            "The KV cache gives exactly the same results as recomputation.\n\nThe two sums are nearly identical."]},
        {"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": 1, "source": ["print(...)"],
         "outputs": [{"output_type": "stream", "name": "stdout",
                      "text": ["max |difference| 3.6e-06\n", "max |other difference| 0.0e+00\n", "tokens equal: True\n"]}]},
    ]
    path = tmp_path / "10_demo.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    unbacked = check_chapter(path, {})
    assert len(unbacked) == 1 and "exactly the same results" in unbacked[0]      # the hedged one passes
    wrong = check_chapter(path, {("10", "exactly the same results"): {"cell": "c1", "prints": "max |difference|"}})
    assert len(wrong) == 1 and "3.6e-06" in wrong[0]
    for prints in ("max |other difference|", "tokens equal:"):
        assert check_chapter(path, {("10", "exactly the same results"): {"cell": "c1", "prints": prints}}) == []
    stale = check_chapter(path, {("10", "exactly the same results"): {"not_float": "x"}, ("10", "gone"): {"not_float": "x"}})
    assert len(stale) == 1 and "no longer in the chapter" in stale[0]
