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
import torch.nn.functional as F

from course_lib.layers import ResidualSublayer
'''),
    ("md", r'''
## Exercise 7.1 — LayerNorm over any trailing shape

Layer normalisation (Ba et al., 2016) rescales a group of features to mean 0 and variance 1, then
applies a learned gain $\gamma$ and bias $\beta$. The chapter normalises over the **last**
dimension, the $d_{\text{model}}$ features of one position. `nn.LayerNorm(normalized_shape)` is
more general: it normalises over the **trailing dimensions given by `normalized_shape`**, with
**one** mean and **one** variance over all the entries of those dimensions together, and
$\gamma$, $\beta$ have that shape. For example, for `x` of shape `(batch, seq_len, n_heads, d_k)`
and $\gamma$ of shape `(n_heads, d_k)`, each position's `n_heads * d_k` numbers share one mean
and one variance (normalising each head separately would be $\gamma$ of shape `(d_k,)`).

With $S$ the set of the $m$ entries normalised together:

$$\mu = \frac{1}{m}\sum_{s \in S} x_s,\qquad \sigma^2 = \frac{1}{m}\sum_{s \in S} (x_s - \mu)^2,\qquad
\text{LN}(x)_s = \gamma_s\, \frac{x_s - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta_s$$

Write `layer_norm(x, gamma, beta, eps=1e-5)` that normalises over the last `gamma.dim()`
dimensions of `x`. Raise `ValueError` naming `gamma` when `gamma.shape` is not
`x.shape[-gamma.dim():]`, and naming `beta` when `beta.shape != gamma.shape`.

**Example.** `x` of shape `(2, 3, 4, 6)` with `gamma` of shape `(4, 6)`: the mean and variance are
taken over the last two dimensions (24 numbers per `(b, t)`), the result has the shape of `x`.

**Hints.** `dims = tuple(range(-gamma.dim(), 0))`, then `x.mean(dim=dims, keepdim=True)`; the
variance is the *biased* one (divide by $m$, not $m-1$), best computed as the mean of the squared
*centred* values ($\mathbb{E}[x^2] - \mu^2$ loses precision in float32 when the mean is large).
$\varepsilon$ goes inside the square root.
'''),
    ("exercise", "7.1", r'''
def layer_norm(x, gamma, beta, eps=1e-5):
    """Layer normalisation over the trailing dimensions that ``gamma`` has.

    Args:
        x: float tensor ``(..., *normalized_shape)``.
        gamma: float tensor of shape ``normalized_shape`` (e.g. ``(d_model,)`` or
            ``(n_heads, d_k)``), the gain; beta: the bias, same shape as ``gamma``.
        eps: added to the variance inside the square root (PyTorch's default 1e-5).

    Returns:
        float tensor of the shape of ``x``: with one mean and one biased variance
        over the last ``gamma.dim()`` dimensions, ``(x - mean) / sqrt(var + eps) * gamma + beta``.

    Raises:
        ValueError: ``gamma.shape != x.shape[-gamma.dim():]`` (names gamma), or
            ``beta.shape != gamma.shape`` (names beta).

    Source: Ba, Kiros & Hinton (2016), "Layer Normalization"; Vaswani et al.
    (2017), section 3.1; chapter 7; ``torch.nn.LayerNorm(normalized_shape)``.
    """
    ### BEGIN SOLUTION
    n = gamma.dim()
    if n < 1 or n > x.dim() or tuple(x.shape[x.dim() - n:]) != tuple(gamma.shape):
        raise ValueError(f"gamma must have the trailing shape of x; got gamma {tuple(gamma.shape)} for x {tuple(x.shape)}")
    if tuple(beta.shape) != tuple(gamma.shape):
        raise ValueError(f"beta must have the shape of gamma {tuple(gamma.shape)}; got {tuple(beta.shape)}")
    dims = tuple(range(-n, 0))
    mean = x.mean(dim=dims, keepdim=True)
    centred = x - mean
    var = (centred * centred).mean(dim=dims, keepdim=True)
    return centred / torch.sqrt(var + eps) * gamma + beta
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Against `torch.nn.LayerNorm` with the same $\gamma$, $\beta$ — for one and for two
normalised dimensions, and for rows whose mean is about 1000. Then look at what the choice of
`normalized_shape` changes: normalised per position (`(n_heads, d_k)`) every head keeps its own
scale relative to the others; normalised per head (`(d_k,)`) every head is brought to variance 1.
'''),
    ("tryit", r'''
torch.manual_seed(0)
for normalized_shape in ((8,), (4, 8)):
    ln = nn.LayerNorm(normalized_shape)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)
    for shift in (0.0, 1000.0):
        x = torch.randn(2, 3, 4, 8) + shift
        with torch.no_grad():
            same = torch.allclose(layer_norm(x, ln.weight, ln.bias), ln(x), atol=1e-3)
        print(f"normalized_shape {normalized_shape}, mean {shift:6.0f}: matches nn.LayerNorm: {same}")

