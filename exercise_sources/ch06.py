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
## Exercise 6.1 — the FFN from `nn.Linear` weights, and how many units fire

After attention, every position goes — alone — through the same two-layer network
(section 3.3, equation 2):

$$\text{FFN}(x) = \max(0,\; x W_1 + b_1)\, W_2 + b_2 .$$

The chapter writes it with the paper's matrices ($W_1$ of shape $d_{\text{model}} \times d_{ff}$).
Checkpoints store them as `nn.Linear` does, **transposed**: `linear1.weight` has shape
`(d_ff, d_model)` and the layer computes `x @ weight.T + bias`. Here the weights come in that
layout. Also return how sparse the inner layer is: the chapter's histogram shows that about half
of the ReLU's outputs are exactly 0 — for each position, report the fraction of the $d_{ff}$ inner
units that are **active** (> 0 after the ReLU).

Write `position_wise_ffn(x, w1, b1, w2, b2)`:

* `x`: `(batch, seq_len, d_model)`; `w1`: `(d_ff, d_model)`, `b1`: `(d_ff,)`, `w2`: `(d_model, d_ff)`,
  `b2`: `(d_model,)` — `nn.Linear`'s layout (`linear1.weight`, `linear1.bias`, ...);
* returns `(out, active)`: `out` `(batch, seq_len, d_model)` and `active` `(batch, seq_len)`, a float
  in $[0, 1]$;
* raises `ValueError` naming `w1` (or `w2`) when its shape is not `(d_ff, d_model)` (or
  `(d_model, d_ff)`), with `d_model = x.shape[-1]` and `d_ff = w1.shape[0]`.

**Example.** The chapter's hand-worked position, in this layout: `x = [1, -2]`,
`w1 = [[1, 1], [0, 1], [-1, 1]]`, `b1 = [2, 0, 1]`, `w2 = [[1, 3, 5], [2, 4, 6]]`, `b2 = [0.5, -0.5]`
give `out = [1.5, 1.5]` and `active = 1/3` (only the first inner unit, value 1, is positive).

**Hints.** `x @ w1.T` (or `torch.nn.functional.linear(x, w1, b1)`). The check of the shapes matters
because a square `d_model = d_ff` weight in the wrong layout would run without an error. A boolean
tensor's `.float().mean(-1)` is the fraction of `True`.
'''),
    ("exercise", "6.1", r'''
def position_wise_ffn(x, w1, b1, w2, b2):
    """FFN(x) = max(0, x W1^T + b1) W2^T + b2 with nn.Linear-layout weights, and the active fraction.

    Args:
        x: float tensor ``(batch, seq_len, d_model)``.
        w1: ``(d_ff, d_model)``; b1: ``(d_ff,)``; w2: ``(d_model, d_ff)``;
            b2: ``(d_model,)`` (the layout of ``nn.Linear.weight``).

    Returns:
        ``(out, active)``: ``out`` ``(batch, seq_len, d_model)``; ``active``
        ``(batch, seq_len)``, the fraction of the d_ff inner units > 0.

    Raises:
        ValueError: ``w1`` is not ``(d_ff, d_model)`` or ``w2`` not ``(d_model, d_ff)``.

    Source: Vaswani et al. (2017), section 3.3, equation (2); chapter 6.
    """
    ### BEGIN SOLUTION
    d_model = x.shape[-1]
    if w1.dim() != 2 or w1.shape[1] != d_model:
        raise ValueError(f"w1 must have shape (d_ff, d_model={d_model}) (nn.Linear layout); got {tuple(w1.shape)}")
    d_ff = w1.shape[0]
    if tuple(w2.shape) != (d_model, d_ff):
        raise ValueError(f"w2 must have shape (d_model={d_model}, d_ff={d_ff}) (nn.Linear layout); got {tuple(w2.shape)}")
    hidden = torch.relu(x @ w1.T + b1)                           # (batch, seq_len, d_ff)
    return hidden @ w2.T + b2, (hidden > 0).float().mean(dim=-1)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The chapter's hand-worked example, then the library's `PositionwiseFeedForward`: its
`nn.Linear` weights go in as they are. Shuffling the positions of the input shuffles both outputs
the same way — positions never mix.
'''),
    ("tryit", r'''
