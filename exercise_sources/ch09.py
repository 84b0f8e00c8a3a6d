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
## Exercise 9.1 — label-smoothed cross-entropy and its gradient, ignoring padding

With label smoothing $\varepsilon$ (paper, section 5.4: $\varepsilon_{ls} = 0.1$) the target is not
the one-hot vector of the correct token $y$ but a mixture with the uniform distribution over the
$V$ classes. **Convention of this exercise** — PyTorch's, the one of
`torch.nn.functional.cross_entropy(..., label_smoothing=eps)` and of the library's default
(`convention="pytorch"`): the mass $\varepsilon$ is spread over **all** $V$ classes, the correct one
included (the chapter also shows the Annotated Transformer's convention, which gives the correct
class exactly $1-\varepsilon$ and padding nothing — not used here):

$$q_c = (1-\varepsilon)\,[c = y] + \frac{\varepsilon}{V},\qquad
\ell = -\sum_{c=1}^{V} q_c \log p_c,\qquad p = \text{softmax}(z)$$

The loss of a batch is $\mathcal{L} = \frac{1}{n}\sum \ell$ over the $n$ positions whose target is not
padding. The chapter states that the gradient of $\ell$ with respect to the logits $z$ is $p - q$.
Write `label_smoothed_loss(logits, target, label_smoothing, pad_id)` that returns **both** the
loss and its gradient with respect to `logits`, **computed in closed form** (no `backward`, no
`torch.autograd`):

$$\frac{\partial \mathcal{L}}{\partial z_{b,t,c}} = \begin{cases} \big(p_{b,t,c} - q_{b,t,c}\big)/n & \text{target}[b,t] \ne \text{pad\_id} \\ 0 & \text{padding} \end{cases}$$

`logits` has shape `(batch, tgt_len, vocab_size)`, integer `target` `(batch, tgt_len)`; return
`(loss, grad_logits)`: a 0-dim float tensor and a float tensor of the shape of `logits`. Raise
`ValueError` naming `label_smoothing` when it is outside $[0, 1]$. Do not call `F.cross_entropy`
— the checker compares with it, and with its gradient by autograd.

**Example.** One position, $V = 2$, logits $(0, 0)$, $y = 0$, $\varepsilon = 0.2$: $p = (0.5, 0.5)$,
$q = (0.9, 0.1)$, $\ell = \log 2 \approx 0.6931$, gradient $(-0.4, 0.4)$.

**Hints.** `torch.log_softmax(logits, dim=-1)` and its `.exp()`; `F.one_hot(target, V)` builds the
one-hot part of $q$ (padding ids are valid indices; the padding positions are zeroed afterwards).
Average with a float mask of the non-padding positions: `(loss * keep).sum() / keep.sum()`.
'''),
    ("exercise", "9.1", r'''
def label_smoothed_loss(logits, target, label_smoothing, pad_id):
    """Mean label-smoothed cross-entropy over the non-padding positions, and its gradient.

    Args:
        logits: float tensor ``(batch, tgt_len, vocab_size)``.
        target: integer tensor ``(batch, tgt_len)`` of correct ids.
        label_smoothing: epsilon in [0, 1]; spread over ALL vocab_size classes,
            as ``F.cross_entropy(label_smoothing=eps)`` does.
        pad_id: id whose positions are ignored.

    Returns:
        ``(loss, grad_logits)``: the 0-dim mean over the n positions with
        ``target != pad_id`` of ``-sum_c q_c log p_c`` (natural log, nats), and
        d loss / d logits, ``(softmax(logits) - q) / n`` at those positions and 0
        at padding (shape of ``logits``), in closed form.

    Raises:
        ValueError: ``label_smoothing`` outside [0, 1].

    Source: Vaswani et al. (2017), section 5.4; Szegedy et al. (2016), section 7; chapter 9.
    """
    ### BEGIN SOLUTION
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1]; got {label_smoothing}")
    vocab = logits.shape[-1]
    log_probs = torch.log_softmax(logits, dim=-1)                                # (batch, tgt_len, V)
    q = (1.0 - label_smoothing) * F.one_hot(target, vocab).to(log_probs.dtype) + label_smoothing / vocab
    per_token = -(q * log_probs).sum(dim=-1)                                      # (batch, tgt_len)
    keep = (target != pad_id).to(log_probs.dtype)
    n = keep.sum()
    loss = (per_token * keep).sum() / n
    grad = (log_probs.exp() - q) * keep[..., None] / n
    return loss, grad
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The worked example, then PyTorch's built-in and its autograd gradient for several
$\varepsilon$. Look at the gradient at the optimum: when the softmax *is* $q$, the gradient
vanishes although the loss is not 0 — it is the entropy $H(q)$.
'''),
    ("tryit", r'''
