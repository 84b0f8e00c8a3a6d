"""Source of exercises/09_training.ipynb and its solution (see build_notebooks.py)."""

CHAPTER = "09"
NOTEBOOK = "09_training.ipynb"
TITLE = "training: label smoothing, the learning-rate schedule, teacher forcing"

CELLS = [
    ("code", r'''
import math
import sys

import torch
import torch.nn.functional as F

from course_lib.model import Transformer, TransformerConfig
'''),
    ("md", r'''
## Exercise 9.1 — label-smoothed cross-entropy, ignoring padding

With label smoothing $\varepsilon$ (paper, section 5.4: $\varepsilon_{ls} = 0.1$) the target is not
the one-hot vector of the correct token $y$ but a mixture with the uniform distribution over the
$V$ classes. **Convention of this course** — the same as
`torch.nn.functional.cross_entropy(..., label_smoothing=eps)`: the mass $\varepsilon$ is spread
over **all** $V$ classes, the correct one included:

$$q_c = (1-\varepsilon)\,[c = y] + \frac{\varepsilon}{V},\qquad
\ell = -\sum_{c=1}^{V} q_c \log p_c = (1-\varepsilon)(-\log p_y) + \varepsilon\cdot\frac{1}{V}\sum_{c}(-\log p_c)$$

where $p = \text{softmax}(\text{logits})$. The loss of a batch is the **mean of $\ell$ over the
positions whose target is not padding** (`target != pad_id`); padding positions count for nothing.

Write `label_smoothed_loss(logits, target, label_smoothing, pad_id)` for `logits` of shape
`(batch, tgt_len, vocab_size)` and integer `target` of shape `(batch, tgt_len)`, returning a
0-dim float tensor. Raise `ValueError` (naming `label_smoothing`) when it is outside $[0, 1]$.
Do not call `F.cross_entropy` — that is what you will check against.

**Hints.** `torch.log_softmax(logits, dim=-1)`; `log_probs.gather(-1, target[..., None])` picks
$\log p_y$ (padding ids are valid indices, they are masked out afterwards). Average with a float
mask of the non-padding positions: `(loss * keep).sum() / keep.sum()`.
'''),
    ("exercise", "9.1", r'''
def label_smoothed_loss(logits, target, label_smoothing, pad_id):
    """Mean label-smoothed cross-entropy over the non-padding positions.

    Args:
        logits: float tensor ``(batch, tgt_len, vocab_size)``.
        target: integer tensor ``(batch, tgt_len)`` of correct ids.
        label_smoothing: epsilon in [0, 1]; spread over ALL vocab_size classes,
            as ``F.cross_entropy(label_smoothing=eps)`` does.
        pad_id: id whose positions are ignored.

    Returns:
        0-dim float tensor: the mean over positions with ``target != pad_id`` of
        ``(1 - eps) * (-log p[y]) + eps * mean_c(-log p[c])`` (natural log, nats).

    Raises:
        ValueError: ``label_smoothing`` outside [0, 1].

    Source: Vaswani et al. (2017), section 5.4; Szegedy et al. (2016), section 7; chapter 9.
    """
    ### BEGIN SOLUTION
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1]; got {label_smoothing}")
    log_probs = torch.log_softmax(logits, dim=-1)                      # (batch, tgt_len, V)
    nll = -log_probs.gather(-1, target[..., None]).squeeze(-1)         # (batch, tgt_len)
    uniform = -log_probs.mean(dim=-1)                                  # (batch, tgt_len)
    loss = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    keep = (target != pad_id).to(loss.dtype)
    return (loss * keep).sum() / keep.sum()
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Compare with PyTorch's built-in, for several $\varepsilon$.
'''),
    ("tryit", r'''
gen = torch.Generator().manual_seed(0)
logits = torch.randn(2, 5, 7, generator=gen)
target = torch.tensor([[3, 1, 4, 0, 0], [5, 2, 6, 2, 0]])          # 0 = padding
for eps in (0.0, 0.1, 0.5):
    mine = label_smoothed_loss(logits, target, eps, pad_id=0)
    ref = F.cross_entropy(logits.reshape(-1, 7), target.reshape(-1), ignore_index=0, label_smoothing=eps)
    print(f"eps={eps}: {float(mine):.6f}  F.cross_entropy: {float(ref):.6f}")
'''),
    ("md", r'''
## Exercise 9.2 — the Noam learning-rate schedule

Section 5.3, equation (3): the learning rate grows linearly for `warmup_steps` steps, then decays
as the inverse square root of the step number (steps count from 1):

$$\text{lr}(\text{step}) = d_{\text{model}}^{-0.5} \cdot \min\!\left(\text{step}^{-0.5},\;
\text{step}\cdot\text{warmup\_steps}^{-1.5}\right)$$

The two branches meet at `step == warmup_steps`, the peak. Write
`noam_lr(step, d_model, warmup_steps)` returning a Python float. Raise `ValueError` (naming the
argument) when `step < 1` or `warmup_steps < 1`.

**Hints.** Plain Python arithmetic: `x ** -0.5`.
'''),
    ("exercise", "9.2", r'''
def noam_lr(step, d_model, warmup_steps):
    """The learning rate of the paper's schedule at a given step.

    Args:
        step: optimizer step, counted from 1 (int >= 1).
        d_model: model width (paper: 512).
        warmup_steps: length of the linear warm-up (paper: 4000).

    Returns:
        float: ``d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)``
        (peak ``(d_model * warmup_steps)**-0.5`` at ``step == warmup_steps``).

    Raises:
        ValueError: ``step < 1`` or ``warmup_steps < 1`` (or ``d_model < 1``).

    Source: Vaswani et al. (2017), section 5.3, equation (3); chapter 9.
    """
    ### BEGIN SOLUTION
    for name, value in (("step", step), ("d_model", d_model), ("warmup_steps", warmup_steps)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1; got {value}")
    return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The paper's base model ($d_{\text{model}} = 512$, 4000 warm-up steps): the peak and a
few points of the curve.
'''),
    ("tryit", r'''
print(f"peak at step 4000: {noam_lr(4000, 512, 4000):.4e}")
for step in (1, 1000, 4000, 16000, 100000):
    print(f"step {step:>6}: lr = {noam_lr(step, 512, 4000):.3e}")
'''),
    ("md", r'''
## Exercise 9.3 — the right shift for teacher forcing

In training, the decoder receives the correct previous tokens (*teacher forcing*) and must
predict the next one at every position at once. If the target sentence is
$y_1, y_2, \dots, y_n$ (ending with `<eos>`, possibly followed by padding), the decoder's input
is the same sequence shifted one step to the right, starting with `<bos>`:

| position | 1 | 2 | 3 | … | n |
|---|---|---|---|---|---|
| decoder input | `<bos>` | $y_1$ | $y_2$ | … | $y_{n-1}$ |
| label (to predict) | $y_1$ | $y_2$ | $y_3$ | … | $y_n$ |

Write `shift_right(tgt, bos_id)` for integer `tgt` of shape `(batch, tgt_len)`, returning the
decoder input of the same shape. Do not modify `tgt` in place. Raise `ValueError` (naming `tgt`)
when `tgt` is not 2-D.

**Hints.** `torch.full((batch, 1), bos_id, dtype=tgt.dtype)` and `torch.cat([..., tgt[:, :-1]], dim=1)`.
'''),
    ("exercise", "9.3", r'''
def shift_right(tgt, bos_id):
    """Decoder input for teacher forcing: <bos> followed by all but the last target token.

    Args:
        tgt: integer tensor ``(batch, tgt_len)``, the labels ``y_1 ... y_n``.
        bos_id: id of the beginning-of-sequence token.

    Returns:
        integer tensor ``(batch, tgt_len)`` (dtype of ``tgt``):
        ``[bos_id, y_1, ..., y_{n-1}]`` per row; ``tgt`` itself is unchanged.

    Raises:
        ValueError: ``tgt`` is not 2-D.

    Source: Vaswani et al. (2017), section 3.1 ("output embeddings are offset by
    one position"); chapter 9.
    """
    ### BEGIN SOLUTION
    if tgt.dim() != 2:
        raise ValueError(f"tgt must have shape (batch, tgt_len); got {tuple(tgt.shape)}")
    bos = torch.full((tgt.shape[0], 1), bos_id, dtype=tgt.dtype, device=tgt.device)
    return torch.cat([bos, tgt[:, :-1]], dim=1)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Teacher forcing on a tiny course Transformer: a copy task (the target is the source
followed by `<eos>`), your right shift for the decoder input, your loss — a few Adam steps on one
batch should bring the loss down.
'''),
    ("tryit", r'''
PAD, BOS, EOS = 0, 1, 2
src = torch.tensor([[5, 6, 7, 8], [9, 4, 3, 0]])
tgt = torch.tensor([[5, 6, 7, 8, EOS], [9, 4, 3, EOS, PAD]])
print("decoder input:", shift_right(tgt, BOS).tolist())

torch.manual_seed(0)
config = TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=32, n_heads=4, n_encoder_layers=1,
                           n_decoder_layers=1, d_ff=64, dropout=0.0, pad_id=PAD)
model = Transformer(config)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(1, 31):
    loss = label_smoothed_loss(model(src, shift_right(tgt, BOS)), tgt, 0.1, PAD)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step in (1, 10, 20, 30):
        print(f"step {step:2d}: loss {loss.item():.3f}")
'''),
]