x = torch.randn(1, 1, 4, 8) * torch.tensor([0.1, 1.0, 3.0, 10.0])[:, None]   # 4 heads of very different scales
per_position = layer_norm(x, torch.ones(4, 8), torch.zeros(4, 8))
per_head = layer_norm(x, torch.ones(8), torch.zeros(8))
print("std of each head, normalised per position:", [round(float(s), 2) for s in per_position[0, 0].std(-1, unbiased=False)])
print("std of each head, normalised per head:    ", [round(float(s), 2) for s in per_head[0, 0].std(-1, unbiased=False)])
'''),
    ("md", r'''
## Exercises 7.2 and 7.3 — a Pre-LN stack and a Post-LN stack

Every sublayer (attention or feed-forward) of the Transformer is wrapped in a residual connection
and a LayerNorm. The paper (section 3.1) normalises **after** the addition — *Post-LN*; most later
models normalise the sublayer's **input** and leave the residual stream untouched — *Pre-LN*
(Xiong et al., 2020) — which then needs **one final LayerNorm after the whole stack**, because
nothing else ever normalises the stream. For sublayers $F_1, \dots, F_N$, each with its **own**
LayerNorm $\text{LN}_l$ (its own $\gamma_l$, $\beta_l$):

$$\text{Post-LN:}\quad x_{l} = \text{LN}_l\big(x_{l-1} + F_l(x_{l-1})\big),\quad \text{output } x_N$$

$$\text{Pre-LN:}\quad x_{l} = x_{l-1} + F_l\big(\text{LN}_l(x_{l-1})\big),\quad \text{output } \text{LN}_{\text{final}}(x_N)$$

Write (dropout left out):

* 7.2 `pre_ln_stack(x, sublayers, norms, final_norm, eps=1e-5)`;
* 7.3 `post_ln_stack(x, sublayers, norms, eps=1e-5)`.

`x` has shape `(batch, seq_len, d_model)`; `sublayers` is a list of $N$ functions, each mapping
that shape to itself; `norms` is a list of $N$ pairs `(gamma_l, beta_l)` of shape `(d_model,)`,
`norms[l]` belonging to `sublayers[l]`; `final_norm` is one more pair. Call each sublayer exactly
once, in order. Raise `ValueError` naming `norms` when `len(norms) != len(sublayers)` (`zip`
would silently drop a sublayer).

**Example.** With two sublayers that return zeros, Post-LN gives $\text{LN}_2(\text{LN}_1(x))$ and
Pre-LN gives $\text{LN}_{\text{final}}(x)$.

**Hints.** A loop over `zip(sublayers, norms)`; `F.layer_norm(x, (d_model,), gamma, beta, eps)` for
each LayerNorm (here the LayerNorm is not the lesson, so the built-in is fine; keep these two
functions independent of your 7.1).
'''),
    ("exercise", "7.2", r'''
