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
## Exercise 2.1 — the scaled embedding, with padding

An embedding layer holds a matrix $W_E \in \mathbb{R}^{V \times d_{\text{model}}}$, one row per
token id. Section 3.4 of the paper adds one detail: *"In the embedding layers, we multiply
those weights by $\sqrt{d_{\text{model}}}$"*:

$$\text{Embed}(t) = \sqrt{d_{\text{model}}}\; W_E[t]$$

Chapter 2 shows `TokenEmbedding`, which does this as a layer. Here you write it as a function,
with one more guarantee: **a padding position contributes nothing**. `nn.Embedding(padding_idx=…)`
only sets the padding row to zero when the layer is created and stops its gradient; a weight
matrix loaded from elsewhere (or edited) may hold anything in that row. Your function zeroes the
output at every padding position, whatever the row holds.

Write `scaled_embedding(tokens, weight, padding_idx=None)`:

* `tokens`: an integer tensor of token ids of any shape, e.g. `(batch, seq_len)`;
* `weight`: the float matrix $W_E$ of shape `(vocab_size, d_model)`;
* `padding_idx`: `None` (no padding), or the padding id;
* returns a float tensor of shape `tokens.shape + (d_model,)`: `weight[t] * sqrt(d_model)` at each
  position holding id `t`, and a vector of zeros where `t == padding_idx`.

Raise `ValueError` (with a message naming `tokens`) when `tokens` is not an integer tensor,
or when an id lies outside `[0, vocab_size)`; and naming `padding_idx` when it is not `None` and
outside `[0, vocab_size)`.

Example: with `weight = torch.ones(3, 4)`, `scaled_embedding(torch.tensor([[1, 0]]), weight, padding_idx=0)`
is `[[[2., 2., 2., 2.], [0., 0., 0., 0.]]]`.

**Hints.** Indexing `weight[tokens]` picks one row per id, for any shape of `tokens`.
`tokens.dtype.is_floating_point` tells floats apart; `tokens.dtype == torch.bool` is not an id
either. Check the range with `tokens.min()` and `tokens.max()`. `(tokens != padding_idx)[..., None]`
has a trailing dimension of size 1 that broadcasts over `d_model`. Do not write into `weight`.
'''),
    ("exercise", "2.1", r'''
