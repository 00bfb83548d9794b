"""``grade/datasets/real_step_errors/<dataset>_written.jsonl.xz`` from the writers' files (see that folder's README).

    python scripts/build/build_written_traces.py [--dataset gsm8k|math] OUT_0.jsonl [OUT_1.jsonl ...]

Each input line is one trace written in the style of a 7B-70B chat model for a GSM8K or MATH dev problem, correct or with
one planted first error, marked by its writer as a paragraph (``first_wrong_paragraph``, 0-based in
``trace.split("\\n\\n")``) and the exact text where the error first shows (``first_wrong_text``). Here each mark
becomes the annotation files' ``first_wrong_step`` (0-based in ``split_steps(trace)``: the step holding that
text's first character), every mark is checked (text inside its paragraph, the step in that paragraph, a correct
trace's final answer equal to the gold answer by the task's own matcher), and the split is fixed by the problem id as in
every annotation file (dev where ``int(sha1(id), 16) % 2 == 0``). A line that fails a check is left out and
counted; the script stops if more than 5 % fail.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

FOLDER = ROOT / "grade/datasets/real_step_errors"
KINDS = ("misread", "plan", "double_count_or_omission", "units", "calculation", "final_answer", "algebra")
ANNOTATOR = ("written and annotated by a large language model under a written specification "
             "(scripts/build/build_written_traces.py): in the style of a 7B-70B chat model, the first error planted and "
             "marked by its writer")


def split_of(problem: str) -> str:
    return "dev" if int(hashlib.sha1(problem.encode()).hexdigest(), 16) % 2 == 0 else "test"


def converted(row: dict, dataset: str = "gsm8k") -> dict:
    """The annotation row of one written trace; ValueError says why a line is refused."""
    from grade.gradients.losses import split_steps
    from grade.steps.scoring import step_paragraphs
    from grade.tasks.tasks import Question, is_correct

    trace, flawed = row["trace"].strip(), row["first_wrong_paragraph"] is not None
    paragraphs = trace.split("\n\n")
    if any(not p.strip() for p in paragraphs):
        raise ValueError("an empty paragraph")
    spans = split_steps(trace)
    ends_right = bool(is_correct(Question(id="", question="", answers=list(row["answers"]), task=dataset), trace))
    step = None
    if flawed:
        k, text = int(row["first_wrong_paragraph"]), row["first_wrong_text"]
        if row.get("kind") not in KINDS:
            raise ValueError(f"kind {row.get('kind')!r}")
        if not 0 <= k < len(paragraphs) or not text or text not in paragraphs[k]:
            raise ValueError("first_wrong_text is not in its paragraph")
        at = sum(len(p) + 2 for p in paragraphs[:k]) + paragraphs[k].index(text)
        step = next(i for i, (a, b) in enumerate(spans) if a <= at < b)
        para = step_paragraphs(trace, spans)
        if para[step] != k:  # the step holding the text starts in an earlier paragraph: the first one starting in k
            step = next(i for i, p in enumerate(para) if p == k)
        if bool(row["final_correct"]) != ends_right:
            raise ValueError(f"final_correct {row['final_correct']} but the matcher says {ends_right}")
    elif not ends_right or not row["final_correct"]:
        raise ValueError("a correct trace whose final answer is not the gold answer")
    problem = str(row["problem"])
    return {"id": row["id"], "problem": problem, "dataset": dataset, "model": f"written ({row['style']} style)",
            "source": "written with a planted error" if flawed else "written correct",
            "question": row["question"], "answers": row["answers"], "trace": trace, "n_steps": len(spans),
            "first_wrong_step": step, "first_wrong_text": row["first_wrong_text"] if flawed else None,
            "first_wrong_paragraph": row["first_wrong_paragraph"], "n_paragraphs": len(paragraphs),
            "kind": row["kind"] if flawed else None, "final_correct": ends_right, "note": row["note"],
            "confidence": "high", "annotator": ANNOTATOR, "style": row["style"], "split": split_of(problem)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", type=Path)
    p.add_argument("--dataset", choices=("gsm8k", "math"), default="gsm8k")
    p.add_argument("--out", type=Path, default=None, help="default FOLDER/<dataset>_written.jsonl.xz")
    args = p.parse_args(argv)
    args.out = args.out or FOLDER / f"{args.dataset}_written.jsonl.xz"
    rows, refused, seen = [], Counter(), set()
    for path in args.inputs:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if row["id"] in seen:
                refused["the same id twice"] += 1
                continue
            try:
                rows.append(converted(row, args.dataset))
                seen.add(row["id"])
            except (KeyError, ValueError, TypeError) as exc:
                refused[str(exc)[:60]] += 1
                print(f"{path.name}:{number} {row.get('id')}: {exc}", file=sys.stderr)
    total = len(rows) + sum(refused.values())
    if sum(refused.values()) > 0.05 * total:
        raise SystemExit(f"{sum(refused.values())} of {total} lines refused: {dict(refused)}")
    rows.sort(key=lambda r: r["id"])
    with lzma.open(args.out, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    wrong = [r for r in rows if r["first_wrong_step"] is not None]
    print(f"{len(rows)} traces ({len(wrong)} with an error) -> {args.out}; refused {dict(refused)}")
    for split in ("dev", "test"):
        part = [r for r in rows if r["split"] == split]
        print(f"  {split}: {sum(r['first_wrong_step'] is not None for r in part)} with an error, "
              f"{sum(r['first_wrong_step'] is None for r in part)} correct")
    print("  kinds:", dict(Counter(r["kind"] for r in wrong)), "styles:", dict(Counter(r["style"] for r in rows)))
    print("  error paragraph / paragraphs:", dict(Counter(
        f"{min(2, 3 * r['first_wrong_paragraph'] // r['n_paragraphs'])}/3" for r in wrong)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
