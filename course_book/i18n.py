"""Words in figures, explorers and quizzes, for the book's Chinese edition.

The book has one set of executed notebooks for both editions. Prose is
translated by Sphinx from gettext catalogs (``locales/zh_CN/LC_MESSAGES/book``);
what a cell *draws* cannot be: a figure is a picture. So each figure,
explorer and quiz carries, next to its usual outputs, its Chinese version
under one extra MIME type, :data:`MIME_TYPE`. Jupyter ignores it (it draws
the image or HTML as always); the Chinese build of the book selects it.

The Chinese words come from the catalog ``locales/zh_CN/LC_MESSAGES/outputs.po``.
Each Chinese version also records the English strings it looked up, so that
``scripts/i18n.py`` can list them in the catalog's template and the drift
gate can fail on a string nobody translated.

Numbers inside a label are placeholders: the label ``"head 3 of 8"`` is
looked up as ``"head {#1} of {#2}"``, so one entry serves every value.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_book.viz import SOURCE_CAPTION

MIME_TYPE = "application/vnd.course.zh+json"
"""The MIME type of an output's Chinese version: a JSON object with ``image/png`` or ``text/html``."""

BOOK_MIME_TYPE = "application/vnd.course.book+json"
"""The MIME type of an output's version for the (English) web book: ``{"text/html": ...}``.

An explorer's HTML for the web book calls the book's own Vega scripts. Under
``text/html`` JupyterLab would prefer it to the Vega-Lite chart it can draw
(it ranks HTML first), so the book's HTML travels under this type, which
only the book renders."""

LANGUAGE = "zh_CN"
DOMAIN = "outputs"

_NUMBER = re.compile(r"(?<![A-Za-z0-9_\\])-?\d+(?:[.,]\d+)*")
_MATH = re.compile(r"\$[^$]*\$")
_LETTERS = re.compile(r"[A-Za-z]{2,}")
_PLACEHOLDER = re.compile(r"\{#\d+\}")
_CJK = re.compile(r"[\u3000-\u9fff\uff00-\uffef]")


def default_catalog_path(language: str = LANGUAGE) -> Path:
    """``locales/<language>/LC_MESSAGES/outputs.po`` of the clone (or under ``$COURSE_LOCALES``)."""
    root = os.environ.get("COURSE_LOCALES")
    base = Path(root) if root else Path(__file__).resolve().parents[1] / "locales"
    return base / language / "LC_MESSAGES" / f"{DOMAIN}.po"


def needs_translation(text: str) -> bool:
    """True when ``text`` has words outside its ``$...$`` math (numbers and symbols need none)."""
    return bool(_LETTERS.search(_MATH.sub("", text)))


def number_pattern(text: str) -> tuple[str, list[str]]:
    """``("head {#1} of {#2}", ["3", "8"])`` for ``"head 3 of 8"``: the numbers become placeholders."""
    numbers: list[str] = []

    def placeholder(match: re.Match) -> str:
        numbers.append(match.group(0))
        return "{#%d}" % len(numbers)

    return _NUMBER.sub(placeholder, text), numbers


@dataclass
class Catalog:
    """Translations read from one .po file: English message -> translation (fuzzy ones left out).

    Every message looked up is recorded in ``used`` (the template's entries)
    and the ones without a translation in ``missing``.
    """

    messages: dict[str, str] = field(default_factory=dict)
    used: list[str] = field(default_factory=list)

    @property
    def missing(self) -> list[str]:
        """The messages looked up that have no translation, in order."""
        return [m for m in self.used if m not in self.messages]

    @classmethod
    def load(cls, path: Path | str | None = None) -> "Catalog":
        """Read ``path`` (default: :func:`default_catalog_path`); an absent file gives an empty catalog."""
        path = Path(path) if path is not None else default_catalog_path()
        if not path.exists():
            return cls()
        from babel.messages.pofile import read_po

        with path.open("rb") as f:
            po = read_po(f)
        messages = {m.id: m.string for m in po
                    if isinstance(m.id, str) and m.id and isinstance(m.string, str) and m.string.strip() and not m.fuzzy}
        return cls(messages)

    def gettext(self, text: str) -> str:
        """The translation of ``text``, or ``text`` itself when there is none (recorded as missing)."""
        if not isinstance(text, str) or not needs_translation(text):
            return text
        pattern, numbers = number_pattern(text)
        key = text if text in self.messages or not numbers else pattern
        if key not in self.used:
            self.used.append(key)
        translated = self.messages.get(key)
        if translated is None:
            return text
        for i, number in enumerate(numbers if key == pattern else [], start=1):
            translated = translated.replace("{#%d}" % i, number)
        return translated

    def payload(self, **data: Any) -> dict[str, Any]:
        """The Chinese version of an output: ``data``, the messages looked up and the translations used.

        ``translations[i]`` is what ``msgids[i]`` was translated to when the
        output was drawn (None: it had no translation yet), so that a later
        change of the catalog shows which outputs must be drawn again.
        """
        return {**data, "msgids": list(self.used), "translations": [self.messages.get(m) for m in self.used]}


