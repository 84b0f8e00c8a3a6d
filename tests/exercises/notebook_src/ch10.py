"""Source of exercises/10_inference.ipynb and its solution (see build_notebooks.py)."""

CHAPTER = "10"
NOTEBOOK = "10_inference.ipynb"
TITLE = "inference: greedy decoding, beam search, sampling filters, the KV cache"

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
All the decoding functions of this chapter talk to the model through one small interface, so
that they work with any model (and can be checked on hand-made ones):

* `step_fn(prefix)` takes a **1-D** `torch.long` tensor, the tokens decoded so far — it always
  starts with `bos_id` — and returns the **1-D** float tensor of `vocab_size` logits for the next
  token.

The cell below makes two such functions: a hand-made next-token table over four tokens
(`<bos>`=0, `<eos>`=1, `A`=2, `B`=3; the probabilities depend on the tokens after `<bos>`), and
the next-token logits of a small, *untrained* course Transformer for a fixed source sentence.
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


def model_step_fn(prefix):
    """Next-token logits (vocab 12) of the untrained demo model for the fixed source sentence."""
    with torch.no_grad():
        return model.decode(prefix[None], memory)[0, -1]
'''),
    ("md", r'''
## Exercise 10.1 — greedy decoding

Start from `[bos_id]`; at every step take the most likely next token,
$y_t = \arg\max_v \text{logits}_t[v]$, append it, and stop right after `eos_id` — or after
`max_len` new tokens, whichever comes first.

Write `greedy_decode(step_fn, bos_id, eos_id, max_len)` returning a 1-D `torch.long` tensor:
`bos_id`, then the generated tokens (ending with `eos_id` if it was produced). So the result
has at most `max_len + 1` entries.

**Hints.** Keep a Python list of ids and call `step_fn(torch.tensor(tokens))` each step;
`int(torch.argmax(logits))`. (On ties `torch.argmax` returns the first, i.e. lowest, id.)
'''),
    ("exercise", "10.1", r'''
def greedy_decode(step_fn, bos_id, eos_id, max_len):
    """Greedy decoding: always append the most likely next token.

    Args:
        step_fn: callable, 1-D long tensor (prefix starting with ``bos_id``) ->
            1-D float tensor ``(vocab_size,)`` of next-token logits.
        bos_id: id that starts every sequence.
        eos_id: id that ends a sequence.
        max_len: the largest number of tokens to generate after ``bos_id`` (int >= 1).

    Returns:
        1-D torch.long tensor ``[bos_id, y_1, ..., y_n]`` with ``n <= max_len``;
        ``y_n == eos_id`` unless ``max_len`` tokens were generated first.

    Source: chapter 10 (the paper uses beam search, section 6.1).
    """
    ### BEGIN SOLUTION
    tokens = [bos_id]
    for _ in range(max_len):
        logits = step_fn(torch.tensor(tokens, dtype=torch.long))
        next_id = int(torch.argmax(logits))
        tokens.append(next_id)
        if next_id == eos_id:
            break
    return torch.tensor(tokens, dtype=torch.long)
    ### END SOLUTION
'''),
    ("tryit", r'''
print("hand table, greedy:", greedy_decode(hand_step_fn, 0, 1, max_len=5).tolist())
print("untrained model, greedy:", greedy_decode(model_step_fn, 1, 2, max_len=8).tolist())
'''),
    ("md", r'''
## Exercise 10.2 — beam search

Greedy decoding can miss the best sentence: a likely first token may lead to unlikely
continuations. Beam search (paper, section 6.1: beam size 4, length penalty $\alpha = 0.6$) keeps
the `beam_size` best partial sentences. A hypothesis's **score** is the sum of the
log-probabilities of its generated tokens, $\sum_t \log p(y_t \mid y_{<t})$ with
$\log p = $ `log_softmax(step_fn(prefix))`. The algorithm of this course:

