"""``python -m grade evaluate``: score a saved probe, or a detector the app shows, on labelled questions.

The questions file is JSONL with ``question`` and ``label`` (1 = answerable) and optionally ``id``,
``context``, ``task``, ``choices``, ``dataset`` and, for GRADE_pos probes, ``response`` (else the
most frequent of ``samples``, else the model's greedy answer). Features are extracted here with the
probe's own loss and stable-rank variant.

``--detector NAME`` scores one of the detectors shown beside the probe's verdict (``prompt-entropy``,
``p-entropy``, ``saplma``: the one shipped for ``--model``, default the embedded default model) or a
detector file, with the model passes its training data came from (:mod:`grade.verdict.detectors`). Each row is
read with the calibration of its own dataset where the detector was trained on it, else of the closest
one; a row whose task no training dataset is like is skipped.
"""

from __future__ import annotations

import argparse
import json
import sys

from .common import add_model_arguments, add_threads_argument, positive_int
from .engine import add_batch_argument, say_precision_note


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="accuracy and AUROC of a probe or detector on labelled questions",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    p.set_defaults(model=None)  # default: the model the probe or detector was trained on
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--probe", help="probe path (with or without .json/.safetensors)")
    which.add_argument("--detector", metavar="NAME",
                       help="a detector the app shows (prompt-entropy, p-entropy, saplma) or a detector file")
    p.add_argument("--questions", nargs="+", required=True, help="labelled JSONL file(s)")
    p.add_argument("--limit", type=positive_int, default=None, help="only the first N labelled rows of each file")
    add_threads_argument(p)
    add_batch_argument(p)
    p.add_argument("--scores", default=None, metavar="CSV",
                   help="also write each question's id, dataset, label and P(answerable) to this CSV file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _labelled_rows(args) -> tuple[list[dict], list]:
    from ..common.errors import InputError
    from ..batch.features import read_labelled

    rows, bad_rows = [], []
    for path in args.questions:
        file_rows = read_labelled(path, skipped=bad_rows)
        rows.extend(file_rows[: args.limit] if args.limit else file_rows)
    if bad_rows:
        print(f"skipped {len(bad_rows)} bad row(s); first: {bad_rows[0]}", file=sys.stderr)
    if not rows:
        raise InputError("the questions file(s) hold no row with a label (field 'label': 1 or 0)")
    return rows, bad_rows


def _print_metrics(result: dict) -> None:
    auroc = "n/a (one class)" if result["auroc"] is None else f"{result['auroc']:.3f}"
    print(f"n {result['n']} (answerable {result['positives']})   accuracy {result['accuracy']:.3f}   AUROC {auroc}")
    for name, m in result.get("by_dataset", {}).items():
        a = "-" if m["auroc"] is None else f"{m['auroc']:.3f}"
        print(f"  {name:<22} n {m['n']:>5}  pos {m['positives']:>5}  acc {m['accuracy']:.3f}  AUROC {a}")


def _with_metrics(result: dict, y, p, datasets, threshold: float) -> dict:
    """``result`` plus :func:`grade.common.metrics.binary_metrics` over all rows and, with several datasets, per dataset."""
    import numpy as np

    from ..common.metrics import binary_metrics

    result.update(binary_metrics(y, p, threshold=threshold, roc=False))
    datasets = np.asarray(datasets, dtype=object)
    if len(set(datasets)) > 1:
        result["by_dataset"] = {name: binary_metrics(y[datasets == name], p[datasets == name], threshold=threshold,
                                                     roc=False) for name in sorted(set(datasets))}
    return result


def run(args: argparse.Namespace) -> int:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return run_detector(args) if args.detector else run_probe(args)


def run_detector(args: argparse.Namespace) -> int:
    import numpy as np

    from ..verdict.detectors import Detector, labelled_statistics, resolve_detector
    from ..common.errors import InputError
    from ..models.embedded import DEFAULT_MODEL
    from ..models.models import load_model

    wanted = args.model or DEFAULT_MODEL
    detector = Detector.load(resolve_detector(args.detector, wanted))
    model = args.model or detector.model
    detector.check_compatible(model)
    rows, bad_rows = _labelled_rows(args)
    kinds, skipped, usable = [], [], []
    for row in rows:  # a row no training dataset is like has no calibration to be read with
        kind, reason = detector.kind_of(row.get("task") or "qa", bool(row.get("context")), str(row.get("dataset")))
        if kind is None:
            skipped.append((str(row.get("dataset")), str(row["id"]), reason))
        else:
            usable.append(row)
            kinds.append(kind)
    if not usable:
        raise InputError(f"no question is of a kind detector {detector.name} was trained on: {skipped[0][2]}")
    quiet = args.quiet or args.json
    say_precision_note(args, args.batch_size, quiet)
    lm = load_model(model, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                    say=None if quiet else (lambda line: print(line, file=sys.stderr)))
    detector.check_compatible(lm.name)
    values, kept, failed = labelled_statistics(lm, usable, detector.spec.statistic, progress=not quiet,
                                               batch_size=args.batch_size)
    skipped += failed
    if not kept:
        raise InputError("no question could be analysed")
    p = detector.predict_proba(values, [kinds[i] for i in kept])[:, 1]
    y = np.array([int(usable[i]["label"]) for i in kept])
    _write_scores(args.scores, [usable[i] for i in kept], p)
    result = _with_metrics({"detector": detector.name, "model": lm.name, "statistic": detector.spec.statistic,
                            "skipped": len(skipped), "bad_rows": len(bad_rows)},
                           y, p, [str(usable[i]["dataset"]) for i in kept], detector.metadata.get("threshold", 0.5))
    return _report(args, result, f"detector {detector.name} ({detector.spec.title}) on {lm.name}", skipped)


def run_probe(args: argparse.Namespace) -> int:
    from ..common.errors import InputError
    from ..batch.features import features_of_rows
    from ..models.models import load_model
    from ..verdict.probe import Probe, probe_inputs

    probe = Probe.load(args.probe)
    meta = probe.metadata
    model = args.model or meta.get("model")
    if not model or not isinstance(model, str):
        raise InputError("the probe names no model; give --model")
    probe.check_compatible(model, loss=meta.get("loss"))
    rows, bad_rows = _labelled_rows(args)
    quiet = args.quiet or args.json
    say_precision_note(args, args.batch_size, quiet)
    lm = load_model(model, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                    say=None if quiet else (lambda line: print(line, file=sys.stderr)))
    probe.check_compatible(lm)
    df, skipped = features_of_rows(lm, rows, loss=meta.get("loss", "pre"), srank=meta.get("srank", "paper"),
                                   progress=not quiet, batch_size=args.batch_size)
    if df.empty:
        raise InputError("no question could be analysed")
    p = probe.predict_proba(probe_inputs(df, probe.inputs))[:, 1]
    y = df["label"].to_numpy().astype(int)
    _write_scores(args.scores, df[["id", "dataset", "label"]].to_dict("records"), p)
    result = _with_metrics({"probe": str(args.probe), "model": lm.name, "loss": meta.get("loss"),
                            "skipped": len(skipped), "bad_rows": len(bad_rows)},
                           y, p, df["dataset"].astype(str).to_numpy(), probe.threshold)
    return _report(args, result, f"probe {args.probe} ({probe.kind}, GRADE_{meta.get('loss')}) on {lm.name}", skipped)


def _write_scores(path: str | None, rows: list[dict], p) -> None:
    """``--scores``: one line per scored question (id, dataset, label, P(answerable)), written atomically."""
    if not path:
        return
    import csv

    from ..common.io import atomic_path

    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(["id", "dataset", "label", "p_answerable"])
        for row, value in zip(rows, p):
            out.writerow([row["id"], row["dataset"], int(row["label"]), repr(float(value))])


def _report(args: argparse.Namespace, result: dict, header: str, skipped: list) -> int:
    """One JSON object (``--json``), else a header line, the metrics and what was skipped (stderr)."""
    if args.json:
        print(json.dumps(result))
        return 0
    print(header)
    _print_metrics(result)
    if skipped:
        print(f"skipped {len(skipped)} question(s): first: {skipped[0][2]}", file=sys.stderr)
    return 0
