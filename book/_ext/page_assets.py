"""Sphinx extension: the scripts each page needs, each once.

1. Vega on the pages with an explorer. The explorers (``course_book.explorers``)
   are Vega-Lite charts whose HTML calls ``vegaEmbed``. The book serves Vega,
   Vega-Lite and vega-embed itself (``scripts/vendor_js.sh`` copies them to
   ``_static/vendor/vega/``), so the charts draw and respond offline. The three
   scripts are added to each page whose body holds an explorer, and to no other
   page (about 800 kB), before any other script, so that each defines its
   global (``vega``, ``vegaLite``, ``vegaEmbed``) even where an AMD loader
   (RequireJS) is also loaded.
2. jupyterquiz on the pages with a concept check (``course_book.quiz``). A
   quiz's notebook output is HTML (container, styles, the questions as JSON,
   a call to ``courseQuiz.show``) plus jupyterquiz's own JavaScript for
   Jupyter. In the book the JavaScript output is dropped (it would inline the
   library on every quiz) and the page loads the library once from
   ``_static/vendor/jupyterquiz/jupyterquiz.js`` -- written at the end of the
   build from the installed ``jupyterquiz`` package, so it is the version
   that made the notebooks' outputs -- and ``_static/course_quiz.js``
   (``book/_assets``), only where a quiz is.
3. No script twice. Jupyter Book registers sphinx-thebe's and
   sphinx-togglebutton's inline configuration twice, so every page declared
   ``const THEBE_JS_URL`` twice and logged "Identifier 'THEBE_JS_URL' has
   already been declared". The second copy of an identical script is dropped.
"""

from __future__ import annotations

from typing import Any

from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform

MARKER = 'class="course-explorer"'
SCRIPTS = ("vendor/vega/vega.min.js", "vendor/vega/vega-lite.min.js", "vendor/vega/vega-embed.min.js")
QUIZ_MARKER = 'class="course-quiz"'
QUIZ_SCRIPTS = ("vendor/jupyterquiz/jupyterquiz.js", "course_quiz.js")
QUIZ_JS_MARKER = "/* course-quiz: notebook script */"  # course_book.quiz.JS_MARKER, the script's first line


def _add_vega(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    if MARKER in context.get("body", ""):
        for priority, script in enumerate(SCRIPTS, start=100):
            app.add_js_file(script, priority=priority)


def _add_quiz(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    if QUIZ_MARKER in context.get("body", ""):
        for priority, script in enumerate(QUIZ_SCRIPTS, start=200):
            app.add_js_file(script, priority=priority)


class DropQuizNotebookScript(SphinxPostTransform):
    """Remove the Jupyter-only JavaScript output of each quiz (before MyST-NB picks MIME types)."""

    default_priority = 3  # MyST-NB's SelectMimeType runs at 4

    def run(self, **kwargs: Any) -> None:
        for node in list(self.document.findall(nodes.container)):
            if node.get("nb_element") != "mime_bundle":
                continue
            for child in node.children:
                if child.get("mime_type") == "application/javascript" and QUIZ_JS_MARKER in child.astext()[:200]:
                    node.parent.remove(node)
                    break


def _write_jupyterquiz(app: Sphinx, exception: Exception | None) -> None:
    """Copy the installed jupyterquiz's scripts into one file, as jupyterquiz itself joins them."""
    if exception is not None or app.builder.format != "html":
        return
    import importlib.resources

    js_dir = importlib.resources.files("jupyterquiz").joinpath("js")
    parts = [f.read_text(encoding="utf-8") for f in sorted(js_dir.iterdir(), key=lambda f: f.name) if f.name.endswith(".js")]
    out = Path(app.outdir) / "_static" / "vendor" / "jupyterquiz"
    out.mkdir(parents=True, exist_ok=True)
    import jupyterquiz

    (out / "jupyterquiz.js").write_text(
        f"/* jupyterquiz {jupyterquiz.__version__} (MIT License, John M. Shea): its js/*.js, joined */\n" + "\n".join(parts),
        encoding="utf-8")
    from importlib.metadata import distribution

    license_text = distribution("jupyterquiz").read_text("LICENSE") or "MIT License (see https://pypi.org/project/jupyterquiz/)\n"
    (out / "LICENSE.txt").write_text(license_text, encoding="utf-8")


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
    app.connect("html-page-context", _add_quiz, priority=402)
    app.add_post_transform(DropQuizNotebookScript)
    app.connect("build-finished", _write_jupyterquiz)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
