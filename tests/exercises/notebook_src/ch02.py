"""Source of exercises/02_embeddings.ipynb and solutions/02_embeddings.ipynb (see build_notebooks.py)."""

CHAPTER = "02"
NOTEBOOK = "02_embeddings.ipynb"
TITLE = "token embeddings"

CELLS = [
    ("code", r'''
import math
import sys

import torch
import torch.nn.functional as F

from course_lib.embedding import TokenEmbedding
'''),
    ("md", r'''
## Exercise 2.1 — the scaled embedding

An embedding layer holds a matrix $W_E \in \mathbb{R}^{V \times d_{\text{model}}}$, one row per
token id. Section 3.4 of the paper adds one detail: *"In the embedding layers, we multiply
those weights by $\sqrt{d_{\text{model}}}$"*:

$$\text{Embed}(t) = \sqrt{d_{\text{model}}}\; W_E[t]$$

Write `scaled_embedding(tokens, weight)`:

* `tokens`: an integer tensor of token ids of any shape, e.g. `(batch, seq_len)`;
* `weight`: the float matrix $W_E$ of shape `(vocab_size, d_model)`;
* returns a float tensor of shape `tokens.shape + (d_model,)`.

Raise `ValueError` (with a message naming `tokens`) when `tokens` is not an integer tensor,
or when an id lies outside `[0, vocab_size)`.

**Hints.** Indexing `weight[tokens]` picks one row per id, for any shape of `tokens`
(it is what `F.embedding(tokens, weight)` does). `tokens.dtype.is_floating_point` tells
floats apart; `tokens.dtype == torch.bool` is not an id either. Check the range with
`tokens.min()` and `tokens.max()`.
'''),
    ("exercise", "2.1", r'''
def scaled_embedding(tokens, weight):
    """Look up each token's row of ``weight`` and scale it by sqrt(d_model).

    Args:
        tokens: integer tensor (torch.long or another integer dtype) of ids,
            any shape ``S`` (usually ``(batch, seq_len)``), each id in
            ``[0, vocab_size)``.
        weight: float tensor ``(vocab_size, d_model)``, the embedding matrix.

    Returns:
        float tensor of shape ``S + (d_model,)`` (the dtype of ``weight``):
        ``weight[tokens] * sqrt(d_model)``.

    Raises:
        ValueError: ``tokens`` is not an integer tensor, or holds an id
            outside ``[0, vocab_size)``.

    Source: Vaswani et al. (2017), section 3.4; chapter 2.
    """
    ### BEGIN SOLUTION
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool or tokens.is_complex():
        raise ValueError(f"tokens must be an integer tensor of ids; got dtype {tokens.dtype}")
    vocab_size, d_model = weight.shape
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(
            f"tokens must lie in [0, {vocab_size}); got min {int(tokens.min())}, max {int(tokens.max())}"
        )
    return weight[tokens] * math.sqrt(d_model)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The course's `TokenEmbedding` layer does the same lookup and scaling; your
function, given its weight, should agree with it.
'''),
    ("tryit", r'''
emb = TokenEmbedding(vocab_size=10, d_model=4)
tokens = torch.tensor([[1, 2, 3], [4, 0, 9]])
mine = scaled_embedding(tokens, emb.weight)
print("shape:", tuple(mine.shape))                        # (2, 3, 4)
print("same as TokenEmbedding:", torch.allclose(mine, emb(tokens)))
try:
    scaled_embedding(torch.tensor([[3, 10]]), emb.weight)  # 10 is not an id of a 10-word vocabulary
except ValueError as err:
    print("ValueError:", err)
'''),
    ("md", r'''
## Exercise 2.2 — sharing the embedding with the output layer

The paper also *shares* the embedding matrix with the last linear layer of the decoder
(section 3.4, "the pre-softmax linear transformation"): the score of token $t$ at a position
whose final hidden vector is $h$ is the dot product of $h$ with that token's embedding row:

$$\text{logits} = h\, W_E^{\top} \qquad (\text{shape } (\dots, d_{\text{model}}) \to (\dots, V))$$

Write `tied_output_logits(hidden, weight)`: `hidden` has shape `(batch, seq_len, d_model)`
(or any shape ending in `d_model`), `weight` is the `(vocab_size, d_model)` embedding matrix;
return the logits of shape `(batch, seq_len, vocab_size)`. Raise `ValueError` when the last
dimension of `hidden` differs from `weight.shape[1]`.

**Hints.** `weight.T` has shape `(d_model, vocab_size)`; `@` (matrix product) broadcasts over
the leading dimensions. (The scale $\sqrt{d_{\text{model}}}$ belongs to the embedding lookup
only, not to the output layer.)
'''),
    ("exercise", "2.2", r'''
def tied_output_logits(hidden, weight):
    """Output logits computed with the (shared) embedding matrix.

    Args:
        hidden: float tensor ``(..., d_model)``, e.g. the decoder output
            ``(batch, seq_len, d_model)``.
        weight: float tensor ``(vocab_size, d_model)``, the embedding matrix.

    Returns:
        float tensor ``(..., vocab_size)``: ``hidden @ weight.T`` (no scaling).

    Raises:
        ValueError: ``hidden.shape[-1] != weight.shape[1]``.

    Source: Vaswani et al. (2017), section 3.4 (weight sharing, after Press &
    Wolf, 2017); chapter 2.
    """
    ### BEGIN SOLUTION
    if hidden.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"hidden's last dim ({hidden.shape[-1]}) must equal d_model = weight.shape[1] ({weight.shape[1]})"
        )
    return hidden @ weight.T
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** `F.linear(x, W)` computes `x @ W.T` — exactly the tied output layer. Feed it the
embeddings of tokens 0, 3 and 5 as hidden vectors and look at the best-scoring token at each
position: a vector's dot product with itself is its squared length, which tends to beat its dot
product with an unrelated random vector.
'''),
    ("tryit", r'''
gen = torch.Generator().manual_seed(0)
weight = torch.randn(6, 16, generator=gen)               # vocab_size 6, d_model 16
hidden = weight[None, [0, 3, 5]]                          # (1, 3, 16): the embeddings of tokens 0, 3, 5
logits = tied_output_logits(hidden, weight)
print("shape:", tuple(logits.shape))                      # (1, 3, 6)
print("same as F.linear:", torch.allclose(logits, F.linear(hidden, weight)))
print("best token per position:", logits.argmax(-1).tolist())
'''),
]
