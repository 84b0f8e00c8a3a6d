"""One version number: ``course_lib.__version__``, and everything that shows it.

pyproject.toml reads it (setuptools dynamic version), the installed package's
metadata therefore carries it, the three commands print it with
``--version``, the book's front page gets it from a Sphinx extension
(book/_ext/course_version.py), and CITATION.cff and CHANGELOG.md name it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import course_lib

ROOT = Path(__file__).resolve().parents[2]
VERSION = course_lib.__version__


def test_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), VERSION


def test_importing_the_package_does_no_work():
    # `import course_lib` must stay cheap: setuptools, the extension and `--version` rely on it
    code = "import sys, course_lib; print(sorted(m for m in ('torch', 'numpy', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_pyproject_takes_the_version_from_the_package():
    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in meta["project"]  # no second copy of the number
    assert "version" in meta["project"]["dynamic"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "course_lib.__version__"}


def test_installed_metadata_has_the_same_version():
    # The installed distribution, not a transformer_course.egg-info left in the repository by a
    # build (the current folder comes first on sys.path and such a leftover can be stale).
    here = {"", str(ROOT), str(Path.cwd())}
    dists = list(importlib.metadata.distributions(name="transformer-course",
                                                  path=[p for p in sys.path if p not in here]))
    if not dists:
        pytest.skip("transformer-course is not installed (PYTHONPATH use)")
    dist = dists[0]
    direct = dist.read_text("direct_url.json")
    url = json.loads(direct).get("url", "") if direct else ""
    if url.startswith("file://") and Path(url[len("file://"):]).resolve() != ROOT:
        pytest.skip(f"the installed transformer-course comes from {url}, not from this repository")
    assert dist.version == VERSION, (
        f"installed metadata says {dist.version}, course_lib.__version__ is {VERSION}: "
        f"reinstall (make install, or pip install -e .)"
    )


def _version_output(main, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out.strip()


def test_commands_print_the_version(capsys):
    from course_exercises import check
    from course_lib import translate
    from course_grader import cli

    assert _version_output(translate.main, capsys) == f"python -m course_lib.translate {VERSION}"
    assert _version_output(check.main, capsys) == f"python -m course_exercises.check {VERSION}"
    # the parser only: cli.main would make this process a child subreaper if it went on
    assert _version_output(cli.build_parser().parse_args, capsys) == f"python -m course_grader {VERSION}"


def test_translate_module_command_prints_the_version():
    out = subprocess.run([sys.executable, "-m", "course_lib.translate", "--version"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["python", "-m", "course_lib.translate", VERSION]


@pytest.mark.parametrize("script", ["course-check", "course-grade"])
def test_installed_scripts_print_the_version(script):
    path = Path(sys.executable).parent / script
    if not path.exists():
        pytest.skip(f"{script} is not installed next to {sys.executable}")
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == VERSION


def _load_extension() -> types.ModuleType:
    path = ROOT / "book" / "_ext" / "course_version.py"
    spec = importlib.util.spec_from_file_location("course_version_ext", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_book_extension_sets_the_version_substitution():
    pytest.importorskip("sphinx")
    ext = _load_extension()
    config = types.SimpleNamespace(myst_substitutions={"other": "kept", "version": "0.0.0-stale"})
    ext._set_version(None, config)
    assert config.myst_substitutions == {"other": "kept", "version": VERSION}
    config = types.SimpleNamespace(myst_substitutions=None)
    ext._set_version(None, config)
    assert config.myst_substitutions == {"version": VERSION}


def test_book_uses_the_extension_and_the_substitution():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert config["sphinx"]["local_extensions"].get("course_version") == "book/_ext"
    assert "substitution" in config["parse"]["myst_enable_extensions"]
    assert "version" not in (config["parse"].get("myst_substitutions") or {})
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    assert "{{ version }}" in intro and VERSION not in intro


def test_citation_file_names_the_same_version():
    yaml = pytest.importorskip("yaml")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    assert str(cff["version"]) == VERSION
    for key in ("message", "title"):
        assert isinstance(cff[key], str) and cff[key].strip()
    assert cff["authors"] == [{"name": "The course authors"}]
    assert "url" not in cff and "doi" not in cff  # the repository address is not set yet (_config.yml)
    assert any(ref["title"] == "Attention Is All You Need" and ref["year"] == 2017 for ref in cff["references"])


def test_changelog_has_a_section_for_this_version():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[([^\]]+)\]", changelog, flags=re.M)
    assert headings and headings[0] == VERSION, headings  # the newest release comes first
    assert "0.1.0" in headings
