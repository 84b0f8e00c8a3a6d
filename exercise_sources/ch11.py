"""Source of exercises/11_pitfalls.ipynb and its solution (see build_notebooks.py)."""

CHAPTER = "11"
NOTEBOOK = "11_pitfalls.ipynb"
TITLE = "pitfalls: find a planted leak, the loss floors of a source-blind decoder, a divergence detector"

CELLS = [
    ("code", r'''
import math
import sys

import torch

from course_lib.data import PAD_ID, TranslationDataset, synthetic_copy_task
'''),
    ("md", r'''
Chapter 11 breaks a working Transformer on purpose and diagnoses each failure with a
measurement. These exercises build three of those measurements yourself; the chapter's
`course_lib.diagnostics.check_model` automates others (its `check_causal_leak` changes the later
target tokens and watches the earlier logits).

## Exercise 11.1 — which output depends on which input?

The sharpest test of a mask is a **dependency matrix**: for a function of a sequence,
`fn(x)` with `x` of shape `(L_in, d)` and an output of shape `(L_out, d_out)`, entry `[i, j]` says
whether output position `i` changes when input position `j` changes. A correct causal decoder
layer gives a lower-triangular matrix; a layer that leaks the next token has one extra diagonal
above it; a layer that ignores a position has an empty column.

Write `dependency_matrix(fn, x)` returning a bool tensor of shape `(L_out, L_in)` (rows = outputs,
columns = inputs): True when some entry of the block
$\partial\, \text{fn}(x)[i, :] / \partial x[j, :]$ has absolute value above `1e-6`. Raise
`ValueError` (naming `x`) when `x` is not 2-D. `fn` is differentiable (made of torch operations);
`L_out` need not equal `L_in`, and an output row that is constant depends on nothing.

Example: the causal layer `out = x + tanh(attention(x))` with the mask $j \le i$ gives
`[[T, F, F], [T, T, F], [T, T, T]]` for `L = 3`; the same layer with the mask $j \le i + 1$ (the
classic off-by-one in a causal mask) gives `[[T, T, F], [T, T, T], [T, T, T]]`.

**Hints.** `torch.autograd.functional.jacobian(fn, x)` has shape `(L_out, d_out, L_in, d)`;
`.abs().amax(dim=(1, 3))`. Or, without autograd: change one input row at a time
(`x.clone()`, add 1 to row `j`) and see which output rows move.
'''),
    ("exercise", "11.1", r'''
def dependency_matrix(fn, x):
    """Bool (L_out, L_in): does output position i depend on input position j?

    Args:
        fn: differentiable callable, float ``(L_in, d)`` -> float ``(L_out, d_out)``.
        x: float tensor ``(L_in, d)``, the point at which the dependency is measured.

    Returns:
        bool tensor ``(L_out, L_in)``: ``[i, j]`` is True when some entry of
        d fn(x)[i, :] / d x[j, :] has absolute value > 1e-6.

    Raises:
        ValueError: ``x`` is not 2-D.

    Source: chapter 11 ("causal leak" in the checklist; ``course_lib.diagnostics.check_causal_leak``).
    """
    ### BEGIN SOLUTION
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"x must be a 2-D tensor (L_in, d); got {getattr(x, 'shape', type(x).__name__)}")
    jacobian = torch.autograd.functional.jacobian(fn, x)            # (L_out, d_out, L_in, d)
    return jacobian.abs().amax(dim=(1, 3)) > 1e-6
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Three small layers with planted masks: find the one that leaks. The picture is the
whole diagnosis: a True above the diagonal means an output sees a later input.
'''),
    ("tryit", r'''
def planted_layer(mask, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    w_q, w_k, w_v = (torch.randn(d, d, generator=g) / math.sqrt(d) for _ in range(3))

    def layer(x):
        scores = (x @ w_q) @ (x @ w_k).T / math.sqrt(d)
        weights = torch.softmax(scores.masked_fill(~mask, torch.finfo(x.dtype).min), dim=-1) * mask
        return x + torch.tanh(weights @ (x @ w_v))
    return layer


L = 5
i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
x = torch.randn(L, 4, generator=torch.Generator().manual_seed(1))
for name, mask in {"causal": j <= i, "leaks the next token": j <= i + 1, "ignores position 0": (j <= i) & (j >= 1)}.items():
    dep = dependency_matrix(planted_layer(mask), x)
    print(f"{name}: future inputs seen: {bool(dep.triu(1).any())}")
    print(dep.int())
'''),
    ("md", r'''
## Exercise 11.2 — the loss floors of a decoder that ignores its source

A training loss stuck at a plateau is often a model that ignores its input. Two numbers say
where such a model gets stuck. For target sequences (one per row of `targets`, padded with
`pad_id`), count only the real tokens (`targets != pad_id`), $N$ of them:

* the **unigram entropy** $H(Y) = -\sum_w f_w \ln f_w$, $f_w$ the frequency of token $w$: the
  loss (nats per token) of a model that predicts the token frequencies at every position —
  it ignores the source **and** its position;
* the **position-aware entropy** $H(Y \mid P) = \sum_p \frac{n_p}{N}\, H(Y \mid P = p)$, where
  $n_p$ is the number of real tokens at position $p$ and $H(Y \mid P = p)$ the entropy of the
  tokens found at position $p$: the best loss of a decoder that ignores the source but knows its
  position (the sentences differ in length, so `<eos>` is likelier at some positions than at
  others). It is never above $H(Y)$.

Chapter 11 prints both numbers for its reverse task, from a loop over its batches; here they become
a function for any padded batch, checked on batches the chapter never saw. Write `loss_floors(targets, pad_id)` for an
integer tensor `targets` of shape `(batch, tgt_len)`, returning the pair
`(unigram_entropy, position_entropy)` (floats or 0-dim tensors, nats). Raise `ValueError` (naming
`targets`) when it is not 2-D or holds no real token.

Worked example, `pad_id = 0`: rows `4 5 2`, `4 2 0`, `5 5 2`. $N = 8$; counts 4: 2, 5: 3, 2: 3, so
$H(Y) = -(\tfrac28 \ln \tfrac28 + 2 \cdot \tfrac38 \ln \tfrac38) = 1.0822$. Position 0 holds
`4 4 5`, position 1 `5 2 5` (entropy $0.6365$ each), position 2 `2 2` (entropy 0):
$H(Y \mid P) = \tfrac38 \cdot 0.6365 + \tfrac38 \cdot 0.6365 + \tfrac28 \cdot 0 = 0.4774$.

**Hints.** `torch.unique(values, return_counts=True)`; a column `targets[:, p]` and its real
entries; weight each position by its count, not equally.
'''),
    ("exercise", "11.2", r'''
def loss_floors(targets, pad_id):
    """Unigram entropy and position-conditioned entropy (nats) of the real target tokens.

    Args:
        targets: integer tensor ``(batch, tgt_len)``, padded with ``pad_id``.
        pad_id: the padding id (its entries are not tokens).

    Returns:
        ``(unigram_entropy, position_entropy)``: ``H(Y)`` and
        ``H(Y | P) = sum_p n_p / N * H(Y | P = p)`` in nats.

    Raises:
        ValueError: ``targets`` not 2-D, or no entry other than ``pad_id``.

    Source: chapter 11 ("A loss that does not move").
    """
    ### BEGIN SOLUTION
    if not isinstance(targets, torch.Tensor) or targets.dim() != 2:
        raise ValueError(f"targets must be a 2-D tensor (batch, tgt_len); got {getattr(targets, 'shape', type(targets).__name__)}")
    real = targets != pad_id
    if not bool(real.any()):
        raise ValueError("targets holds no token other than pad_id")

    def entropy(values):
        _, counts = torch.unique(values, return_counts=True)
        f = counts.double() / counts.sum()
        return float(-(f * f.log()).sum())

    n_total = int(real.sum())
    position_entropy = 0.0
    for p in range(targets.shape[1]):
        column = targets[:, p][real[:, p]]
        if column.numel():
            position_entropy += column.numel() / n_total * entropy(column)
    return entropy(targets[real]), position_entropy
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The chapter's reverse task: sources of 3 to 8 random tokens, targets the reversed
sources followed by `<eos>`. The position tells a source-blind decoder a lot about `<eos>` (it can
only come at positions 3 to 8), so its floor is below the unigram entropy.
'''),
    ("tryit", r'''
pairs = synthetic_copy_task(640, min_len=3, max_len=8, vocab_size=16, reverse=True, seed=0)
data = TranslationDataset.from_ids(pairs)                      # appends <eos> to both sides
tgt = [data[i][1] for i in range(len(data))]
width = max(len(t) for t in tgt)
targets = torch.full((len(tgt), width), PAD_ID)
for row, t in enumerate(tgt):
    targets[row, : len(t)] = torch.as_tensor(t)
unigram, positional = loss_floors(targets, PAD_ID)
print(f"log V = {math.log(16):.4f}   unigram entropy H(Y) = {float(unigram):.4f}   H(Y | position) = {float(positional):.4f} nats")
'''),
    ("md", r'''
## Exercise 11.3 — a divergence detector

A run that diverges shows it in its loss log before the NaN: a spike far above anything seen so
far, or a loss that stops being finite. Write the check a training loop can run at every step:

`first_divergence(losses, k)`: `losses` is a 1-D float tensor (one loss per step, in order).
Step `t` (0-based) **diverges** when

* `losses[t]` is not finite (NaN, `inf` or `-inf`), or
* `t >= 1` and `losses[t] > k * min(losses[:t])` — strictly above `k` times the **running
  minimum** of the earlier losses (not the previous loss: a slowly rising loss is not a spike).

Return the first diverging step as an `int`, or `-1` when there is none. Raise `ValueError` when
`k <= 1` or `losses` is not 1-D.

Examples with `k = 3`: `[3.0, 2.5, 2.0, 2.2, 7.0, nan]` → `4` (7.0 > 3 × 2.0);
`[2.0, 1.0, 2.5, 2.9, 3.2]` → `4` (3.2 > 3 × 1.0, although 3.2 < 3 × 2.9);
`[4.0, 1.0, 3.0]` → `-1` (3.0 is not *above* 3 × 1.0). With `k = 4` the first example gives `5`
(the NaN).

**Hints.** `math.isfinite(v)` or `torch.isfinite`. Careful: every comparison with NaN is False,
so `nan > k * best` never fires — test finiteness first.
'''),
    ("exercise", "11.3", r'''
def first_divergence(losses, k):
    """First step whose loss is not finite or above k times the running minimum of the earlier losses.

    Args:
        losses: 1-D float tensor, the loss of each step in order.
        k: spike factor, > 1.

    Returns:
        int: the first diverging step (0-based), or -1 when none diverges.

    Raises:
        ValueError: ``k <= 1`` or ``losses`` not 1-D.

    Source: chapter 11 ("NaN late in training"); ``course_lib.training.TrainingDivergedError``.
    """
    ### BEGIN SOLUTION
    if not k > 1:
        raise ValueError(f"k must be > 1; got {k}")
    if not isinstance(losses, torch.Tensor) or losses.dim() != 1:
        raise ValueError(f"losses must be a 1-D tensor; got {getattr(losses, 'shape', type(losses).__name__)}")
    best = None
    for step, value in enumerate(losses.tolist()):
        if not math.isfinite(value):
            return step
        if best is not None and value > k * best:
            return step
        best = value if best is None else min(best, value)
    return -1
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** A healthy curve, the same curve with one bad batch, and a run that turns into NaN.
'''),
    ("tryit", r'''
steps = torch.arange(60, dtype=torch.float64)
healthy = 3.0 * torch.exp(-0.05 * steps) + 0.3
spiked = healthy.clone()
spiked[40] *= 8.0
nan_run = spiked.clone()
nan_run[42:] = float("nan")
for name, curve in {"healthy": healthy, "one bad batch": spiked, "NaN after the spike": nan_run}.items():
    print(f"{name:20s} first divergent step (k = 3): {first_divergence(curve, 3.0)}")
nan_only = healthy.clone()
nan_only[50] = float("nan")
print("a NaN without a spike:", first_divergence(nan_only, 3.0), " | a detector that forgets NaN would say -1")
'''),
]
