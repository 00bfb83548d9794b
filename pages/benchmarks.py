"""Benchmarks: GRADE next to the baselines, read from the committed ``results/<model>/`` folders.

A thin page: the numbers come from ``python -m grade benchmark`` (see :mod:`grade.studies`); it
only reads CSV/JSON files and draws them, so it needs no model and computes nothing.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd
import streamlit as st

from grade.errors import GradeError
from grade.report import figures
from grade.studies import METHOD_ORDER, BenchmarkResult
from studio import session

RESULTS_DIR = Path(os.environ.get("GRADE_RESULTS_DIR") or Path(__file__).resolve().parent.parent / "results")

st.title("Benchmarks")
st.markdown(
    "GRADE and the baselines on the **same labelled questions** of each model: accuracy and AUROC on a held-out "
    "test split, with a 95% bootstrap interval on AUROC (small test sets give wide intervals: read them). "
    "Every score is oriented so that higher = answerable. Regenerate with `python -m grade benchmark --offline`."
)

folders = sorted((p for p in RESULTS_DIR.glob("*") if (p / "summary.json").is_file()),
                 key=lambda p: (not (p / "main_table.csv").is_file(), p.name)) if RESULTS_DIR.is_dir() else []
if not folders:
    st.info(f"No benchmark results under `{session.shown_path(RESULTS_DIR)}` yet. Run `python -m grade benchmark --model <name>`.")
    st.stop()


@st.cache_data(show_spinner=False)
def _load(folder: str, stamp: float):
    return BenchmarkResult.load(folder)


choice = st.selectbox("Model", [p.name for p in folders], key="benchmark_model")
folder = RESULTS_DIR / choice
try:
    result = _load(str(folder), (folder / "summary.json").stat().st_mtime)
except (GradeError, OSError, ValueError) as exc:
    st.error(session.user_text(f"Could not read the results in {folder}: {exc}"))
    st.stop()


def _num(x, digits=3):
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


st.subheader("Datasets")
rows = []
for name, entry in result.datasets.items():
    split = entry.get("split", {})
    rows.append({"dataset": name, "answerable": entry.get("answerable"), "unanswerable": entry.get("unanswerable"),
                 "benchmarked": "yes" if entry.get("eligible") else "no",
                 "test questions": split.get("test", {}).get("n"),
                 "why not": "" if entry.get("eligible") else entry.get("reason", "")})
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
for note in result.notes:
    st.caption(note)

st.subheader("Main table")
main = pd.DataFrame(result.main)
if main.empty:
    st.info("No method was scored.")
    st.stop()
main["AUROC [95% CI]"] = [
    f"{_num(a)} [{_num(lo, 2)}, {_num(hi, 2)}]" if not (isinstance(a, float) and math.isnan(a)) else "–"
    for a, lo, hi in zip(main["auroc"], main["auroc_lo"], main["auroc_hi"])
]
main["Acc"] = [_num(a) for a in main["acc"]]
wide = main.pivot(index="method", columns="dataset", values=["Acc", "AUROC [95% CI]"])
order = [m for m in METHOD_ORDER if m in wide.index]
wide = wide.loc[order]
wide.columns = [f"{dataset} {metric}" for metric, dataset in wide.columns]
st.dataframe(wide[sorted(wide.columns)], width="stretch")
st.caption("Judge gives a yes/no answer: accuracy only. Length_pre / Length_pos: the number of tokens alone "
           "(prompt; prompt + response), the confound every feature carries. Training-free scores use the accuracy-maximising threshold "
           "of the training + validation questions; probes use 0.5.")

figs = figures(result)
tabs = st.tabs(["AUROC", "Transfer", "Robustness", "Ablations", "Confidently wrong", "Conditions"])
with tabs[0]:
    if "auroc_bars" in figs:
        st.plotly_chart(figs["auroc_bars"], width="stretch")
with tabs[1]:
    st.markdown("Detectors trained on one dataset (rows) and tested on another (columns). Test questions seen in "
                "training under another condition are left out.")
    if "transfer_heatmap" in figs:
        st.plotly_chart(figs["transfer_heatmap"], width="stretch")
    else:
        st.info("Only one dataset qualified: no transfer to show.")
with tabs[2]:
    st.markdown("The same test questions with a reworded instruction or an added irrelevant sentence; detectors "
                "are not retrained. Relative change = (perturbed − original) / original.")
    if result.robustness:
        rob = pd.DataFrame(result.robustness)
        st.dataframe(rob, hide_index=True, width="stretch")
        if "robustness" in figs:
            st.plotly_chart(figs["robustness"], width="stretch")
    else:
        st.info("No perturbed runs in these results.")
with tabs[3]:
    if result.ablations:
        st.dataframe(pd.DataFrame(result.ablations), hide_index=True, width="stretch")
        if "ablations" in figs:
            st.plotly_chart(figs["ablations"], width="stretch")
with tabs[4]:
    st.markdown("Test questions where every sample gives the same answer and it is wrong: the model is confidently "
                "wrong. All are unanswerable, so accuracy = share flagged as unanswerable.")
    if result.confidently_wrong:
        cw = pd.DataFrame(result.confidently_wrong)
        st.dataframe(cw[cw["dataset"] == "all"].drop(columns="dataset"), hide_index=True, width="stretch")
        with st.expander("per dataset"):
            st.dataframe(cw[cw["dataset"] != "all"], hide_index=True, width="stretch")
with tabs[5]:
    st.markdown("The same questions under two conditions (with and without the supporting document; short and long "
                "documents): detectors trained under one condition, tested on every question of the other that they "
                "did not train on. Rows where train = test are that condition's own test split.")
    if result.conditions:
        cond = pd.DataFrame(result.conditions)
        cond["AUROC [95% CI]"] = [f"{_num(a)} [{_num(lo, 2)}, {_num(hi, 2)}]"
                                  for a, lo, hi in zip(cond["auroc"], cond["auroc_lo"], cond["auroc_hi"])]
        st.dataframe(cond[["study", "method", "train", "test", "n", "positives", "acc", "AUROC [95% CI]"]],
                     hide_index=True, width="stretch")
    else:
        st.info("No condition study in these results (see the model-documents results).")