def pre_ln_stack(x, sublayers, norms, final_norm, eps=1e-5):
    """N Pre-LN residual blocks, x = x + F_l(LN_l(x)), then one final LayerNorm.

    Args:
        x: float tensor ``(batch, seq_len, d_model)``.
        sublayers: list of N callables mapping ``(batch, seq_len, d_model)`` to the same shape.
        norms: list of N pairs ``(gamma, beta)``, each float ``(d_model,)``: the
            LayerNorm of the sublayer with the same index.
        final_norm: the pair ``(gamma, beta)`` of the LayerNorm after the last block.
        eps: the LayerNorms' epsilon.

    Returns:
        float tensor ``(batch, seq_len, d_model)``.

    Raises:
        ValueError: ``len(norms) != len(sublayers)`` (names norms).

    Source: Xiong et al. (2020), "On Layer Normalization in the Transformer
    Architecture"; chapter 7.
    """
    ### BEGIN SOLUTION
    if len(norms) != len(sublayers):
        raise ValueError(f"norms must have one (gamma, beta) per sublayer; got {len(norms)} for {len(sublayers)} sublayers")
    d_model = x.shape[-1]
    for sublayer, (gamma, beta) in zip(sublayers, norms):
        x = x + sublayer(F.layer_norm(x, (d_model,), gamma, beta, eps))
    gamma, beta = final_norm
    return F.layer_norm(x, (d_model,), gamma, beta, eps)
    ### END SOLUTION
'''),
    ("exercise", "7.3", r'''
def post_ln_stack(x, sublayers, norms, eps=1e-5):
    """N Post-LN residual blocks (the paper's): x = LN_l(x + F_l(x)).

    Args:
        x: float tensor ``(batch, seq_len, d_model)``.
        sublayers: list of N callables mapping ``(batch, seq_len, d_model)`` to the same shape.
        norms: list of N pairs ``(gamma, beta)``, each float ``(d_model,)``: the
            LayerNorm of the sublayer with the same index.
        eps: the LayerNorms' epsilon.

    Returns:
        float tensor ``(batch, seq_len, d_model)``.

    Raises:
        ValueError: ``len(norms) != len(sublayers)`` (names norms).

    Source: Vaswani et al. (2017), section 3.1 ("LayerNorm(x + Sublayer(x))"); chapter 7.
    """
    ### BEGIN SOLUTION
    if len(norms) != len(sublayers):
        raise ValueError(f"norms must have one (gamma, beta) per sublayer; got {len(norms)} for {len(sublayers)} sublayers")
    d_model = x.shape[-1]
    for sublayer, (gamma, beta) in zip(sublayers, norms):
        x = F.layer_norm(x + sublayer(x), (d_model,), gamma, beta, eps)
    return x
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The library's `ResidualSublayer` is one block of either kind (`norm_first=True` is
Pre-LN). A stack of them, with copied LayerNorm parameters (and the final LayerNorm for Pre-LN),
must agree with your functions. Then watch the residual stream: the printed norms are those of
each block's output — constant in Post-LN, growing with depth in Pre-LN (only the final
LayerNorm brings it back).
'''),
    ("tryit", r'''
torch.manual_seed(0)
d_model, n_layers = 8, 6
x = torch.randn(2, 4, d_model)
linears = [nn.Linear(d_model, d_model) for _ in range(n_layers)]
sublayers = [lambda y, lin=lin: torch.tanh(lin(y)) for lin in linears]
blocks = {nf: [ResidualSublayer(d_model, dropout=0.0, norm_first=nf).eval() for _ in range(n_layers)] for nf in (True, False)}
final = nn.LayerNorm(d_model)
with torch.no_grad():
    for nf, stack in blocks.items():
        for block in stack:
            block.norm.weight.uniform_(0.5, 1.5)
            block.norm.bias.uniform_(-0.2, 0.2)
        norms = [(block.norm.weight, block.norm.bias) for block in stack]
        h, sizes = x, []
        for block, fn in zip(stack, sublayers):
            h = block(h, fn)
            sizes.append(round(float(h.norm(dim=-1).mean()), 2))
        if nf:
            mine, ref = pre_ln_stack(x, sublayers, norms, (final.weight, final.bias)), final(h)
        else:
            mine, ref = post_ln_stack(x, sublayers, norms), h
        name = "pre_ln_stack " if nf else "post_ln_stack"
        print(f"{name}: matches course_lib: {torch.allclose(mine, ref, atol=1e-5)}; stream norm after each block: {sizes}")
'''),
    ("md", r'''
## Exercise 7.4 — RMSNorm

