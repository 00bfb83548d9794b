"""Per-layer AUROC of the raw rank ratio (no probe) for cached benchmark features.

How much each layer's ratio alone separates answerable from unanswerable questions, next to the mean
ratio and the prompt length (a confound a probe could learn). Reads the caches of ``python -m grade
benchmark`` (``data/benchmark/<model>/``); loads no model.

    python experiments/layer_signal.py --model smollm2-135m-instruct --datasets hotpotqa hotpotqa_closed
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository: its data/ folder

import numpy as np


def main() -> int:
    from grade.common.metrics import auroc
    from grade.batch.features import feature_matrix, load_features

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--datasets", nargs="+", required=True)
    parser.add_argument("--loss", choices=("pre", "pos"), default="pre")
    parser.add_argument("--cache-dir", default=str(ROOT / "data" / "benchmark"))
    args = parser.parse_args()
    folder = Path(args.cache_dir) / args.model
    for name in args.datasets:
        # the stores keep each row's label as it was when the row was extracted
        frame = load_features(folder / "features" / f"{name}.{args.loss}.parquet", hidden=False).drop_duplicates("id")
        frame = frame[frame["label"].isin([0, 1])]
        y = frame["label"].to_numpy(dtype=int)
        ratios = feature_matrix(frame, "rank_ratio")
        per_layer = [auroc(y, ratios[:, layer]) for layer in range(ratios.shape[1])]
        best = int(np.nanargmax(np.abs(np.array(per_layer) - 0.5)))
        print(f"{name}: {len(y)} questions ({int(y.sum())} answerable); AUROC of the mean ratio "
              f"{auroc(y, ratios.mean(1)):.3f}, of the prompt length {auroc(y, frame['n_tokens'].to_numpy()):.3f}, "
              f"furthest from 0.5: layer {best} ({per_layer[best]:.3f})")
        print("  per layer: " + " ".join(f"{a:.2f}" for a in per_layer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
