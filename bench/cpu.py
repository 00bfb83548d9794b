"""Target 2 (and 5): single-question GRADE_pre on the CPU with the embedded SmolLM2, beside the reference.

Times, after the model is loaded: ``grade.analyze(..., spectra=False)`` on a 64-token prompt (the
engine's fast path, end to end: tokenising, forward, backward, spectra, result); the floor (forward +
activation-only backward); the published recipe (weight gradients, then pinv + SVDs per layer); and
``spectra=True`` (exact float64 spectra) for reference. Accuracy: every route's rank ratios against
the float64 literal formula on the same h and Δ, over several questions.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

import grade
from grade.gradients.analysis import layer_features
from grade.gradients.losses import entropy_at_last_position
from grade.tasks.prompts import format_prompt
from grade.gradients.reference import literal_stable_ranks, recipe_rank_ratios, reference_recipe
from grade.tasks.tasks import read_jsonl, resolve_dataset

from .common import max_relative_error, time_call
from .pipeline import capture_tensors, floor_pass

TARGET_S = 0.5


def dataset_rows(name: str):
    """The raw rows of a benchmark subset, in file order (wherever ``grade.tasks.tasks`` finds it)."""
    return (row for _, row in read_jsonl(resolve_dataset(name)[1]))


def dataset_questions(name: str, count: int) -> list[dict]:
    return list(itertools.islice(dataset_rows(name), count))


def question_with_prompt_tokens(lm, target: int) -> tuple[str, list[int]]:
    """A question (words of TriviaQA questions) whose formatted QA prompt has exactly ``target`` tokens."""
    def encode(question):
        return lm.tokenizer(format_prompt(lm.tokenizer, question), add_special_tokens=False)["input_ids"]

    words = " ".join(row["question"] for row in dataset_questions("triviaqa", 40)).split()
    best = None
    for count in range(1, len(words) + 1):
        question = " ".join(words[:count])
        ids = encode(question)
        if len(ids) == target:
            return question, ids
        if len(ids) > target:
            break
        best = (question, ids)
    if best is None:
        raise RuntimeError(f"no question gives a {target}-token prompt")
    for filler in ("please", "now", "today", "here"):  # one more single-token word closes a gap of one
        ids = encode(best[0] + " " + filler)
        if len(ids) == target:
            return best[0] + " " + filler, ids
    return best


def recipe_on_same_inputs(hidden, deltas, kind):
    """The recipe's spectral step on the engine's h and Δ (its weight gradient g = Δᵀ h, rounded to the
    model's dtype as autograd would leave it)."""
    grads = [torch.mm(d.T, h) for h, d in zip(hidden, deltas)]
    return recipe_rank_ratios(hidden, grads, kind, kind)


def accuracy(lm, questions: list[str]) -> dict:
    """Largest relative error of each route's rank ratios against the float64 literal formula."""
    errors = {"ours_fast": [], "ours_analyze": [], "ours_exact": [], "reference_same_inputs": [], "reference_own_pass": []}
    failures = 0
    for question in questions:
        prompt = format_prompt(lm.tokenizer, question)
        ids = lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        cap = capture_tensors(lm, ids)
        truth = literal_stable_ranks(cap.hidden, cap.deltas, "pre", "pre").rank_ratio
        fast = layer_features(cap.hidden, cap.deltas, ("pre", "pre"), False)[2]
        exact = layer_features(cap.hidden, cap.deltas, ("pre", "pre"), True)[2]
        errors["ours_fast"].append(max_relative_error(fast, truth))
        errors["ours_exact"].append(max_relative_error(exact, truth))
        errors["ours_analyze"].append(max_relative_error(grade.analyze(lm, question, spectra=False).rank_ratio, truth))
        same = recipe_on_same_inputs(cap.hidden, cap.deltas, "pre")
        errors["reference_same_inputs"].append(max_relative_error(same.rank_ratio, truth))
        own = reference_recipe(lm.model, torch.tensor([ids]), entropy_at_last_position)
        errors["reference_own_pass"].append(max_relative_error(own.rank_ratio, truth))
        failures += len(same.failures) + len(own.failures)
    return {
        "questions": len(questions),
        "max_rel_error": {k: max(v) for k, v in errors.items()},
        "per_question": errors,
        "reference_solver_failures": failures,
    }


def run(lm=None, *, repeats: int = 7, accuracy_questions: int = 6, log=print) -> dict:
    """Uses torch's current thread count (``python -m bench`` sets it; 2 by default)."""
    lm = lm or grade.load_model("smollm2-135m-instruct")
    question, ids = question_with_prompt_tokens(lm, 64)
    ids_tensor = torch.tensor([ids])
    log(f"[cpu] {lm.name}, {len(ids)}-token prompt, {torch.get_num_threads()} threads")

    timings = {
        "ours_analyze_fast": time_call(lambda: grade.analyze(lm, question, spectra=False), repeats=repeats, warmup=2),
        "floor_fwd_bwd": time_call(lambda: floor_pass(lm, ids_tensor), repeats=repeats, warmup=1),
        "reference_recipe": time_call(
            lambda: reference_recipe(lm.model, ids_tensor, entropy_at_last_position), repeats=max(3, repeats // 2), warmup=1
        ),
        "ours_analyze_exact_spectra": time_call(lambda: grade.analyze(lm, question, spectra=True), repeats=3, warmup=1),
    }
    stages = grade.analyze(lm, question, spectra=False).timings
    result = {
        "model": lm.name,
        "prompt_tokens": len(ids),
        "question": question,
        "timings": {k: v.to_dict() for k, v in timings.items()},
        "ours_stage_timings_one_run": stages,
        "target_s": TARGET_S,
        "meets_target": timings["ours_analyze_fast"].median < TARGET_S,
        "ours_over_floor": timings["ours_analyze_fast"].median / timings["floor_fwd_bwd"].median,
        "reference_over_ours": timings["reference_recipe"].median / timings["ours_analyze_fast"].median,
    }
    qs = [question] + [row["question"] for name in ("triviaqa", "nq_open", "gsm8k", "hotpotqa", "mmlu") for row in dataset_questions(name, 1)]
    result["accuracy"] = accuracy(lm, qs[:accuracy_questions])
    return result
