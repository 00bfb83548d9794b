"""Build the shipped probes, their README and the reference feature set (``make probes``).

For each (model, loss) in :data:`CONFIGS`:

0. this project's extra training sets (``data/probe_training/questions``: generated arithmetic and
   hand-written world facts, see ``scripts/build/make_probe_questions.py``) are labelled with the model by
   sampling (``python -m grade label --matcher lenient``; resumes, so a finished file costs nothing);
1. every labelled file ``<labels dir>/<model>/<dataset>.jsonl`` (``data/labels``, written by the
   labelling runs, and ``data/probe_training/labels``) becomes a feature store
   ``runs/features/<model>/<loss>/<dataset>.parquet`` (resumable: a re-run only extracts new rows);
2. transfer is measured honestly: for every dataset with both classes, a probe is trained on the
   *other* datasets and scored on that one, which it never saw;
3. the shipped MLP probe is trained on all datasets (seeded 70/15/15 split, stratified by dataset and
   label) and scored on its test split, per dataset; a logistic-regression probe on the same split
   is the comparison. Where ``results/<model>/heldout_split.csv`` exists (drawn before training by
   ``scripts/build/score_shipped_probes.py --draw-split``), its questions are left out of all of this: the
   cards cite the probe on them (``grade.studies.shipped_probes``);
4. ``grade/assets/probes/<model>-<loss>.{safetensors,json}`` are written, then ``grade/assets/probes/README.md``
   and ``grade/assets/reference_features.parquet`` (a few hundred rows per (model, loss): rank ratios,
   labels, dataset, with/without document, and one middle layer's hidden state).

Usage: ``python scripts/build/build_probes.py [--only smollm2-135m-instruct-pre ...] [--threads 1]``. With
``--only``, the other probes' README sections and reference rows are kept from the files already there.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from grade.common.io import find_jsonl
from grade.studies.shipped_probes import SPLIT_FILE, labels_without_heldout, read_split
from grade.verdict.probe import SHIPPED_PROBES_DIR, SHIPPED_REFERENCE_FEATURES
from grade.verdict.training_sets import MAX_PER_CLASS, MAX_UNANSWERABLE_PER_SET, current_rows, extract_all

ROOT = Path(__file__).resolve().parents[2]  # the repository: its data/ folder

QUESTIONS_DIR = ROOT / "data" / "probe_training" / "questions"  # written by scripts/build/make_probe_questions.py
PROBE_LABELS_DIR = ROOT / "data" / "probe_training" / "labels"
# extra training sets per model: the rewordings only where the headline check needs them (labelling
# the base Gemma model is slow on a CPU: its 262k-token vocabulary makes every sampled token costly)
PROBE_SETS = {"smollm2-135m-instruct": ("world_facts", "arithmetic", "reworded"),
              "gemma-3-270m": ("world_facts", "arithmetic")}
CHECK_QUESTIONS_DIR = ROOT / "data" / "probe_check" / "questions"  # unseen check sets: scored, never trained on
CHECK_LABELS_DIR = ROOT / "data" / "probe_check" / "labels"
CHECK_SETS = ("check_facts", "check_arithmetic")
#: Probes for one kind of question: trained on those datasets only, named ``<model>-<loss>-<kind>``, and
#: picked by the app for the kind's tasks (metadata ``tasks``). Why: on Qwen2.5-Coder-1.5B the probe trained
#: on every dataset ranked GSM8K's test questions at AUROC 0.61 (pre), one trained on GSM8K alone at 0.77
#: (pre) and 0.80 (pos): trivia and arithmetic rows pull the same layers in different directions. MATH stays
#: out of the math probe: adding Qwen's 742 labelled MATH rows lowered its GSM8K test AUROC from 0.800 to
#: 0.758 (GRADE_pre, mean of six split seeds), so MATH questions get the general probe, which trains on them.
KINDS = {"math": ("gsm8k",)}
class Config(NamedTuple):
    """One shipped probe. ``kind``: None = every labelled dataset of the model (the default probe of every
    task), else a key of :data:`KINDS`. ``inputs``: what the probe reads (:data:`grade.verdict.probe.INPUTS`).
    ``estimator``: the shipped probe's kind; the other kind is trained on the same split for comparison."""

    model: str
    loss: str
    kind: str | None = None
    inputs: str = "rank_ratio"
    estimator: str = "mlp"


