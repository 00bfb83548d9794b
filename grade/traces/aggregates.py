"""Numbers over a trace store: the per-trace summary of ``grade traces --json`` and the case-study
aggregates (:func:`aggregate`, :func:`aggregate_markdown`)."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from ..steps.locate import DEFAULT_LOCATOR
from .analysis import TOKEN_CLASSES
from .store import ERROR_KINDS, _missing


def json_doc_id(doc_id: str, fmt: str | None, int_ids: bool = False):
    """lm-eval numbers its documents, and a trace JSONL may: give such ids back as integers."""
    numbered = fmt == "lm-eval" or int_ids
    return int(doc_id) if numbered and re.fullmatch(r"-?\d+", str(doc_id)) else doc_id


def summary_rows(frame, fmt: str | None = None, int_ids: bool = False) -> list[dict]:
    """The per-trace summary of ``python -m grade traces --json``; ``cut_off`` only where the store knows it,
    ``verifier`` only where the step verifier ran (``suspect_step`` null there: no step stands out)."""
    rows = []
    for r in frame.itertuples(index=False):
        row = {"doc_id": json_doc_id(r.doc_id, fmt, int_ids), "sample": int(r.sample),
               "correct": None if _missing(r.correct) else bool(r.correct),
               "grade_pos": float(r.grade_pos), "n_steps": int(r.n_steps), "peak_step": int(r.peak_step)}
        suspect = getattr(r, "suspect_step", None)
        if not _missing(suspect):  # stores of format 1 have none
            row.update(suspect_step=int(suspect), suspect_step_text=r.suspect_step_text, locator=r.locator,
                       step_ranking=[int(k) for k in r.step_ranking], step_texts=list(r.step_texts),
                       flagged_steps=[k + 1 for k, v in enumerate(r.step_check) if v > 0])
        cut = getattr(r, "cut_off", None)
        if not _missing(cut):  # only generated traces (labels, Inspect logs) know it
            row["cut_off"] = bool(cut)
        reader = getattr(r, "verifier_reader", None)
        if not _missing(reader):  # the verifier ran (stores of format 3); its suspect_step null = no step stands out
            step = r.verifier_suspect_step
            row["verifier"] = {"reader": reader, "suspect_step": None if _missing(step) else int(step),
                               "suspect_step_text": None if _missing(step) else r.verifier_suspect_step_text,
                               "threshold": float(r.verifier_threshold),
                               "step_probability": [float(p) for p in r.step_verifier_probability]}
        rows.append(row)
    return rows


#: Scores that could rank wrong traces above correct ones; higher = more likely wrong, fixed in advance.
RANKING_SCORES = {
    "GRADE_pos": "grade_pos",
    "peak step ratio": "peak_step_ratio",
    "mean CE loss": "loss_value",
    "length (tokens)": "n_tokens",
    "steps": "n_steps",
}


def _thirds(relative: np.ndarray) -> dict[str, float]:
    if not len(relative):
        return {"first_third": math.nan, "middle_third": math.nan, "last_third": math.nan}
    return {"first_third": float(np.mean(relative < 1 / 3)),
            "middle_third": float(np.mean((relative >= 1 / 3) & (relative <= 2 / 3))),
            "last_third": float(np.mean(relative > 2 / 3))}


def aggregate(frame, tokens=None, *, n_boot: int = 1000, seed: int = 0, token_limit: int | None = None) -> dict[str, Any]:
    """Numbers for the case study, from :meth:`TraceStore.traces` (and its tokens, for base rates).

    ``token_limit``: the ``max_new_tokens`` the traces were generated under, where known (the store's
    ``meta.json`` source names it for generated traces); only the wording of the cut-off line uses it.

    Returns a JSON-able dict:

    * ``counts``: traces, correct, wrong, unknown;
    * ``cut_off``: traces whose ``cut_off`` is known, how many of them stopped at the token limit (``traces``)
      and how many of the wrong ones did (``wrong``), and ``token_limit``;
    * ``ranking``: per score of :data:`RANKING_SCORES`, AUROC for "wrong" (1) against "correct" (0) with a
      stratified percentile bootstrap interval (:func:`grade.common.metrics.bootstrap_ci`); higher scores are
      taken to mean "wrong" for every score, decided before looking at any data;
    * ``peak_position``: per group (correct, wrong), where in the trace the peak step lies: mean relative
      position (0 = first step, 1 = last; traces with one step left out) and the share in each third;
    * ``peak_token_class``: per group, the class of the highest-shock token, beside each class's share of all
      response tokens (the rate a peak would have by chance);
    * ``annotations``: over traces with a marked error step, how often the peak step (and the peak token's
      step) is that step, beside the chance rate (mean 1/K) and within one step.
    """
    from ..common.metrics import auroc, bootstrap_ci

    correct = frame["correct"]
    known = correct.notna().to_numpy()
    is_wrong = (~correct.fillna(True).astype(bool)).to_numpy()
    groups = {"correct": known & ~is_wrong, "wrong": known & is_wrong}
    out: dict[str, Any] = {"counts": {"traces": int(len(frame)), "correct": int(groups["correct"].sum()),
                                      "wrong": int(groups["wrong"].sum()), "unknown": int((~known).sum())}}
    # a trace cut off by the token limit may have no final answer: its "wrong" may only mean unfinished
    cut = frame["cut_off"].astype("boolean") if "cut_off" in frame else None
    cut_known = cut.notna().to_numpy() if cut is not None else np.zeros(len(frame), dtype=bool)
    is_cut = cut.fillna(False).to_numpy(dtype=bool) if cut is not None else np.zeros(len(frame), dtype=bool)
    out["cut_off"] = {"known": int(cut_known.sum()), "traces": int(is_cut.sum()),
                      "wrong": int((is_cut & groups["wrong"]).sum()), "token_limit": token_limit}
    ranking = []
    y = is_wrong[known].astype(int)
    for name, column in RANKING_SCORES.items():
        s = frame[column].to_numpy(dtype=np.float64)[known]
        value = auroc(y, s) if len(y) else math.nan
        lo, hi = bootstrap_ci(y, s, auroc, n_boot=n_boot, seed=seed) if math.isfinite(value) else (math.nan, math.nan)
        ranking.append({"score": name, "auroc": value, "lo": lo, "hi": hi, "n": int(len(y)), "wrong": int(y.sum())})
    out["ranking"] = ranking

    positions = []
    steps = frame["n_steps"].to_numpy()
    peak = frame["peak_step"].to_numpy()
    for group, mask in groups.items():
        multi = mask & (steps > 1)
        relative = (peak[multi] - 1) / (steps[multi] - 1)
        positions.append({"group": group, "n": int(mask.sum()), "n_multi_step": int(multi.sum()),
                          "mean_relative": float(relative.mean()) if len(relative) else math.nan,
                          "last_step": float(np.mean(peak[multi] == steps[multi])) if multi.any() else math.nan,
                          **_thirds(relative)})
    out["peak_position"] = positions

    classes = []
    for group, mask in groups.items():
        picked = frame.loc[mask, "peak_token_class"]
        classes.append({"group": f"{group}: peak token", "n": int(mask.sum()),
                        **{c: float(np.mean(picked == c)) if len(picked) else math.nan for c in TOKEN_CLASSES}})
    if tokens is not None and len(tokens):
        for group, mask in groups.items():
            ids = set(frame.loc[mask, "trace_id"])
            picked = tokens.loc[tokens["trace_id"].isin(ids), "token_class"]
            classes.append({"group": f"{group}: all tokens", "n": int(len(picked)),
                            **{c: float(np.mean(picked == c)) if len(picked) else math.nan for c in TOKEN_CLASSES}})
    out["peak_token_class"] = classes

    notes: dict[str, Any] = {"annotated": 0}
    if "error_step" in frame:
        marked = frame[frame["error_step"].notna()]
        notes["annotated"] = int((frame["error_step"].notna() | frame["error_kind"].notna()).sum())
        notes["with_step"] = int(len(marked))
        if len(marked):
            error = marked["error_step"].astype(int).to_numpy()
            notes["peak_step_is_error_step"] = float(np.mean(marked["peak_step"].to_numpy() == error))
            if "suspect_step" in marked:  # stores of format 1 have no suspect step
                suspect = marked["suspect_step"].to_numpy(dtype=float)
                notes["suspect_step_is_error_step"] = float(np.mean(suspect == error))
            notes["peak_token_step_is_error_step"] = float(np.mean(marked["peak_token_step"].to_numpy() == error))
            notes["peak_step_within_one"] = float(np.mean(np.abs(marked["peak_step"].to_numpy() - error) <= 1))
            notes["chance"] = float(np.mean(1.0 / marked["n_steps"].to_numpy()))
        kinds = frame["error_kind"].dropna()
        notes["kinds"] = {k: int((kinds == k).sum()) for k in ERROR_KINDS if (kinds == k).any()}
    out["annotations"] = notes
    return out


def _fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.{digits}f}"


def cut_off_line(agg: dict[str, Any]) -> str | None:
    """One sentence on the traces that stopped at the token limit (from :func:`aggregate`); None where none did
    or no trace's cut-off is known."""
    cut, counts = agg.get("cut_off") or {}, agg["counts"]
    if not cut.get("traces"):
        return None
    limit = f"the {cut['token_limit']}-token limit" if cut.get("token_limit") else "the token limit"
    line = (f"{cut['wrong']} of the {counts['wrong']} wrong traces stopped at {limit} before an answer: their "
            "'wrong' may only mean unfinished")
    extra = []
    if cut["traces"] != cut["wrong"]:
        extra.append(f"{cut['traces']} of all {counts['traces']} traces stopped there")
    if cut["known"] < counts["traces"]:
        unknown = counts["traces"] - cut["known"]
        extra.append(f"not known for {unknown} trace{'' if unknown == 1 else 's'}")
    return line + (f" ({'; '.join(extra)})" if extra else "")


