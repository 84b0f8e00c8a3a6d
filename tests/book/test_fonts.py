"""Tests of the Chinese font that ships with course_lib (course_book/fonts/, viz.use_cjk_font).

The figures of chapters 9-10 label axes with Chinese characters. Without a CJK
font, matplotlib warns ``Glyph ... missing from font(s) DejaVu Sans`` (which
reaches the book page and fails nbval) and draws boxes. The drawing tests run
in a fresh interpreter with an empty ``MPLCONFIGDIR`` (no font cache) and every
warning turned into an error, so they pass only if the bundled font is
registered by file path - whatever fonts the machine has installed.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import textwrap
import unicodedata
from pathlib import Path

import matplotlib
import pytest
from fontTools.ttLib import TTFont

from course_book import viz

REPO = Path(__file__).resolve().parents[2]
FONT = REPO / "course_book" / "fonts" / "NotoSansSC-Regular-subset.ttf"
REAL = os.environ.get("COURSE_LIB_DATA")


def _drawn(chars) -> set[str]:
    """The characters a figure draws (no spaces, no invisible format characters)."""
    return {c for c in chars if not c.isspace() and unicodedata.category(c) != "Cf"}


@pytest.fixture(scope="module")
def font_characters() -> set[str]:
    return {chr(code) for code in TTFont(FONT).getBestCmap()}


def _run_fresh(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter: empty MPLCONFIGDIR, Agg, warnings are errors."""
    config = tmp_path / "mplconfig"
    config.mkdir()
    env = {**os.environ, "MPLCONFIGDIR": str(config), "MPLBACKEND": "Agg"}
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )


# What each scenario draws first, before anything else registered the font.
DRAWINGS = {
    # plot_heatmap on an Axes made before the font was registered
    "heatmap": """
        fig, ax = plt.subplots()
        viz.plot_heatmap([[0.1, 0.9], [0.6, 0.4]], ["我", "爱"], ["猫。", "狗！"],
                         title="交叉注意力", xlabel="英文", ylabel="中文", ax=ax)
    """,
    # a plotting function handed to explorer_with_static (no widget: no controls)
    "explorer": """
        def draw(title):
            fig, ax = plt.subplots()
            ax.set_title(title)
            ax.set_xticks([0, 1], ["火车站", "在哪里？"])
            return fig
        import IPython.display
        IPython.display.display = lambda f: f.savefig(io.BytesIO(), format="png")
        viz.explorer_with_static(draw, [dict(title="你好，世界")])
        fig = plt.figure()
    """,
    # plain matplotlib after the helper, the way a chapter's set-up cell uses it
    "plain": """
        viz.use_cjk_font()
        fig, ax = plt.subplots()
        ax.bar([0, 1, 2], [0.5, 0.3, 0.2], label="温度 T = 1.0")
        ax.set_xticks([0, 1, 2], ["汤", "姆", "。"])
        ax.set(title="Tom is reading a book. -> 汤姆在看书。", xlabel="下一个字")
        ax.text(1, 0.4, "（全角：ＡＢＣ）")
        ax.legend()
        fig.suptitle("中文标签")
    """,
}


