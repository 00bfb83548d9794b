"""Baseline knowledge-gap detectors, scored on the same questions as GRADE.

Definitions: ``shared/notes/baselines.md``. Every score is oriented so that **higher = more likely
answerable** (signs flipped where the original method measures uncertainty; see :data:`METHODS`).

Why not lm-polygraph: its 0.7.0 wheel imports ``openai``, ``datasets``, ``spacy``, ``fschat``,
``sentence-transformers``, ``bert-score``, ``bitsandbytes``, ... at package import time (even
``lm_polygraph.estimators.eigenscore`` goes through ``lm_polygraph/__init__`` -> ``utils.model`` ->
``openai``), and its estimators only post-process statistics gathered by its own ``WhiteboxModel``
wrapper. Its versions also differ from the definitions we follow (``MeanTokenEntropy`` is a mean,
P-Entropy a sum; its ``EigenScore`` takes natural logs of ``eigh`` eigenvalues instead of
``log10`` of singular values, a monotone difference). So the estimators are written here, each a few
lines over one shared set of model passes.

As in lm-polygraph, the model passes that gather statistics are kept apart from the estimators, which
are pure functions of those statistics (:func:`entropy_sum`, :func:`coe_scores`, :func:`eigenscore`,
:func:`self_consistency`, :func:`internal_confidence`), tested against their definitions.
Model passes per question (``score_question``); answers come from the project's one decoding path
(:func:`grade.models.generation.generate`) with the task's answer length and stop rule:

1. greedy answer, then one pass over prompt + answer with hidden states (:func:`answer_states`) ->
   P-Entropy, CoE-R / CoE-C, SAPLMA and Align-P inputs;
2. the IC prompt, one forward pass -> P(Yes) through the LM head for the last 6 tokens x all layers;
3. the Judge prompt, greedy, 16 new tokens -> 0 if the reply contains "unknown";
4. K fresh samples (T 0.5, top-p 0.99, top-k 10: EigenScore's settings), one batched pass ->
   EigenScore (middle layer, last token of each sample) and self-consistency (share of samples that
   give the majority answer, :func:`grade.tasks.tasks.majority`). Sharing the K samples halves the cost of
   the two sampling baselines; they are fresh samples, never the ones used for the labels.

Supervised baselines (Align-P, SAPLMA) need training; this module only extracts their input vectors
(stored as float16), :mod:`grade.studies` trains and scores them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch

from ...batch.runner import run_local
from ...common.errors import InputError
from ...models.generation import (DecodeSettings, Generation, PromptPass, cache_keyword, encode_prompt, generate, left_padded,
                                   output_cache,
                         settings_for_task)
from ...models.models import LoadedModel
from ...tasks.prompts import INSTRUCTIONS, format_prompt, user_message
from ...tasks.tasks import answer_format, answer_key, majority

#: Method name -> (needs training, gives AUROC, what the raw quantity measures / orientation note).
METHODS: dict[str, tuple[bool, bool, str]] = {
    "P-Entropy": (False, True, "minus the summed next-token entropy of the greedy answer"),
    "Judge": (False, False, "1 unless the model replies 'Unknown' when asked whether it can answer"),
    "IC": (False, True, "internal confidence: weighted P(Yes) over the last 6 prompt tokens x layers"),
    "Align-P": (True, True, "logistic probe on the last prompt token's hidden state (layer chosen on validation)"),
    "SAPLMA": (True, True, "MLP 256-128-64 on hidden_states[-12] of the answer's last token"),
    "CoE-R": (False, True, "Chain-of-Embedding, real-space score (higher = correct)"),
    "CoE-C": (False, True, "Chain-of-Embedding, complex-space score (higher = correct)"),
    "Self-consistency": (False, True, "share of K fresh samples agreeing with the majority answer"),
    "EigenScore": (False, True, "minus INSIDE's EigenScore (mean log10 singular value of the sample covariance)"),
}

#: Unsupervised scores stored per question (JSON key for each method above).
SCORE_KEYS: dict[str, str] = {
    "P-Entropy": "p_entropy",
    "Judge": "judge",
    "IC": "ic",
    "CoE-R": "coe_r",
    "CoE-C": "coe_c",
    "Self-consistency": "self_consistency",
    "EigenScore": "eigenscore",
}

#: Harmless perturbations for the robustness study: a reworded task instruction, irrelevant text.
REWORDED_INSTRUCTIONS: dict[str, str] = {
    "qa": "Reply with a short answer of one or a few words, relying only on what you already know.",
    "qa_doc": "Reply with a short answer of one or a few words. The document above may help.",
    "mmlu": "Pick the correct option and reply with its letter (A, B, C or D).",
    "gsm8k": "Work out the problem with short step-by-step reasoning, and end with the final answer on a separate line written as '#### <number>'.",
    "math": "Work through the problem step by step; write the final answer inside \\boxed{}.",
    "cot": "Think step by step in short sentences, then answer the question.",
}
IRRELEVANT_TEXT = "(Unrelated note: the community library is closed on Sundays and reopens on Monday at nine.)"
VARIANTS = ("original", "reworded", "irrelevant")

JUDGE_INSTRUCTION = (
    "Can you answer the question from your own knowledge? If you can, reply with the short answer only. "
    "If you cannot, reply with exactly one word: Unknown."
)
IC_INSTRUCTION = "Can you answer this question accurately from your own knowledge? Reply only Yes or No."


@dataclass
class BaselineConfig:
    """Settings of the baseline passes (defaults: the published settings)."""

    n_samples: int = 10  # K for EigenScore and self-consistency
    temperature: float = 0.5
    top_p: float = 0.99
    top_k: int = 10
    eigen_alpha: float = 1e-3
    ic_tokens: int = 6
    judge_tokens: int = 16
    saplma_from_top: int = 12  # hidden_states[-12]: layer L-11
    align_fractions: tuple[float, ...] = (0.5, 0.625, 0.75, 0.875)  # candidate layers, as a share of L
    max_new_tokens: dict[str, int] | None = None  # per task, where it differs from the task's own
    seed: int = 0

    def new_tokens(self, task: str) -> int:
        """Answer length for ``task``: this config's override, else the task's (:func:`grade.tasks.tasks.answer_format`)."""
        return answer_format(task, (self.max_new_tokens or {}).get(task)).max_new_tokens


# --------------------------------------------------------------------------------------------------
# prompts


def _template(tokenizer, message: str) -> str:
    """Same rendering as :func:`grade.tasks.prompts.format_prompt`: chat template, else ``...\\nAnswer:``."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True)
    return f"{message}\n\nAnswer:"