1. Start with one live hypothesis `[bos_id]`, score 0, and no finished ones.
2. Repeat at most `max_len` times: extend **every** live hypothesis by **every** token of the
   vocabulary; among all these candidates keep the `beam_size` with the highest scores. Kept
   candidates that end with `eos_id` are *finished*; the others are the new live hypotheses. Stop
   early when no hypothesis is live.
3. Among the finished hypotheses and those still live after `max_len` steps, return the one with
   the best **normalised score** $\text{score} / n^{\alpha}$, where $n$ is its number of generated
   tokens (after `bos_id`, `eos_id` included) and $\alpha$ = `length_penalty` ($\alpha = 0$: no
   normalisation). (The paper uses the penalty $((5+n)/6)^{\alpha}$ of Wu et al., 2016; dividing by
   $n^{\alpha}$ is a simpler form of the same idea.)

Write `beam_search(step_fn, bos_id, eos_id, max_len, beam_size, length_penalty=0.0)` returning
`(tokens, score)`: the best hypothesis as a 1-D `torch.long` tensor starting with `bos_id`, and
its normalised score as a float. With `beam_size=1` it must return what `greedy_decode` returns.
Raise `ValueError` when `beam_size < 1` or `max_len < 1`.

**Hints.** Represent a hypothesis as `(list_of_ids, score)`. Sorting a Python list of
candidates with `key=lambda c: c[1], reverse=True` is plenty fast for these vocabularies.
'''),
    ("exercise", "10.2", r'''
def beam_search(step_fn, bos_id, eos_id, max_len, beam_size, length_penalty=0.0):
    """Beam search with a length penalty (the course's algorithm, see above).

    Args:
        step_fn: callable, 1-D long tensor (prefix starting with ``bos_id``) ->
            1-D float tensor ``(vocab_size,)`` of next-token logits.
        bos_id, eos_id: ids that start and end a sequence.
        max_len: the largest number of generated tokens (int >= 1).
        beam_size: number of hypotheses kept per step (int >= 1).
        length_penalty: alpha >= 0; hypotheses are ranked at the end by
            ``score / n_generated**alpha``.

    Returns:
        ``(tokens, score)``: 1-D torch.long tensor ``[bos_id, y_1, ..., y_n]`` and
        its normalised score (float; sum of natural-log probabilities / n**alpha).

    Raises:
        ValueError: ``beam_size < 1`` or ``max_len < 1``.

    Source: Vaswani et al. (2017), section 6.1; the length normalisation is a
    simpler form of Wu et al. (2016), section 7; chapter 10.
    """
    ### BEGIN SOLUTION
    if beam_size < 1 or max_len < 1:
        raise ValueError(f"beam_size and max_len must be >= 1; got beam_size={beam_size}, max_len={max_len}")
    live = [([bos_id], 0.0)]
    finished = []
    for _ in range(max_len):
        candidates = []
        for tokens, score in live:
            log_probs = torch.log_softmax(step_fn(torch.tensor(tokens, dtype=torch.long)).double(), dim=-1)
            for token, lp in enumerate(log_probs.tolist()):
                candidates.append((tokens + [token], score + lp))
        candidates.sort(key=lambda c: c[1], reverse=True)
        live = []
        for tokens, score in candidates[:beam_size]:
            (finished if tokens[-1] == eos_id else live).append((tokens, score))
        if not live:
            break

    def normalised(hypothesis):
        tokens, score = hypothesis
        return score / (len(tokens) - 1) ** length_penalty

    best = max(finished + live, key=normalised)
    return torch.tensor(best[0], dtype=torch.long), normalised(best)
    ### END SOLUTION
'''),
    ("md", r'''
**Try it.** On the hand-made table greedy decoding picks `A` (probability 0.5) and ends with
probability $0.5 \times 0.39$; a beam of 2 also keeps `B` and finds `B <eos>` with probability
$0.4 \times 0.89$. Scores are natural-log probabilities: `exp(score)` gives them back.
'''),
    ("tryit", r'''
for beam_size in (1, 2, 4):
    tokens, score = beam_search(hand_step_fn, 0, 1, max_len=5, beam_size=beam_size)
    print(f"beam {beam_size}: {tokens.tolist()}  probability {math.exp(score):.3f}")
