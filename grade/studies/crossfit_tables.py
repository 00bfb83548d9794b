"""The cross-fitted benchmark's tables (:mod:`grade.studies.crossfit` fits the columns): each method's metrics with
their intervals on the main table's questions and on every question it scores, every GRADE variant, the paired
differences to P-Entropy and to length, selective answering, confidently wrong questions and transfer.
Rows are plain dicts, written by :mod:`grade.studies.crossfit_report`."""

from __future__ import annotations

import numpy as np

from ..common.metrics import auroc, bootstrap_ci, paired_bootstrap_diff
from .crossfit import (CrossfitData, CrossfitRun, LOSSES, fingerprint, main_methods, paper_variant,
                       shipped_variant, variant_pool)

def _seed(*parts: str) -> int:
    from .scorers import _seed_of

    return _seed_of(*parts)


def accuracy(y, pred) -> float:
    return float((np.asarray(pred) == np.asarray(y)).mean()) if len(y) else float("nan")


def column_metrics(y: np.ndarray, s: np.ndarray, pred: np.ndarray, *, with_auroc: bool, n_boot: int, ci: float,
                   seed: int) -> dict:
    """n, positives, acc with its interval, AUROC with its interval (stratified bootstrap, :mod:`grade.common.metrics`)."""
    out = {"n": int(len(y)), "positives": int(y.sum()), "missing": 0, "acc": accuracy(y, pred)}
    out["acc_lo"], out["acc_hi"] = bootstrap_ci(y, pred.astype(float), accuracy, n_boot=n_boot, ci=ci, seed=seed)
    out["auroc"] = out["auroc_lo"] = out["auroc_hi"] = float("nan")
    if with_auroc:
        out["auroc"] = auroc(y, s)
        out["auroc_lo"], out["auroc_hi"] = bootstrap_ci(y, s, auroc, n_boot=n_boot, ci=ci, seed=seed)
    return out


def common_rows(run: CrossfitRun, name: str) -> tuple[np.ndarray, list[str]]:
    """The rows of ``name`` that every method with a column scores, and those methods (main table order)."""
    d, cols = run.data[name], run.columns[name]
    methods = [m for m in main_methods() if m in cols]
    ok = np.ones(len(d.y), bool)
    for m in methods:
        ok &= np.isfinite(cols[m].scores)
    return np.flatnonzero(ok), methods


def main_rows(run: CrossfitRun, test_scores: list[dict] | None = None) -> list[dict]:
    """The main table: per dataset, every method on the same questions (:func:`common_rows`)."""
    cfg, out = run.config, []
    for name, d in run.data.items():
        rows, methods = common_rows(run, name)
        info = run.info[name]
        info["common"] = {"n": int(len(rows)), "answerable": int(d.y[rows].sum())}
        if len(rows) == 0 or len(np.unique(d.y[rows])) < 2:
            continue
        for m in methods:
            c = run.columns[name][m]
            s, pred = c.scores[rows], c.predictions(d.folds)[rows]
            out.append({"dataset": name, "method": m, **column_metrics(d.y[rows], s, pred, with_auroc=c.auroc,
                        n_boot=cfg.n_boot, ci=cfg.ci, seed=_seed("crossfit", m, name)), "protocol": "crossfit"})
            if test_scores is not None:
                test_scores += [{"dataset": name, "method": m, "id": str(d.ids[i]), "label": int(d.y[i]),
                                 "score": float(c.scores[i]), "fold": int(d.folds[i])} for i in rows]
    return out


def all_question_rows(run: CrossfitRun) -> list[dict]:
    """Each method on every question it scores (n differs between methods)."""
    cfg, out = run.config, []
    for name, d in run.data.items():
        for m in main_methods():
            c = run.columns[name].get(m)
            if c is None:
                continue
            rows = np.flatnonzero(np.isfinite(c.scores))
            if len(np.unique(d.y[rows])) < 2:
                continue
            out.append({"dataset": name, "method": m, **column_metrics(d.y[rows], c.scores[rows], c.predictions(d.folds)[rows],
                        with_auroc=c.auroc, n_boot=cfg.n_boot, ci=cfg.ci, seed=_seed("crossfit-all", m, name))})
    return out