out, active = position_wise_ffn(torch.tensor([[[1.0, -2.0]]]), torch.tensor([[1.0, 1.0], [0.0, 1.0], [-1.0, 1.0]]),
                                torch.tensor([2.0, 0.0, 1.0]), torch.tensor([[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]]),
                                torch.tensor([0.5, -0.5]))
print("hand-worked example:", out.flatten().tolist(), " active fraction:", round(active.item(), 4))

torch.manual_seed(0)
ffn = PositionwiseFeedForward(d_model=8, d_ff=32).eval()
x = torch.randn(2, 5, 8)
args = (ffn.linear1.weight, ffn.linear1.bias, ffn.linear2.weight, ffn.linear2.bias)
with torch.no_grad():
    mine, active = position_wise_ffn(x, *args)
    print("matches course_lib:", torch.allclose(mine, ffn(x), atol=1e-6))
    print("active fraction per position (batch 0):", [round(a, 3) for a in active[0].tolist()])
    perm = torch.tensor([4, 2, 0, 1, 3])
    out_p, active_p = position_wise_ffn(x[:, perm], *args)
    print("permutation in = permutation out:", torch.allclose(out_p, mine[:, perm], atol=1e-6), torch.equal(active_p, active[:, perm]))
'''),
    ("md", r'''
## Exercise 6.2 — GELU, accurate in the tail

Later Transformers (BERT, GPT) replace the ReLU by the Gaussian Error Linear Unit
(Hendrycks & Gimpel, 2016), which weighs $x$ by the probability that a standard normal variable
is below it:

$$\text{GELU}(x) = x\,\Phi(x) = \tfrac{1}{2}\, x \left(1 + \operatorname{erf}\!\left(x/\sqrt{2}\right)\right)$$

The chapter computes it with this formula — and so does PyTorch's `F.gelu` — and for
$x \lesssim -5.5$ both return **exactly 0** in float32, although $\text{GELU}(-10) \approx
-7.6 \times 10^{-23}$ is an ordinary float32 number. The reason is *cancellation*: $\operatorname{erf}(x/\sqrt 2)$ is
$-1 + \varepsilon$ with $\varepsilon$ far below float32's resolution near $-1$, so $1 + \operatorname{erf}$ loses every digit.

Write `gelu(x)` (elementwise, any shape, the **exact** GELU, not the tanh approximation) that keeps
**relative** accuracy (better than $10^{-4}$) for $-12 \le x \le 0$ as well as everywhere else. The
checker compares the tail values relatively: 0 where $-7.6 \times 10^{-23}$ is expected fails.

**Example.** `gelu(torch.tensor([-10.0, 0.0, 1.0]))` → `[-7.6199e-23, 0.0, 0.8413]`.

**Hints.** Rewrite $1 + \operatorname{erf}(z)$ with the *complementary* error function,
$\operatorname{erfc}(z) = 1 - \operatorname{erf}(z)$ (and $\operatorname{erf}$ is odd), and use
`torch.special.erfc`, which is computed accurately where it is tiny. Do not use the tanh
approximation $0.5x(1+\tanh(\sqrt{2/\pi}(x + 0.044715x^3)))$: its largest difference from the exact form is about $4.7 \times 10^{-4}$.
'''),
    ("exercise", "6.2", r'''
def gelu(x):
    """The exact GELU activation, elementwise, accurate in the negative tail.

    Args:
        x: float tensor of any shape.

    Returns:
        float tensor of the same shape: ``x * Phi(x)``, with relative error below
        1e-4 also where ``Phi(x)`` is tiny (x down to -12).

    Source: Hendrycks & Gimpel (2016), "Gaussian Error Linear Units"; chapter 6.
    """
    ### BEGIN SOLUTION
    return 0.5 * x * torch.special.erfc(-x / math.sqrt(2.0))
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Compare with `torch.nn.functional.gelu` and with ReLU: GELU is smooth at 0 and
slightly negative for small negative inputs. Then the tail, where the textbook formula (and
`F.gelu`) gives 0.
'''),
    ("tryit", r'''
