"""Probes: pick a shipped probe, load a probe file, or train and save a new one."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from grade.common.display import column_title, dataset_title
from grade.common.errors import GradeError, InputError
from grade.verdict.measured import MIN_PER_CLASS
from grade.verdict.probe import INPUT_COLUMNS, INPUTS, SHIPPED_PROBES_DIR
from studio import benchmark_text, figures, session, tables, waiting
from studio import served as served_mode
from studio import uploads as uploads_mod
from studio.summaries import explain, small_sample_warning
from studio.resources import (
    PROBES_DIR,
    REFERENCE_FEATURES,
    list_probes,
    read_probe_info,
)

session.require_router()  # a direct URL on a fresh server goes through app.py too

USER_PROBES = session.own_probe_folder()
LIMITS = session.limits()
SERVED = session.config().served

st.title("Probes")
st.markdown("A probe maps the per-layer GRADE features of a question to the probability that the model can answer "
            "it. It only fits the model, loss and stable-rank formula it was trained on; the app checks this.")
with st.expander("What you are looking at"):
    st.markdown(
        "A **probe** is a small classifier. It was shown many questions whose answers the model got right "
        "(*answerable*) or wrong (*unanswerable*), together with their per-layer GRADE features (the rank ratios; "
        "some probes read the two stable ranks and the loss instead), and learned to tell the two apart. It is "
        "then scored on **test** questions it never saw. The **active probe** (the box below) is the one Home asks; "
        "the list shows every probe on disk, the active one first, with its ROC curve: how many answerable "
        "questions it accepts (up) for each share of unanswerable ones it lets through (right).\n\n"
        + explain("rank ratio", "loss pre", "AUROC"))

_MARKDOWN = re.compile(r"([\\`*_{}\[\]<>#+!|~$])")


def _shown(text) -> str:
    """Text from a file (a probe's name, model, a message quoting it) for st.markdown, on one line: every
    character that can open a code span, emphasis, a link, an image, HTML or LaTeX escaped, so that it
    shows as typed."""
    return _MARKDOWN.sub(r"\\\1", " ".join(str(text).split()))


def _error(exc: BaseException, what: str = "") -> None:
    """:func:`studio.session.show_error`, with a user-caused message escaped (it may quote a file)."""
    if isinstance(exc, GradeError):
        st.error((f"{what}: " if what else "") + _shown(session.user_message(exc)))
    else:
        session.show_error(exc, what)


def _shipped(info) -> bool:
    """A probe shipped with the package: its quality is what the cards cite, not its own training run's test split."""
    return Path(info.path).resolve().parent == Path(SHIPPED_PROBES_DIR).resolve()


def _quality_rows(model: str, loss: str) -> pd.DataFrame:
    """The shipped probe's cited numbers, one row per kind of question: the same table, from the same file, as
    Home's verdict card and the Benchmarks page cite."""
    return benchmark_text.shipped_probe_table(model, loss)


def _show_quality(model: str, loss: str, key: str, room: float = tables.MAIN_PX) -> bool:
    """The shipped probe's cited numbers as a table; False where its model has none."""
    table = _quality_rows(model, loss)
    if table.empty:
        return False
    table, measured = benchmark_text.one_protocol(table)
    st.markdown(f"**What the verdict cards cite for the shipped GRADE_{_shown(loss)} probe** (each question scored by "
                f"the probe Home picks for its task; a number needs {MIN_PER_CLASS} questions of each class"
                + (f"; measured on {measured}" if measured else "") + "):")
    tables.show(table, key=key, room=room)
    return True


lm = session.current_model()
with st.container(border=True, key="active_probe"):
    try:
        probe, info, problem = session.active_probe(lm)
        if probe is not None and info is not None:
            chosen = "chosen by you" if st.session_state.get(session.PROBE_PATH) else "default for this model"
            if _shipped(info):
                st.markdown(f"**Active probe:** {_shown(info.name)} ({chosen}) · model {_shown(info.model)} · "
                            f"loss {_shown(info.loss)} · {_shown(info.kind)}")
                if not _show_quality(info.model, info.loss, "active_quality", room=tables.BOXED_PX):
                    st.info("No measured numbers ship for this model: its verdict cards cite none.")
            else:
                auroc = f"{info.auroc:.3f}" if info.auroc is not None else "not recorded"
                st.markdown(f"**Active probe:** {_shown(info.name)} ({chosen}) · model {_shown(info.model)} · "
                            f"loss {_shown(info.loss)} · {_shown(info.kind)} · its own test split: test AUROC **{auroc}**")
                small = small_sample_warning([(info.name, info.test_metrics.get("n"), info.test_metrics.get("positives"))])
                if small and info.auroc is not None:
                    st.warning(_shown(small), icon=":material/warning:")
            if lm is not None:
                try:
                    probe.check_compatible(lm)
                except GradeError as exc:
                    st.warning(f"This probe does not fit the loaded model: {_shown(session.user_message(exc))}")
        else:
            st.info(f"No probe loaded: {_shown(problem)}")
    except Exception as exc:  # whatever a chosen probe does, the way back to the default stays on the page
        _error(exc, "The chosen probe cannot be shown")
    if st.session_state.get(session.PROBE_PATH) and st.button("Back to the default probe", key="probe_reset"):
        st.session_state.pop(session.PROBE_PATH, None)
        st.rerun()


def _use(path: Path) -> None:
    try:
        session.cached_probe(path)
    except GradeError as exc:
        _error(exc, "Probe not loaded")
        return
    st.session_state[session.PROBE_PATH] = str(path)
    st.session_state.pop(session.ANALYSIS, None)  # its verdict came from the previous probe
    st.rerun()


def _probe_table(probes) -> pd.DataFrame:
    """Every probe; a shipped one's own training-run test numbers are left out (its cited numbers are below)."""
    return pd.DataFrame([{
        "name": p.name, "model": p.model, "loss": p.loss, "kind": p.kind,
        "layers": p.metadata.get("n_layers"),
        "numbers": "held out before training (below)" if _shipped(p) else "its own test split",
        "test accuracy": None if _shipped(p) else p.accuracy, "test AUROC": None if _shipped(p) else p.auroc,
        "test rows": None if _shipped(p) else p.test_metrics.get("n"),
        "train (answerable / unanswerable)": "{answerable} / {unanswerable}".format(**p.metadata["train_balance"])
        if isinstance(p.metadata.get("train_balance"), dict) else None,
        "file": session.shown_path(p.path),
    } for p in probes])


def _majority_accuracy(metrics: dict) -> float | None:
    """The accuracy of always answering the larger class: what an accuracy must beat."""
    n, positives = metrics.get("n"), metrics.get("positives")
    return max(positives, n - positives) / n if n and positives is not None else None


def _majority(metrics: dict) -> str:
    baseline = _majority_accuracy(metrics)
    return f" (always guessing the larger class: {baseline:.3f})" if baseline is not None else ""


def _probe_summary(probe) -> str:
    """Where the probe's numbers come from, from its metadata."""
    meta = probe.metadata
    test = probe.test_metrics
    lines = [f"**{_shown(probe.name)}**", "",
             f"- model {_shown(probe.model)}, loss {_shown(probe.loss)}, stable rank {_shown(meta.get('srank', '?'))}, "
             f"{_shown(probe.kind)} probe",
             f"- test split: {test.get('n', '?')} questions, {test.get('positives', '?')} answerable"]
    if probe.accuracy is not None:
        lines.append(f"- test accuracy {probe.accuracy:.3f}" + _majority(test) +
                     (f", AUROC {probe.auroc:.3f}" if probe.auroc is not None else ""))
    datasets = (meta.get("training_data") or {}).get("datasets") or {}
    if datasets:
        lines.append("- trained on " + ", ".join(f"{_shown(name)} ({_shown(d.get('n', '?'))})"
                                                 for name, d in datasets.items()))
    lines += ["", "ROC on the probe's own held-out test split, as stored in its metadata."]
    return "\n".join(lines)


def _roc_from_metrics(name: str, metrics: dict):
    roc = metrics.get("roc") if isinstance(metrics, dict) else None
    if not roc or metrics.get("auroc") is None:
        return None
    return name, np.asarray(roc["fpr"]), np.asarray(roc["tpr"]), float(metrics["auroc"])


def _check_uploaded_metadata(data: bytes, name: str) -> None:
    """An uploaded probe's JSON: UTF-8, JSON, a probe description whose every field has its type."""
    import json

    from grade.common.errors import ProbeError
    from grade.common.io import decode_text
    from grade.verdict.probe import check_probe_metadata

    shown = served_mode.safe_display_name(name)
    try:
        meta = json.loads(decode_text(data, shown))
    except (ValueError, RecursionError) as exc:
        raise ProbeError(f"{shown} is not valid JSON ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(meta, dict) or meta.get("format") != "grade-probe":
        raise ProbeError(f"{shown} is not a GRADE probe description")
    check_probe_metadata(meta, shown)


shipped_tab, load_tab, train_tab = st.tabs(["Shipped and saved probes", "Load a probe file", "Train a new probe"])

with shipped_tab:
    probes = list_probes(PROBES_DIR) + list_probes(USER_PROBES)
    if not probes:
        st.info(f"No probes found in {session.shown_path(PROBES_DIR)} or {session.shown_path(USER_PROBES)}.")
    else:
        # The active probe first (added when it was loaded from elsewhere), so that the table, the list and
        # the ROC below start on the probe Home uses.
        active = str(info.path) if info is not None else None
        if info is not None and probe is not None and active not in {str(p.path) for p in probes}:
            probes.insert(0, info)
        probes.sort(key=lambda p: str(p.path) != active)
        tables.show(_probe_table(probes).dropna(axis=1, how="all"),  # no empty column of shipped probes' numbers
                    column_config={"test accuracy": st.column_config.NumberColumn(format="%.3f"),
                                   "test AUROC": st.column_config.NumberColumn(format="%.3f")})
        labels = {str(p.path): f"{p.name} ({p.model}, {p.loss})" + (" · active" if str(p.path) == active else "")
                  for p in probes}
        if st.session_state.get("_probe_pick_active") != active or st.session_state.get("probe_pick") not in labels:
            st.session_state["_probe_pick_active"] = active
            st.session_state["probe_pick"] = next(iter(labels))
        pick = st.selectbox("Probe", list(labels), format_func=labels.get, key="probe_pick")
        picked = next(p for p in probes if str(p.path) == pick)
        if st.button("Use this probe", key="use_probe", type="primary"):
            _use(picked.path)
        curve = None if _shipped(picked) else _roc_from_metrics(picked.name, picked.test_metrics)
        if _shipped(picked) and str(picked.path) != active:  # the active probe's numbers are in its box above
            _show_quality(picked.model, picked.loss, "picked_quality")
        if curve is not None:
            left, right = st.columns([3, 2], gap="large")
            with left:
                session.show_figure(figures.roc_figure([curve]), f"roc-{picked.name}", key="roc_shipped")
            right.markdown(_probe_summary(picked))
            small = small_sample_warning([(picked.name, picked.test_metrics.get("n"), picked.test_metrics.get("positives"))])
            if small:
                right.warning(_shown(small), icon=":material/warning:")

with load_tab:
    if SERVED:  # a path would read the server's files, and its error would say whether they exist
        st.markdown("Upload both files of a probe (`name.safetensors` and `name.json`).")
    else:
        st.markdown("Upload both files of a probe (`name.safetensors` and `name.json`), or give a path on this machine.")
    # Counts and sizes are checked as the files arrive, not at "Load probe": a refused upload is dropped at once (the
    # uploader gets a new key, so Streamlit lets go of its files) and its message stays until the next upload.
    generation = st.session_state.get("probe_upload_generation", 0)
    upload_key = "probe_upload" if generation == 0 else f"probe_upload_{generation}"
    uploads = st.file_uploader("Probe files", type=["safetensors", "json"], accept_multiple_files=True,
                               key=upload_key, max_upload_size=LIMITS.upload_mb)
    if uploads:
        st.session_state.pop("probe_upload_refused", None)
        try:
            uploads_mod.check_uploads(uploads, LIMITS, probe_pair=True)  # a refused upload's bytes go at once
        except GradeError as exc:
            st.session_state["probe_upload_refused"] = session.user_message(exc)
            st.session_state["probe_upload_generation"] = generation + 1
            uploads = None
            st.rerun()
    if st.session_state.get("probe_upload_refused"):
        st.error("Upload refused: " + _shown(st.session_state["probe_upload_refused"]))
    path_text = "" if SERVED else st.text_input("... or a path", key="probe_path_text",
                                                placeholder="runs/probes/name.safetensors")
    if st.button("Load probe", key="load_probe"):
        try:
            if uploads:
                served_mode.check_probe_upload_count(len(uploads))
                weights = [f for f in uploads if f.name.endswith(".safetensors")]
                metas = [f for f in uploads if f.name.endswith(".json")]
                if len(weights) != 1 or len(metas) != 1:
                    raise InputError("upload exactly one .safetensors file and one .json file")
                for upload in (weights[0], metas[0]):
                    served_mode.check_upload(upload.name, upload.size, LIMITS)
                # checked, stored and loaded; a pair that does not load leaves nothing in the user's folder
                path = uploads_mod.keep_probe_upload(weights[0], metas[0], session.upload_folder(), quota=session.quota(),
                                                     check=_check_uploaded_metadata, load=session.cached_probe)
                session.after_user_write()
            elif path_text.strip():
                path = Path(path_text.strip()).expanduser()
                path = path if path.suffix == ".safetensors" else path.with_suffix(".safetensors")
            else:
                raise InputError("choose probe files to upload or type a path")
            _use(path)
        except GradeError as exc:
            _error(exc, "Probe not loaded")


# ------------------------------------------------------------------------------------------ training


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "probe"


@st.cache_data(show_spinner=False, max_entries=2)
def _uploaded_frame(data: bytes) -> pd.DataFrame:
    return pd.read_parquet(io.BytesIO(data))


def _capped(frame: pd.DataFrame | None) -> pd.DataFrame | None:
    """At most ``train_rows`` rows (seeded sample), saying so when the cap bites."""
    if frame is None or len(frame) <= LIMITS.train_rows:
        return frame
    st.warning(f"The feature set has {len(frame):,} rows; this studio trains on at most {LIMITS.train_rows:,} "
               "(a seeded random sample of them).")
    return frame.sample(n=LIMITS.train_rows, random_state=0)


def _feature_source() -> pd.DataFrame | None:
    source = st.radio("Labelled features", ["Shipped reference set", "Upload a feature file (.parquet)",
                                            "Extract from labelled questions (.jsonl)"], key="train_source",
                      horizontal=True)
    if source == "Shipped reference set":
        frame = session.reference_frame()
        if frame is None:
            st.info(f"The reference set {REFERENCE_FEATURES.name} is not there; upload features instead.")
        return frame
    if source.startswith("Upload"):
        upload = st.file_uploader("Feature file from `python -m grade extract`", type=["parquet"], key="train_upload",
                                  max_upload_size=LIMITS.upload_mb)
        if upload is None:
            return None
        name = served_mode.safe_display_name(upload.name)
        try:
            from grade.batch.features import TRAINING_COLUMNS

            # size, then rows, decoded size and columns from the Parquet metadata: a refused file is never decoded
            # or cached, and its bytes are released at once
            uploads_mod.check_feature_upload(upload, LIMITS, TRAINING_COLUMNS)
            frame = _uploaded_frame(upload.getvalue())
        except GradeError as exc:
            _error(exc)
            return None
        except Exception as exc:  # a corrupt or foreign file: pyarrow raises many types
            st.error(f"Could not read {name} as Parquet: {session.user_text(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}")
            return None
        try:
            from grade.batch.features import check_feature_frame

            check_feature_frame(frame, name)
        except GradeError as exc:
            _error(exc)
            return None
        return _capped(frame)
    upload = st.file_uploader("Labelled questions from `python -m grade label` (JSONL: id, question, label, ...)",
                              type=["jsonl"], key="train_jsonl", max_upload_size=LIMITS.upload_mb)
    if upload is None:
        return None
    try:
        uploads_mod.check_uploads([upload], LIMITS)
    except GradeError as exc:
        _error(exc)
        return None
    if lm is None:
        session.no_model_message()
        return None
    loss = st.radio("Loss", ["pre", "pos"], horizontal=True, key="train_loss",
                    help="pos scores the row's response (or its most frequent sample); pre needs no answer")
    if st.button("Extract features", key="extract", disabled=waiting.pending("extract") is not None):
        import hashlib
        import tempfile

        from grade.gradients.memory import analysis_memory_bytes
        from grade.batch.features import features_of_rows, read_labelled
        from grade.gradients.losses import split_steps

        # the file is read under the upload's own (safe) name in a private folder: every message that names the
        # file names the user's file, never a server path or a temporary name
        folder = tempfile.mkdtemp(prefix="grade-upload-")
        shown_name = served_mode.safe_display_name(upload.name)
        with open(Path(folder) / (shown_name if shown_name.strip(".") else "upload.jsonl"), "wb") as handle:
            handle.write(upload.getvalue())
        try:
            bad: list[str] = []
            rows = read_labelled(handle.name, skipped=bad)
            if bad:
                st.warning(f"Skipped {len(bad)} bad row(s); the first: "
                           + _shown(session.user_text(bad[0].replace(handle.name,
                                                                     served_mode.safe_display_name(upload.name)))))
            if len(rows) > LIMITS.extract_rows:
                st.warning(f"The file has {len(rows):,} labelled rows; this studio extracts the first "
                           f"{LIMITS.extract_rows:,}. Extract more with `python -m grade extract`.")
                rows = rows[: LIMITS.extract_rows]
            within, over = [], []  # the caps of every analysing page, row by row, before any is analysed
            for row in rows:
                try:
                    served_mode.check_labelled_row(row, lm.tokenizer, loss, LIMITS)
                    within.append(row)
                except GradeError as exc:
                    over.append(f"{row['dataset']}/{row['id']}: {exc}")
            if over:
                st.warning(f"Skipped {len(over)} row(s) beyond this studio's limits; the first: "
                           + _shown(session.user_text(over[0])))
            rows = within
            if not rows:
                raise InputError("no row of the file is within this studio's limits")

            def compute(progress, rows=rows, loss=loss):
                # one row at a time: a cancel stops at the next row (grade.analyze checks first)
                return features_of_rows(lm, rows, loss=loss, callback=lambda done, total, rid: progress(
                    f"Extracting features: {done}/{total} rows"))

            # The queue counts the job as its longest row (rows are analysed one after another).
            largest = max(analysis_memory_bytes(
                lm, len(lm.tokenizer(f"{r['question']} {r.get('context') or ''} {r.get('response') or ''}")["input_ids"])
                + 64, len(lm.tokenizer(r.get("response") or "")["input_ids"]),
                len(split_steps(r.get("response") or "")) if loss == "pos" else 0, LIMITS.step_memory_mb) for r in rows)
            # an upload is this user's: never joined with another user's job
            job_key = ("extract", session.user_key(), hashlib.sha256(upload.getvalue()).hexdigest(), loss,
                       st.session_state["model_spec"].label, LIMITS)
            waiting.submit("extract", job_key, compute, request={"model": lm.name}, memory_mb=largest / 2**20,
                           kind="extract")
        except GradeError as exc:
            _error(GradeError(str(exc).replace(handle.name, served_mode.safe_display_name(upload.name))),
                   "Extraction failed")
        finally:
            Path(handle.name).unlink(missing_ok=True)
            Path(folder).rmdir()
    waiting.cancelled_notice("extract")
    waiting.elsewhere("extract")
    held = waiting.pending("extract")
    if held is not None:  # this click's job, or one still queued when the page was left
        state, value = waiting.wait(held, "extract")
        if state == "failed":
            _error(value, "Extraction failed")
        elif state == "done":
            frame, skipped = value
            st.session_state["extracted"] = frame
            st.success(f"Extracted {len(frame)} rows with {held.request['model']}"
                       + (f"; {len(skipped)} skipped" if skipped else ""))
    return _capped(st.session_state.get("extracted"))


with train_tab:
    frame = _feature_source()
    if frame is not None and len(frame):
        combos = frame.groupby(["model", "loss", "srank"]).size().reset_index(name="rows")
        labels = [f"{m} · {l} · {s} ({n} rows)" for m, l, s, n in combos.itertuples(index=False)]
        combo = st.selectbox("Model, loss and stable rank", range(len(labels)), format_func=labels.__getitem__,
                             key="train_combo")
        model, loss, srank = combos.iloc[combo][["model", "loss", "srank"]]
        rows = frame[(frame["model"] == model) & (frame["loss"] == loss) & (frame["srank"] == srank)]
        datasets = sorted(rows["dataset"].unique())
        chosen = st.multiselect("Datasets", datasets, default=datasets, key="train_datasets")
        rows = rows[rows["dataset"].isin(chosen)]
        c1, c2, c3, c4 = st.columns(4)
        kind = c1.radio("Probe", ["mlp", "logreg"], key="train_kind", horizontal=True,
                        help="mlp: the paper's probe; logreg: standardised logistic regression")
        # the shipped reference set keeps rank ratios only; feature files from `grade extract` have the rest
        has_sranks = set(INPUT_COLUMNS["sranks_loss"]) <= set(rows.columns)
        inputs = c2.radio("Inputs", list(INPUTS), key="train_inputs", disabled=not has_sranks,
                          format_func={"rank_ratio": "rank ratios", "sranks_loss": "stable ranks + loss"}.get,
                          help="rank ratios: the paper's input; stable ranks + loss: log srank(C_h), log srank(C_g) "
                               "per layer and the loss value, which on Qwen2.5-Coder-1.5B rank short trivia far better"
                               + ("" if has_sranks else ". These features hold rank ratios only: use a feature file "
                                  "from `python -m grade extract` for the other inputs."))
        if not has_sranks:
            inputs = "rank_ratio"
        seed = c3.number_input("Seed", 0, 10_000, 42, key="train_seed")
        c4.metric("Rows (answerable / unanswerable)", f"{int(rows['label'].sum())} / {int((1 - rows['label']).sum())}")
        if st.button("Train", key="train_probe", type="primary", disabled=rows.empty):
            from grade.verdict.probe import train_from_features

            bar = st.progress(0.0, text="Training ...")

            def on_epoch(epoch, total, metrics):
                auroc = metrics.get("val_auroc")
                bar.progress(epoch / total, text=f"Epoch {epoch}/{total}" + (f" · validation AUROC {auroc:.3f}" if auroc is not None else ""))

            try:
                trained, report = train_from_features(rows, kind=kind, seed=int(seed), callback=on_epoch,
                                                      sources=["app"], inputs=inputs)
                st.session_state["trained"] = (trained, report)
            except GradeError as exc:
                session.show_error(exc, "Training failed")
            bar.empty()

    trained_state = st.session_state.get("trained")
    if trained_state is not None:
        trained, report = trained_state
        test = report["test"]
        st.markdown(f"**Trained** a {_shown(trained.kind)} probe for {_shown(trained.metadata.get('model'))} "
                    f"(loss {_shown(trained.metadata.get('loss'))}).")
        m1, m2, m3 = st.columns(3)
        baseline = _majority_accuracy(test)
        m1.metric("Test accuracy", f"{test['accuracy']:.3f}",
                  help=None if baseline is None else f"Always guessing the larger class scores {baseline:.3f}")
        m2.metric("Test AUROC", "n/a" if test["auroc"] is None else f"{test['auroc']:.3f}")
        m3.metric("Test rows (answerable)", f"{test['n']} ({test['positives']})")
        small = small_sample_warning([("the new probe's test split", test.get("n"), test.get("positives"))]
                                     + [(f"its {k} questions", v.get("n"), v.get("positives"))
                                        for k, v in (report.get("test_by_dataset") or {}).items()
                                        if v.get("auroc") is not None])
        if small:
            st.warning(small, icon=":material/warning:")
        curve = _roc_from_metrics("new probe", test)
        if curve is not None:
            left, _ = st.columns([3, 2])
            with left:
                session.show_figure(figures.roc_figure([curve]), "roc-new-probe", key="roc_trained")
        else:
            st.info("The test split holds one class only, so there is no ROC curve.")
        by_dataset = report.get("test_by_dataset") or {}
        if by_dataset:
            tables.show(pd.DataFrame([{"dataset": dataset_title(k),
                                       **{column_title(m): v[m] for m in ("n", "positives", "accuracy", "auroc")}}
                                      for k, v in by_dataset.items()]))
        name = st.text_input("Name", value=f"{_slug(str(trained.metadata.get('model')))}-{trained.metadata.get('loss')}-"
                             f"{trained.kind}-custom", key="save_name")
        replace = st.checkbox("Replace a probe of the same name", key="save_replace",
                              help="Only your own probes can be replaced; the shipped ones are read-only.")
        if st.button("Save probe", key="save_probe"):
            try:
                weights = served_mode.save_probe(trained, USER_PROBES, name, replace_existing=replace,
                                                 quota=session.quota())
                session.after_user_write()
                st.session_state["saved_probe"] = str(weights)
            except GradeError as exc:
                session.show_error(exc, "Probe not saved")
        saved = st.session_state.get("saved_probe")
        if saved and Path(saved).exists():
            info_saved = read_probe_info(saved)
            st.success(f"Saved {session.shown_path(saved)} and its .json (listed under 'Shipped and saved probes').")
            row = st.container(horizontal=True)
            row.download_button("Weights (.safetensors)", Path(saved).read_bytes(), file_name=Path(saved).name,
                               key="dl_probe_weights", on_click="ignore")
            row.download_button("Metadata (.json)", Path(saved).with_suffix(".json").read_bytes(),
                               file_name=Path(saved).with_suffix(".json").name, key="dl_probe_meta", on_click="ignore")
            if info_saved is not None and row.button("Use this probe", key="use_trained"):
                _use(Path(saved))
