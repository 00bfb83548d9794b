"""Run the benchmark for both embedded models and write ``results/README.md`` from the CSVs.

Usage::

    python scripts/build/run_benchmark.py            # fill missing caches (loads the models), then tables
    python scripts/build/run_benchmark.py --offline  # tables and README from the caches only (about a minute)

The README's numbers are read from ``results/<model>/*.csv`` by this script, so they always equal
the CSVs; so are the numbers the app's cards cite (``grade/assets/measured/<model>.json``,
:func:`grade.verdict.measured.write_measured`), rewritten on every run, ``--readme-only`` included. Which labelled files each model uses is written down in :func:`grade.studies.benchmark_runs.benchmark_runs`.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

from grade.commands.benchmark import repository_runs

ROOT = Path(__file__).resolve().parents[2]
#: the runs on this repository's data folders, relative to ROOT (each run's command starts there)
RUNS = repository_runs()


def _fmt(x, digits=3) -> str:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "–"
    return "–" if math.isnan(x) else f"{x:.{digits}f}"


def model_section(name: str) -> list[str]:
    from grade.studies import BenchmarkResult
    from grade.studies.crossfit import STATE_FILE

    folder = ROOT / "results" / name
    if (folder / STATE_FILE).is_file():  # a cross-fitted run writes its own section
        from grade.studies.crossfit_report import readme_section

        return readme_section(folder)
    result = BenchmarkResult.load(folder)
    lines = [f"## {folder.name}", ""]
    if folder.name.endswith("-unseen"):
        lines += ["Scored on **questions not seen during development** (`--eval-labels-dir`): the detectors are "
                  "trained and validated on the development rows of the facts pool and tested on newly labelled "
                  "world-facts questions.", ""]
    if folder.name.endswith("-documents"):
        lines += ["HotpotQA's questions asked **with and without their two supporting paragraphs** (`context`), every "
                  "labelled question (no per-class cap). The with/without-document and short/long-document studies "
                  "train a detector under one condition and test it under the other.", ""]
    lines += ["| dataset | labelled questions | answerable | unanswerable | no label | benchmarked |", "|---|---|---|---|---|---|"]
    for name, entry in result.datasets.items():
        sampled = entry.get("questions_sampled", "–")
        status = "yes" if entry.get("eligible") else f"no: {entry.get('reason', '')}"
        lines.append(f"| {name} | {sampled} | {entry.get('answerable', '–')} | {entry.get('unanswerable', '–')} | "
                     f"{entry.get('no_label', '–')} | {status} |")
    lines += ["", "Main table (test split; AUROC with 95% stratified-bootstrap interval):", ""]
    lines += (folder / "main_table.md").read_text(encoding="utf-8").strip().splitlines()
    if (folder / "selective_answering.md").is_file():
        lines += ["", "Selective answering (the model answers the test questions a detector scores highest and abstains "
                      "on the rest; accuracy of the answered questions at 50% coverage and the area under the "
                      "accuracy-coverage curve, 95% stratified-bootstrap intervals; [risk_coverage.png]"
                      f"({folder.name}/risk_coverage.png) draws the curves):", ""]
        lines += (folder / "selective_answering.md").read_text(encoding="utf-8").strip().splitlines()
    if result.robustness:
        lines += ["", "Robustness (same test questions, detectors not retrained; relative change):", "",
                  "| dataset | perturbation | method | AUROC | AUROC perturbed | rel. change AUROC | Acc | Acc perturbed | rel. change Acc |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in result.robustness:
            lines.append(f"| {r['dataset']} | {r['variant']} | {r['method']} | {_fmt(r['auroc'])} | {_fmt(r['auroc_perturbed'])} | "
                         f"{_fmt(r['auroc_rel_change'])} | {_fmt(r['acc'])} | {_fmt(r['acc_perturbed'])} | {_fmt(r['acc_rel_change'])} |")
    if result.ablations:
        lines += ["", "GRADE ablations (test AUROC [95% CI]):", "", "| dataset | loss | variant | Acc | AUROC |", "|---|---|---|---|---|"]
        for r in result.ablations:
            lines.append(f"| {r['dataset']} | {r['loss']} | {r['variant']} | {_fmt(r['acc'])} | "
                         f"{_fmt(r['auroc'])} [{_fmt(r['auroc_lo'], 2)}, {_fmt(r['auroc_hi'], 2)}] |")
    cw = [r for r in result.confidently_wrong if r["dataset"] == "all"]
    if cw:
        lines += ["", f"Confidently wrong test questions (all samples agree and are wrong; n = {cw[0]['n']}): "
                      "accuracy = share flagged unanswerable.", "",
                  "| method | Acc |", "|---|---|"]
        lines += [f"| {r['method']} | {_fmt(r['acc'])} |" for r in cw]
    if result.conditions:
        lines += ["", "Trained under one condition, tested under the other (supervised detectors; AUROC [95% CI]). "
                      "A detector is tested on every question of the other condition that it did not see in "
                      "training; the rows where train = test are that condition's own test split:", "",
                  "| study | method | train | test | n (answerable) | Acc | AUROC |", "|---|---|---|---|---|---|---|"]
        for r in result.conditions:
            lines.append(f"| {r['study']} | {r['method']} | {r['train']} | {r['test']} | {r['n']} ({r['positives']}) | "
                         f"{_fmt(r['acc'])} | {_fmt(r['auroc'])} [{_fmt(r['auroc_lo'], 2)}, {_fmt(r['auroc_hi'], 2)}] |")
    transfer = [r for r in result.transfer if r["train"] != r["test"]]
    if transfer:
        lines += ["", "Cross-dataset transfer (AUROC):", "", "| method | train | test | AUROC |", "|---|---|---|---|"]
        lines += [f"| {r['method']} | {r['train']} | {r['test']} | {_fmt(r['auroc'])} |" for r in transfer]
    else:
        lines += ["", "Cross-dataset transfer: only one dataset qualified, so there is no pair to transfer between."]
    figs = sorted(p.name for p in folder.glob("*.png"))
    if figs:
        lines += ["", "Figures: " + ", ".join(f"[{f}]({folder.name}/{f})" for f in figs)
                  + " (interactive in the app's Benchmarks page)."]
    for note in result.notes:
        lines += ["", note]
    return lines + [""]


def write_readme() -> Path:
    header = (ROOT / "scripts" / "build" / "benchmark_readme_header.md")
    lines = ["# Benchmark results", "",
             "Generated by `python scripts/build/run_benchmark.py` from the CSV files in this folder (do not edit by hand).",
             "Protocol: `grade/studies.py` (metrics `grade/common/metrics.py`); orchestration `grade/studies/benchmark.py`; baselines: `grade/verdict/detectors/baselines.py`; command: `python -m grade benchmark`.",
             ""]
    if header.is_file():
        lines += header.read_text(encoding="utf-8").strip().splitlines() + [""]
    for name in RUNS:
        if (ROOT / "results" / name / "summary.json").is_file():
            lines += model_section(name)
    path = ROOT / "results" / "README.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_measured_files() -> list[Path]:
    """``grade/assets/measured/<model>.json`` from each model's own results folder (the run named like the
    model: the cross-fitted one for Qwen, the capped one for SmolLM2 and Gemma)."""
    from grade.verdict.measured import MEASURED_DIR, write_measured

    written = []
    for name, (model, _) in RUNS.items():
        folder = ROOT / "results" / name
        if name == model and (folder / "summary.json").is_file():
            written.append(write_measured(folder, MEASURED_DIR, root=ROOT))
    return written


def shrink_figures(folder: Path) -> None:
    """Quantise the PNGs to 256 colours where pngquant is installed: the figures are committed and the tracked
    tree must stay small enough to travel to a GPU machine beside model weights (about 4x smaller, the same
    picture to the eye)."""
    import shutil

    if shutil.which("pngquant") is None:
        print("pngquant not found: figures left as rendered", file=sys.stderr)
        return
    for png in sorted(folder.glob("*.png")):
        subprocess.call(["pngquant", "--quality", "60-90", "--force", "--ext", ".png", "--skip-if-larger", str(png)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--offline", action="store_true", help="never load a model: caches only")
    parser.add_argument("--runs", nargs="*", default=list(RUNS), help=f"of {', '.join(RUNS)}")
    parser.add_argument("--readme-only", action="store_true")
    args = parser.parse_args()
    subprocess.run(["bash", str(ROOT / "scripts/build/restore_benchmark_caches.sh"), "--labels"], check=True)  # the label files kept in history
    if not args.readme_only:
        for name in args.runs:
            model, extra = RUNS[name]
            command = [sys.executable, "-m", "grade", "benchmark", "--model", model, *extra,
                       "--out", str(ROOT / "results" / name)]
            if args.offline:
                command.append("--offline")
            print(" ".join(command), file=sys.stderr, flush=True)
            code = subprocess.call(command, cwd=ROOT)
            if code:
                return code
            shrink_figures(ROOT / "results" / name)
    print(write_readme())
    for path in write_measured_files():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
