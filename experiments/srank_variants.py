"""GRADE_pre's stable-rank variants side by side on the same questions (item 5 of the Qwen issue).

The stores come from ``python -m grade extract --loss pre --srank {paper,sum,squared} --no-hidden`` over one
labels file each (on a GPU for Qwen: ``.xfer``-style runs, see data/labels/README.md). For each store this
prints the 5-fold logistic-regression AUROC (mean of 3 seeds, :func:`grade.common.metrics.cross_validated_auroc`) of the rank
ratios and of log srank(C_h), log srank(C_g) as two vectors, on the questions every store holds.

    python experiments/srank_variants.py paper=STORE sum=STORE squared=STORE
"""

from __future__ import annotations

import sys

import numpy as np

from grade.batch.features import feature_matrix, load_features
from grade.common.metrics import cross_validated_auroc


def main(argv: list[str]) -> int:
    stores = dict(arg.split("=", 1) for arg in argv)
    frames = {name: load_features(path) for name, path in stores.items()}
    ids = set.intersection(*(set(f["id"]) for f in frames.values()))
    for name, frame in frames.items():
        frame = frame[frame["id"].isin(ids)].drop_duplicates("id").sort_values("id")
        y = frame["label"].to_numpy().astype(int)
        ratio = np.mean([cross_validated_auroc(feature_matrix(frame), y, seed) for seed in range(3)])
        parts = np.c_[np.log(feature_matrix(frame, "srank_h")), np.log(feature_matrix(frame, "srank_g"))]
        apart = np.mean([cross_validated_auroc(parts, y, seed) for seed in range(3)])
        print(f"| {name} | {len(y)} ({int(y.sum())}) | {ratio:.3f} | {apart:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