print("greedy:", greedy_decode(hand_step_fn, 0, 1, max_len=5).tolist())
tokens, score = beam_search(model_step_fn, 1, 2, max_len=8, beam_size=4, length_penalty=0.6)
print("untrained model, beam 4, alpha 0.6:", tokens.tolist(), f"normalised score {score:.3f}")
'''),
    ("md", r'''
## Exercise 10.3 — top-k and top-p (nucleus) filtering

Sampling from the softmax produces varied text but sometimes picks very unlikely tokens. Two
filters cut the tail off the distribution before sampling:

* **top-k** (Fan et al., 2018): keep the `top_k` largest logits of each row (`top_k = 0`: off;
  `top_k >= vocab_size`: keep all);
* **top-p** (Holtzman et al., 2020): sort the tokens by probability, descending, and keep the
  smallest set whose total probability reaches `top_p` — i.e. keep a token while the probability
  of the tokens **before** it is still `< top_p` (the most likely token is always kept;
  `top_p = 1.0`: off).

Apply top-k first, then top-p on the **renormalised** probabilities of the tokens that top-k
kept (the softmax of the filtered logits). Write `top_k_top_p_filtering(logits, top_k=0, top_p=1.0)`
for `logits` of shape `(..., vocab_size)`, returning a tensor of the same shape in which removed
entries are `float("-inf")` and kept entries are unchanged (so that a softmax gives them
probability 0). Raise `ValueError` when `top_k < 0` or `top_p` is not in $(0, 1]$.

Worked example: probabilities `[0.10, 0.50, 0.05, 0.20, 0.15]` and `top_p = 0.8`: in order
0.50, 0.20, 0.15, … the mass before 0.15 is 0.70 < 0.8 (kept), before 0.10 it is 0.85 (removed).

**Hints.** `torch.topk(logits, top_k).values[..., -1:]` is the k-th largest value of each row;
`torch.sort(..., descending=True)` returns values and the permutation; `torch.cumsum`; put a
sorted-order mask back in place with `mask.scatter(-1, order, sorted_mask)`.
'''),
    ("exercise", "10.3", r'''
def top_k_top_p_filtering(logits, top_k=0, top_p=1.0):
    """Set the logits outside the top-k / top-p set to -inf.

    Args:
        logits: float tensor ``(..., vocab_size)``.
        top_k: keep the ``top_k`` largest per row; 0 = no top-k filter.
        top_p: keep the smallest most-likely set with total probability >= top_p
            (computed after top-k, on the renormalised probabilities); 1.0 = off.

    Returns:
        float tensor of the same shape: kept entries unchanged, removed ones
        ``-inf``. At least one entry per row is kept.

    Raises:
        ValueError: ``top_k < 0`` or ``top_p`` not in (0, 1].

    Source: Fan et al. (2018), "Hierarchical Neural Story Generation" (top-k);
    Holtzman et al. (2020), "The Curious Case of Neural Text Degeneration"
    (top-p); chapter 10.
    """
    ### BEGIN SOLUTION
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0; got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1]; got {top_p}")
    logits = logits.clone()
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs                     # mass of the better tokens
        remove_sorted = before >= top_p
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    return logits
    ### END SOLUTION
'''),
    ("tryit", r'''
probs = torch.tensor([0.10, 0.50, 0.05, 0.20, 0.15])
print("top_p=0.8:", [round(p, 3) for p in top_k_top_p_filtering(probs.log(), top_p=0.8).exp().tolist()])
print("top_k=2:  ", [round(p, 3) for p in top_k_top_p_filtering(probs.log(), top_k=2).exp().tolist()])
gen = torch.Generator().manual_seed(0)
filtered = top_k_top_p_filtering(probs.log(), top_k=4, top_p=0.72)
samples = torch.multinomial(torch.softmax(filtered, dim=-1), 1000, replacement=True, generator=gen)
print("top_k=4 then top_p=0.72, counts of 1000 samples per token:", torch.bincount(samples, minlength=5).tolist())
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
]
