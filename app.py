"""GRADE Studio: ``streamlit run app.py``.

This file is the router (page list + sidebar model picker, shared by every page) and the Home page.
The pages are thin: the engine is :mod:`grade`, UI support is :mod:`studio`.
"""

from __future__ import annotations

import os
import time

import pandas as pd
import streamlit as st

st.set_page_config(page_title="GRADE Studio", page_icon=":material/troubleshoot:", layout="wide")

from grade.common.errors import InputError  # noqa: E402
from grade.tasks.registry import REGISTRY  # noqa: E402
from studio import figures, loading, session, tables, tokens, waiting, workflows  # noqa: E402
from studio.resources import default_probe, list_probes, reference_set  # noqa: E402
from studio.summaries import explain, headline_reading, probe_reading, screen_evidence  # noqa: E402
from grade.verdict.probe import probe_inputs  # noqa: E402
from grade.verdict.probe_reading import bands_for  # noqa: E402

@st.cache_data(show_spinner=False)
def _examples(model: str | None) -> dict[str, tuple[str, str | None, str]]:
    """Home's examples (:func:`studio.workflows.home_examples`): label -> (question, context, task)."""
    return workflows.home_examples(model)


def _use_example() -> None:
    label = st.session_state.get("example")
    if not label:
        return
    lm = session.current_model()
    found = _examples(lm.name if lm else None).get(label)
    if found is None:  # an example of a model no longer loaded
        return
    question, context, task = found
    st.session_state["question"] = question
    st.session_state["context"] = context or ""
    st.session_state["task"] = task
    st.session_state["choices"] = ""
    st.session_state["gold"] = ""
    st.session_state["max_new_tokens"] = workflows.home_answer_tokens(task, session.limits())


def _task_changed() -> None:
    """A new question type starts at its own answer length (the labels'): the answer the verdicts' evidence judged."""
    st.session_state["max_new_tokens"] = workflows.home_answer_tokens(st.session_state.get("task", "qa"),
                                                                      session.limits())


def _raise_limit() -> None:
    """The button under a cut-off answer: a longer answer length, and the same question analysed again with it."""
    request = st.session_state.get("analysis_request")
    raised = workflows.raised_answer_tokens(int((request or {}).get("max_new_tokens") or 0), session.limits())
    if request is None or raised is None:
        return
    st.session_state["max_new_tokens"] = raised
    st.session_state["rerun_request"] = {**request, "max_new_tokens": raised}


OWN_QUESTION = "(your own question)"


def _forget_stale_example(examples: dict[str, tuple[str, str | None, str]]) -> None:
    """The example selector names the example only while the question, document and type are still that
    example's: once any is edited it shows OWN_QUESTION (and choosing the example again restores its text)."""
    label = st.session_state.get("example")
    found = examples.get(label) if label else None
    if not label:
        return
    asked = (str(st.session_state.get("question") or "").strip(), str(st.session_state.get("context") or "").strip(),
             st.session_state.get("task", found[2] if found else None))
    if found is None or (found[0].strip(), (found[1] or "").strip(), found[2]) != asked:
        st.session_state["example"] = ""


def _request() -> dict:
    """What the Analyze button analyses: the widgets' values now (a multiple-choice question's options parsed
    from the choices box: an InputError says what is wrong with them). The gold answer is not part of it: it
    marks the answer when the result is shown, without analysing again."""
    task = st.session_state.get("task", "qa")
    choices = workflows.parse_choices(st.session_state.get("choices")) if REGISTRY[task].choices else None
    return {"question": st.session_state.get("question", ""), "context": st.session_state.get("context"),
            "task": task, "choices": choices,
            "max_new_tokens": int(st.session_state.get("max_new_tokens")
                                  or workflows.home_answer_tokens(task, session.limits()))}


def _keyed(request: dict) -> dict:
    """``request`` as the caches key it: the question with its lettered options (a multiple-choice question)."""
    return {**request, "question": workflows.asked_text(request["question"], request.get("choices"))}


