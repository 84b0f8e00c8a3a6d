"""Source of exercises/12_language_model.ipynb and its solution (see build_notebooks.py)."""

CHAPTER = "12"
NOTEBOOK = "12_language_model.ipynb"
TITLE = "the decoder alone: evaluation windows, perplexity with padding, the targets of a decoder-only translator"

CELLS = [
    ("code", r'''
import math
import sys

import torch
import torch.nn.functional as F
'''),
    ("md", r'''
Chapter 12 keeps the decoder of the translator, drops the encoder and the cross-attention, and
trains the rest to predict the next token of running text. These exercises build three pieces of
bookkeeping around such a model: the windows it reads, the perplexity it is judged by, and the
targets that turn it into a translator.

## Exercise 12.1 — next-token windows with a stride

`course_lib.data.lm_batches` draws **random** windows of a token stream for training. To
*evaluate* a language model you want the windows laid out in order instead, so that every part of
the text is read. A window holds `seq_len + 1` consecutive ids: its first `seq_len` are the
model's input, its last `seq_len` the targets (position `t` must predict the id that follows it).

Write `next_token_windows(ids, seq_len, stride)` for a 1-D integer tensor `ids`. The windows start
at `0, stride, 2 * stride, ...`, as long as the whole window fits (`start + seq_len + 1 <= len(ids)`).
Return the pair `(inputs, targets)`, each an integer tensor of shape `(n_windows, seq_len)`:
`inputs[w] = ids[s : s + seq_len]` and `targets[w] = ids[s + 1 : s + seq_len + 1]` for the start `s`
of window `w`. Ids left over at the end (too few for another window) are not used.

Raise `ValueError` naming the argument when `ids` is not 1-D, when `seq_len` or `stride` is smaller
than 1, or when `ids` holds fewer than `seq_len + 1` ids (not even one window).

Example: `ids = 10 11 12 ... 19` (ten ids), `seq_len = 3`, `stride = 3`: windows start at 0, 3 and 6
(6 + 4 = 10 fits; 9 would not), so `inputs = [[10, 11, 12], [13, 14, 15], [16, 17, 18]]` and
`targets = [[11, 12, 13], [14, 15, 16], [17, 18, 19]]`. With `stride = seq_len` every id after the
first is a target exactly once (up to the left-over tail); with a smaller stride the windows overlap
and the later positions of a window see a longer context.

**Hints.** `range(0, len(ids) - seq_len, stride)` lists the starts; `torch.stack` the slices, or
index with `starts[:, None] + torch.arange(seq_len + 1)` as `lm_batches` does.
'''),
    ("exercise", "12.1", r'''
def next_token_windows(ids, seq_len, stride):
    """In-order windows of a token stream: inputs and their next-token targets.

    Args:
        ids: 1-D integer tensor, the token stream.
        seq_len: positions per window (the model's context), >= 1.
        stride: distance between the starts of consecutive windows, >= 1.

    Returns:
        ``(inputs, targets)``, each ``(n_windows, seq_len)``: window ``w`` starts at
        ``s = w * stride``; ``inputs[w] = ids[s:s + seq_len]``, ``targets[w] = ids[s + 1:s + seq_len + 1]``.

    Raises:
        ValueError: ``ids`` not 1-D or shorter than ``seq_len + 1``; ``seq_len`` or ``stride`` < 1.

    Source: chapter 12 (the language model's data; ``course_lib.data.lm_batches`` draws random windows).
    """
    ### BEGIN SOLUTION
    if not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len must be an int >= 1; got {seq_len!r}")
    if not isinstance(stride, int) or stride < 1:
        raise ValueError(f"stride must be an int >= 1; got {stride!r}")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1:
        raise ValueError(f"ids must be a 1-D tensor; got {getattr(ids, 'shape', type(ids).__name__)}")
    if len(ids) < seq_len + 1:
        raise ValueError(f"ids must hold at least seq_len + 1 = {seq_len + 1} ids; got {len(ids)}")
    starts = torch.arange(0, len(ids) - seq_len, stride)              # (n_windows,)
    windows = ids[starts[:, None] + torch.arange(seq_len + 1)]        # (n_windows, seq_len + 1)
    return windows[:, :-1], windows[:, 1:]
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The same stream, cut with `stride = seq_len` (no overlap) and `stride = 1` (every
start): how many windows, and how often each id is a target.
'''),
    ("tryit", r'''
ids = torch.arange(100, 120)
for stride in (4, 1):
    inputs, targets = next_token_windows(ids, 4, stride)
    times = torch.bincount(targets.flatten() - 100, minlength=20)
    print(f"stride {stride}: {inputs.shape[0]} windows; first window {inputs[0].tolist()} -> {targets[0].tolist()}; "
          f"ids used as targets {int((times > 0).sum())} of 20, at most {int(times.max())} times each")
'''),
    ("md", r'''
## Exercise 12.2 — perplexity over a padded batch

A language model is judged by its **perplexity**: the exponential of the mean cross-entropy, in
nats, over the predicted tokens,

$$\text{ppl} = \exp\Big(-\frac1N \sum_{(b, t)\ \text{counted}} \ln p_\theta(y_{b,t} \mid y_{b,<t})\Big).$$

A model that is always sure and right has perplexity 1; one that spreads its probability evenly over
a vocabulary of $V$ tokens has perplexity $V$ ("as uncertain as a fair choice among $V$").

Write `perplexity(logits, targets, ignore_index=-100)`: `logits` is a float tensor of shape
`(batch, seq_len, vocab)`, `targets` an integer tensor of shape `(batch, seq_len)`; the positions
whose target equals `ignore_index` are not counted (`-100` by default, but a caller may mark its
padding with another value, such as the pad id: use the argument). $N$ is the number of counted positions **in the
whole batch**: every token weighs the same, so a long sentence counts more than a short one (this
is not the mean of the per-sentence perplexities). Return one number (a float or a 0-dim tensor).

Raise `ValueError` naming `logits` when it is not 3-D, naming `targets` when its shape is not
`logits.shape[:2]`, and naming `ignore_index` when no position is counted.

Compute the log-probabilities stably (`torch.log_softmax`, or `F.cross_entropy`): the cases include
confident logits, where `softmax` rounds the probability of an unlikely target to exactly 0 in
float32 and `log(softmax(...))` gives `-inf`.

Example: `vocab = 4`, all logits equal: every counted token has probability 1/4, so the perplexity
is 4 whatever the targets.

**Hints.** `F.cross_entropy` wants the classes in dimension 1: `logits.transpose(1, 2)`, or flatten
both to `(batch * seq_len, vocab)` and `(batch * seq_len,)`; it already skips `ignore_index` and
averages over the counted tokens.
'''),
    ("exercise", "12.2", r'''
def perplexity(logits, targets, ignore_index=-100):
    """exp of the mean next-token cross-entropy (nats) over the counted positions of a batch.

    Args:
        logits: float ``(batch, seq_len, vocab)``.
        targets: integer ``(batch, seq_len)``; ``ignore_index`` marks positions not counted.
        ignore_index: the target value of the positions left out (padding).

    Returns:
        The perplexity (a float or a 0-dim tensor), every counted token weighted equally.

    Raises:
        ValueError: ``logits`` not 3-D; ``targets`` not of shape ``logits.shape[:2]``; no counted position.

    Source: chapter 12 (perplexity).
    """
    ### BEGIN SOLUTION
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        raise ValueError(f"logits must be a 3-D tensor (batch, seq_len, vocab); got {getattr(logits, 'shape', type(logits).__name__)}")
    if not isinstance(targets, torch.Tensor) or tuple(targets.shape) != tuple(logits.shape[:2]):
        raise ValueError(f"targets must have the shape (batch, seq_len) = {tuple(logits.shape[:2])} of logits; "
                         f"got {getattr(targets, 'shape', type(targets).__name__)}")
    counted = targets != ignore_index
    if not bool(counted.any()):
        raise ValueError(f"every target equals ignore_index = {ignore_index}: no position is counted")
    log_probs = torch.log_softmax(logits.double(), dim=-1)                               # (batch, seq_len, vocab)
    picked = log_probs.gather(-1, targets.masked_fill(~counted, 0)[..., None])[..., 0]  # (batch, seq_len)
    return torch.exp(-picked[counted].mean())
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Uniform logits give the vocabulary size; sharpening the logits towards the right
answers brings the perplexity down towards 1. The padded positions do not matter.
'''),
    ("tryit", r'''
g = torch.Generator().manual_seed(0)
targets = torch.randint(0, 10, (3, 6), generator=g)
targets[1, 4:] = -100                                          # a shorter sentence, padded
noise = torch.randn(3, 6, 10, generator=g)
right = F.one_hot(targets.clamp(min=0), 10).float()
print(f"uniform: {float(perplexity(torch.zeros(3, 6, 10), targets)):.3f}")
for sharpness in (0.0, 1.0, 3.0, 10.0):
    print(f"noise + {sharpness:4.1f} x the right answer: ppl {float(perplexity(noise + sharpness * right, targets)):.3f}")
'''),
    ("md", r'''
## Exercise 12.3 — the targets of a decoder-only translator

Chapter 12 trains a decoder alone as a translator: each pair becomes **one** sequence,
`english <sep> chinese <eos>`, padded to the batch's length. The model reads it left to right with
the causal mask; the loss should only ask it to produce the **translation**, not to predict the
English sentence it is given. So, with `inputs = tokens[:, :-1]` and `targets = tokens[:, 1:]`
(the usual shift), a target is **counted** only when it lies **after** the `<sep>` of its row and is
not padding: the first counted target is the first Chinese token (predicted at the `<sep>`), the
last one is `<eos>`.

Write `translation_lm_targets(tokens, sep_id, pad_id, ignore_index=-100)` for an integer tensor
`tokens` of shape `(batch, length)`, each row holding exactly one `sep_id`. Return `(inputs,
targets)`, each `(batch, length - 1)`: `inputs = tokens[:, :-1]`; `targets` is `tokens[:, 1:]` with
`ignore_index` in place of every target at or before its row's `<sep>` and of every `pad_id`.
Leave `tokens` unchanged.

Raise `ValueError` naming `tokens` when it is not 2-D, and naming `sep_id` when a row holds no
`sep_id` or more than one.

Example (`sep_id = 3`, `pad_id = 0`, `<eos> = 2`, ignore shown as `.`): the row
`7 8 9 3 21 22 2 0 0` gives `inputs = 7 8 9 3 21 22 2 0` and `targets = . . . 21 22 2 . .`.

**Hints.** `(tokens == sep_id).int().argmax(dim=1)` finds the `<sep>` of every row; compare it with
`torch.arange(1, length)` (the position in `tokens` of each target).
'''),
    ("exercise", "12.3", r'''
def translation_lm_targets(tokens, sep_id, pad_id, ignore_index=-100):
    """Inputs and loss targets of ``english <sep> chinese <eos> <pad>...`` rows for a decoder-only translator.

    Args:
        tokens: integer ``(batch, length)``; each row holds exactly one ``sep_id``.
        sep_id: id of ``<sep>``, between the source and the target sentence.
        pad_id: id of the padding after ``<eos>``.
        ignore_index: the target value of positions left out of the loss.

    Returns:
        ``(inputs, targets)``, each ``(batch, length - 1)``: ``inputs = tokens[:, :-1]``; ``targets`` is
        ``tokens[:, 1:]`` with ``ignore_index`` for every target at or before the row's ``<sep>`` and every pad.

    Raises:
        ValueError: ``tokens`` not 2-D; a row without ``sep_id`` or with more than one.

    Source: chapter 12 (a decoder-only translator).
    """
    ### BEGIN SOLUTION
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        raise ValueError(f"tokens must be a 2-D tensor (batch, length); got {getattr(tokens, 'shape', type(tokens).__name__)}")
    is_sep = tokens == sep_id
    if not bool((is_sep.sum(dim=1) == 1).all()):
        raise ValueError(f"every row of tokens must hold exactly one sep_id = {sep_id}; counts {is_sep.sum(dim=1).tolist()}")
    sep_at = is_sep.int().argmax(dim=1)                                   # (batch,)
    position = torch.arange(1, tokens.size(1))                            # (length - 1,): where each target sits in tokens
    targets = tokens[:, 1:].clone()
    ignored = (position[None, :] <= sep_at[:, None]) | (targets == pad_id)
    return tokens[:, :-1].clone(), targets.masked_fill(ignored, ignore_index)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Two pairs of different lengths in one batch: only the translation and its `<eos>` are
counted.
'''),
    ("tryit", r'''
SEP, PAD, EOS = 3, 0, 2
batch = torch.tensor([[7, 8, 9, 3, 21, 22, 2, 0, 0],
                      [5, 3, 30, 31, 32, 33, 2, 0, 0]])
inputs, targets = translation_lm_targets(batch, SEP, PAD)
for row_in, row_tgt in zip(inputs.tolist(), targets.tolist()):
    print("reads  ", row_in)
    print("targets", ["." if t == -100 else t for t in row_tgt])
'''),
]
