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

from grade.common.errors import GradeError
from grade.studies.report import figures
from grade.studies import METHOD_ORDER, BenchmarkResult, selective_summary
from studio import session
from grade.studies.crossfit import main_methods
from grade.verdict.measured import MIN_QUESTIONS
from studio.summaries import benchmark_summary, explain, paired_summary, pick_results_folder, small_sample_warning

session.require_router()  # a direct URL on a fresh server goes through app.py too

RESULTS_DIR = Path(os.environ.get("GRADE_RESULTS_DIR") or Path(__file__).resolve().parent.parent / "results")

st.title("Benchmarks")
st.markdown(
    "GRADE and the baselines on the **same labelled questions** of each model: accuracy and AUROC on a held-out "
    "test split, with a 95% bootstrap interval on AUROC (small test sets give wide intervals: read them). "
    "Every score is oriented so that higher = answerable. Regenerate with `python -m grade benchmark --offline`."
)
with st.expander("What you are looking at"):
    st.markdown(
        "Each model was asked labelled questions from public datasets (the Datasets table counts them); its own "
        "answers were marked right or wrong, and that mark is the label *answerable* / *unanswerable*. Every detector (GRADE and the methods it "
        "is compared with) was fitted on the same training questions and is scored here on the same held-out test "
        "questions it never saw. Each dataset has a tab: **Acc** is the share of test questions the detector "
        "labels correctly, **AUROC** how well its score ranks answerable above unanswerable questions.\n\n"
        + explain("AUROC", "loss pre", "SAPLMA")
        + "\n- **GRADE_pre / GRADE_pos**: the GRADE probe with loss `pre` / `pos`. **Length_pre / Length_pos**: "
          "the number of tokens alone, a check of how much any detector could get from length."
    )

folders = sorted((p for p in RESULTS_DIR.glob("*") if (p / "summary.json").is_file()),
                 key=lambda p: (not (p / "main_table.csv").is_file(), p.name)) if RESULTS_DIR.is_dir() else []
if not folders:
    st.info(f"No benchmark results under `{session.shown_path(RESULTS_DIR)}` yet. Run `python -m grade benchmark --model <name>`.")
    st.stop()


@st.cache_data(show_spinner=False)
def _load(folder: str, stamp: float):
    return BenchmarkResult.load(folder)


names = [p.name for p in folders]
# Open on the loaded model's results (the name is read from the session: nothing is loaded for it); a pick
# of another model's results stays until the sidebar's model changes.
loaded = session.selected_model_name()
if st.session_state.get("_benchmark_for") != loaded or st.session_state.get("benchmark_model") not in names:
    st.session_state["_benchmark_for"] = loaded
    st.session_state["benchmark_model"] = pick_results_folder(names, loaded) or names[0]
choice = st.selectbox("Model", names, key="benchmark_model",
                      help="Results of the model loaded in the sidebar first; pick another to compare.")
if loaded and choice != loaded and not choice.startswith(loaded):
    st.caption(f"The sidebar's model is `{loaded}`" + ("" if pick_results_folder(names, loaded)
                                                       else ", which has no benchmark results here") + ".")
folder = RESULTS_DIR / choice
try:
    result = _load(str(folder), (folder / "summary.json").stat().st_mtime)
except (GradeError, OSError, ValueError) as exc:
    st.error(session.user_text(f"Could not read the results in {folder}: {exc}"))
    st.stop()


def _warn_small(rows, label) -> None:
    """The small-test-set warning for the rows of a table that shows AUROCs with intervals (one per label)."""
    seen = {}
    for row in rows:
        seen.setdefault(label(row), (row.get("n"), row.get("positives")))
    text = small_sample_warning((name, n, pos) for name, (n, pos) in seen.items())
    if text:
        st.warning(text, icon=":material/warning:")


def _num(x, digits=3):
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _datasets_table() -> None:
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
        if not note.startswith("Against "):  # a cross-fitted run's findings: the paragraph above says them
            st.caption(note)


