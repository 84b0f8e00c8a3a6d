"""Source of exercises/08_masks.ipynb and its solution (see build_notebooks.py)."""

CHAPTER = "08"
NOTEBOOK = "08_masks.ipynb"
TITLE = "padding, causal and prefix-LM masks"

CELLS = [
    ("code", r'''
import sys

import torch
import torch.nn.functional as F

from course_lib.model import Transformer, TransformerConfig
'''),
    ("md", r'''
**The course's mask convention.** A mask is a `torch.bool` tensor in which `True` means *this
query may attend to this key* and `False` means *blocked*, broadcastable to the attention-score
shape `(batch, n_heads, q_len, k_len)` — the meaning used by
`torch.nn.functional.scaled_dot_product_attention`. (Beware: `torch.nn.MultiheadAttention` and
`torch.nn.Transformer` use the opposite meaning for their boolean masks.)

## Exercise 8.1 — the padding mask from sentence lengths

The chapter builds the padding mask from the token ids (`tokens != pad_id`). Data loaders often
hand you the **lengths** of the sentences instead: sentence $b$ has `lengths[b]` real tokens,
followed by padding up to `seq_len` (right padding). Write `padding_mask(lengths, seq_len)`: for
an integer tensor `lengths` of shape `(batch,)` return the bool mask of shape
`(batch, 1, 1, seq_len)` that is `True` at the real tokens, i.e. entry `[b, 0, 0, j]` is
`j < lengths[b]`. The two 1s broadcast over the heads and over the query positions. A length of 0
(an empty sentence) is allowed. Raise `ValueError` naming `lengths` when it is not 1-D or when a
length is negative or larger than `seq_len`.

**Example.** `padding_mask(torch.tensor([3, 1]), 4)[:, 0, 0]` is
`[[True, True, True, False], [True, False, False, False]]`.

**Hints.** `torch.arange(seq_len)` has shape `(seq_len,)` and `lengths[:, None]` shape
`(batch, 1)`: comparing them broadcasts to `(batch, seq_len)`; `x[:, None, None, :]` inserts the
two dimensions.
'''),
    ("exercise", "8.1", r'''
def padding_mask(lengths, seq_len):
    """Mask that blocks attention to the padding keys of a right-padded batch.

    Args:
        lengths: integer tensor ``(batch,)``: the number of real tokens of each sentence.
        seq_len: the padded length (int).

    Returns:
        torch.bool tensor ``(batch, 1, 1, seq_len)``; entry ``[b, 0, 0, j]`` is
        True (may attend) iff ``j < lengths[b]``.

    Raises:
        ValueError: ``lengths`` is not 1-D, or a length is < 0 or > ``seq_len``.

    Source: chapter 8 (every implementation needs it; the paper does not spell it out).
    """
    ### BEGIN SOLUTION
    if lengths.dim() != 1:
        raise ValueError(f"lengths must have shape (batch,); got {tuple(lengths.shape)}")
    if bool((lengths < 0).any()) or bool((lengths > seq_len).any()):
        raise ValueError(f"lengths must lie in [0, seq_len={seq_len}]; got {lengths.tolist()}")
    keep = torch.arange(seq_len, device=lengths.device)[None, :] < lengths[:, None]   # (batch, seq_len)
    return keep[:, None, None, :]
    ### END SOLUTION
'''),
    ("md", r'''
## Exercise 8.2 — the causal mask when the queries are the last positions

The chapter's causal mask is square: $\text{mask}[i, j] = (j \le i)$ for a sequence attending to
itself. With a **KV cache** (chapter 10), or when a long sequence is processed in chunks, the
queries are only the **last** `q_len` positions of a sequence whose `k_len` keys are all there
(`k_len >= q_len`). Query $i$ (counted from 0 among the queries) then sits at position
$k_{\text{len}} - q_{\text{len}} + i$ of the sequence, and may attend to every key up to it:

$$\text{mask}[i, j] = \big(j \le i + (k_{\text{len}} - q_{\text{len}})\big)$$

Write `causal_mask(q_len, k_len=None)` returning the bool tensor of shape `(1, 1, q_len, k_len)`;
`k_len=None` means `k_len = q_len` (the square mask of the chapter). Raise `ValueError` naming
`q_len` when `q_len < 1` and naming `k_len` when `k_len < q_len`.

**Example.** `causal_mask(2, 4)[0, 0]` is `[[True, True, True, False], [True, True, True, True]]`:
the two queries are positions 2 and 3. And `causal_mask(1, k_len)` (one new token) is all `True`.

**Beware.** `F.scaled_dot_product_attention(..., is_causal=True)` aligns a non-square causal mask
to the **top-left** (`j <= i`), which is *not* what a cache needs — the try-it cell shows it.

**Hints.** `torch.ones(q_len, k_len, dtype=torch.bool).tril(diagonal=...)`, then two leading
dimensions.
'''),
    ("exercise", "8.2", r'''
def causal_mask(q_len, k_len=None):
    """Causal mask for the last q_len positions (queries) of k_len positions (keys).

    Args:
        q_len: number of queries (int >= 1): the last q_len positions.
        k_len: number of keys (int >= q_len); None means q_len (square mask).

    Returns:
        torch.bool tensor ``(1, 1, q_len, k_len)``; entry ``[0, 0, i, j]`` is
        True iff ``j <= i + (k_len - q_len)``.

    Raises:
        ValueError: ``q_len < 1`` (names q_len) or ``k_len < q_len`` (names k_len).

    Source: Vaswani et al. (2017), section 3.2.3; chapters 8 and 10.
    """
    ### BEGIN SOLUTION
    if q_len < 1:
        raise ValueError(f"q_len must be >= 1; got {q_len}")
    if k_len is None:
        k_len = q_len
    if k_len < q_len:
        raise ValueError(f"k_len must be >= q_len={q_len}; got {k_len}")
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(diagonal=k_len - q_len)[None, None]
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Your rectangular mask next to the top-left one of `is_causal=True`, and the test that
matters: attention of the last two queries with your `causal_mask(2, 6)` must equal the last two
rows of full causal self-attention over the six positions.
'''),
    ("tryit", r'''
print(causal_mask(2, 6).int()[0, 0])
torch.manual_seed(0)
q, k, v = (torch.randn(1, 1, 6, 4) for _ in range(3))
full = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(6))
last_two = F.scaled_dot_product_attention(q[:, :, -2:], k, v, attn_mask=causal_mask(2, 6))
top_left = F.scaled_dot_product_attention(q[:, :, -2:], k, v, is_causal=True)
print("your mask == last rows of full causal attention:", torch.allclose(last_two, full[:, :, -2:], atol=1e-6))
print("is_causal=True (top-left) == last rows:        ", torch.allclose(top_left, full[:, :, -2:], atol=1e-6))
'''),
    ("md", r'''
## Exercise 8.3 — the decoder's self-attention mask, for the last queries

The decoder's self-attention needs both rules at once: no future position and no padding key.
Write `decoder_self_attention_mask(tgt, pad_id, q_len=None)` for the decoder input `tgt` of
shape `(batch, tgt_len)`: the queries are the last `q_len` positions (`None`: all `tgt_len` of
them), the keys are all `tgt_len` positions, and the result is the
`(batch, 1, q_len, tgt_len)` bool mask

$$\text{mask}[b, 0, i, j] = \big(\text{tgt}[b, j] \ne \text{pad\_id}\big) \;\wedge\; \big(j \le i + \text{tgt\_len} - q_{\text{len}}\big).$$

Padding may be anywhere in `tgt` (left padding too: a left-padded prompt has its padding at the
start). Raise `ValueError` naming `tgt` when it is not 2-D, and naming `q_len` when it is
smaller than 1 or larger than `tgt_len`.

**Example.** `tgt = [[1, 7, 2, 0]]`, `pad_id = 0`, `q_len = 1`: `[[[[True, True, True, False]]]]`.

**Hints.** Broadcasting `(batch, 1, 1, L) & (1, 1, q_len, L)` gives `(batch, 1, q_len, L)`; use
your `causal_mask(q_len, tgt_len)` from 8.2 for the second factor, and build the first from
`tgt != pad_id` (your 8.1 takes lengths, which do not describe left padding).
'''),
    ("exercise", "8.3", r'''
def decoder_self_attention_mask(tgt, pad_id, q_len=None):
    """Causal mask AND target padding mask, for the last q_len decoder positions.

    Args:
        tgt: integer tensor ``(batch, tgt_len)`` of decoder input ids.
        pad_id: the id of the padding token.
        q_len: number of queries, the last q_len positions (None: tgt_len).

    Returns:
        torch.bool tensor ``(batch, 1, q_len, tgt_len)``; entry ``[b, 0, i, j]``
        is True iff ``j <= i + tgt_len - q_len`` and ``tgt[b, j] != pad_id``.

    Raises:
        ValueError: ``tgt`` is not 2-D (names tgt), or ``q_len`` is < 1 or > tgt_len (names q_len).

    Source: Vaswani et al. (2017), section 3.2.3; chapter 8.
    """
    ### BEGIN SOLUTION
    if tgt.dim() != 2:
        raise ValueError(f"tgt must have shape (batch, tgt_len); got {tuple(tgt.shape)}")
    length = tgt.shape[1]
    if q_len is None:
        q_len = length
    if not 1 <= q_len <= length:
        raise ValueError(f"q_len must be in [1, tgt_len={length}]; got {q_len}")
    return (tgt != pad_id)[:, None, None, :] & causal_mask(q_len, length)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** With `q_len=None` your mask must equal the library's, and a (small, untrained) course
Transformer given your masks must produce exactly the logits it produces with its own default
masks (built from `pad_id = 0`). With `q_len` given, the rows must be the last rows of the full
mask.
'''),
    ("tryit", r'''
import course_lib.masks  # the course's own masks, for this comparison only

src = torch.tensor([[5, 6, 7, 0, 0], [8, 9, 4, 3, 2]])
tgt = torch.tensor([[1, 4, 5, 0], [1, 6, 0, 0]])
src_mask = padding_mask((src != 0).sum(dim=1), src.shape[1])
print(src_mask.int()[:, 0, 0])
print("same as course_lib:",
      torch.equal(src_mask, course_lib.masks.padding_mask(src, 0)),
      torch.equal(causal_mask(4), course_lib.masks.causal_mask(4)),
      torch.equal(decoder_self_attention_mask(tgt, 0), course_lib.masks.decoder_self_attention_mask(tgt, 0)))
print("q_len=2 gives the last two rows:",
      torch.equal(decoder_self_attention_mask(tgt, 0, 2), decoder_self_attention_mask(tgt, 0)[:, :, -2:]))

torch.manual_seed(0)
config = TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=16, n_heads=2, n_encoder_layers=1,
                           n_decoder_layers=1, d_ff=32, dropout=0.0, pad_id=0)
model = Transformer(config).eval()
with torch.no_grad():
    mine = model(src, tgt, src_mask=src_mask, tgt_mask=decoder_self_attention_mask(tgt, 0))
    print("model logits with your masks == with the default masks:", torch.allclose(mine, model(src, tgt)))
'''),
    ("md", r'''
## Exercise 8.4 — a prefix-LM mask

A **prefix language model** (used by T5's "prefix LM" variant and UniLM, Dong et al. 2019) is a
decoder-only model that reads a *prefix* — the input, e.g. a sentence to translate — with
**bidirectional** attention, and generates the continuation **causally**. In one sequence of
length $L$ whose first $p$ positions are the prefix, query $i$ may attend to key $j$ when $j$ is
in the prefix or not in the future:

$$\text{mask}[i, j] = (j < p) \;\vee\; (j \le i)$$

so the prefix is one fully connected block and the rest is the causal triangle. Write
`prefix_lm_mask(tokens, prefix_lengths, pad_id)` for a padded batch: `tokens` of shape
`(batch, L)`, `prefix_lengths` an integer tensor of shape `(batch,)` (**each sentence has its own
prefix length**), and padding keys blocked as always. Return the bool mask of shape
`(batch, 1, L, L)`:

$$\text{mask}[b, 0, i, j] = \big(\text{tokens}[b, j] \ne \text{pad\_id}\big) \wedge \big((j < p_b) \vee (j \le i)\big).$$

Raise `ValueError` naming `prefix_lengths` unless it has shape `(batch,)` with every value in
$[0, L]$. A prefix length of 0 gives the ordinary decoder mask; $p_b = L$ a fully bidirectional
(encoder) mask.

**Example.** `tokens = [[4, 5, 6, 0]]`, `prefix_lengths = [2]`, `pad_id = 0`: rows (queries)
0 and 1 are `[T, T, F, F]`, row 2 is `[T, T, T, F]`, row 3 (a padding query) is `[T, T, T, F]`.

**Hints.** `j = torch.arange(L)`; `j[None, :] < prefix_lengths[:, None]` is `(batch, L)` (key in
the prefix), `j[None, :] <= j[:, None]` is `(L, L)` (causal); bring them to
`(batch, 1, L, L)`-broadcastable shapes before the `|` and the `&`. This exercise is
self-contained: do not call your earlier functions.
'''),
    ("exercise", "8.4", r'''
def prefix_lm_mask(tokens, prefix_lengths, pad_id):
    """Prefix-LM mask: bidirectional over each sentence's prefix, causal after it, no padding keys.

    Args:
        tokens: integer tensor ``(batch, L)`` of token ids.
        prefix_lengths: integer tensor ``(batch,)``, each in ``[0, L]``.
        pad_id: the id of the padding token.

    Returns:
        torch.bool tensor ``(batch, 1, L, L)``; entry ``[b, 0, i, j]`` is True iff
        ``tokens[b, j] != pad_id`` and (``j < prefix_lengths[b]`` or ``j <= i``).

    Raises:
        ValueError: ``prefix_lengths`` is not of shape ``(batch,)`` or has a value
            outside ``[0, L]`` (names prefix_lengths).

    Source: Raffel et al. (2020), T5, section 3.2.1 ("prefix LM"); Dong et al.
    (2019), UniLM; chapter 8.
    """
    ### BEGIN SOLUTION
    batch, length = tokens.shape
    if tuple(prefix_lengths.shape) != (batch,):
        raise ValueError(f"prefix_lengths must have shape ({batch},); got {tuple(prefix_lengths.shape)}")
    if bool((prefix_lengths < 0).any()) or bool((prefix_lengths > length).any()):
        raise ValueError(f"prefix_lengths must lie in [0, {length}]; got {prefix_lengths.tolist()}")
    j = torch.arange(length, device=tokens.device)
    in_prefix = (j[None, :] < prefix_lengths[:, None])[:, None, None, :]   # (batch, 1, 1, L): key in the prefix
    causal = (j[None, :] <= j[:, None])[None, None]                     # (1, 1, L, L)
    real_key = (tokens != pad_id)[:, None, None, :]                     # (batch, 1, 1, L)
    return real_key & (in_prefix | causal)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The masks of a batch of two sentences, and what the prefix changes: with a prefix, the
output at a prefix position depends on the *later* prefix tokens (bidirectional), and positions
after the prefix still never see their future.
'''),
    ("tryit", r'''
tokens = torch.tensor([[4, 5, 6, 7, 8, 0], [4, 9, 3, 0, 0, 0]])
mask = prefix_lm_mask(tokens, torch.tensor([3, 1]), pad_id=0)
for b in range(2):
    print(f"sentence {b}:\n{mask[b, 0].int()}")

torch.manual_seed(0)
x = torch.randn(1, 1, 6, 4)
changed = x.clone()
changed[..., 2, :] += 1.0                                   # change token 2 (inside the prefix of length 3)
m = prefix_lm_mask(torch.tensor([[4, 5, 6, 7, 8, 9]]), torch.tensor([3]), 0)
out, out_changed = (F.scaled_dot_product_attention(t, t, t, attn_mask=m) for t in (x, changed))
print("output at position 0 changed (prefix is bidirectional):", not torch.allclose(out[..., 0, :], out_changed[..., 0, :]))
changed = x.clone()
changed[..., 5, :] += 1.0                                   # change the last token (after the prefix)
out_changed = F.scaled_dot_product_attention(changed, changed, changed, attn_mask=m)
print("outputs at positions 0-4 unchanged (causal after the prefix):", torch.allclose(out[..., :5, :], out_changed[..., :5, :]))
'''),
]
