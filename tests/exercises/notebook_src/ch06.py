"""Source of exercises/06_feed_forward.ipynb and its solution (see build_notebooks.py)."""

CHAPTER = "06"
NOTEBOOK = "06_feed_forward.ipynb"
TITLE = "the position-wise feed-forward network"

CELLS = [
    ("code", r'''
import math
import sys

import torch
import torch.nn.functional as F

from course_lib.feedforward import PositionwiseFeedForward
'''),
    ("md", r'''
## Exercise 6.1 — the position-wise feed-forward network

After attention, every position goes — alone — through the same two-layer network
(section 3.3, equation 2):

$$\text{FFN}(x) = \max(0,\; x W_1 + b_1)\, W_2 + b_2$$

with $W_1 \in \mathbb{R}^{d_{\text{model}} \times d_{ff}}$, $b_1 \in \mathbb{R}^{d_{ff}}$,
$W_2 \in \mathbb{R}^{d_{ff} \times d_{\text{model}}}$, $b_2 \in \mathbb{R}^{d_{\text{model}}}$
(paper: $d_{\text{model}} = 512$, $d_{ff} = 2048$). Write `position_wise_ffn(x, w1, b1, w2, b2)`
for `x` of shape `(batch, seq_len, d_model)`, returning the same shape.

**Hints.** `@` multiplies the last dimension and broadcasts over `(batch, seq_len)`, which is
exactly "the same network at every position". `torch.relu` is $\max(0, \cdot)$.
'''),
    ("exercise", "6.1", r'''
def position_wise_ffn(x, w1, b1, w2, b2):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied at every position.

    Args:
        x: float tensor ``(batch, seq_len, d_model)``.
        w1: ``(d_model, d_ff)``; b1: ``(d_ff,)``; w2: ``(d_ff, d_model)``;
            b2: ``(d_model,)``.

    Returns:
        float tensor ``(batch, seq_len, d_model)``.

    Source: Vaswani et al. (2017), section 3.3, equation (2); chapter 6.
    """
    ### BEGIN SOLUTION
    return torch.relu(x @ w1 + b1) @ w2 + b2
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The library's `PositionwiseFeedForward` holds `nn.Linear` layers (`x @ weight.T + bias`);
with its transposed weights your function must agree with it. Shuffling the positions of the
input shuffles the output the same way — positions never mix.
'''),
    ("tryit", r'''
torch.manual_seed(0)
ffn = PositionwiseFeedForward(d_model=8, d_ff=32).eval()
x = torch.randn(2, 5, 8)
args = (ffn.linear1.weight.T, ffn.linear1.bias, ffn.linear2.weight.T, ffn.linear2.bias)
with torch.no_grad():
    mine = position_wise_ffn(x, *args)
    print("matches course_lib:", torch.allclose(mine, ffn(x), atol=1e-6))
    perm = torch.tensor([4, 2, 0, 1, 3])
    print("permutation in = permutation out:", torch.allclose(position_wise_ffn(x[:, perm], *args), mine[:, perm], atol=1e-6))
'''),
    ("md", r'''
## Exercise 6.2 — GELU

Later Transformers (BERT, GPT) replace the ReLU by the Gaussian Error Linear Unit
(Hendrycks & Gimpel, 2016), which weighs $x$ by the probability that a standard normal variable
is below it:

$$\text{GELU}(x) = x\,\Phi(x) = \tfrac{1}{2}\, x \left(1 + \operatorname{erf}\!\left(x/\sqrt{2}\right)\right)$$

Write `gelu(x)` (elementwise, any shape) with this **exact** formula.

**Hints.** `torch.erf`. Do not use the tanh approximation
$0.5x(1+\tanh(\sqrt{2/\pi}(x + 0.044715x^3)))$: its largest difference from the exact form is about $4.7 \times 10^{-4}$ (near $x \approx -2.7$).
'''),
    ("exercise", "6.2", r'''
def gelu(x):
    """The exact GELU activation, elementwise.

    Args:
        x: float tensor of any shape.

    Returns:
        float tensor of the same shape: ``0.5 * x * (1 + erf(x / sqrt(2)))``.

    Source: Hendrycks & Gimpel (2016), "Gaussian Error Linear Units"; chapter 6.
    """
    ### BEGIN SOLUTION
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Compare with `torch.nn.functional.gelu` and with ReLU: GELU is smooth at 0 and
slightly negative for small negative inputs.
'''),
    ("tryit", r'''
x = torch.linspace(-3, 3, 7)
print("x      ", x.tolist())
print("gelu   ", [round(v, 4) for v in gelu(x).tolist()])
print("relu   ", torch.relu(x).tolist())
print("matches F.gelu:", torch.allclose(gelu(x), F.gelu(x), atol=1e-6))
fine = torch.linspace(-10, 10, 200001, dtype=torch.float64)
gap = (gelu(fine) - F.gelu(fine, approximate="tanh")).abs()
print(f"largest gap to the tanh approximation on [-10, 10]: {float(gap.max()):.2e} at x = {float(fine[gap.argmax()]):.2f}")
'''),
]