def variant_rows(run: CrossfitRun) -> list[dict]:
    """Every GRADE variant fitted (cross-fitted AUROC on all questions with features) and how often the inner
    selection chose it. Picking the best of these by its AUROC would be choosing on test data: the
    ``(selected)`` row is the honest number."""
    cfg, out = run.config, []
    for name, d in run.data.items():
        cols = run.columns[name]
        for loss in LOSSES:
            sel = cols.get(f"GRADE_{loss} (selected)")
            chosen = sel.extra.get("chosen", []) if sel else []
            for key, c in cols.items():
                if not key.startswith(f"GRADE_{loss}[") and key != f"GRADE_{loss} (selected)":
                    continue
                rows = np.flatnonzero(np.isfinite(c.scores))
                m = column_metrics(d.y[rows], c.scores[rows], c.predictions(d.folds)[rows], with_auroc=True,
                                   n_boot=cfg.n_boot, ci=cfg.ci, seed=_seed("crossfit-variant", key, name))
                estimator, inputs, band = key.split("[")[1].rstrip("]").split(",") if "[" in key else ("chosen on inner splits", "", "")
                out.append({"dataset": name, "loss": loss, "variant": key, "estimator": estimator, "inputs": inputs,
                            "band": band, "paper": key == paper_variant(loss).key,
                            "shipped": key == shipped_variant(loss, name).key,
                            "in_selection_pool": any(v.key == key for v in variant_pool(loss, cfg.mlp_in_selection)),
                            "times_chosen": chosen.count(key) if "[" in key else len(chosen), **m})
    return out


#: What each method is paired against: the paper's main baseline, GRADE's length confound, and the strongest detector
#: that samples (ten fresh answers a question where GRADE needs one forward and one backward pass).
PAIRED_REFERENCES = ("P-Entropy", "Length_pre", "Length_pos", "Self-consistency")


def paired_rows(run: CrossfitRun, references=PAIRED_REFERENCES) -> list[dict]:
    """Each method's AUROC minus a reference's, on the questions both scored, with a paired stratified
    bootstrap (:func:`grade.common.metrics.paired_bootstrap_diff`). verdict: ``wins`` / ``loses`` when the interval
    excludes 0, else ``tie``."""
    cfg, out = run.config, []
    for name, d in run.data.items():
        cols = run.columns[name]
        for ref in references:
            if ref not in cols:
                continue
            for m in main_methods():
                if m == ref or m not in cols or not cols[m].auroc:
                    continue
                if ref != "P-Entropy" and not m.startswith("GRADE"):  # the confound and the sampler: asked of GRADE only
                    continue
                rows = np.flatnonzero(np.isfinite(cols[m].scores) & np.isfinite(cols[ref].scores))
                if len(np.unique(d.y[rows])) < 2:
                    continue
                diff = paired_bootstrap_diff(d.y[rows], cols[m].scores[rows], cols[ref].scores[rows], n_boot=cfg.n_boot,
                                             ci=cfg.ci, seed=_seed("crossfit-paired", m, ref, name))
                verdict = "wins" if diff["lo"] > 0 else "loses" if diff["hi"] < 0 else "tie"
                out.append({"dataset": name, "method": m, "reference": ref, "n": int(len(rows)),
                            "positives": int(d.y[rows].sum()), "auroc": auroc(d.y[rows], cols[m].scores[rows]),
                            "auroc_reference": auroc(d.y[rows], cols[ref].scores[rows]), **diff, "verdict": verdict})
    return out


def selective_rows(test_scores: list[dict], n_boot: int, ci: float) -> list[dict]:
    """Selective answering on the main table's questions (:func:`grade.studies.runs.selective_answering`)."""
    from .runs import selective_answering
    from .tables import Protocol

    return selective_answering(test_scores, Protocol(n_boot=n_boot, ci=ci))


