"""Fit the input bands of every shipped probe (:mod:`grade.verdict.probe_reading`) into grade/assets/probe_inputs/.

A probe that reads log srank(C_h), log srank(C_g) and the loss (Qwen2.5-Coder's) gets its bands from the
feature stores it was trained on (``data/probe_features/<model>/<loss>/*.parquet``; restore them with
``scripts/build/restore_benchmark_caches.sh``), without the questions held out before training
(``results/<model>/heldout_split.csv``), restricted to the datasets its metadata lists and to its class counts per
dataset. A probe that reads
rank ratios gets them from the shipped reference set (``grade/assets/reference_features.parquet``), the
labelled rows the Home page already draws its rank-ratio bands from.

Usage: ``python scripts/build/build_probe_input_bands.py [--features-root DIR]`` (DIR holds ``data/probe_features``;
default: this checkout).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from grade.batch.features import load_features
from grade.studies.shipped_probes import BENCHMARK_NAMES, SPLIT_FILE, read_split
from grade.verdict.probe import SHIPPED_PROBES_DIR, SHIPPED_REFERENCE_FEATURES, probe_inputs
from grade.verdict.probe_reading import SHIPPED_BANDS_DIR, InputBands
from grade.verdict.training_sets import dedupe

ROOT = Path(__file__).resolve().parents[2]


def rows_of(meta: dict, features_root: Path) -> tuple[pd.DataFrame, str]:
    """The labelled feature rows behind one probe, and a description of where they came from."""
    model, loss, inputs = meta["model"], meta["loss"], meta.get("inputs", "rank_ratio")
    datasets = sorted(meta["training_data"]["datasets"])
    if inputs == "rank_ratio":
        ref = pd.read_parquet(SHIPPED_REFERENCE_FEATURES)
        ref = ref[(ref["model"] == model) & (ref["loss"] == loss)].reset_index(drop=True)
        return ref, band_source(len(ref), None)
    folder = features_root / "data" / "probe_features" / model / loss
    split = ROOT / "results" / model / SPLIT_FILE
    held = read_split(split) if split.is_file() else set()
    stores = [folder / f"{name}.parquet" for name in datasets]
    stores += [folder / f"{name}_context.parquet" for name in datasets
               if (folder / f"{name}_context.parquet").exists()]
    missing = [str(p) for p in stores if not p.exists()]
    if missing:
        raise SystemExit(f"error: missing feature stores {', '.join(missing)}; run scripts/build/restore_benchmark_caches.sh")
    frames = []
    for p in stores:  # the questions held out before training (results/<model>/heldout_split.csv) it never saw
        frame = load_features(p, hidden=False)
        name = BENCHMARK_NAMES.get(p.stem.removesuffix(".parquet"), p.stem)
        frames.append(frame[[(name, str(i)) not in held for i in frame["id"]]])
    df = dedupe(pd.concat(frames, ignore_index=True))
    df = df[df["dataset"].isin(datasets)]
    # The probe's data capped some sets (at most 150 unanswerable questions per labelled file, 1000 a class):
    # keep as many of each (dataset, class) as its metadata counts, so the bands describe what it learned from.
    counts = meta["training_data"]["datasets"]
    keep = [group.sample(n=min(len(group), counts[name]["answerable" if label == 1 else "unanswerable"]),
                         random_state=0)
            for (name, label), group in df.groupby(["dataset", "label"])]
    df = pd.concat(keep).sort_index().reset_index(drop=True)
    return df, band_source(len(df), datasets)


def band_source(n: int, datasets: list[str] | None) -> str:
    """Where the bands come from, as Home's caption shows it: display names, no file or model identifiers.
    ``datasets`` None: the shipped reference set."""
    from grade.common.display import dataset_title

    if datasets is None:
        return f"the shipped reference set, {n:,} labelled questions"
    return f"the {n:,} labelled questions the probe learned from ({', '.join(dataset_title(d) for d in datasets)})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features-root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    SHIPPED_BANDS_DIR.mkdir(parents=True, exist_ok=True)
    for path in sorted(SHIPPED_PROBES_DIR.glob("*.json")):
        meta = json.loads(path.read_text(encoding="utf-8"))
        if meta.get("format") != "grade-probe":
            continue
        df, source = rows_of(meta, args.features_root)
        inputs = meta.get("inputs", "rank_ratio")
        bands = InputBands.fit(probe_inputs(df, inputs), df["label"].to_numpy(), probe=path.stem,
                               weights_sha256=meta["weights_sha256"], inputs=inputs, n_layers=int(meta["n_layers"]),
                               source=source)
        bands.save(SHIPPED_BANDS_DIR / f"{path.stem}.json")
        best = bands.separating(3)
        print(f"{path.stem}: {bands.counts} from {source}; best alone: "
              + ", ".join(f"{bands.names[j]} {bands.auroc[j]:.3f}" for j in best))
    return 0


if __name__ == "__main__":
    sys.exit(main())
