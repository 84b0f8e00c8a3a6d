"""The Chinese edition's machinery: catalogs, the drift gate, the term check, translated outputs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
from babel.messages.catalog import Catalog as BabelCatalog
from babel.messages.pofile import write_po

from course_book import i18n

ROOT = Path(__file__).resolve().parents[2]


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"_script_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _po(path: Path, entries: dict[str, str], fuzzy: tuple[str, ...] = ()) -> Path:
    catalog = BabelCatalog(locale="zh_CN", fuzzy=False)
    for msgid, msgstr in entries.items():
        catalog.add(msgid, msgstr, flags=("fuzzy",) if msgid in fuzzy else ())
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        write_po(f, catalog, width=0, no_location=True)
    return path


def test_number_pattern_and_lookup(tmp_path):
    assert i18n.number_pattern("head 3 of 8, s=-0.25") == ("head {#1} of {#2}, s={#3}", ["3", "8", "-0.25"])
    # digits inside names (log2, d_k2) are part of the word, not numbers
    assert i18n.number_pattern("log2 T") == ("log2 T", [])
    catalog = i18n.Catalog.load(_po(tmp_path / "o.po", {"head {#1} of {#2}": "第 {#1} 个头（共 {#2} 个）",
                                                        "exact words": "确切的词", "old": "旧"}, fuzzy=("old",)))
    assert catalog.gettext("head 3 of 8") == "第 3 个头（共 8 个）"
    assert catalog.gettext("exact words") == "确切的词"
    assert catalog.gettext("old") == "old", "a fuzzy entry is not used"
    assert catalog.gettext("$d_k$") == "$d_k$" and catalog.gettext("0.25") == "0.25", "nothing to translate"
    assert catalog.missing == ["old"] and catalog.used == ["head {#1} of {#2}", "exact words", "old"]


def test_absent_catalog_keeps_english(tmp_path):
    catalog = i18n.Catalog.load(tmp_path / "none.po")
    assert catalog.gettext("attention weight") == "attention weight"
    assert catalog.missing == ["attention weight"]


def test_figure_payload_translates_words_and_leaves_the_figure(tmp_path):
    catalog = i18n.Catalog.load(_po(tmp_path / "o.po", {
        "Raw scores": "原始分数", "key {#1}": "键 {#1}", "weight": "权重", "measured": "实测"}))
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(["key 1", "key 2"], [1, 2], label="measured")
    ax.set_title("Raw scores")
    ax.set_ylabel("weight")
    ax.legend()
    english = i18n.translated_png(fig, i18n.Catalog())
    chinese = i18n.translated_png(fig, catalog)
    assert english[:8] == b"\x89PNG\r\n\x1a\n" and chinese != english
    assert set(catalog.used) == {"Raw scores", "key {#1}", "weight", "measured"} and not catalog.missing
    # the figure itself is unchanged, ticks included
    assert ax.get_title() == "Raw scores" and ax.get_ylabel() == "weight"
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["key 1", "key 2"]
    plt.close(fig)


def test_tick_labels_set_by_hand_are_translated_in_the_drawing(monkeypatch):
    """set_xticks(positions, labels) and categorical ticks: the labels drawn are the translated ones."""
    import IPython.core.pylabtools as pylabtools

    catalog = i18n.Catalog({"encoder layer": "编码器层", "key {#1}": "键 {#1}", "scaled": "缩放后"})
    fig, (a, b) = plt.subplots(1, 2, figsize=(4, 2))
    a.set_xticks([0, 1], ["encoder layer", "key 2"])
    b.bar(["scaled", "raw"], [1, 2])
    drawn = {}

    def record(figure, fmt, **kw):
        figure.canvas.draw()
        drawn["a"] = [t.get_text() for t in a.get_xticklabels()]
        drawn["b"] = [t.get_text() for t in b.get_xticklabels()]
        drawn["y"] = [t.get_text() for t in a.get_yticklabels()]
        return b"png"

    monkeypatch.setattr(pylabtools, "print_figure", record)
    i18n.translated_png(fig, catalog)
    assert drawn["a"] == ["编码器层", "键 2"] and drawn["b"] == ["缩放后", "raw"]
    assert all(not t or t.replace(".", "").replace("−", "").isdigit() for t in drawn["y"]), drawn["y"]
    fig.canvas.draw()
    assert [t.get_text() for t in a.get_xticklabels()] == ["encoder layer", "key 2"], "the figure is left as it was"
    plt.close(fig)


def test_chinese_words_around_math_are_drawn_with_the_chinese_font(tmp_path, caplog):
    """mathtext draws the words outside $...$ in the label's first font family (a missing glyph is logged)."""
    catalog = i18n.Catalog({"self-attention  $n^{#1} d$": "自注意力  $n^{#1} d$"})
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([1, 2], [1, 2], label="self-attention  $n^2 d$")
    ax.legend()
    with caplog.at_level("WARNING"):
        i18n.translated_png(fig, catalog)
    plt.close(fig)
    assert catalog.used == ["self-attention  $n^{#1} d$"] and not catalog.missing
    assert not [r for r in caplog.records if "glyph" in r.getMessage()], [r.getMessage() for r in caplog.records]


