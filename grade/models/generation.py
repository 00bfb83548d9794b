"""Text generation: the project's one decoding path (greedy and sampled, batched, stop rules).

Every answer a model writes goes through :func:`generate`: the labeller's samples
(:mod:`grade.models.sampling`), the baselines' greedy answers and fresh samples (:mod:`grade.verdict.detectors.baselines`),
``analyze(generate=True)`` and the app's answers and reasoning traces. How long an answer may run and
where it ends is a task's decision (:func:`grade.tasks.tasks.answer_format`); what ends an answer in a given
model is :func:`grade.models.architectures.end_of_answer_ids`.

The work is split at a small boundary, so that another engine can generate: a **backend** takes
prompt token ids and :class:`DecodeSettings` and returns the generated token ids (:class:`Backend`);
everything around it (encoding prompts, the model's context limit, turning ids into answer text, the
lock) is shared. :func:`backend_for` picks one: a :class:`~grade.models.models.LoadedModel`'s own
``generation_backend``, llama.cpp for greedy answers of an embedded model that asks for it
(:mod:`grade.models.backends`), else :class:`TorchBackend`.

:class:`TorchBackend`, the decoding loop on the transformers model, and why it is ours rather than
``model.generate``:

* **One prompt pass for all samples.** Prompts are left-padded into one batch and run once; each
  prompt's key/value cache is copied to its sample rows (``generate(num_return_sequences=n)`` runs
  the prompt ``n`` times). For short answers the prompt is most of the work.
* **Finished rows leave the batch**, so long answers are not slowed by short ones.
* **Per-sample random streams.** Row ``i`` of prompt ``q`` draws from its own ``torch.Generator``
  seeded with ``seeds[q][i]``, so a sample does not depend on the other rows of its batch, the order
  of questions or a resumed run (labels are reproducible; see :func:`grade.models.sampling.sample_seed`).

Sampling rules (:func:`candidates`): logits / temperature; then top-p over the whole vocabulary (the
labeller, the reference settings), or top-k followed by top-p over the k (the baselines' EigenScore
settings), each by the rule of ``generate``'s warpers.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, replace
from typing import Protocol, Sequence

import torch

from .cancel import check_cancelled
from .architectures import end_of_answer_ids
from .decoding import DecodeSettings, cut_at_stop, hits_stop  # noqa: F401 (hits_stop: part of this module's API)
from ..common.errors import InputError
from .models import LoadedModel


@dataclass(frozen=True)
class Generation:
    """One generated answer.

    ``token_ids``: every token the decoder chose, the end-of-answer token left out; ``text``: their
    text cut at the first stop string and stripped; ``answer_ids``: the shortest prefix of
    ``token_ids`` that gives ``text`` (no trailing stop string or white space); ``finish``:
    ``"end_of_answer"`` (an end-of-answer token), ``"stop_string"`` or ``"length"``.
    """

    token_ids: list[int]
    text: str
    answer_ids: list[int]
    finish: str

    @property
    def steps(self) -> int:
        """Next-token distributions the decoder drew from (the one that chose the end token included)."""
        return len(self.token_ids) + (self.finish == "end_of_answer")


class Backend(Protocol):
    """What generates token ids. One method, so an engine other than transformers can plug in."""

    def generate_ids(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings,
                     seeds: Sequence[Sequence[int]] | None) -> list[list[list[int]]]:
        """Generated token ids, ``[prompt][row]``.

        Greedy settings: ``seeds`` is None and each prompt has one row. Sampling: prompt ``q`` has
        ``len(seeds[q])`` rows and row ``i`` draws from a stream seeded with ``seeds[q][i]`` (only the
        torch backend promises the same texts as the labels, which were drawn by it). A row ends at
        an end-of-answer token (not returned), once its decoded text holds a stop string after some
        content (:func:`hits_stop`; the token that completed it is returned), or after
        ``settings.max_new_tokens`` tokens.
        """
        ...


# --------------------------------------------------------------------------------------------------
# prompts and stop rules


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """Token ids of a prompt, with the tokenizer's BOS token unless the text already starts with it.

    Chat templates write their own special tokens; a base model's plain prompt needs the BOS that
    ``add_special_tokens`` adds (Gemma answers much worse without it).
    """
    bos = getattr(tokenizer, "bos_token", None)
    add = not (bos and prompt.startswith(bos))
    return tokenizer(prompt, add_special_tokens=add)["input_ids"]


def finish_row(tokenizer, ids: list[int], settings: DecodeSettings) -> Generation:
    """A backend's ids as a :class:`Generation` (why the row ended is read off the ids)."""
    raw = tokenizer.decode(ids, skip_special_tokens=True)
    cut, stopped = cut_at_stop(raw, settings.stop_strings)
    text = cut.strip()
    finish = "stop_string" if stopped else "length" if len(ids) >= settings.max_new_tokens else "end_of_answer"
    # The shortest prefix that still gives the text: no stop string, no trailing white space. Scanned from
    # the end, where only a few tokens follow the text; a prefix whose text is shorter cannot give it.
    keep = len(ids)
    for k in range(len(ids) - 1, -1, -1):
        prefix = tokenizer.decode(ids[:k], skip_special_tokens=True)
        if len(prefix.strip()) < len(text):
            break
        if cut_at_stop(prefix, settings.stop_strings)[0].strip() == text:
            keep = k
    return Generation(list(ids), text, list(ids[:keep]), finish)