def _capped_main_table() -> None:
    st.subheader("Main table")
    main = pd.DataFrame(result.main)
    if main.empty:
        st.info("No method was scored.")
        st.stop()
    summary = benchmark_summary(result.main)
    if summary:
        st.markdown(f"**Where GRADE wins and loses ({choice}):** {summary}")
    _tabs_per_dataset(main, METHOD_ORDER, "capped_main")
    _warn_small(result.main, lambda r: r["dataset"])
    st.caption("Judge gives a yes/no answer: accuracy only. Length_pre / Length_pos: the number of tokens alone "
               "(prompt; prompt + response), the confound every feature carries. Training-free scores use the accuracy-maximising threshold "
               "of the training + validation questions; probes use 0.5.")


def _ci(a, lo, hi) -> str:
    return "–" if a is None or (isinstance(a, float) and math.isnan(a)) else f"{_num(a)} [{_num(lo, 2)}, {_num(hi, 2)}]"


def _read_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path) if path.is_file() else pd.DataFrame()


def _tabs_per_dataset(main: pd.DataFrame, methods, key: str) -> None:
    """A main table as one tab per dataset (method, n, answerable, AUROC and accuracy with their intervals): a
    dataset per column would not fit the page's width once there are more than two."""
    datasets = list(dict.fromkeys(main["dataset"]))
    tabs = st.tabs([f"{d} (n={int(main[main['dataset'] == d]['n'].max())})" for d in datasets])
    order = {m: i for i, m in enumerate(methods)}
    for tab, d in zip(tabs, datasets):
        part = main[main["dataset"] == d].sort_values("method", key=lambda c: c.map(lambda m: order.get(m, 99)))
        shown = pd.DataFrame({"method": part["method"], "n": part["n"], "answerable": part["positives"],
                              "AUROC [95% CI]": [_ci(a, lo, hi) for a, lo, hi in zip(part["auroc"], part["auroc_lo"], part["auroc_hi"])]})
        if "acc_lo" in part:  # a capped run has no interval on accuracy
            shown["Acc [95% CI]"] = [_ci(a, lo, hi) for a, lo, hi in zip(part["acc"], part["acc_lo"], part["acc_hi"])]
        else:
            shown["Acc"] = [_num(a) for a in part["acc"]]
        with tab:
            st.dataframe(shown, hide_index=True, width="stretch", key=f"{key}_{d}",
                         column_config={"method": st.column_config.TextColumn(width="medium"),
                                        "n": st.column_config.NumberColumn(width="small"),
                                        "answerable": st.column_config.NumberColumn(width="small")})


def _crossfit_tables() -> None:
    """A cross-fitted run (grade.studies.crossfit): the main table per dataset with n and intervals, GRADE's
    variants, the paired differences, then the capped protocol's table as the ablation it is."""
    st.subheader("Cross-fitted main table")
    st.markdown(f"Every labelled question of `{choice}` scored once, by detectors fitted on the other four folds "
                f"(stratified 5-fold by question): per dataset, every method on the same questions. Intervals: 95% "
                f"stratified bootstrap. An AUROC on fewer than {MIN_QUESTIONS} questions is shown but decides little.")
    paired = _read_csv(folder / "paired.csv")
    paragraph = paired_summary(paired.to_dict("records")) if not paired.empty else None
    if paragraph:
        st.markdown(f"**Where GRADE wins and loses beyond the intervals ({choice}):** {paragraph}")
    main = pd.DataFrame(result.main)
    if main.empty:
        st.info("No dataset has questions scored by every method.")
        return
    _tabs_per_dataset(main, main_methods(), "crossfit_main")
    st.caption("GRADE_pre / GRADE_pos: the paper's form (an MLP on every layer's rank ratio); (shipped): the form of "
               "the app's probes; (selected): the variant chosen on inner splits of the training folds. Judge gives a "
               "yes/no answer: accuracy only. Length_pre / Length_pos: the number of tokens alone, the confound.")
    variants = _read_csv(folder / "grade_variants.csv")
    if not variants.empty:
        st.subheader("GRADE variants")
        st.markdown("Every GRADE variant fitted, on every question with features. Picking the best of these by its "
                    "AUROC would be choosing on the test questions: the **(selected)** row is the honest number.")
        shown = pd.DataFrame({"dataset": variants["dataset"], "variant": variants["variant"], "n": variants["n"],
                              "AUROC [95% CI]": [_ci(a, lo, hi) for a, lo, hi in zip(variants["auroc"], variants["auroc_lo"], variants["auroc_hi"])],
                              "paper": variants["paper"], "shipped": variants["shipped"],
                              "chosen (folds)": variants["times_chosen"]})
        st.dataframe(shown, hide_index=True, width="stretch", key="crossfit_variants",
                     column_config={"variant": st.column_config.TextColumn(width="medium")})
    if not paired.empty:
        st.subheader("Paired differences")
        st.markdown("Each detector's AUROC minus P-Entropy's and minus length's, on the questions both score "
                    "(paired stratified bootstrap): **wins** / **loses** when the interval excludes 0.")
        shown = pd.DataFrame({"dataset": paired["dataset"], "method": paired["method"], "vs": paired["reference"],
                              "n": paired["n"], "Δ AUROC [95% CI]": [f"{a:+.3f} [{lo:+.2f}, {hi:+.2f}]" for a, lo, hi
                                                                    in zip(paired["diff"], paired["lo"], paired["hi"])],
                              "verdict": paired["verdict"]})
        st.dataframe(shown, hide_index=True, width="stretch", key="crossfit_paired",
                     column_config={"method": st.column_config.TextColumn(width="medium")})
    capped = RESULTS_DIR / f"{choice}-capped"
    if (capped / "main_table.csv").is_file():
        st.subheader("Ablation: the capped protocol")
        st.markdown(f"The earlier protocol (`{capped.name}`): one 60/20/20 split of a few capped rows, so each dataset "
                    "is tested on a few dozen questions. Kept as an ablation, not as the result.")
        old = _read_csv(capped / "main_table.csv")
        shown = pd.DataFrame({"dataset": old["dataset"], "method": old["method"], "n": old["n"],
                              "AUROC [95% CI]": [_ci(a, lo, hi) for a, lo, hi in zip(old["auroc"], old["auroc_lo"], old["auroc_hi"])],
                              "Acc": [_num(a) for a in old["acc"]]})
        st.dataframe(shown, hide_index=True, width="stretch", key="capped_ablation")


