"""Sphinx extension: the English and the Chinese edition link to each other, page by page.

The English book is at ``_build/html/``, the Chinese one (``scripts/i18n.py build``)
at ``_build/html/zh/``, with the same page names. Each page gets, above its
text, a link to the same page in the other language, and a ``<link
rel="alternate" hreflang=...>`` in its head. In the Chinese build the tag
``lang_zh`` is set, so that ``{only} lang_zh`` blocks appear only there.
"""

from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx

ZH_DIR = "zh"


def _is_zh(app: Sphinx) -> bool:
    return str(app.config.language or "").startswith("zh")


def _set_tag(app: Sphinx, config: Any) -> None:
    if _is_zh(app):
        app.tags.add("lang_zh")


def _translate_toctree_captions(app: Sphinx, doctree: Any) -> None:
    """The captions of the table of contents' parts in the page's own catalog (the Chinese build).

    sphinx-external-toc inserts the toctrees after Sphinx has translated the
    page, so their captions (the sidebar's part names) would stay English.
    """
    if not _is_zh(app):
        return
    import os

    from sphinx import addnodes
    from sphinx.locale import init as init_locale
    from sphinx.util.i18n import docname_to_domain

    toctrees = [n for n in doctree.findall(addnodes.toctree) if n.get("caption")]
    if not toctrees:
        return
    domain = docname_to_domain(app.env.docname, app.config.gettext_compact)
    dirs = [os.path.join(app.srcdir, d) for d in app.config.locale_dirs]
    catalog, _ = init_locale(dirs, app.config.language, domain)
    for node in toctrees:
        node["caption"] = catalog.gettext(node["caption"])


def other_edition_href(pagename: str, zh: bool) -> str:
    """The relative address of ``pagename`` in the other edition, from this one's page."""
    up = "../" * pagename.count("/")
    return f"{up}../{pagename}.html" if zh else f"{up}{ZH_DIR}/{pagename}.html"


def _add_link(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    if app.builder.format != "html" or "body" not in context:
        return
    zh = _is_zh(app)
    href = other_edition_href(pagename, zh)
    lang, text = ("en", "English") if zh else ("zh-CN", "中文")
    context["body"] = (f'<p class="course-language"><a href="{href}" hreflang="{lang}" lang="{lang}">{text}</a></p>\n'
                       + context["body"])
    context["metatags"] = context.get("metatags", "") + f'\n<link rel="alternate" hreflang="{lang}" href="{href}" />'


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", _set_tag)
    app.connect("doctree-read", _translate_toctree_captions)
    app.connect("html-page-context", _add_link)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