def _analysis_job(lm, request: dict, probe, info, problem: str | None, shared: bool, recompute: bool = False):
    """(cache key, job key, compute): what ``request`` is cached under, which requests are the same computation
    (the key without its owner: identical requests share one), and the work itself, which runs in a queue
    worker without Streamlit."""
    detectors, detectors_problem = session.active_detectors(lm)
    key = session.analysis_key(lm, info if probe is not None else None, _keyed(request), session.detectors_stamp(lm),
                               shared=shared)
    label, limits = st.session_state["model_spec"].label, session.limits()
    probe_info = info if probe is not None else None
    spec, backend = st.session_state["model_spec"], session.ray_backend()

    def compute(progress):
        if backend is not None:  # GRADE_BACKEND: a Ray Serve replica holds the model and computes
            progress("Sent to the Ray Serve replicas (Ray's queue when all are busy) ...")
            analysis = backend.analyze(spec.source, spec.device, None if spec.dtype == "auto" else spec.dtype, {
                "question": request["question"], "context": request["context"], "task": request["task"],
                "probe": probe, "probe_info": probe_info, "max_new_tokens": request["max_new_tokens"],
                "model_label": label, "limits": limits, "detectors": detectors, "choices": request.get("choices")})
        else:
            analysis = workflows.analyze_question(
                lm, request["question"], context=request["context"], task=request["task"], probe=probe,
                probe_info=probe_info, max_new_tokens=request["max_new_tokens"], progress=progress,
                model_label=label, limits=limits, detectors=detectors, choices=request.get("choices"))
        if analysis.probe_problem is None and probe is None:
            analysis.probe_problem = problem
        analysis.detectors_problem = detectors_problem
        return analysis

    # A recompute is never joined to a computation that a cached result would answer.
    job_key = key[1:] + (("recompute", session.user_key()) if recompute else ())
    return key, job_key, compute


def _is_example(lm, request: dict) -> bool:
    if request.get("choices"):
        return False
    asked = ((request["question"] or "").strip(), (request["context"] or "").strip() or None, request["task"])
    return any((q.strip(), (c or "").strip() or None, t) == asked for q, c, t in _examples(lm.name).values())


def _run_analysis(lm, request: dict, recompute: bool = False) -> None:
    """Analyse ``request``: from the shared cache unless ``recompute``, else through the model's queue
    (:mod:`studio.waiting`), whose ticket this session keeps until the result comes (a rerun keeps waiting)."""
    probe, info, problem = session.active_probe(lm, task=request["task"])
    cache = session.analysis_cache()
    key, job_key, compute = _analysis_job(lm, request, probe, info, problem, shared=_is_example(lm, request),
                                          recompute=recompute)
    entry = None if recompute else cache.get(key)
    if entry is None and not recompute:
        shipped = _shipped(lm, request, info if probe is not None else None)
        entry = cache.put(key, shipped, shipped.computed_at) if shipped is not None else None
        if shipped is not None and entry is None:  # the cache is off or full: shown all the same
            _keep_result(shipped.as_cached(shipped.computed_at), request)
            return
    if entry is not None:  # computed before (an example, precomputed or asked by anyone; or this user's own)
        _keep_result(entry.value.as_cached(entry.computed_at), request)
        return
    try:
        from studio.memory import home_memory_mb

        waiting.submit("home", job_key, compute, request=request,
                       on_result=lambda analysis: cache.put(key, analysis, analysis.computed_at),
                       memory_mb=home_memory_mb(lm, request, session.limits()),  # GRADE_QUEUE_MEMORY_MB counts it
                       kind=waiting.home_kind(lm, request))
    except Exception as exc:  # the queue is full, or this user already waits: one line in the page
        st.session_state.pop(session.ANALYSIS, None)
        st.session_state["analysis_error"] = exc
        return
    st.session_state.pop("analysis_error", None)
    _wait_for_analysis()


#: Served, ``1`` computes Home's examples in the background (``make serve`` sets it; off unless set).
PRECOMPUTE_VARIABLE = "GRADE_PRECOMPUTE_EXAMPLES"


def _shipped(lm, request: dict, probe_info) -> workflows.QuestionAnalysis | None:
    """The result shipped with the app for exactly ``request`` with this probe and the shipped detectors
    (:func:`studio.analysis_cache.find_shipped`), else None."""
    from grade.verdict.detectors import detectors_for
    from studio.analysis_cache import find_shipped, home_request, shipped_enabled
    from studio.resources import DETECTORS_DIR

    if not shipped_enabled():  # before hashing anything
        return None
    return find_shipped(home_request(
        lm, _keyed(request)["question"], request["context"], request["task"], request["max_new_tokens"],
        session.limits().answer_tokens, probe_info.path if probe_info is not None else None,
        detectors_for(lm.name, DETECTORS_DIR)))