Many recent models (T5, LLaMA) replace LayerNorm by **RMSNorm** (Zhang & Sennrich, 2019): it drops
the centring and the bias and divides by the root mean square of the features,

$$\text{RMSNorm}(x)_j = \frac{x_j}{\sqrt{\frac{1}{d}\sum_{k=1}^{d} x_k^2 + \varepsilon}}\; g_j$$

with a learned gain $g$ of size $d = d_{\text{model}}$. It is cheaper (one reduction instead of
two) and, the authors argue, the re-scaling is what matters. Write `rms_norm(x, gain, eps=1e-6)`
over the **last** dimension of `x` (any shape `(..., d_model)`). Raise `ValueError` naming `gain`
when `gain.shape != (x.shape[-1],)`. Do not call `torch.nn.functional.rms_norm` — that is what the
checker compares with.

**Example.** $x = (3, 4)$, $g = (1, 1)$, $\varepsilon = 0$: the mean square is $(9 + 16)/2 = 12.5$,
so the output is $(3, 4)/\sqrt{12.5} \approx (0.8485, 1.1314)$ — and unlike LayerNorm, its mean
is not 0.

**Hints.** `(x * x).mean(dim=-1, keepdim=True)`; $\varepsilon$ inside the square root; no mean is
subtracted anywhere.
'''),
    ("exercise", "7.4", r'''
def rms_norm(x, gain, eps=1e-6):
    """Root-mean-square layer normalisation over the last dimension.

    Args:
        x: float tensor ``(..., d_model)``.
        gain: float ``(d_model,)``, the learned gain g.
        eps: added to the mean square inside the square root.

    Returns:
        float tensor of the shape of ``x``: ``x / sqrt(mean(x**2, last dim) + eps) * gain``.

    Raises:
        ValueError: ``gain.shape != (x.shape[-1],)`` (names gain).

    Source: Zhang & Sennrich (2019), "Root Mean Square Layer Normalization"; chapter 7.
    """
    ### BEGIN SOLUTION
    if tuple(gain.shape) != (x.shape[-1],):
        raise ValueError(f"gain must have shape ({x.shape[-1]},); got {tuple(gain.shape)}")
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * gain
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The worked example, a comparison with PyTorch's built-in (if your PyTorch has it),
and the difference that matters: LayerNorm does not change when a constant is added to every
feature, RMSNorm does; both ignore a positive rescaling of the input.
'''),
    ("tryit", r'''
print("rms_norm([3, 4]):", [round(v, 4) for v in rms_norm(torch.tensor([3.0, 4.0]), torch.ones(2), eps=0.0).tolist()])
torch.manual_seed(0)
x, g = torch.randn(2, 5, 8), torch.rand(8) + 0.5
if hasattr(F, "rms_norm"):
    print("matches F.rms_norm:", torch.allclose(rms_norm(x, g), F.rms_norm(x, (8,), g, 1e-6), atol=1e-6))
ones, zeros = torch.ones(8), torch.zeros(8)
for name, fn in (("LayerNorm", lambda t: F.layer_norm(t, (8,), ones, zeros)), ("RMSNorm  ", lambda t: rms_norm(t, ones))):
    shift = (fn(x + 3.0) - fn(x)).abs().max()
    scale = (fn(5.0 * x) - fn(x)).abs().max()
    print(f"{name}: change for x + 3: {shift:.4f}; change for 5 * x: {scale:.4f}")
'''),
    ("md", r'''
## Exercise 7.5 — the gradient at every depth, Post-LN vs Pre-LN

The chapter measured the gradient of each layer's weights at initialisation. Here you measure the
gradient that reaches the **residual stream itself** at every depth, for both placements of the
LayerNorm. For sublayers $F_1, \dots, F_N$ and LayerNorms with gain 1 and bias 0
($\varepsilon = 10^{-5}$, no learned parameters), let $x_0 = x$ and

$$\text{Post-LN: } x_l = \text{LN}(x_{l-1} + F_l(x_{l-1})),\ \ \text{out} = x_N \qquad
\text{Pre-LN: } x_l = x_{l-1} + F_l(\text{LN}(x_{l-1})),\ \ \text{out} = \text{LN}(x_N)$$

