"""The cross-fitted benchmark's written output (:mod:`grade.studies.crossfit`): tables as CSV and Markdown,
the per-question scores they are computed from, and the sentences on where GRADE wins and loses.

Files under the results folder:

* ``main_table.{csv,md}``: per dataset, every method on the same questions (n, n answerable, Acc and AUROC
  with their intervals); those questions' scores, long form (the app's curves), are read from
  ``crossfit_scores.csv.xz`` (:func:`grade.studies.crossfit.test_scores`), not written a second time;
* ``all_questions.csv``: each method on every question it scores;
* ``grade_variants.csv``: every GRADE variant fitted, and how often the inner selection chose it;
* ``paired.csv``: AUROC differences to P-Entropy, to length and to self-consistency (paired bootstrap);
* ``selective_answering.{csv,md}``, ``transfer.csv``, ``confidently_wrong.csv``;
* ``crossfit_scores.csv.xz`` (one row per labelled question, one column per method and variant) and
  ``crossfit_state.json.xz`` (fingerprints, per-fold thresholds and choices): read back by the next run;
* ``findings.md`` and ``summary.json``.

The folder loads as a :class:`~grade.studies.runs.BenchmarkResult` (the app's Benchmarks page).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .crossfit import SCORES_FILE, STATE_FILE, CrossfitRun, LOSSES, main_methods, read_state, read_store, write_state
from .crossfit_tables import PAIRED_REFERENCES, all_question_rows, confidently_wrong_rows, main_rows, paired_rows, \
    selective_rows, transfer_rows, variant_rows
from .output import format_number, selective_markdown, write_csv


def _ci(value, lo, hi) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{format_number(value)} [{format_number(lo, 2)}, {format_number(hi, 2)}]"


def main_markdown(rows: list[dict], info: dict) -> str:
    """Methods as rows, per dataset ``Acc`` and ``AUROC [95% CI]``; below, each dataset's questions."""
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    if not datasets:
        return "No dataset has questions scored by every method.\n"
    cell = {(r["dataset"], r["method"]): r for r in rows}
    lines = ["| method | " + " | ".join(f"{d} Acc [95% CI] | {d} AUROC [95% CI]" for d in datasets) + " |",
             "|---|" + "---|---|" * len(datasets)]
    for m in main_methods():
        if not any((d, m) in cell for d in datasets):
            continue
        parts = []
        for d in datasets:
            r = cell.get((d, m))
            parts += ["n/a", "n/a"] if r is None else [_ci(r["acc"], r["acc_lo"], r["acc_hi"]),
                                                         _ci(r["auroc"], r["auroc_lo"], r["auroc_hi"])]
        lines.append(f"| {m} | " + " | ".join(parts) + " |")
    lines += ["", "Questions per dataset (every method scores the same ones; the labelled questions and how many of "
                  "them each input covers):", "",
              "| dataset | n | n answerable | labelled (answerable) | GRADE_pre | GRADE_pos | P-Entropy | Align-P / SAPLMA | Self-consistency / EigenScore |",
              "|---|---|---|---|---|---|---|---|---|"]
    for d in datasets:
        e = info[d]
        have = e.get("inputs", {})
        lines.append(f"| {d} | {e['common']['n']} | {e['common']['answerable']} | {e['labelled']} ({e['answerable']}) | "
                     f"{have.get('GRADE_pre', 0)} | {have.get('GRADE_pos', 0)} | {have.get('P-Entropy', 0)} | "
                     f"{have.get('Align-P', 0)} / {have.get('SAPLMA', 0)} | {have.get('Self-consistency', 0)} / "
                     f"{have.get('EigenScore', 0)} |")
    short = [d for d in datasets if info[d]["common"]["n"] < 0.5 * info[d]["labelled"]]
    if short:
        lines += ["", f"**Baselines cover few questions** of {', '.join(short)}: the table is restricted to those "
                      "questions (where every method has its inputs). GRADE's probes are still trained on every "
                      "labelled question of the other folds, the supervised baselines only on the questions their "
                      "caches cover; `all_questions.csv` scores each method on all it can."]
    return "\n".join(lines) + "\n"