def _example_jobs(lm):
    """(request, cache key, job key, compute, probe info or None) of each of Home's examples for the loaded
    model, with the shipped probe for its task and the default answer length."""
    probes = list_probes()
    for question, context, task in _examples(lm.name).values():
        request = {"question": question, "context": context, "task": task, "choices": None,
                   "max_new_tokens": workflows.home_answer_tokens(task, session.limits())}
        info = default_probe(lm.name, probes, task=task)
        try:
            probe, problem = (session.cached_probe(info.path), None) if info is not None else (None, "no probe")
        except Exception as exc:
            probe, problem = None, session.user_message(exc)
        key, job_key, compute = _analysis_job(lm, request, probe, info, problem, shared=True)
        yield request, key, job_key, compute, info if probe is not None else None


def _load_shipped_examples(lm) -> None:
    """Put the results shipped for Home's examples (those computed for exactly this model, probe, detectors
    and settings) into the shared cache when the model is loaded (each run skips those already cached): an
    example then answers at once."""
    cache = session.analysis_cache()
    for request, key, _, _, info in _example_jobs(lm):
        if cache.peek(key) is None and (shipped := _shipped(lm, request, info)) is not None:
            cache.put(key, shipped, shipped.computed_at)


def _precompute_examples(lm) -> None:
    """Served: queue Home's examples for the loaded model (with the shipped probe and the default answer
    length) as background work, run only while no user's analysis waits, so that an example answers at once
    from the cache. Each is queued once: skipped while cached (shipped, or computed) or already queued."""
    cache = session.analysis_cache()
    if (not session.config().served or cache.max_entries == 0
            or os.environ.get(PRECOMPUTE_VARIABLE, "0").strip().lower() not in ("1", "true", "yes", "on")):
        return
    queue = session.analysis_queue()
    for _, key, job_key, compute, _ in _example_jobs(lm):
        if cache.peek(key) is None:
            queue.submit_background(st.session_state["model_spec"].label, job_key, compute,
                                    on_result=lambda analysis, key=key: cache.put(key, analysis,
                                                                                  analysis.computed_at))


def _keep_result(analysis, request: dict) -> None:
    waiting.keep_home_analysis(analysis, request)


def _wait_for_analysis() -> None:
    """This session's place in the queue, updated every second, with Cancel (:func:`studio.waiting.wait`),
    until its analysis is done; then keep the result. A rerun (another widget, another page and back) waits again."""
    held = waiting.pending("home")
    state, value = waiting.wait(held, "home")
    if state == "failed":
        st.session_state.pop(session.ANALYSIS, None)
        st.session_state["analysis_error"] = value
    elif state == "done":
        _keep_result(value, held.request)


def _evidence(analysis: workflows.QuestionAnalysis):
    """The one dataset every card on the screen cites (:func:`studio.summaries.screen_evidence`)."""
    result = analysis.result
    return screen_evidence(result.model, result.loss, task=result.task, has_context=bool(result.context),
                           verdict=analysis.verdict, detectors=analysis.detector_verdicts)


def _show_evidence_line(evidence) -> None:
    with st.container(key="questions_like_this"):
        st.markdown(f"**Questions like this:** {evidence.line}")


def _show_verdict(analysis: workflows.QuestionAnalysis, evidence) -> None:
    with st.container(border=True, key="verdict"):
        st.markdown("**Probe verdict**")
        verdict = analysis.verdict
        if verdict is None:
            st.info(f"No verdict: {session.user_text(analysis.probe_problem or 'no probe loaded.')}")
            return
        cited = evidence.probe
        withheld = analysis.probe_withheld
        if verdict.in_range is False:
            with st.container(key="out_of_range"):
                st.warning("**Outside what the probe learned from.** " + verdict.out_of_range_text(),
                           icon=":material/help:")
        elif withheld is not None:
            with st.container(key="verdict_withheld"):
                st.warning(f"**No meaningful verdict**: {withheld}", icon=":material/content_cut:")
        else:
            st.metric("Probability that the model can answer", f"{verdict.probability:.0%}",
                      help="Output of the probe on this question's per-layer GRADE features")
            st.html(tokens.probability_bar_html(verdict.probability))
            st.markdown(cited.verdict_sentence(verdict.answerable))
            if analysis.cut_off:
                st.caption("This probe reads the question only (the entropy after the prompt), not the cut answer.")
        st.markdown(f"Probe **{verdict.probe_name}** · loss `{verdict.loss}` · measured on questions like this: "
                    f"{cited.text}")