loss, grad = label_smoothed_loss(torch.zeros(1, 1, 2), torch.tensor([[0]]), 0.2, pad_id=-1)
print(f"worked example: loss {float(loss):.4f} (log 2 = {math.log(2):.4f}), gradient {grad.flatten().tolist()}")

gen = torch.Generator().manual_seed(0)
logits = torch.randn(2, 5, 7, generator=gen)
target = torch.tensor([[3, 1, 4, 0, 0], [5, 2, 6, 2, 0]])          # 0 = padding
for eps in (0.0, 0.1, 0.5):
    mine, mine_grad = label_smoothed_loss(logits, target, eps, pad_id=0)
    leaf = logits.clone().requires_grad_(True)
    ref = F.cross_entropy(leaf.reshape(-1, 7), target.reshape(-1), ignore_index=0, label_smoothing=eps)
    ref.backward()
    print(f"eps={eps}: {float(mine):.6f}  F.cross_entropy: {float(ref.detach()):.6f}  "
          f"largest gradient difference {float((mine_grad - leaf.grad).abs().max()):.1e}")

eps, V = 0.1, 7
q = torch.full((1, 1, V), eps / V)
q[0, 0, 3] += 1 - eps
at_optimum, g = label_smoothed_loss(q.log(), torch.tensor([[3]]), eps, pad_id=0)
print(f"at p = q: loss {float(at_optimum):.4f} = H(q) {float(-(q * q.log()).sum()):.4f}, largest |gradient| {float(g.abs().max()):.1e}")
'''),
    ("md", r'''
## Exercise 9.2 — the Noam schedule for a whole tensor of steps

Section 5.3, equation (3): the learning rate grows linearly for `warmup_steps` steps, then decays
as the inverse square root of the step number (steps count from 1):

$$\text{lr}(\text{step}) = d_{\text{model}}^{-0.5} \cdot \min\!\left(\text{step}^{-0.5},\;
\text{step}\cdot\text{warmup\_steps}^{-1.5}\right)$$

To plot a schedule or to check it against a logged run you want it for many steps at once. Write
`noam_lr(step, d_model, warmup_steps)` where `step` is **either** a Python int (return a Python
float) **or** an integer tensor of any shape (return a float tensor of the same shape, the
schedule element-wise). Raise `ValueError` naming `step` when any step is smaller than 1, and
naming `warmup_steps` when it is smaller than 1.

**Example.** `noam_lr(torch.tensor([[1, 4000], [16000, 64000]]), 512, 4000)` is about
`[[1.747e-07, 6.988e-04], [3.494e-04, 1.747e-04]]`, and `noam_lr(4000, 512, 4000)` the float
`6.988e-04`.

**Hints.** Python's `min()` cannot compare two tensors element by element: use `torch.minimum`.
Compute in floating point (`step.double()`): `step ** -0.5` on an integer tensor is an error.
`torch.as_tensor(step)` turns an int into a 0-dim tensor, and `float(...)` turns it back.
'''),
    ("exercise", "9.2", r'''
def noam_lr(step, d_model, warmup_steps):
    """The learning rate of the paper's schedule, for one step or a tensor of steps.

    Args:
        step: optimizer step(s), counted from 1: an int, or an integer tensor of any shape.
        d_model: model width (paper: 512).
        warmup_steps: length of the linear warm-up (paper: 4000).

    Returns:
        ``d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)``, element-wise:
        a float for an int step, a float tensor of the shape of ``step`` otherwise.

    Raises:
        ValueError: a step < 1 (names step), ``warmup_steps < 1`` (names warmup_steps).

    Source: Vaswani et al. (2017), section 5.3, equation (3); chapter 9.
    """
    ### BEGIN SOLUTION
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be >= 1; got {warmup_steps}")
    s = torch.as_tensor(step).double()
    if bool((s < 1).any()):
        raise ValueError(f"step must be >= 1 (the first optimizer step is step 1); got {step}")
    lr = d_model**-0.5 * torch.minimum(s**-0.5, s * warmup_steps**-1.5)
    return float(lr) if isinstance(step, int) else lr
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The paper's base model ($d_{\text{model}} = 512$, 4000 warm-up steps): the whole
curve in one call, its peak and where it falls to half the peak.
'''),
    ("tryit", r'''
