"""course_lib: the companion library of the course "The Transformer, built by hand".

One module per concept, in chapter order:

* :mod:`course_lib.embedding`   - token embeddings (chapter 2)
* :mod:`course_lib.positional`  - positional encodings (chapter 3)
* :mod:`course_lib.attention`   - scaled dot-product and multi-head attention (chapters 4-5)
* :mod:`course_lib.feedforward` - the position-wise feed-forward network (chapter 6)
* :mod:`course_lib.layers`      - Add & Norm, encoder and decoder layers (chapter 7)
* :mod:`course_lib.masks`       - padding and causal masks; THE mask convention (chapter 8)
* :mod:`course_lib.model`       - the full encoder-decoder (chapter 8)
* :mod:`course_lib.data`        - tokenizers, data sets and batches (chapter 9)
* :mod:`course_lib.training`    - loss, learning-rate schedule, the training loop, checkpoints (chapter 9)
* :mod:`course_lib.decoding`    - greedy, beam search and sampling, with a KV cache (chapter 10)
* :mod:`course_lib.metrics`     - what to watch while training and evaluating, BLEU (chapters 9-11)
* :mod:`course_lib.diagnostics` - fast automated checks of a model (chapter 11)
* :mod:`course_lib.validation`  - the input checks at the public entry points
* :mod:`course_lib.translate`   - the English -> Chinese translator on the command line

Part V of the book, "Today's models", builds on the same layers (chapter 12; chapter 13 in preparation):

* :mod:`course_lib.language_model` - a decoder-only language model (chapter 12); today's block (RMSNorm,
  rotary positions, SwiGLU, grouped-query attention, no biases) as switches of the layers above
* :mod:`course_lib.lm_train`       - the character-level language model on the command line, data-parallel
  under ``torchrun`` like the translator (chapter 12)
* :mod:`course_lib.normalization`  - RMSNorm beside LayerNorm

This package is the Transformer and nothing else. Beside it, in the same
distribution: ``course_book`` (the book's listings, figures, explorers, quizzes,
Chinese edition), ``course_exercises`` (the exercises' cases and the student's
checker) and ``course_grader`` (the instructor's grader). ``course_lib`` imports
none of them (``[tool.importlinter]`` in ``pyproject.toml``); its modules ``check``
and ``grading`` only forward ``python -m course_lib.check`` and
``python -m course_lib.grading``, the names used by earlier versions.

Importing the package does no work: import the submodule you need, e.g.
``from course_lib.attention import MultiHeadAttention``.
"""

# The one version number of the project (pyproject.toml reads it; see CHANGELOG.md).
__version__ = "0.2.0"
