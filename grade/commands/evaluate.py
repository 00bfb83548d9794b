"""``python -m grade evaluate``: score a saved probe on labelled questions.

The questions file is JSONL with ``question`` and ``label`` (1 = answerable) and optionally ``id``,
``context``, ``task``, ``choices``, ``dataset`` and, for GRADE_pos probes, ``response`` (else the
most frequent of ``samples``, else the model's greedy answer). Features are extracted here with the
probe's own loss and stable-rank variant.
"""

from __future__ import annotations

import argparse
import json
import sys

from .common import add_model_arguments, add_threads_argument, positive_int


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="accuracy and AUROC of a probe on labelled questions", description=__doc__)
    add_model_arguments(p)
    p.set_defaults(model=None)  # default: the model the probe was trained on
    p.add_argument("--probe", required=True, help="probe path (with or without .json/.safetensors)")
    p.add_argument("--questions", nargs="+", required=True, help="labelled JSONL file(s)")
    p.add_argument("--limit", type=positive_int, default=None, help="only the first N labelled rows of each file")
    add_threads_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ..errors import InputError
    from ..features import feature_matrix, features_of_rows, read_labelled
    from ..models import load_model
    from ..probe import Probe, binary_metrics

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    probe = Probe.load(args.probe)
    meta = probe.metadata
    model = args.model or meta.get("model")
    if not model or not isinstance(model, str):
        raise InputError("the probe names no model; give --model")
    probe.check_compatible(model, loss=meta.get("loss"))
    rows, bad_rows = [], []
    for path in args.questions:
        file_rows = read_labelled(path, skipped=bad_rows)
        rows.extend(file_rows[: args.limit] if args.limit else file_rows)
    if bad_rows:
        print(f"skipped {len(bad_rows)} bad row(s); first: {bad_rows[0]}", file=sys.stderr)
    if not rows:
        raise InputError("the questions file(s) hold no row with a label (field 'label': 1 or 0)")
    quiet = args.quiet or args.json
    lm = load_model(model, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                    progress=None if quiet else (lambda line: print(line, file=sys.stderr)))
    probe.check_compatible(lm)
    df, skipped = features_of_rows(lm, rows, loss=meta.get("loss", "pre"), srank=meta.get("srank", "paper"),
                                   progress=not quiet)
    if df.empty:
        raise InputError("no question could be analysed")
    p = probe.predict_proba(feature_matrix(df))[:, 1]
    y = df["label"].to_numpy().astype(int)
    result = {"probe": str(args.probe), "model": lm.name, "loss": meta.get("loss"), "skipped": len(skipped),
              "bad_rows": len(bad_rows),
              **binary_metrics(y, p, threshold=probe.threshold, roc=False)}
    if df["dataset"].nunique() > 1:
        result["by_dataset"] = {name: binary_metrics(y[idx], p[idx], threshold=probe.threshold, roc=False)
                                for name, idx in df.groupby("dataset").indices.items()}
    if args.json:
        print(json.dumps(result))
        return 0
    auroc = "n/a (one class)" if result["auroc"] is None else f"{result['auroc']:.3f}"
    print(f"probe {args.probe} ({probe.kind}, GRADE_{meta.get('loss')}) on {lm.name}")
    print(f"n {result['n']} (answerable {result['positives']})   accuracy {result['accuracy']:.3f}   AUROC {auroc}")
    for name, m in result.get("by_dataset", {}).items():
        a = "-" if m["auroc"] is None else f"{m['auroc']:.3f}"
        print(f"  {name:<22} n {m['n']:>5}  pos {m['positives']:>5}  acc {m['accuracy']:.3f}  AUROC {a}")
    if skipped:
        print(f"skipped {len(skipped)} question(s): first: {skipped[0][2]}", file=sys.stderr)
    return 0