# --- figures -------------------------------------------------------------------


def _texts_of(fig) -> list:
    from matplotlib.text import Text

    return list(fig.findobj(Text))


def _tick_formatters(fig) -> list:
    """(axis, formatter) of every axis: tick labels are made by the formatter at each draw."""
    return [(axis, axis.get_major_formatter()) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)]


def _translating_formatter(inner, catalog: Catalog):
    """A formatter that gives ``inner``'s labels translated (numbers come out unchanged)."""
    from matplotlib.ticker import Formatter

    class Translating(Formatter):
        def __call__(self, x, pos=None):
            return catalog.gettext(inner(x, pos))

        def format_ticks(self, values):
            return [catalog.gettext(label) for label in inner.format_ticks(values)]

        def set_locs(self, locs):
            inner.set_locs(locs)

        def get_offset(self):
            return inner.get_offset()

        def set_axis(self, axis):
            super().set_axis(axis)
            inner.set_axis(axis)

    return Translating()


def translated_png(fig, catalog: Catalog) -> bytes:
    """The PNG of ``fig`` with its titles, labels, legends, notes and word ticks translated.

    The figure is left as it was.
    """
    from IPython.core.pylabtools import print_figure

    from .viz import use_cjk_font

    family = use_cjk_font()  # the bundled Chinese font, as the chapters' own Chinese labels use
    fig.canvas.draw()  # tick labels exist only after a draw
    originals = [(t, t.get_text(), t.get_fontfamily()) for t in _texts_of(fig)]
    formatters = _tick_formatters(fig)
    try:
        for axis, formatter in formatters:
            axis.set_major_formatter(_translating_formatter(formatter, catalog))
        for text, original, families in originals:
            translated = catalog.gettext(original) if original else original
            text.set_text(translated)
            # a text keeps the fonts it was made with: add the Chinese one; mathtext draws a label's
            # words outside $...$ in its first family only, so there the Chinese one comes first
            others = [f for f in families if f != family]
            chinese_math = "$" in translated and _CJK.search(translated)
            text.set_fontfamily([family] + others if chinese_math else others + [family])
        return print_figure(fig, "png", bbox_inches="tight")
    finally:
        for text, original, families in originals:
            text.set_text(original)
            text.set_fontfamily(families)
        for axis, formatter in formatters:
            axis.set_major_formatter(formatter)


def figure_payload(fig, catalog: Catalog | None = None) -> dict[str, Any]:
    """The Chinese version of a figure's output: ``{"image/png": base64, "msgids": [...], "translations": [...]}``."""
    catalog = Catalog.load() if catalog is None else catalog
    png = translated_png(fig, catalog)
    return catalog.payload(**{"image/png": base64.b64encode(png).decode("ascii")})


def bilingual_figures(shell=None) -> None:
    """Make every figure this notebook displays carry its Chinese version too.

    Adds one formatter to IPython's display (for :data:`MIME_TYPE`); the
    usual PNG is unchanged. Call it once, in a chapter's first cell.
    """
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from matplotlib.figure import Figure
    from traitlets import ObjectName, Unicode

    shell = shell or get_ipython()
    if shell is None:
        return
    formatters = shell.display_formatter.formatters
    if MIME_TYPE not in formatters:
        class ChineseFormatter(BaseFormatter):
            format_type = Unicode(MIME_TYPE)
            print_method = ObjectName("_repr_course_zh_")
            _return_type = (dict,)

        formatters[MIME_TYPE] = ChineseFormatter(parent=shell.display_formatter)
    formatters[MIME_TYPE].for_type(Figure, figure_payload)