steps = torch.arange(1, 100_001)
curve = noam_lr(steps, 512, 4000)
peak = int(curve.argmax()) + 1
print(f"peak at step {peak}: {float(curve.max()):.4e} (int call: {noam_lr(4000, 512, 4000):.4e})")
half = int(torch.nonzero(curve[peak:] <= curve.max() / 2)[0]) + peak + 1
print(f"half the peak first reached at step {half} (4 * warmup_steps = 16000)")
'''),
    ("md", r'''
## Exercise 9.3 — teacher-forcing input and output from the raw targets

The chapter's `shift_right` starts from `tgt_out`, which already ends with `<eos>`. One step
earlier, the data gives you the raw target sentences $y_1 \dots y_n$, **right-padded** to a
common length `tgt_len` with `pad_id` and without `<bos>`/`<eos>`. From them, build both tensors
of teacher forcing, each of length `tgt_len + 1`:

| position | 0 | 1 | … | n−1 | n | n+1 … |
|---|---|---|---|---|---|---|
| `tgt_in` (decoder input) | `<bos>` | $y_1$ | … | $y_{n-1}$ | $y_n$ | pad |
| `tgt_out` (labels) | $y_1$ | $y_2$ | … | $y_n$ | `<eos>` | pad |

Each row has its own $n$ (the number of tokens that are not `pad_id`), so `<eos>` goes at
position $n$ **of its own row**, and both tensors have padding at the same positions — so the
loss, which skips padding labels, never asks the model to predict from a padding input. (Shifting
`tgt_out` right is not enough: it would copy `<eos>` into `tgt_in` where `tgt_out` has padding.)
Write `teacher_forcing_pair(tgt, bos_id, eos_id, pad_id)` returning `(tgt_in, tgt_out)` with the
dtype of `tgt`. Do not modify `tgt` in place. Raise `ValueError` naming `tgt` when it is not 2-D.

**Example.** `tgt = [[5, 6, 7, 0], [8, 9, 0, 0]]`, `bos_id = 1`, `eos_id = 2`, `pad_id = 0`:
`tgt_in = [[1, 5, 6, 7, 0], [1, 8, 9, 0, 0]]`, `tgt_out = [[5, 6, 7, 2, 0], [8, 9, 2, 0, 0]]`.

**Hints.** `n = (tgt != pad_id).sum(dim=1)`; pad `tgt` with one column of `pad_id` on the right
(`torch.cat`), then write `eos_id` where `torch.arange(tgt_len + 1) == n[:, None]`
(`torch.where`). For `tgt_in`, prepend a column of `bos_id` and drop the last column.
'''),
    ("exercise", "9.3", r'''
def teacher_forcing_pair(tgt, bos_id, eos_id, pad_id):
    """Decoder input and labels for teacher forcing, from right-padded raw targets.

    Args:
        tgt: integer tensor ``(batch, tgt_len)``: the target tokens ``y_1 ... y_n``
            of each row, then ``pad_id`` up to tgt_len; no <bos>, no <eos>.
        bos_id, eos_id, pad_id: the special ids.

    Returns:
        ``(tgt_in, tgt_out)``, integer tensors ``(batch, tgt_len + 1)`` (dtype of
        ``tgt``): ``tgt_in = [bos_id, y_1, ..., y_n, pad...]`` and
        ``tgt_out = [y_1, ..., y_n, eos_id, pad...]`` per row; ``tgt`` is unchanged.

    Raises:
        ValueError: ``tgt`` is not 2-D.

    Source: Vaswani et al. (2017), section 3.1 ("output embeddings are offset by
    one position"); chapter 9.
    """
    ### BEGIN SOLUTION
    if tgt.dim() != 2:
        raise ValueError(f"tgt must have shape (batch, tgt_len); got {tuple(tgt.shape)}")
    batch, length = tgt.shape
    n = (tgt != pad_id).sum(dim=1)                                              # (batch,)
    padded = torch.cat([tgt, torch.full((batch, 1), pad_id, dtype=tgt.dtype, device=tgt.device)], dim=1)
    at_eos = torch.arange(length + 1, device=tgt.device)[None, :] == n[:, None]
    tgt_out = torch.where(at_eos, torch.full_like(padded, eos_id), padded)
    bos = torch.full((batch, 1), bos_id, dtype=tgt.dtype, device=tgt.device)
    tgt_in = torch.cat([bos, padded[:, :-1]], dim=1)
    return tgt_in, tgt_out
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Teacher forcing on a tiny course Transformer: a copy task (the target is the source),
your pair for the decoder input and the labels, your loss (its first return value; the gradient
you computed is compared with autograd's at step 1) — a few Adam steps on one batch should bring
the loss down.
'''),
    ("tryit", r'''
PAD, BOS, EOS = 0, 1, 2
src = torch.tensor([[5, 6, 7, 8], [9, 4, 3, 0]])
tgt_in, tgt_out = teacher_forcing_pair(src, BOS, EOS, PAD)
print("tgt_in: ", tgt_in.tolist())
print("tgt_out:", tgt_out.tolist())

torch.manual_seed(0)
config = TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=32, n_heads=4, n_encoder_layers=1,
                           n_decoder_layers=1, d_ff=64, dropout=0.0, pad_id=PAD)
