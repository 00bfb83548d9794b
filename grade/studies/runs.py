"""The studies (main table, transfer, robustness, ablations, confidently wrong, condition transfer) and
their result, :class:`BenchmarkResult`, which saves itself and loads back (:func:`run_studies`)."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..common.errors import InputError
from ..common.metrics import selective_metrics
from .output import main_markdown, selective_markdown, write_csv, write_scores
from .scorers import LayerThreshold, ProbeScorer, Scorer, evaluate_method, evaluate_scores, make_scorer
from .tables import METHOD_ORDER, Protocol, SUPERVISED, Table, assign_splits, confidently_wrong

log = logging.getLogger(__name__)


def main_table(tables: dict[str, Table], protocol: Protocol, methods=METHOD_ORDER, *,
               test_scores: list[dict] | None = None) -> tuple[list[dict], dict]:
    """One row per (dataset, method): Acc, AUROC and its CI on the test split. Also returns the
    fitted scorers, ``{(dataset, method): scorer}``, for the other studies. ``test_scores``, where
    given, receives the per-question scores those metrics were computed from (:func:`score_rows`)."""
    from ..common.errors import GradeError

    rows, fitted = [], {}
    for name, table in tables.items():
        for method in methods:
            if not table.has(method):
                continue
            try:
                m, scorer, s = evaluate_scores(method, table, protocol)
            except GradeError as exc:  # e.g. partial caches left one class in a training split
                log.warning("%s on %s not scored: %s", method, name, exc)
                continue
            fitted[(name, method)] = scorer
            if test_scores is not None:
                test_scores += score_rows(table, method, table.rows("test"), s)
            extra = {"layer": scorer.layer} if method == "Align-P" else {}
            rows.append({"dataset": name, "method": method, **m, **extra})
    return rows, fitted


def score_rows(table: Table, method: str, rows: np.ndarray, scores: np.ndarray) -> list[dict]:
    """One record per test question: dataset, method, id, label and the detector's score (higher =
    answerable), the input of the selective-answering study and its curves."""
    return [{"dataset": table.dataset, "method": method, "id": str(table.ids[k]), "label": int(table.y[k]),
             "score": float(v)} for k, v in zip(rows, scores)]


def grouped_scores(test_scores: list[dict]) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """``{(dataset, method): (labels (n,), scores (n,))}`` from :func:`score_rows` records, in their order."""
    out: dict[tuple[str, str], tuple[list, list]] = {}
    for r in test_scores:
        y, s = out.setdefault((r["dataset"], r["method"]), ([], []))
        y.append(int(r["label"]))
        s.append(float(r["score"]))
    return {k: (np.asarray(y, dtype=int), np.asarray(s, dtype=np.float64)) for k, (y, s) in out.items()}


def selective_answering(test_scores: list[dict], protocol: Protocol, coverage: float = 0.5) -> list[dict]:
    """Selective answering per (dataset, method) of the main table: the model answers the test questions the
    detector scores highest and abstains on the rest. Accuracy at ``coverage`` and the area under the
    accuracy-coverage curve, with bootstrap intervals (:func:`grade.common.metrics.selective_metrics`), beside the
    base rate and the oracle."""
    from .scorers import _seed_of

    rows = []
    for (dataset, method), (y, s) in grouped_scores(test_scores).items():
        m = selective_metrics(y, s, coverage=coverage, n_boot=protocol.n_boot, ci=protocol.ci,
                              seed=_seed_of("selective", method, dataset))
        rows.append({"dataset": dataset, "method": method, **m})
    return rows


def transfer_matrix(tables: dict[str, Table], fitted: dict, protocol: Protocol, methods=SUPERVISED) -> list[dict]:
    """Train on A (its fitted scorer), test on B's test split, for every ordered pair.

    When A and B share questions (one dataset asked under two conditions), B's test rows whose
    question was in A's train or validation split are left out, so nothing seen in training is tested.
    """
    out = []
    for method in methods:
        for a, ta in tables.items():
            if (a, method) not in fitted:
                continue
            seen = set(ta.ids[ta.rows(("train", "val"))])
            for b, tb in tables.items():
                if not tb.has(method):
                    continue
                rows = np.array([i for i in tb.rows("test") if tb.ids[i] not in seen], dtype=int)
                if len(rows) == 0 or len(set(tb.y[rows])) < 2:
                    continue
                m, _ = evaluate_method(method, ta, protocol, scorer=fitted[(a, method)], test_table=tb, test_rows=rows)
                out.append({"method": method, "train": a, "test": b, **m})
    return out


def source_tables(tables: dict[str, Table], protocol: Protocol) -> dict[str, Table]:
    """The sources of pooled datasets as tables of their own (``pool:source``), each with its own
    stratified split, for a transfer study between them. Sources with one class are left out."""
    out = {}
    for name, table in tables.items():
        if table.source is None or len(set(table.source)) < 2:
            continue
        for source in sorted(set(table.source)):
            rows = np.flatnonzero(table.source == source)
            y = table.y[rows]
            if min(int(y.sum()), int(len(y) - y.sum())) < 3:
                continue
            split = assign_splits(list(table.ids[rows]), y, protocol)
            out[f"{name}:{source}"] = table.subset(rows, f"{name}:{source}", split)
    return out


def robustness(tables: dict[str, Table], perturbed: dict[tuple[str, str], Table], fitted: dict,
               protocol: Protocol, methods=METHOD_ORDER) -> list[dict]:
    """Scorers fitted on the original prompts, applied to the same test questions with a perturbed
    prompt. Relative change = (perturbed - original) / original, on the rows present in both."""
    out = []
    for (name, variant), pt in perturbed.items():
        table = tables.get(name)
        if table is None:
            continue
        position = {i: k for k, i in enumerate(pt.ids)}
        rows = np.array([k for k in table.rows("test") if table.ids[k] in position], dtype=int)
        prow = np.array([position[table.ids[k]] for k in rows], dtype=int)
        if len(rows) == 0 or len(set(table.y[rows])) < 2:
            continue
        for method in methods:
            if (name, method) not in fitted or not pt.has(method):
                continue
            scorer = fitted[(name, method)]
            base, _ = evaluate_method(method, table, protocol, scorer=scorer, test_rows=rows)
            new, _ = evaluate_method(method, table, protocol, scorer=scorer, test_table=pt, test_rows=prow)
            if new["missing"] == new["n"]:
                continue
            rel = lambda key: (new[key] - base[key]) / base[key] if base[key] and np.isfinite(base[key]) else float("nan")  # noqa: E731
            out.append({"dataset": name, "variant": variant, "method": method, "n": base["n"],
                        "acc": base["acc"], "acc_perturbed": new["acc"], "acc_rel_change": rel("acc"),
                        "auroc": base["auroc"], "auroc_perturbed": new["auroc"], "auroc_rel_change": rel("auroc")})
    return out


def ablations(tables: dict[str, Table], protocol: Protocol) -> list[dict]:
    """GRADE variants on the test split: probe on all layers vs a threshold on the mean / last /
    middle layer ratio; rank ratio vs the raw gradient stable rank srank(C_g); layer thirds."""
    out = []
    for name, table in tables.items():
        for loss in ("pre", "pos"):
            if loss not in table.grade:
                continue
            L = table.grade[loss].shape[1]
            third = max(1, L // 3)
            probe = lambda feature, layers=None, kind=protocol.probe_kind: ProbeScorer(  # noqa: E731
                feature, kind, layers, protocol.seed, protocol.probe_epochs)
            variants: list[tuple[str, Scorer]] = [
                ("probe, all layers (rank ratio)", probe(loss)),
                ("logistic regression, all layers", probe(loss, kind="logreg")),
                ("threshold on the mean ratio", LayerThreshold(loss, "mean")),
                ("threshold on the last layer's ratio", LayerThreshold(loss, "last")),
                ("threshold on the middle layer's ratio", LayerThreshold(loss, "middle")),
                ("probe on srank(C_g) (raw gradient)", probe(f"srank_g_{loss}")),
                (f"probe, first third (layers 0-{third - 1})", probe(loss, slice(0, third))),
                (f"probe, middle third (layers {third}-{2 * third - 1})", probe(loss, slice(third, 2 * third))),
                (f"probe, last third (layers {2 * third}-{L - 1})", probe(loss, slice(2 * third, L))),
            ]
            for label, scorer in variants:
                if scorer.feature not in table.grade:
                    continue
                scorer.fit(table, table.rows("train"), table.rows("val"))
                m, _ = evaluate_method(f"GRADE_{loss}", table, protocol, scorer=scorer)
                out.append({"dataset": name, "loss": loss, "variant": label, **m})
    return out


def confidently_wrong_study(tables: dict[str, Table], fitted: dict, protocol: Protocol) -> list[dict]:
    """Accuracy of every method on the test questions where all samples agree and are wrong (label
    0 throughout: accuracy = share flagged unanswerable), pooled over datasets and per dataset."""
    out = []
    pooled: dict[str, list[tuple[np.ndarray, float]]] = {}
    for name, table in tables.items():
        rows = np.array([k for k in table.rows("test") if table.confidently_wrong[k]], dtype=int)
        for method in METHOD_ORDER:
            if (name, method) not in fitted:
                continue
            scorer = fitted[(name, method)]
            s = scorer.score(table, rows) if len(rows) else np.array([])
            pred = np.where(np.isfinite(s), s >= scorer.threshold, True)
            pooled.setdefault(method, []).append(pred)
            out.append({"dataset": name, "method": method, "n": int(len(rows)),
                        "acc": float((pred == 0).mean()) if len(rows) else float("nan")})
    for method, preds in pooled.items():
        pred = np.concatenate(preds) if preds else np.array([])
        out.append({"dataset": "all", "method": method, "n": int(len(pred)),
                    "acc": float((pred == 0).mean()) if len(pred) else float("nan")})
    return out


def length_halves(table: Table, lengths: np.ndarray, protocol: Protocol) -> tuple[Table, Table, float]:
    """``table``'s rows split at the median of ``lengths`` (e.g. the characters of each question's
    supporting document) into a short and a long half, each with its own stratified split.
    Returns (short, long, median). Rows at the median go to the short half."""
    lengths = np.asarray(lengths, dtype=float)
    median = float(np.median(lengths))
    halves = []
    for name, rows in ((f"{table.dataset}:short", np.flatnonzero(lengths <= median)),
                       (f"{table.dataset}:long", np.flatnonzero(lengths > median))):
        halves.append(table.subset(rows, name, assign_splits(list(table.ids[rows]), table.y[rows], protocol)))
    return halves[0], halves[1], median


def condition_transfer(study: str, first: Table, second: Table, protocol: Protocol,
                       methods=SUPERVISED) -> list[dict]:
    """The supervised detectors trained under one condition and tested under the other, both ways,
    next to each condition's own test split.

    ``first`` and ``second`` hold questions asked two ways (with and without the supporting
    document; short and long documents). A detector fitted on one table's train/validation rows is
    tested on *every* row of the other table whose question it did not see in training: it never
    saw that condition either, so nothing needs holding back, and the larger test set narrows the
    interval. Rows: study, method, train, test, n, positives, acc, auroc and its CI.
    """
    from ..common.errors import GradeError

    out = []
    for method in methods:
        for a, b in ((first, second), (second, first)):
            if not (a.has(method) and b.has(method)):
                continue
            try:
                scorer = make_scorer(method, protocol).fit(a, a.rows("train"), a.rows("val"))
            except GradeError as exc:  # a class missing from a small training split
                log.warning("%s not fitted on %s: %s", method, a.dataset, exc)
                continue
            own, _ = evaluate_method(method, a, protocol, scorer=scorer)
            out.append({"study": study, "method": method, "train": a.dataset, "test": a.dataset, **own})
            seen = set(a.ids[a.rows(("train", "val"))])
            rows = np.array([i for i in range(len(b.ids)) if b.ids[i] not in seen], dtype=int)
            if len(rows) == 0 or len(set(b.y[rows])) < 2:
                continue
            other, _ = evaluate_method(method, a, protocol, scorer=scorer, test_table=b, test_rows=rows)
            out.append({"study": study, "method": method, "train": a.dataset, "test": b.dataset, **other})
    return out


@dataclass
class BenchmarkResult:
    """Every study of one benchmark run; saves itself as CSV + JSON + Markdown (:meth:`save`) and reads
    back (:meth:`load`). Figures are drawn elsewhere (:mod:`grade.studies.report`, the app)."""

    model: str
    protocol: dict
    datasets: dict[str, dict]  # per dataset: class counts, eligibility, split sizes, reason
    main: list[dict]
    transfer: list[dict]
    robustness: list[dict]
    ablations: list[dict]
    confidently_wrong: list[dict]
    notes: list[str] = field(default_factory=list)
    conditions: list[dict] = field(default_factory=list)  # with/without document, short/long document
    selective: list[dict] = field(default_factory=list)  # selective answering per (dataset, method)
    test_scores: list[dict] = field(default_factory=list)  # the main table's per-question test scores

    #: CSV file per study (only studies with rows are written)
    TABLES = ("main_table", "transfer", "robustness", "ablations", "confidently_wrong", "conditions",
              "selective_answering")
    #: the per-question scores, xz-compressed: the curves are drawn from them, and the tracked tree is small
    SCORES_FILE = "test_scores.csv.xz"

    def _rows(self, name: str) -> list[dict]:
        return getattr(self, {"main_table": "main", "selective_answering": "selective"}.get(name, name))

    def save(self, out: str | Path) -> list[Path]:
        """``main_table.{csv,md}``, ``transfer.csv``, ``robustness.csv``, ``ablations.csv``,
        ``confidently_wrong.csv``, ``conditions.csv``, ``selective_answering.{csv,md}``,
        ``test_scores.csv.xz`` and ``summary.json`` under ``out``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name in self.TABLES:
            rows = self._rows(name)
            if rows:
                write_csv(rows, out / f"{name}.csv")
                written.append(out / f"{name}.csv")
        (out / "main_table.md").write_text(main_markdown(self), encoding="utf-8")
        written.append(out / "main_table.md")
        if self.selective:
            (out / "selective_answering.md").write_text(selective_markdown(self), encoding="utf-8")
            written.append(out / "selective_answering.md")
        if self.test_scores:
            write_scores(self.test_scores, out / self.SCORES_FILE)
            written.append(out / self.SCORES_FILE)
        summary = {"model": self.model, "protocol": self.protocol, "datasets": self.datasets, "notes": self.notes}
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float) + "\n", encoding="utf-8")
        written.append(out / "summary.json")
        return written

    @classmethod
    def load(cls, folder: str | Path) -> "BenchmarkResult":
        """A result read back from a results folder (CSV + summary.json)."""
        import pandas as pd

        from .crossfit import test_scores as crossfit_test_scores

        folder = Path(folder)
        summary_path = folder / "summary.json"
        if not summary_path.is_file():
            raise InputError(f"{folder} holds no benchmark results (no summary.json)")
        summary = json.loads(summary_path.read_text(encoding="utf-8"))

        def rows(name: str) -> list[dict]:
            path = folder / (name if name.endswith(".xz") else f"{name}.csv")
            if not path.is_file():
                return []
            frame = pd.read_csv(path, dtype={"id": str} if name == cls.SCORES_FILE else None)
            return [{k: (float("nan") if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                    for r in frame.to_dict("records")]

        return cls(model=summary.get("model", folder.name), protocol=summary.get("protocol", {}),
                   datasets=summary.get("datasets", {}), main=rows("main_table"), transfer=rows("transfer"),
                   robustness=rows("robustness"), ablations=rows("ablations"),
                   confidently_wrong=rows("confidently_wrong"), notes=summary.get("notes", []),
                   conditions=rows("conditions"), selective=rows("selective_answering"),
                   test_scores=rows(cls.SCORES_FILE) or crossfit_test_scores(folder))


#: The studies a benchmark runs besides its main table and selective answering (each costs its own probe fits;
#: ``grade benchmark --studies`` picks some). ``conditions``: the condition pairs' transfer (with/without document,
#: short/long), where the run has such pairs.
OPTIONAL_STUDIES = ("transfer", "robustness", "ablations", "confidently_wrong", "conditions")


def chosen_studies(names) -> tuple[str, ...]:
    """``names`` of :data:`OPTIONAL_STUDIES` as a tuple (``none`` stands for no study; None for all); an unknown
    name is an InputError."""
    if names is None:
        return OPTIONAL_STUDIES
    chosen = tuple(n for n in names if n != "none")
    unknown = sorted(set(chosen) - set(OPTIONAL_STUDIES))
    if unknown:
        raise InputError(f"unknown studies {', '.join(unknown)}; choose from {', '.join(OPTIONAL_STUDIES)} or none")
    return chosen


def run_studies(model: str, tables: dict[str, Table], perturbed: dict[tuple[str, str], Table],
                  dataset_info: dict[str, dict], protocol: Protocol, *, notes: list[str] | None = None,
                  studies: tuple[str, ...] = OPTIONAL_STUDIES,
                  condition_pairs: dict[str, tuple[Table, Table]] | None = None) -> BenchmarkResult:
    """All studies on assembled tables (see :func:`build_table`). ``condition_pairs``: study name ->
    two tables of the same questions under two conditions (see :func:`condition_transfer`); ``studies``: which of
    :data:`OPTIONAL_STUDIES` run (the others' tables stay empty)."""
    studies = chosen_studies(studies)
    if not tables:
        raise InputError("no dataset has enough labelled questions of each class for a benchmark")
    test_scores: list[dict] = []
    main, fitted = main_table(tables, protocol, test_scores=test_scores)
    transfer = []
    if "transfer" in studies:
        transfer = transfer_matrix(tables, fitted, protocol)
        sources = source_tables(tables, protocol)
        if len(sources) > 1:
            _, fitted_sources = main_table(sources, protocol, methods=SUPERVISED)
            transfer += [{**r, "between_sources": True} for r in transfer_matrix(sources, fitted_sources, protocol)]
            notes = list(notes or []) + [
                "Transfer between the sources of a pooled dataset (rows named pool:source) uses each source's own "
                "split; these sources are smaller than the 30-per-class bar, so read them as exploratory."]
    return BenchmarkResult(
        model=model,
        protocol=asdict(protocol),
        datasets=dataset_info,
        main=main,
        transfer=transfer,
        robustness=robustness(tables, perturbed, fitted, protocol) if "robustness" in studies else [],
        ablations=ablations(tables, protocol) if "ablations" in studies else [],
        confidently_wrong=confidently_wrong_study(tables, fitted, protocol) if "confidently_wrong" in studies else [],
        notes=list(notes or []),
        conditions=[r for name, (a, b) in (condition_pairs or {}).items()
                    for r in condition_transfer(name, a, b, protocol)] if "conditions" in studies else [],
        selective=selective_answering(test_scores, protocol),
        test_scores=test_scores,
    )
