"""Write small lm-evaluation-harness samples files of real traces under ``tests/data/``.

GSM8K (``samples_gsm8k_<date>.jsonl``): what ``lm_eval --model hf --model_args
pretrained=<SmolLM2-135M-Instruct> --tasks gsm8k --num_fewshot 0 --apply_chat_template --log_samples``
writes, made here without lm-eval (not a dependency of this project):

* documents: real GSM8K rows of the shared dev set (the shortest worked solutions, so the tests stay fast);
* ``resps``: the embedded SmolLM2's greedy answer to lm-eval's GSM8K prompt (``Question: ...\\nAnswer:``
  in the model's chat template), cut at ``max_gen_toks`` and at lm-eval's ``until`` strings, for the first
  ``--generated`` documents; the dataset's own worked solution for the next ``--gold`` documents (correct
  traces, which a 135M model hardly writes: it answers 1 of 1000 GSM8K problems reliably);
* two rows per document, one per filter of lm-eval's ``gsm8k.yaml`` (``strict-match``: the number after
  "#### "; ``flexible-extract``: the last number), each with its ``exact_match`` computed as lm-eval does
  (its ``regexes_to_ignore`` on prediction and target, case ignored); the strict score is checked against
  :func:`grade.tasks.tasks.gsm8k_correct` (where both find a number they must agree);
* ``arguments`` / ``resps`` / ``filtered_resps`` / hashes laid out as lm-eval's ``EvaluationTracker``
  serialises them (``gen_args_0.arg_0`` is the prompt, ``arg_1`` the generation settings).

MATH (``--task math``, ``samples_hendrycks_math_algebra_<date>.jsonl``): the ``hendrycks_math`` layout
(``doc`` = problem, type, solution and the boxed ``answer`` its ``process_docs`` adds; prompt
``Problem: ...\\nAnswer:``; one filter, ``none``), ``exact_match`` from :func:`grade.tasks.tasks.math_correct`
(last ``\\boxed{}``, math-aware equality), rows of the shared MATH dev set (subject as ``type``; the shared
set has no ``level``).

    python scripts/build/make_trace_fixture.py [--task gsm8k|math] [--generated 3] [--gold 3] [--max-gen-toks 96]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/data

UNTIL = ["Question:", "</s>", "<|im_end|>"]
IGNORE = [",", r"\$", r"(?s).*#### ", r"\.$"]
FILTERS = {  # lm-eval's gsm8k.yaml: (regex, which match)
    "strict-match": (r"#### (\-?[0-9\.\,]+)", 0),
    "flexible-extract": (r"(-?[$0-9.,]{2,})|(-?[0-9]+)", -1),
}


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def regex_filter(response: str, pattern: str, select: int) -> str:
    """lm-eval's RegexFilter followed by take_first, for one response."""
    found = re.findall(pattern, response)
    if not found:
        return "[invalid]"
    match = found[select]
    if isinstance(match, tuple):
        match = next((m for m in match if m), "[invalid]")
    return match.strip()


def exact_match(prediction: str, reference: str) -> float:
    for pattern in IGNORE:
        prediction, reference = re.sub(pattern, "", prediction), re.sub(pattern, "", reference)
    return float(prediction.lower() == reference.lower())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--generated", type=int, default=3)
    parser.add_argument("--gold", type=int, default=3)
    parser.add_argument("--max-gen-toks", type=int, default=96)
    parser.add_argument("--task", choices=("gsm8k", "math"), default="gsm8k")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    name = "gsm8k" if args.task == "gsm8k" else "hendrycks_math_algebra"
    args.out = args.out or ROOT / "tests" / "data" / f"samples_{name}_2025-11-26T17-00-00.000000.jsonl"

    import torch

    import grade
    from grade.models.generation import DecodeSettings, generate
    from grade.tasks.tasks import datasets_dir, gsm8k_correct, gsm8k_final_number, last_boxed, math_correct

    torch.set_num_threads(1)
    rows = [json.loads(line) for line in (datasets_dir() / args.task / "dev.jsonl").open() if line.strip()]
    rows = [r for r in rows[:200] if "[asy]" not in r["solution"]]
    rows = sorted(rows, key=lambda r: len(r["solution"]))[: args.generated + args.gold]
    lm = grade.load_model("smollm2-135m-instruct")
    filters = FILTERS if args.task == "gsm8k" else {"none": None}
    lines = []
    for doc_id, row in enumerate(rows):
        if args.task == "gsm8k":
            doc, target, lead = {"question": row["question"], "answer": row["solution"]}, row["solution"], "Question"
        else:
            doc = {"problem": row["question"], "type": row.get("subject"), "solution": row["solution"],
                   "answer": last_boxed(row["solution"])}
            target, lead = doc["answer"], "Problem"
        prompt = lm.tokenizer.apply_chat_template([{"role": "user", "content": f"{lead}: {row['question']}\nAnswer:"}],
                                                  tokenize=False, add_generation_prompt=True)
        if doc_id < args.generated:
            ids = lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            answer = generate(lm, [ids], DecodeSettings(args.max_gen_toks))[0][0]
            text = lm.tokenizer.decode(answer.token_ids, skip_special_tokens=True)
            for stop in UNTIL:
                text = text.split(stop)[0]
        else:
            text = row["solution"]
        gen_kwargs = {"until": UNTIL, "do_sample": False, "temperature": 0.0, "max_gen_toks": args.max_gen_toks}
        for name, rule in filters.items():
            if rule is None:  # hendrycks_math: no filter, its process_results checks the last boxed answer
                filtered, score = text, int(math_correct(text, [doc["answer"]]))
            else:
                filtered = regex_filter(text, *rule)
                score = exact_match(filtered, doc["answer"])
                if name == "strict-match" and filtered != "[invalid]" and gsm8k_final_number(text) is not None:
                    assert bool(score) == gsm8k_correct(text, row["answers"]), (doc_id, text)
            lines.append({
                "doc_id": doc_id, "doc": doc, "target": target,
                "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": gen_kwargs}},
                "resps": [[text]], "filtered_resps": [filtered], "filter": name, "metrics": ["exact_match"],
                "doc_hash": _hash(json.dumps(doc, indent=2, ensure_ascii=False)), "prompt_hash": _hash(prompt),
                "target_hash": _hash(target), "exact_match": score,
            })
            print(f"doc {doc_id} {name:16s} {filtered[:12]!r:>14} exact_match={score:.0f}  {text[:70]!r}")
    # lm-eval writes all rows of the first filter, then all rows of the next
    lines.sort(key=lambda r: list(filters).index(r["filter"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8")
    print(f"wrote {len(lines)} rows ({len(rows)} documents x {len(filters)} filters) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
