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

Model passes per question (``score_question``):

1. greedy answer (task-specific ``max_new_tokens``), then one forward pass over prompt + answer with
   hidden states -> P-Entropy, CoE-R / CoE-C, SAPLMA and Align-P inputs;
2. the IC prompt, one forward pass -> P(Yes) through the LM head for the last 6 tokens x all layers;
3. the Judge prompt, greedy, 16 new tokens -> 0 if the reply contains "unknown";
4. K fresh samples (T 0.5, top-p 0.99, top-k 10: EigenScore's settings), one batched forward ->
   EigenScore (middle layer, last token of each sample) and self-consistency (share of samples that
   agree with the majority answer). Sharing the K samples halves the cost of the two sampling
   baselines; they are fresh samples, never the ones used for the labels.

Supervised baselines (Align-P, SAPLMA) need training; this module only extracts their input vectors
(stored as float16), :mod:`grade.evaluation` trains and scores them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch

from .errors import InputError
from .models import LoadedModel
from .prompts import INSTRUCTIONS, format_prompt, user_message
from .sampling import STOP_STRINGS, cache_keyword, encode_prompt, output_cache, stop_token_ids
from .tasks import gsm8k_final_number, math_answer, mmlu_letter, normalize_answer, normalize_latex

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

#: New tokens per task for the greedy answer and the samples (reference settings, method.md).
MAX_NEW_TOKENS: dict[str, int] = {"qa": 12, "mmlu": 4, "gsm8k": 256, "math": 512, "cot": 128}

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
    max_new_tokens: dict[str, int] | None = None  # per task; None -> MAX_NEW_TOKENS
    seed: int = 0

    def new_tokens(self, task: str) -> int:
        table = self.max_new_tokens or MAX_NEW_TOKENS
        return int(table.get(task, table.get("qa", 12)))


# --------------------------------------------------------------------------------------------------
# prompts


def _template(tokenizer, message: str) -> str:
    """Same rendering as :func:`grade.prompts.format_prompt`: chat template, else ``...\\nAnswer:``."""
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
# answer keys for self-consistency (agreement between samples, not correctness)


def answer_key(task: str, text: str, choices: list[str] | None = None) -> str:
    """A canonical form of a sampled answer, so that equal answers compare equal; the labeller's
    extraction rules (:mod:`grade.tasks`): short QA = the text before the first '.', normalised;
    MMLU = the predicted letter; GSM8K = the final number; MATH = the last boxed answer, normalised."""
    if task == "mmlu":
        return mmlu_letter(text, choices, lenient=True) or ""
    if task == "gsm8k":
        value = gsm8k_final_number(text)
        return "" if value is None else f"{value:g}"
    if task == "math":
        answer = math_answer(text)
        return "" if answer is None else normalize_latex(answer)
    return normalize_answer(text.strip().split(".", 1)[0])


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


def self_consistency(keys: list[str]) -> float:
    """Share of samples agreeing with the majority answer (an empty answer is an answer too)."""
    if not keys:
        return float("nan")
    return Counter(keys).most_common(1)[0][1] / len(keys)


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


def _stop_ids(lm: LoadedModel) -> set[int]:
    """End-of-answer tokens: the generation config's EOS ids, the tokenizer's EOS, the chat end-of-turn."""
    ids = set(stop_token_ids(lm))
    for token in ("<|im_end|>", "<end_of_turn>", "<|eot_id|>"):
        tid = lm.tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != lm.tokenizer.unk_token_id:
            ids.add(tid)
    return ids


def _hits_stop_string(text: str, stops: tuple[str, ...]) -> bool:
    """A stop string after some content (a leading newline is not a stop), as the label sampler does."""
    lead = len(text) - len(text.lstrip())
    return any(text.find(stop, lead) >= 0 for stop in stops)


def _cut_text(text: str, stops: tuple[str, ...]) -> str:
    lead = len(text) - len(text.lstrip())
    cuts = [i for stop in stops if (i := text.find(stop, lead)) >= 0]
    return (text[: min(cuts)] if cuts else text).strip()


@dataclass
class Decoded:
    """One decoded row. ``answer``: token ids before the stop; ``entropies``: full-vocabulary entropy of
    every decoding step (the step that chose the stop included); ``states``: (len(answer) or 1, L+1, d)
    hidden states of the answer tokens (or only ``layer``'s, (n, d)), None unless asked for."""

    answer: list[int]
    text: str
    entropies: list[float]
    states: np.ndarray | None


def _sample_tokens(logits: torch.Tensor, config: BaselineConfig, generators: list[torch.Generator]) -> list[int]:
    """One draw per row, by the rule of ``generate(do_sample, temperature, top_k, top_p)``: logits / T,
    keep the top k, then drop the least likely tokens whose cumulative share stays <= 1 - top_p.
    Working on the k candidates only keeps this cheap on a 262k-token vocabulary."""
    scores = logits.float() / config.temperature
    k = min(config.top_k or scores.shape[-1], scores.shape[-1])
    values, index = torch.topk(scores, k, dim=-1)  # descending
    if config.top_p < 1.0:
        ascending = values.flip(-1)
        remove = ascending.softmax(-1).cumsum(-1) <= (1 - config.top_p)
        remove[..., -1:] = False  # always keep the most likely token
        values = ascending.masked_fill(remove, float("-inf")).flip(-1)
    probs = values.softmax(-1).cpu()
    index = index.cpu()
    return [int(index[i, torch.multinomial(probs[i], 1, generator=g)]) for i, g in enumerate(generators)]


@torch.no_grad()
def decode(lm: LoadedModel, prompt_ids: list[int], max_new_tokens: int, *, n: int = 1,
           sample: bool = False, config: BaselineConfig | None = None, stop_strings: tuple[str, ...] = (),
           keep_states: bool = False, layer: int | None = None, seeds: list[int] | None = None,
           prompt_states: bool = False, entropies_wanted: bool = True) -> tuple[list[Decoded], np.ndarray | None]:
    """Greedy or sampled decoding of ``n`` rows from one prompt, with what the baselines need.

    The prompt runs once; its cache is repeated to the ``n`` rows; finished rows leave the batch.
    Each step asks the decoder for the hidden states of the token it feeds, so an answer token's
    states arrive one step after it was chosen (a row cut by the token limit takes one extra step).

    Returns the decoded rows and, with ``prompt_states``, the last prompt token's hidden states
    (L+1, d) (embeddings first). ``entropies_wanted=False`` skips the full-vocabulary entropies.
    """
    config = config or BaselineConfig()
    model, device = lm.model, lm.device
    stops = _stop_ids(lm)
    want_states = keep_states or layer is not None

    def pick(hidden_states, rows_index=None) -> torch.Tensor:  # (rows, L+1, d) or (rows, d), last position
        if layer is not None:
            return hidden_states[layer][:, -1].float().cpu()
        return torch.stack([h[:, -1] for h in hidden_states], dim=1).float().cpu()

    ids = torch.tensor([prompt_ids], device=device)
    out = model(input_ids=ids, use_cache=True, output_hidden_states=want_states or prompt_states, logits_to_keep=1)
    last_prompt = None
    if prompt_states:
        last_prompt = torch.stack([h[0, -1] for h in out.hidden_states]).float().cpu().numpy()
    cache, logits = output_cache(out), out.logits[:, -1]
    if n > 1:
        cache.batch_repeat_interleave(n)
        logits = logits.repeat_interleave(n, dim=0)
    prompt_tail = pick(out.hidden_states).repeat_interleave(n, dim=0) if want_states else None
    generators = [torch.Generator().manual_seed(s) for s in (seeds or range(n))] if sample else None
    position = len(prompt_ids)

    tokens: list[list[int]] = [[] for _ in range(n)]
    entropies: list[list[float]] = [[] for _ in range(n)]
    states: list[list[torch.Tensor]] = [[] for _ in range(n)]
    finished = [False] * n
    active = list(range(n))
    for step in range(max_new_tokens + 1):
        if step == max_new_tokens:  # the extra step: only states of the last token were wanted
            break
        if entropies_wanted:
            logp = torch.log_softmax(logits.double(), dim=-1)
            entropy = (-(logp.exp() * logp).sum(-1)).cpu().tolist()
        else:
            entropy = [float("nan")] * len(active)
        if sample:
            chosen = _sample_tokens(logits, config, [generators[r] for r in active])
        else:
            chosen = logits.argmax(-1).cpu().tolist()
        keep = []
        for i, (r, token) in enumerate(zip(active, chosen)):
            entropies[r].append(entropy[i])
            if token in stops:
                finished[r] = True
                continue
            if stop_strings and _hits_stop_string(lm.tokenizer.decode(tokens[r] + [token]), stop_strings):
                finished[r] = True
                continue
            tokens[r].append(token)
            keep.append(i)
        if not keep or (step == max_new_tokens - 1 and not want_states):
            break
        if len(keep) < len(active):
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            chosen = [chosen[i] for i in keep]
            active = [active[i] for i in keep]
        out = model(input_ids=torch.tensor(chosen, device=device)[:, None], **{cache_keyword(model): cache}, use_cache=True,
                    position_ids=torch.full((len(active), 1), position, device=device),
                    output_hidden_states=want_states)
        position += 1
        cache, logits = output_cache(out), out.logits[:, -1]
        if want_states:
            picked = pick(out.hidden_states)
            for i, r in enumerate(active):
                states[r].append(picked[i])
    rows = []
    for r in range(n):
        text = lm.tokenizer.decode(tokens[r], skip_special_tokens=True)
        row_states = None
        if want_states:
            # no answer token at all: the last prompt token stands in (the state that chose the stop)
            row_states = torch.stack(states[r]).numpy() if states[r] else prompt_tail[r : r + 1].numpy()
        rows.append(Decoded(tokens[r], _cut_text(text, stop_strings), entropies[r], row_states))
    return rows, last_prompt


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


PARTS = ("answer", "ic", "judge", "samples")


def score_question(lm: LoadedModel, item: dict, *, variant: str = "original", config: BaselineConfig | None = None,
                   parts: tuple[str, ...] = PARTS) -> dict:
    """All unsupervised baseline scores and the supervised baselines' inputs for one labelled item.

    ``item``: a labelled record (``id``, ``question``, ``task``, optional ``context`` / ``choices``).
    Returns a JSON-ready dict: the scores under :data:`SCORE_KEYS` (higher = answerable), the greedy
    answer, the Judge reply, the sampled answer keys, ``align_hidden`` (layer -> base64 float16 vector
    of the last prompt token), ``saplma_hidden`` (base64 float16, hidden_states[-12] at the answer's
    last token) and per-pass timings. ``parts`` picks the passes: ``answer`` (greedy answer: P-Entropy,
    CoE, SAPLMA and Align-P inputs), ``ic``, ``judge``, ``samples`` (self-consistency, EigenScore).
    """
    config = config or BaselineConfig()
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise InputError(f"unknown baseline pass(es) {', '.join(sorted(unknown))}; use {', '.join(PARTS)}")
    task = item.get("task") or "qa"
    # the answer length the labels were sampled with, when the labelled record says so
    new_tokens = int(item.get("max_new_tokens") or config.new_tokens(task))
    stops = STOP_STRINGS.get(task, ())
    timings: dict[str, float] = {}
    record: dict = {"id": str(item["id"]), "dataset": item.get("dataset"), "variant": variant, "model": lm.name}

    with lm.lock:
        prompt_ids = encode_prompt(lm.tokenizer, task_prompt(lm, item, variant))
        n_layers = lm.n_layers
        if "answer" in parts:  # greedy answer, all hidden states of its tokens
            t = time.perf_counter()
            (greedy,), last_prompt = decode(lm, prompt_ids, new_tokens, stop_strings=stops, keep_states=True,
                                            config=config, prompt_states=True)
            record["greedy_answer"] = greedy.text
            record["p_entropy"] = -float(np.sum(greedy.entropies))
            trajectory = greedy.states.astype(np.float64).mean(axis=0)  # (L+1, d): mean over answer tokens
            record["coe_r"], record["coe_c"] = coe_scores(trajectory)
            record["saplma_hidden"] = encode_vector(greedy.states[-1, -config.saplma_from_top])
            record["align_hidden"] = {str(l): encode_vector(last_prompt[l]) for l in align_layers(n_layers, config)}
            timings["answer_s"] = time.perf_counter() - t

        if "ic" in parts:
            t = time.perf_counter()
            record["ic"] = internal_confidence(p_yes_matrix(lm, ic_prompt(lm, item, variant), config.ic_tokens))
            timings["ic_s"] = time.perf_counter() - t

        if "judge" in parts:  # greedy, 16 tokens, refusal word
            t = time.perf_counter()
            (reply,), _ = decode(lm, encode_prompt(lm.tokenizer, judge_prompt(lm, item, variant)), config.judge_tokens,
                                 stop_strings=("\n",), config=config, entropies_wanted=False)
            record["judge_reply"] = reply.text
            record["judge"] = 0.0 if "unknown" in reply.text.lower() else 1.0
            timings["judge_s"] = time.perf_counter() - t

        if "samples" in parts:  # K fresh samples -> EigenScore (middle layer, last answer token), SC
            t = time.perf_counter()
            seeds = [_seed_for(record["id"], variant, config.seed, k) for k in range(config.n_samples)]
            samples, _ = decode(lm, prompt_ids, new_tokens, n=config.n_samples, sample=True, config=config,
                                stop_strings=stops, layer=n_layers // 2, seeds=seeds, entropies_wanted=False)
            keys = [answer_key(task, s.text, item.get("choices")) for s in samples]
            record["sample_keys"] = keys
            record["self_consistency"] = self_consistency(keys)
            record["eigenscore"] = -eigenscore(np.stack([s.states[-1] for s in samples]), config.eigen_alpha)
            timings["samples_s"] = time.perf_counter() - t
    record["timings"] = timings
    return record


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


def score_items(lm: LoadedModel, items: Iterable[dict], path: str | Path, *, variant: str = "original",
                config: BaselineConfig | None = None, parts: tuple[str, ...] = PARTS,
                progress: Callable[[int, int, dict], None] | None = None) -> dict[str, dict]:
    """Score every item not yet in the cache at ``path``, appending one JSON line per question.

    Returns the full cache (old and new records), id -> record. Safe to interrupt and rerun.
    """
    config = config or BaselineConfig()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = read_cache(path)
    items = list(items)
    todo = [it for it in items if str(it["id"]) not in done]
    if todo and path.exists() and path.stat().st_size:
        with path.open("rb") as fh:  # an interrupted run may have left half a line: end it first
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                with path.open("a", encoding="utf-8") as out:
                    out.write("\n")
    for i, item in enumerate(todo):
        record = score_question(lm, item, variant=variant, config=config, parts=parts)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        done[str(item["id"])] = record
        if progress:
            progress(i + 1, len(todo), record)
    return done


def read_caches(paths: Iterable[str | Path]) -> dict[str, dict]:
    """Several caches of the same questions merged per id (e.g. the main and the sampling pass)."""
    merged: dict[str, dict] = {}
    for path in paths:
        for key, record in read_cache(path).items():
            timings = {**merged.get(key, {}).get("timings", {}), **record.get("timings", {})}
            merged[key] = {**merged.get(key, {}), **record, "timings": timings}
    return merged


__all__ = [
    "BaselineConfig", "METHODS", "PARTS", "SCORE_KEYS", "VARIANTS", "answer_key", "coe_scores", "decode_vector",
    "eigenscore", "encode_vector", "entropy_sum", "internal_confidence", "read_cache", "read_caches", "score_items",
    "score_question", "self_consistency", "task_prompt",
]
