"""Traces: triage many reasoning traces of an evaluation run by epistemic shock, and mark where they go wrong."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from grade.common.display import column_title, kind_title, titled_columns
from grade.common.errors import GradeError, InputError
from grade.steps.locate import DEFAULT_LOCATOR, LOCATORS, signals_of_row
from grade.traces import ERROR_KINDS, TraceStore, aggregate, cut_off_line, read_traces
from studio import figures, localization, page_state, session, tables, tokens
from studio import traces as tr

session.require_router()  # a direct URL on a fresh server goes through app.py too

st.title("Traces")
st.markdown(
    "Error analysis of a whole evaluation run. Open a **trace store** (made here or with "
    "`python -m grade traces`), or analyse an lm-evaluation-harness samples file (`--log_samples`) or a JSONL of "
    "`question`, `response`, `correct`. Every trace gets a step-wise GRADE_pos; sort and filter them, open one "
    "to see where its shock peaks, and mark the step where the error happens."
)

STORE = "tr_store"  # session key: path of the open store
JOB = "tr_job"  # session key: the running or last studio.traces.TraceJob


def _open(path: str | Path) -> None:
    store = TraceStore(Path(path).expanduser())
    store.meta()  # raises InputError when it is not a store
    st.session_state[STORE] = str(store.path)
    st.session_state.pop("tr_open", None)


# ------------------------------------------------------------------------------------------ source

open_tab, analyse_tab = st.tabs(["Open a trace store", "Analyse a samples file"])

with open_tab:
    stores = tr.known_stores()
    c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
    c1.text_input("Trace store folder", key="tr_store_path", placeholder="runs/traces/gsm8k",
                  help="A folder written by `python -m grade traces --out ...` or by this page")
    if c2.button("Open store", key="tr_open_store", width="stretch"):
        if not str(st.session_state.get("tr_store_path") or "").strip():
            st.warning("Type the folder of a trace store first (or open the demo store below).")
        else:
            try:
                _open(st.session_state.get("tr_store_path") or "")
            except GradeError as exc:
                session.show_error(exc, "Store not opened")
    if st.button("Open the demo store", key="tr_open_demo",
                 help="Qwen2.5-Coder-1.5B's own GSM8K traces, wrong and correct, read step by step by an annotator "
                      "(their first wrong steps are known) and analysed ahead of time"):
        demo = tr.demo_store(session.selected_model_name())
        if demo is not None:
            _open(demo)
    if stores:
        c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
        c1.selectbox("... or one made on this page", [str(p) for p in stores], key="tr_recent",
                     format_func=lambda p: Path(p).name)
        if c2.button("Open", key="tr_open_recent", width="stretch"):
            _open(st.session_state["tr_recent"])


@st.cache_data(show_spinner=False, max_entries=4)
def _read_source(path: str, mtime: int, metric: str | None, filter_name: str | None, prompt: str, limit: int):
    return read_traces(path, metric=metric, filter_name=filter_name, prompt=prompt, limit=limit)


def _samples_path() -> Path | None:
    upload = st.file_uploader("Samples file (.jsonl)", type=["jsonl"], key="tr_upload",
                              help="lm-evaluation-harness samples_<task>_<date>.jsonl, or question/response/correct rows")
    if upload is not None:
        return tr.upload_folder(upload.name, upload.getvalue())
    text = st.text_input("... or its path on this machine", key="tr_samples_path",
                         placeholder="results/model/samples_gsm8k_2025-01-01T00-00-00.jsonl").strip()
    return Path(text).expanduser() if text else None


with analyse_tab:
    lm = session.current_model()
    path = _samples_path()
    job = st.session_state.get(JOB)
    if path is not None:
        c1, c2, c3, c4 = st.columns(4)
        limit = c1.number_input("Traces (at most)", 1, 100_000, 20, key="tr_limit",
                                help="The first N traces of the file; on a CPU a trace takes about 5-60 s")
        prompt = c2.radio("Prompt", ["task", "run"], key="tr_prompt", horizontal=True,
                          help="task: this project's prompt for the task; run: the exact prompt of the lm-eval run")
        try:
            if not path.is_file():
                raise InputError(f"{path} does not exist")
            probe = _read_source(str(path), path.stat().st_mtime_ns, None, None, "task", 1)
            metric = filter_name = None
            if probe.format == "lm-eval":
                metric = c3.selectbox("Correctness metric", probe.metrics, key="tr_metric",
                                      index=probe.metrics.index(probe.metric) if probe.metric in probe.metrics else 0)
                filter_name = c4.selectbox("Filter", probe.filters, key="tr_filter")
            source = _read_source(str(path), path.stat().st_mtime_ns, metric, filter_name, prompt, int(limit))
            known = sum(i.correct is not None for i in source.items)
            st.caption(f"{len(source.items)} traces ({source.format}, task {source.task}); correctness known for "
                       f"{known}, {sum(bool(i.correct) for i in source.items)} correct. " + " ".join(source.notes))
            target = tr.store_folder(path, metric, filter_name, prompt)
            busy = job is not None and job.running
            if lm is None:
                session.no_model_message()
            if st.button("Analyse in the background", key="tr_analyse", type="primary", disabled=lm is None or busy,
                         help="The page stays usable; traces appear in the table as they are done"):
                TraceStore(target).prepare(lm.name, "paper", source.describe())  # a clash is reported now
                st.session_state[JOB] = tr.start_job(lm, source, target)
                st.session_state[STORE] = str(target)
                st.rerun()
        except (GradeError, OSError) as exc:
            session.show_error(exc, "Samples file not read")


@st.fragment(run_every=2.0)
def _job_progress() -> None:
    """A running job's progress and Stop button, every 2 s; the table is refreshed as traces land. Once the job ends
    the whole page reruns and shows its last line without this fragment, so an idle page polls nothing."""
    job = st.session_state.get(JOB)
    if job is None:
        return
    if not job.running:
        st.rerun(scope="app")
    st.progress(job.fraction, text=job.status_line())
    if st.button("Stop", key="tr_stop"):
        job.stop()
    version = TraceStore(job.store).version()
    if st.session_state.get("tr_seen_version") != version:  # a trace was added: refresh the table
        st.session_state["tr_seen_version"] = version
        st.rerun(scope="app")


if st.session_state.get(JOB) is not None:
    if st.session_state[JOB].running:
        _job_progress()
    else:
        (st.error if st.session_state[JOB].error else st.success)(st.session_state[JOB].status_line())

# ------------------------------------------------------------------------------------------- table

if not st.session_state.get(STORE) and not st.session_state.get("tr_demo_shown"):
    # A first visit opens on something: the demo store (a writable copy), once per session.
    st.session_state["tr_demo_shown"] = True
    demo = tr.demo_store(session.selected_model_name())
    if demo is not None:
        _open(demo)
if not st.session_state.get(STORE):
    st.info("Open a trace store, or analyse a samples file.")
    st.stop()
if Path(st.session_state[STORE]).parent == tr.stores_dir() / "demo":
    # what the traces are is the store's own line below (its source), so this stays true when the store is rebuilt
    st.caption("This is the **demo store**: a few GSM8K traces, wrong and correct, analysed ahead of time and read "
               "step by step, so the aggregates below show how well each signal separates them and how often the "
               "suspect step finds the known wrong step. Open your own store above.")

store = TraceStore(st.session_state[STORE])


@st.cache_data(show_spinner=False, max_entries=4)
def _frame(path: str, version: int) -> pd.DataFrame:
    return TraceStore(path).traces()


@st.cache_data(show_spinner=False, max_entries=4)
def _all_tokens(path: str, version: int) -> pd.DataFrame:
    return TraceStore(path).tokens().drop(columns=["scores"])


try:
    meta = store.meta()
    frame = _frame(str(store.path), store.version())
except GradeError as exc:
    session.show_error(exc, "Store not readable")
    st.stop()
source = meta.get("source") or {}
token_limit = source.get("max_new_tokens")  # generated traces' max_new_tokens; None for other sources
st.markdown(f"**{store.path.name}** · model `{meta.get('model')}` · {len(frame)} traces · "
            f"from `{source.get('file', '?')}` ({source.get('format', '?')}"
            + (f", {source['metric']} under filter {source['filter']}" if source.get("metric") else "") + ")")
if frame.empty:
    st.info("No trace in this store yet." + (" The analysis is running." if st.session_state.get(JOB) else ""))
    st.stop()


def _range(label: str, column: str, key: str, integer: bool = False):
    low, high = float(frame[column].min()), float(frame[column].max())
    if integer:
        low, high = int(low), int(high)
    if low == high:
        return None
    return st.slider(label, low, high, (low, high), key=key)


with st.container(border=True, key="tr_filters"):
    c1, c2, c3 = st.columns([2, 2, 1])
    correctness = c1.multiselect("Correctness", list(tr.CORRECTNESS), default=list(tr.CORRECTNESS), key="tr_correct")
    sort = c2.selectbox("Sort by", tr.sort_options(frame), key="tr_sort")
    descending = c3.toggle("Descending", value=True, key="tr_desc")
    c1, c2, c3 = st.columns(3)
    with c1:
        grade_range = _range("GRADE_pos", "grade_pos", "tr_grade")
    with c2:
        peak_range = _range("Peak shock (step rank ratio)", "peak_step_ratio", "tr_peak")
    with c3:
        steps_range = _range("Steps", "n_steps", "tr_steps", integer=True)

table = tr.triage_table(frame, correctness=correctness, grade_range=grade_range, peak_range=peak_range,
                        steps_range=steps_range, sort=sort, descending=descending)
st.caption(f"{len(table)} of {len(frame)} traces. Select a row (or pick a trace below) to open it.")
columns = {c: st.column_config.Column(help=h) for c, h in tr.COLUMN_HELP.items()}
columns.update({c: st.column_config.NumberColumn(format="%.4f", help=tr.COLUMN_HELP[c]) for c in ("GRADE_pos", "peak shock")})
columns["verifier P"] = st.column_config.NumberColumn(format="%.2f", help=tr.COLUMN_HELP["verifier P"])
columns["question"] = st.column_config.TextColumn(help=tr.COLUMN_HELP["question"])
rows = list(table["trace"])
page_state.synced_selection("tr_table", rows, "tr_open")  # the ticked row is the trace opened below
tables.show(table, key="tr_table", on_select="rerun", selection_mode="single-row", column_config=columns,
            column_order=[c for c in tr.FIRST_COLUMNS if c in table.columns])
with st.expander("More columns: check flags, the peak step and token, length, error kind"):
    tables.show(table, key="tr_table_more", column_config=columns, column_order=tr.more_columns(table),
                room=tables.BOXED_PX)

downloads = st.container(horizontal=True)
downloads.download_button("Annotations (CSV)", lambda: store.export_annotations("csv"), file_name="annotations.csv",
                          mime="text/csv", key="tr_dl_csv", on_click="ignore")
downloads.download_button("Annotations (JSONL)", lambda: store.export_annotations("jsonl"),
                          file_name="annotations.jsonl", mime="application/json", key="tr_dl_jsonl", on_click="ignore")
downloads.download_button("Table (CSV)", table.to_csv(index=False), file_name="traces.csv", mime="text/csv",
                          key="tr_dl_table", on_click="ignore")

# -------------------------------------------------------------------------------------- aggregates

with st.expander("Aggregates: where the shock peaks, and how well GRADE_pos finds wrong traces"):
    agg = aggregate(frame, _all_tokens(str(store.path), store.version()), token_limit=token_limit)
    if cut_line := cut_off_line(agg):
        st.markdown(f"**Cut off.** {cut_line}.")
    ranking = pd.DataFrame(agg["ranking"])
    st.markdown("**Ranking wrong traces above correct ones** (AUROC with a 95% bootstrap interval; for every "
                "score, higher was taken to mean wrong before looking at data)")
    if note := tr.ranking_note(agg["ranking"]):
        st.warning(note, icon=":material/warning:")
    tables.show(ranking.rename(columns=titled_columns(ranking.columns) | {"n": "traces", "wrong": "wrong traces"}),
                key="tr_agg_ranking", room=tables.BOXED_PX,
                column_config={column_title(k): st.column_config.NumberColumn(format="%.3f") for k in ("auroc", "lo", "hi")})
    st.markdown("**Where the step shock peaks** (relative position: 0 = first step, 1 = last)")
    position = pd.DataFrame(agg["peak_position"])
    tables.show(position.rename(columns=titled_columns(position.columns) | {"n": "traces"}), key="tr_agg_position",
                room=tables.BOXED_PX)
    st.markdown("**Token class of the highest-shock token**, beside each class's share of all tokens")
    classes = pd.DataFrame(agg["peak_token_class"])
    tables.show(classes.rename(columns=titled_columns(classes.columns) | {"n": "tokens"}), key="tr_agg_class",
                room=tables.BOXED_PX)
    notes = agg["annotations"]
    if notes.get("with_step") and "suspect_step_is_error_step" in notes:
        st.markdown(f"**Suspect step.** It is the marked (or known) error step in "
                    f"{notes['suspect_step_is_error_step']:.0%} of {notes['with_step']} traces "
                    f"(a random step would hit {notes['chance']:.0%}).")
    if notes.get("with_step"):
        st.markdown(f"**Annotated error steps: {notes['with_step']}.** The peak step is the error step in "
                    f"{notes['peak_step_is_error_step']:.0%} of them (the peak token's step: "
                    f"{notes['peak_token_step_is_error_step']:.0%}; within one step: {notes['peak_step_within_one']:.0%}; "
                    f"a random step would hit {notes['chance']:.0%}).")
    else:
        st.caption("No error step marked yet: mark some below to see how often the peak step is the error step.")

# -------------------------------------------------------------------------------------- one trace

labels = tr.trace_labels(table, frame)
chosen = st.selectbox("Open trace", rows, key="tr_open", format_func=labels.get)
if not chosen:
    st.stop()

row = frame.set_index("trace_id").loc[chosen]
ratios = tr.step_ratios(row)
token_rows = store.tokens(chosen)
trace_tokens = tr.token_scores(token_rows, int(row["n_layers"]))
model_name = str(meta.get("model") or "")
with st.container(border=True, key="tr_trace"):
    badge = {"correct": ":green-badge[correct]", "wrong": ":red-badge[wrong]",
             "unknown": ":gray-badge[not known]"}[tr.correctness_label(row["correct"])]
    st.markdown(f"#### Trace {chosen} {badge} {tr.cut_off_badge(row['cut_off'], token_limit)}".rstrip())
    if tr.is_cut_off(row["cut_off"]):
        st.warning(tr.cut_off_warning(row["correct"], token_limit), icon=":material/content_cut:")
    st.markdown(f"**Question.** {session.plain(str(row['question']))}")
    reader = row["verifier_reader"] if "verifier_reader" in row else None
    # what the verifier knew of the final answer (grade.traces.analysis.verify_item): nothing where the reply was cut
    final_known = localization.known_outcome(row["correct"], row["cut_off"])
    if not pd.isna(reader):  # the verifier ran on this trace (stores of format 3): its verdict first
        st.markdown("**Step verifier.** " + localization.verdict_line(
            row["verifier_suspect_step"], row["step_verifier_probability"], float(row["verifier_threshold"]),
            final_known, str(reader)))
        st.caption(localization.reader_line(str(reader), model_name) + " "
                   + localization.verifier_accuracy_line(str(reader), final_known=final_known is not None))
    signals = signals_of_row(row, token_rows)
    ranked = localization.ranked_table(list(row["step_texts"]), signals)
    suspect = int(ranked["step"].iloc[0])
    m1, m2, m3, m4, m5 = st.columns(5)
    m1.metric("Suspect step", suspect, help="Where the trace most plausibly goes wrong first: " + LOCATORS[DEFAULT_LOCATOR][0])
    m2.metric("GRADE_pos", f"{row['grade_pos']:.4f}", help="Mean rank ratio over steps and layers")
    m3.metric("Steps", int(row["n_steps"]))
    m4.metric("Peak step", int(row["peak_step"]), help="The step with the largest rank ratio (mean over layers)")
    m5.metric("Mean CE loss", f"{row['loss_value']:.3f}")
    st.markdown(f"**Suspect step {suspect}:** {session.plain(str(row['step_texts'][suspect - 1]).strip()[:200])}"
                + (f"  \n:orange-badge[check] {session.plain(ranked['check'].iloc[0])}" if ranked["check"].iloc[0]
                   else "  \n:gray-badge[no check finding] ranked by token surprisal"))
    st.caption(localization.accuracy_line(model_name, "suspect step") + " "
               + localization.accuracy_line(model_name, "peak step (step rank ratio)"))
    SHOCK, SURPRISAL = "epistemic shock (heatmap)", "token surprisal (heatmap)"
    verified = not pd.isna(reader) and "step_verifier_probability" in row
    views = ([localization.VERIFIER_VIEW] if verified else []) + [SHOCK, SURPRISAL]
    colour_by = st.radio("Colour tokens by", views, horizontal=True, key="tr_colour",
                         help="Each choice has its own colour scale")
    layer = None
    if colour_by == localization.VERIFIER_VIEW:
        pass
    elif colour_by == SHOCK:
        layer_choice = st.select_slider("Token colours from", ["mean over layers"] + list(range(int(row["n_layers"]))),
                                        key="tr_layer")
        layer = None if layer_choice == "mean over layers" else int(layer_choice)
    else:
        trace_tokens = tr.token_scores(token_rows, int(row["n_layers"]), surprisal=True)
    if colour_by == localization.VERIFIER_VIEW:
        values = tokens.step_probability_values(trace_tokens, row["step_verifier_probability"])
        raw, label = values, "P(first wrong step)"
        st.html(tokens.colorbar_html("the step verifier's probability that the step is the first wrong one (0 to 1)"))
    else:
        values = tokens.shared_scale([trace_tokens], layer)[0]
        st.html(tokens.colorbar_html(f"{colour_by.split(' (')[0]} (this trace)"))
        raw = np.nanmean(trace_tokens.scores, axis=0) if layer is None else trace_tokens.scores[layer]
        label = "shock" if colour_by == SHOCK else "surprisal"
    st.html(tokens.token_html(trace_tokens, values, raw=raw, label=label,
                              flagged={k - 1 for k, v in enumerate(signals.values["check"], 1) if v > 0},
                              suspect=suspect - 1))
    if colour_by != localization.VERIFIER_VIEW:
        st.caption(localization.accuracy_line(model_name, colour_by))
    if colour_by == SHOCK:
        st.caption(f"Highest-shock token: {row['peak_token']!r} ({row['peak_token_class']}) in step {int(row['peak_token_step'])}.")
    with st.expander(f"Steps ranked by suspicion ({int((ranked['check'] != '').sum())} flagged by the check)"):
        st.table(localization.ranked_style(ranked))  # static: the step texts wrap, never cut

left, right = st.columns(2, gap="medium")
with left:
    session.show_figure(figures.step_grade_figure([(f"trace {chosen}", ratios.mean(axis=1))]), f"trace-{chosen}-steps",
                        key="tr_steps_fig")
with right:
    session.show_figure(figures.step_ratio_heatmap(ratios, list(row["step_texts"]), f"Trace {chosen}: ratio per step",
                                                   float(ratios.min()), float(ratios.max())),
                        f"trace-{chosen}-heatmap", key="tr_heat_fig")

# -------------------------------------------------------------------------------------- annotation

st.subheader("Where does it go wrong?")
notes = store.annotations().get(chosen, {})
# Not annotated yet: the form starts on the error step the trace came with (a benchmark's known wrong step), the
# one its table row shows, not on "no error step".
known = {"error_step": None if pd.isna(row["error_step"]) else int(row["error_step"]),
         "kind": row["error_kind"] if isinstance(row["error_kind"], str) else None}
marked = notes or known
if line := tr.mark_line(notes, known):  # one line: the saved mark where there is one, else the given one
    (st.success if notes else st.caption)(line)
steps = list(row["step_texts"])
options = [None] + list(range(1, len(steps) + 1))
# Keys per trace: a half-filled form never carries over to the next trace opened.
suffix = re.sub(r"[^A-Za-z0-9_]", "_", chosen)
step_key, kind_key, note_key = (f"tr_{name}_{suffix}" for name in ("error_step", "error_kind", "note"))
with st.form(f"tr_form_{suffix}", border=True):
    st.selectbox("Error step", options, index=options.index(marked.get("error_step")) if marked.get("error_step") in options else 0,
                 key=step_key, format_func=lambda k: "no error step" if k is None else f"step {k}: {steps[k - 1][:80]}")
    st.selectbox("Kind of error", [None, *ERROR_KINDS], key=kind_key,
                 index=([None, *ERROR_KINDS].index(marked.get("kind")) if marked.get("kind") in ERROR_KINDS else 0),
                 format_func=lambda k: "(not set)" if k is None else kind_title(k))
    st.text_input("Note", value=notes.get("note", ""), key=note_key)
    saved = st.form_submit_button("Save annotation", type="primary")
if saved:
    try:
        store.annotate(chosen, error_step=st.session_state.get(step_key), kind=st.session_state.get(kind_key),
                       note=st.session_state.get(note_key) or "")
        st.session_state["tr_saved"] = chosen
        st.rerun()
    except GradeError as exc:
        session.show_error(exc, "Annotation not saved")
if st.session_state.get("tr_saved") == chosen and notes:
    st.caption(f"Stored in {session.shown_path(store.annotations_path)}.")


def _edit_in_reasoning_trace() -> None:
    st.session_state["rt_choice"] = "(type your own problem)"
    st.session_state["rt_question"] = str(row["question"])
    st.session_state["rt_pending_A"] = str(row["response"])
    st.session_state["rt_gold"] = ", ".join(row["answers"]) if len(row["answers"]) else ""
    st.session_state.pop("rt_traces", None)


if st.button("Edit and re-run in the Reasoning trace page", key="tr_to_rt", on_click=_edit_in_reasoning_trace,
             help="Opens this trace as trace A there: change a step and see which step's shock moves"):
    st.switch_page("pages/reasoning_trace.py")
