"""Sphinx extension: a chapter's link to its exercise notebook downloads it.

Each chapter ends with a Markdown link to its exercise notebook,
``[exercises/NN_name.ipynb](../exercises/NN_name.ipynb)``. In JupyterLab that
relative link opens the notebook. In the book the exercise notebooks are not
pages (``exercises`` is in ``exclude_patterns``), so MyST would report an
unknown document; this transform turns the link into a download link instead:
Sphinx copies the notebook into ``_downloads/`` and the link works on the built
site, offline, with no repository address. A link to a notebook that does not
exist stays an error (Sphinx: "download file not readable"), which ``-W``
turns into a failed build.
"""

from __future__ import annotations

import re
from typing import Any

from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform

DOCNAME = re.compile(r"^exercises/\d\d_[A-Za-z0-9_]+$")          # a resolved link (the file exists)
RELATIVE = re.compile(r"^(\.\./)*exercises/\d\d_[A-Za-z0-9_]+\.ipynb$")  # an unresolved one (missing file)


class ExerciseNotebookLinks(SphinxTransform):
    default_priority = 500

    def apply(self, **kwargs: Any) -> None:
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst":
                continue
            target = node.get("reftarget", "")
            if node.get("refdomain") == "doc" and DOCNAME.match(target):
                target = "/" + target + ".ipynb"  # a leading / is the source root for Sphinx
            elif not (node.get("refdomain") is None and RELATIVE.match(target)):
                continue
            link = addnodes.download_reference(
                refdomain=None, reftarget=target, refdoc=node.get("refdoc"), reftype="myst",
                refexplicit=node.get("refexplicit", True), classes=["xref", "download", "myst"])
            link += node.children
            node.replace_self(link)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_transform(ExerciseNotebookLinks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