def test_bilingual_figures_adds_the_chinese_version_to_the_display():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    i18n.bilingual_figures(shell)
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.set_title("some title")
    data, _ = shell.display_formatter.format(fig)
    plt.close(fig)
    payload = data[i18n.MIME_TYPE]
    assert payload["msgids"] == ["some title"] and payload["image/png"]


def test_translate_spec_keeps_identifiers():
    spec = {"params": [{"name": "p_head", "bind": {"input": "select", "name": "head ", "labels": ["head 0", "head 1"]}}],
            "encoding": {"x": {"field": "key", "title": "key (read from)"}},
            "data": {"values": "head,caption\n0,head 0 reads\n", "format": {"type": "csv"}},
            "transform": [{"filter": "datum.head == p_head"}]}
    catalog = i18n.Catalog({"head": "头", "head {#1}": "头 {#1}", "key (read from)": "键（被读取）",
                            "head {#1} reads": "头 {#1} 读取"})
    out = i18n.translate_spec(spec, catalog)
    assert out["params"][0]["name"] == "p_head" and out["params"][0]["bind"]["name"] == "头 "
    assert out["params"][0]["bind"]["labels"] == ["头 0", "头 1"]
    assert out["encoding"]["x"] == {"field": "key", "title": "键（被读取）"}
    assert out["data"]["values"] == "head,caption\n0,头 0 读取\n"
    assert out["transform"] == spec["transform"] and spec["encoding"]["x"]["title"] == "key (read from)"
    # a dropdown whose options are words and that has no labels gets translated labels; its values stay
    words = {"bind": {"input": "select", "options": ["greedy", "beam", 3], "name": "strategy "}}
    out = i18n.translate_spec(words, i18n.Catalog({"greedy": "贪心解码", "strategy": "策略"}))
    assert out["bind"] == {"input": "select", "options": ["greedy", "beam", 3], "name": "策略 ",
                           "labels": ["贪心解码", "beam", "3"]}


def test_translate_spec_translates_a_legend_but_not_what_a_filter_reads():
    spec = {"layer": [{
        "encoding": {"color": {"field": "curve", "type": "nominal", "scale": {"domain": ["sine", "cosine"]}},
                     "x": {"field": "position", "type": "quantitative"}},
        "transform": [{"filter": "datum['pair'] == p_pair"}],
        "data": {"values": "position,curve,pair\n0,sine,first\n", "format": {"type": "csv"}}}]}
    catalog = i18n.Catalog({"sine": "正弦", "cosine": "余弦", "first": "第一"})
    out = i18n.translate_spec(spec, catalog)["layer"][0]
    assert out["encoding"]["color"]["scale"]["domain"] == ["正弦", "余弦"]
    assert out["data"]["values"] == "position,curve,pair\n0,正弦,first\n", "the filtered field keeps its values"
    filtered = json.loads(json.dumps(spec).replace("datum['pair']", "datum['curve']"))
    out = i18n.translate_spec(filtered, catalog)["layer"][0]
    assert out["encoding"]["color"]["scale"]["domain"] == ["sine", "cosine"] and "sine" in out["data"]["values"]


def test_catalog_problems_names_missing_untranslated_and_fuzzy(tmp_path):
    templates, catalogs = tmp_path / "pot", tmp_path / "po"
    _po(templates / "book" / "a.pot", {"One.": "", "Two.": "", "Three.": "", "Four.": ""})
    _po(templates / "book" / "b.pot", {"Alone.": ""})
    _po(templates / "book" / "c.pot", {"Done.": ""})
    _po(catalogs / "book" / "a.po", {"One.": "一。", "Two.": "", "Three.": "三。"}, fuzzy=("Three.",))
    _po(catalogs / "book" / "c.po", {"Done.": "完成。"})
    problems = i18n.catalog_problems(templates, catalogs)
    assert problems == {
        str(catalogs / "book" / "a.po"): {"missing": 1, "untranslated": 1, "fuzzy": 1, "placeholders differ": 0},
        str(catalogs / "book" / "b.po"): {"missing (no .po file)": 1},
    }


