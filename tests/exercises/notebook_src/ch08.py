"""Source of exercises/08_masks.ipynb and its solution (see build_notebooks.py)."""

CHAPTER = "08"
NOTEBOOK = "08_masks.ipynb"
TITLE = "padding and causal masks"

CELLS = [
    ("code", r'''
import sys

import torch

from course_lib.model import Transformer, TransformerConfig
'''),
    ("md", r'''
**The course's mask convention.** A mask is a `torch.bool` tensor in which `True` means *this
query may attend to this key* and `False` means *blocked*, broadcastable to the attention-score
shape `(batch, n_heads, q_len, k_len)` — the meaning used by
`torch.nn.functional.scaled_dot_product_attention`. (Beware: `torch.nn.MultiheadAttention` and
`torch.nn.Transformer` use the opposite meaning for their boolean masks.)

## Exercise 8.1 — the padding mask

Sentences of a batch have different lengths, so the short ones are filled up with a padding id.
No query may attend to a padding key. Write `padding_mask(tokens, pad_id)`: for `tokens` of shape
`(batch, seq_len)` return the bool mask of shape `(batch, 1, 1, seq_len)` that is `True` at the
real tokens. The two 1s broadcast over the heads and over the query positions. Raise
`ValueError` (naming `tokens`) when `tokens` is not 2-D.

**Hints.** `tokens != pad_id` is already a bool tensor; `x[:, None, None, :]` inserts the two
dimensions.
'''),
    ("exercise", "8.1", r'''
def padding_mask(tokens, pad_id):
    """Mask that blocks attention to padding keys.

    Args:
        tokens: integer tensor ``(batch, seq_len)`` of token ids.
        pad_id: the id of the padding token.

    Returns:
        torch.bool tensor ``(batch, 1, 1, seq_len)``; True (may attend) where
        ``tokens != pad_id``.

    Raises:
        ValueError: ``tokens`` is not 2-D.

    Source: chapter 8 (every implementation needs it; the paper does not spell it out).
    """
    ### BEGIN SOLUTION
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape (batch, seq_len); got {tuple(tokens.shape)}")
    return (tokens != pad_id)[:, None, None, :]
    ### END SOLUTION
'''),
    ("md", r'''
## Exercise 8.2 — the causal mask

The decoder predicts token $i+1$ from tokens $0 \dots i$; during training it sees the whole
target sentence at once, so position $i$ must be kept from looking at later positions
(section 3.2.3, "masking out … illegal connections"):

$$\text{mask}[i, j] = (j \le i)$$

Write `causal_mask(size)` returning the bool tensor of shape `(1, 1, size, size)` that is `True`
on and below the diagonal. Raise `ValueError` (naming `size`) when `size < 1`.

**Hints.** `torch.ones(size, size, dtype=torch.bool).tril()`, then add two leading dimensions.
'''),
    ("exercise", "8.2", r'''
def causal_mask(size):
    """Lower-triangular mask: query i may attend to keys j <= i.

    Args:
        size: sequence length (int >= 1).

    Returns:
        torch.bool tensor ``(1, 1, size, size)``; entry ``[0, 0, i, j]`` is
        True iff ``j <= i``.

    Raises:
        ValueError: ``size < 1``.

    Source: Vaswani et al. (2017), section 3.2.3; chapter 8.
    """
    ### BEGIN SOLUTION
    if size < 1:
        raise ValueError(f"size must be >= 1; got {size}")
    return torch.ones(size, size, dtype=torch.bool).tril()[None, None]
    ### END SOLUTION
'''),
    ("md", r'''
## Exercise 8.3 — the decoder's self-attention mask

The decoder's self-attention needs both rules at once: no future position and no padding.
Write `decoder_self_attention_mask(tgt, pad_id)` returning the `(batch, 1, tgt_len, tgt_len)`
bool mask `padding AND causal`.

**Hints.** Broadcasting `(batch, 1, 1, L) & (1, 1, L, L)` gives `(batch, 1, L, L)`; reuse your
two functions.
'''),
    ("exercise", "8.3", r'''
def decoder_self_attention_mask(tgt, pad_id):
    """Causal mask AND target padding mask, for the decoder's self-attention.

    Args:
        tgt: integer tensor ``(batch, tgt_len)`` of decoder input ids.
        pad_id: the id of the padding token.

    Returns:
        torch.bool tensor ``(batch, 1, tgt_len, tgt_len)``; entry ``[b, 0, i, j]``
        is True iff ``j <= i`` and ``tgt[b, j] != pad_id``.

    Raises:
        ValueError: ``tgt`` is not 2-D.

    Source: Vaswani et al. (2017), section 3.2.3; chapter 8.
    """
    ### BEGIN SOLUTION
    return padding_mask(tgt, pad_id) & causal_mask(tgt.shape[1])
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Your masks must equal the library's, and a (small, untrained) course Transformer
given your masks must produce exactly the logits it produces with its own default masks (built
from `pad_id = 0`).
'''),
    ("tryit", r'''
import course_lib.masks  # the course's own masks, for this comparison only

src = torch.tensor([[5, 6, 7, 0, 0], [8, 9, 4, 3, 2]])
tgt = torch.tensor([[1, 4, 5, 0], [1, 6, 0, 0]])
print(padding_mask(src, 0).int()[:, 0, 0])
print(causal_mask(4).int()[0, 0])
print("same as course_lib:",
      torch.equal(padding_mask(src, 0), course_lib.masks.padding_mask(src, 0)),
      torch.equal(causal_mask(4), course_lib.masks.causal_mask(4)),
      torch.equal(decoder_self_attention_mask(tgt, 0), course_lib.masks.decoder_self_attention_mask(tgt, 0)))

torch.manual_seed(0)
config = TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=16, n_heads=2, n_encoder_layers=1,
                           n_decoder_layers=1, d_ff=32, dropout=0.0, pad_id=0)
model = Transformer(config).eval()
with torch.no_grad():
    mine = model(src, tgt, src_mask=padding_mask(src, 0), tgt_mask=decoder_self_attention_mask(tgt, 0))
    print("model logits with your masks == with the default masks:", torch.allclose(mine, model(src, tgt)))
'''),
]
