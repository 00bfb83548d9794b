"""Reasoning trace: step-wise GRADE_pos and per-token epistemic shock for two chain-of-thought answers."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import streamlit as st

from grade.models.cancel import Cancelled
from grade.common.errors import GradeError, InputError
from grade.tasks.tasks import answer_format
from studio import figures, localization, page_state, session, tables, tokens, waiting, workflows
from studio.analysis_cache import shipped_trace
from studio.memory import prompt_tokens
from studio.resources import load_questions, trace_examples

session.require_router()  # a direct URL on a fresh server goes through app.py too

TRACES = ("A", "B")
OWN = "(type your own problem)"

st.title("Reasoning trace")
st.markdown(
    "A chain-of-thought answer is cut into steps at punctuation and line breaks. Each step gets its own loss "
    "(cross-entropy of that step's tokens given everything before it), hence its own rank ratio per layer; "
    "**GRADE_pos** is their mean. Each token is coloured by its *epistemic shock*, the row sum of C_g: how much "
    "the model would have to change to produce it. Both traces share one colour scale. Each trace also gets a "
    "**suspect step**: where it most plausibly goes wrong first (an arithmetic and provenance check of every step, "
    "then token surprisal), with how often that pick was right on traces whose wrong step is known. First, in "
    "seconds, a **step verifier** reads each trace once and names its first wrong step, or says that no step "
    "stands out, with its accuracy on real annotated traces."
)
with st.expander("What you are looking at"):
    st.markdown(
        "- **Steps** are numbered from 1 everywhere on this page.\n"
        "- **Suspect step**: the first step where an `a op b = c` does not hold (re-computed exactly) or a number "
        "appears that is neither in the problem nor in an earlier step; if none, the step with the most "
        "surprising token. The ranked list shows why.\n"
        "- **Epistemic shock** colours a token by how much the model would have to change to produce it (GRADE's row "
        "sums of C_g); **token surprisal** by how unexpected the token was (its cross-entropy). Each view states "
        "how often it pointed at the wrong step on the benchmark, beside the chance rate: on the model's own slips "
        "the shock heatmap does no better than chance.")

lm = session.current_model()
if lm is None:
    session.no_model_message()
    st.stop()


@st.cache_data(show_spinner=False)
def _problems() -> list[dict]:
    return load_questions("gsm8k", 40)


# The loaded model's own right and wrong problems first (by its sampled labels), then the dev set's first 40.
own = {f"{lm.name.split('/')[-1]} {row['label']}": row for row in trace_examples(lm.name)}
dev = {f"{row['question'][:90]}": row for row in _problems()}
problems = {**own, **dev}


def _load_problem() -> None:
    row = problems.get(st.session_state.get("rt_choice"))
    if row is None:
        return
    st.session_state["rt_question"] = row["question"]
    st.session_state["rt_gold"] = ", ".join(row["answers"])
    st.session_state["rt_text_A"] = ""
    st.session_state["rt_text_B"] = (row.get("solution") or "").strip()
    st.session_state.pop("rt_traces", None)


def _use_reference(key: str) -> None:
    row = problems.get(st.session_state.get("rt_choice"))
    if row is not None:
        st.session_state[f"rt_text_{key}"] = (row.get("solution") or "").strip()


# Texts produced by a button below are handed over here, before the text areas exist in this run.
for key in TRACES:
    pending = st.session_state.pop(f"rt_pending_{key}", None)
    if pending is not None:
        st.session_state[f"rt_text_{key}"] = pending

# What each trace's results were made from (its problem and text): a result whose inputs changed is dropped here,
# the one place that knows it, so that no panel below shows a verdict or an analysis of another text. The gold
# answer is not among them: what depends on it (correct / wrong, the verifier's verdict) is decided again from it
# on every run.
_inputs = {k: (str(st.session_state.get("rt_question") or "").strip(), str(st.session_state.get(f"rt_text_{k}") or "").strip())
           for k in TRACES}
page_state.keep_current("rt_verdicts", _inputs, lambda v: (v["question"], v["response"]))
page_state.keep_current("rt_traces", _inputs, lambda t: (t.question.strip(), t.response.strip()))

if "rt_question" not in st.session_state and problems:
    st.session_state["rt_choice"] = next(iter(dev or problems))
    _load_problem()
# The task's own answer length (GSM8K: 256): a shorter default cuts traces off before their answer.
st.session_state.setdefault("rt_max_tokens", min(answer_format("gsm8k").max_new_tokens, session.limits().cot_tokens))

# The list names a problem only while the Problem box holds it: once the box is edited the list says so (OWN), and
# choosing the problem again restores its text (a choice of the entry already shown would change nothing).
_listed = problems.get(st.session_state.get("rt_choice"))
if _listed is not None and _listed["question"].strip() != str(st.session_state.get("rt_question") or "").strip():
    st.session_state["rt_choice"] = OWN
    # the listed problem's gold answer goes with it: kept, it would mark a trace of the typed problem wrong
    if str(st.session_state.get("rt_gold") or "").strip() == ", ".join(_listed["answers"]).strip():
        st.session_state["rt_gold"] = ""
st.selectbox("Math problem (the model's own solved / failed ones, then the GSM8K dev set)", [OWN] + list(problems), key="rt_choice", **session.KEEP, on_change=_load_problem)
q_col, g_col = st.columns([4, 1])
q_col.text_area("Problem", key="rt_question", **session.KEEP, height=90)
g_col.text_input("Gold answer (optional)", key="rt_gold", **session.KEEP, help="Numbers separated by commas; marks a trace correct or wrong")
g_col.number_input("Max. generated tokens", min_value=1, step=16, key="rt_max_tokens", **session.KEEP,
                   help=f"At most {session.limits().cot_tokens} tokens")

held = waiting.pending("trace")  # one analysis per user: the buttons wait while this session's is queued
columns = st.columns(2, gap="medium")
generate_clicked = None
for key, column in zip(TRACES, columns):
    with column:
        st.text_area(f"Trace {key}", key=f"rt_text_{key}", **session.KEEP, height=200,
                     placeholder="Generate a chain of thought with the model, or paste one ...")
        b1, b2 = st.columns(2)
        if b1.button("Generate with the model", key=f"rt_gen_{key}", width="stretch", disabled=held is not None):
            generate_clicked = key
        b2.button("Use the reference solution", key=f"rt_ref_{key}", on_click=_use_reference, args=(key,),
                  disabled=st.session_state.get("rt_choice") not in problems, width="stretch")


def _gold() -> list[str]:
    return [g.strip() for g in str(st.session_state.get("rt_gold") or "").split(",") if g.strip()]


def _private() -> bool:
    """Served, a trace is cached for its user only unless it is a shipped problem's reference solution: nobody
    learns from a cached result what someone else typed."""
    if not session.config().served:
        return False
    row = problems.get(st.session_state.get("rt_choice"))
    question = str(st.session_state.get("rt_question", "")).strip()
    return row is None or row["question"].strip() != question


def _trace_key(question: str, response: str, gold: list[str], private: bool) -> tuple:
    """What a trace analysis depends on (the model as picked, the texts, the gold answer, the caps and memory
    bound), and, when private, who asked."""
    spec = st.session_state["model_spec"]
    return ("trace", spec.source, spec.device, spec.dtype, question.strip(), response.strip(), tuple(gold),
            session.limits(), session.user_key() if private else None)


def _memory_mb(question: str, responses: list[str]) -> float:
    """What the queue counts this job as holding (the longest trace's estimate): the operator's budget."""
    from grade.gradients.memory import analysis_memory_bytes
    from grade.gradients.losses import split_steps

    limits, largest = session.limits(), 0
    n_prompt = prompt_tokens(lm, question, None, limits)
    for response in responses:
        text = response.strip()[: limits.trace_chars + 1]  # an over-long trace is refused by the job, unread
        n_response = len(lm.tokenizer(text, add_special_tokens=False)["input_ids"])
        largest = max(largest, analysis_memory_bytes(lm, n_prompt + n_response, n_response, len(split_steps(text)),
                                                     limits.step_memory_mb))
    return largest / 2**20


def _generation_memory_mb(question: str, max_new_tokens: int) -> float:
    """What the queue counts a generation as holding: the operator's budget holds it back like an analysis."""
    from grade.gradients.memory import generation_memory_bytes

    return generation_memory_bytes(lm, prompt_tokens(lm, question, None, session.limits()), max_new_tokens) / 2**20


def _submit(action: str, keys: list[str], texts: dict[str, str], question: str | None = None) -> None:
    """One job in the model's queue for this click: generate trace ``keys[0]``, or analyse the traces ``texts``
    (those found in the shared cache are taken from it)."""
    question = str(st.session_state.get("rt_question", "")) if question is None else question
    gold, limits = _gold(), session.limits()
    cache, private = session.analysis_cache(), _private()
    if action == "generate":
        tokens_wanted = int(st.session_state["rt_max_tokens"])
        job_key = ("trace-generate", st.session_state["model_spec"].label, question.strip(), tokens_wanted,
                   session.user_key() if private else None)

        def compute(progress):
            progress(f"Generating up to {tokens_wanted} tokens ...")
            return workflows.generate_trace(lm, question, max_new_tokens=tokens_wanted, limits=limits)

        waiting.submit("trace", job_key, compute, request={"action": action, "keys": keys}, kind="generate",
                       memory_mb=_generation_memory_mb(question, tokens_wanted))
        return
    found, todo = {}, {}
    # the keys are made here: the job runs in a queue worker, where the session cannot be read
    cache_keys = {key: _trace_key(question, texts[key], gold, private) for key in keys}
    for key in keys:
        entry = cache.get(cache_keys[key])
        shipped = None if entry is not None else shipped_trace(lm, question, texts[key], title=f"Trace {key}", gold=gold)
        if entry is not None:
            found[key] = dataclasses.replace(entry.value, title=f"Trace {key}")
        elif shipped is not None:  # a reference solution analysed when the app was built (exact match)
            found[key] = shipped
            cache.put(cache_keys[key], shipped)
        else:
            todo[key] = texts[key]
    if not todo:  # every trace was analysed before: no queue
        _keep({"traces": found, "errors": {}}, {"action": action, "keys": keys})
        return

    def compute(progress):
        traces, errors = dict(found), {}
        for key, text in todo.items():
            progress(f"Analyzing trace {key} (one backward pass per step) ...")
            try:
                traces[key] = workflows.analyze_trace(lm, question, text, title=f"Trace {key}", gold=gold,
                                                      limits=limits, progress=progress)  # steps done, time left
                cache.put(cache_keys[key], traces[key])
            except Cancelled:
                raise
            except Exception as exc:  # one trace refused (too long, ...): the other is still analysed
                errors[key] = exc
        return {"traces": traces, "errors": errors}

    job_key = ("trace-analysis",) + tuple(cache_keys[k] for k in sorted(todo))
    waiting.submit("trace", job_key, compute, request={"action": action, "keys": keys},
                   memory_mb=_memory_mb(question, list(todo.values())), kind="trace")


def _keep(value, request: dict) -> None:
    """A finished job's result into this session: a generated text into its box, analysed traces beside the
    others (each trace's error shown)."""
    if request["action"] == "generate":
        key = request["keys"][0]
        st.session_state[f"rt_pending_{key}"] = value.text
        # remembered with its text: an edited trace is no longer the cut-off generation
        st.session_state[f"rt_cut_{key}"] = (value.text.strip(), value.max_new_tokens) if value.cut_off else None
        st.rerun()
    traces = dict(st.session_state.get("rt_traces") or {})
    for key in request["keys"]:
        if key in value["errors"]:
            traces.pop(key, None)
            session.show_error(value["errors"][key], f"Trace {key}")
        elif key in value["traces"]:
            traces[key] = value["traces"][key]
    st.session_state["rt_traces"] = traces
    if request["action"] == "rerun" and not value["errors"]:  # (a rerun would wipe the error shown)
        for key in request["keys"]:
            st.session_state.pop(f"rt_editor_{key}", None)  # the table now shows the new steps
        st.rerun()


def _verify(keys: list[str], texts: dict[str, str], question: str | None = None) -> None:
    """The step verifier's verdict on each trace, before its GRADE analysis is queued: one forward pass of the
    verifier's reader (seconds, not the analysis's minutes), so that the page shows it first."""
    from grade.steps.verifier import verify_trace

    question = str(st.session_state.get("rt_question", "")) if question is None else question
    verdicts = dict(st.session_state.get("rt_verdicts") or {})
    try:
        reader = session.verifier_reader(lm)
    except GradeError as exc:  # the reader could not be loaded: the GRADE analysis still runs
        session.show_error(exc, "Step verifier")
        return
    if reader is None:
        return
    from studio.served import check_trace_text

    for key in keys:
        verdicts.pop(key, None)
        try:  # a trace past the caps is refused by its analysis, in one line: the verifier never reads it
            check_trace_text(question, texts[key], lm.tokenizer, session.limits())
        except GradeError:
            continue
        with st.spinner(f"The step verifier reads trace {key} ..."):
            try:
                verdicts[key] = {"question": question.strip(), "response": texts[key].strip(), "reader": reader.name,
                                 "result": verify_trace(reader, question, texts[key],
                                                        final_correct=_outcome(key, texts[key]))}
            except GradeError as exc:  # too long for the reader, ...: shown, and the analysis goes on
                session.show_error(exc, f"Trace {key}: step verifier")
    st.session_state["rt_verdicts"] = verdicts


def _known(key: str, text: str):
    """What the verifier is told of trace ``key``'s final answer (:func:`studio.localization.outcome`, the rule of
    the Traces page and of ``grade traces``): right or wrong by the gold answer typed, nothing without one or where
    the generation was cut off."""
    cut = st.session_state.get(f"rt_cut_{key}")
    return localization.outcome(cut_off=bool(cut and cut[0] == text.strip()), response=text, gold=_gold())


def _outcome(key: str, text: str) -> bool | None:
    return _known(key, text).final_correct


def _show_verdicts(keys: list[str]) -> None:
    """The verifier's verdicts, first on the page, each with the model that read it and its measured accuracy."""
    verdicts = st.session_state.get("rt_verdicts") or {}
    keys = [k for k in keys if k in verdicts]
    if not keys:
        return
    st.subheader("Step verifier: where does the trace first go wrong, if anywhere?")
    for key, column in zip(keys, st.columns(len(keys), gap="medium")):
        v, result = verdicts[key], verdicts[key]["result"]
        known = _known(key, v["response"])  # the gold answer as it is now
        outcome = known.final_correct
        suspect, threshold = localization.verifier_verdict(v["reader"], result.step_probability, outcome)
        with column, st.container(border=True, key=f"rt_verdict_{key}"):
            st.markdown(f"**Trace {key}.** "
                        + localization.verdict_line(suspect, result.step_probability, threshold, outcome, v["reader"]))
            if suspect is not None:
                st.markdown(f"> {session.plain(result.step_texts[suspect - 1].strip()[:200])}")
            st.caption(localization.outcome_line(outcome, known.reason) + " " + localization.reader_line(v["reader"], lm.name)
                       + f" {result.seconds:.1f} s.")
            with st.expander("Probability per step"):
                # a static table: its step texts wrap instead of being cut at the column's edge
                st.table(localization.probability_table(result.step_texts, result.step_probability)
                         .style.format({"P(first wrong)": "{:.3f}"}).hide(axis="index"))
    known = any(_outcome(k, verdicts[k]["response"]) is not None for k in keys)
    st.caption(localization.verifier_accuracy_line(verdicts[keys[0]]["reader"], final_known=known)
               + " The GRADE step analysis below is the slower second view.")


def _submit_or_refuse(action: str, keys: list[str], texts: dict[str, str], question: str | None = None) -> bool:
    try:
        _submit(action, keys, texts, question)
        return True
    except InputError as exc:  # the queue is full, or this user already has an analysis: one line
        session.show_error(exc)
        return False


filled = [k for k in TRACES if str(st.session_state.get(f"rt_text_{k}") or "").strip()]
if st.button("Analyze traces", key="rt_analyze", type="primary", disabled=not filled or held is not None):
    current = {k: str(st.session_state.get(f"rt_text_{k}") or "") for k in filled}
    before = st.session_state.get("rt_traces") or {}
    question = str(st.session_state.get("rt_question", ""))
    # a trace whose text and problem did not change keeps its analysis (page_state dropped the others above)
    changed = [k for k in filled if k not in before]
    if changed:
        _verify(changed, current, question)
        _submit_or_refuse("analyze", changed, current)
elif generate_clicked is not None:
    _submit_or_refuse("generate", [generate_clicked], {})
_show_verdicts(filled)
waiting.cancelled_notice("trace")
waiting.elsewhere("trace")
if waiting.pending("trace") is not None:
    held = waiting.pending("trace")
    state, value = waiting.wait(held, "trace")
    if state == "failed":
        session.show_error(value)
    elif state == "done":
        _keep(value, held.request)

# a job that finished after its problem or text was changed: its result is not of the inputs shown
page_state.keep_current("rt_traces", _inputs, lambda t: (t.question.strip(), t.response.strip()))
traces: dict[str, workflows.Trace] = st.session_state.get("rt_traces") or {}
if not traces:
    st.info("Fill in one or two traces (generate, use the reference solution, or paste) and press **Analyze traces**.")
    st.stop()

shown = [traces[k] for k in TRACES if k in traces]
n_layers = shown[0].result.n_layers
SHOCK, SURPRISAL = "epistemic shock (heatmap)", "token surprisal (heatmap)"
_verdicts = st.session_state.get("rt_verdicts") or {}
_verified = all(t.title[-1] in _verdicts for t in shown)
colour_by = st.radio("Colour tokens by", ([localization.VERIFIER_VIEW] if _verified else []) + [SHOCK, SURPRISAL],
                     horizontal=True, key="rt_colour", **session.KEEP,
                     help="Each choice has its own colour scale, shared by the traces shown")
layer = None
if colour_by == localization.VERIFIER_VIEW:
    scored = [tokens.TokenScores(t.display_tokens, *t.surprisal_tokens()) for t in shown]
elif colour_by == SHOCK:
    layer_choice = st.select_slider("Token colours from", ["mean over layers"] + list(range(n_layers)), key="rt_layer",
                                    **session.KEEP, help="Each layer is scaled by its largest score over both traces before averaging")
    layer = None if layer_choice == "mean over layers" else int(layer_choice)
    scored = [tokens.TokenScores(t.display_tokens, *t.scored_tokens()) for t in shown]
else:
    scored = [tokens.TokenScores(t.display_tokens, *t.surprisal_tokens()) for t in shown]
if colour_by == localization.VERIFIER_VIEW:  # probabilities: one scale already, never rescaled
    values = [tokens.step_probability_values(sc, _verdicts[t.title[-1]]["result"].step_probability)
              for t, sc in zip(shown, scored)]
    st.html(tokens.colorbar_html("the step verifier's probability that the step is the first wrong one (0 to 1)"))
else:
    values = tokens.shared_scale(scored, layer)
    st.html(tokens.colorbar_html(f"{colour_by.split(' (')[0]} (shared scale)"))
    st.caption(localization.accuracy_line(lm.name, colour_by))

all_ratios = np.concatenate([t.step_ratios for t in shown if len(t.step_ratios)]) if shown else np.zeros((1, 1))
zmin, zmax = float(np.nanmin(all_ratios)), float(np.nanmax(all_ratios))

columns = st.columns(len(shown), gap="medium")
for trace, score, value, column in zip(shown, scored, values, columns):
    with column, st.container(border=True, key=f"trace_{trace.title[-1]}"):
        correct = localization.trace_outcome(trace.response, _gold())  # by the gold answer as it is now
        badge = {True: ":green-badge[correct]", False: ":red-badge[wrong]", None: ":gray-badge[not checked]"}[correct]
        cut = st.session_state.get(f"rt_cut_{trace.title[-1]}")
        cut = cut[1] if cut and cut[0] == trace.response.strip() else None
        if cut:
            badge += f" :orange-badge[cut off at {cut} tokens]"
        st.markdown(f"#### {trace.title} {badge}")
        if cut:
            st.warning(f"Generation stopped at the {cut}-token limit before the model finished its answer"
                       + (", so \"wrong\" may only mean unfinished" if correct is False else "")
                       + ". Raise *Max. generated tokens* and generate again.", icon=":material/content_cut:")
        m1, m2, m3 = st.columns(3)
        m1.metric("GRADE_pos", f"{trace.grade_pos:.3f}", help="Mean rank ratio over steps and layers")
        m2.metric("Steps", len(trace.result.steps))
        m3.metric("Mean CE loss", f"{trace.result.loss_value:.3f}")
        if trace.origin is not None:  # a shipped result (studio.analysis_cache): say so, and how to recompute it
            st.caption(f"Precomputed, shipped with the app (computed on {trace.origin.get('computed_on')}); edit a step "
                       "and re-run below to compute it here.")
        raw = value if colour_by == localization.VERIFIER_VIEW else \
            np.nanmean(score.scores, axis=0) if layer is None else score.scores[layer]
        signals = trace.localization()[0]
        ranked = localization.ranked_table(trace.step_texts, signals)
        suspect = int(ranked["step"].iloc[0])
        st.html(tokens.token_html(score, value, raw=raw, label={SHOCK: "shock", SURPRISAL: "surprisal"}.get(colour_by, "P(first wrong step)"),
                                  flagged={k - 1 for k, v in enumerate(signals.values["check"], 1) if v > 0},
                                  suspect=suspect - 1))
        flagged = int((ranked["check"] != "").sum())
        st.markdown(f"**Suspect step {suspect}** of {len(ranked)}: {session.plain(trace.step_texts[suspect - 1].strip()[:200])}"
                    + (f"  \n:orange-badge[check] {session.plain(ranked['check'].iloc[0])}" if ranked["check"].iloc[0] else
                       "  \n:gray-badge[no check finding] ranked by token surprisal"))
        st.caption(localization.accuracy_line(lm.name, "suspect step"))
        with st.expander(f"Steps ranked by suspicion ({flagged} flagged by the check)"):
            st.table(localization.ranked_style(ranked))  # static: the step texts wrap, never cut

if len(shown) > 1 or len(shown[0].result.steps) > 1:
    session.show_figure(figures.step_grade_figure([(t.title, t.step_ratios.mean(axis=1)) for t in shown]),
                        "per-step-rank-ratio", key="rt_steps")
    st.caption("**What this chart can show:** how the step rank ratio (mean over layers) moves from step to step, "
               "on one scale for both traces. **What it cannot show:** which step is wrong. Its peak is not an error "
               "mark: for a wrong trace and its corrected twin it can peak on the correct one. "
               + localization.accuracy_line(lm.name, "peak step (step rank ratio)") + " "
               + localization.grade_in_verifier_line(lm.name)
               + " Use the suspect step above for where a trace goes wrong.")
columns = st.columns(len(shown), gap="medium")
for trace, column in zip(shown, columns):
    with column:
        fig = figures.step_ratio_heatmap(trace.step_ratios, trace.step_texts,
                                         f"{trace.title}: ratio per step", zmin, zmax)
        session.show_figure(fig, f"{trace.title}-step-heatmap", key=f"rt_heat_{trace.title[-1]}")

st.subheader("Manual error analysis")
st.markdown("Edit a step (fix an arithmetic slip, or plant one) and re-run: see which step's shock changes.")
for trace in shown:
    key = trace.title[-1]
    with st.expander(f"Edit the steps of {trace.title}"):
        steps_frame = pd.DataFrame({"step": trace.step_texts}, index=range(1, len(trace.step_texts) + 1))
        config, row_height = tables.fitted(steps_frame, {"step": st.column_config.TextColumn("step text")},
                                           room=tables.BOXED_PX, selectable=True, index=True)
        edited = st.data_editor(steps_frame, key=f"rt_editor_{key}", hide_index=False, num_rows="dynamic",
                                width="stretch", column_config=config, row_height=row_height)
        if st.button(f"Re-run {trace.title} with these steps", key=f"rt_rerun_{key}",
                     disabled=waiting.pending() is not None):
            response = workflows.join_steps([str(s) for s in edited["step"].fillna("").tolist()])
            _verify([key], {key: response}, trace.question)
            if _submit_or_refuse("rerun", [key], {key: response}, trace.question):
                st.session_state[f"rt_pending_{key}"] = response
                st.rerun()  # the job waits at the top of the page, under the Analyze button

rows = [
    {"trace": t.title, "step": i + 1, "text": s.text, "loss": s.loss_value, "mean_rank_ratio": float(np.mean(s.rank_ratio)),
     **{f"ratio_{l}": float(v) for l, v in enumerate(s.rank_ratio)}}
    for t in shown for i, s in enumerate(t.result.steps)
]
downloads = st.container(horizontal=True)
downloads.download_button("Steps (CSV)", pd.DataFrame(rows).to_csv(index=False), file_name="grade_steps.csv", mime="text/csv",
                   key="rt_dl_csv", on_click="ignore")
downloads.download_button("Traces (JSON)", lambda: json.dumps({t.title: t.result.to_dict() for t in shown}),
                   file_name="grade_traces.json", mime="application/json", key="rt_dl_json", on_click="ignore")
