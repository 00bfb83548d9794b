"""Pick Home's per-model examples from the models' own labels (``make examples``): questions the model
knows and questions it gets wrong, as its sampled answers showed, never a hand-typed verdict.

Rule, per embedded model, from ``data/labels/<model>/<dataset>.jsonl.xz`` (written by ``grade label``:
each row's ``samples``, ``n_correct`` / ``n_samples`` and ``accuracy``):

* TriviaQA (closed-book facts): the three shortest questions every sample answered right (accuracy 1.0)
  and the three shortest no sample answered right (accuracy 0.0);
* GSM8K (word problems): the shortest of each, where one exists (:data:`SOURCES`).

Shortest (fewest characters, then the id) because a short question reads at a glance and analyses fast.
A known question whose majority answer is right only on a gold answer the question itself holds is left
out: the lenient matcher counts an answer that repeats the question as right ("What is Iggy Pop's real
name?" -> "Iggy Pop's real name is Iggy Pop.").
Writes ``studio/examples.json``: model -> list of {label, question, context, task, dataset, id,
n_correct, n_samples}; and ``studio/trace_examples.json`` for the Reasoning trace page: model -> the
:data:`TRACE_PROBLEMS` shortest GSM8K problems every sampled answer solved and as many none solved, with their
gold answers and worked solutions (a right and a wrong trace of the model's own to set side by side).

Usage: ``python scripts/build/build_examples.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "studio" / "examples.json"
TRACE_OUT = ROOT / "studio" / "trace_examples.json"
TRACE_PROBLEMS = 4  # per outcome
MODELS = ("smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-1.5b-instruct")
#: dataset -> (display name, questions per class)
SOURCES = {"triviaqa": ("TriviaQA", 3), "gsm8k": ("GSM8K", 1)}


def right_without_the_question(row: dict) -> bool:
    """Whether the row's majority answer is right on a gold answer the question does not itself hold (a
    short-answer row; other tasks are checked otherwise and always pass)."""
    from grade.tasks.tasks import normalize_answer, qa_lenient

    if (row.get("task") or "qa") != "qa":
        return True
    question = f" {normalize_answer(row['question'])} "
    hidden = [a for a in row.get("answers") or [] if f" {normalize_answer(str(a))} " not in question]
    return qa_lenient(row.get("majority") or "", hidden)


def pick(rows: list[dict], accuracy: float, count: int) -> list[dict]:
    chosen = [r for r in rows if r.get("accuracy") is not None and float(r["accuracy"]) == accuracy
              and (accuracy < 1.0 or right_without_the_question(r))]
    return sorted(chosen, key=lambda r: (len(r["question"]), str(r["id"])))[:count]


def examples_for(model: str) -> list[dict]:
    from grade.batch.features import read_labelled
    from grade.common.io import find_jsonl

    out = []
    for dataset, (shown, count) in SOURCES.items():
        path = find_jsonl(ROOT / "data" / "labels" / model, dataset)
        if path is None:
            continue
        rows = read_labelled(path)
        for accuracy, verdict in ((1.0, "knows"), (0.0, "gets wrong")):
            for row in pick(rows, accuracy, count):
                right, total = int(row["n_correct"]), int(row["n_samples"])
                out.append({
                    "label": f"{shown}, it {verdict} ({right}/{total} sampled answers right): {row['question'][:60]}",
                    "question": row["question"], "context": row.get("context"), "task": row.get("task") or "qa",
                    "dataset": dataset, "id": str(row["id"]), "n_correct": right, "n_samples": total,
                })
    return out


def trace_problems_for(model: str) -> list[dict]:
    """GSM8K problems the model always solved and never solved when its answers were sampled."""
    from grade.batch.features import read_labelled
    from grade.common.io import find_jsonl
    from grade.tasks.tasks import load_questions

    path = find_jsonl(ROOT / "data" / "labels" / model, "gsm8k")
    if path is None:
        return []
    rows = read_labelled(path)
    solutions = {q.id: q.solution for q in load_questions("gsm8k")}
    out = []
    for accuracy, verdict in ((1.0, "solved"), (0.0, "failed")):
        for row in pick(rows, accuracy, TRACE_PROBLEMS):
            right, total = int(row["n_correct"]), int(row["n_samples"])
            out.append({"label": f"{verdict} {right}/{total} when sampled: {row['question'][:70]}",
                        "question": row["question"], "answers": list(row["answers"]),
                        "solution": solutions.get(str(row["id"])), "id": str(row["id"]),
                        "n_correct": right, "n_samples": total})
    return out


def main() -> int:
    examples = {model: found for model in MODELS if (found := examples_for(model))}
    OUT.write_text(json.dumps(examples, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    traces = {model: found for model in MODELS if (found := trace_problems_for(model))}
    TRACE_OUT.write_text(json.dumps(traces, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for model, found in traces.items():
        print(f"{model}: {len(found)} trace problems", file=sys.stderr)
    for model, found in examples.items():
        print(f"{model}: {len(found)} examples", file=sys.stderr)
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
