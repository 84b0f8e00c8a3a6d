"""Source of exercises/10_inference.ipynb and its solution (see build_notebooks.py)."""

CHAPTER = "10"
NOTEBOOK = "10_inference.ipynb"
TITLE = "inference: batched greedy decoding, beam search, sampling filters, the KV cache, n-gram blocking"

CELLS = [
    ("code", r'''
import math
import sys

import torch

from course_lib.attention import scaled_dot_product_attention as library_attention
from course_lib.masks import causal_mask
from course_lib.model import Transformer, TransformerConfig
'''),
    ("md", r'''
The chapter's decoders (`generate`, `beam_generate`) talk to a `Transformer`. The functions of
these exercises talk to the model through one small function instead, so that they work with any
model and can be checked on hand-made ones:

* **one sequence** (10.2): `step_fn(prefix)` takes a **1-D** `torch.long` tensor, the tokens
  decoded so far — it always starts with `bos_id` — and returns the **1-D** float tensor of
  `vocab_size` logits for the next token;
* **a batch** (10.1): `step_fn(prefixes)` takes a **2-D** `(batch_size, t)` long tensor, one prefix
  per row, and returns the `(batch_size, vocab_size)` logits of the next token of every row.

The cell below makes such functions: a hand-made next-token table over four tokens
(`<bos>`=0, `<eos>`=1, `A`=2, `B`=3; the probabilities depend on the tokens after `<bos>`), and
the next-token logits of a small, *untrained* course Transformer for fixed source sentences.
'''),
    ("code", r'''
HAND_TABLE = {                      # tokens after <bos> -> probabilities of (<bos>, <eos>, A, B)
    (): (0.01, 0.09, 0.50, 0.40),
    (2,): (0.01, 0.39, 0.31, 0.29),
    (3,): (0.01, 0.89, 0.06, 0.04),
}
HAND_DEFAULT = (0.01, 0.59, 0.25, 0.15)


def hand_step_fn(prefix):
    """Logits (log-probabilities) of the hand-made table; prefix: 1-D long tensor starting with <bos>=0."""
    probs = HAND_TABLE.get(tuple(prefix.tolist()[1:]), HAND_DEFAULT)
    return torch.tensor(probs).log()


torch.manual_seed(0)
config = TransformerConfig(src_vocab_size=12, tgt_vocab_size=12, d_model=32, n_heads=4, n_encoder_layers=1,
                           n_decoder_layers=1, d_ff=64, dropout=0.0, pad_id=0)
model = Transformer(config).eval()
with torch.no_grad():
    memory = model.encode(torch.tensor([[3, 4, 5, 6, 7]]))
    batch_memory = model.encode(torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, 11, 3], [5, 5, 4, 4, 6]]))


def model_step_fn(prefix):
    """Next-token logits (vocab 12) of the untrained demo model for the fixed source sentence (one sequence)."""
    with torch.no_grad():
        return model.decode(prefix[None], memory)[0, -1]


def batch_model_step_fn(prefixes):
    """(3, t) prefixes -> (3, 12) next-token logits of the demo model for three fixed source sentences;
    <pad> = 0 and <bos> = 1 are never predicted."""
    with torch.no_grad():
        logits = model.decode(prefixes, batch_memory)[:, -1].clone()
    logits[:, :2] = float("-inf")
    return logits
'''),
    ("md", r'''
## Exercise 10.1 — greedy decoding of a batch, each sentence stopping on its own

The chapter's `generate` decodes a whole batch at once. Sentences finish at different steps:
one may produce `<eos>` at step 3 and another at step 9. Write that bookkeeping for the batched
interface:

`greedy_decode(step_fn, batch_size, bos_id, eos_id, pad_id, max_len)`:

* start with the prefixes `(batch_size, 1)`, all `bos_id`;
* each step: `logits = step_fn(prefixes)` — always **all** `batch_size` rows, finished ones too
  — and, per row, the most likely next token $\arg\max_v \text{logits}[r, v]$. A row that has
  **already** produced `eos_id` gets `pad_id` instead. Append that column;
* stop as soon as **every** row has produced `eos_id`, or after `max_len` steps;
* return the `(batch_size, 1 + steps)` `torch.long` tensor of the prefixes (first column
  `bos_id`). So there is no column of padding only at the end, and a row that never produced
  `eos_id` has `max_len` generated tokens.

Raise `ValueError` when `batch_size < 1` or `max_len < 1`.

Example (the hand-made batch of the checker, `pad_id = 5`): row 0 produces `A <eos>`, row 1
`B B <eos>`; the result is `[[0, 2, 1, 5], [0, 3, 3, 1]]` — three steps, row 0 padded after its
`<eos>`.

**Hints.** `finished = torch.zeros(batch_size, dtype=torch.bool)`; `torch.where(finished, pad_id, next_ids)`;
update `finished |= next_ids == eos_id` *after* choosing the column; `finished.all()`.
'''),
    ("exercise", "10.1", r'''
def greedy_decode(step_fn, batch_size, bos_id, eos_id, pad_id, max_len):
    """Greedy decoding of a batch: every row stops at its own <eos>; finished rows are padded.

    Args:
        step_fn: callable, long ``(batch_size, t)`` prefixes (first column ``bos_id``) ->
            float ``(batch_size, vocab_size)`` next-token logits. Always give it all rows.
        batch_size: number of sentences (int >= 1).
        bos_id, eos_id, pad_id: start, end and padding ids.
        max_len: the largest number of tokens to generate after ``bos_id`` (int >= 1).

    Returns:
        long tensor ``(batch_size, 1 + steps)``: ``bos_id``, then the greedy tokens of each
        row, ``pad_id`` after its ``eos_id``; ``steps <= max_len``, and decoding stops as soon
        as every row has produced ``eos_id``.

    Raises:
        ValueError: ``batch_size < 1`` or ``max_len < 1``.

    Source: chapter 10 (``generate``, ``still_running``).
    """
    ### BEGIN SOLUTION
    if batch_size < 1 or max_len < 1:
        raise ValueError(f"batch_size and max_len must be >= 1; got batch_size={batch_size}, max_len={max_len}")
    prefixes = torch.full((batch_size, 1), bos_id, dtype=torch.long)
    finished = torch.zeros(batch_size, dtype=torch.bool)
    for _ in range(max_len):
        logits = step_fn(prefixes)
        next_ids = torch.argmax(logits, dim=-1).long()
        next_ids = torch.where(finished, torch.full_like(next_ids, pad_id), next_ids)
        prefixes = torch.cat([prefixes, next_ids[:, None]], dim=1)
        finished = finished | (next_ids == eos_id)
        if bool(finished.all()):
            break
    return prefixes
    ### END SOLUTION
'''),
    ("tryit", r'''
def hand_batch_step_fn(prefixes):
    """Row 0: the hand table; row 1: always B unless the prefix is already B B (then <eos>). Vocab 6, pad 5."""
    rows = prefixes.tolist()
    logits = torch.full((len(rows), 6), -30.0)
    logits[0, :4] = hand_step_fn(torch.tensor(rows[0]))
    logits[1, 3 if rows[1][1:] in ([], [3]) else 1] = 0.0
    return logits


print("hand batch:", greedy_decode(hand_batch_step_fn, 2, bos_id=0, eos_id=1, pad_id=5, max_len=5).tolist())
out = greedy_decode(batch_model_step_fn, 3, bos_id=1, eos_id=2, pad_id=0, max_len=8)
print("untrained model, 3 sentences:\n", out)
print("rows that produced <eos> (=2):", (out == 2).any(dim=1).tolist(), "(an untrained model rarely does: max_len stops it)")
'''),
    ("md", r'''
## Exercise 10.2 — beam search with a length penalty and a minimum length

Greedy decoding can miss the best sentence: a likely first token may lead to unlikely
continuations. Beam search (paper, section 6.1: beam size 4, length penalty $\alpha = 0.6$) keeps
the `beam_size` best partial sentences. A hypothesis's **score** is the sum of the
log-probabilities of its generated tokens, $\sum_t \log p(y_t \mid y_{<t})$ with
$\log p = $ `log_softmax(step_fn(prefix))`. The chapter's `beam_generate` does this for a batch of
a `Transformer`; here you write it for one sequence of the `step_fn` interface, with one more
constraint found in every real decoder: a **minimum length**.

1. Start with one live hypothesis `[bos_id]`, score 0, and no finished ones.
2. Repeat at most `max_len` times: extend **every live** hypothesis by **every** token of the
   vocabulary — except that `<eos>` is forbidden (its log-probability becomes $-\infty$, the others
   are **not** renormalised) while the hypothesis has fewer than `min_length - 1` generated tokens,
   so that a finished hypothesis has at least `min_length` tokens, `<eos>` included. Among all
   candidates keep the `beam_size` with the highest scores (a $-\infty$ one can be dropped). Kept
   candidates that end with `eos_id` are **finished**: they are set aside and never extended
   again. The others are the new live hypotheses. Stop early when no hypothesis is live.
3. Among the finished hypotheses and those still live after `max_len` steps, return the one with
   the best **normalised score** $\text{score} / \mathrm{lp}(n)$ with the chapter's GNMT penalty
   $\mathrm{lp}(n) = ((5 + n)/6)^{\alpha}$, where $n$ is its number of generated tokens (after
   `bos_id`, `eos_id` included) and $\alpha$ = `alpha` ($\alpha = 0$: no normalisation).

Write `beam_search(step_fn, bos_id, eos_id, max_len, beam_size, alpha=0.0, min_length=0)` returning
`(tokens, score)`: the best hypothesis as a 1-D `torch.long` tensor starting with `bos_id`, and
its normalised score as a float. With `beam_size=1` and `min_length=0` it returns what greedy
decoding returns. Raise `ValueError` when `beam_size < 1`, `max_len < 1` or `min_length > max_len`.

Worked example (the hand table, `beam_size=2`): with `min_length=0` the beam finds `B <eos>`
($0.4 \times 0.89$) where greedy decoding finds `A <eos>`; with `min_length=3`, `<eos>` is
forbidden at steps 1 and 2, the beam keeps `A A` and `A B`, and the best is `A A <eos>`
($0.5 \times 0.31 \times 0.59$).

**Hints.** Represent a hypothesis as `(list_of_ids, score)`. Sorting a Python list of
candidates with `key=lambda c: c[1], reverse=True` is plenty fast for these vocabularies. A
beam that keeps extending finished hypotheses (`<eos>` followed by more tokens) is the classic
bug: the checker looks for it.
'''),
    ("exercise", "10.2", r'''
def beam_search(step_fn, bos_id, eos_id, max_len, beam_size, alpha=0.0, min_length=0):
    """Beam search with the GNMT length penalty and a minimum length (the algorithm above).

    Args:
        step_fn: callable, 1-D long tensor (prefix starting with ``bos_id``) ->
            1-D float tensor ``(vocab_size,)`` of next-token logits.
        bos_id, eos_id: ids that start and end a sequence.
        max_len: the largest number of generated tokens (int >= 1).
        beam_size: number of hypotheses kept per step (int >= 1).
        alpha: length-penalty exponent >= 0; hypotheses are ranked at the end by
            ``score / ((5 + n) / 6) ** alpha``, n = generated tokens (eos included).
        min_length: a finished hypothesis has at least this many generated tokens
            (``eos_id`` included): before that, ``eos_id`` gets log-probability -inf.

    Returns:
        ``(tokens, score)``: 1-D torch.long tensor ``[bos_id, y_1, ..., y_n]`` and
        its normalised score (float; sum of natural-log probabilities / lp(n)).

    Raises:
        ValueError: ``beam_size < 1``, ``max_len < 1`` or ``min_length > max_len``.

    Source: Vaswani et al. (2017), section 6.1; Wu et al. (2016), section 7
    (the length penalty); chapter 10.
    """
    ### BEGIN SOLUTION
    if beam_size < 1 or max_len < 1:
        raise ValueError(f"beam_size and max_len must be >= 1; got beam_size={beam_size}, max_len={max_len}")
    if min_length > max_len:
        raise ValueError(f"min_length must be <= max_len; got min_length={min_length}, max_len={max_len}")
    live = [([bos_id], 0.0)]
    finished = []
    for _ in range(max_len):
        candidates = []
        for tokens, score in live:
            log_probs = torch.log_softmax(step_fn(torch.tensor(tokens, dtype=torch.long)).double(), dim=-1)
            if len(tokens) < min_length:           # len(tokens) - 1 generated so far: eos would be number len(tokens)
                log_probs[eos_id] = float("-inf")
            for token, lp in enumerate(log_probs.tolist()):
                if lp != float("-inf"):
                    candidates.append((tokens + [token], score + lp))
        candidates.sort(key=lambda c: c[1], reverse=True)
        live = []
        for tokens, score in candidates[:beam_size]:
            (finished if tokens[-1] == eos_id else live).append((tokens, score))
        if not live:
            break

    def normalised(hypothesis):
        tokens, score = hypothesis
        return score / ((5 + len(tokens) - 1) / 6) ** alpha

    best = max(finished + live, key=normalised)
    return torch.tensor(best[0], dtype=torch.long), normalised(best)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** On the hand-made table greedy decoding picks `A` (probability 0.5) and ends with
probability $0.5 \times 0.39$; a beam of 2 also keeps `B` and finds `B <eos>` with probability
$0.4 \times 0.89$. Scores are natural-log probabilities: `exp(score)` gives them back (with
$\alpha = 0$). Look at what `min_length` does to the winner.
'''),
    ("tryit", r'''
for beam_size in (1, 2, 4):
    for min_length in (0, 3):
        tokens, score = beam_search(hand_step_fn, 0, 1, max_len=5, beam_size=beam_size, min_length=min_length)
        print(f"beam {beam_size}, min_length {min_length}: {tokens.tolist()}  probability {math.exp(score):.4f}")
for alpha in (0.0, 0.6, 2.0):
    tokens, score = beam_search(model_step_fn, 1, 2, max_len=8, beam_size=4, alpha=alpha)
    print(f"untrained model, beam 4, alpha {alpha}: {tokens.tolist()}  normalised score {score:.3f}")
'''),
    ("md", r'''
## Exercise 10.3 — temperature, top-k and top-p, with one top-p per row

Sampling from the softmax produces varied text but sometimes picks very unlikely tokens. The
chapter's `choose_next_token` reshapes the distribution in this order:

1. **temperature** $T > 0$: divide the logits by $T$ ($T < 1$ sharpens, $T > 1$ flattens);
2. **top-k** (Fan et al., 2018): keep the `top_k` largest of each row (`top_k = 0`: off;
   `top_k >= vocab_size`: keep all);
3. **top-p** (Holtzman et al., 2020) on the **renormalised** probabilities of what top-k kept
   (the softmax of the filtered, *scaled* logits): sort descending and keep a token while the
   probability of the tokens **before** it is still `< top_p` (the most likely token is always
   kept; `top_p = 1.0`: off).

The order matters: the temperature changes **which** tokens top-p keeps. A server that samples a
batch of requests also gives each row its own `top_p`. Write
`top_k_top_p_filtering(logits, temperature=1.0, top_k=0, top_p=1.0)` for `logits` of shape
`(..., vocab_size)`, where `top_p` is a float **or** a tensor of shape `logits.shape[:-1]` (one
value per row). Return the **scaled** logits (`logits / temperature`) with the removed entries set
to `float("-inf")` — ready for `torch.softmax` and `torch.multinomial`. Raise `ValueError` when
`temperature <= 0`, `top_k < 0`, or a value of `top_p` is not in $(0, 1]$.

Worked example: probabilities `[0.10, 0.50, 0.05, 0.20, 0.15]`, `top_p = 0.8`.

* $T = 1$: in order 0.50, 0.20, 0.15, … the mass before 0.15 is 0.70 < 0.8 (kept), before 0.10
  it is 0.85 (removed): kept `[F, T, F, T, T]`.
* $T = 2$: $p_i \propto p_i^{1/2}$ = 0.152, 0.340, 0.107, 0.215, 0.186; the mass before 0.152 is
  0.741 < 0.8: kept `[T, T, F, T, T]` — a flatter distribution keeps more tokens.
* $T = 0.5$: $p_i \propto p_i^2$ = 0.031, 0.769, 0.008, 0.123, 0.069: kept `[F, T, F, T, F]`.

**Hints.** `torch.topk(scaled, top_k).values[..., -1:]` is the k-th largest value of each row;
`torch.sort(..., descending=True)`, `torch.cumsum`; `torch.as_tensor(top_p)` and
`top_p[..., None]` broadcast one value per row against the sorted probabilities; put a
sorted-order mask back in place with `mask.scatter(-1, order, sorted_mask)`.
'''),
    ("exercise", "10.3", r'''
def top_k_top_p_filtering(logits, temperature=1.0, top_k=0, top_p=1.0):
    """Scale by the temperature, then set the logits outside the top-k / top-p set to -inf.

    Args:
        logits: float tensor ``(..., vocab_size)``.
        temperature: > 0; the logits are divided by it first.
        top_k: keep the ``top_k`` largest per row; 0 = no top-k filter.
        top_p: a float, or a tensor of shape ``logits.shape[:-1]`` (one value per row):
            keep the smallest most-likely set with total probability >= top_p (computed
            after top-k, on the renormalised scaled probabilities); 1.0 = off.

    Returns:
        float tensor of the same shape: ``logits / temperature`` where kept, ``-inf``
        where removed. At least one entry per row is kept.

    Raises:
        ValueError: ``temperature <= 0``, ``top_k < 0`` or a ``top_p`` value not in (0, 1].

    Source: Fan et al. (2018) (top-k); Holtzman et al. (2020) (top-p); chapter 10.
    """
    ### BEGIN SOLUTION
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0; got {top_k}")
    top_p = torch.as_tensor(top_p, dtype=torch.float64)
    if not bool(((top_p > 0) & (top_p <= 1)).all()):
        raise ValueError(f"top_p must be in (0, 1]; got {top_p.tolist()}")
    scaled = logits / temperature
    if 0 < top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if bool((top_p < 1).any()):
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits.double(), dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs                     # mass of the better tokens
        remove_sorted = before >= top_p.expand(scaled.shape[:-1])[..., None]
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        scaled = scaled.masked_fill(remove, float("-inf"))
    return scaled
    ### END SOLUTION
'''),
    ("tryit", r'''
probs = torch.tensor([0.10, 0.50, 0.05, 0.20, 0.15])
for temperature in (0.5, 1.0, 2.0):
    kept = torch.isfinite(top_k_top_p_filtering(probs.log(), temperature, top_p=0.8))
    print(f"T={temperature}, top_p=0.8: kept {kept.int().tolist()}")
rows = probs.log().repeat(3, 1)
per_row = top_k_top_p_filtering(rows, 1.0, top_p=torch.tensor([0.4, 0.8, 1.0]))
print("one top_p per row (0.4, 0.8, 1.0):", torch.isfinite(per_row).int().tolist())
gen = torch.Generator().manual_seed(0)
filtered = top_k_top_p_filtering(probs.log(), 1.5, top_k=4, top_p=0.72)
samples = torch.multinomial(torch.softmax(filtered, dim=-1), 1000, replacement=True, generator=gen)
print("T=1.5, top_k=4, top_p=0.72, counts of 1000 samples per token:", torch.bincount(samples, minlength=5).tolist())
'''),
    ("md", r'''
## Exercise 10.4 — one step with a KV cache

When decoding token by token, the keys and values of the earlier positions do not change: a
decoder can keep them (the *KV cache*) and compute, at each step, only the new position's query,
key and value. Write `kv_cache_step(q_new, k_new, v_new, k_cache=None, v_cache=None)`:

* `q_new`, `k_new`, `v_new`: `(batch, n_heads, new_len, d_k)` — usually `new_len = 1`; a longer
  first chunk is the prompt (*prefill*);
* `k_cache`, `v_cache`: `(batch, n_heads, past_len, d_k)`, or `None` for an empty cache;
* append the new keys and values after the cached ones (along dim -2), and attend: new query $i$
  sits at absolute position `past_len + i` and may see keys `0 … past_len + i` (causal);
* return `(out, k_cache, v_cache)`: `out` of shape `(batch, n_heads, new_len, d_k)` and the grown
  caches of length `past_len + new_len`.

Feeding a sequence chunk by chunk must give exactly the output of causal attention over the whole
sequence at once. Raise `ValueError` when only one of the two caches is `None`.

**Hints.** `torch.cat([k_cache, k_new], dim=-2)`. The mask is
`torch.arange(total)[None, :] <= (past_len + torch.arange(new_len))[:, None]`, of shape
`(new_len, total)` (True = may attend); the course's `scaled_dot_product_attention` is imported
above as `library_attention`.
'''),
    ("exercise", "10.4", r'''
def kv_cache_step(q_new, k_new, v_new, k_cache=None, v_cache=None):
    """Append new keys/values to the cache and attend causally from the new queries.

    Args:
        q_new, k_new, v_new: float ``(batch, n_heads, new_len, d_k)``.
        k_cache, v_cache: float ``(batch, n_heads, past_len, d_k)`` or both ``None``.

    Returns:
        ``(out, k_cache, v_cache)``: ``out`` ``(batch, n_heads, new_len, d_k)``;
        caches ``(batch, n_heads, past_len + new_len, d_k)``. New query ``i``
        attends to keys ``0 .. past_len + i`` (mask: True = may attend).

    Raises:
        ValueError: exactly one of ``k_cache`` / ``v_cache`` is ``None``.

    Source: chapter 10 (incremental decoding; not in the paper).
    """
    ### BEGIN SOLUTION
    if (k_cache is None) != (v_cache is None):
        raise ValueError("k_cache and v_cache must both be None or both be tensors")
    if k_cache is None:
        k, v = k_new, v_new
    else:
        k, v = torch.cat([k_cache, k_new], dim=-2), torch.cat([v_cache, v_new], dim=-2)
    new_len, total = q_new.shape[-2], k.shape[-2]
    past_len = total - new_len
    mask = torch.arange(total)[None, :] <= (past_len + torch.arange(new_len))[:, None]
    out, _ = library_attention(q_new, k, v, mask)
    return out, k, v
    ### END SOLUTION
'''),
    ("tryit", r'''
gen = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 2, 6, 4, generator=gen) for _ in range(3))
full, _ = library_attention(q, k, v, causal_mask(6))              # everything at once
k_cache = v_cache = None
outs = []
for start, stop in [(0, 3), (3, 4), (4, 5), (5, 6)]:               # a prefill of 3, then one token at a time
    out, k_cache, v_cache = kv_cache_step(q[:, :, start:stop], k[:, :, start:stop], v[:, :, start:stop], k_cache, v_cache)
    outs.append(out)
print("cache length:", k_cache.shape[-2], " equals full recomputation:", torch.allclose(torch.cat(outs, dim=2), full, atol=1e-6))
'''),
    ("md", r'''
## Exercise 10.5 — n-gram blocking on a decoder that loops

A decoder can fall into a loop: the chapter's translator wrote 能能能能… on inputs unlike its
training data. **n-gram blocking** (Paulus et al., 2018) forbids, at each step, every next token
that would **repeat an n-gram** already in the output: if the last $n-1$ generated tokens,
followed by token $x$, already occurred as $n$ consecutive tokens, $x$ is banned. With $n = 2$
a token may occur again, but not after the same token as before.

Write `banned_tokens(prefixes, n, vocab_size)`: `prefixes` is a Python **list** of 1-D long
tensors of **different lengths** — the tokens generated so far by each sentence of a batch
(without `<bos>`; a prefix may be empty). Return a bool tensor `(len(prefixes), vocab_size)`,
True = banned. $n = 1$ bans every token that occurred; a prefix with fewer than $n$ tokens bans
nothing. Raise `ValueError` when `n < 1` or a prefix holds an id outside `[0, vocab_size)`.

Example, $n = 2$, vocabulary 6: `[5, 3, 5]` bans `3` (the bigram `5 3` occurred);
`[2, 2, 2]` bans `2`; `[1, 2, 3]` bans nothing (3 was never followed by anything); `[4]` and
`[]` ban nothing. With $n = 3$, `[1, 2, 1, 2]` bans `1` (`1 2 1` occurred).

The chapter's `block_repeated_ngrams` works on a rectangular tensor with `unfold`; here the
prefixes are ragged, and a loop over the n-grams of each row (a Python `set` of tuples) is the
clearest answer.
'''),
    ("exercise", "10.5", r'''
def banned_tokens(prefixes, n, vocab_size):
    """The next tokens that would repeat an n-gram of each prefix.

    Args:
        prefixes: list of 1-D long tensors (lengths may differ, may be empty): the tokens
            generated so far by each sentence (no <bos>).
        n: n-gram size (int >= 1).
        vocab_size: number of token ids.

    Returns:
        bool tensor ``(len(prefixes), vocab_size)``: ``[r, x]`` is True when the last
        ``n - 1`` tokens of ``prefixes[r]`` followed by ``x`` already occurred in it as
        ``n`` consecutive tokens.

    Raises:
        ValueError: ``n < 1``, or an id outside ``[0, vocab_size)``.

    Source: Paulus et al. (2018), "A Deep Reinforced Model for Abstractive
    Summarization", section 2.5; chapter 10.
    """
    ### BEGIN SOLUTION
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    banned = torch.zeros(len(prefixes), vocab_size, dtype=torch.bool)
    for row, prefix in enumerate(prefixes):
        tokens = [int(t) for t in prefix]
        if any(t < 0 or t >= vocab_size for t in tokens):
            raise ValueError(f"prefixes[{row}] holds an id outside [0, {vocab_size}): {tokens}")
        context = tuple(tokens[len(tokens) - (n - 1):]) if n > 1 else ()
        for start in range(len(tokens) - n + 1):
            gram = tuple(tokens[start:start + n])
            if gram[:-1] == context:
                banned[row, gram[-1]] = True
    return banned
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** A toy model whose next token depends only on the last one: after `<bos>` it prefers
2, after 2 it prefers 3, after 3 it prefers 2, so greedy decoding loops `2 3 2 3 …`. Blocking
repeated bigrams lets it say `2 3 2` once and then sends it to its second choice (4, then 5,
then `<eos>`). Trigram blocking allows `2 3 2 3` before it cuts; unigram blocking (no token
twice) is the bluntest.
'''),
    ("tryit", r'''
LOOP_LOGITS = torch.tensor([
    [-1e4, 0.0, 3.0, 1.0, 0.5, 0.2],   # after <bos>: 2
    [-1e4, 0.0, 0.0, 0.0, 0.0, 0.0],   # after <eos> (never used)
    [-1e4, 1.0, 0.0, 4.0, 2.0, 0.5],   # after 2: 3, then 4, <eos>, 5
    [-1e4, 1.0, 4.0, 0.0, 0.3, 2.5],   # after 3: 2, then 5, <eos>, 4
    [-1e4, 2.5, 1.0, 0.0, 0.0, 3.0],   # after 4: 5, then <eos>
    [-1e4, 3.0, 2.0, 1.0, 0.0, 0.0],   # after 5: <eos>
])


def greedy_with_blocking(n, max_len=10):
    generated, last = [], 0
    for _ in range(max_len):
        logits = LOOP_LOGITS[last].clone()
        if n:
            logits[banned_tokens([torch.tensor(generated, dtype=torch.long)], n, 6)[0]] = float("-inf")
        last = int(logits.argmax())
        generated.append(last)
        if last == 1:
            break
    return generated


for n in (0, 1, 2, 3):
    print(f"n = {n}:" if n else "no blocking:", greedy_with_blocking(n))
print(banned_tokens([torch.tensor([5, 3, 5]), torch.tensor([2, 2, 2]), torch.tensor([], dtype=torch.long)], 2, 6).int())
'''),
]