# --------------------------------------------------------------------------------------------------
# sampling rules


def candidates(logits: torch.Tensor, temperature: float, top_p: float, top_k: int | None = None,
               shortlist: int = 256) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per row: the candidate tokens and their (unnormalised) weights, on the CPU.

    Without ``top_k``: a token is kept when the probability of the tokens more likely than it is below
    ``top_p`` (the most likely always is), the rule of ``generate``'s top-p warper over the whole
    vocabulary. The kept tokens are a prefix of the tokens sorted by probability and each row gets
    exactly that prefix, so a row's draw never depends on the other rows. Only the ``shortlist`` most
    likely tokens are sorted (a full sort of a 50k-262k vocabulary per step costs as much as a decoding
    step on CPU); rows whose shortlist holds less than ``top_p`` of the mass are redone with the whole
    vocabulary.

    With ``top_k``: ``generate``'s top-k then top-p warpers: the k most likely tokens, renormalised, then
    the least likely of them dropped while their cumulative share stays <= 1 - top_p.
    """
    if top_k is not None:
        scores = logits.float() / temperature
        values, index = torch.topk(scores, min(top_k, scores.shape[-1]), dim=-1)  # descending
        if top_p < 1.0:
            ascending = values.flip(-1)
            remove = ascending.softmax(-1).cumsum(-1) <= (1 - top_p)
            remove[..., -1:] = False  # always keep the most likely token
            values = ascending.masked_fill(remove, float("-inf")).flip(-1)
        probs, index = values.softmax(-1).cpu(), index.cpu()
        return [(index[r], probs[r]) for r in range(len(index))]
    probs = (logits.float() / temperature).softmax(dim=-1)
    k = min(shortlist, probs.shape[-1])
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


def _choose(logits: torch.Tensor, settings: DecodeSettings, generators: list[torch.Generator] | None) -> list[int]:
    if generators is None:
        return logits.argmax(-1).cpu().tolist()
    rows = candidates(logits, settings.temperature, settings.top_p, settings.top_k)
    return [int(ids[torch.multinomial(weights, 1, generator=g)]) for (ids, weights), g in zip(rows, generators)]


# --------------------------------------------------------------------------------------------------
# the transformers backend


def cache_keyword(model) -> str:
    """``cache`` in recent transformers 5 releases, ``past_key_values`` before (and in 4.x)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def output_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


@dataclass
class PromptPass:
    """A prompt the model has already read, so that a pass over its continuation need not read it again.

    ``ids``: the prompt's token ids; ``cache``: its key/value cache, cut from the autograd graph;
    ``last_logits``: (vocab,) the logits at its last position; ``states``: (L + 1, d_model) hidden states of
    its last token (embeddings first). A GRADE ``pre`` analysis makes one (``analyze(keep_prompt_pass=True)``)
    and the detectors' pass over the answer reads it (:func:`grade.verdict.detectors.baselines.answer_states`): on a CPU every
    pass streams all the weights from memory, so a short prompt's pass costs about as much as a long one's.
    """

    ids: list[int]
    cache: object
    last_logits: torch.Tensor
    states: object  # numpy (L + 1, d_model)

    @classmethod
    def detached(cls, ids: Sequence[int], cache, last_logits: torch.Tensor, states) -> "PromptPass | None":
        """From a pass run with gradients; None where the cache's layout is not the one we know how to detach
        (the caller then runs the prompt again)."""
        layers = getattr(cache, "layers", None)
        if not layers:
            return None
        for layer in layers:
            for name in ("keys", "values"):
                tensor = getattr(layer, name, None)
                if not isinstance(tensor, torch.Tensor):
                    return None
                setattr(layer, name, tensor.detach())
        return cls(list(ids), cache, last_logits.detach(), states)

    def is_of(self, ids: Sequence[int]) -> bool:
        """Whether this is the pass of the prompt ``ids`` (a pass of any other prompt must not be reused)."""
        return self.ids == list(ids)

    def fresh_cache(self):
        """A copy of the cache for one continuation: a pass appends to the cache it is given."""
        return copy.deepcopy(self.cache)


