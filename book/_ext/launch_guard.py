"""Sphinx extension: launch buttons only when the repository address is set.

`_config.yml` configures Binder and Colab launch buttons, but
sphinx-book-theme builds their links from `repository.url`, and with an empty
address it fails on every notebook page ("cannot unpack non-iterable NoneType
object"). This extension switches the launch buttons off while
`repository.url` is empty, so that one setting decides: fill in the address
and the buttons appear, with nothing else to change.
"""

from __future__ import annotations

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

logger = logging.getLogger(__name__)


def _disable_launch_buttons_without_repository(app: Sphinx, config: Config) -> None:
    options = dict(config.html_theme_options or {})
    if str(options.get("repository_url") or "").strip():
        return
    if options.get("launch_buttons"):
        options["launch_buttons"] = {}
        config.html_theme_options = options
        logger.info(
            "[launch_guard] repository.url is empty in _config.yml: "
            "Binder/Colab launch buttons are off until it is set"
        )


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _disable_launch_buttons_without_repository)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