QWEN = "qwen2.5-coder-1.5b-instruct"
#: Qwen's probes read the two stable ranks apart and the loss (``sranks_loss``). Mean test AUROC over six split
#: seeds (experiments/probe_inputs.py, results/README.md): trained on every dataset, the GRADE_pre MLP ranks TriviaQA
#: at 0.848 with them against 0.608 with the ratios alone, all test rows at 0.875 against 0.803; on GSM8K alone
#: GRADE_pre 0.800 (logistic regression) / 0.781 (MLP) against 0.761 / 0.744 with the ratios, GRADE_pos 0.839 /
#: 0.832 against 0.807 / 0.793. Logistic regression wins there: ~600 training rows are few for a 4-layer MLP.
CONFIGS = (Config("smollm2-135m-instruct", "pre"), Config("smollm2-135m-instruct", "pos"), Config("gemma-3-270m", "pre"),
           Config(QWEN, "pre", inputs="sranks_loss"), Config(QWEN, "pos", inputs="sranks_loss"),
           Config(QWEN, "pre", "math", inputs="sranks_loss", estimator="logreg"),
           Config(QWEN, "pos", "math", inputs="sranks_loss", estimator="logreg"))
REFERENCE_ROWS = 300  # per (model, loss) in the reference feature set
MIN_TRANSFER_ROWS = 20  # a held-out dataset needs this many rows (and both classes) to be scored


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def probe_name(model: str, loss: str, kind: str | None = None) -> str:
    return f"{model}-{loss}" + (f"-{kind}" if kind else "")