def confidently_wrong_rows(run: CrossfitRun) -> list[dict]:
    """Per dataset (main table questions) and pooled: of the questions all of whose samples agree and are
    wrong, the share each method flags unanswerable."""
    out, pooled = [], {}
    for name, d in run.data.items():
        rows, methods = common_rows(run, name)
        rows = rows[d.confidently_wrong[rows]]
        for m in methods:
            pred = run.columns[name][m].predictions(d.folds)[rows]
            pooled.setdefault(m, []).append(pred)
            out.append({"dataset": name, "method": m, "n": int(len(rows)),
                        "acc": float((pred == 0).mean()) if len(rows) else float("nan")})
    for m, preds in pooled.items():
        pred = np.concatenate(preds)
        out.append({"dataset": "all", "method": m, "n": int(len(pred)),
                    "acc": float((pred == 0).mean()) if len(pred) else float("nan")})
    return out


def transfer_rows(run: CrossfitRun, stored: list[dict] | None = None,
                  methods=("GRADE_pre", "GRADE_pos", "GRADE_pre (shipped)", "GRADE_pos (shipped)", "Align-P", "SAPLMA")) -> list[dict]:
    """Supervised detectors trained on dataset A scoring dataset B: a question of B that is also in A (one
    question asked with and without its document) is scored by A's fold model that never saw it, any other
    by the mean of A's five fold models. The fold models are the cross-fitting's own; a pair whose column was
    read back from the store is read back too (``stored``: the rows of an earlier run, with fingerprints),
    or left out when its models are gone."""
    cfg, out = run.config, []
    old = {(r["method"], r["train"], r["test"], r.get("fingerprint")): r for r in stored or []}
    for a, da in run.data.items():
        for m in methods:
            if m not in run.columns[a]:
                continue
            models = run.models.get((a, m))
            fold_of = dict(zip(da.ids, da.folds))
            for b, db in run.data.items():
                if b == a or m not in run.columns[b]:
                    continue
                fp = fingerprint(run.columns[a][m].fingerprint, run.columns[b][m].fingerprint)
                if (m, a, b, fp) in old:
                    out.append(old[(m, a, b, fp)])
                    continue
                if models is None:
                    run.notes.append(f"transfer {m} {a} -> {b} not measured: its fold models were read back, not fitted")
                    continue
                rows = np.flatnonzero(db.has_inputs(m))
                scores = transfer_scores(models, db, rows, fold_of)
                keep = np.isfinite(scores)
                rows, scores = rows[keep], scores[keep]
                if len(np.unique(db.y[rows])) < 2:
                    continue
                out.append({"method": m, "train": a, "test": b, **column_metrics(
                    db.y[rows], scores, (scores >= 0.5).astype(int), with_auroc=True, n_boot=cfg.n_boot, ci=cfg.ci,
                    seed=_seed("crossfit-transfer", m, a, b)), "fingerprint": fp})
    return out


def transfer_scores(models: list, db: CrossfitData, rows: np.ndarray, fold_of: dict) -> np.ndarray:
    """(len(rows),) scores of ``db``'s rows by another dataset's fold models (``fold_of``: that dataset's
    id -> fold): a shared question only by the model that never saw it, any other by the mean of all."""
    out = np.full(len(rows), np.nan)
    shared = np.array([db.ids[i] in fold_of for i in rows], dtype=bool)
    live = [m for m in models if m is not None]
    if (~shared).any() and live:
        out[~shared] = np.mean([m.apply(db, rows[~shared]) for m in live], axis=0)
    for f, m in enumerate(models):
        pick = shared & np.array([fold_of.get(db.ids[i]) == f for i in rows], dtype=bool)
        if pick.any() and m is not None:
            out[pick] = m.apply(db, rows[pick])
    return out
