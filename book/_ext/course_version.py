"""Sphinx extension: the book shows the course's version without a copy of the number.

The one version number of the project is ``course_lib.__version__``
(pyproject.toml reads it; CITATION.cff and CHANGELOG.md name it). This
extension puts it into the MyST substitution ``{{ version }}`` (the
``substitution`` extension is enabled in ``_config.yml``), used on the front
page. A ``version`` substitution set in ``_config.yml`` (``parse:
myst_substitutions:``) is overridden: there is one number.
"""

from __future__ import annotations

from sphinx.application import Sphinx
from sphinx.config import Config


def course_version() -> str:
    """``course_lib.__version__`` (importing ``course_lib`` does no work)."""
    import course_lib

    return course_lib.__version__


def _set_version(app: Sphinx, config: Config) -> None:
    version = course_version()
    config.myst_substitutions = {**(config.myst_substitutions or {}), "version": version}


def setup(app: Sphinx) -> dict:
    # myst_parser reads myst_substitutions at builder-inited, after config-inited.
    app.connect("config-inited", _set_version)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
