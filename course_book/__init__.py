"""course_book: the book's helpers, beside the library it teaches (``course_lib``).

What the chapters call to *show* things, none of which is the Transformer:

* :mod:`course_book.viz`       - listings (``show_source``: a library object's real
  source, the numbers checked by ``scripts/listing_metrics.py``), heatmaps, the
  bundled Chinese font (``use_cjk_font``; ``fonts/``);
* :mod:`course_book.explorers` - interactive figures (Altair/Vega-Lite charts that
  respond in the web book without a kernel);
* :mod:`course_book.quiz`      - the concept checks at the end of each chapter;
* :mod:`course_book.i18n`      - the Chinese edition: figures drawn once more with
  their labels from ``locales/zh_CN/LC_MESSAGES/outputs.po``, and the MyST-NB
  renderer that puts them in the Chinese build.

It imports ``course_lib`` (to show it), never the reverse: the direction is a
contract in ``pyproject.toml`` (``[tool.importlinter]``), checked by ``lint-imports``.
Importing this package does no work: import the submodule you need.
"""