def findings(paired: list[dict], main: list[dict]) -> list[str]:
    """Sentences on where each GRADE form beats or trails each paired reference beyond the paired interval."""
    out = []
    for ref in PAIRED_REFERENCES:
        rows = [r for r in paired if r["reference"] == ref and r["method"].startswith("GRADE")]
        if not rows:
            continue
        by = {}
        for r in rows:
            by.setdefault(r["verdict"], []).append(r)
        text = []
        for verdict in ("wins", "loses"):
            cells = by.get(verdict, [])
            if cells:
                text.append(f"**{verdict}** on " + "; ".join(
                    f"{r['dataset']} ({r['method']} {r['auroc']:.3f} vs {r['auroc_reference']:.3f}, "
                    f"Δ {r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}], n={r['n']})" for r in cells))
        ties = sorted({r["dataset"] for r in by.get("tie", [])})
        if ties:
            text.append(f"within the interval for at least one form on {', '.join(ties)}")
        out.append(f"Against {ref} (paired bootstrap of the AUROC difference on the questions both score): GRADE "
                   + "; ".join(text) + ".")
    return out


def write_crossfit(run: CrossfitRun, out: str | Path) -> list[Path]:
    """Every table of ``run`` under ``out`` (see the module docstring); returns the files written."""
    from .runs import BenchmarkResult

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = run.config
    old_transfer = (read_state(out) or {}).get("transfer", [])
    test_scores: list[dict] = []
    main = main_rows(run, test_scores)
    selective = selective_rows(test_scores, cfg.n_boot, cfg.ci)
    paired = paired_rows(run)
    transfer = transfer_rows(run, old_transfer)
    tables = {"main_table": main, "all_questions": all_question_rows(run), "grade_variants": variant_rows(run),
              "paired": paired, "selective_answering": selective,
              "transfer": [{k: v for k, v in r.items() if k != "fingerprint"} for r in transfer],
              "confidently_wrong": confidently_wrong_rows(run)}
    written = []
    for name, rows in tables.items():
        if rows:
            write_csv(rows, out / f"{name}.csv")
            written.append(out / f"{name}.csv")
    # the long-form scores are the main table's rows of crossfit_scores.csv.xz (test_scores reads them back):
    # a second copy would double the largest file of the folder
    (out / BenchmarkResult.SCORES_FILE).unlink(missing_ok=True)
    (out / "main_table.md").write_text(main_markdown(main, run.info), encoding="utf-8")
    notes = list(run.notes) + findings(paired, main)
    protocol = {"protocol": "crossfit", "k": cfg.k, "seed": cfg.seed, "n_boot": cfg.n_boot, "ci": cfg.ci,
                "epochs": cfg.epochs, "mlp_in_selection": cfg.mlp_in_selection, "min_per_class": cfg.min_per_class}
    result = BenchmarkResult(cfg.model, protocol, run.info, main, tables["transfer"], [], [], tables["confidently_wrong"],
                             notes, [], selective, test_scores)
    (out / "selective_answering.md").write_text(selective_markdown(result), encoding="utf-8")
    (out / "findings.md").write_text("\n\n".join(findings(paired, main)) + "\n", encoding="utf-8")
    save_store(run, out, transfer)
    (out / "summary.json").write_text(json.dumps({"model": cfg.model, "protocol": protocol, "datasets": run.info,
                                                  "notes": notes}, indent=2, default=_json) + "\n", encoding="utf-8")
    return written + [out / p for p in ("main_table.md", "selective_answering.md", "findings.md", SCORES_FILE,
                                        STATE_FILE, "summary.json")]


def save_store(run: CrossfitRun, out: str | Path, transfer: list[dict] | None = None) -> None:
    """``crossfit_scores.csv.xz`` (every column's per-question scores) and ``crossfit_state.json.xz`` (what they
    were computed from), which the next run reads back (:func:`grade.studies.crossfit.read_store`)."""
    import pandas as pd

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    frames, state = [], {"version": 1, "datasets": {}, "transfer": transfer or []}
    if transfer is None:  # keep the transfer rows of the last full write
        state["transfer"] = (read_state(out) or {}).get("transfer", [])
    for name, d in run.data.items():
        if name not in run.columns:
            continue
        frame = {"dataset": name, "id": d.ids, "label": d.y, "fold": d.folds, "confidently_wrong": d.confidently_wrong.astype(int)}
        cols = run.columns[name]
        frame.update({key: c.scores for key, c in cols.items()})
        frames.append(pd.DataFrame(frame))
        state["datasets"][name] = {key: {"fingerprint": c.fingerprint, "thresholds": [None if not math.isfinite(t) else float(t)
                                          for t in c.thresholds], "auroc": c.auroc, "extra": c.extra}
                                   for key, c in cols.items()}
    if frames:
        pd.concat(frames, ignore_index=True).to_csv(out / SCORES_FILE, index=False, compression={"method": "xz"})
    write_state(out, state, default=_json)


