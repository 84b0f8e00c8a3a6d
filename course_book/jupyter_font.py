"""JupyterLab with the course's Chinese font: a small Jupyter server extension.

JupyterLab draws the chapters' outputs and explorers with the fonts of the
student's machine; many Linux machines and containers have no Chinese font, and
Chinese tokens, captions and printed sentences then show as empty boxes. The
course ships a Noto Sans SC subset (``course_book/fonts/``) and a style sheet,
``course_book/fonts/custom.css``, that declares it and adds it to the end of
JupyterLab's font lists.

JupyterLab loads a style sheet named ``custom.css`` when its option
``LabApp.custom_css`` is on, from the server's "custom" folders (the user's
``~/.jupyter/custom`` by default; not a configurable option). This extension
puts ``course_book/fonts/`` first among those folders, so ``/custom/custom.css``
and the font beside it come from the course. ``make install`` turns both on for
the course's environment only (``scripts/install_lab_font.py``).
"""

from __future__ import annotations

from pathlib import Path

FONTS = Path(__file__).resolve().parent / "fonts"


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "course_book.jupyter_font"}]


def _load_jupyter_server_extension(serverapp) -> None:
    # JupyterLab's handler for /custom/ reads this same list on every request: changed in place.
    folders = serverapp.web_app.settings["static_custom_path"]
    if str(FONTS) not in folders:
        folders.insert(0, str(FONTS))
    serverapp.log.info("transformer course: JupyterLab's custom CSS and Chinese font from %s", FONTS)
