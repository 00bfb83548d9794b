"""The benchmark's data and protocol: which labelled rows enter, their seeded split, and the per-dataset
:class:`Table` of GRADE features and baseline scores (see :mod:`grade.studies`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..verdict.detectors.baselines import SCORE_KEYS, decode_vector
from ..common.metrics import heldout_metrics
from ..tasks.tasks import answer_key

GRADE_METHODS = ("GRADE_pre", "GRADE_pos")
SUPERVISED = ("GRADE_pre", "GRADE_pos", "Align-P", "SAPLMA")
UNSUPERVISED = ("P-Entropy", "IC", "CoE-R", "CoE-C", "Self-consistency", "EigenScore")
#: Length alone (tokens the loss is computed over: the prompt for pre, prompt + response for pos), a
#: threshold whose direction is fitted on train: GRADE's features grow with the input, so every table shows
#: how much of a detector's AUROC length alone already gives (on GSM8K it is a strong confound).
LENGTH_METHODS = ("Length_pre", "Length_pos")
METHOD_ORDER = ("GRADE_pre", "GRADE_pos", "P-Entropy", "Judge", "IC", "Align-P", "SAPLMA", "CoE-R", "CoE-C",
                "Self-consistency", "EigenScore", *LENGTH_METHODS)


@dataclass
class Protocol:
    """Settings of one benchmark run (all recorded next to the results)."""

    fractions: tuple[float, float, float] = (0.6, 0.2, 0.2)
    seed: int = 42
    min_per_class: int = 30
    max_per_class: int | None = None
    #: dataset -> its own cap, where it differs from ``max_per_class``
    max_per_class_by_dataset: dict[str, int] = field(default_factory=dict)
    n_boot: int = 1000
    ci: float = 0.95
    probe_kind: str = "mlp"
    probe_epochs: int = 100  # the paper's maximum; the best validation epoch is kept


def metrics(y: np.ndarray, s: np.ndarray, threshold: float, protocol: Protocol, *, with_auroc: bool = True,
            seed: int = 0) -> dict[str, Any]:
    """:func:`grade.common.metrics.heldout_metrics` with the protocol's bootstrap settings."""
    return heldout_metrics(y, s, threshold, with_auroc=with_auroc, n_boot=protocol.n_boot, ci=protocol.ci, seed=seed)


# --------------------------------------------------------------------------------------------------
# data


@dataclass
class Table:
    """Everything known about one (dataset, variant) of one model, row-aligned.

    ``split``: "train" / "val" / "test" per row. ``grade[name]``: (n, L) arrays (``pre`` / ``pos``
    rank ratios, ``srank_g_pre`` ...). ``scores[method]``: (n,) training-free scores (NaN where not
    computed). ``align[layer]``: (n, d) last prompt token states. ``saplma``: (n, d). ``prompt_entropy``:
    (n,) entropy after the prompt, the GRADE_pre loss (NaN where a row has no ``pre`` features).
    """

    dataset: str
    variant: str
    ids: np.ndarray
    y: np.ndarray
    split: np.ndarray
    grade: dict[str, np.ndarray] = field(default_factory=dict)
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    align: dict[int, np.ndarray] = field(default_factory=dict)
    saplma: np.ndarray | None = None
    confidently_wrong: np.ndarray | None = None
    source: np.ndarray | None = None  # each row's own dataset field (differs from ``dataset`` when pooled)
    prompt_entropy: np.ndarray | None = None
    task: np.ndarray | None = None  # each row's task ("qa", "mmlu", "gsm8k", ...)
    has_context: np.ndarray | None = None  # whether the row's prompt carries a document

    def subset(self, rows: np.ndarray, name: str, split: np.ndarray) -> "Table":
        """The given rows as a table of their own, with a new split."""
        return Table(name, self.variant, self.ids[rows], self.y[rows], np.asarray(split, dtype=object),
                     grade={k: v[rows] for k, v in self.grade.items()},
                     scores={k: v[rows] for k, v in self.scores.items()},
                     align={k: v[rows] for k, v in self.align.items()},
                     saplma=None if self.saplma is None else self.saplma[rows],
                     confidently_wrong=None if self.confidently_wrong is None else self.confidently_wrong[rows],
                     source=None if self.source is None else self.source[rows],
                     prompt_entropy=None if self.prompt_entropy is None else self.prompt_entropy[rows],
                     task=None if self.task is None else self.task[rows],
                     has_context=None if self.has_context is None else self.has_context[rows])

    def rows(self, part: str | tuple[str, ...]) -> np.ndarray:
        parts = (part,) if isinstance(part, str) else part
        return np.flatnonzero(np.isin(self.split, parts))

    def has(self, method: str) -> bool:
        if method in GRADE_METHODS:
            return method.split("_")[1] in self.grade
        if method == "Align-P":
            return bool(self.align)
        if method == "SAPLMA":
            return self.saplma is not None
        if method == "Judge":
            return "Judge" in self.scores
        return method in self.scores and np.isfinite(self.scores[method]).any()


def read_labels(path: str | Path) -> list[dict]:
    """Labelled rows (label 0/1 only) of one JSONL file."""
    from ..batch.features import read_labelled

    return read_labelled(path)


