"""Projections: t-SNE / UMAP of hidden states next to GRADE features, for a labelled question set."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st
from sklearn.model_selection import cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from grade.common.display import dataset_title
from studio import figures, session, tables
from studio.analysis_cache import embedding_request, find_embedding
from studio.projections import embed
from studio.resources import reference_set
from studio.summaries import explain, separability_summary

session.require_router()  # a direct URL on a fresh server goes through app.py too

st.title("Projections")
st.markdown(
    "The same labelled questions, embedded in 2-D twice: by the model's **hidden state** (last prompt token) and "
    "by the **GRADE features** (rank ratio per layer). Colour: did the model answer correctly; marker: was a "
    "supporting document in the prompt. The paper (its Figure 1) argues that hidden states mostly encode *what the "
    "input looks like* (with or without a document) and GRADE features *whether the model knows*; the table at the "
    "bottom measures both on these questions, and the sentence under it says what it shows here."
)
with st.expander("What you are looking at"):
    st.markdown(
        "Each dot is one labelled question. Its position comes from squeezing many numbers (a hidden state has "
        "hundreds; the GRADE features one per layer) into two with **t-SNE** or **UMAP**, which keep questions that "
        "are close in the full space close on the map. Distances across the map and the axes themselves mean "
        "little: look at which dots cluster together. If the green and red dots form separate groups, that space "
        "separates answered from failed questions; if circles and diamonds do, it separates prompts with and "
        "without a document. The table at the bottom measures the same thing without the squeezing: how often "
        "the 5 nearest questions in the full space share a question's label.\n\n" + explain("rank ratio"))

lm = session.current_model()
if lm is None:
    session.no_model_message()
    st.stop()

analysis = st.session_state.get(session.ANALYSIS)
loss = analysis.result.loss if analysis is not None else "pre"
reference = reference_set(session.reference_frame(), lm.name, loss)
if reference is None:
    st.info(f"The shipped reference set has no labelled questions for `{lm.name}` with loss `{loss}`, "
            "so there is nothing to project. Pick the default model in the sidebar.")
    st.stop()
if reference.hidden is None:
    st.info("The reference set was stored without hidden states, so only GRADE features could be shown.")
    st.stop()

c1, c2, c3 = st.columns([1, 2, 2])
method = c1.radio("Method", ["t-SNE", "UMAP"], key="pj_method", **session.KEEP, horizontal=True)
if len(reference.hidden_layers) > 1:
    layer = c2.select_slider("Hidden-state layer (0 = embeddings)", reference.hidden_layers,
                             value=reference.hidden_layers[len(reference.hidden_layers) // 2], key="pj_layer", **session.KEEP)
else:
    layer = reference.hidden_layers[0]
    c2.markdown(f"Hidden states after layer **{layer}** of {reference.ratios.shape[1]} (0 would be the embeddings): "
                "the layer the reference set stores.")
stored = reference.hidden_layers.index(layer)  # position of that layer in reference.hidden
datasets = sorted(set(reference.datasets))
chosen = c3.multiselect("Datasets", datasets, default=datasets, key="pj_datasets", **session.KEEP,
                        format_func=dataset_title)
mask = np.isin(reference.datasets, chosen)
if mask.sum() < 10:
    st.info("Pick datasets with at least 10 labelled questions.")
    st.stop()

current_ratio = current_hidden = None
if analysis is not None and analysis.result.model == lm.name:
    current_ratio = analysis.result.rank_ratio
    if analysis.result.last_hidden is not None:
        current_hidden = analysis.result.last_hidden[layer]
    st.caption(f"★ = the current question from Home: *{analysis.result.question[:120]}*")
else:
    st.caption("Analyze a question on the Home page to place it on the maps (★).")


@st.cache_data(show_spinner=False, max_entries=16)
def _embedding(kind: str, method: str, stored: int, rows: tuple[int, ...], current: tuple[float, ...] | None,
               reference_key: tuple, _reference):
    """(coords (n, 2), the current question's point (2,) or None) of the chosen reference rows."""
    X = _reference.hidden[list(rows), stored] if kind == "hidden" else _reference.ratios[list(rows)]
    # Shipped with the app for the page's opening view (scripts/build/build_example_results.py), found only for
    # exactly this matrix and method.
    shipped = find_embedding(embedding_request(lm.name, X, method))
    result = embed(X, method, None if current is None else np.asarray(current), coords=shipped)
    return result.coords, result.current


# What identifies the reference rows in the caches below (the set itself is passed unhashed).
reference_key = (lm.name, loss, len(reference), float(reference.ratios.sum()))
rows = tuple(np.flatnonzero(mask).tolist())
labels, with_doc = reference.labels[mask] == 1, reference.with_context[mask]
text = [reference.text[i] for i in rows]
left, right = st.columns(2, gap="medium")
for column, kind, title, current in (
    (left, "hidden", f"{method}: hidden states", current_hidden),
    (right, "grade", f"{method}: GRADE features", current_ratio),
):
    with column:
        with st.spinner(f"Computing {method} of {len(rows)} questions ..."):
            coords, placed = _embedding(kind, method, stored, rows,
                                        None if current is None else tuple(np.asarray(current, dtype=float).tolist()),
                                        reference_key, reference)
        fig = figures.projection_figure(coords, labels, with_doc, title, hover=text, current=placed)
        session.show_figure(fig, f"{kind}-{method}", key=f"pj_{kind}")


@st.cache_data(show_spinner=False, max_entries=8)
def _separability(stored: int, rows: tuple[int, ...], reference_key: tuple, _reference) -> pd.DataFrame:
    """5-fold cross-validated 5-NN accuracy: how well each feature space predicts each property."""
    reference = _reference
    idx = list(rows)
    spaces = {"hidden state": reference.hidden[idx, stored], "GRADE features": reference.ratios[idx]}
    targets = {"correct / incorrect": reference.labels[idx], "with / without document": reference.with_context[idx]}
    table = []
    for space, X in spaces.items():
        row = {"feature space": space}
        for target, y in targets.items():
            if len(np.unique(y)) < 2 or min(np.bincount(y.astype(int))) < 5:
                row[target] = np.nan
                continue
            model = make_pipeline(StandardScaler(), KNeighborsClassifier(5))
            row[target] = float(cross_val_score(model, X, y.astype(int), cv=5).mean())
        table.append(row)
    return pd.DataFrame(table)


st.subheader("What each feature space encodes")
table = _separability(stored, rows, reference_key, reference)
tables.show(table, column_config={
    c: st.column_config.NumberColumn(format="%.3f") for c in table.columns if c != "feature space"})
base_label = max(labels.mean(), 1 - labels.mean())
base_document = max(with_doc.mean(), 1 - with_doc.mean())
st.caption(f"5-fold cross-validated accuracy of a 5-nearest-neighbour classifier in the full feature space "
           f"(majority baseline for correct/incorrect: {base_label:.3f}; n = {len(rows)}, "
           f"{int(labels.sum())} correct, {int(with_doc.sum())} with a document). Empty: one class too small.")
reading = separability_summary(table.to_dict("records"), base_label, base_document)
if reading:
    st.markdown(f"**What this table shows here:** {reading}")
