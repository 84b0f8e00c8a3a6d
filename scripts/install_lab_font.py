#!/usr/bin/env python3
"""Make the environment's JupyterLab show Chinese text without a system CJK font.

JupyterLab draws the chapters' outputs and explorers with the fonts of the
student's machine, and many Linux machines and containers have no Chinese
font: Chinese tokens, captions and printed sentences then show as empty boxes.
This sets two options in the environment's Jupyter server configuration,
``<prefix>/etc/jupyter/jupyter_server_config.json`` (kept with any other
settings it has; nothing in the user's home): JupyterLab's custom CSS on
(``LabApp.custom_css``), and the server extension ``course_book.jupyter_font``,
which serves that CSS, ``course_book/fonts/custom.css``, with the course's Noto
Sans SC subset beside it (a user's own ``~/.jupyter/custom/custom.css`` is then
not used in this environment).

Usage (``make install`` runs it): ``.venv/bin/python scripts/install_lab_font.py``.
``--print`` shows the file's new content instead of writing it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path



def lab_config() -> dict:
    """The options: custom CSS on, and the extension that serves it from course_book's font folder."""
    from course_book.jupyter_font import FONTS

    for needed in ("custom.css", "NotoSansSC-Regular-subset.ttf"):
        if not (FONTS / needed).is_file():
            raise FileNotFoundError(f"{FONTS / needed} is missing: reinstall the course (pip install -e .)")
    return {"LabApp": {"custom_css": True}, "ServerApp": {"jpserver_extensions": {"course_book.jupyter_font": True}}}


def config_path(prefix: str = sys.prefix) -> Path:
    """Where the environment's Jupyter server reads it."""
    return Path(prefix) / "etc" / "jupyter" / "jupyter_server_config.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print the configuration, write nothing")
    parser.add_argument("--prefix", default=sys.prefix, help="the environment (default: this Python's)")
    args = parser.parse_args(argv)
    path = config_path(args.prefix)
    config = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    for section, options in lab_config().items():
        for name, value in options.items():
            if isinstance(value, dict):
                config.setdefault(section, {}).setdefault(name, {}).update(value)
            else:
                config.setdefault(section, {})[name] = value
    text = json.dumps(config, indent=2) + "\n"
    if args.print:
        print(text, end="")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"JupyterLab shows Chinese with the course's font: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
