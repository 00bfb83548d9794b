"""``python -m grade train``: train a probe on stored features and print its test metrics.

Writes ``OUT.safetensors`` and ``OUT.json``. The rows are split train / validation / test (seeded,
stratified by dataset and label); ``--holdout-dataset`` keeps whole datasets out to measure transfer.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .common import open_fraction, positive_int, seed


def register(sub) -> None:
    p = sub.add_parser("train", help="train a probe on feature files", description=__doc__)
    p.add_argument("--features", nargs="+", required=True, help="feature store folder(s) or Parquet file(s)")
    p.add_argument("--kind", choices=("mlp", "logreg"), default="mlp")
    p.add_argument("--inputs", choices=("rank_ratio", "sranks_loss"), default="rank_ratio",
                   help="what the probe reads: the rank ratios (the paper), or log srank(C_h), log srank(C_g) and the loss")
    p.add_argument("--out", required=True, help="output path without extension, e.g. runs/probes/name")
    p.add_argument("--seed", type=seed, default=42)
    p.add_argument("--val-fraction", type=open_fraction, default=0.15)
    p.add_argument("--test-fraction", type=open_fraction, default=0.15)
    p.add_argument("--holdout-dataset", nargs="*", default=[], help="datasets kept out of training, scored apart")
    p.add_argument("--datasets", nargs="*", default=None, help="use only these datasets")
    p.add_argument("--max-per-class", type=positive_int, default=None, help="cap each class (the reference uses 1000)")
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from ..common.errors import InputError
    from ..batch.features import check_feature_frame, load_features
    from ..common.io import ensure_output_folder
    from ..verdict.probe import format_metrics, probe_paths, train_from_features

    torch.set_num_threads(1)  # a tiny MLP: more threads only add overhead on a busy CPU
    fractions = (1 - args.val_fraction - args.test_fraction, args.val_fraction, args.test_fraction)
    if min(fractions) <= 0:
        raise InputError("--val-fraction and --test-fraction must be positive and sum to less than 1")
    weights_path, _ = probe_paths(args.out)
    ensure_output_folder(Path(weights_path).parent, "probe folder")
    df = load_features(args.features, hidden=False)
    check_feature_frame(df, ", ".join(map(str, args.features)))
    if args.datasets:
        df = df[df["dataset"].isin(args.datasets)]
    progress = None
    if not args.json:
        def progress(epoch, total, info):
            if epoch == total or epoch % 10 == 0:
                print(f"epoch {epoch}/{total} " + " ".join(f"{k} {v:.4g}" for k, v in info.items()), file=sys.stderr)
    probe, report = train_from_features(
        df, kind=args.kind, seed=args.seed, fractions=fractions, holdout_datasets=tuple(args.holdout_dataset),
        max_per_class=args.max_per_class, callback=progress, sources=[str(f) for f in args.features],
        inputs=args.inputs,
    )
    weights, meta = probe.save(args.out)
    if args.json:
        slim = {k: ({kk: vv for kk, vv in v.items() if kk != "roc"} if isinstance(v, dict) and "n" in v else v)
                for k, v in report.items()}
        print(json.dumps({"probe": str(meta), "kind": args.kind, **slim}))
        return 0
    print(format_metrics(report))
    print(f"saved {weights} and {meta}")
    return 0