x = torch.linspace(-3, 3, 7)
print("x      ", x.tolist())
print("gelu   ", [round(v, 4) for v in gelu(x).tolist()])
print("relu   ", torch.relu(x).tolist())
print("matches F.gelu on [-3, 3]:", torch.allclose(gelu(x), F.gelu(x), atol=1e-6))
tail = torch.tensor([-5.0, -6.0, -8.0, -10.0, -12.0])
print("tail x          ", tail.tolist())
print("yours           ", [f"{v:.3e}" for v in gelu(tail).tolist()])
print("1 + erf formula ", [f"{v:.3e}" for v in (0.5 * tail * (1 + torch.erf(tail / math.sqrt(2)))).tolist()])
print("F.gelu          ", [f"{v:.3e}" for v in F.gelu(tail).tolist()])
print("float64 exact   ", [f"{0.5 * v * math.erfc(-v / math.sqrt(2)):.3e}" for v in tail.tolist()])
'''),
    ("md", r'''
## Exercise 6.3 — a SwiGLU feed-forward network

Shazeer (2020, "GLU Variants Improve Transformer") replaced the FFN's ReLU by a **gated linear
unit**: two projections of $x$, one passed through an activation and used as a *gate* that
multiplies the other elementwise. With the Swish (= SiLU) activation, $\text{Swish}(z) = z\,\sigma(z)$:

$$\text{FFN}_{\text{SwiGLU}}(x) = \bigl(\text{Swish}(x W_{\text{gate}}) \odot x W_{\text{up}}\bigr)\, W_{\text{down}}$$

with $W_{\text{gate}}, W_{\text{up}} \in \mathbb{R}^{d_{\text{model}} \times d_h}$ and
$W_{\text{down}} \in \mathbb{R}^{d_h \times d_{\text{model}}}$, no biases (as in the paper, PaLM and LLaMA).

Write `swiglu_ffn(x, w_gate, w_up, w_down)` for `x` of shape `(batch, seq_len, d_model)` (any
leading dimensions), returning `(batch, seq_len, d_model)`; weights used as `x @ w`. Raise
`ValueError` naming the argument when `w_gate` and `w_up` are not both `(d_model, d_h)`, or
`w_down` is not `(d_h, d_model)`.

**Example.** $d_{\text{model}} = d_h = 1$, $W_{\text{gate}} = W_{\text{up}} = W_{\text{down}} = 1$:
$x = 2$ gives $\text{Swish}(2) \cdot 2 = 2 \cdot 0.8808 \cdot 2 = 3.523$; $x = -2$ gives
$(-0.2384) \cdot (-2) = 0.477$ — positive: unlike a ReLU FFN, the gate can pass a negative input
through a negative "up" value.

**Hints.** `torch.sigmoid`, or `torch.nn.functional.silu`, which is Swish. The Swish goes on the
gate branch only.
'''),
    ("exercise", "6.3", r'''
def swiglu_ffn(x, w_gate, w_up, w_down):
    """SwiGLU FFN: (Swish(x W_gate) * (x W_up)) W_down, no biases.

    Args:
        x: float tensor ``(..., d_model)``.
        w_gate, w_up: ``(d_model, d_h)``; w_down: ``(d_h, d_model)``.

    Returns:
        float tensor ``(..., d_model)``.

    Raises:
        ValueError: weights of mismatched shapes.

    Source: Shazeer (2020), "GLU Variants Improve Transformer", equation (6); chapter 6.
    """
    ### BEGIN SOLUTION
    d_model = x.shape[-1]
    if w_gate.dim() != 2 or w_gate.shape[0] != d_model or tuple(w_up.shape) != tuple(w_gate.shape):
        raise ValueError(f"w_gate and w_up must both be (d_model={d_model}, d_h); got {tuple(w_gate.shape)} and {tuple(w_up.shape)}")
    if tuple(w_down.shape) != (w_gate.shape[1], d_model):
        raise ValueError(f"w_down must be (d_h={w_gate.shape[1]}, d_model={d_model}); got {tuple(w_down.shape)}")
    gate = x @ w_gate
    return (gate * torch.sigmoid(gate) * (x @ w_up)) @ w_down
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The worked example, and the check against `F.silu` on random weights.
'''),
    ("tryit", r'''
one = torch.ones(1, 1)
print("x = 2 ->", round(swiglu_ffn(torch.tensor([[2.0]]), one, one, one).item(), 3),
      "  x = -2 ->", round(swiglu_ffn(torch.tensor([[-2.0]]), one, one, one).item(), 3))
gen = torch.Generator().manual_seed(0)
x = torch.randn(2, 5, 8, generator=gen)
w_gate, w_up = torch.randn(8, 24, generator=gen), torch.randn(8, 24, generator=gen)
w_down = torch.randn(24, 8, generator=gen)
print("matches F.silu form:", torch.allclose(swiglu_ffn(x, w_gate, w_up, w_down), (F.silu(x @ w_gate) * (x @ w_up)) @ w_down, atol=1e-5))
'''),
    ("md", r'''
