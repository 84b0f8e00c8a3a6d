"""JupyterLab gets the course's Chinese font: the server extension, its style sheet, the installer."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

from course_book import jupyter_font
from course_book.explorers import CHART_FONT

ROOT = Path(__file__).resolve().parents[2]


def _installer():
    spec = importlib.util.spec_from_file_location("install_lab_font", ROOT / "scripts" / "install_lab_font.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_style_sheet_declares_the_shipped_font_for_chinese_characters():
    css = (jupyter_font.FONTS / "custom.css").read_text(encoding="utf-8")
    face = re.search(r"@font-face\s*\{(.*?)\}", css, re.S).group(1)
    family = re.search(r'font-family:\s*"([^"]+)"', face).group(1)
    source = re.search(r'src:\s*url\("([^"]+)"\)', face).group(1)
    assert (jupyter_font.FONTS / source).is_file(), "the url is relative to /custom/custom.css: the font beside it"
    assert f'"{family}"' in CHART_FONT, "the explorers' charts name the same family"
    ranges = re.search(r"unicode-range:([^;]+);", face).group(1)
    assert "U+4E00-9FFF" in ranges  # the CJK Unified Ideographs
    # each of JupyterLab's three font lists ends with the family, in a rule that outranks the theme's :root
    rule = re.search(r":root:root\s*\{(.*?)\}", css, re.S).group(1)
    for variable in ("--jp-ui-font-family", "--jp-content-font-family", "--jp-code-font-family-default"):
        value = re.search(variable + r":([^;]+);", rule).group(1)
        assert value.strip().endswith(f'"{family}"'), variable


def test_the_extension_puts_the_font_folder_first_among_the_custom_folders():
    folders = ["/home/student/.jupyter/custom"]
    messages = []
    app = SimpleNamespace(web_app=SimpleNamespace(settings={"static_custom_path": folders}),
                          log=SimpleNamespace(info=lambda *a: messages.append(a)))
    jupyter_font._load_jupyter_server_extension(app)
    jupyter_font._load_jupyter_server_extension(app)  # twice: still once
    assert folders == [str(jupyter_font.FONTS), "/home/student/.jupyter/custom"]
    assert app.web_app.settings["static_custom_path"] is folders, "changed in place: JupyterLab's handler holds it"
    assert jupyter_font._jupyter_server_extension_points() == [{"module": "course_book.jupyter_font"}]


def test_the_installer_turns_both_on_and_keeps_other_settings(tmp_path):
    installer = _installer()
    config = tmp_path / "etc" / "jupyter" / "jupyter_server_config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"ServerApp": {"jpserver_extensions": {"other": True}, "port": 9000},
                                  "LabApp": {"collaborative": False}}))
    assert installer.main(["--prefix", str(tmp_path)]) == 0
    written = json.loads(config.read_text())
    assert written == {"ServerApp": {"jpserver_extensions": {"other": True, "course_book.jupyter_font": True}, "port": 9000},
                       "LabApp": {"collaborative": False, "custom_css": True}}
    assert installer.main(["--prefix", str(tmp_path)]) == 0 and json.loads(config.read_text()) == written


def test_this_environment_has_it_after_make_install():
    # make install ran the installer for the test's own environment (skip where it was set up otherwise)
    import pytest

    path = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.json"
    if not path.exists():
        pytest.skip(f"{path} is missing: this environment was not set up by make install")
    config = json.loads(path.read_text())
    assert config["LabApp"]["custom_css"] is True
    assert config["ServerApp"]["jpserver_extensions"]["course_book.jupyter_font"] is True