# --- explorers (Vega-Lite specs) and quizzes -----------------------------------

_SPEC_TEXT_KEYS = {"title", "text", "description"}


def translate_spec(spec: Any, catalog: Catalog, *, data_columns: Sequence[str] = ("caption",)) -> Any:
    """A copy of a Vega-Lite spec with its titles, control names, option labels and legend translated.

    Inline CSV data keeps its values except the columns ``data_columns``
    (the captions the charts show as text) and the fields a legend shows
    (a nominal colour field no filter reads, with its scale's domain); names
    of parameters and fields are identifiers and stay as they are.
    """
    legend = _legend_fields(spec)
    return _translate_spec(spec, catalog, tuple(data_columns) + tuple(legend), legend, "")


def _legend_fields(spec: Any) -> list[str]:
    colours, filters = [], []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            colour = node.get("color")
            if isinstance(colour, dict) and isinstance(colour.get("field"), str) and colour.get("type") == "nominal":
                colours.append(colour["field"])
            if isinstance(node.get("filter"), str):
                filters.append(node["filter"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    return [f for f in dict.fromkeys(colours) if not any(f in expression for expression in filters)]


def _words(values: list, catalog: Catalog) -> list:
    return [catalog.gettext(v) if isinstance(v, str) else v for v in values]


def _translate_spec(spec: Any, catalog: Catalog, columns: tuple[str, ...], legend: list[str], context: str) -> Any:
    """``context``: "bind" inside a control's binding, "legend" inside a legend's colour encoding, else ""."""
    if isinstance(spec, list):
        return [_translate_spec(v, catalog, columns, legend, context) for v in spec]
    if not isinstance(spec, dict):
        return spec
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if (key in _SPEC_TEXT_KEYS or key == "name" and context == "bind") and isinstance(value, str):
            out[key] = _keep_trailing_space(value, catalog)
        elif key in ("labels", "title") and isinstance(value, list):
            out[key] = _words(value, catalog)
        elif key == "values" and isinstance(value, str) and spec.get("format", {}).get("type") == "csv":
            out[key] = _translate_csv(value, catalog, columns)
        elif key == "domain" and isinstance(value, list) and context == "legend":
            out[key] = _words(value, catalog)
        else:
            if key == "bind":
                inner = "bind"
            elif key == "color" and isinstance(value, dict) and value.get("field") in legend:
                inner = "legend"
            else:
                inner = context if key == "scale" else ""
            out[key] = _translate_spec(value, catalog, columns, legend, inner)
    options = spec.get("options")
    if context == "bind" and isinstance(options, list) and "labels" not in spec:
        labels = [str(label) for label in _words(options, catalog)]
        if labels != [str(o) for o in options]:  # a dropdown of words: its values stay, its labels are translated
            out["labels"] = labels
    return out


def _keep_trailing_space(text: str, catalog: Catalog) -> str:
    stripped = text.rstrip()
    return catalog.gettext(stripped) + text[len(stripped):]


def _translate_csv(values: str, catalog: Catalog, columns: Sequence[str]) -> str:
    import csv

    rows = list(csv.reader(io.StringIO(values)))
    if not rows:
        return values
    wanted = [i for i, name in enumerate(rows[0]) if name in columns]
    if not wanted:
        return values
    for row in rows[1:]:
        for i in wanted:
            row[i] = catalog.gettext(row[i])
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def translate_questions(questions: Sequence[Mapping[str, Any]], catalog: Catalog) -> list[dict[str, Any]]:
    """A copy of jupyterquiz questions with their question, answer and feedback texts translated."""
    out = []
    for q in questions:
        q2 = dict(q)
        q2["question"] = catalog.gettext(q["question"])
        q2["answers"] = [
            {**a, **{k: catalog.gettext(a[k]) for k in ("answer", "feedback") if isinstance(a.get(k), str)}}
            for a in q.get("answers", [])
        ]
        out.append(q2)
    return out


# --- listing captions ------------------------------------------------------------

_CAPTION = re.compile(r"\A`(?P<name>[^`\n]+)` from `(?P<path>[^`,\n]+)(?:`, lines |, lines )"
                      r"(?P<first>\d+)\u2013(?P<last>\d+)`?(?=\n)")
"""The first line of :meth:`course_book.viz.SourceCode._repr_markdown_` (and of its older form,
with the words inside the code span: ``from `path, lines A-B` ``)."""


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else value if isinstance(value, str) else ""


def source_caption(markdown: str) -> dict[str, str] | None:
    """The fields (name, path, first, last) of a listing's caption line, or None."""
    match = _CAPTION.match(markdown or "")
    return match.groupdict() if match else None


def translate_listing(markdown: str, catalog: Catalog) -> str:
    """A listing's markdown with its caption line in the catalog's words (the code unchanged);
    ``markdown`` itself when it is no listing or the caption has no (usable) translation."""
    fields = source_caption(markdown)
    words = catalog.messages.get(SOURCE_CAPTION)
    if fields is None or not words:
        return markdown
    try:
        caption = words.format(**fields)
    except (KeyError, IndexError, ValueError):
        return markdown
    return caption + markdown[_CAPTION.match(markdown).end():]


# --- catalogs: templates and the drift gate ------------------------------------


def _cells(path: Path) -> list[dict[str, Any]]:
    return json.loads(Path(path).read_text(encoding="utf-8")).get("cells", [])


def _payloads(cell: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Chinese versions among a cell's outputs."""
    found = (output.get("data", {}).get(MIME_TYPE) for output in cell.get("outputs", []))
    return [p for p in found if isinstance(p, dict)]


def output_messages(notebooks: Iterable[Path]) -> list[str]:
    """Every English string the notebooks' Chinese outputs looked up, every figure's alt text,
    and the listing caption's words when a notebook shows a listing."""
    found: list[str] = []
    for path in notebooks:
        for cell in _cells(path):
            alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt")
            found += [alt] if isinstance(alt, str) else []
            for payload in _payloads(cell):
                found += payload.get("msgids", [])
            if any(source_caption(_text(o.get("data", {}).get("text/markdown"))) for o in cell.get("outputs", [])):
                found.append(SOURCE_CAPTION)
    return [text for text in dict.fromkeys(found) if text and needs_translation(text)]


def stale_outputs(notebooks: Iterable[Path], catalog: Catalog) -> dict[str, list[str]]:
    """Per notebook, the messages whose translation changed since its Chinese outputs were drawn.

    A figure's Chinese version is a picture made when the notebook ran: after
    its words are translated (or retranslated) the notebook must run again.
    """
    stale: dict[str, list[str]] = {}
    for path in notebooks:
        changed = [msgid for cell in _cells(path) for payload in _payloads(cell)
                   for msgid, then in zip(payload.get("msgids", []),
                                          payload.get("translations") or [None] * len(payload.get("msgids", [])))
                   if catalog.messages.get(msgid) != then]
        if changed:
            stale[str(path)] = list(dict.fromkeys(changed))
    return stale


def write_pot(messages: Sequence[str], path: Path) -> None:
    """A gettext template holding ``messages``, in order."""
    from babel.messages.catalog import Catalog as BabelCatalog
    from babel.messages.pofile import write_po

    template = BabelCatalog(project="The Transformer, built by hand (outputs)", fuzzy=False)
    for message in messages:
        template.add(message)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        write_po(f, template, width=0, omit_header=False, no_location=True)


_PO_LINE = re.compile(r'(#.*|(msgctxt|msgid|msgid_plural|msgstr(\[\d+\])?)\s+"(?:[^"\\]|\\.)*"|"(?:[^"\\]|\\.)*")?\s*')


def po_syntax_errors(path: Path) -> list[int]:
    """The numbers of the lines of a .po file that are not a comment, a keyword with a
    well-terminated string, a continuation string or blank (babel reads such lines silently wrong)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [i for i, line in enumerate(lines, start=1) if not _PO_LINE.fullmatch(line)]


def catalog_problems(templates: Path, catalogs: Path) -> dict[str, dict[str, int]]:
    """Per .po file, how many current messages are missing, untranslated or fuzzy.

    ``templates`` holds the .pot files (``book/04_attention.pot``, ``outputs.pot``);
    ``catalogs`` the matching .po files. Only files with a problem are listed.
    """
    from babel.messages.pofile import read_po

    problems: dict[str, dict[str, int]] = {}
    for pot in sorted(templates.rglob("*.pot")):
        relative = pot.relative_to(templates).with_suffix(".po")
        po_path = catalogs / relative
        with pot.open("rb") as f:
            wanted = [m.id for m in read_po(f) if m.id]
        if not po_path.exists():
            problems[str(po_path)] = {"missing (no .po file)": len(wanted)}
            continue
        bad_lines = po_syntax_errors(po_path)
        if bad_lines:
            problems[str(po_path)] = {f"unreadable (line {bad_lines[0]} is not valid .po syntax)": len(bad_lines)}
            continue
        with po_path.open("rb") as f:
            po = read_po(f)
        counts = {"missing": 0, "untranslated": 0, "fuzzy": 0, "placeholders differ": 0}
        for msgid in wanted:
            message = po.get(msgid)
            if message is None:
                counts["missing"] += 1
            elif message.fuzzy:
                counts["fuzzy"] += 1
            elif not isinstance(message.string, str) or not message.string.strip():
                counts["untranslated"] += 1
            elif sorted(_PLACEHOLDER.findall(message.string)) != sorted(_PLACEHOLDER.findall(msgid)):
                counts["placeholders differ"] += 1
        if any(counts.values()):
            problems[str(po_path)] = counts
    return problems


# --- the book: MyST-NB renders the Chinese version in the Chinese build --------


def _build_language(renderer) -> str | None:
    try:
        return renderer.renderer.sphinx_env.config.language
    except AttributeError:
        return None


class BookRenderer:
    """MyST-NB plugin (entry point ``myst_nb.mime_renderers``): the book's versions of an output.

    In a build whose ``language`` is ``zh_CN`` the Chinese build's
    ``nb_mime_priority_overrides`` put :data:`MIME_TYPE` first, and this
    plugin draws its image (with the alternative text translated) or its
    HTML. In the English build ``_config.yml`` puts :data:`BOOK_MIME_TYPE`
    first and the plugin draws that HTML. Each is rendered only in its own
    build, so elsewhere the usual image is chosen.
    """

    mime_priority_overrides: Sequence[tuple[str, str, int | None]] = ()

    @staticmethod
    def handle_mime(renderer, data, inline: bool):
        if data.mime_type == "text/markdown":
            return BookRenderer._listing(renderer, data, _build_language(renderer) == LANGUAGE)
        if data.mime_type not in (MIME_TYPE, BOOK_MIME_TYPE):
            return None
        wanted = MIME_TYPE if _build_language(renderer) == LANGUAGE else BOOK_MIME_TYPE
        if data.mime_type != wanted or not isinstance(data.content, dict):
            return []
        from myst_nb.core.render import MimeData

        payload = data.content
        for mime_type in ("image/png", "text/html"):
            if mime_type in payload:
                inner = MimeData(mime_type, payload[mime_type], cell_metadata=data.cell_metadata,
                                 output_metadata=data.output_metadata, cell_index=data.cell_index,
                                 output_index=data.output_index, line=data.line)
                if mime_type == "text/html":
                    return renderer.render_text_html(inner)
                nodes = renderer.render_image(inner)
                catalog = Catalog.load()
                for node in nodes:
                    if node.get("alt"):
                        node["alt"] = catalog.gettext(node["alt"])
                return nodes
        return []

    @staticmethod
    def _listing(renderer, data, chinese: bool):
        """A listing (``show_source``), its caption in Chinese in the Chinese build; None for other markdown.

        The caption is marked not translatable, so that the page catalogs do not get one
        entry per listing (whose line numbers change with every edit of the library):
        its words are one entry of ``outputs.po``, translated here.
        """
        text = _text(data.content)
        if source_caption(text) is None:
            return None
        from docutils import nodes as docutils_nodes
        from myst_nb.core.render import MimeData

        inner = MimeData("text/markdown", translate_listing(text, Catalog.load()) if chinese else text,
                         cell_metadata=data.cell_metadata, output_metadata=data.output_metadata,
                         cell_index=data.cell_index, output_index=data.output_index, line=data.line)
        rendered = renderer.render_markdown(inner)
        for node in rendered:
            if isinstance(node, docutils_nodes.Node):
                caption = next(iter(node.findall(docutils_nodes.paragraph)), None)
                if caption is not None:
                    caption["translatable"] = False
                    break
        return rendered