def confidently_wrong(row: dict) -> bool:
    """All samples give the same answer (:func:`grade.tasks.tasks.answer_key`) and none is correct."""
    samples = row.get("samples") or []
    if not samples or row.get("accuracy") is None or float(row["accuracy"]) > 0:
        return False
    keys = {answer_key(row.get("task") or "qa", s, row.get("choices")) for s in samples}
    return len(keys) == 1 and None not in keys


def select_rows(rows: list[dict], protocol: Protocol, dataset: str | None = None) -> tuple[list[dict], dict[str, Any]]:
    """Class counts, and the rows kept (the dataset's cap per class, seeded). ``info['eligible']``
    says whether each class has ``min_per_class`` rows."""
    y = np.array([int(r["label"]) for r in rows], dtype=int)
    counts = {"answerable": int((y == 1).sum()), "unanswerable": int((y == 0).sum())}
    keep = np.arange(len(rows))
    cap = protocol.max_per_class_by_dataset.get(dataset, protocol.max_per_class) if dataset else protocol.max_per_class
    if cap:
        rng = np.random.default_rng(protocol.seed)
        chosen = []
        for cls in (0, 1):
            idx = np.flatnonzero(y == cls)
            chosen.extend(sorted(rng.permutation(idx)[:cap].tolist()))
        keep = np.array(sorted(chosen), dtype=int)
    kept = [rows[i] for i in keep]
    info = {**counts, "kept": len(kept),
            "eligible": min(counts.values()) >= protocol.min_per_class}
    return kept, info


def assign_splits(ids: list[str], y: np.ndarray, protocol: Protocol) -> np.ndarray:
    from ..verdict.probe import stratified_split

    split = np.empty(len(ids), dtype=object)
    for name, idx in zip(("train", "val", "test"), stratified_split(y, fractions=protocol.fractions, seed=protocol.seed)):
        split[idx] = name
    return split


def _grade_arrays(frame, ids: list[str]) -> dict[str, np.ndarray]:
    """(n, L) rank ratios and stable ranks for ``ids`` from a feature DataFrame (NaN rows if absent)."""
    from ..batch.features import feature_matrix

    frame = frame.drop_duplicates("id").set_index("id")
    present = [i for i in ids if i in frame.index]
    if not present:
        return {}
    sub = frame.loc[present]
    out = {}
    where = [{i: k for k, i in enumerate(ids)}[i] for i in present]
    for column in ("rank_ratio", "srank_g", "srank_h"):
        values = feature_matrix(sub, column)
        full = np.full((len(ids), values.shape[1]), np.nan)
        full[where] = values
        out[column] = full
    if "n_tokens" in sub.columns:
        out["n_tokens"] = np.full(len(ids), np.nan)
        out["n_tokens"][where] = sub["n_tokens"].to_numpy(dtype=float)
    return out


def build_table(dataset: str, variant: str, rows: list[dict], split: np.ndarray, *,
                features: dict[str, Any], baseline_cache: dict[str, dict] | None) -> Table:
    """Assemble a :class:`Table` from label rows, feature DataFrames (``{"pre": df, "pos": df}``) and
    a baseline cache (id -> record)."""
    ids = [str(r["id"]) for r in rows]
    table = Table(dataset, variant, np.array(ids, dtype=object), np.array([int(r["label"]) for r in rows]),
                  np.asarray(split, dtype=object))
    table.confidently_wrong = np.array([confidently_wrong(r) for r in rows])
    table.source = np.array([str(r.get("dataset") or dataset) for r in rows], dtype=object)
    table.task = np.array([str(r.get("task") or "qa") for r in rows], dtype=object)
    table.has_context = np.array([bool(r.get("context")) for r in rows])
    for loss, frame in features.items():
        if frame is None:
            continue
        arrays = _grade_arrays(frame, ids)
        if arrays:
            table.grade[loss] = arrays["rank_ratio"]
            table.grade[f"srank_g_{loss}"] = arrays["srank_g"]
            table.grade[f"srank_h_{loss}"] = arrays["srank_h"]
            if "n_tokens" in arrays:
                table.scores[f"Length_{loss}"] = arrays["n_tokens"]
        if loss == "pre" and "loss_value" in frame.columns:
            entropy = frame.drop_duplicates("id").set_index("id")["loss_value"]
            table.prompt_entropy = np.array([float(entropy[i]) if i in entropy.index else np.nan for i in ids])
    cache = baseline_cache or {}
    records = [cache.get(i) for i in ids]
    if any(r is not None for r in records):
        for method, key in SCORE_KEYS.items():
            values = np.array([np.nan if r is None or r.get(key) is None else float(r[key]) for r in records])
            if np.isfinite(values).any():
                table.scores[method] = values
        layers = sorted({int(k) for r in records if r for k in r.get("align_hidden", {})})
        if all(r is not None for r in records):
            for layer in layers:
                table.align[layer] = np.stack([decode_vector(r["align_hidden"][str(layer)]) for r in records])
            table.saplma = np.stack([decode_vector(r["saplma_hidden"]) for r in records])
    return table
