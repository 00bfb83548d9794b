"""Build the external annotated step-error files (other models' GSM8K- and MATH-level solutions whose first wrong
step people marked) in the project's annotation format, outside the repository.

    python scripts/studies/external_step_errors.py [--mr-gsm8k PATH] [--mr-ben PATH] [--out DIR]
                                                   [--mr-ben-extra physics chemistry biology]

PATH is a clone of the source repository (its git directory or work tree: every readable version of its files
in the history is read) or a folder holding its JSON files. Defaults: ``../shared/datasets/step_errors/MR-GSM8K``
and ``../shared/datasets/step_errors/Mr-Ben`` beside the checkout; DIR defaults to
``data/real_step_errors_external`` (git-ignored: the fetched data is not the project's to commit).
Writes ``mr_gsm8k.jsonl``, ``mr_ben_math.jsonl`` and ``gsm8k_reference.jsonl`` there (and ``mr_ben_<subject>.jsonl``
for each of ``--mr-ben-extra``: other subjects' annotated solutions by the same writers, training data only), readable by
``grade.steps.real_errors.annotated_traces(folder=DIR)``. Sources, licences and the format:
``grade/datasets/real_step_errors/README.md``.

Each solution's steps, as its source numbers them, become the trace's paragraphs (blank-line separated, the
"Step N:" label taken off); the annotated first wrong step becomes ``first_wrong_paragraph`` (0-based) and
``first_wrong_step``, the first of our steps (:func:`grade.gradients.losses.split_steps`) that starts in it.
Splits are fixed by the problem alone (``dev`` if ``int(sha1(problem), 16) % 2 == 0``), so a problem's
variants and every solution of it fall in one half.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared/datasets/step_errors"
OUT = ROOT / "data/real_step_errors_external"
STEP_LABEL = re.compile(r"^\s*step\s*\d+\s*[:.)]\s*", re.IGNORECASE)
ANNOTATOR = "people (the source's annotators), first error step and reason; kind by keyword rules on the reason"


def split_of(problem: str) -> str:
    return "dev" if int(hashlib.sha1(problem.encode()).hexdigest(), 16) % 2 == 0 else "test"


# ---- reading the sources: files in a folder, or every readable version in a git history


def _is_git(path: Path) -> Path | None:
    for candidate in (path, path / ".git", path / "repo"):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    return None


def _git(gitdir: Path, *args: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={gitdir}", *args], check=True, capture_output=True).stdout


def json_documents(path: Path, under: tuple[str, ...]) -> list[tuple[str, object]]:
    """(name, parsed JSON) of every ``*.json`` / ``*.jsonl`` file below ``path`` whose path starts with one of
    ``under`` (in a git history: every distinct readable blob of such a path in any commit)."""
    gitdir = _is_git(path)
    names: list[tuple[str, bytes]] = []
    if gitdir is None:
        for f in sorted(path.rglob("*")):
            rel = f.relative_to(path).as_posix()
            if f.is_file() and f.suffix in (".json", ".jsonl") and (not under or rel.startswith(under)):
                names.append((rel, f.read_bytes()))
    else:
        seen = set()
        for commit in _git(gitdir, "rev-list", "--all").decode().split():
            for line in _git(gitdir, "ls-tree", "-r", commit).decode().splitlines():
                meta, name = line.split("\t", 1)
                blob = meta.split()[2]
                if blob in seen or not name.endswith((".json", ".jsonl")) or (under and not name.startswith(under)):
                    continue
                seen.add(blob)
                try:  # a blob the clone lacks (too large for its host) is skipped
                    names.append((name, _git(gitdir, "cat-file", "blob", blob)))
                except subprocess.CalledProcessError:
                    continue
    out = []
    for name, data in names:
        text = data.decode("utf-8")
        try:
            out.append((name, json.loads(text)))
        except json.JSONDecodeError:
            out.append((name, [json.loads(line) for line in text.splitlines() if line.strip()]))
    return out


# ---- the annotation format


def _paragraphs(steps: list[str]) -> list[str]:
    out = []
    for s in steps:
        text = STEP_LABEL.sub("", str(s).strip(), count=1).strip() or str(s).strip()
        out.append(re.sub(r"\n[ \t]*\n+", "\n", text))  # a step stays one paragraph
    return out


def annotation_row(*, id: str, problem: str, dataset: str, model: str, source: str, question: str, answers: list,
                   steps: list[str], first_wrong_paragraph: int | None, reason: str | None, kind: str | None,
                   final_correct: bool | None, annotator: str, **extra) -> dict | None:
    """One row of the project's annotation format, or None where a source step would hold none of our steps."""
    from grade.gradients.losses import split_steps
    from grade.steps.scoring import step_paragraphs

    paragraphs = _paragraphs(steps)
    if not paragraphs or not all(p.strip() for p in paragraphs):
        return None
    trace = "\n\n".join(paragraphs)
    spans = split_steps(trace)
    para = step_paragraphs(trace, spans)
    if sorted(set(int(p) for p in para)) != list(range(len(paragraphs))):
        return None
    first = None
    if first_wrong_paragraph is not None:
        if not 0 <= first_wrong_paragraph < len(paragraphs):
            return None
        first = int(min(k for k, p in enumerate(para) if p == first_wrong_paragraph))
    a, b = spans[first] if first is not None else (0, 0)
    return {"id": id, "problem": problem, "dataset": dataset, "model": model, "source": source, "question": question,
            "answers": [str(x) for x in answers], "trace": trace, "n_steps": len(spans), "first_wrong_step": first,
            "first_wrong_text": trace[a:b] if first is not None else None,
            "first_wrong_paragraph": first_wrong_paragraph, "n_paragraphs": len(paragraphs), "kind": kind,
            "final_correct": final_correct, "note": reason or "all steps correct", "confidence": "high",
            "annotator": annotator, "split": split_of(problem), **extra}