def _question_body(question: str, context: str | None, choices: list[str] | None) -> str:
    """The question part of a user message (document, question, options) without any instruction."""
    message = user_message(question, task="qa", context=None, choices=choices)
    body = message[: message.rindex("\n\n" + INSTRUCTIONS["qa"])]
    return f"Document:\n{context.strip()}\n\n{body}" if context else body


def task_prompt(lm: LoadedModel, item: dict, variant: str = "original") -> str:
    """The answering prompt of one labelled item, optionally perturbed (see :data:`VARIANTS`)."""
    task, context, choices = item.get("task") or "qa", item.get("context"), item.get("choices")
    question = item["question"]
    if variant == "irrelevant":
        question = f"{question.strip()} {IRRELEVANT_TEXT}"
    prompt = format_prompt(lm.tokenizer, question, task=task, context=context, choices=choices)
    if variant == "reworded":
        key = "qa_doc" if task == "qa" and context else task
        if INSTRUCTIONS[key] not in prompt:
            raise InputError(f"cannot reword the {key!r} instruction: it is not in the prompt")
        prompt = prompt.replace(INSTRUCTIONS[key], REWORDED_INSTRUCTIONS[key])
    elif variant not in VARIANTS:
        raise InputError(f"unknown variant {variant!r}; use one of {', '.join(VARIANTS)}")
    return prompt


def _perturbed_question(item: dict, variant: str) -> str:
    return f"{item['question'].strip()} {IRRELEVANT_TEXT}" if variant == "irrelevant" else item["question"]


def ic_prompt(lm: LoadedModel, item: dict, variant: str = "original") -> str:
    body = _question_body(_perturbed_question(item, variant), item.get("context"), item.get("choices"))
    instruction = IC_INSTRUCTION if variant != "reworded" else "Do you know the accurate answer to this question? Answer only Yes or No."
    return _template(lm.tokenizer, f"{body}\n\n{instruction}")


def judge_prompt(lm: LoadedModel, item: dict, variant: str = "original") -> str:
    body = _question_body(_perturbed_question(item, variant), item.get("context"), item.get("choices"))
    instruction = JUDGE_INSTRUCTION if variant != "reworded" else (
        "If you know the answer from your own knowledge, give only the short answer; otherwise reply with the single word Unknown."
    )
    return _template(lm.tokenizer, f"{body}\n\n{instruction}")


