"""A probe's training set from labelled files: every question once, unanswerable rows capped, features
stored and read back (``make probes``, ``scripts/build/build_probes.py``, and experiments on its mix).

A small model leaves most questions of a benchmark unanswerable (TriviaQA: 30 answerable, 856 not):
past a few hundred, more unanswerable rows of one set only teach the probe that set's prompt style,
and each costs a forward and backward pass. So each labelled file gives all its answerable rows and
at most :data:`MAX_UNANSWERABLE_PER_SET` unanswerable ones (a fixed, seeded choice, so the stores stay
valid across runs); each class is then capped at :data:`MAX_PER_CLASS`, as the reference does.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import pandas as pd

from ..common.errors import InputError
from ..common.io import jsonl_stem

log = logging.getLogger(__name__)

MAX_PER_CLASS = 1000  # the reference caps each class at 1000
MAX_UNANSWERABLE_PER_SET = 250


def label_files(model: str, labels_dirs: list[Path]) -> list[Path]:
    """Labelled files of ``model``, folder by folder in the given order (that order decides which copy
    of a question asked in two sets is kept); one dataset name may come from one folder only."""
    files: dict[str, Path] = {}
    for folder in labels_dirs:
        for file in sorted((folder / model).glob("*.jsonl*")):
            if jsonl_stem(file) in files:
                raise InputError(f"dataset {jsonl_stem(file)} is labelled twice: {files[jsonl_stem(file)]} and {file}")
            files[jsonl_stem(file)] = file
    return list(files.values())


def cap_unanswerable(rows: list[dict], limit: int = MAX_UNANSWERABLE_PER_SET) -> list[dict]:
    """All answerable rows and at most ``limit`` unanswerable ones, chosen by a hash of their id (the
    same rows on every run, whatever order the file has)."""
    negatives = [r for r in rows if r["label"] == 0]
    if len(negatives) <= limit:
        return rows
    rank = lambda r: hashlib.sha1(str(r["id"]).encode()).hexdigest()  # noqa: E731
    kept = {id(r) for r in sorted(negatives, key=rank)[:limit]}
    return [r for r in rows if r["label"] != 0 or id(r) in kept]


def question_key(row: dict) -> tuple[str, str]:
    return " ".join(str(row["question"]).lower().split()), " ".join(str(row.get("context") or "").lower().split())


def extract_all(model: str, loss: str, labels_dirs: list[Path], features_dir: Path, *,
                compute: bool = True, max_unanswerable: int = MAX_UNANSWERABLE_PER_SET) -> list[tuple[Path, set]]:
    """Feature stores of every labelled file of ``model`` with the keys of the rows labelled now.

    Stores are first brought in line with the label files (changed labels, changed ``pos``
    responses); with ``compute`` the missing rows are extracted.
    """
    from ..batch.features import FeatureStore, extract_features, read_labelled, row_key
    from ..models.models import load_model

    stores = []
    lm = None
    seen: set[tuple[str, str]] = set()
    for file in label_files(model, labels_dirs):
        rows = []
        for row in read_labelled(file):  # a question already in an earlier set would leak across splits
            key = question_key(row)
            if key not in seen:
                seen.add(key)
                rows.append(row)
        if not rows:
            log.info("  %s: no labelled rows, skipped", file.name)
            continue
        rows = cap_unanswerable(rows, max_unanswerable)
        store = features_dir / model / loss / f"{jsonl_stem(file)}.parquet"
        if compute:
            if lm is None:
                lm = load_model(model)
            t = time.perf_counter()
            report = extract_features(lm, rows, store, loss=loss, progress=True, chunk_size=32)
            log.info("  %s: %s (%.0f s)", file.name, report, time.perf_counter() - t)
        elif store.is_dir():
            FeatureStore(store).refresh(rows, loss)
        if store.is_dir():
            stores.append((store, {row_key(r) for r in rows}))
    return stores


def current_rows(stores: list[tuple[Path, set]], hidden: bool) -> pd.DataFrame:
    """The stored rows that are labelled now (a row whose question lost its label is left out)."""
    from ..batch.features import load_features

    frames = []
    for store, keys in stores:
        df = load_features(store, hidden=hidden)
        wanted = [(d, i, c) in keys for d, i, c in zip(df["dataset"], df["id"], df["has_context"])]
        frames.append(df[wanted])
    df = dedupe(pd.concat(frames, ignore_index=True))
    df["group"] = df["id"].str.removesuffix("-reworded")  # one fact in two wordings: one group
    return df


def dedupe(df: pd.DataFrame) -> pd.DataFrame:
    """First row of each question (same text, same with/without document), stores in the given order."""
    key = df["question"].str.lower().str.split().str.join(" ")
    return df[~pd.DataFrame({"q": key, "c": df["has_context"]}).duplicated()].reset_index(drop=True)
