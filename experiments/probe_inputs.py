"""What a probe should read, measured: rank ratios against the two stable ranks apart plus the loss.

For one model and each loss, trains the shipped probes' recipe (``grade.verdict.probe.train_from_features``: seeded
70/15/15 split stratified by dataset and label, each class capped at 1000 rows) on the stored features with
both inputs (:data:`grade.verdict.probe.INPUTS`) and both estimators, over several split seeds, and prints one
Markdown row per (probe, loss, inputs, estimator): the mean test AUROC over the seeds (all test rows, then per
dataset), with the lowest and highest seed beside the pooled one. ``general`` trains on every labelled
dataset, ``math`` on GSM8K alone (as the shipped ``-math`` probes are). Loads no model.

    python experiments/probe_inputs.py --model qwen2.5-coder-1.5b-instruct --features-dir data/probe_features
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from grade.batch.features import load_features
from grade.verdict.probe import INPUTS, train_from_features

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("gsm8k", "math", "triviaqa", "nq_open", "hotpotqa")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--features-dir", type=Path, default=ROOT / "runs" / "features")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2, 3, 4, 5])
    parser.add_argument("--loss", nargs="+", choices=("pre", "pos"), default=["pre", "pos"])
    args = parser.parse_args()
    torch.set_num_threads(1)  # a small probe: more threads only add overhead
    warnings.filterwarnings("ignore")
    print(f"| probe | loss | inputs | estimator | test AUROC all [min, max] | {' | '.join(DATASETS)} |")
    print("|---|---|---|---|---|" + "---|" * len(DATASETS))
    for loss in args.loss:
        stores = sorted((args.features_dir / args.model / loss).glob("*.parquet"))
        df = pd.concat([load_features(s, hidden=False) for s in stores], ignore_index=True)
        df = df[df["label"].isin([0, 1])].reset_index(drop=True)
        for probe_set, rows in (("general", df), ("math", df[df["dataset"] == "gsm8k"].reset_index(drop=True))):
            for inputs in INPUTS:
                for kind in ("mlp", "logreg"):
                    runs = [train_from_features(rows, kind=kind, inputs=inputs, max_per_class=1000, seed=s)[1]
                            for s in args.seeds]
                    pooled = [r["test"]["auroc"] for r in runs]
                    cells = []
                    for name in DATASETS:
                        values = [r["test_by_dataset"].get(name, {}).get("auroc") for r in runs]
                        values = [v for v in values if v is not None]
                        cells.append(f"{np.mean(values):.3f}" if values else "–")
                    print(f"| {probe_set} | {loss} | {inputs} | {kind} | {np.mean(pooled):.3f} "
                          f"[{min(pooled):.3f}, {max(pooled):.3f}] | {' | '.join(cells)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