# --------------------------------------------------------------------------------------------------
# estimators on arrays (pure functions: easy to test against the definitions)


def entropy_sum(logits: torch.Tensor) -> float:
    """Σ_t H(softmax(logits[t])) over the full vocabulary. logits: (T, vocab)."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    return float(-(logp.exp() * logp).sum())


def coe_scores(hidden: np.ndarray) -> tuple[float, float]:
    """CoE-R and CoE-C from the layer trajectory ``hidden`` (L+1, d): h_0 (embeddings) ... h_L.

    M_l = ‖h_{l+1}-h_l‖ / ‖h_L-h_0‖, A_l = arccos(cos(h_{l+1}, h_l)) / arccos(cos(h_L, h_0));
    CoE-R = mean(M) - mean(A); CoE-C = |mean(M e^{iA})|. Higher = more likely correct.
    """
    h = np.asarray(hidden, dtype=np.float64)

    def angle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-12)
        return np.arccos(np.clip(cos, -1.0, 1.0))

    steps = np.linalg.norm(h[1:] - h[:-1], axis=-1) / (np.linalg.norm(h[-1] - h[0]) + 1e-12)
    angles = angle(h[1:], h[:-1]) / (angle(h[-1], h[0]) + 1e-12)
    coe_r = float(steps.mean() - angles.mean())
    coe_c = float(math.hypot((steps * np.cos(angles)).mean(), (steps * np.sin(angles)).mean()))
    return coe_r, coe_c


def eigenscore(embeddings: np.ndarray, alpha: float = 1e-3) -> float:
    """INSIDE's EigenScore of K sample embeddings (K, d): higher = more hallucination.

    C = Z J_d Zᵀ with J_d = I - 11ᵀ/d (centring over the hidden dimension); mean log10 singular value
    of C + αI.
    """
    z = np.asarray(embeddings, dtype=np.float64)
    z = z - z.mean(axis=1, keepdims=True)  # Z J_d
    cov = z @ z.T
    sv = np.linalg.svd(cov + alpha * np.eye(len(z)), compute_uv=False)
    return float(np.mean(np.log10(sv)))


def self_consistency(keys: list[str | None]) -> float:
    """Share of samples giving the majority answer (:func:`grade.tasks.tasks.majority`; a sample without an
    answer, key ``None``, agrees with nothing). NaN without samples."""
    if not keys:
        return float("nan")
    return majority(keys)[1] / len(keys)


def ic_weights(n_layers_plus_one: int, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """w_layer[j] ∝ exp(-(L-j)²) over hidden-state index j = 0..L, w_tok[t] ∝ exp(-(T-1-t)²)."""
    j = np.arange(n_layers_plus_one)
    w_layer = np.exp(-((n_layers_plus_one - 1 - j) ** 2.0))
    t = np.arange(n_tokens)
    w_tok = np.exp(-((n_tokens - 1 - t) ** 2.0))
    return w_layer / w_layer.sum(), w_tok / w_tok.sum()


def internal_confidence(p_yes: np.ndarray) -> float:
    """IC from P(Yes) of shape (T tokens, L+1 hidden states)."""
    w_layer, w_tok = ic_weights(p_yes.shape[1], p_yes.shape[0])
    return float((w_tok[:, None] * w_layer[None, :] * p_yes).sum())


# --------------------------------------------------------------------------------------------------
# vectors in JSON


def encode_vector(x: np.ndarray) -> str:
    """float16 little-endian bytes, base64: a compact, exact-enough, pickle-free cache format."""
    return base64.b64encode(np.asarray(x, dtype="<f2").tobytes()).decode("ascii")


def decode_vector(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f2").astype(np.float32)


# --------------------------------------------------------------------------------------------------
# model passes


@dataclass
class AnswerStates:
    """What one pass over a prompt and its answers gives the baselines.

    ``prompt_states``: (L+1, d) hidden states of the last prompt token (embeddings first).
    ``states[i]``: hidden states of answer i's tokens, (n_i, L+1, d), or only ``layer``'s, (n_i, d);
    an answer without tokens gets the last prompt token's (the state that chose to stop), n_i = 1.
    ``entropies[i]``: Σ over answer i's decoding steps of the full-vocabulary entropy (None unless asked).
    """

    prompt_states: np.ndarray
    states: list[np.ndarray]
    entropies: list[float] | None


@torch.no_grad()
def answer_states(lm: LoadedModel, prompt_ids: list[int], answers: list[Generation], *, layer: int | None = None,
                  entropies: bool = False, prompt_pass: PromptPass | None = None) -> AnswerStates:
    """One forward pass over the prompt, then one over all answers at once (the prompt's key/value cache
    repeated, answers right-padded: a causal model never lets a real token see the padding after it).
    ``prompt_pass``: the prompt's pass already run (a GRADE ``pre`` analysis' :class:`PromptPass`), used in
    place of the first pass where it is of these ``prompt_ids``.

    The statistics are read where the decoder produced them: the state of an answer token is the one
    computed when it is fed; the entropy of decoding step t is that of the distribution at the position
    before it (the prompt's last token for step 0), for :attr:`Generation.steps` steps, the one that
    chose an end-of-answer token included. ``answer_ids`` (the answer without a trailing stop string)
    give the states; every generated token is fed, so the entropies cover all steps.
    """
    model, device = lm.model, lm.device
    want_all = layer is None
    if prompt_pass is None or not prompt_pass.is_of(prompt_ids):
        out = model(input_ids=torch.tensor([prompt_ids], device=device), use_cache=True, output_hidden_states=True,
                    logits_to_keep=1)
        prompt_pass = PromptPass(list(prompt_ids), output_cache(out), out.logits[0, -1],
                                 torch.stack([h[0, -1] for h in out.hidden_states]).float().cpu().numpy())
        cache = prompt_pass.cache
    else:
        cache = prompt_pass.fresh_cache()
    prompt_states = torch.from_numpy(np.asarray(prompt_pass.states, dtype=np.float32))  # (L+1, d)
    prompt_entropy = entropy_sum(prompt_pass.last_logits[None]) if entropies else 0.0
    fed = [a.token_ids for a in answers]
    width = max((len(f) for f in fed), default=0)
    per_token = logits_steps = None
    if width:
        if len(fed) > 1:
            cache.batch_repeat_interleave(len(fed))
        pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
        ids = torch.tensor([f + [pad] * (width - len(f)) for f in fed], device=device)
        positions = (len(prompt_ids) + torch.arange(width, device=device)).expand(len(fed), width)
        step = model(input_ids=ids, position_ids=positions, use_cache=True, output_hidden_states=True,
                     **{cache_keyword(model): cache}, **({} if entropies else {"logits_to_keep": 1}))
        hidden = step.hidden_states if want_all else (step.hidden_states[layer],)
        per_token = torch.stack([h.float().cpu() for h in hidden], dim=2)  # (K, width, L+1 or 1, d)
        logits_steps = step.logits if entropies else None
    states, sums = [], [] if entropies else None
    for i, answer in enumerate(answers):
        n = len(answer.answer_ids)
        if n:
            row = per_token[i, :n]
        else:
            row = (prompt_states if want_all else prompt_states[layer : layer + 1])[None]
        states.append((row if want_all else row[:, 0]).numpy())
        if entropies:  # step 0: the prompt's last position; step t: answer position t - 1
            later = answer.steps - 1
            chunks = logits_steps[i, :later].split(64) if later > 0 else ()
            sums.append(prompt_entropy + sum(entropy_sum(chunk) for chunk in chunks))
    return AnswerStates(prompt_states.numpy(), states, sums)


def _seed_for(item_id: str, variant: str, seed: int, index: int) -> int:
    digest = hashlib.sha256(f"{seed}\x1f{item_id}\x1f{variant}\x1f{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def align_layers(n_layers: int, config: BaselineConfig) -> list[int]:
    """Hidden-state indices (0 = embeddings, L = last layer) offered to Align-P."""
    return sorted({min(n_layers, max(1, round(f * n_layers))) for f in config.align_fractions})


def _yes_no_ids(lm: LoadedModel, prompt: str) -> tuple[int, int]:
    """First token of "Yes" / "No" as the reply would begin (a leading space unless the prompt ends
    with whitespace, as a chat template's assistant header does)."""
    space = "" if prompt[-1:].isspace() else " "
    enc = lambda text: lm.tokenizer(text, add_special_tokens=False)["input_ids"][0]  # noqa: E731
    return enc(space + "Yes"), enc(space + "No")


@torch.no_grad()
def p_yes_matrix(lm: LoadedModel, prompt: str, n_tokens: int) -> np.ndarray:
    """P(Yes) over {Yes, No} through the LM head for the last ``n_tokens`` prompt tokens at every
    hidden state: (T, L+1). Intermediate states go to the head without the final norm (logit lens, as
    in the reference); the last one transformers returns is already normed."""
    ids = encode_prompt(lm.tokenizer, prompt)
    yes, no = _yes_no_ids(lm, prompt)
    out = lm.model(input_ids=torch.tensor([ids], device=lm.device), output_hidden_states=True, logits_to_keep=1)
    t = min(n_tokens, len(ids))
    states = torch.stack([h[0, -t:] for h in out.hidden_states])  # (L+1, T, d)
    head = lm.model.get_output_embeddings()
    two = states @ head.weight[[yes, no]].T  # only the two rows of the head that matter
    if getattr(head, "bias", None) is not None:
        two = two + head.bias[[yes, no]]
    cap = getattr(lm.model.config, "final_logit_softcapping", None)
    two = (torch.tanh(two / cap) * cap if cap else two).double()
    return torch.softmax(two, dim=-1)[..., 0].T.cpu().numpy()


def answer_statistics(lm: LoadedModel, prompt_ids: list[int], greedy: Generation,
                      config: BaselineConfig | None = None, prompt_pass: PromptPass | None = None) -> dict:
    """What one pass over a prompt and its greedy answer gives the baselines, as the cache stores it:
    ``greedy_answer``, ``p_entropy``, ``coe_r`` / ``coe_c``, ``saplma_hidden`` (base64 float16,
    hidden_states[-12] at the answer's last token) and ``align_hidden`` (layer -> base64 float16 vector
    of the last prompt token). The benchmark's passes and the app's detectors both read these, so a
    detector sees at run time exactly what it was trained on (float16 rounding included). ``prompt_pass``:
    see :func:`answer_states`."""
    config = config or BaselineConfig()
    with lm.lock:
        passes = answer_states(lm, prompt_ids, [greedy], entropies=True, prompt_pass=prompt_pass)
    states = passes.states[0]  # (n, L+1, d)
    coe_r, coe_c = coe_scores(states.astype(np.float64).mean(axis=0))  # mean over tokens
    return {
        "greedy_answer": greedy.text,
        "p_entropy": -passes.entropies[0],
        "coe_r": coe_r,
        "coe_c": coe_c,
        "saplma_hidden": encode_vector(states[-1, -config.saplma_from_top]),
        "align_hidden": {str(l): encode_vector(passes.prompt_states[l]) for l in align_layers(lm.n_layers, config)},
    }


@torch.no_grad()
def answer_statistics_batch(lm: LoadedModel, prompt_ids: list[list[int]], greedy: list[Generation],
                            config: BaselineConfig | None = None, *, batch_size: int | None = None) -> list[dict]:
    """:func:`answer_statistics` of many prompts and their greedy answers, in batches of one forward pass each
    over prompt + answer (left-padded: every row ends in the last column, so its answer's positions are the
    last ones and ``logits_to_keep`` covers them all). The same statistics as the one-question path (a prompt
    pass, then a pass over the answer from its cache) up to float rounding; ``batch_size``: rows a pass
    (default: :func:`grade.models.sizing.batch_size` of a ``forward`` pass)."""
    from ...models.sizing import batch_size as size_rule

    config = config or BaselineConfig()
    if len(prompt_ids) != len(greedy):
        raise ValueError("one greedy answer per prompt is needed")
    if not prompt_ids:
        return []
    longest = max(len(p) + len(g.token_ids) for p, g in zip(prompt_ids, greedy))
    widest = max(len(g.token_ids) for g in greedy) + 1
    size = size_rule(lm, tokens=longest, kind="forward", logits_per_row=widest, override=batch_size)
    records: list[dict] = []
    for start in range(0, len(prompt_ids), size):
        records += _answer_statistics_pass(lm, prompt_ids[start:start + size], greedy[start:start + size], config)
    return records


def _answer_statistics_pass(lm: LoadedModel, prompt_ids: list[list[int]], greedy: list[Generation],
                            config: BaselineConfig) -> list[dict]:
    """One forward pass of :func:`answer_statistics_batch`."""
    model, device = lm.model, lm.device
    rows = [list(p) + list(g.token_ids) for p, g in zip(prompt_ids, greedy)]
    width = max(len(r) for r in rows)
    ids, mask, positions = left_padded(lm, rows)
    keep = max(len(g.token_ids) for g in greedy) + 1  # the prompt's last position and every answer position
    with lm.lock:
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False,
                    output_hidden_states=True, logits_to_keep=keep)
    hidden = out.hidden_states  # (L + 1) x (B, width, d)
    layers = align_layers(lm.n_layers, config)
    records = []
    for i, (prompt, answer) in enumerate(zip(prompt_ids, greedy)):
        fed = len(answer.token_ids)
        last_prompt = width - fed - 1  # the column of the prompt's last token
        prompt_states = torch.stack([h[i, last_prompt] for h in hidden]).float()  # (L + 1, d)
        n = len(answer.answer_ids)
        if n:
            states = torch.stack([h[i, last_prompt + 1:last_prompt + 1 + n] for h in hidden], dim=1).float()
        else:
            states = prompt_states[None]  # (n, L + 1, d)
        # step t's distribution is the one at the position before answer token t (the prompt's last for t = 0)
        first = keep - fed - 1
        logits = out.logits[i, first:first + answer.steps]
        entropy = sum(entropy_sum(chunk) for chunk in logits.split(64))
        coe_r, coe_c = coe_scores(states.double().mean(0).cpu().numpy())
        prompt_np = prompt_states.cpu().numpy()
        records.append({
            "greedy_answer": answer.text,
            "p_entropy": -entropy,
            "coe_r": coe_r,
            "coe_c": coe_c,
            "saplma_hidden": encode_vector(states[-1, -config.saplma_from_top].cpu().numpy()),
            "align_hidden": {str(l): encode_vector(prompt_np[l]) for l in layers},
        })
    return records


PARTS = ("answer", "ic", "judge", "samples")


def score_question(lm: LoadedModel, item: dict, *, variant: str = "original", config: BaselineConfig | None = None,
                   parts: tuple[str, ...] = PARTS) -> dict:
    """All unsupervised baseline scores and the supervised baselines' inputs for one labelled item
    (:func:`score_questions` of one item)."""
    return score_questions(lm, [item], variant=variant, config=config, parts=parts)[0]


def _answer_settings(item: dict, config: BaselineConfig) -> DecodeSettings:
    """The answer length the labels were sampled with, where the labelled record says so."""
    task = item.get("task") or "qa"
    return settings_for_task(task, int(item.get("max_new_tokens") or config.new_tokens(task)))


def _batches_by_settings(items: list[dict], config: BaselineConfig) -> list[tuple[DecodeSettings, list[int]]]:
    """Item indices grouped by their answer settings (one decoding call per group)."""
    groups: dict[DecodeSettings, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(_answer_settings(item, config), []).append(i)
    return list(groups.items())


def score_questions(lm: LoadedModel, items: list[dict], *, variant: str = "original",
                    config: BaselineConfig | None = None, parts: tuple[str, ...] = PARTS,
                    batch_size: int | None = None) -> list[dict]:
    """All unsupervised baseline scores and the supervised baselines' inputs for labelled items, one record
    each, in order.

    ``items``: labelled records (``id``, ``question``, ``task``, optional ``context`` / ``choices``).
    Each record is JSON-ready: the scores under :data:`SCORE_KEYS` (higher = answerable), the greedy
    answer, the Judge reply, the sampled answer keys, ``align_hidden`` (layer -> base64 float16 vector
    of the last prompt token), ``saplma_hidden`` (base64 float16, hidden_states[-12] at the answer's
    last token) and per-pass timings (a batch's decoding time shared out evenly). ``parts`` picks the
    passes: ``answer`` (greedy answer: P-Entropy, CoE, SAPLMA and Align-P inputs), ``ic``, ``judge``,
    ``samples`` (self-consistency, EigenScore).

    The items' answers are decoded together (left-padded; a row depends on its batch only through
    float rounding of batched matrix products), which is what makes a GPU run of every labelled
    question affordable, and the greedy answers' statistics come from batched passes too
    (:func:`answer_statistics_batch`); the IC and sampling passes that read hidden states run one question at a
    time. ``batch_size``: rows decoded, and rows a statistics pass, at once (default: the rule of
    :func:`grade.models.sizing.batch_size` for each pass).
    """

    config = config or BaselineConfig()
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise InputError(f"unknown baseline pass(es) {', '.join(sorted(unknown))}; use {', '.join(PARTS)}")
    n = len(items)
    records: list[dict] = [{"id": str(item["id"]), "dataset": item.get("dataset"), "variant": variant,
                            "model": lm.name} for item in items]
    timings: list[dict[str, float]] = [{} for _ in items]

    def share(key: str, seconds: float, indices: list[int]) -> None:
        for i in indices:
            timings[i][key] = timings[i].get(key, 0.0) + seconds / len(indices)

    with lm.lock:
        prompt_ids = [encode_prompt(lm.tokenizer, task_prompt(lm, item, variant)) for item in items]
        n_layers = lm.n_layers
        if "answer" in parts:  # greedy answers, then all hidden states of each answer's tokens
            for settings, group in _batches_by_settings(items, config):
                t = time.perf_counter()
                prompts = [prompt_ids[i] for i in group]
                greedy = [g for (g,) in generate(lm, prompts, settings, batch_size=batch_size)]
                for i, record in zip(group, answer_statistics_batch(lm, prompts, greedy, config,
                                                                    batch_size=batch_size)):
                    records[i].update(record)
                share("answer_s", time.perf_counter() - t, group)

        if "ic" in parts:
            for i, item in enumerate(items):
                t = time.perf_counter()
                records[i]["ic"] = internal_confidence(p_yes_matrix(lm, ic_prompt(lm, item, variant), config.ic_tokens))
                timings[i]["ic_s"] = time.perf_counter() - t

        if "judge" in parts:  # greedy, 16 tokens, one line, refusal word
            t = time.perf_counter()
            judge = DecodeSettings(max_new_tokens=config.judge_tokens, stop_strings=("\n",))
            replies = generate(lm, [encode_prompt(lm.tokenizer, judge_prompt(lm, item, variant)) for item in items], judge)
            share("judge_s", time.perf_counter() - t, list(range(n)))
            for i, (reply,) in enumerate(replies):
                records[i]["judge_reply"] = reply.text
                records[i]["judge"] = 0.0 if "unknown" in reply.text.lower() else 1.0

        if "samples" in parts:  # K fresh samples -> EigenScore (middle layer, last answer token), SC
            for answer, group in _batches_by_settings(items, config):
                t = time.perf_counter()
                seeds = [[_seed_for(records[i]["id"], variant, config.seed, k) for k in range(config.n_samples)]
                         for i in group]
                sampling = DecodeSettings(max_new_tokens=answer.max_new_tokens, temperature=config.temperature,
                                          top_p=config.top_p, top_k=config.top_k, stop_strings=answer.stop_strings)
                drawn = generate(lm, [prompt_ids[i] for i in group], sampling, seeds)
                share("samples_s", time.perf_counter() - t, group)
                for i, samples in zip(group, drawn):
                    t = time.perf_counter()
                    item = items[i]
                    keys = [answer_key(item.get("task") or "qa", s.text, item.get("choices")) for s in samples]
                    records[i]["sample_keys"] = keys
                    records[i]["self_consistency"] = self_consistency(keys)
                    last = answer_states(lm, prompt_ids[i], samples, layer=n_layers // 2).states
                    records[i]["eigenscore"] = -eigenscore(np.stack([s[-1] for s in last]), config.eigen_alpha)
                    timings[i]["samples_s"] += time.perf_counter() - t
    for record, spent in zip(records, timings):
        record["timings"] = spent
    return records


# --------------------------------------------------------------------------------------------------
# per-question cache (JSONL, append-only, resumable)


def safe_name(name: str) -> str:
    """A model or dataset name usable as a file name (a path or hub id keeps its last parts)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name).strip().strip("/")).strip("._") or "model"


def cache_path(root: str | Path, model: str, dataset: str, variant: str = "original", part: str = "main") -> Path:
    """``root/<model>/baselines/<dataset>[.<variant>][.samples].jsonl``: the cheap passes (answer, IC,
    Judge) and the sampling pass live in separate files so that either can be run alone."""
    name = dataset + ("" if variant == "original" else f".{variant}") + ("" if part == "main" else f".{part}")
    return Path(root) / safe_name(model) / "baselines" / f"{name}.jsonl"


def read_cache(path: str | Path) -> dict[str, dict]:
    """id -> record; a half-written line (an interrupted run) is ignored; a missing file is empty."""
    records: dict[str, dict] = {}
    path = Path(path)
    if not path.exists():
        return records
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            records[str(record["id"])] = record
    return records


class ScoreCache:
    """The sink of a baseline run (:func:`score_items`): a JSONL cache, one line appended per scored question;
    ``records`` holds the old and new records, id -> record."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records = read_cache(self.path)
        self._line_ended = False

    def key(self, item: dict) -> str:
        return str(item["id"])

    def done_keys(self) -> set[str]:
        return set(self.records)

    def write(self, records: list[dict]) -> None:
        if not self._line_ended and self.path.exists() and self.path.stat().st_size:
            with self.path.open("rb") as fh:  # an interrupted run may have left half a line: end it first
                fh.seek(-1, 2)
                if fh.read(1) != b"\n":
                    with self.path.open("a", encoding="utf-8") as out:
                        out.write("\n")
        self._line_ended = True
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(record) + "\n" for record in records))
        self.records.update((str(record["id"]), record) for record in records)


def items_per_batch(lm: LoadedModel, items: list[dict], *, variant: str = "original",
                    config: BaselineConfig | None = None, parts: tuple[str, ...] = PARTS,
                    batch_size: int | None = None) -> int:
    """Items handed to one :func:`score_questions` call: ``batch_size`` where given, else one decoding batch of the
    longest prompt and answer among ``items`` (:func:`grade.models.sizing.batch_size`; K rows an item where the
    sampling pass runs), so that a progress bar moves once a batch."""
    from ...models.sizing import batch_size as size_rule

    if batch_size is not None or not items:
        return size_rule(lm, tokens=1, kind="generate", override=batch_size or 1)
    config = config or BaselineConfig()
    longest = 1
    for item in items:
        try:
            longest = max(longest, len(encode_prompt(lm.tokenizer, task_prompt(lm, item, variant)))
                          + _answer_settings(item, config).max_new_tokens)
        except (InputError, KeyError, ValueError):
            continue  # the item is refused with its reason when it is scored
    rows = config.n_samples if "samples" in parts else 1
    return size_rule(lm, tokens=longest, kind="generate", rows_per_item=rows)


def score_items(lm: LoadedModel, items: Iterable[dict], path: str | Path, *, variant: str = "original",
                config: BaselineConfig | None = None, parts: tuple[str, ...] = PARTS,
                progress: bool | Callable[[int, int, dict], None] = False,
                callback: Callable[[int, int, dict], None] | None = None,
                questions_per_batch: int | None = None, batch_size: int | None = None) -> dict[str, dict]:
    """Score every item not yet in the cache at ``path``, appending one JSON line per question
    (:func:`grade.batch.run_local`, one batch of ``questions_per_batch`` questions decoded together
    and written at a time: :func:`score_questions`; default :func:`items_per_batch`). ``batch_size``: rows a
    batched pass (default: the rule of :func:`grade.models.sizing.batch_size`). ``progress``: a progress bar on
    stderr; ``callback(done, to do, record)`` after each (a function given as ``progress``, the older spelling, is
    the callback).

    Returns the full cache (old and new records), id -> record. Safe to interrupt and rerun.
    """
    if callable(progress):
        progress, callback = False, progress if callback is None else callback
    config = config or BaselineConfig()
    sink = ScoreCache(path)
    items = list(items)
    if questions_per_batch is None:
        questions_per_batch = items_per_batch(lm, [i for i in items if str(i["id"]) not in sink.records],
                                              variant=variant, config=config, parts=parts, batch_size=batch_size)
    if questions_per_batch < 1:
        raise InputError("questions_per_batch must be at least 1")

    def scored(todo, report):
        todo = list(todo)
        for start in range(0, len(todo), questions_per_batch):
            for record in score_questions(lm, todo[start:start + questions_per_batch], variant=variant,
                                          config=config, parts=parts, batch_size=batch_size):
                yield record, record

    run_local(items, scored, sink, chunk_size=questions_per_batch, progress=progress, desc=f"baselines {variant}",
              callback=callback)
    return sink.records


def read_caches(paths: Iterable[str | Path]) -> dict[str, dict]:
    """Several caches of the same questions merged per id (e.g. the main and the sampling pass)."""
    merged: dict[str, dict] = {}
    for path in paths:
        for key, record in read_cache(path).items():
            timings = {**merged.get(key, {}).get("timings", {}), **record.get("timings", {})}
            merged[key] = {**merged.get(key, {}), **record, "timings": timings}
    return merged


__all__ = [
    "AnswerStates", "BaselineConfig", "METHODS", "PARTS", "SCORE_KEYS", "VARIANTS", "answer_states", "answer_statistics",
    "answer_statistics_batch",
    "coe_scores",
    "decode_vector",
    "eigenscore", "encode_vector", "entropy_sum", "internal_confidence", "read_cache", "read_caches", "ScoreCache", "score_items",
    "items_per_batch", "score_question", "score_questions", "self_consistency", "task_prompt",
]