def _show_detectors(analysis: workflows.QuestionAnalysis, evidence) -> None:
    with st.container(border=True, key="detectors"):
        st.markdown("**Other detectors, same question**")
        if not analysis.detector_verdicts:
            st.info(f"No other detectors: {session.user_text(analysis.detectors_problem or 'none loaded.')}")
            return
        for v in analysis.detector_verdicts:
            cited = evidence.detectors.get(v.name)
            if v.probability is None:
                st.markdown(f"**{v.title}**: no verdict ({session.user_text(v.problem or '')})")
                continue
            withheld = analysis.withheld(v)
            if withheld is not None:
                st.markdown(f"**{v.title}**: no meaningful verdict: {withheld}")
                continue
            st.metric(v.title, f"{v.probability:.0%}", help=v.summary)
            st.html(tokens.probability_bar_html(v.probability))
            st.markdown(f"{cited.verdict_sentence(v.answerable)}  \nMeasured on questions like this: {cited.text}")
        if analysis.detectors_problem:
            st.caption(session.user_text(analysis.detectors_problem))


def _show_answer(analysis: workflows.QuestionAnalysis) -> None:
    """The model's answer, its cut-off mark (with a button that analyses again with a longer answer) and, with a
    gold answer typed, whether the task's grader marks it right."""
    with st.container(border=True, key="answer"):
        st.markdown("**The model's answer** (greedy)")
        if analysis.choices:
            st.caption("  \n".join(f"{letter}. {c}" for letter, c in zip(workflows.CHOICE_LETTERS, analysis.choices)))
        with st.container(key="answer_text"):
            st.markdown(session.plain(analysis.answer) if analysis.answer.strip() else "_(empty answer)_")
        if analysis.cut_off:
            raised = workflows.raised_answer_tokens(analysis.max_new_tokens or 0, session.limits())
            with st.container(key="cut_off"):
                st.warning(f"**Cut off at {analysis.max_new_tokens} tokens**: the model had not finished its answer. "
                           "Verdicts that read the answer are withheld, and a gold answer can only mark the "
                           "unfinished text." + ("" if raised else f" This studio generates at most "
                                                 f"{session.limits().answer_tokens} tokens."),
                           icon=":material/content_cut:")
            if raised:
                st.button(f"Analyse again with {raised} tokens", key="raise_limit", icon=":material/unfold_more:",
                          on_click=_raise_limit, disabled=waiting.pending("home") is not None)
        gold = str(st.session_state.get("gold") or "").strip()
        correct = analysis.correct(gold)
        if correct is not None:
            grader = REGISTRY[analysis.result.task].display_name
            with st.container(key="gold_mark"):
                text = (f"**{'Right' if correct else 'Wrong'}** against the gold answer “{gold}” "
                        f"(the grader of {grader})" + (": on an answer that was cut off" if analysis.cut_off else ""))
                (st.success if correct else st.error)(text, icon=":material/check_circle:" if correct
                                                      else ":material/cancel:")


def _show_cached_hint(analysis: workflows.QuestionAnalysis) -> None:
    if not analysis.from_cache:
        return
    row = st.container(horizontal=True, vertical_alignment="center", key="cached_hint")
    if analysis.origin is not None:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(analysis.computed_at))
        row.caption(f"Precomputed result, shipped with the app: computed on {analysis.origin.get('computed_on')} "
                    f"on {when} (torch {analysis.origin.get('torch')}) for exactly this model, question, document, "
                    "settings, probe and detectors, so nothing was computed now.")
    else:
        when = time.strftime("%H:%M", time.localtime(analysis.computed_at))
        row.caption(f"Cached result (computed at {when}): the same model, question, document, settings and probe "
                    "were analysed before, so nothing was recomputed.")
    row.button("Recompute", key="recompute", icon=":material/refresh:",
               help="Analyse this question again and replace the cached result")


PINNED = session.PINNED