def left_padded(lm: LoadedModel, rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, position_ids)`` of token rows left-padded into one batch on ``lm``'s device:
    every row ends in the last column, and each row's positions count its own tokens from 0, so that a row's
    values are those of its pass alone up to float rounding. The batch layout of every batched pass (decoding,
    the detectors' statistics, the GRADE passes)."""
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(list(row), dtype=torch.long)
        mask[i, width - len(row):] = 1
    ids, mask = ids.to(lm.device), mask.to(lm.device)
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


class TorchBackend:
    """The decoding loop on a transformers model with a key/value cache (see the module docstring)."""

    name = "torch"

    def __init__(self, lm: LoadedModel):
        self.lm = lm

    @torch.no_grad()
    def generate_ids(self, prompts: Sequence[Sequence[int]], settings: DecodeSettings,
                     seeds: Sequence[Sequence[int]] | None, prompt_pass: PromptPass | None = None
                     ) -> list[list[list[int]]]:
        """See :class:`Backend`; ``prompt_pass``: a single prompt's pass already run, decoded from instead of
        reading the prompt again (where it is of that prompt)."""
        model, tokenizer, device = self.lm.model, self.lm.tokenizer, self.lm.device
        n_per = [1] * len(prompts) if seeds is None else [len(s) for s in seeds]
        if len(set(n_per)) != 1:
            raise ValueError("every prompt of a batch needs the same number of rows")
        n = n_per[0]
        input_ids, mask, positions = left_padded(self.lm, prompts)

        cache_kw = cache_keyword(model)
        if prompt_pass is not None and len(prompts) == 1 and prompt_pass.is_of(prompts[0]):
            cache, logits = prompt_pass.fresh_cache(), prompt_pass.last_logits[None].to(device)
        else:
            out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                        logits_to_keep=1)
            cache = output_cache(out)
            logits = out.logits[:, -1]
        if n > 1:
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)
            mask = mask.repeat_interleave(n, dim=0)
            positions = positions.repeat_interleave(n, dim=0)
        next_position = positions[:, -1] + 1

        generators = None if seeds is None else [torch.Generator().manual_seed(int(s)) for per in seeds for s in per]
        n_rows = len(prompts) * n
        active = list(range(n_rows))  # original row index of each row still in the batch
        tokens: list[list[int]] = [[] for _ in range(n_rows)]
        stops = end_of_answer_ids(model, tokenizer)
        for step in range(settings.max_new_tokens):
            check_cancelled()  # a cancelled job stops within one token
            chosen = _choose(logits, settings, None if generators is None else [generators[r] for r in active])
            keep = []
            for i, (r, token) in enumerate(zip(active, chosen)):
                if token in stops:
                    continue
                tokens[r].append(token)
                if settings.stop_strings and hits_stop(tokenizer.decode(tokens[r]), settings.stop_strings):
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
        return [tokens[q * n : (q + 1) * n] for q in range(len(prompts))]


def backend_for(lm: LoadedModel, settings: DecodeSettings | None = None) -> Backend:
    """What generates for ``lm``: its own ``generation_backend`` if it has one; for greedy decoding of an
    embedded model that asks for it, llama.cpp on its GGUF file (:func:`grade.models.backends.fast_backend`);
    else the transformers loop. Sampling stays on the transformers loop, whose per-sample random
    streams the labels were drawn with."""
    if getattr(lm, "generation_backend", None) is not None:
        return lm.generation_backend
    if settings is not None and settings.greedy:
        from .backends import fast_backend

        fast = fast_backend(lm)
        if fast is not None:
            return fast
    return TorchBackend(lm)


def answer_engine(lm: LoadedModel) -> str:
    """What writes ``lm``'s greedy answers now ("llama.cpp" or "torch"; a model's own backend by its name): the
    app says it beside the model, since llama.cpp takes over once its background build is installed."""
    backend = backend_for(lm, DecodeSettings(max_new_tokens=1))
    return getattr(backend, "name", type(backend).__name__)


# --------------------------------------------------------------------------------------------------
# the entry points