def _json(value):
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return None if not math.isfinite(value) else float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


#: GRADE's published AUROCs on Llama-3.1-8B (the paper's headline table), GRADE_pre and GRADE_pos per dataset: the
#: reproduction's reference. The paper's Qwen2.5-7B numbers are not in our notes, so they are not set beside ours.
PAPER_LLAMA_8B_AUROC = {
    "nq_open": (0.888, 0.841), "triviaqa": (0.895, 0.774), "hotpotqa_closed": (0.810, 0.857),
    "mmlu": (0.751, 0.778), "gsm8k": (0.767, 0.893), "math": (0.841, 0.962),
}


def paper_lines(folder: Path) -> list[str]:
    """The paper's AUROCs beside this model's cross-fitted ones on every question each form scores
    (``all_questions.csv``): the paper's ratio-only probe and the shipped form, ``pre`` and ``pos``."""
    import csv

    path = folder / "all_questions.csv"
    if not path.is_file():
        return []
    rows = {(r["dataset"], r["method"]): r for r in csv.DictReader(path.open(encoding="utf-8"))}
    forms = ("GRADE_pre", "GRADE_pre (shipped)", "GRADE_pos", "GRADE_pos (shipped)")

    def cell(dataset: str, method: str) -> str:
        r = rows.get((dataset, method))
        if r is None or not r.get("auroc"):
            return "–"
        return f"{_ci(float(r['auroc']), float(r['auroc_lo']), float(r['auroc_hi']))} (n {r['n']})"

    lines = ["| dataset | paper GRADE_pre (Llama-3.1-8B) | paper GRADE_pos | "
             + " | ".join(f"{m} here" for m in forms) + " |", "|---" * (3 + len(forms)) + "|"]
    for dataset, (pre, pos) in PAPER_LLAMA_8B_AUROC.items():
        lines.append(f"| {dataset} | {pre:.3f} | {pos:.3f} | " + " | ".join(cell(dataset, m) for m in forms) + " |")
    return lines


def readme_section(folder: Path) -> list[str]:
    """The lines ``scripts/build/run_benchmark.py`` writes into ``results/README.md`` for a cross-fitted run."""
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    p = summary["protocol"]
    lines = [f"## {folder.name}", "",
             f"**Cross-fitted** (`python -m grade benchmark --crossfit`): every labelled question is scored once by "
             f"detectors that never saw it (stratified {p['k']}-fold by question, seed {p['seed']}; what a detector "
             "chooses is chosen on an inner split of its training folds; intervals: "
             f"{p['n_boot']} stratified bootstrap draws of the pooled out-of-fold scores).", "",
             "| dataset | labelled | answerable | unanswerable | in the main table |", "|---|---|---|---|---|"]
    for name, e in summary["datasets"].items():
        status = (f"{e['common']['n']} ({e['common']['answerable']} answerable)" if e.get("common")
                  else f"no: {e.get('reason', 'no question has every input')}")
        lines.append(f"| {name} | {e.get('labelled', '–')} | {e.get('answerable', '–')} | {e.get('unanswerable', '–')} | {status} |")
    lines += ["", "Main table (AUROC and accuracy with 95% stratified-bootstrap intervals):", ""]
    lines += (folder / "main_table.md").read_text(encoding="utf-8").strip().splitlines()
    paper = paper_lines(folder)
    if paper:
        lines += ["", "The paper's AUROCs (Llama-3.1-8B, its own split) beside this model's, cross-fitted on every question "
                  "each form scores:", ""] + paper
    if (folder / "findings.md").is_file():
        lines += ["", "Where GRADE wins and loses:", ""] + (folder / "findings.md").read_text(encoding="utf-8").strip().splitlines()
    lines += ["", f"In `{folder.name}/`: every GRADE variant tried (`grade_variants.csv`), each method on every question "
              "it scores (`all_questions.csv`), the paired differences (`paired.csv`), transfer (`transfer.csv`), the "
              "confidently wrong questions (`confidently_wrong.csv`) and every question's cross-fitted score "
              "(`crossfit_scores.csv.xz`)."]
    if (folder / "selective_answering.md").is_file():
        lines += ["", "Selective answering (main table questions):", ""]
        lines += (folder / "selective_answering.md").read_text(encoding="utf-8").strip().splitlines()
    for note in summary.get("notes", []):
        if not note.startswith("Against"):
            lines += ["", note]
    return lines + [""]


__all__ = ["PAPER_LLAMA_8B_AUROC", "write_crossfit", "readme_section", "paper_lines", "main_markdown", "findings", "read_store", "LOSSES"]