def _verdict_text(analysis: workflows.QuestionAnalysis) -> str:
    verdict = analysis.verdict
    if verdict is None:
        return "no verdict"
    if verdict.in_range is False:
        return "no verdict (outside what the probe learned from)"
    if analysis.probe_withheld is not None:
        return "no verdict (the answer was cut off)"
    return f"{verdict.probability:.0%} ({'can probably answer' if verdict.answerable else 'probably cannot answer'})"


def _show_comparison(pinned: workflows.QuestionAnalysis, current: workflows.QuestionAnalysis) -> None:
    """Two questions side by side: the pinned one and this one (verdicts, answers, the numbers)."""
    with st.container(border=True, key="comparison"):
        st.markdown("**Side by side** (the pinned result and this one; both layer curves are in the chart below)")
        columns = {}
        for label, a in (("pinned", pinned), ("this question", current)):
            columns[label] = {"question": a.result.question, "answer": a.answer.strip(),
                              "probe verdict": _verdict_text(a), "GRADE": f"{a.result.grade:.3f}",
                              f"loss ({a.result.loss})": f"{a.result.loss_value:.3f}",
                              **{v.title: (f"{v.probability:.0%}" if v.probability is not None else "-")
                                 for v in a.detector_verdicts}}
        # one row per quantity, one column per question: any number of detectors fits the page's width
        table = pd.DataFrame(columns).fillna("-").rename_axis("").reset_index()
        tables.show(table, room=tables.BOXED_PX)


def _show_probe_reading(lm, result) -> None:
    """The numbers the active probe reads of this question against the two classes it learned from (where the
    rank-ratio bands overlap, the inputs that separate)."""
    request = st.session_state.get("analysis_request") or {}
    probe, _, _ = session.active_probe(lm, task=request.get("task"))
    bands = bands_for(probe.metadata) if probe is not None else None
    if bands is None or bands.n_layers != result.n_layers or probe.metadata.get("loss") != result.loss:
        return  # a probe without fitted bands (a user's own): nothing to set this question against
    with st.expander("What the probe reads", expanded=True):
        x = probe_inputs(result, bands.inputs)[0]
        session.show_figure(figures.probe_inputs_figure(bands, x), "probe-inputs", key="home_probe_inputs")
        st.caption(probe_reading(bands, x) + f" Bands: {bands.source}.")


def _show_analysis(analysis: workflows.QuestionAnalysis) -> None:
    result = analysis.result
    _show_cached_hint(analysis)
    lm = session.current_model()
    reference = reference_set(session.reference_frame(), lm.name if lm else result.model, result.loss)
    if reference is not None and reference.ratios.shape[1] != result.n_layers:
        reference = None
    left, right = st.columns([3, 2], gap="large")
    with left:
        _show_answer(analysis)
        c1, c2, c3, c4 = st.columns(4)
        c1.metric("GRADE", f"{result.grade:.3f}", help="Mean over layers of the rank ratio srank(C_g) / srank(C_h). "
                  "Not a verdict on its own: the probe reads the per-layer values.")
        c2.metric(f"Loss ({result.loss})", f"{result.loss_value:.3f}",
                  help="pre: entropy of the next-token distribution after the prompt; pos: mean cross-entropy of "
                       "the answer's tokens")
        c3.metric("Tokens analysed", len(result.input_ids))
        c4.metric("Time", f"{sum(analysis.seconds.values()):.1f} s",
                  help="How long the analysis took when it was computed" + (" (this one comes from the cache)"
                                                                            if analysis.from_cache else ""))
        reading = headline_reading(result.grade, reference.ratios, reference.labels) if reference is not None else None
        st.caption(reading or "The GRADE number is the mean of the per-layer rank ratios, not a verdict: the probe "
                   "reads the per-layer values, not their mean.")
    with right:
        evidence = _evidence(analysis)
        _show_evidence_line(evidence)
        _show_verdict(analysis, evidence)
        _show_detectors(analysis, evidence)
        if analysis.disagreement:
            st.warning(analysis.disagreement, icon=":material/call_split:")

    pinned = st.session_state.get(PINNED)
    if pinned is not None and pinned.result.question == result.question and pinned.result.model == result.model:
        pinned = None  # the pinned result is this one: nothing to compare
    if pinned is not None and pinned.result.n_layers == result.n_layers:
        _show_comparison(pinned, analysis)
    bands = figures.reference_bands(reference.ratios, reference.labels) if reference is not None else None
    extra = [(f"pinned: {pinned.result.question[:40]}", pinned.result.rank_ratio)] \
        if pinned is not None and pinned.result.n_layers == result.n_layers else []
    fig = figures.rank_ratio_trend(result.rank_ratio, bands, title="Overview: rank ratio across layers", height=340,
                                   extra=extra)
    session.show_figure(fig, "rank-ratio-overview", key="home_trend")
    pin_row = st.container(horizontal=True, vertical_alignment="center", key="pin_row")
    if pin_row.button("Pin for comparison", key="pin", icon=":material/push_pin:",
                      help="Keep this result beside the next question you analyse: verdicts side by side, both layer "
                           "curves in one chart, both spectra on the Spectra page"):
        st.session_state[PINNED] = analysis
        st.rerun()
    if st.session_state.get(PINNED) is not None and pin_row.button("Unpin", key="unpin"):
        st.session_state.pop(PINNED, None)
        st.rerun()
    if bands is None:
        st.caption("No reference bands: the shipped reference set has no rows for this model and loss.")
    else:
        st.caption(f"Bands: inter-quartile range of {len(reference)} labelled reference questions "
                   f"({int(reference.labels.sum())} answerable, {int((1 - reference.labels).sum())} unanswerable).")

    _show_probe_reading(lm, result)

    table = pd.DataFrame(result.layer_table())
    with st.expander("Per-layer features"):
        st.dataframe(table, hide_index=True, width="stretch")
    downloads = st.container(horizontal=True)
    downloads.download_button("Features (CSV)", table.to_csv(index=False), file_name="grade_features.csv", mime="text/csv",
                       key="dl_csv", on_click="ignore")
    downloads.download_button("Full result (JSON)", lambda: result.to_json(), file_name="grade_result.json",
                       mime="application/json", key="dl_json", on_click="ignore")


