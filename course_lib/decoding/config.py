"""``GenerationConfig``: every decoding setting in one record, checked once when it is built (chapter 10)."""

from __future__ import annotations

from dataclasses import dataclass


from ..validation import as_int, check_choice, check_number

__all__ = ["GenerationConfig"]


@dataclass(frozen=True)
class GenerationConfig:
    """How to generate: one record shared by every decoder, :class:`course_lib.translate.Translator` and the CLI.

    Checked once, when it is built (``__post_init__``); a bad value raises
    ``ValueError`` naming the field.

    Attributes:
        max_len: most tokens to generate; ``None`` = ``src_len + 50`` (the
            paper), capped by the model's ``config.max_len - 1``.
        bos_id, eos_id, pad_id: special ids (course default 1, 2, 0);
            ``eos_id=None`` never stops early. ``<pad>`` and ``<bos>`` are
            never generated (:func:`forbid_special_tokens`); ``pad_id`` only
            fills the output after ``<eos>``.
        use_cache: KV-cached incremental decoding (``True``), recompute the
            whole prefix each step (``False``), or ``None``: the cache whenever
            the model has ``new_cache()``.
        repetition_penalty: ``> 0``, 1.0 = off (:func:`apply_repetition_penalty`).
        no_repeat_ngram_size: ``>= 0``, 0 = off (:func:`block_repeated_ngrams`).
        do_sample: draw each next token (:func:`choose_next_token`) instead of the argmax.
        temperature, top_k, top_p: sampling only (``>= 0``; ``None``/0 = off;
            in ``(0, 1]``, ``None``/1 = off).
        beam_size: 1 = one token per step (:func:`generate`); more = beam
            search (:func:`beam_generate`), with neither sampling nor a
            repetition penalty.
        length_penalty_alpha: beam search only: ``alpha`` of :func:`length_penalty`.

    Source: chapter 10.
    """

    max_len: int | None = None
    bos_id: int = 1
    eos_id: int | None = 2
    pad_id: int = 0
    use_cache: bool | None = None
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    beam_size: int = 1
    length_penalty_alpha: float = 0.6

    def __post_init__(self) -> None:
        ints = {"bos_id": (self.bos_id, 0, ""), "pad_id": (self.pad_id, 0, ""), "eos_id": (self.eos_id, 0, ""),
                "max_len": (self.max_len, 1, ""), "top_k": (self.top_k, 0, " (0 or None = off)"),
                "no_repeat_ngram_size": (self.no_repeat_ngram_size, 0, " (0 = off)")}
        for name, (value, low, hint) in ints.items():
            if value is not None:  # NumPy and torch integers become Python ints
                object.__setattr__(self, name, as_int(value, name, low, hint=hint))
        check_choice(self.use_cache, "use_cache", (None, True, False))
        check_choice(self.do_sample, "do_sample", (True, False))
        check_number(self.repetition_penalty, "repetition_penalty", low=0, low_inclusive=False)
        check_number(self.length_penalty_alpha, "length_penalty_alpha")
        if not self.temperature >= 0:  # also rejects NaN
            raise ValueError(f"temperature must be >= 0 (0 = argmax); got {self.temperature}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1]; got {self.top_p}")
        if isinstance(self.beam_size, bool) or not isinstance(self.beam_size, int) or self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1 (an int; 1 = greedy or sampling); got {self.beam_size!r}")
        self._check_combination()

    def _check_combination(self) -> None:
        if self.beam_size > 1 and self.do_sample:
            raise ValueError(f"choose beam search (beam_size={self.beam_size}) or sampling (do_sample=True), not both")
        if self.beam_size > 1 and self.repetition_penalty != 1.0:
            raise ValueError(
                f"repetition_penalty={self.repetition_penalty} needs greedy decoding or sampling (beam_size=1); "
                f"beam search here has no repetition penalty"
            )
        if not self.do_sample:
            given = [name for name, value in (("temperature", None if self.temperature == 1.0 else self.temperature),
                                              ("top_k", self.top_k), ("top_p", self.top_p)) if value is not None]
            if given:
                verb = "applies" if len(given) == 1 else "apply"
                raise ValueError(f"{', '.join(given)} only {verb} when sampling: pass do_sample=True")