## Exercise 6.4 — the SwiGLU width for an equal parameter count

A SwiGLU FFN has **three** matrices where the ReLU FFN has two, so to compare them at equal cost
Shazeer shrinks the hidden width by $2/3$: a bias-free ReLU FFN with width $d_{ff}$ has
$2\, d_{\text{model}}\, d_{ff}$ parameters, a SwiGLU FFN with width $d_h$ has
$3\, d_{\text{model}}\, d_h$, and they are equal for $d_h = \tfrac{2}{3} d_{ff}$. That is rarely an
integer, and fast kernels like widths that are multiples of 8, 64 or 256, so LLaMA (Touvron et
al., 2023) rounds:

1. $d_h = \lfloor 2 d_{ff} / 3 \rfloor$ (integer division, `(2 * d_ff) // 3`);
2. round $d_h$ **up** to the next multiple of `multiple_of` (unchanged if it already is one).

Write `swiglu_hidden_width(d_model, d_ff, multiple_of=1)` returning the triple
`(d_hidden, swiglu_params, relu_params)` of Python ints: the width above, the parameter count of
the bias-free SwiGLU FFN with that width, and that of the bias-free ReLU FFN with width `d_ff`.
Raise `ValueError` naming the argument when `d_model`, `d_ff` or `multiple_of` is smaller than 1.

**Example.** LLaMA-7B: `d_model = 4096`, `d_ff = 4 * 4096 = 16384`, `multiple_of = 256`:
$\lfloor 32768 / 3 \rfloor = 10922$, rounded up to $43 \cdot 256 = 11008$ — the width in its
configuration. `swiglu_hidden_width(512, 2048)` gives `(1365, 2096640, 2097152)`: 512 parameters
fewer than the ReLU FFN.

**Hints.** Rounding $n$ up to a multiple of $m$: `-(-n // m) * m`, or `math.ceil(n / m) * m`
(exact for these sizes). No floats are needed at all.
'''),
    ("exercise", "6.4", r'''
def swiglu_hidden_width(d_model, d_ff, multiple_of=1):
    """SwiGLU hidden width matching a ReLU FFN's parameters (LLaMA's rounding), and both counts.

    Args:
        d_model: model width (>= 1).
        d_ff: hidden width of the ReLU FFN being matched (>= 1).
        multiple_of: the SwiGLU width is rounded up to a multiple of this (>= 1).

    Returns:
        ``(d_hidden, swiglu_params, relu_params)``, ints:
        ``d_hidden`` = floor(2 d_ff / 3) rounded up to a multiple of ``multiple_of``;
        ``swiglu_params = 3 * d_model * d_hidden``; ``relu_params = 2 * d_model * d_ff``
        (no biases).

    Raises:
        ValueError: an argument smaller than 1.

    Source: Shazeer (2020), section 2; Touvron et al. (2023), LLaMA; chapter 6.
    """
    ### BEGIN SOLUTION
    for name, value in (("d_model", d_model), ("d_ff", d_ff), ("multiple_of", multiple_of)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1; got {value}")
    d_hidden = (2 * d_ff) // 3
    d_hidden = -(-d_hidden // multiple_of) * multiple_of
    return d_hidden, 3 * d_model * d_hidden, 2 * d_model * d_ff
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The LLaMA sizes, and the parameter counts checked against real bias-free layers.
'''),
    ("tryit", r'''
import torch.nn as nn

for d_model in (4096, 5120, 8192):
    d_hidden, swiglu, relu = swiglu_hidden_width(d_model, 4 * d_model, 256)
    print(f"d_model {d_model}: d_hidden {d_hidden}, SwiGLU {swiglu:,} vs ReLU {relu:,} parameters ({swiglu / relu - 1:+.2%})")
d_hidden, swiglu, relu = swiglu_hidden_width(512, 2048, 8)
layers = [nn.Linear(512, d_hidden, bias=False), nn.Linear(512, d_hidden, bias=False), nn.Linear(d_hidden, 512, bias=False)]
print("counted:", sum(p.numel() for layer in layers for p in layer.parameters()) == swiglu,
      sum(p.numel() for p in nn.Linear(512, 2048, bias=False).parameters()) * 2 == relu)
'''),
]