@pytest.mark.parametrize("scenario", sorted(DRAWINGS))
def test_chinese_text_draws_without_a_system_font_or_font_cache(scenario, tmp_path):
    code = (
        "import io, json, matplotlib\n"
        "import matplotlib.pyplot as plt\n"
        "from matplotlib import font_manager\n"
        "from course_book import viz\n"
        + textwrap.dedent(DRAWINGS[scenario])
        + "fig.savefig(io.BytesIO(), format='png')\n"
        "latin = font_manager.findfont(font_manager.FontProperties(family=matplotlib.rcParams['font.family']))\n"
        "registered = [f.fname for f in font_manager.fontManager.ttflist if f.name == viz.use_cjk_font()]\n"
        "print(json.dumps({'family': matplotlib.rcParams['font.family'], 'latin': latin,"
        " 'registered': registered}))\n"
    )
    result = _run_fresh(code, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "missing from font" not in result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["family"] == ["sans-serif", "Noto Sans SC"]  # Latin first, CJK as fallback
    assert Path(report["latin"]).name == "DejaVuSans.ttf"
    assert str(FONT) in report["registered"]
    # registered in memory only: matplotlib's (fresh) font cache does not list it
    caches = list((tmp_path / "mplconfig").glob("fontlist-*.json"))
    assert caches and all(FONT.name not in cache.read_text() for cache in caches)


def test_importing_course_lib_leaves_matplotlib_fonts_alone(tmp_path):
    code = """
        import matplotlib
        from matplotlib import font_manager
        before = [f.fname for f in font_manager.fontManager.ttflist]
        family = list(matplotlib.rcParams["font.family"])
        import course_lib, course_book.viz, course_lib.decoding, course_lib.metrics
        import course_lib.training, course_lib.translate
        after = [f.fname for f in font_manager.fontManager.ttflist]
        assert after == before, "importing course_lib registered fonts"
        assert list(matplotlib.rcParams["font.family"]) == family, "importing course_lib changed font.family"
        assert str(course_book.viz.CJK_FONT_FILE) not in after
        print("ok")
    """
    result = _run_fresh(code, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"


def test_use_cjk_font_is_idempotent_and_keeps_the_families_set_before():
    from matplotlib import font_manager

    path = str(viz.CJK_FONT_FILE)
    with matplotlib.rc_context({"font.family": ["serif"]}):
        name = viz.use_cjk_font()
        registered = [f for f in font_manager.fontManager.ttflist if f.fname == path]
        assert name == "Noto Sans SC" and registered and registered[0].name == name
        assert viz.use_cjk_font() == name
        assert [f for f in font_manager.fontManager.ttflist if f.fname == path] == registered
        assert list(matplotlib.rcParams["font.family"]) == ["serif", name]


def test_a_missing_font_file_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(viz, "CJK_FONT_FILE", tmp_path / "gone.ttf")
    with pytest.raises(FileNotFoundError, match=r"gone\.ttf.*reinstall"):
        viz.use_cjk_font()


def test_the_font_file_is_the_documented_one():
    assert viz.CJK_FONT_FILE == FONT
    assert FONT.stat().st_size < 8_000_000  # a subset: a few MB, not a full CJK font
    names = {record.nameID: record.toUnicode() for record in TTFont(FONT)["name"].names}
    assert names[1] == "Noto Sans SC" and "Open Font License" in names[13]
    licence = (FONT.parent / "OFL.txt").read_text()
    assert "SIL OPEN FONT LICENSE Version 1.1" in licence and "Adobe" in licence
    readme = (FONT.parent / "README.md").read_text()
    assert "scripts/make_cjk_font.py" in readme and (REPO / "scripts" / "make_cjk_font.py").is_file()


def test_the_font_travels_in_the_wheel():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["course_book"]
    for name in ("NotoSansSC-Regular-subset.ttf", "custom.css", "OFL.txt", "README.md"):  # custom.css: JupyterLab
        assert any(fnmatch.fnmatch(f"fonts/{name}", p) for p in patterns), name


def test_the_font_covers_gb2312_and_the_checkpoint_vocabulary(font_characters):
    from course_lib.data import TextTokenizer
    from course_lib.training import load_checkpoint

    gb2312 = set()
    for high in range(0xA1, 0xF8):
        for low in range(0xA1, 0xFF):
            try:
                gb2312.add(bytes([high, low]).decode("gb2312"))
            except UnicodeDecodeError:
                pass
    assert len(gb2312) > 7000
    assert sorted(gb2312 - font_characters) == []
    vocabulary = set()
    for text in load_checkpoint(REPO / "checkpoints" / "en-zh.pt")["tokenizers"].values():
        vocabulary.update("".join(TextTokenizer.from_json(text).tokenizer.get_vocab()))
    assert len(vocabulary) > 2000
    assert sorted(_drawn(vocabulary) - font_characters) == []


@pytest.mark.skipif(not REAL, reason="set COURSE_LIB_DATA to a folder with the real data sets")
def test_the_font_covers_every_character_of_the_chinese_data(font_characters):
    from course_lib.data import load_tatoeba_en_zh

    chinese = set()
    for normalize in (True, False):
        for _, sentence in load_tatoeba_en_zh(REAL, normalize=normalize, download=False):
            chinese.update(sentence)
    assert len(chinese) > 2000
    assert sorted(_drawn(chinese) - font_characters) == []