def test_term_check_flags_a_term_translated_otherwise(tmp_path, monkeypatch):
    script = _load_script("i18n")
    terms = dict(script.glossary_terms())
    assert terms["causal mask"] == terms["look-ahead mask"] and "因果掩码" in terms["causal mask"]
    assert "BLEU" in terms["BLEU"] and "后置层归一化" in terms["Post-LN"]
    assert terms["batch"] == ["批次"], "the glossary's table of 《动手学深度学习》's names adds no accepted form"
    catalogs = tmp_path / "po"
    _po(catalogs / "book" / "x.po", {
        "The causal mask hides the future.": "因果掩码遮住未来。",
        "Every padding mask is broadcast.": "每个补齐遮罩都会被广播。",
        "In `padding_mask` nothing else.": "`padding_mask` 里没有别的。",
    })
    monkeypatch.setattr(script, "TERMS_FILE", tmp_path / "none.yml")
    problems, stale = script.term_problems(catalogs)
    # "padding mask", and the terms inside it, "padding" and "mask": only in the second entry
    assert len(problems) == 3 and all("Every padding mask" in p for p in problems)
    assert any("'padding mask'" in p and "填充掩码" in p for p in problems)
    rules = tmp_path / "terms.yml"
    rules.write_text("exceptions:\n" + "".join(
        f"- {{term: {t}, file: x.po, contains: Every padding, why: test}}\n" for t in ("padding mask", "padding", "mask"))
        + "- {term: mask, file: x.po, contains: nowhere, why: stale}\n", encoding="utf-8")
    monkeypatch.setattr(script, "TERMS_FILE", rules)
    problems, stale = script.term_problems(catalogs)
    assert problems == [] and len(stale) == 1 and "nowhere" in stale[0]


def test_term_check_covers_outputs_and_enforces_one_name_per_concept(tmp_path, monkeypatch):
    script = _load_script("i18n")
    catalogs = tmp_path / "po"
    _po(catalogs / "book" / "03_x.po", {
        "Here is the library's implementation:": "下面是库中的实现：",          # the term "library" missing
        "The library checks it.": "课程库会检查它。",
        "Run it in the notebook.": "在 notebook 中运行它。",                # "notebook" missing and avoided
        "One batch (d2l-zh says otherwise).": "一个批次（《动手学深度学习》称“批量”）。",  # gloss: not avoided
        "A batched product.": "一次批量乘积。",                             # avoided form
        "The source is reversed.": "源序列被反转。",
        "The source sentence.": "源语言句子。",
    })
    _po(catalogs / "book" / "11_pitfalls.po", {"The source is reversed.": "源序列被反转。",
                                               "the source language": "源语言"})
    _po(catalogs / "outputs.po", {"entropy (nats)": "熵（nats）", "shape (batch, q_len)": "形状 (batch, q_len)"})
    rules = tmp_path / "terms.yml"
    rules.write_text(
        "terms:\n  library: [课程库]\n  notebook: [笔记本]\n  nats: [奈特]\n"
        "avoid:\n  - {avoid: '批量', use: 批次}\n  - {avoid: '(?i)notebook', use: 笔记本}\n"
        "  - {avoid: '源语言', use: 源序列, files: [11_pitfalls.po]}\n"
        "alternatives_in:\n  11_pitfalls.po:\n    source: [源序列]\n", encoding="utf-8")
    monkeypatch.setattr(script, "TERMS_FILE", rules)
    problems, stale = script.term_problems(catalogs)
    text = "\n".join(problems)
    assert "03_x.po: 'library'" in text and "The library checks it" not in text
    assert "03_x.po: 'notebook' ->" in text and "03_x.po: 'notebook' -> the book says" in text
    assert "'批量' -> the book says '批次'" in text and "One batch" not in text
    assert "outputs.po: 'nats'" in text, "outputs.po is checked too"
    assert "shape (batch" not in text, "a shape tuple in outputs.po is code"
    # "source" (源语言 in the glossary) is accepted as 源序列 in chapter 11 only, where 源语言 is avoided
    assert "03_x.po: 'source'" in text and "11_pitfalls.po: 'source'" not in text
    assert "11_pitfalls.po: '源语言' -> the book says '源序列'" in text and "The source sentence" not in text
    assert len(problems) == 7, problems