if (result.protocol or {}).get("protocol") == "crossfit":  # opens on the cross-fitted tables
    _crossfit_tables()
    _datasets_table()
else:
    _datasets_table()
    _capped_main_table()

figs = figures(result)
tabs = st.tabs(["AUROC", "Selective answering", "Transfer", "Robustness", "Ablations", "Confidently wrong",
                "Conditions"])
with tabs[0]:
    if "auroc_bars" in figs:
        session.show_figure(figs["auroc_bars"], f"{choice}-auroc-bars", key="bench_auroc_bars")
        _warn_small(result.main, lambda r: r["dataset"])
with tabs[1]:
    st.markdown("If the model may say *I don't know*, a detector decides which questions it answers: the ones the "
                "detector is surest of. Each curve shows how often the answered questions are right (up) against "
                "the share of questions answered (across).")
    with st.expander("What you are looking at (selective answering)"):
        st.markdown(
            "Take the test questions and sort them by a detector's score, the most likely answerable first. Let the "
            "model answer only the top part and say *I don't know* to the rest. Moving right, it answers more and "
            "more questions; at the right edge it answers all of them.\n\n"
            "- **Across: share answered (coverage).** 0.5 means the model answers half of the questions.\n"
            "- **Up: accuracy of the answered questions.** How many of the questions it chose to answer it gets right.\n"
            "- **Grey dotted line: answering everything.** The share of questions the model gets right anyway (the "
            "base rate). A detector that knows nothing (a coin) stays on this line: that is chance.\n"
            "- **Black dashed line: the oracle**, a detector that knows every answer's fate: it answers the right "
            "ones first and stays at 1.0 until it runs out of them.\n"
            "- A good detector starts high on the left and falls to the base rate at the right edge. Below the "
            "dotted line, the detector picks the *wrong* questions first.\n\n"
            "Two numbers sum a curve up (table below): the **accuracy at 50% coverage** (answering the half the "
            "detector is surest of) and the **area** under the curve (the mean accuracy over every coverage; "
            "chance gives the base rate). The brackets are 95% bootstrap intervals: on a few dozen test "
            "questions they are wide, so two detectors whose intervals overlap may not differ at all."
        )
    if result.selective:
        sentence = selective_summary(result.selective)
        if sentence:
            st.markdown(f"**{choice}:** {sentence}")
        if "risk_coverage" in figs:
            session.show_figure(figs["risk_coverage"], f"{choice}-risk-coverage", key="bench_risk_coverage")
        sel = pd.DataFrame(result.selective)
        shown = pd.DataFrame({
            "dataset": sel["dataset"], "method": sel["method"],
            "Acc at 50% coverage [95% CI]": [f"{_num(a)} [{_num(lo, 2)}, {_num(hi, 2)}]" for a, lo, hi in
                                             zip(sel["acc_at_coverage"], sel["acc_at_coverage_lo"], sel["acc_at_coverage_hi"])],
            "area [95% CI]": [f"{_num(a)} [{_num(lo, 2)}, {_num(hi, 2)}]" for a, lo, hi in
                              zip(sel["auacc"], sel["auacc_lo"], sel["auacc_hi"])],
            "answer everything": [_num(b) for b in sel["base_rate"]],
            "oracle at 50%": [_num(o) for o in sel["oracle_acc_at_coverage"]],
            "n": sel["n"]})
        st.dataframe(shown, hide_index=True, width="stretch")
        _warn_small(result.selective, lambda r: r["dataset"])
        st.caption("Ties (a yes/no detector like Judge, equal lengths) are answered in random order: the curve shows "
                   "the expected accuracy. Length_pre / Length_pos: the number of tokens alone, not a detector.")
    else:
        st.info("These results keep no per-question test scores: regenerate them with "
                "`python -m grade benchmark --offline` to draw the curves.")
