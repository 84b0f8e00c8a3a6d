"""Sphinx extension: the scripts each page needs, each once.

1. Vega on the pages with an explorer. The explorers (``course_lib.explorers``)
   are Vega-Lite charts whose HTML calls ``vegaEmbed``. The book serves Vega,
   Vega-Lite and vega-embed itself (``scripts/vendor_js.sh`` copies them to
   ``_static/vendor/vega/``), so the charts draw and respond offline. The three
   scripts are added to each page whose body holds an explorer, and to no other
   page (about 800 kB), before any other script, so that each defines its
   global (``vega``, ``vegaLite``, ``vegaEmbed``) even where an AMD loader
   (RequireJS) is also loaded.
2. No script twice. Jupyter Book registers sphinx-thebe's and
   sphinx-togglebutton's inline configuration twice, so every page declared
   ``const THEBE_JS_URL`` twice and logged "Identifier 'THEBE_JS_URL' has
   already been declared". The second copy of an identical script is dropped.
"""

from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx

MARKER = 'class="course-explorer"'
SCRIPTS = ("vendor/vega/vega.min.js", "vendor/vega/vega-lite.min.js", "vendor/vega/vega-embed.min.js")


def _add_vega(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    if MARKER in context.get("body", ""):
        for priority, script in enumerate(SCRIPTS, start=100):
            app.add_js_file(script, priority=priority)


def _script_key(script: Any) -> tuple:
    attributes = getattr(script, "attributes", {}) or {}
    filename = getattr(script, "filename", str(script)) or None  # inline scripts: None or ""
    return (filename, attributes.get("body"), tuple(sorted(
        (k, str(v)) for k, v in attributes.items() if k != "body")))


def _drop_repeated_scripts(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple] = set()
    unique = []
    for script in scripts:
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique  # in place: the builder adds later scripts to this same list


def setup(app: Sphinx) -> dict[str, Any]:
    # Early (the default is 500): a handler that returns a template name ends the event.
    app.connect("html-page-context", _drop_repeated_scripts, priority=400)
    app.connect("html-page-context", _add_vega, priority=401)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