def test_every_name_of_the_other_book_is_glossed_somewhere(tmp_path):
    script = _load_script("i18n")
    names = script.d2l_names()
    assert ("teacher forcing", "教师强制", "强制教学") in names and len(names) >= 10
    catalogs = tmp_path / "po"
    _po(catalogs / "book" / "x.po", {f"Use {e}.": f"用{zh}（《动手学深度学习》称“{other}”）。" for e, zh, other in names[1:]})
    problems = script.d2l_problems(catalogs)
    assert len(problems) == 1 and f"“{names[0][2]}”" in problems[0]
    assert script.d2l_problems(script.CATALOGS) == [], "the book's catalogs gloss every one"


def test_words_in_a_formula_may_be_translated_but_not_its_names(tmp_path):
    script = _load_script("i18n")
    catalogs = tmp_path / "po"
    _po(catalogs / "book" / "x.po", {
        "Check $\\text{weights} \\cdot I = \\text{weights}$ here.": "验证 $\\text{权重} \\cdot I = \\text{权重}$。",
        "Roughly $H \\approx \\log(\\text{number of keys})$.": "约为 $H \\approx \\log(\\text{number of key})$。",
        "Width $d_\\text{model}$.": "宽度 $d_\\text{模型}$。",
        "Also $\\text{weights} \\cdot I$.": "还有 $\\text{权重} \\cdot J$。",
    })
    problems = script.markup_problems(catalogs)
    joined = "\n".join(problems)
    assert len(problems) == 3, problems
    assert "Check" not in joined and all(w in joined for w in ("number of keys", "d_\\\\text{model}", "Also"))


def test_listing_captions_are_translated_in_the_chinese_build(tmp_path):
    from course_book import viz
    from course_lib.masks import causal_mask

    markdown = viz.get_source(causal_mask)._repr_markdown_()
    fields = i18n.source_caption(markdown)
    assert fields and fields["path"] == "course_lib/masks.py" and markdown.index("`, lines ") > 0
    old = "`f` from `course_lib/x.py, lines 3\u20139`\n\n```python\nx = 1\n```\n"  # notebooks run before the change
    assert i18n.source_caption(old) == {"name": "f", "path": "course_lib/x.py", "first": "3", "last": "9"}
    assert i18n.source_caption("`f` from somewhere\n") is None and i18n.source_caption("") is None
    catalog = i18n.Catalog({i18n.SOURCE_CAPTION: "`{name}`，位于 `{path}` 第 {first}–{last} 行"})
    assert i18n.translate_listing(old, catalog) == "`f`，位于 `course_lib/x.py` 第 3–9 行\n\n```python\nx = 1\n```\n"
    assert i18n.translate_listing(old, i18n.Catalog()) == old, "no translation: the English"
    assert i18n.translate_listing(old, i18n.Catalog({i18n.SOURCE_CAPTION: "{nom}"})) == old, "a broken one too"
    nb = tmp_path / "n.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [
        {"output_type": "display_data", "data": {"text/markdown": old.splitlines(keepends=True)}}]}]}), encoding="utf-8")
    assert i18n.output_messages([nb]) == [i18n.SOURCE_CAPTION], "the caption's words go into outputs.pot"


class _FakeConfig:
    def __init__(self, language):
        self.language = language


class _FakeRenderer:
    """Enough of MyST-NB's element renderer for BookRenderer."""

    def __init__(self, language):
        env = type("Env", (), {"config": _FakeConfig(language)})()
        self.renderer = type("R", (), {"sphinx_env": env})()

    def render_text_html(self, data):
        return [("html", data.content)]

    def render_markdown(self, data):
        return [("markdown", data.content)]


def test_book_renderer_only_in_the_chinese_build():
    pytest.importorskip("myst_nb")
    from myst_nb.core.render import MimeData

    data = MimeData(i18n.MIME_TYPE, {"text/html": "<p>中文</p>", "msgids": []})
    assert i18n.BookRenderer.handle_mime(_FakeRenderer("en"), data, False) == []
    assert i18n.BookRenderer.handle_mime(_FakeRenderer("zh_CN"), data, False) == [("html", "<p>中文</p>")]
    assert i18n.BookRenderer.handle_mime(_FakeRenderer("zh_CN"), MimeData("text/plain", "x"), False) is None
    listing = "`f` from `course_lib/x.py`, lines 3\u20139\n\n```python\nx = 1\n```\n"
    assert i18n.BookRenderer.handle_mime(_FakeRenderer("en"), MimeData("text/markdown", listing), False) == [
        ("markdown", listing)], "the English build gets the listing as it is (its caption not translatable)"
    assert i18n.BookRenderer.handle_mime(_FakeRenderer("zh_CN"), MimeData("text/markdown", "*other*"), False) is None
    nodes = i18n.BookRenderer.handle_mime(_FakeRenderer("zh_CN"), MimeData("text/markdown", listing), False)
    assert nodes[0][0] == "markdown" and nodes[0][1].startswith("`f`，") and "```python\nx = 1" in nodes[0][1]