with tabs[2]:
    st.markdown("Detectors trained on one dataset (rows) and tested on another (columns). Test questions seen in "
                "training under another condition are left out.")
    if "transfer_heatmap" in figs:
        session.show_figure(figs["transfer_heatmap"], f"{choice}-transfer-heatmap", key="bench_transfer_heatmap")
        _warn_small(result.transfer, lambda r: f"{r['train']} → {r['test']}")
    else:
        st.info("Only one dataset qualified: no transfer to show.")
with tabs[3]:
    st.markdown("The same test questions with a reworded instruction or an added irrelevant sentence; detectors "
                "are not retrained. Relative change = (perturbed − original) / original.")
    if result.robustness:
        rob = pd.DataFrame(result.robustness)
        st.dataframe(rob, hide_index=True, width="stretch")
        if "robustness" in figs:
            session.show_figure(figs["robustness"], f"{choice}-robustness", key="bench_robustness")
    else:
        st.info("No perturbed runs in these results.")
with tabs[4]:
    if result.ablations:
        st.dataframe(pd.DataFrame(result.ablations), hide_index=True, width="stretch")
        _warn_small(result.ablations, lambda r: r["dataset"])
        if "ablations" in figs:
            session.show_figure(figs["ablations"], f"{choice}-ablations", key="bench_ablations")
with tabs[5]:
    st.markdown("Test questions where every sample gives the same answer and it is wrong: the model is confidently "
                "wrong. All are unanswerable, so accuracy = share flagged as unanswerable.")
    if result.confidently_wrong:
        cw = pd.DataFrame(result.confidently_wrong)
        st.dataframe(cw[cw["dataset"] == "all"].drop(columns="dataset"), hide_index=True, width="stretch")
        with st.expander("per dataset"):
            st.dataframe(cw[cw["dataset"] != "all"], hide_index=True, width="stretch")
with tabs[6]:
    st.markdown("The same questions under two conditions (with and without the supporting document; short and long "
                "documents): detectors trained under one condition, tested on every question of the other that they "
                "did not train on. Rows where train = test are that condition's own test split.")
    if result.conditions:
        cond = pd.DataFrame(result.conditions)
        cond["AUROC [95% CI]"] = [f"{_num(a)} [{_num(lo, 2)}, {_num(hi, 2)}]"
                                  for a, lo, hi in zip(cond["auroc"], cond["auroc_lo"], cond["auroc_hi"])]
        st.dataframe(cond[["study", "method", "train", "test", "n", "positives", "acc", "AUROC [95% CI]"]],
                     hide_index=True, width="stretch")
        _warn_small(result.conditions, lambda r: f"{r['study']}, {r['train']} → {r['test']}")
    else:
        st.info("No condition study in these results (see the model-documents results).")