(Pre-LN ends with its final LayerNorm). With the loss $\mathcal{L} = \sum w \odot \text{out}$ for a
fixed tensor `w` of the shape of `x`, return the $N + 1$ gradient norms
$\big\lVert \partial\mathcal{L} / \partial x_l \big\rVert$ for $l = 0, \dots, N$ (the Frobenius norm
over the whole tensor; $l = 0$ is the input) as a float tensor of shape `(N + 1,)`.

Write `gradient_norms_by_depth(x, sublayers, w, norm_first, eps=1e-5)` (`norm_first=True` is
Pre-LN, as in `ResidualSublayer`). Raise `ValueError` naming `w` when `w.shape != x.shape`. Do not
modify `x`; use autograd. This exercise is self-contained: do not call your 7.2/7.3 functions.

**Example.** With one sublayer that returns zeros, Post-LN gives `out = LN(x)`: the last norm is
$\lVert w \rVert$ (the gradient at the output is `w` itself) and the first is the norm of `w` sent
back through the LayerNorm's Jacobian.

**Hints.** `x0 = x.detach().clone().requires_grad_(True)`; keep every stream tensor in a list;
`torch.autograd.grad(loss, streams)` returns one gradient per tensor of the list (the
intermediate tensors need no `retain_grad` this way); `F.layer_norm(h, (d_model,), eps=eps)`.
'''),
    ("exercise", "7.5", r'''
def gradient_norms_by_depth(x, sublayers, w, norm_first, eps=1e-5):
    """Norm of dL/dx_l at every depth l = 0..N of a Post-LN or Pre-LN stack, L = sum(w * out).

    Args:
        x: float tensor ``(batch, seq_len, d_model)``, the input x_0.
        sublayers: list of N callables mapping ``(batch, seq_len, d_model)`` to the same shape.
        w: float tensor of the shape of ``x``: the loss is ``(w * out).sum()``.
        norm_first: True for Pre-LN (with a final LayerNorm), False for Post-LN.
        eps: epsilon of the LayerNorms (gain 1, bias 0).

    Returns:
        float tensor ``(N + 1,)``: the Frobenius norms of dL/dx_0 (the input), ..., dL/dx_N.

    Raises:
        ValueError: ``w.shape != x.shape`` (names w).

    Source: Xiong et al. (2020), "On Layer Normalization in the Transformer
    Architecture"; chapter 7.
    """
    ### BEGIN SOLUTION
    if tuple(w.shape) != tuple(x.shape):
        raise ValueError(f"w must have the shape of x {tuple(x.shape)}; got {tuple(w.shape)}")
    d_model = x.shape[-1]
    streams = [x.detach().clone().requires_grad_(True)]
    for sublayer in sublayers:
        h = streams[-1]
        if norm_first:
            streams.append(h + sublayer(F.layer_norm(h, (d_model,), eps=eps)))
        else:
            streams.append(F.layer_norm(h + sublayer(h), (d_model,), eps=eps))
    out = F.layer_norm(streams[-1], (d_model,), eps=eps) if norm_first else streams[-1]
    grads = torch.autograd.grad((w * out).sum(), streams)
    return torch.stack([g.norm() for g in grads])
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** A stack of 12 sublayers $\tanh(W_l x + b_l)$ of width 16 (PyTorch's default
initialisation), both placements, the same weights, `x` and `w`. Read each row from the output
(right) to the input (left), the way the gradient travels.
'''),
    ("tryit", r'''
torch.manual_seed(0)
linears = [nn.Linear(16, 16) for _ in range(12)]
sublayers = [lambda y, lin=lin: torch.tanh(lin(y)) for lin in linears]
x, w = torch.randn(4, 5, 16), torch.randn(4, 5, 16)
for norm_first, name in ((False, "Post-LN"), (True, "Pre-LN ")):
    norms = gradient_norms_by_depth(x, sublayers, w, norm_first)
    print(f"{name}: at the input {float(norms[0]):7.3f}, at the output {float(norms[-1]):7.3f}, "
          f"ratio {float(norms[0] / norms[-1]):.2f}; by depth: {[round(v, 1) for v in norms.tolist()]}")
'''),
]
