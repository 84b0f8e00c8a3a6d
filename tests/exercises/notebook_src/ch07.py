"""Source of exercises/07_add_and_norm.ipynb and its solution (see build_notebooks.py)."""

CHAPTER = "07"
NOTEBOOK = "07_add_and_norm.ipynb"
TITLE = "residual connections and layer normalisation"

CELLS = [
    ("code", r'''
import math
import sys

import torch
from torch import nn

from course_lib.layers import ResidualSublayer
'''),
    ("md", r'''
## Exercise 7.1 — LayerNorm from scratch

Layer normalisation (Ba et al., 2016) rescales each position's feature vector to mean 0 and
variance 1, then applies a learned gain $\gamma$ and bias $\beta$ (each of size $d_{\text{model}}$):

$$\mu = \frac{1}{d}\sum_{j=1}^{d} x_j,\qquad \sigma^2 = \frac{1}{d}\sum_{j=1}^{d} (x_j - \mu)^2,\qquad
\text{LN}(x)_j = \gamma_j\, \frac{x_j - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta_j$$

Write `layer_norm(x, gamma, beta, eps=1e-5)`, normalising over the **last** dimension only, for
`x` of any shape `(..., d_model)`.

**Hints.** `x.mean(dim=-1, keepdim=True)`; the variance is the *biased* one (divide by $d$, not
$d-1$): `x.var(dim=-1, unbiased=False, keepdim=True)`, or compute it yourself as the mean of
the squared *centred* values. ($\mathbb{E}[x^2] - \mu^2$ is the same in exact arithmetic, but
in float32 it loses precision when the mean is large compared with the spread.)
$\varepsilon$ goes inside the square root.
'''),
    ("exercise", "7.1", r'''
def layer_norm(x, gamma, beta, eps=1e-5):
    """Layer normalisation over the last dimension.

    Args:
        x: float tensor ``(..., d_model)``.
        gamma: float ``(d_model,)``, the gain; beta: float ``(d_model,)``, the bias.
        eps: added to the variance inside the square root (PyTorch's default 1e-5).

    Returns:
        float tensor of the shape of ``x``:
        ``(x - mean) / sqrt(var + eps) * gamma + beta`` with the biased variance.

    Source: Ba, Kiros & Hinton (2016), "Layer Normalization"; Vaswani et al.
    (2017), section 3.1; chapter 7.
    """
    ### BEGIN SOLUTION
    mean = x.mean(dim=-1, keepdim=True)
    centred = x - mean
    var = (centred * centred).mean(dim=-1, keepdim=True)
    return centred / torch.sqrt(var + eps) * gamma + beta
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Against `torch.nn.LayerNorm` with the same $\gamma$, $\beta$ — including rows whose
mean is about 1000.
'''),
    ("tryit", r'''
torch.manual_seed(0)
ln = nn.LayerNorm(8)
with torch.no_grad():
    ln.weight.uniform_(0.5, 1.5)
    ln.bias.uniform_(-0.5, 0.5)
for shift in (0.0, 1000.0):
    x = torch.randn(2, 3, 8) + shift
    with torch.no_grad():
        print(f"mean {shift:6.0f}: matches nn.LayerNorm:", torch.allclose(layer_norm(x, ln.weight, ln.bias), ln(x), atol=1e-4))
'''),
    ("md", r'''
## Exercises 7.2 and 7.3 — Pre-LN and Post-LN sublayers

Every sublayer (attention or feed-forward) of the Transformer is wrapped in a residual connection
and a LayerNorm. The paper (section 3.1) normalises **after** the addition — *Post-LN*:

$$\text{PostLN}(x) = \text{LN}\big(x + \text{Sublayer}(x)\big)$$

Most later models normalise the sublayer's **input** instead and leave the residual path
untouched — *Pre-LN* (Xiong et al., 2020), which trains without a long warm-up:

$$\text{PreLN}(x) = x + \text{Sublayer}\big(\text{LN}(x)\big)$$

Write `pre_ln_sublayer(x, sublayer, gamma, beta, eps=1e-5)` (exercise 7.2) and
`post_ln_sublayer(x, sublayer, gamma, beta, eps=1e-5)` (exercise 7.3). `sublayer` is a function
that maps a `(batch, seq_len, d_model)` tensor to one of the same shape; `gamma`, `beta`, `eps`
are the LayerNorm's parameters. (Dropout is left out here.)

**Hints.** Use your `layer_norm` (or `torch.nn.functional.layer_norm`). Call `sublayer` exactly
once.
'''),
    ("exercise", "7.2", r'''
def pre_ln_sublayer(x, sublayer, gamma, beta, eps=1e-5):
    """Pre-LN residual block: x + sublayer(LayerNorm(x)).

    Args:
        x: float tensor ``(batch, seq_len, d_model)``.
        sublayer: callable mapping ``(batch, seq_len, d_model)`` to the same shape.
        gamma, beta: float ``(d_model,)``, the LayerNorm's gain and bias.
        eps: the LayerNorm's epsilon.

    Returns:
        float tensor ``(batch, seq_len, d_model)``.

    Source: Xiong et al. (2020), "On Layer Normalization in the Transformer
    Architecture"; chapter 7.
    """
    ### BEGIN SOLUTION
    return x + sublayer(layer_norm(x, gamma, beta, eps))
    ### END SOLUTION
'''),
    ("exercise", "7.3", r'''
def post_ln_sublayer(x, sublayer, gamma, beta, eps=1e-5):
    """Post-LN residual block (the paper's): LayerNorm(x + sublayer(x)).

    Args:
        x: float tensor ``(batch, seq_len, d_model)``.
        sublayer: callable mapping ``(batch, seq_len, d_model)`` to the same shape.
        gamma, beta: float ``(d_model,)``, the LayerNorm's gain and bias.
        eps: the LayerNorm's epsilon.

    Returns:
        float tensor ``(batch, seq_len, d_model)``.

    Source: Vaswani et al. (2017), section 3.1 ("LayerNorm(x + Sublayer(x))"); chapter 7.
    """
    ### BEGIN SOLUTION
    return layer_norm(x + sublayer(x), gamma, beta, eps)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The library's `ResidualSublayer` implements both orders (`norm_first=True` is
Pre-LN). With dropout 0 and the same LayerNorm parameters, both of yours must agree with it.
Note the difference: the Pre-LN output keeps the scale of `x`; the Post-LN output is normalised.
'''),
    ("tryit", r'''
torch.manual_seed(0)
x = 3.0 * torch.randn(2, 4, 8) + 1.0
linear = nn.Linear(8, 8)
sublayer = lambda y: torch.tanh(linear(y))
for norm_first, mine_fn in ((True, pre_ln_sublayer), (False, post_ln_sublayer)):
    block = ResidualSublayer(8, dropout=0.0, norm_first=norm_first).eval()
    with torch.no_grad():
        mine = mine_fn(x, sublayer, block.norm.weight, block.norm.bias)
        same = torch.allclose(mine, block(x, sublayer), atol=1e-5)
    print(f"{mine_fn.__name__}: matches course_lib: {same}, output std {float(mine.std()):.2f}")
'''),
]