def home() -> None:
    st.title("GRADE Studio")
    st.markdown("Does the language model know enough to answer? GRADE compares, layer by layer, the rank of the "
                "gradient a question would cause with the rank of the activations it sees; a small probe turns "
                "these **rank ratios** into the probability that the model can answer.")
    with st.expander("What you are looking at"):
        st.markdown(
            "Ask a question and press **Analyze**. The app runs the model once forward and once backward on your "
            "question (nothing is learned or changed), measures in every layer how many directions the gradient "
            "spreads over compared with the activations (the **rank ratio**), and separately lets the model answer so "
            "you can judge it yourself.\n\n"
            "- **Probe verdict**: a small classifier trained on this model's per-layer GRADE features (rank ratios; "
            "some probes read the two stable ranks and the loss instead) for questions it got right or wrong; it gives the probability that the model can answer. Its **test AUROC** says how well it "
            "separated such questions it had not seen.\n"
            "- **Other detectors**: simpler methods asked the same question, for comparison. When they disagree with "
            "the probe, the page says so.\n"
            "- **GRADE**: the mean rank ratio over layers. It is a summary, not a verdict: the caption under it says "
            "where it falls among labelled questions; the probe reads the per-layer values, not their mean.\n"
            "- **Chart**: this question's rank ratio per layer (black) over the middle half of labelled answerable "
            "(green) and unanswerable (red) questions.\n"
            "- **What the probe reads**: the numbers the probe actually takes in for this question, over the same two "
            "classes of the questions it learned from; ringed are the ones that separate the classes best on their "
            "own. Where the rank-ratio bands overlap, these show what the verdict rests on.\n"
            + explain("loss pre", "AUROC", "SAPLMA"))
    lm = session.current_model()
    if lm is None:
        session.no_model_message()
    else:
        _load_shipped_examples(lm)
        _precompute_examples(lm)

    examples = _examples(lm.name if lm else None)
    _forget_stale_example(examples)
    st.selectbox("Try an example", [""] + list(examples), key="example", **session.KEEP, on_change=_use_example,
                 format_func=lambda s: s or OWN_QUESTION)
    st.text_area("Question", key="question", **session.KEEP, height=90, placeholder="Who wrote 'Pride and Prejudice'?")
    with st.expander("Document (optional): the model may use it to answer",
                     expanded=bool(st.session_state.get("context"))):
        st.text_area("Context / document", key="context", **session.KEEP, height=140, label_visibility="collapsed",
                     placeholder="Paste a passage the model may use to answer ...")
    st.session_state.setdefault("task", "qa")
    st.session_state.setdefault("max_new_tokens", workflows.home_answer_tokens(st.session_state["task"], session.limits()))
    if REGISTRY[st.session_state["task"]].choices:
        st.text_area("Choices: one option per line (the prompt letters them A, B, C, D, as MMLU's questions)",
                     key="choices", **session.KEEP, height=120, placeholder="Mars\nJupiter\nVenus\nEarth")
    col_task, col_tokens, col_gold, col_button = st.columns([2, 1, 1, 1], vertical_alignment="bottom")
    col_task.selectbox("Question type (prompt style)", workflows.HOME_TASKS, format_func=lambda t: REGISTRY[t].display_name,
                       key="task", on_change=_task_changed, **session.KEEP)
    # No max_value: a widget would silently clamp a larger number; the check says what the cap is.
    col_tokens.number_input("Answer length (tokens)", min_value=1, step=8, key="max_new_tokens", **session.KEEP,
                            help="Each question type starts at the length its labelled questions were answered with; "
                                 f"at most {session.limits().answer_tokens} tokens")
    col_gold.text_input("Gold answer (optional)", key="gold", **session.KEEP,
                        placeholder="B" if REGISTRY[st.session_state["task"]].choices else "Paris",
                        help="Marks the model's answer right or wrong with the question type's own grader (for "
                             "multiple choice: the letter). Several accepted answers: separate them with |")
    held = waiting.pending("home") is not None  # one analysis per user in the queue
    clicked = col_button.button("Analyze", key="analyze", type="primary", disabled=lm is None or held,
                                width="stretch")

    # The "Recompute" button under a cached result: its click reruns the script with it set.
    recompute = bool(st.session_state.get("recompute")) and st.session_state.get("analysis_request") is not None
    rerun = st.session_state.pop("rerun_request", None)  # "Analyse again with N tokens" under a cut-off answer
    waiting.cancelled_notice("home")
    waiting.elsewhere("home")
    if lm is not None and (clicked or recompute or rerun) and not held:
        try:
            request = _request() if clicked else rerun or st.session_state["analysis_request"]
        except InputError as exc:  # the choices box: one line in the page
            st.session_state.pop(session.ANALYSIS, None)
            st.session_state["analysis_error"] = exc
        else:
            _run_analysis(lm, request, recompute=recompute and not clicked and not rerun)
    elif held:  # still waiting after a rerun: show the queue again
        _wait_for_analysis()
    if st.session_state.get("analysis_error") is not None:
        session.show_error(st.session_state["analysis_error"], "Analysis failed")
    analysis = st.session_state.get(session.ANALYSIS)
    if analysis is not None:
        _show_analysis(analysis)
    elif lm is not None and st.session_state.get("analysis_error") is None:
        st.info("Type a question (or pick an example) and press **Analyze**.")


