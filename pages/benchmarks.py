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
from grade.studies import METHOD_ORDER, BenchmarkResult
from studio import session
from grade.studies.crossfit import main_methods
from grade.common.display import dataset_title
from grade.verdict.measured import MIN_PER_CLASS
from studio import benchmark_text, figures as studio_figures, tables
from studio.summaries import benchmark_summary, explain, paired_summary, pick_results_folder, small_sample_warning

session.require_router()  # a direct URL on a fresh server goes through app.py too

RESULTS_DIR = Path(os.environ.get("GRADE_RESULTS_DIR") or Path(__file__).resolve().parent.parent / "results")

st.title("Benchmarks")
st.markdown(
    "GRADE and the baselines on the **same labelled questions** of each model: how well each detector's score "
    "ranks the questions the model answers right above those it gets wrong (AUROC, with its 95% bootstrap interval), "
    "and its accuracy. Every score is oriented so that higher = answerable. Regenerate with "
    "`python -m grade benchmark --offline`."
)
with st.expander("What you are looking at"):
    st.markdown(
        "Each model was asked labelled questions from public datasets (the Datasets table counts them); its own "
        "answers were marked right or wrong, and that mark is the label *answerable* / *unanswerable*. Every detector "
        "(GRADE and the methods it is compared with) is fitted on some of the questions and scored on others it never "
        "saw; how, the protocol line under the model's name says. Each dataset has a tab: **accuracy** is the share "
        "of questions the detector labels correctly, **AUROC** how well its score ranks answerable above unanswerable "
        "questions.\n\n"
        + explain("AUROC", "loss pre", "SAPLMA")
        + "\n- **GRADE_pre / GRADE_pos**: the GRADE probe with loss `pre` / `pos`. **Length_pre / Length_pos**: "
          "the number of tokens alone, a check of how much any detector could get from length. **Entropy after the "
          "prompt**: Home's detector of that name, the `pre` loss alone."
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


st.markdown(benchmark_text.protocol_text(result.protocol))
CROSSFIT = (result.protocol or {}).get("protocol") == "crossfit"


def _titled(frame: pd.DataFrame) -> pd.DataFrame:
    """Dataset identifiers in a table's ``dataset`` column as their names."""
    if "dataset" in frame:
        frame = frame.assign(dataset=frame["dataset"].map(dataset_title))
    return frame


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
        row = {"dataset": dataset_title(name), "answerable": entry.get("answerable"),
               "unanswerable": entry.get("unanswerable"), "benchmarked": "yes" if entry.get("eligible") else "no"}
        if not CROSSFIT:  # cross-fitted, every question is scored: no test split to count
            row["test questions"] = split.get("test", {}).get("n")
        row["why not"] = "" if entry.get("eligible") else entry.get("reason", "")
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not frame["why not"].astype(bool).any():
        frame = frame.drop(columns="why not")
    tables.show(frame)
    missing, other = benchmark_text.split_notes(result.notes)
    for note in other:
        st.caption(benchmark_text.titled_text(note))
    if missing:
        with st.expander(benchmark_text.missing_transfer_line(missing)):
            st.markdown("\n".join(f"- {benchmark_text.titled_text(n)}" for n in missing))


def _capped_main_table() -> None:
    st.subheader("Main table")
    main = pd.DataFrame(result.main)
    if main.empty:
        st.info("No method was scored.")
        st.stop()
    summary = benchmark_summary(benchmark_text.titled_rows(result.main))
    if summary:
        st.markdown(f"**Where GRADE wins and loses ({choice}):** {summary}")
    _tabs_per_dataset(main, METHOD_ORDER, "capped_main")
    _warn_small(result.main, lambda r: dataset_title(r["dataset"]))
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
    tabs = st.tabs([f"{dataset_title(d)} (n={int(main[main['dataset'] == d]['n'].max())})" for d in datasets])
    order = {m: i for i, m in enumerate(methods)}
    for tab, d in zip(tabs, datasets):
        part = main[main["dataset"] == d].sort_values("method", key=lambda c: c.map(lambda m: order.get(m, 99)))
        shown = pd.DataFrame({"method": part["method"], "questions": part["n"], "answerable": part["positives"],
                              "AUROC [95% interval]": [_ci(a, lo, hi) for a, lo, hi in zip(part["auroc"], part["auroc_lo"], part["auroc_hi"])]})
        if "acc_lo" in part and part["acc_lo"].notna().any():  # a capped run has no interval on accuracy
            shown["accuracy [95% interval]"] = [_ci(a, lo, hi) for a, lo, hi in zip(part["acc"], part["acc_lo"], part["acc_hi"])]
        else:
            shown["accuracy"] = [_num(a) for a in part["acc"]]
        with tab:
            tables.show(shown, key=f"{key}_{d}")


def _variants_frame() -> pd.DataFrame:
    return _read_csv(folder / "grade_variants.csv")


def _crossfit_tables() -> None:
    """A cross-fitted run (grade.studies.crossfit): the main table per dataset, Home's entropy detector among its
    rows, then the paired differences with the paragraph built from them."""
    st.subheader("Main table")
    st.markdown(f"Per dataset, every method on the same questions. An AUROC on fewer than {MIN_PER_CLASS} questions "
                "of either class is shown but decides little.")
    main = pd.DataFrame(result.main)
    if main.empty:
        st.info("No dataset has questions scored by every method.")
        return
    entropy = pd.DataFrame(benchmark_text.entropy_rows(_variants_frame().to_dict("records")))
    methods = list(main_methods())
    if not entropy.empty:
        main = pd.concat([main, entropy[entropy["dataset"].isin(set(main["dataset"]))]], ignore_index=True)
        methods.insert(methods.index("P-Entropy") if "P-Entropy" in methods else len(methods),
                       benchmark_text.ENTROPY_AFTER_PROMPT)
    _tabs_per_dataset(main, methods, "crossfit_main")
    st.caption("GRADE_pre / GRADE_pos: the paper's form (an MLP on every layer's rank ratio); (shipped): the form of "
               "the app's probes; (selected): the variant chosen on inner splits of the training folds. Entropy after "
               "the prompt: the `pre` loss alone through a logistic regression, the detector of that name on Home. "
               "Judge gives a yes/no answer: accuracy only. Length_pre / Length_pos: the number of tokens alone, "
               "the confound.")
    paired = _read_csv(folder / "paired.csv")
    if not paired.empty:
        st.subheader("Paired differences")
        paragraph = paired_summary(benchmark_text.titled_rows(paired.to_dict("records")))
        if paragraph:  # from the rows of the table under it
            st.markdown(f"**Where GRADE's shipped form wins and loses beyond the intervals:** {paragraph}")
        st.markdown("Each detector's AUROC minus P-Entropy's and minus length's, on the questions both score "
                    "(paired stratified bootstrap): **wins** / **loses** when the interval excludes 0.")
        shown = pd.DataFrame({"dataset": paired["dataset"].map(dataset_title), "method": paired["method"],
                              "against": paired["reference"], "questions": paired["n"],
                              "AUROC difference [95% interval]": [f"{a:+.3f} [{lo:+.2f}, {hi:+.2f}]" for a, lo, hi
                                                                  in zip(paired["diff"], paired["lo"], paired["hi"])],
                              "verdict": paired["verdict"]})
        tables.show(shown, key="crossfit_paired")


def _ablations() -> bool:
    """GRADE's variants (a cross-fitted run's own ablation), the earlier capped protocol's table, a capped run's
    ablations; False where there is none of them."""
    shown_any = False
    variants = _variants_frame() if CROSSFIT else pd.DataFrame()
    if not variants.empty:
        shown_any = True
        st.markdown("**GRADE's variants.** Every variant fitted (estimator, inputs, layers), on every question with "
                    "features. Picking the best of these by its AUROC would be choosing on the scored questions: the "
                    "**(selected)** row is the honest number.")
        shown = pd.DataFrame({"dataset": variants["dataset"].map(dataset_title), "variant": variants["variant"],
                              "questions": variants["n"],
                              "AUROC [95% interval]": [_ci(a, lo, hi) for a, lo, hi in zip(variants["auroc"], variants["auroc_lo"], variants["auroc_hi"])],
                              "the paper's": variants["paper"].map({True: "yes", False: ""}),
                              "the app's": variants["shipped"].map({True: "yes", False: ""}),
                              "chosen (of 5 folds)": variants["times_chosen"]})
        tables.show(shown, key="crossfit_variants")
    if CROSSFIT and capped is not None and capped.main:
        shown_any = True
        st.markdown(f"**The earlier protocol** (one 60/20/20 split of a few capped rows per dataset, so each dataset is "
                    "tested on a few dozen questions): kept as an ablation of the protocol, not as the result.")
        old = pd.DataFrame(capped.main)
        shown = pd.DataFrame({"dataset": old["dataset"].map(dataset_title), "method": old["method"],
                              "questions": old["n"],
                              "AUROC [95% interval]": [_ci(a, lo, hi) for a, lo, hi in zip(old["auroc"], old["auroc_lo"], old["auroc_hi"])],
                              "accuracy": [_num(a) for a in old["acc"]]})
        tables.show(shown, key="capped_ablation")
    source = capped if CROSSFIT else result
    if source is not None and source.ablations:
        shown_any = True
        if CROSSFIT:
            st.markdown("**GRADE's ablations in the capped run** (its held-out split).")
        shown = _titled(pd.DataFrame(source.ablations)).rename(columns=titled_columns)
        tables.show(shown, key="bench_ablations_table")
        abl_figs = figures(source)
        if "ablations" in abl_figs:
            session.show_figure(abl_figs["ablations"], f"{choice}-ablations", key="bench_ablations")
    return shown_any


def _load_capped():
    path = RESULTS_DIR / f"{choice}-capped"
    if not CROSSFIT or not (path / "summary.json").is_file():
        return None
    try:
        return _load(str(path), (path / "summary.json").stat().st_mtime)
    except (GradeError, OSError, ValueError):
        return None


capped = _load_capped()  # the earlier capped run of a cross-fitted model: its ablation, robustness and conditions


def titled_columns(name: str) -> str:
    from grade.common.display import column_title

    return column_title(name)


def _shipped_probes() -> None:
    """The shipped probes' quality: the numbers Home's verdict card and the Probes page cite, from the same file."""
    shipped = {loss: benchmark_text.shipped_probe_table(choice, loss) for loss in ("pre", "pos")}
    if all(t.empty for t in shipped.values()):
        return
    st.subheader("The shipped probes")
    st.markdown("What Home's verdict card and the Probes page cite for the probes the app ships (each question scored "
                f"by the probe Home picks for its task; a number needs {MIN_PER_CLASS} questions of each class). The "
                "**GRADE_pre (shipped)** and **GRADE_pos (shipped)** rows above are the same form, fitted per dataset.")
    for loss, table in shipped.items():
        if not table.empty:
            table, measured = benchmark_text.one_protocol(table)
            st.markdown(f"**GRADE_{loss} probe**" + (f" (measured on {measured})" if measured else ""))
            tables.show(table, key=f"bench_shipped_{loss}")


if CROSSFIT:  # opens on the cross-fitted tables
    _crossfit_tables()
    _shipped_probes()
    _datasets_table()
else:
    _datasets_table()
    _capped_main_table()


def _auroc_section() -> None:
    figs = figures(result)
    if "auroc_bars" in figs:
        session.show_figure(figs["auroc_bars"], f"{choice}-auroc-bars", key="bench_auroc_bars")
        _warn_small(result.main, lambda r: dataset_title(r["dataset"]))
    else:
        st.info("No method has an AUROC in these results.")


def _selective_section() -> None:
    figs = figures(result)
    st.markdown("If the model may say *I don't know*, a detector decides which questions it answers: the ones the "
                "detector is surest of. Each curve shows how often the answered questions are right (up) against "
                "the share of questions answered (across).")
    with st.expander("What you are looking at (selective answering)"):
        st.markdown(
            "Sort the questions by a detector's score, the most likely answerable first. Let the "
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
            "chance gives the base rate). The brackets are 95% bootstrap intervals: on a few dozen "
            "questions they are wide, so two detectors whose intervals overlap may not differ at all."
        )
    if result.selective and "risk_coverage" in figs:
        drawn = benchmark_text.drawn_methods(figs["risk_coverage"])
        sentence = benchmark_text.selective_sentence(result.selective, drawn)  # the chart's own methods only
        if sentence:
            st.markdown(sentence)
        session.show_figure(figs["risk_coverage"], f"{choice}-risk-coverage", key="bench_risk_coverage")
        sel = pd.DataFrame(result.selective)
        shown = pd.DataFrame({
            "dataset": sel["dataset"].map(dataset_title), "method": sel["method"],
            "accuracy at 50% answered [95% interval]": [f"{_num(a)} [{_num(lo, 2)}, {_num(hi, 2)}]" for a, lo, hi in
                                                        zip(sel["acc_at_coverage"], sel["acc_at_coverage_lo"], sel["acc_at_coverage_hi"])],
            "area [95% interval]": [f"{_num(a)} [{_num(lo, 2)}, {_num(hi, 2)}]" for a, lo, hi in
                                    zip(sel["auacc"], sel["auacc_lo"], sel["auacc_hi"])],
            "answering everything": [_num(b) for b in sel["base_rate"]],
            "oracle at 50%": [_num(o) for o in sel["oracle_acc_at_coverage"]],
            "questions": sel["n"],
            "in the chart": ["yes" if m in drawn else "" for m in sel["method"]]})
        tables.show(shown, key="bench_selective_table")
        _warn_small(result.selective, lambda r: dataset_title(r["dataset"]))
        st.caption("Ties (a yes/no detector like Judge, equal lengths) are answered in random order: the curve shows "
                   "the expected accuracy. Length_pre / Length_pos: the number of tokens alone, not a detector. The "
                   "(shipped) and (selected) GRADE forms are in the table, not drawn: their curves lie on GRADE's.")
    else:
        st.info("These results keep no per-question scores: regenerate them with "
                "`python -m grade benchmark --offline` to draw the curves.")


def _transfer_section() -> None:
    figs = figures(result)
    st.markdown("Detectors trained on one dataset (rows) and tested on another (columns). Test questions seen in "
                "training under another condition are left out.")
    if "transfer_heatmap" in figs:
        session.show_figure(studio_figures.readable_transfer(studio_figures.titled(figs["transfer_heatmap"])),
                            f"{choice}-transfer-heatmap", key="bench_transfer_heatmap")
        _warn_small(result.transfer, lambda r: f"{dataset_title(r['train'])} → {dataset_title(r['test'])}")
    else:
        st.info("Only one dataset qualified: no transfer to show.")


def _robustness_section() -> None:
    st.markdown("The same questions with a reworded instruction or an added irrelevant sentence; detectors "
                "are not retrained. Relative change = (perturbed − original) / original.")
    if robust_source is not None:
        if robust_source is not result:
            st.caption(f"From the capped run ({robust_source.model}, one held-out split): the cross-fitted run did not "
                       "perturb its questions, which would take one more model pass per question and variant.")
        rob = _titled(pd.DataFrame(robust_source.robustness))
        tables.show(rob.rename(columns=titled_columns), key="bench_robustness_table")
        rob_figs = figures(robust_source)
        if "robustness" in rob_figs:
            session.show_figure(rob_figs["robustness"], f"{choice}-robustness", key="bench_robustness")
    else:
        st.info("No perturbed runs for this model: `python -m grade benchmark --variants reworded irrelevant` "
                "(the capped protocol) runs them, one more model pass per question and variant.")


def _ablations_section() -> None:
    if not _ablations():
        st.info("No ablation in these results: `python -m grade benchmark` writes them with the capped protocol.")


def _confidently_wrong_section() -> None:
    st.markdown("Questions where every sample gives the same answer and it is wrong: the model is confidently "
                "wrong. All are unanswerable, so accuracy = share flagged as unanswerable.")
    if result.confidently_wrong:
        cw = pd.DataFrame(result.confidently_wrong)
        tables.show(cw[cw["dataset"] == "all"].drop(columns="dataset").rename(columns=titled_columns), key="bench_cw_all")
        with st.expander("per dataset"):
            tables.show(_titled(cw[cw["dataset"] != "all"]).rename(columns=titled_columns), key="bench_cw_per",
                        room=tables.BOXED_PX)
    else:
        st.info("No confidently wrong questions were counted in these results.")


def _conditions_section() -> None:
    st.markdown("The same questions under two conditions (with and without the supporting document; short and long "
                "documents): detectors trained under one condition, tested on every question of the other that they "
                "did not train on. Rows where train = test are that condition's own test split.")
    if cond_source is not None:
        if cond_source is not result:
            st.caption(f"From the capped run ({cond_source.model}, one held-out split): the cross-fitted run scores "
                       "each condition as its own dataset (HotpotQA with its paragraphs and closed book, in the main "
                       "table), not across conditions.")
        cond = pd.DataFrame(cond_source.conditions)
        cond["AUROC [95% interval]"] = [f"{_num(a)} [{_num(lo, 2)}, {_num(hi, 2)}]"
                                        for a, lo, hi in zip(cond["auroc"], cond["auroc_lo"], cond["auroc_hi"])]
        shown = cond[["study", "method", "train", "test", "n", "positives", "acc", "AUROC [95% interval]"]].copy()
        for column in ("train", "test"):
            shown[column] = shown[column].map(dataset_title)
        shown["study"] = shown["study"].map(benchmark_text.titled_text)
        shown = shown.rename(columns=titled_columns)
        tables.show(shown, key="bench_conditions")
        _warn_small(cond_source.conditions,
                    lambda r: benchmark_text.titled_text(f"{r['study']}, {r['train']} → {r['test']}"))
    else:
        st.info("No condition study for this model: the HotpotQA conditions are in the main table as datasets of "
                "their own; `python -m grade benchmark --document-pair WITH WITHOUT` trains under one and tests under the other.")


# the capped run's studies where the cross-fitted one has none: said so above each
robust_source = result if result.robustness else capped if capped is not None and capped.robustness else None
cond_source = result if result.conditions else capped if capped is not None and capped.conditions else None
SECTIONS = {"AUROC": _auroc_section, "Selective answering": _selective_section, "Transfer": _transfer_section,
            "Robustness": _robustness_section, "Ablations": _ablations_section,
            "Confidently wrong": _confidently_wrong_section, "Conditions": _conditions_section}


@st.fragment
def _sections() -> None:
    """Only the open tab's section is built and sent, and switching tabs reruns this fragment alone: the closed
    tabs' charts and tables were drawn by the browser too, unseen, and made the page slow to open."""
    for name, tab in zip(SECTIONS, st.tabs(list(SECTIONS), key="benchmark_section", on_change="rerun")):
        if tab.open:
            with tab:
                SECTIONS[name]()


_sections()
