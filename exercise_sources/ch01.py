"""Source of exercises/01_motivation.ipynb and solutions/01_motivation.ipynb (see build_notebooks.py)."""

CHAPTER = "01"
NOTEBOOK = "01_motivation.ipynb"
TITLE = "why attention replaced recurrence"

CELLS = [
    ("code", r'''
import math
import sys

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
'''),
    ("md", r'''
## Exercise 1.1 — count the FLOPs of a layer

Chapter 1 counts the floating-point operations (FLOPs) of the **matrix products** of one layer,
with this convention: one multiply–add is **2 FLOPs**; biases, the softmax and the nonlinearities
(`tanh`, the gates' sigmoids) are not counted. That is what PyTorch's `FlopCounterMode` counts too.
For a batch of `batch` sequences of length `n` and width `d` the chapter found

* `"attention"` — the attention core, $QK^\top$ and the mixing of the values: $4\,B\,n^2 d$;
* `"multi_head_attention"` — the core plus the four $d \times d$ projections ($Q$, $K$, $V$ and
  the output): $8\,B\,n\,d^2 + 4\,B\,n^2 d$ (the number of heads does not change it);
* `"rnn"` — a simple RNN with hidden size `d`: two $d \times d$ products per step
  ($W_{ih} x_t$ and $W_{hh} h_{t-1}$), $4\,B\,n\,d^2$.

Extend the count to three layers the chapter does not count:

* `"gru"` — a GRU has **3** gates, each with its own $W_{ih}$ and $W_{hh}$ ($d \times d$ each);
* `"lstm"` — an LSTM has **4** gates (`nn.LSTM` stacks them into a $4d \times d$ matrix);
* `"conv"` — a 1-d convolution with `d` input and `d` output channels, kernel width
  `kernel_size`, padded so that it has `n` outputs: each output entry is a dot product of
  `kernel_size * d` inputs.

Write `layer_flops(kind, n, d, batch=1, kernel_size=3)` returning the FLOPs as a Python `int`
(`kernel_size` is used by `"conv"` only). Raise `ValueError` naming the argument for an unknown
`kind`, and when `n`, `d`, `batch` or `kernel_size` is smaller than 1.

Example: `layer_flops("rnn", 12, 16, batch=2)` is `24576` (the chapter's count).
'''),
    ("exercise", "1.1", r'''
def layer_flops(kind, n, d, batch=1, kernel_size=3):
    """FLOPs (2 per multiply-add) of the matrix products of one layer.

    Args:
        kind: "attention", "multi_head_attention", "rnn", "gru", "lstm" or "conv".
        n: sequence length (int >= 1).
        d: width d_model, the hidden size of the recurrent layers (int >= 1).
        batch: number of sequences (int >= 1).
        kernel_size: the convolution's kernel width (int >= 1; "conv" only).

    Returns:
        int: the FLOPs of the layer's matrix products for the whole batch.

    Raises:
        ValueError: unknown ``kind``, or ``n``, ``d``, ``batch`` or ``kernel_size`` < 1.

    Source: Vaswani et al. (2017), table 1; chapter 1 ("Cost per layer").
    """
    ### BEGIN SOLUTION
    for name, value in (("n", n), ("d", d), ("batch", batch), ("kernel_size", kernel_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1; got {value!r}")
    recurrent_gates = {"rnn": 1, "gru": 3, "lstm": 4}
    if kind == "attention":
        return 4 * batch * n * n * d
    if kind == "multi_head_attention":
        return 8 * batch * n * d * d + 4 * batch * n * n * d
    if kind in recurrent_gates:
        return recurrent_gates[kind] * 4 * batch * n * d * d
    if kind == "conv":
        return 2 * batch * n * kernel_size * d * d
    raise ValueError(f"kind must be one of attention, multi_head_attention, rnn, gru, lstm, conv; got {kind!r}")
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Count with PyTorch's `FlopCounterMode` and compare with your formulas. (The LSTM is
left out: on the CPU `nn.LSTM` runs one fused kernel that the counter does not see.)
'''),
    ("tryit", r'''
def count_flops(fn):
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()

B, n, d = 2, 7, 5
x = torch.randn(B, n, d)
layers = {"rnn": nn.RNN(d, d, batch_first=True), "gru": nn.GRU(d, d, batch_first=True)}
for kind, layer in layers.items():
    print(f"{kind:>5}: counted {count_flops(lambda: layer(x)):>6}, yours {layer_flops(kind, n, d, batch=B):>6}")
conv = nn.Conv1d(d, d, kernel_size=3, padding=1)          # input (batch, channels, length)
print(f" conv: counted {count_flops(lambda: conv(x.transpose(1, 2))):>6}, yours {layer_flops('conv', n, d, batch=B):>6}")
print("LSTM / RNN at any size:", layer_flops("lstm", 100, 64) / layer_flops("rnn", 100, 64))
'''),
    ("md", r'''
## Exercise 1.2 — predict the crossover

The chapter compares the two leading terms and finds that the attention core is cheaper than a
simple RNN exactly while $n < d$. The answer changes with what is compared. Write
`crossover_length(d, recurrent="rnn", projections=False)` returning the **smallest** sequence
length `n >= 1` at which self-attention costs **strictly more** FLOPs than the recurrent layer of
the same width `d`, counted as in exercise 1.1 (the batch size cancels):

* self-attention is the core alone (`projections=False`) or the whole multi-head layer with its
  four projections (`projections=True`);
* the recurrent layer is `"rnn"`, `"gru"` or `"lstm"`.

Derive the answer from the inequality (a closed form), or search `n = 1, 2, …` until it holds —
both are fine, but think about what the closed form says: for which comparisons is the answer 1,
i.e. self-attention is never the cheaper layer? Raise `ValueError` naming the argument when `d < 1`
or `recurrent` is not one of the three names. Write the function without calling `layer_flops`.

Example: `crossover_length(512)` is `513`: at `n = 512` both cost the same, at `513` attention
costs more.
'''),
    ("exercise", "1.2", r'''
def crossover_length(d, recurrent="rnn", projections=False):
    """Smallest n at which self-attention costs strictly more FLOPs than a recurrent layer.

    Args:
        d: width d_model = the recurrent hidden size (int >= 1).
        recurrent: "rnn" (1 gate), "gru" (3 gates) or "lstm" (4 gates).
        projections: False for the attention core (4 n^2 d per sequence), True for
            multi-head attention with its four projections (8 n d^2 + 4 n^2 d).

    Returns:
        int: the smallest n >= 1 with attention FLOPs > recurrent FLOPs (4 * gates * n * d^2).

    Raises:
        ValueError: ``d < 1`` or an unknown ``recurrent``.

    Source: Vaswani et al. (2017), section 4; chapter 1.
    """
    ### BEGIN SOLUTION
    gates = {"rnn": 1, "gru": 3, "lstm": 4}
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be an int >= 1; got {d!r}")
    if recurrent not in gates:
        raise ValueError(f"recurrent must be 'rnn', 'gru' or 'lstm'; got {recurrent!r}")
    # per sequence: 4 n^2 d + (8 n d^2 if projections) > 4 g n d^2  <=>  n > (g - 2 [if projections]) * d
    threshold = (gates[recurrent] - (2 if projections else 0)) * d
    return max(threshold + 1, 1)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** The crossovers for the paper's width `d = 512`, and a check by counting.
'''),
    ("tryit", r'''
for recurrent in ("rnn", "gru", "lstm"):
    core, full = crossover_length(512, recurrent), crossover_length(512, recurrent, projections=True)
    print(f"d = 512, vs {recurrent:>4}: core costs more from n = {core:>5}, whole layer from n = {full:>5}")

d, gates = 16, 4                                          # check one answer by counting, n = 1, 2, ...
n = next(n for n in range(1, 10_000) if 4 * n * n * d > 4 * gates * n * d * d)
print("by counting, core vs lstm at d = 16:", n, " yours:", crossover_length(16, "lstm"))
'''),
    ("md", r'''
## Exercise 1.3 — the other two columns of table 1

Table 1 of the paper also counts the **sequential operations** of one layer (steps that must run
one after another) and the **maximum path length** (how many layers a signal needs between two
positions). The paper gives orders of growth; here you compute the exact numbers for a sequence of
`n >= 2` positions, with these conventions:

* the path length is the smallest number of layers (for `"recurrent"`: of recurrence steps) through
  which input position `0` reaches output position `n - 1`;
* `"self_attention"`: every position reads every position;
* `"recurrent"`: step `t` reads position `t` and the state of step `t - 1` (chapter 1: from
  position `j` to position `n` takes `n - j` steps);
* `"convolutional"`: a stack of causal convolutions with kernel width `k`: output position `t`
  reads input positions `t - k + 1, …, t`;
* `"dilated_convolutional"`: the same kernel with dilations `1, k, k², …` in layers 1, 2, 3, …:
  layer `l` reads positions `t - m k^(l-1)` for `m = 0, …, k - 1` (as in ByteNet and WaveNet);
  after `L` layers the reach is `k^L` positions — the paper's $O(\log_k n)$;
* `"restricted_self_attention"`: each position reads the `r` positions of a window centred on it,
  `|t - s| <= (r - 1) / 2` (`r` odd).

Only the recurrence needs more than one sequential operation: `n` steps, one per position.

Write `table1_counts(kind, n, k=None, r=None)` returning the pair
`(sequential_operations, maximum_path_length)` of Python ints. Raise `ValueError` naming the
argument when `n < 2`, `kind` is unknown, a convolutional kind has no int `k >= 2`, or
`"restricted_self_attention"` has no odd int `r >= 3`.

Examples: `table1_counts("recurrent", 10)` is `(10, 9)`; `table1_counts("convolutional", 10, k=3)`
is `(1, 5)` (each layer reaches 2 positions further: 2, 4, 6, 8, then 10, past position 9); `table1_counts("dilated_convolutional", 9, k=2)`
is `(1, 4)` (a reach of 2, 4, 8, then 16 positions, at least the 9 needed). Compute the powers of `k` with integers, not with `math.log`, which
rounds (`math.log(125, 5)` is `3.0000000000000004`, and `math.ceil` of it is 4, not 3).
'''),
    ("exercise", "1.3", r'''
def table1_counts(kind, n, k=None, r=None):
    """Sequential operations and maximum path length of one layer type (the paper's table 1).

    Args:
        kind: "self_attention", "recurrent", "convolutional", "dilated_convolutional"
            or "restricted_self_attention".
        n: number of positions (int >= 2).
        k: kernel width of the convolutional kinds (int >= 2).
        r: window size of the restricted self-attention (odd int >= 3).

    Returns:
        (sequential_operations, maximum_path_length): two ints.

    Raises:
        ValueError: ``n < 2``, unknown ``kind``, missing or bad ``k`` / ``r``.

    Source: Vaswani et al. (2017), table 1 and section 4; chapter 1.
    """
    ### BEGIN SOLUTION
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an int >= 2; got {n!r}")
    if kind == "self_attention":
        return 1, 1
    if kind == "recurrent":
        return n, n - 1
    if kind in ("convolutional", "dilated_convolutional"):
        if not isinstance(k, int) or k < 2:
            raise ValueError(f"k must be an int >= 2 for {kind}; got {k!r}")
        if kind == "convolutional":
            return 1, -(-(n - 1) // (k - 1))          # ceil((n - 1) / (k - 1))
        layers, reach = 0, 1
        while reach < n:                              # reach after L layers: k**L positions
            layers, reach = layers + 1, reach * k
        return 1, layers
    if kind == "restricted_self_attention":
        if not isinstance(r, int) or r < 3 or r % 2 == 0:
            raise ValueError(f"r must be an odd int >= 3; got {r!r}")
        return 1, -(-(n - 1) // ((r - 1) // 2))
    raise ValueError(f"unknown kind {kind!r}")
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** Table 1 for a sentence of `n = 1000` positions, `k = 3`, `r = 33`. Which layers
connect the two ends of the sentence in fewer than 10 layers?
'''),
    ("tryit", r'''
n = 1000
print(f"{'layer type':>27} {'sequential':>11} {'max path':>9}")
for kind, k, r in [("self_attention", None, None), ("recurrent", None, None), ("convolutional", 3, None),
                   ("dilated_convolutional", 3, None), ("restricted_self_attention", None, 33)]:
    seq, path = table1_counts(kind, n, k=k, r=r)
    print(f"{kind:>27} {seq:>11} {path:>9}")
'''),
]