model = Transformer(config)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(1, 31):
    logits = model(src, tgt_in)
    logits.retain_grad()
    loss, grad = label_smoothed_loss(logits, tgt_out, 0.1, PAD)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step == 1:
        print(f"your gradient == autograd's: {torch.allclose(grad, logits.grad, atol=1e-6)}")
    if step in (1, 10, 20, 30):
        print(f"step {step:2d}: loss {loss.item():.3f}")
'''),
    ("md", r'''
## Exercise 9.4 — a Noam-shaped schedule with a given peak

The paper's schedule ties the peak learning rate to the model width: it is
$(d_{\text{model}} \cdot \text{warmup\_steps})^{-0.5}$, about $7 \cdot 10^{-4}$ for the base model.
In practice one picks the peak directly (the library's `noam_lr` has a `factor` for this; its
warmup-cosine schedule takes `lr` as the peak). Keep the **shape** of equation (3) — linear
warm-up, then $\text{step}^{-1/2}$ decay — but scale it so that its maximum, reached at
`step == warmup_steps`, is exactly `peak_lr`. Work out the formula (it has no $d_{\text{model}}$),
then write `noam_lr_with_peak(step, warmup_steps, peak_lr)` for an int `step`, returning a
Python float. Raise `ValueError` naming the argument when `step < 1`, `warmup_steps < 1` or
`peak_lr <= 0`.

**Example.** `warmup_steps = 100`, `peak_lr = 1e-3`: `1e-5` at step 1, `1e-3` at step 100,
`5e-4` at step 400.

**Hints.** At its peak, $\min(\text{step}^{-0.5}, \text{step}\cdot w^{-1.5})$ equals $w^{-0.5}$.
This exercise is self-contained: do not call your `noam_lr`.
'''),
    ("exercise", "9.4", r'''
def noam_lr_with_peak(step, warmup_steps, peak_lr):
    """The Noam-shaped schedule whose maximum (at step == warmup_steps) is peak_lr.

    Args:
        step: optimizer step, counted from 1 (int >= 1).
        warmup_steps: length of the linear warm-up (int >= 1).
        peak_lr: the learning rate at step == warmup_steps (float > 0).

    Returns:
        float: ``peak_lr * min(step / warmup_steps, sqrt(warmup_steps / step))``.

    Raises:
        ValueError: ``step < 1``, ``warmup_steps < 1`` or ``peak_lr <= 0`` (names the argument).

    Source: Vaswani et al. (2017), section 5.3, equation (3); chapter 9.
    """
    ### BEGIN SOLUTION
    if step < 1:
        raise ValueError(f"step must be >= 1; got {step}")
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be >= 1; got {warmup_steps}")
    if not peak_lr > 0:
        raise ValueError(f"peak_lr must be > 0; got {peak_lr}")
    return peak_lr * warmup_steps**0.5 * min(step**-0.5, step * warmup_steps**-1.5)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The worked example, then the same schedule from the library's `noam_lr` with a
`factor`: which factor gives the paper's base model ($d_{\text{model}} = 512$, 4000 warm-up
steps) a peak of $10^{-3}$? (Solve $\text{factor} \cdot (512 \cdot 4000)^{-0.5} = 10^{-3}$.)
'''),
    ("tryit", r'''
import course_lib.training  # the library's schedule, for this comparison only

print([f"{noam_lr_with_peak(s, 100, 1e-3):.1e}" for s in (1, 100, 400)])
factor = 1e-3 * math.sqrt(512 * 4000)
print(f"factor = {factor:.4f}")
for s in (1, 2000, 4000, 16000):
    print(f"step {s:>5}: {noam_lr_with_peak(s, 4000, 1e-3):.4e}  library noam_lr(factor={factor:.3f}): "
          f"{course_lib.training.noam_lr(s, 512, 4000, factor=factor):.4e}")
'''),
]