PAGES = [
    st.Page(home, title="Home", icon=":material/home:", default=True),
    st.Page("pages/spectra.py", title="Spectra", icon=":material/ssid_chart:"),
    st.Page("pages/reasoning_trace.py", title="Reasoning trace", icon=":material/functions:"),
    st.Page("pages/projections.py", title="Projections", icon=":material/scatter_plot:"),
    st.Page("pages/probes.py", title="Probes", icon=":material/model_training:"),
    st.Page("pages/benchmarks.py", title="Benchmarks", icon=":material/leaderboard:"),
]

session.apply_served_options()
session.session_ends()  # a closed tab's uploads and queued analysis are let go once it cannot come back
if not session.config().served:
    # Served, the Traces page is not offered: it opens stores and samples files by server path and runs
    # whole-store analyses in the background, and has no per-user caps yet.
    PAGES.insert(3, st.Page("pages/traces.py", title="Traces", icon=":material/fact_check:"))
# The sidebar lists the pages by their titles, drawn here. Streamlit's own sidebar list is off
# (.streamlit/config.toml: client.showSidebarNavigation = false): with a pages/ folder beside app.py it first lists
# the folder's raw file names ("app, benchmarks, probes, ...") until this script reaches st.navigation.
page = st.navigation(PAGES, position="hidden")
with st.sidebar.container(key="page_links"):
    for listed in PAGES:
        st.page_link(listed)
session.load_current_model()
loading.llama_build_notice()
page.run()