def _gsm8k_problem(question: str) -> str:
    # a reversed question (a number of the original replaced by X) keeps the original's opening words: the
    # variants of one GSM8K problem share its first eight words and so its split
    words = re.findall(r"[a-z]+", question.lower())[:8]
    return "mr-gsm8k:" + hashlib.sha1(" ".join(words).encode()).hexdigest()[:12]


def mr_gsm8k_rows(path: Path) -> tuple[list[dict], list[dict], dict]:
    """(annotated solutions, reference solutions as correct traces, counts) of MR-GSM8K."""
    from grade.steps.kinds import kind_from_reason

    records: dict[tuple, dict] = {}
    for _, doc in json_documents(path, ("eval_results", "dataset")):
        for r in doc if isinstance(doc, list) else []:
            if isinstance(r, dict) and "model_output_steps" in r and "model_output_solution_correctness" in r:
                records.setdefault((r["question"], tuple(r["model_output_steps"])), r)
    rows, refs, counts = [], {}, {"records": len(records), "skipped": 0}
    for r in sorted(records.values(), key=lambda r: r["uuid"]):
        wrong = str(r["model_output_solution_correctness"]).lower() != "correct"
        step = r.get("model_output_solution_first_error_step")
        para = int(step) - 1 if wrong and str(step).strip().isdigit() else None
        if wrong and para is None:
            counts["skipped"] += 1
            continue
        reason = r.get("model_output_solution_first_error_reason") if wrong else None
        problem = _gsm8k_problem(r["question"])
        row = annotation_row(
            id=f"mr-gsm8k:{r['uuid']}", problem=problem, dataset="gsm8k", model="MR-GSM8K sampled solution",
            source="MR-GSM8K (human-annotated)", question=r["question"], answers=[r["ground_truth_answer"]],
            steps=list(r["model_output_steps"]), first_wrong_paragraph=para, reason=reason,
            kind=kind_from_reason(reason) if wrong else None,
            final_correct=str(r.get("model_output_answer_correctness")).lower() == "correct", annotator=ANNOTATOR,
            question_type=r.get("question_type"))
        if row is None:
            counts["skipped"] += 1
            continue
        rows.append(row)
        solution = str(r.get("ground_truth_solution") or "").strip()
        if solution and problem not in refs:
            lines = [line for line in solution.splitlines() if line.strip()]
            ref = annotation_row(
                id=f"gsm8k-reference:{problem}", problem=problem, dataset="gsm8k", model="GSM8K reference solution",
                source="GSM8K reference (as MR-GSM8K gives it)", question=r["question"],
                answers=[r["ground_truth_answer"]], steps=lines, first_wrong_paragraph=None, reason=None, kind=None,
                final_correct=True, annotator="GSM8K's authors (a reference solution, taken as correct)",
                question_type=r.get("question_type"))
            if ref is not None:
                refs[problem] = ref
    counts["rows"] = len(rows)
    return rows, list(refs.values()), counts


_CHOICE = re.compile(r"choice[\\_\s:]*\(?([A-E])\b", re.IGNORECASE)


