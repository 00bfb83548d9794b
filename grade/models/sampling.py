"""Sampling many answers per question, fast and reproducibly (the raw material of labels).

Reference settings: temperature 0.7, nucleus top-p 0.9, answer length and stop rule by task
(:func:`grade.tasks.tasks.answer_format`: short QA 12 tokens, MMLU 12, GSM8K 256, MATH 512).

The decoding itself is :func:`grade.models.generation.generate` (one prompt pass for all samples, finished
rows leave the batch). What is particular to labels is the random stream of every sample: sample
``i`` of question ``q`` draws from its own generator seeded from ``(seed, q, i)``
(:func:`sample_seed`). The samples therefore do not depend on how questions are grouped into
batches, on the order questions are processed, or on resuming a run: batched and one-at-a-time
sampling give the same texts (up to float rounding of batched matmuls).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..common.errors import InputError
from .generation import DecodeSettings, Generation, encode_prompt, generate
from .models import LoadedModel


@dataclass(frozen=True)
class SamplingSettings:
    """How answers are drawn. Defaults are the reference pipeline's (``max_new_tokens``: short QA)."""

    n_samples: int = 10
    max_new_tokens: int = 12
    temperature: float = 0.7
    top_p: float = 0.9
    seed: int = 0
    stop_strings: tuple[str, ...] = ()

    def __post_init__(self):
        if self.n_samples < 1:
            raise InputError("the number of samples must be at least 1")
        if not self.temperature > 0:
            raise InputError("the temperature must be > 0 (use greedy decoding for temperature 0)")
        self.decode_settings()  # the remaining checks

    def decode_settings(self) -> DecodeSettings:
        return DecodeSettings(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                              stop_strings=self.stop_strings)


def sample_seed(seed: int, question_id: str, index: int) -> int:
    """The seed of sample ``index`` of ``question_id``: stable across runs, machines and Python versions."""
    digest = hashlib.sha256(f"{seed}\x1f{question_id}\x1f{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def sample_generations(
    lm: LoadedModel,
    prompts: list[str],
    question_ids: list[str],
    settings: SamplingSettings = SamplingSettings(),
    *,
    questions_per_batch: int = 1,
    one_at_a_time: bool = False,
) -> list[list[Generation]]:
    """``settings.n_samples`` sampled answers for each prompt, ``[question][sample]``, each with why it ended
    (:attr:`grade.models.generation.Generation.finish`; ``"length"``: it stopped at ``settings.max_new_tokens``).

    Parameters
    ----------
    prompts : full prompt texts (see :func:`grade.tasks.prompts.format_prompt`).
    question_ids : one id per prompt; with ``settings.seed`` it fixes every sample's random stream.
    questions_per_batch : prompts decoded together (left-padded). 1 (default) is fastest on CPU:
        padding and uneven answer lengths cost more than the batching saves (measured in
        ``bench/bench_labelling.py``); on a GPU a larger value helps.
    one_at_a_time : decode every sample separately (no shared prompt pass, batch of one): the slow
        reference point for benchmarks. Same samples as the batched mode.
    """
    if len(prompts) != len(question_ids):
        raise ValueError("one question id per prompt is needed")
    if questions_per_batch < 1:
        raise InputError("questions_per_batch must be at least 1")
    encoded = [encode_prompt(lm.tokenizer, p) for p in prompts]
    limit = lm.max_context - settings.max_new_tokens
    for qid, ids in zip(question_ids, encoded):
        if len(ids) > limit:
            raise InputError(f"question {qid!r}: the prompt has {len(ids)} tokens; this model allows {limit} before the answer")
    decode = settings.decode_settings()
    seeds = [[sample_seed(settings.seed, qid, i) for i in range(settings.n_samples)] for qid in question_ids]
    if one_at_a_time:
        return [[generate(lm, [ids], decode, [[seed]])[0][0] for seed in per] for ids, per in zip(encoded, seeds)]
    return generate(lm, encoded, decode, seeds, batch_size=questions_per_batch)


def sample_answers(lm: LoadedModel, prompts: list[str], question_ids: list[str],
                   settings: SamplingSettings = SamplingSettings(), **options) -> list[list[str]]:
    """The texts of :func:`sample_generations` (the same arguments and ``options``), ``[question][sample]``."""
    return [[g.text for g in per] for per in sample_generations(lm, prompts, question_ids, settings, **options)]