def label_probe_sets(model: str, threads: int) -> None:
    """Label this project's extra training sets and the check sets with ``model`` (resumes: finished
    questions are kept)."""
    jobs = [(QUESTIONS_DIR / f"{n}.jsonl", PROBE_LABELS_DIR / model / f"{n}.jsonl") for n in PROBE_SETS.get(model, ())]
    jobs += [(CHECK_QUESTIONS_DIR / f"{n}.jsonl", CHECK_LABELS_DIR / model / f"{n}.jsonl") for n in CHECK_SETS]
    for questions, out in jobs:
        name = questions.stem
        if find_jsonl(out.parent, name) is not None and not out.is_file():
            log(f"  {name}: labelled (committed compressed), skipped")
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "grade", "label", "--model", model, "--dataset", str(questions),
                   "--matcher", "lenient", "--threads", str(threads), "--quiet", "--out", str(out)]
        log(f"  labelling {name}: {' '.join(command[1:])}")
        subprocess.run(command, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def usable_datasets(df: pd.DataFrame) -> list[str]:
    counts = df.groupby("dataset")["label"].agg(["size", "sum"])
    ok = counts[(counts["size"] >= MIN_TRANSFER_ROWS) & (counts["sum"] > 0) & (counts["sum"] < counts["size"])]
    return sorted(ok.index)


def slim(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k != "roc"}


def build_config(config: Config, stores: list[tuple[Path, set]], out_dir: Path, *, transfer_runs: bool = True) -> dict:
    """Transfer runs, the shipped probe and the other estimator's comparison; returns a summary for the README."""
    from grade.verdict.probe import train_from_features

    model, loss, kind, inputs = config.model, config.loss, config.kind, config.inputs
    other = "logreg" if config.estimator == "mlp" else "mlp"

    df = current_rows(stores, hidden=False)
    if kind:
        df = df[df["dataset"].isin(KINDS[kind])].reset_index(drop=True)
    sources = [str(s.relative_to(ROOT)) if s.is_relative_to(ROOT) else str(s) for s, _ in stores]
    transfer = {}
    datasets = sorted(df["dataset"].unique())
    for held in usable_datasets(df) if transfer_runs else []:
        rest = df[df["dataset"] != held]
        if len(usable_datasets(rest)) == 0 or rest["label"].nunique() < 2:
            continue
        runs = {}
        for estimator in ("mlp", "logreg"):
            _, report = train_from_features(df, kind=estimator, holdout_datasets=(held,), max_per_class=MAX_PER_CLASS,
                                            inputs=inputs)
            runs[estimator] = slim(report["holdout"])
        transfer[held] = runs
        log(f"  transfer -> {held}: mlp AUROC {runs['mlp']['auroc']:.3f}, logreg {runs['logreg']['auroc']:.3f} "
            f"(n {runs['mlp']['n']}, answerable {runs['mlp']['positives']})")

    probe, report = train_from_features(df, kind=config.estimator, max_per_class=MAX_PER_CLASS, sources=sources,
                                        inputs=inputs)
    _, other_report = train_from_features(df, kind=other, max_per_class=MAX_PER_CLASS, sources=sources, inputs=inputs)
    probe.metadata["transfer_leave_one_dataset_out"] = transfer
    probe.metadata["comparison"] = {"kind": other, "test": slim(other_report["test"]),
                                    "test_by_dataset": other_report["test_by_dataset"]}
    if kind:
        probe.metadata["kind_of_question"] = kind
        probe.metadata["tasks"] = sorted(set(df["task"]))
    name = probe_name(model, loss, kind)
    probe.save(out_dir / name)
    log(f"  {name}: test AUROC {report['test']['auroc']:.3f}, accuracy {report['test']['accuracy']:.3f} "
        f"({other} AUROC {other_report['test']['auroc']:.3f})")
    return {"name": name, "model": model, "loss": loss, "datasets": datasets, "probe": probe,
            "report": report, "comparison": probe.metadata["comparison"], "transfer": transfer}


def unseen_check(model: str, loss: str, probe, features_dir: Path, compute: bool) -> dict:
    """Scores of the finished probe on the check sets (labelled like the training data, never trained
    on): per set and pooled."""
    from grade.common.metrics import binary_metrics
    from grade.verdict.probe import probe_inputs

    stores = extract_all(model, loss, [CHECK_LABELS_DIR], features_dir / "check", compute=compute)
    if not stores:
        return {}
    df = current_rows(stores, hidden=False)
    p = probe.predict_proba(probe_inputs(df, probe.inputs))[:, 1]
    y = df["label"].to_numpy().astype(int)
    from grade.common.metrics import auroc, bootstrap_ci

    def scored(idx):  # a handful of answerable questions: the interval says how much the AUROC can be trusted
        m = binary_metrics(y[idx], p[idx], roc=False)
        m["auroc_ci95"] = list(bootstrap_ci(y[idx], p[idx], auroc)) if m.get("auroc") is not None else None
        return m

    out = {"all": scored(np.arange(len(y)))}
    for name, idx in df.groupby("dataset").indices.items():
        out[name] = scored(idx)
    return out


def reference_rows(model: str, loss: str, stores: list[tuple[Path, set]], seed: int = 0) -> pd.DataFrame:
    """A small stratified sample with one middle hidden layer (the app's bands and projections)."""
    from grade.batch.features import hidden_states

    df = current_rows(stores, hidden=True)
    df = df[df["hidden"].notna()].reset_index(drop=True)
    if df.empty:
        return df
    strata = df["dataset"].astype(str) + "|" + df["label"].astype(str) + "|" + df["has_context"].astype(str)
    per = max(1, REFERENCE_ROWS // strata.nunique())
    rng = np.random.default_rng(seed)
    picked = []
    for _, idx in df.groupby(strata).indices.items():
        picked.extend(rng.permutation(idx)[:per].tolist())
    sub = df.iloc[sorted(picked)].reset_index(drop=True)
    layer = int(sub["n_layers"].iloc[0]) // 2  # index into the L+1 hidden states (0 = embeddings)
    hidden = hidden_states(sub, layer=layer)
    out = sub[["model", "loss", "srank", "id", "dataset", "task", "label", "accuracy", "has_context", "question",
               "n_tokens", "rank_ratio"]].copy()
    out["hidden_layer"] = layer
    out["hidden"] = list(hidden.astype(np.float16))  # a picture of neighbours: half precision is plenty, half the size
    return out


def saved_reference_rows(path: Path, model: str, loss: str) -> pd.DataFrame:
    """The rows of (model, loss) in the reference set already at ``path`` (none if there is no file)."""
    if not path.exists():
        return pd.DataFrame()
    old = pd.read_parquet(path)
    return old[(old["model"] == model) & (old["loss"] == loss)]


def fmt(value) -> str:
    return "–" if value is None else f"{value:.3f}"


def saved_summary(model: str, loss: str, out_dir: Path, kind: str | None = None) -> dict | None:
    """The README summary of a probe built by an earlier run, from its saved metadata (``--only``
    rebuilds some probes; the others keep their sections as they were)."""
    from grade.verdict.probe import Probe

    name = probe_name(model, loss, kind)
    if not (out_dir / f"{name}.json").exists():
        return None
    probe = Probe.load(out_dir / name)
    meta = probe.metadata
    return {"name": name, "model": model, "loss": loss, "probe": probe, "report": meta["metrics"],
            # probes built before the comparison was named compared with logreg
            "comparison": meta.get("comparison") or {"kind": "logreg", **meta["logreg_comparison"]},
            "transfer": meta.get("transfer_leave_one_dataset_out", {}),
            "check": meta.get("unseen_check") or {}}


def write_readme(summaries: list[dict], path: Path) -> None:
    lines = [
        "# Shipped probes",
        "",
        "Generated by `python scripts/build/build_probes.py` (`make probes`); do not edit by hand.",
        "",
        "Each probe is two files: `NAME.safetensors` (weights, BatchNorm buffers included) and `NAME.json`",
        "(model, loss, stable-rank variant, layer count, feature definition, training data with class",
        "balance, metrics, package version). Load with `grade.verdict.probe.Probe.load(grade.verdict.probe.SHIPPED_PROBES_DIR / 'NAME')`.",
        "",
        "Input (`inputs` in the JSON, one per probe): `rank_ratio` = the per-layer rank ratios",
        "`srank(C_g)/srank(C_h)` of one question, the paper's input; `sranks_loss` = log srank(C_h) and log",
        "srank(C_g) per layer apart, then the loss value (2L+1 numbers). GRADE_pre: entropy of the next-token",
        "distribution after the prompt; GRADE_pos: cross-entropy of the most frequent sampled answer.",
        "Probe `mlp`: the paper's MLP (inputs→256→128→64→32→1, BatchNorm, LeakyReLU 0.01, Dropout 0.5; Adam lr 5e-3,",
        "weight decay 1e-5, batch 64, ≤100 epochs, ReduceLROnPlateau 0.75/5, seed 42), weights of the epoch",
        "with the best validation AUROC; `logreg`: standardised logistic regression, C picked on validation.",
        f"Each class capped at {MAX_PER_CLASS} rows; seeded 70/15/15 split",
        "stratified by dataset and label. Labels: sample accuracy of the model itself (see the label files);",
        "label 1 = answerable. The other estimator is trained on the same split for comparison.",
        "",
        "Transfer (leave one dataset out): a probe trained on the other datasets, scored on the held-out one,",
        "which it never saw. This is the honest number for new kinds of questions.",
        "",
    ]
    for s in summaries:
        meta = s["probe"].metadata
        data = meta["training_data"]
        split = data["split"]
        lines += [
            f"## {s['name']}",
            "",
            f"Model `{s['model']}`, GRADE_{s['loss']}, {meta['n_layers']} layers, srank `{meta['srank']}`, "
            f"inputs `{meta.get('inputs', 'rank_ratio')}`, probe `{meta['kind']}`, "
            + (f"best epoch {meta['training']['best_epoch']}." if meta["kind"] == "mlp" else f"C {meta['training']['C']}.")
            + (f" Trained for {meta['kind_of_question']} questions only (tasks {', '.join(meta['tasks'])}): the app "
               "uses it for those tasks and the model's general probe for the others." if meta.get("tasks") else ""),
            "",
            f"Rows used: train {split['train']['n']} ({split['train']['answerable']} answerable), "
            f"validation {split['validation']['n']} ({split['validation']['answerable']}), "
            f"test {split['test']['n']} ({split['test']['answerable']}).",
            "",
            f"| dataset | rows (answerable / unanswerable) | with document | test n | test acc | test AUROC | "
            f"{s['comparison']['kind']} AUROC | transfer AUROC (mlp / logreg) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        test_by = s["report"]["test_by_dataset"]
        other_by = s["comparison"]["test_by_dataset"]
        for name, bal in data["datasets"].items():
            t = test_by.get(name, {})
            tr = s["transfer"].get(name)
            transfer = f"{fmt(tr['mlp']['auroc'])} / {fmt(tr['logreg']['auroc'])}" if tr else "–"
            lines.append(
                f"| {name} | {bal['answerable']} / {bal['unanswerable']} | {bal['with_document']} | {t.get('n', 0)} | "
                f"{fmt(t.get('accuracy'))} | {fmt(t.get('auroc'))} | {fmt(other_by.get(name, {}).get('auroc'))} | {transfer} |"
            )
        test = s["report"]["test"]
        check = s.get("check") or {}
        lines += [
            f"| **all** | {split['train']['answerable'] + split['validation']['answerable'] + split['test']['answerable']} / "
            f"{split['train']['unanswerable'] + split['validation']['unanswerable'] + split['test']['unanswerable']} | | "
            f"{test['n']} | {fmt(test['accuracy'])} | {fmt(test['auroc'])} | {fmt(s['comparison']['test']['auroc'])} | |",
            "",
            f"Accuracy is at threshold 0.5; the test split's answerable share is {test['positives'] / max(test['n'], 1):.2f} "
            f"(a constant guess of the majority class scores {max(test['positives'], test['n'] - test['positives']) / max(test['n'], 1):.3f}).",
            "",
        ]
        if check:
            lines += [
                "Unseen check sets (`data/probe_check`: new facts and arithmetic in other phrasings, labelled by",
                "sampling with the lenient matcher like the training data, never trained on):",
                "",
                "| check set | n | answerable | accuracy | AUROC [95% bootstrap CI] |",
                "|---|---|---|---|---|",
            ]
            for set_name, m in check.items():
                ci = m.get("auroc_ci95")
                interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci and all(np.isfinite(ci)) else ""
                lines.append(f"| {'**all**' if set_name == 'all' else set_name} | {m['n']} | {m['positives']} | "
                             f"{fmt(m['accuracy'])} | {fmt(m['auroc'])}{interval} |")
            lines.append("")
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels-dir", type=Path, nargs="+", default=[ROOT / "data" / "labels", PROBE_LABELS_DIR],
                        help="folders of <model>/<dataset>.jsonl label files")
    parser.add_argument("--skip-label", action="store_true", help="do not (re)label the extra training sets")
    parser.add_argument("--features-dir", type=Path, default=ROOT / "runs" / "features")
    parser.add_argument("--out-dir", type=Path, default=SHIPPED_PROBES_DIR)
    parser.add_argument("--reference", type=Path, default=SHIPPED_REFERENCE_FEATURES)
    parser.add_argument("--only", nargs="*", default=None, help="probe names to build, e.g. smollm2-135m-instruct-pre")
    parser.add_argument("--skip-extract", action="store_true", help="use the stored features only")
    parser.add_argument("--no-transfer", action="store_true",
                        help="skip the leave-one-dataset-out runs (two trainings per dataset; slow on a busy CPU)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1 is fastest on a shared CPU; raise it on an idle machine)")
    parser.add_argument("--no-heldout", action="store_true",
                        help=f"train on every labelled question, also those of results/<model>/{SPLIT_FILE}")
    args = parser.parse_args(argv)
    subprocess.run(["bash", str(ROOT / "scripts/build/restore_benchmark_caches.sh"), "--labels"], check=True)  # the label files kept in history
    heldout_labels = tempfile.TemporaryDirectory()

    import torch

    torch.set_num_threads(args.threads)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    summaries, reference = [], []
    labelled: set[str] = set()
    for config in CONFIGS:
        model, loss, kind = config.model, config.loss, config.kind
        name = probe_name(model, loss, kind)
        if args.only and name not in args.only:
            kept = saved_summary(model, loss, args.out_dir, kind)
            if kept:
                summaries.append(kept)
                if not kind:
                    reference.append(saved_reference_rows(args.reference, model, loss))
            continue
        log(f"{name}:")
        if not args.skip_label and not args.skip_extract and model not in labelled:
            label_probe_sets(model, args.threads)
            labelled.add(model)
        # the questions held out to measure the shipped probes (drawn before training) stay out of training
        labels_dirs = args.labels_dir
        split = ROOT / "results" / model / SPLIT_FILE
        if split.is_file() and not args.no_heldout:
            labels_dirs = labels_without_heldout(model, args.labels_dir, split, Path(heldout_labels.name))
            log(f"  {len(read_split(split))} questions of {split.relative_to(ROOT)} left out")
        # the per-set cap on unanswerable rows keeps one large set from swamping a mixture; a probe for one
        # kind of question keeps every row up to the reference's cap per class
        stores = extract_all(model, loss, labels_dirs, args.features_dir, compute=not args.skip_extract,
                             max_unanswerable=MAX_PER_CLASS if kind else MAX_UNANSWERABLE_PER_SET)
        if not stores:
            log(f"  no labelled data for {model} in {', '.join(str(d / model) for d in args.labels_dir)}: {name} not built")
            continue
        summary = build_config(config, stores, args.out_dir, transfer_runs=not args.no_transfer)
        # the check sets are world facts: they say nothing about a probe for another kind of question
        check = {} if kind else unseen_check(model, loss, summary["probe"], args.features_dir, compute=not args.skip_extract)
        if check:
            summary["probe"].metadata["unseen_check"] = check
            summary["probe"].save(args.out_dir / summary["name"])
            log(f"  unseen check: AUROC {fmt(check['all']['auroc'])}, accuracy {fmt(check['all']['accuracy'])} "
                f"(n {check['all']['n']}, answerable {check['all']['positives']})")
        summary["check"] = check
        summaries.append(summary)
        if not kind:  # the reference set holds each (model, loss) once
            rows = reference_rows(model, loss, stores)
            # stores written without hidden states (Qwen's, from a GPU run) cannot make new rows: keep the old ones
            reference.append(rows if not rows.empty else saved_reference_rows(args.reference, model, loss))
    if not summaries:
        log("nothing built")
        return 1
    write_readme(summaries, args.out_dir / "README.md")
    reference = [r for r in reference if not r.empty]
    if not reference:  # only probes for one kind of question were built, into a folder of their own
        return 0
    ref = pd.concat(reference, ignore_index=True)
    ref.to_parquet(args.reference, compression="zstd", index=False)
    size = args.reference.stat().st_size
    log(f"reference features: {len(ref)} rows, {size / 1e6:.2f} MB -> {args.reference}")
    if size > 5e6:
        log("warning: the reference set is over 5 MB; lower REFERENCE_ROWS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