def mr_ben_rows(path: Path, subjects: tuple[str, ...] = ("math",)) -> tuple[list[dict], dict]:
    """Annotated solutions of Mr-Ben's ``data/<subject>.json``."""
    from grade.steps.kinds import kind_from_reason

    rows, counts = [], {"records": 0, "skipped": 0, "answer unread": 0}
    under = tuple(f"data/{s}.json" for s in subjects)
    docs = json_documents(path, under) if _is_git(path) else [
        (n, d) for n, d in json_documents(path, ()) if Path(n).stem in subjects]
    seen = set()
    for name, doc in docs:
        for group in (doc.values() if isinstance(doc, dict) else []):
            for r in group:
                key = (r["Question_UUID"], r["Sampled_Model"])
                if key in seen:
                    continue
                seen.add(key)
                counts["records"] += 1
                wrong = str(r["Model_Solution_Correctness"]).lower() != "correct"
                step = str(r.get("Model_Solution_First_Error_Step", "")).strip()
                para = int(step) - 1 if wrong and step.isdigit() else None
                if wrong and para is None:
                    counts["skipped"] += 1
                    continue
                reasons = [x for x in (r.get("Model_Solution_Error_Reason") or []) if str(x).strip()]
                reason = str(reasons[0]).strip() if wrong and reasons else None
                chosen = _CHOICE.findall(str(r["Model_Solution_Steps"][-1])) or _CHOICE.findall(
                    " ".join(map(str, r["Model_Solution_Steps"])))
                if not chosen:
                    counts["answer unread"] += 1
                gold = str(r["Ground_Truth_Answer"]).strip()
                question = f"{str(r['Question']).strip()}\n\n{str(r['Options']).strip()}"
                row = annotation_row(
                    id=f"mr-ben:{r['Question_UUID']}:{r['Sampled_Model']}", problem=f"mr-ben:{r['Question_UUID']}",
                    dataset="math", model=str(r["Sampled_Model"]), source=f"Mr-Ben {Path(name).stem} (human-annotated)",
                    question=question, answers=[gold], steps=list(r["Model_Solution_Steps"]),
                    first_wrong_paragraph=para, reason=reason, kind=kind_from_reason(reason, math=True) if wrong else None,
                    final_correct=(chosen[-1].upper() == gold.upper()) if chosen else None, annotator=ANNOTATOR,
                    subject=r.get("Subject"))
                if row is None:
                    counts["skipped"] += 1
                    continue
                rows.append(row)
    counts["rows"] = len(rows)
    return rows, counts


def gsm8k_dev_reference_rows(n: int, exclude: set[str]) -> list[dict]:
    """GSM8K dev reference solutions (``grade/datasets``) that no annotation file holds, as correct traces."""
    from grade.tasks.tasks import load_questions

    out = []
    for q in load_questions("gsm8k"):
        if len(out) >= n:
            break
        if q.id in exclude or not q.solution:
            continue
        lines = [line for line in q.solution.splitlines() if line.strip()]
        row = annotation_row(id=f"gsm8k-reference:{q.id}", problem=q.id, dataset="gsm8k",
                             model="GSM8K reference solution", source="GSM8K reference (grade/datasets)",
                             question=q.question, answers=list(q.answers), steps=lines, first_wrong_paragraph=None,
                             reason=None, kind=None, final_correct=True,
                             annotator="GSM8K's authors (a reference solution, taken as correct)")
        if row is not None:
            out.append(row)
    return out


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mr-gsm8k", type=Path, default=SHARED / "MR-GSM8K")
    p.add_argument("--mr-ben", type=Path, default=SHARED / "Mr-Ben")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--gsm8k-references", type=int, default=150,
                   help="GSM8K dev reference solutions (grade/datasets) added as correct traces")
    p.add_argument("--mr-ben-extra", nargs="*", default=(), metavar="SUBJECT",
                   help="Mr-Ben subjects besides math written to mr_ben_<subject>.jsonl (e.g. physics chemistry)")
    args = p.parse_args(argv)
    from grade.steps.real_errors import annotated_traces

    done = 0
    if args.mr_gsm8k.exists():
        rows, refs, counts = mr_gsm8k_rows(args.mr_gsm8k)
        write_jsonl(args.out / "mr_gsm8k.jsonl", rows)
        taken = {t.problem for t in annotated_traces()}
        refs += gsm8k_dev_reference_rows(args.gsm8k_references, taken)
        write_jsonl(args.out / "gsm8k_reference.jsonl", refs)
        print(f"MR-GSM8K: {counts}; {len(refs)} reference solutions", file=sys.stderr)
        done += 1
    else:
        print(f"no MR-GSM8K at {args.mr_gsm8k}", file=sys.stderr)
    if args.mr_ben.exists():
        rows, counts = mr_ben_rows(args.mr_ben)
        write_jsonl(args.out / "mr_ben_math.jsonl", rows)
        print(f"Mr-Ben math: {counts}", file=sys.stderr)
        for subject in args.mr_ben_extra:
            rows, counts = mr_ben_rows(args.mr_ben, (subject,))
            write_jsonl(args.out / f"mr_ben_{subject}.jsonl", rows)
            print(f"Mr-Ben {subject}: {counts}", file=sys.stderr)
        done += 1
    else:
        print(f"no Mr-Ben at {args.mr_ben}", file=sys.stderr)
    return 0 if done else 2


if __name__ == "__main__":
    raise SystemExit(main())
