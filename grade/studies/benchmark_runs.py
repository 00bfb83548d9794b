"""The benchmark runs behind ``results/``: which labelled files each model's benchmark reads, with what caps
and studies (the arguments of ``python -m grade benchmark``).

One place for this decision: ``scripts/build/run_benchmark.py`` runs them and writes ``results/README.md``;
``scripts/build/build_detectors.py`` fits the detectors beside the verdict on the same tables. The folders are
arguments (:func:`benchmark_runs`): the package names none of the repository's own; the command layer
passes them (:func:`grade.commands.benchmark.repository_runs`).
"""

from __future__ import annotations

from pathlib import Path

SHARED = ("triviaqa", "nq_open", "hotpotqa", "mmlu", "gsm8k", "math")
QWEN = "qwen2.5-coder-1.5b-instruct"
#: The per-class cap is a compute budget: SmolLM2's caches were filled on a GPU (up to 250 questions per
#: class), Gemma's on the 2-core CPU (60 per class; MMLU 250, since its facts pool also pays for two
#: perturbed copies of every question).
CAPS = {"smollm2-135m-instruct": ["250"], "gemma-3-270m": ["60", "mmlu=250"]}


def benchmark_runs(labels: str | Path, benchmark: str | Path, probe_labels: str | Path) -> dict[str, tuple[str, list[str]]]:
    """Results folder name -> (model, arguments of ``python -m grade benchmark`` after ``--model``): the
    exact runs behind ``results/``.

    Parameters
    ----------
    labels : the folder of labelled files per model (``<labels>/<model>/<dataset>.jsonl.xz``).
    benchmark : the benchmark's folder (its caches, and the world facts SmolLM2's caches were filled from).
    probe_labels : the probe-training labels per model (``<probe_labels>/<model>/...``).

    The paths in the arguments are these folders joined as given (relative stays relative).
    """
    labels, benchmark, probe_labels = str(labels), str(benchmark), str(probe_labels)

    def labelled(model: str, name: str) -> str:
        return f"{labels}/{model}/{name}.jsonl.xz"

    # The world facts each model's benchmark pooled: SmolLM2's caches were filled from the first 144 rows
    # of its probe-training file (the rest were labelled later, and 57 of them are the -unseen test set),
    # so those 144 rows are kept as they were.
    world_facts = {"smollm2-135m-instruct": f"{benchmark}/smollm2-135m-instruct/world_facts.jsonl.xz",
                   "gemma-3-270m": f"{probe_labels}/gemma-3-270m/world_facts.jsonl.xz"}

    def facts(model: str) -> str:
        """This project's fact questions (not a shared benchmark): the probe-training world facts and
        the two hand-written sample sets, pooled, since no shared dataset has both classes here."""
        return f"facts={world_facts[model]},{labelled(model, 'facts_known')},{labelled(model, 'facts_unknown')}"

    def shared(model: str) -> list[str]:
        """The six shared datasets; HotpotQA is benchmarked with its supporting paragraphs in the prompt."""
        return [f"hotpotqa={labelled(model, 'hotpotqa_context')}" if d == "hotpotqa" else d for d in SHARED]

    # The shared datasets come first (each reported with its class counts, benchmarked only with at least
    # 30 questions per class); then this project's own labelled sets.
    runs: dict[str, tuple[str, list[str]]] = {
        model: (model, ["--labels-dir", f"{labels}/{model}", "--datasets", *shared(model), facts(model),
                        f"arithmetic={probe_labels}/{model}/arithmetic.jsonl.xz", "--max-per-class", *cap,
                        "--robustness-datasets", "facts", "arithmetic"])
        for model, cap in CAPS.items()
    }
    # HotpotQA with and without its two supporting paragraphs (labelled on a GPU, all 375 shared questions;
    # data/labels/README.md), every labelled row (no cap): the with/without-document and short/long
    # document studies, plus HotpotQA's robustness. The closed-book condition has fewer than 30 answerable
    # questions, so it appears only in those studies.
    runs["smollm2-135m-instruct-documents"] = ("smollm2-135m-instruct", [
        "--datasets", f"hotpotqa={labelled('smollm2-135m-instruct', 'hotpotqa_context')}",
        f"hotpotqa_closed={labelled('smollm2-135m-instruct', 'hotpotqa')}",
        "--document-pair", "hotpotqa", "hotpotqa_closed", "--length-split", "hotpotqa",
    ])
    # Qwen2.5-Coder-1.5B-Instruct: every cache filled on one H200 (float32), 60 questions per class (GSM8K 40:
    # its greedy chain of thought and ten 256-token samples per question were the slowest part), HotpotQA
    # with and without its paragraphs, robustness on TriviaQA. MMLU is left out: the reference's 4-token
    # letter rule does not fit this chat model's answers (data/labels/README.md).
    # Every labelled question of seven datasets, cross-fitted (grade.studies.crossfit): Qwen's main table. The
    # feature stores cover every labelled question (data/probe_features); the baselines cover what their caches
    # hold, and the main table keeps the questions every method scores.
    runs[QWEN] = (QWEN, [
        "--crossfit", "--labels-dir", f"{labels}/{QWEN}", "--datasets", "triviaqa", "nq_open",
        f"hotpotqa={labelled(QWEN, 'hotpotqa_context')}", f"hotpotqa_closed={labelled(QWEN, 'hotpotqa')}", "gsm8k",
        "math", "mmlu", "--min-per-class", "10", "--features-dir", f"{benchmark}/{QWEN}/crossfit_features",
    ])
    # The balanced, capped protocol (one 60/20/20 split of a few capped rows): kept as an ablation.
    runs[f"{QWEN}-capped"] = (QWEN, [
        "--labels-dir", f"{labels}/{QWEN}", "--datasets", "triviaqa", "nq_open",
        f"hotpotqa={labelled(QWEN, 'hotpotqa_context')}", f"hotpotqa_closed={labelled(QWEN, 'hotpotqa')}", "gsm8k",
        "--max-per-class", "60", "gsm8k=40", "--document-pair", "hotpotqa", "hotpotqa_closed", "--length-split", "hotpotqa",
        "--robustness-datasets", "triviaqa",
    ])
    # Questions not seen during development: world facts labelled after the snapshot (all 27 answerable ones
    # and 30 unanswerable ones drawn with seed 0); every development row of the facts pool trains (75 %) or
    # validates (25 %).
    runs["smollm2-135m-instruct-unseen"] = ("smollm2-135m-instruct", [
        "--datasets", facts("smollm2-135m-instruct"),
        "--max-per-class", "60", "--eval-labels-dir", f"{benchmark}/smollm2-135m-instruct/unseen", "--variants", "none",
    ])
    return runs