def aggregate_markdown(agg: dict[str, Any]) -> str:
    """The aggregates as Markdown tables (the command's text output)."""
    c = agg["counts"]
    lines = [f"{c['traces']} traces: {c['correct']} correct, {c['wrong']} wrong, {c['unknown']} unknown", ""]
    cut = cut_off_line(agg)
    if cut:
        lines += [cut, ""]
    lines += ["Ranking wrong traces above correct ones (AUROC, 95% bootstrap interval; higher score = wrong)", "",
              "| score | AUROC | interval |", "|---|---|---|"]
    for r in agg["ranking"]:
        lines.append(f"| {r['score']} | {_fmt(r['auroc'])} | [{_fmt(r['lo'], 2)}, {_fmt(r['hi'], 2)}] |")
    lines += ["", "Where the step shock peaks (relative position 0 = first step, 1 = last)", "",
              "| traces | n | mean position | first third | middle third | last third | last step |",
              "|---|---|---|---|---|---|---|"]
    for r in agg["peak_position"]:
        lines.append(f"| {r['group']} | {r['n']} | {_fmt(r['mean_relative'], 2)} | {_fmt(r['first_third'], 2)} | "
                     f"{_fmt(r['middle_third'], 2)} | {_fmt(r['last_third'], 2)} | {_fmt(r['last_step'], 2)} |")
    lines += ["", "Token class of the highest-shock token, beside the share of each class among all tokens", "",
              "| tokens | n | " + " | ".join(TOKEN_CLASSES) + " |", "|---|---|" + "---|" * len(TOKEN_CLASSES)]
    for r in agg["peak_token_class"]:
        lines.append(f"| {r['group']} | {r['n']} | " + " | ".join(_fmt(r[k], 2) for k in TOKEN_CLASSES) + " |")
    a = agg["annotations"]
    if a.get("with_step"):
        if "suspect_step_is_error_step" in a:
            lines += ["", f"Annotated or known error steps: {a['with_step']}; the suspect step "
                          f"({DEFAULT_LOCATOR}) is the error step in {_fmt(a['suspect_step_is_error_step'], 2)} of them "
                          f"(chance {_fmt(a['chance'], 2)})"]
        lines += ["", f"Annotated error steps: {a['with_step']}; the peak step is the error step in "
                      f"{_fmt(a['peak_step_is_error_step'], 2)} of them (peak token's step: "
                      f"{_fmt(a['peak_token_step_is_error_step'], 2)}; within one step: {_fmt(a['peak_step_within_one'], 2)}; "
                      f"chance {_fmt(a['chance'], 2)})"]
    return "\n".join(lines)