def scaled_embedding(tokens, weight, padding_idx=None):
    """Look up each token's row of ``weight``, scale it by sqrt(d_model), zero the padding.

    Args:
        tokens: integer tensor (torch.long or another integer dtype) of ids,
            any shape ``S`` (usually ``(batch, seq_len)``), each id in
            ``[0, vocab_size)``.
        weight: float tensor ``(vocab_size, d_model)``, the embedding matrix.
        padding_idx: ``None``, or the id whose positions come out as zeros.

    Returns:
        float tensor of shape ``S + (d_model,)`` (the dtype of ``weight``):
        ``weight[tokens] * sqrt(d_model)``, zero at the positions of ``padding_idx``.

    Raises:
        ValueError: ``tokens`` is not an integer tensor, or holds an id
            outside ``[0, vocab_size)``; ``padding_idx`` outside ``[0, vocab_size)``.

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
    embedded = weight[tokens] * math.sqrt(d_model)
    if padding_idx is None:
        return embedded
    if not 0 <= padding_idx < vocab_size:
        raise ValueError(f"padding_idx must lie in [0, {vocab_size}); got {padding_idx}")
    return embedded * (tokens != padding_idx)[..., None].to(embedded.dtype)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The course's `TokenEmbedding` layer does the same lookup and scaling; your
function, given its weight, should agree with it. Then spoil the padding row and look at the
padded position.
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

spoiled = emb.weight.detach().clone()
spoiled[0] = 1.0                                          # a padding row that is no longer zero
padded = torch.tensor([[5, 6, 0, 0]])
print("padded positions, padding_idx=0:   ", scaled_embedding(padded, spoiled, padding_idx=0)[0, 2:].tolist())
print("padded positions, padding ignored: ", scaled_embedding(padded, spoiled)[0, 2:].tolist())
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
    ("md", r'''
## Exercise 2.3 — why the $\sqrt{d_{\text{model}}}$ scale matters, in numbers

Chapter 2 measures that, with `TokenEmbedding`'s initialisation, the scale makes a word's vector
about as long as the positional encoding added to it. Here you predict those sizes for **any**
width and **any** initialisation, without drawing a single random number.

Take an embedding row with independent entries of mean 0 and standard deviation `init_std`
(the chapter's `TokenEmbedding` uses `init_std = d_model ** -0.5`, `nn.Embedding` uses 1), and
a row of the sinusoidal positional encoding of even width `d_model`. Use

* the *typical* length of the embedding row: the root-mean-square norm
  $\sqrt{\mathbb{E}\,\lVert w \rVert^2}$ (each of the `d_model` entries has
  $\mathbb{E}\, w_j^2 = $ `init_std ** 2`); after the scale, the row is $\sqrt{d_{\text{model}}}$
  times longer;
* the length of a positional row: the pairs $\sin\theta, \cos\theta$ give
  $\lVert PE_{pos} \rVert^2 = d_{\text{model}} / 2$ at every position;
* for two *different* words at the same position, the cosine similarity of their input vectors
  $x = w_a + PE$ and $x' = w_b + PE$ is, in expectation over random rows, about
  $$c = \frac{\lVert PE \rVert^2}{\lVert PE \rVert^2 + \mathbb{E}\lVert w \rVert^2}$$
  (the cross terms $w_a \cdot w_b$, $w \cdot PE$ average to 0): close to 1 means the words are drowned.

Write `scale_ratios(d_model, init_std)` returning a float tensor of shape `(2, 2)`:

* row 0 without the scale, row 1 with the $\sqrt{d_{\text{model}}}$ scale;
* column 0: the ratio (typical embedding norm) / (positional norm); column 1: $c$.

Raise `ValueError` naming `d_model` when it is odd or smaller than 2, and naming `init_std` when
it is not positive.

Example: `scale_ratios(512, 512 ** -0.5)` is about `[[0.0625, 0.9961], [1.4142, 0.3333]]` —
the chapter's "16 times larger" position and its measured similarities 1.00 and 0.33.
'''),
    ("exercise", "2.3", r'''
def scale_ratios(d_model, init_std):
    """Predicted sizes of an embedding row against a positional row, without and with the scale.

    Args:
        d_model: even int >= 2.
        init_std: standard deviation of the embedding entries (float > 0).

    Returns:
        float tensor ``(2, 2)``: row 0 unscaled, row 1 scaled by sqrt(d_model);
        column 0 ``sqrt(E||w||^2) / ||PE||``, column 1 ``||PE||^2 / (||PE||^2 + E||w||^2)``.

    Raises:
        ValueError: odd or too small ``d_model``; ``init_std <= 0``.

    Source: Vaswani et al. (2017), sections 3.4 and 3.5; chapter 2.
    """
    ### BEGIN SOLUTION
    if not isinstance(d_model, int) or d_model < 2 or d_model % 2:
        raise ValueError(f"d_model must be an even int >= 2; got {d_model!r}")
    if not init_std > 0:
        raise ValueError(f"init_std must be > 0; got {init_std!r}")
    pe_sq = d_model / 2                                   # ||PE[pos]||^2
    rows = []
    for factor in (1.0, math.sqrt(d_model)):
        emb_sq = d_model * (init_std * factor) ** 2       # E ||w||^2 of the (scaled) row
        rows.append([math.sqrt(emb_sq / pe_sq), pe_sq / (pe_sq + emb_sq)])
    return torch.tensor(rows, dtype=torch.float64)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Predict, then measure with random rows and the real positional table, for the
chapter's initialisation and for PyTorch's default one.
'''),
    ("tryit", r'''
import course_lib.positional  # the chapter's positional table, for this measurement

gen = torch.Generator().manual_seed(0)
d_model = 256
pe = course_lib.positional.sinusoidal_encoding(1000, d_model)
for init_std in (d_model ** -0.5, 1.0):
    w = torch.randn(1000, d_model, generator=gen) * init_std
    for row, (name, table) in enumerate([("unscaled", w), ("scaled", w * math.sqrt(d_model))]):
        measured = table.norm(dim=-1).pow(2).mean().sqrt() / pe.norm(dim=-1).mean()
        cos = F.cosine_similarity(table[:500] + pe[:500], table[500:] + pe[:500], dim=-1).mean()
        predicted = scale_ratios(d_model, init_std)[row]
        print(f"init_std={init_std:.4f} {name:>8}: ratio predicted {predicted[0]:7.3f} measured {measured:7.3f};"
              f" cosine predicted {predicted[1]:.3f} measured {cos:.3f}")
'''),
]
