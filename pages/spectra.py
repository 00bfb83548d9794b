"""Spectra: eigenvalues of C_h and C_g for one layer, naive vs stable rank, stable ranks across layers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from studio import figures, session, waiting
from studio.resources import reference_set
from studio.summaries import explain

session.require_router()  # a direct URL on a fresh server goes through app.py too

st.title("Spectra")
st.markdown(
    "For each layer GRADE builds two covariance matrices over the tokens: **C_h** from the activations entering "
    "the MLP down-projection, and **C_g** from the gradient that the loss would send into that layer, "
    "projected onto the activations' span. Their *stable ranks* (Σλ/λ₁ for the `pre` loss, Σλ²/λ₁² for `pos`) "
    "measure how many directions are really used; the feature is the ratio srank(C_g) / srank(C_h)."
)
with st.expander("What you are looking at"):
    st.markdown(
        "The charts take apart one number of the question you analysed on Home. In a layer, the model's activations "
        "(what the layer sees, **C_h**) and the gradient (how the layer would change to reduce the loss, **C_g**) "
        "each spread over some directions. The **eigenvalues** (left) say how much each direction carries, largest "
        "first; a curve that drops fast means few directions matter. Counting directions above a cut-off "
        "(**naive rank**, right) depends on the cut-off chosen, so GRADE uses the **stable rank** instead, a "
        "count that needs no cut-off. Below, both stable ranks in every layer, and their ratio per layer (GRADE's "
        "feature) against labelled answerable and unanswerable questions.\n\n" + explain("rank ratio", "loss pre"))

# Spectra computes nothing itself: it shows Home's analysis, so it follows that one through the queue.
held = waiting.pending("home")
if held is not None:
    state, value = waiting.wait(held, "spectra")
    if state == "done":
        waiting.keep_home_analysis(value, held.request)
    elif state == "failed":
        session.show_error(value, "Analysis failed")
else:
    waiting.elsewhere("spectra")
waiting.cancelled_notice("home")
analysis = st.session_state.get(session.ANALYSIS)
if analysis is None:
    st.info("No analysis yet: type a question on the **Home** page and press **Analyze**; its spectra appear here.")
    st.stop()
result = analysis.result
if result.eig_h is None or result.eig_g is None:
    st.info("This analysis was computed without spectra; analyze the question again on the Home page.")
    st.stop()

st.caption(f"Question: *{result.question}* · model `{result.model}` · loss `{result.loss}` · "
           f"{len(result.input_ids)} tokens · stable-rank formula `{result.srank}`")
n_layers = result.n_layers
layer = st.slider("Layer", 0, n_layers - 1, min(n_layers // 2, n_layers - 1), key="spectra_layer", **session.KEEP)

left, right = st.columns(2, gap="medium")
with left:
    session.show_figure(figures.spectra_figure(result.eig_h[layer], result.eig_g[layer], layer),
                        f"spectra-layer-{layer}", key="spectra")
with right:
    fig = figures.naive_rank_figure(result.eig_h[layer], result.eig_g[layer], float(result.srank_h[layer]),
                                    float(result.srank_g[layer]), layer)
    session.show_figure(fig, f"naive-rank-layer-{layer}", key="naive")

def _naive(eig, t: float) -> int:
    return int(figures.naive_rank_curve(eig, np.array([t]))[0])


sides = {"C_h": result.eig_h[layer], "C_g": result.eig_g[layer]}
at = {name: (_naive(eig, 1e-4), _naive(eig, 1e-5)) for name, eig in sides.items()}
span = {name: (_naive(eig, 1e-2), _naive(eig, 1e-6)) for name, eig in sides.items()}
st.markdown(
    f"**Why the stable rank?** The naive rank counts the eigenvalues above a threshold t, and nothing fixes t. "
    f"At layer {layer}, moving t from 1e-4 to 1e-5 takes the naive rank of C_h from {at['C_h'][0]} to {at['C_h'][1]} "
    f"and that of C_g from {at['C_g'][0]} to {at['C_g'][1]}; between 1e-2 and 1e-6 they range over "
    f"{span['C_h'][0]}–{span['C_h'][1]} and {span['C_g'][0]}–{span['C_g'][1]}. The stable rank (dashed) needs no "
    f"threshold and weighs every direction by its eigenvalue: srank(C_h) = {result.srank_h[layer]:.2f}, "
    f"srank(C_g) = {result.srank_g[layer]:.2f}, rank ratio = **{result.rank_ratio[layer]:.3f}**."
)

session.show_figure(figures.stable_rank_layers_figure(result.srank_h, result.srank_g, layer), "stable-ranks-by-layer",
                    key="sranks")

pinned = st.session_state.get(session.PINNED)
if (pinned is not None and pinned.result.question != result.question and pinned.result.n_layers == n_layers
        and pinned.result.eig_h is not None and pinned.result.eig_g is not None):
    other = pinned.result
    with st.container(border=True, key="spectra_pinned"):
        st.markdown(f"**Side by side with the pinned question** (pinned on Home): *{other.question}*")
        mine, theirs = st.columns(2, gap="medium")
        with mine:
            st.caption(f"This question: srank(C_h) {result.srank_h[layer]:.2f}, srank(C_g) {result.srank_g[layer]:.2f}, "
                       f"rank ratio {result.rank_ratio[layer]:.3f} at layer {layer}")
            session.show_figure(figures.spectra_figure(result.eig_h[layer], result.eig_g[layer], layer),
                                f"spectra-layer-{layer}", key="spectra_mine")
        with theirs:
            st.caption(f"Pinned question: srank(C_h) {other.srank_h[layer]:.2f}, srank(C_g) {other.srank_g[layer]:.2f}, "
                       f"rank ratio {other.rank_ratio[layer]:.3f} at layer {layer}")
            session.show_figure(figures.spectra_figure(other.eig_h[layer], other.eig_g[layer], layer),
                                f"spectra-pinned-layer-{layer}", key="spectra_pinned_fig")

lm = session.current_model()
reference = reference_set(session.reference_frame(), lm.name if lm else result.model, result.loss)
if reference is not None and reference.ratios.shape[1] == n_layers:
    bands = figures.reference_bands(reference.ratios, reference.labels)
    fig = figures.rank_ratio_trend(result.rank_ratio, bands,
                                   title="Rank ratio across layers vs. answerable / unanswerable reference questions")
    session.show_figure(fig, "rank-ratio-vs-reference", key="trend")
    st.caption(f"Reference: {len(reference)} labelled questions for `{reference.model}`, loss `{reference.loss}` "
               f"({int(reference.labels.sum())} answerable, {int((1 - reference.labels).sum())} unanswerable); "
               "bands are the 25th to 75th percentile per layer.")
else:
    session.show_figure(figures.rank_ratio_trend(result.rank_ratio), "rank-ratio", key="trend")
    st.info("The shipped reference set has no labelled questions for this model and loss, so no bands are drawn.")

spectra_table = pd.DataFrame({
    "layer": np.repeat(np.arange(n_layers), result.eig_h.shape[1]),
    "index": np.tile(np.arange(result.eig_h.shape[1]), n_layers),
    "eig_h": result.eig_h.reshape(-1),
    "eig_g": result.eig_g.reshape(-1),
})
st.download_button("Eigenvalues of all layers (CSV)", spectra_table.to_csv(index=False), file_name="grade_spectra.csv",
                   mime="text/csv", key="dl_spectra", on_click="ignore")
