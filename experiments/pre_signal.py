"""Where GRADE_pre's signal is, for one model: the rank ratios against the quantities they are made of.

For every feature store of ``runs/features/<model>/<loss>/`` (written by ``scripts/build/build_probes.py`` or
``scripts/gpu/gpu_label_extract.sh``) it prints one Markdown row of 5-fold cross-validated AUROCs of a
logistic regression (standardised inputs) on:

* ``ratio``: the per-layer rank ratios srank(C_g)/srank(C_h) (the shipped probes' input);
* ``loss``: the loss the gradients come from alone (GRADE_pre: the entropy after the prompt);
* ``ratio+loss``: both;
* ``log h, log g``: log srank(C_h) and log srank(C_g) per layer, as two separate vectors (the ratio
  fixes their difference; this lets the probe weigh them apart);
* ``early / middle / late``: the ratios of the first, middle and last third of the layers;
* ``length``: the number of tokens alone (prompt, plus the response under ``pos``).

Loads no model. ``python experiments/pre_signal.py --model qwen2.5-coder-1.5b-instruct [--loss pre]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from grade.common.metrics import cross_validated_auroc
from grade.batch.features import feature_matrix, load_features

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--loss", choices=("pre", "pos"), default="pre")
    parser.add_argument("--features-dir", type=Path, default=ROOT / "runs" / "features")
    args = parser.parse_args()
    columns = ["ratio", "loss", "ratio+loss", "log h, log g", "early", "middle", "late", "length"]
    print(f"| dataset | n (answerable) | {' | '.join(columns)} |")
    print("|---|---|" + "---|" * len(columns))
    for store in sorted((args.features_dir / args.model / args.loss).glob("*.parquet")):
        df = load_features(store, hidden=False)
        df = df[df["label"].isin([0, 1])]
        y = df["label"].to_numpy(dtype=int)
        if len(df) < 20 or y.min() == y.max() or min(y.sum(), len(y) - y.sum()) < 5:
            continue
        ratio = feature_matrix(df, "rank_ratio")
        loss = df[["loss_value"]].to_numpy()
        thirds = np.array_split(np.arange(ratio.shape[1]), 3)
        inputs = {
            "ratio": ratio,
            "loss": loss,
            "ratio+loss": np.hstack([ratio, loss]),
            "log h, log g": np.hstack([np.log(feature_matrix(df, "srank_h")), np.log(feature_matrix(df, "srank_g"))]),
            "early": ratio[:, thirds[0]],
            "middle": ratio[:, thirds[1]],
            "late": ratio[:, thirds[2]],
            "length": np.log(df[["n_tokens"]].to_numpy(dtype=float)),
        }
        cells = " | ".join(f"{cross_validated_auroc(inputs[c], y):.3f}" for c in columns)
        print(f"| {store.stem} | {len(y)} ({int(y.sum())}) | {cells} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
