"""Sampling many answers per question, fast and reproducibly (the raw material of labels).

Reference settings: temperature 0.7, nucleus top-p 0.9, ``max_new_tokens`` by task (short QA 12,
MMLU 4, GSM8K 256, MATH 512).

Why a decoding loop of our own rather than ``model.generate``:

* **One prompt pass for all samples.** The prompt is run once per question and its key/value cache
  is copied to the ``n`` sample rows; ``generate(num_return_sequences=n)`` runs the prompt ``n``
  times. For short answers the prompt is most of the work, so this is the main speed-up on CPU.
* **Finished rows leave the batch.** A sample that has produced its end-of-turn token (or a stop
  string) is dropped from the cache, so long generations are not slowed by short ones.
* **Per-sample random streams.** Sample ``i`` of question ``q`` draws from its own
  ``torch.Generator`` seeded from ``(seed, q, i)``. The samples therefore do not depend on how
  questions are grouped into batches, on the order questions are processed, or on resuming a run:
  batched and one-at-a-time sampling give the same texts (up to float rounding of batched matmuls).

The sampling rule itself is the one of ``generate(do_sample=True, temperature=T, top_p=p)``:
logits / T, then keep the smallest set of most likely tokens whose probability reaches p (at least
one token), renormalise, draw (see :func:`_nucleus`).
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass

import torch

from .errors import InputError
from .models import LoadedModel

#: Short answers are one line; reasoning answers stop when a base model starts a new question.
STOP_STRINGS: dict[str, tuple[str, ...]] = {
    "qa": ("\n",),
    "mmlu": ("\n",),
    "gsm8k": ("\nQuestion:", "\n\n\n"),
    "math": ("\nQuestion:", "\n\n\n"),
}


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
        if self.max_new_tokens < 1:
            raise InputError("max_new_tokens must be at least 1")
        if not self.temperature > 0:
            raise InputError("the temperature must be > 0 (use greedy decoding for temperature 0)")
        if not 0 < self.top_p <= 1:
            raise InputError("top_p must be in (0, 1]")


def sample_seed(seed: int, question_id: str, index: int) -> int:
    """The seed of sample ``index`` of ``question_id``: stable across runs, machines and Python versions."""
    digest = hashlib.sha256(f"{seed}\x1f{question_id}\x1f{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """Token ids of a prompt, with the tokenizer's BOS token unless the text already starts with it.

    Chat templates write their own special tokens; a base model's plain prompt needs the BOS that
    ``add_special_tokens`` adds (Gemma answers much worse without it).
    """
    bos = getattr(tokenizer, "bos_token", None)
    add = not (bos and prompt.startswith(bos))
    return tokenizer(prompt, add_special_tokens=add)["input_ids"]


def stop_token_ids(lm: LoadedModel) -> set[int]:
    ids: set[int] = set()
    eos = getattr(lm.model.generation_config, "eos_token_id", None)
    ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if lm.tokenizer.eos_token_id is not None:
        ids.add(lm.tokenizer.eos_token_id)
    return ids


def cache_keyword(model) -> str:
    """``cache`` in recent transformers 5 releases, ``past_key_values`` before (and in 4.x)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def output_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _nucleus(logits: torch.Tensor, temperature: float, top_p: float, k: int = 256) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per row: the candidate tokens and their weights after temperature and nucleus filtering.

    A token is kept when the probability of the tokens more likely than it is below ``top_p`` (the
    most likely token always is): the rule of ``generate``'s top-p warper. The kept tokens are a
    prefix of the tokens sorted by probability, and each row gets exactly that prefix, so a row's
    draw never depends on the other rows of the batch. Only the ``k`` most likely tokens are sorted
    (a full sort of a 50k-262k vocabulary per step costs as much as a decoding step on CPU); rows
    whose top ``k`` hold less than ``top_p`` of the mass are redone with the whole vocabulary.
    """
    probs = (logits.float() / temperature).softmax(dim=-1)
    k = min(k, probs.shape[-1])
    weights, ids = probs.topk(k, dim=-1) if top_p < 1.0 else probs.sort(dim=-1, descending=True)
    # On a GPU the softmax and top-k run there and only k values per row cross to the CPU (the per-row
    # generators draw on the CPU): copying (rows x vocab) logits each step cost more than the step.
    weights, ids = weights.cpu(), ids.cpu()
    rows = []
    for r in range(probs.shape[0]):
        w, i = weights[r], ids[r]
        if top_p < 1.0 and float(w.sum()) < top_p:
            w, i = (t.cpu() for t in probs[r].sort(descending=True))
        keep = int(((w.cumsum(0) - w) < top_p).sum()) if top_p < 1.0 else len(w)
        rows.append((i[: max(keep, 1)], w[: max(keep, 1)]))
    return rows


def _cut_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """Text up to the first stop string that follows some content (a leading newline is not a stop)."""
    lead = len(text) - len(text.lstrip())
    cut = min((i for s in stops if (i := text.find(s, lead)) >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


@torch.no_grad()
def _decode_batch(
    lm: LoadedModel,
    prompts: list[list[int]],
    generators: list[list[torch.Generator]],
    settings: SamplingSettings,
) -> list[list[str]]:
    """Sample ``len(generators[q])`` continuations of each prompt ``q`` in one batch.

    Prompts are left-padded to a common length; the prompt pass runs once per prompt and its cache
    is repeated to one row per sample. Returns the decoded texts, ``[question][sample]``.
    """
    model, tokenizer, device = lm.model, lm.tokenizer, lm.device
    n_per = [len(g) for g in generators]
    if len(set(n_per)) != 1:
        raise ValueError("every prompt of a batch needs the same number of samples")
    n = n_per[0]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids):] = torch.tensor(ids)
        mask[row, width - len(ids):] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)

    cache_kw = cache_keyword(model)
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    cache = output_cache(out)
    logits = out.logits[:, -1]
    if n > 1:
        cache.batch_repeat_interleave(n)
        logits = logits.repeat_interleave(n, dim=0)
        mask = mask.repeat_interleave(n, dim=0)
        positions = positions.repeat_interleave(n, dim=0)
    next_position = positions[:, -1] + 1

    rows = [g for per_question in generators for g in per_question]  # row r -> its generator
    active = list(range(len(rows)))  # original row index of each row still in the batch
    tokens: list[list[int]] = [[] for _ in rows]
    stops = stop_token_ids(lm)
    for step in range(settings.max_new_tokens):
        candidates = _nucleus(logits, settings.temperature, settings.top_p)
        chosen = [
            int(ids[torch.multinomial(weights, 1, generator=rows[r])])
            for (ids, weights), r in zip(candidates, active)
        ]
        keep = []
        for i, (r, token) in enumerate(zip(active, chosen)):
            if token in stops:
                continue
            tokens[r].append(token)
            if settings.stop_strings and _cut_at_stop(tokenizer.decode(tokens[r]), settings.stop_strings)[1]:
                continue
            keep.append(i)
        if not keep or step == settings.max_new_tokens - 1:
            break
        if len(keep) < len(active):  # drop finished rows from the batch and the cache
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            mask, next_position = mask[index], next_position[index]
            chosen = [chosen[i] for i in keep]
            active = [active[i] for i in keep]
        mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
        out = model(
            input_ids=torch.tensor(chosen, device=device)[:, None],
            attention_mask=mask,
            position_ids=next_position[:, None],
            use_cache=True,
            **{cache_kw: cache},
        )
        cache, logits = output_cache(out), out.logits[:, -1]
        next_position = next_position + 1

    texts = []
    for ids in tokens:
        text = tokenizer.decode(ids, skip_special_tokens=True)
        texts.append(_cut_at_stop(text, settings.stop_strings)[0].strip() if settings.stop_strings else text.strip())
    return [texts[q * n : (q + 1) * n] for q in range(len(prompts))]


def sample_answers(
    lm: LoadedModel,
    prompts: list[str],
    question_ids: list[str],
    settings: SamplingSettings = SamplingSettings(),
    *,
    questions_per_batch: int = 1,
    one_at_a_time: bool = False,
) -> list[list[str]]:
    """``settings.n_samples`` sampled answers for each prompt, ``[question][sample]``.

    Parameters
    ----------
    prompts : full prompt texts (see :func:`grade.prompts.format_prompt`).
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

    def gens(qid: str, indices) -> list[torch.Generator]:
        return [torch.Generator().manual_seed(sample_seed(settings.seed, qid, i)) for i in indices]

    results: list[list[str]] = []
    with lm.lock:
        if one_at_a_time:
            for qid, ids in zip(question_ids, encoded):
                results.append([_decode_batch(lm, [ids], [gens(qid, [i])], settings)[0][0] for i in range(settings.n_samples)])
            return results
        for start in range(0, len(encoded), questions_per_batch):
            chunk = range(start, min(start + questions_per_batch, len(encoded)))
            results += _decode_batch(
                lm,
                [encoded[q] for q in chunk],
                [gens(question_ids[q], range(settings.n_samples)) for q in chunk],
                settings,
            )
    return results
