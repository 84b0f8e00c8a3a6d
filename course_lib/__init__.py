"""course_lib: the companion library of the course "The Transformer, built by hand".

One module per concept, in chapter order:

* :mod:`course_lib.embedding`   - token embeddings (chapter 2)
* :mod:`course_lib.positional`  - positional encodings (chapter 3)
* :mod:`course_lib.attention`   - scaled dot-product and multi-head attention (chapters 4-5)
* :mod:`course_lib.feedforward` - the position-wise feed-forward network (chapter 6)
* :mod:`course_lib.layers`      - Add & Norm, encoder and decoder layers (chapter 7)
* :mod:`course_lib.masks`       - padding and causal masks; THE mask convention (chapter 8)
* :mod:`course_lib.model`       - the full encoder-decoder (chapter 8)

Importing the package does no work: import the submodule you need, e.g.
``from course_lib.attention import MultiHeadAttention``.
"""

# The one version number of the project (pyproject.toml reads it; see CHANGELOG.md).
__version__ = "0.2.0"