def test_language_links_point_at_the_same_page():
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        import language_links
    finally:
        sys.path.pop(0)
    assert language_links.other_edition_href("book/04_attention", zh=False) == "../zh/book/04_attention.html"
    assert language_links.other_edition_href("book/04_attention", zh=True) == "../../book/04_attention.html"
    assert language_links.other_edition_href("search", zh=True) == "../search.html"


def test_every_chapter_draws_its_figures_in_both_languages():
    """Each chapter turns the Chinese figures on, and its stored figures carry them."""
    for path in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        first = next(c for c in nb["cells"] if c["cell_type"] == "code")
        assert "bilingual_figures()" in "".join(first["source"]), path.name
        for cell in nb["cells"]:
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if "image/png" in data or "text/html" in data and "course-explorer" in "".join(data["text/html"]):
                    assert i18n.MIME_TYPE in data, f"{path.name}: an output without its Chinese version (re-execute)"


def test_markup_check_catches_lost_references_code_and_broken_bold(tmp_path):
    script = _load_script("i18n")
    catalogs = tmp_path / "po"
    _po(catalogs / "book" / "x.po", {
        "See {doc}`chapter 6 <06_feed_forward>` and `d_model`.": "见 {doc}`第 6 章 <06_feed_forward>` 和 `d_model`。",
        "See {doc}`chapter 7 <07_add_and_norm>`.": "见第 7 章。",
        "The width `d_model` is $d$.": "宽度 d_model 是 $d$。",
        "A **residual connection** helps.": "**“残差连接”**有帮助。",
        "A **residual** path.": "一条**残差**路径。",
        "Read [the paper](https://arxiv.org/abs/1706.03762).": "读[论文](https://arxiv.org/abs/1706.0376)。",
    })
    problems = script.markup_problems(catalogs)
    assert len(problems) == 4, problems
    joined = "\n".join(problems)
    for expected in ("'a reference'", "'inline code'", "literal **", "'a link address'"):
        assert expected in joined
    assert "chapter 6" not in joined and "A **residual** path" not in joined


def test_gate_refuses_blank_translations_and_changed_placeholders(tmp_path):
    templates, catalogs = tmp_path / "pot", tmp_path / "po"
    _po(templates / "outputs.pot", {"head {#1} of {#2}": "", "blank": "", "ok {#1}": ""})
    _po(catalogs / "outputs.po", {"head {#1} of {#2}": "头 {#2}", "blank": "   ", "ok {#1}": "好 {#1}"})
    assert i18n.catalog_problems(templates, catalogs) == {
        str(catalogs / "outputs.po"): {"missing": 0, "untranslated": 1, "fuzzy": 0, "placeholders differ": 1}}
    (catalogs / "outputs.po").write_text('msgid "x"\nmsgstr "unterminated\n', encoding="utf-8")
    problem = i18n.catalog_problems(templates, catalogs)[str(catalogs / "outputs.po")]
    assert list(problem)[0].startswith("unreadable")


def test_stale_outputs_name_notebooks_drawn_before_their_translations(tmp_path):
    catalog = i18n.Catalog({"weight": "权重", "old words": "旧词", "new words": "新词"})
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "", "outputs": [
        {"output_type": "display_data", "metadata": {}, "data": {"text/plain": "x", i18n.MIME_TYPE: {
            "image/png": "", "msgids": ["weight", "old words", "new words"],
            "translations": ["权重", "以前的词", None]}}}]}]}
    path = tmp_path / "01_x.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert i18n.stale_outputs([path], catalog) == {str(path): ["old words", "new words"]}
    nb["cells"][0]["outputs"][0]["data"][i18n.MIME_TYPE]["translations"] = ["权重", "旧词", "新词"]
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert i18n.stale_outputs([path], catalog) == {}
    # a message still without a translation is not stale: the catalog check reports it as untranslated
    assert i18n.stale_outputs([path], i18n.Catalog({"weight": "权重", "old words": "旧词"})) == {str(path): ["new words"]}