def generate(
    lm: LoadedModel,
    prompts: Sequence[Sequence[int]],
    settings: DecodeSettings,
    seeds: Sequence[Sequence[int]] | None = None,
    *,
    batch_size: int | None = None,
    prompt_pass: PromptPass | None = None,
) -> list[list[Generation]]:
    """Answers to encoded prompts, ``[prompt][row]``.

    Parameters
    ----------
    prompts : token ids of each prompt (see :func:`encode_prompt`).
    settings : length, sampling rule and stop strings (a task's: :func:`settings_for_task`).
    seeds : sampling only: one seed per row of each prompt (every prompt the same number of rows).
    batch_size : prompts decoded together (left-padded: :func:`left_padded`); default the rule of
        :func:`grade.models.sizing.batch_size`, from the device's free memory and the model's shape. Rows never
        depend on it beyond float rounding of batched matrix products (and a sampled row not at all: its own
        random stream).
    prompt_pass : one prompt's pass already run (a GRADE ``pre`` analysis'): the transformers loop decodes
        from it instead of reading the prompt again; other backends read the prompt themselves.

    A prompt that leaves no room for an answer in the model's context raises :class:`InputError`; an
    answer never runs past the context.
    """
    if settings.greedy != (seeds is None):
        raise ValueError("sampling needs one seed per row; greedy decoding takes none")
    if seeds is not None and len(seeds) != len(prompts):
        raise ValueError("one list of seeds per prompt is needed")
    if not prompts:
        return []
    room = lm.max_context - max(len(p) for p in prompts)
    if room < 1:
        raise InputError(f"the prompt has {max(len(p) for p in prompts)} tokens: no room is left for an answer "
                         f"in this model's {lm.max_context}")
    if settings.max_new_tokens > room:
        settings = replace(settings, max_new_tokens=room)
    if batch_size is not None and batch_size < 1:
        raise InputError("the batch size must be at least 1")
    if batch_size is None:
        from .sizing import batch_size as size_rule

        batch_size = size_rule(lm, tokens=max(len(p) for p in prompts) + settings.max_new_tokens, kind="generate",
                               rows_per_item=1 if seeds is None else len(seeds[0]))
    size = batch_size
    backend = backend_for(lm, settings)
    ids: list[list[list[int]]] = []
    with lm.lock:
        for start in range(0, len(prompts), size):
            chunk = slice(start, start + size)
            chunk_seeds = None if seeds is None else seeds[chunk]
            if prompt_pass is not None and isinstance(backend, TorchBackend):
                ids += backend.generate_ids(prompts[chunk], settings, chunk_seeds, prompt_pass=prompt_pass)
            else:
                ids += backend.generate_ids(prompts[chunk], settings, chunk_seeds)
    return [[finish_row(lm.tokenizer, row, settings) for row in per_prompt] for per_prompt in ids]


def settings_for_task(task: str, max_new_tokens: int | None = None, **sampling) -> DecodeSettings:
    """Decode settings with the task's answer length and stop rule (:func:`grade.tasks.tasks.answer_format`);
    ``sampling`` holds ``temperature``, ``top_p``, ``top_k`` (greedy without)."""
    from ..tasks.tasks import answer_format

    fmt = answer_format(task, max_new_tokens)
    return DecodeSettings(max_new_tokens=fmt.max_new_tokens, stop_strings=fmt.stop_strings, **sampling)


def shorter_answer(tokenizer, generation: Generation, settings: DecodeSettings) -> Generation | None:
    """The greedy answer ``settings`` would give, read off a greedy ``generation`` of the same prompt and
    stop strings decoded with a longer (or equal) length limit: greedy decoding never looks ahead, so it
    is the first ``settings.max_new_tokens`` tokens. None when ``generation`` was cut by its own, shorter
    limit (what follows is unknown)."""
    if len(generation.token_ids) >= settings.max_new_tokens:
        return finish_row(tokenizer, generation.token_ids[: settings.max_new_tokens], settings)
    return None if generation.finish == "length" else generation


def greedy_answer(lm: LoadedModel, prompt: str | Sequence[int], *, task: str = "qa",
                  max_new_tokens: int | None = None, prompt_pass: PromptPass | None = None) -> Generation:
    """The model's greedy answer to a prompt (text, encoded by :func:`encode_prompt`, or its ids), with
    ``task``'s answer length (or ``max_new_tokens``) and stop rule; ``prompt_pass``: see :func:`generate`."""
    ids = encode_prompt(lm.tokenizer, prompt) if isinstance(prompt, str) else list(prompt)
    return generate(lm, [ids], settings_for_task(task, max_new_tokens), prompt_pass=prompt_pass)[0][0]
