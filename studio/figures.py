"""Plotly figure builders: pure functions of arrays, no Streamlit.

Conventions: ``h`` (MLP input activations, C_h) is blue, ``g`` (gradient side, C_g) is orange;
answerable is green, unanswerable is red. Layers are numbered from 0.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

COLOR_H = "#1f77b4"
COLOR_G = "#ff7f0e"
COLOR_YES = "#2a9d8f"
COLOR_NO = "#d62728"
COLOR_CURRENT = "#111111"
TRACE_COLORS = ("#6a3d9a", "#b15928")

# Title at the top left, the legend in one row under it (clear of the mode bar at the top right).
BASE_LAYOUT = dict(
    template="plotly_white",
    margin=dict(l=60, r=20, t=92, b=50),
    legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0.0, font=dict(size=12)),
    hovermode="x unified",
    font=dict(size=13),
)


#: How the app shows every figure: without Plotly's mode bar, which sat over the titles. Dragging still
#: zooms, a double-click resets, and the HTML / PNG buttons under each chart download it.
PLOTLY_CONFIG = {"displaylogo": False, "displayModeBar": False}
MIN_TOP_MARGIN = 70  # pixels above the plot area: room for a title (and, in this module's figures, the legend)


#: Presentation mode (a projector at a classroom's distance): every font this many times larger, and each figure
#: at least this tall, so that one figure fills a 1080-pixel screen on its own.
PRESENTATION_FONT_SCALE = 1.6
PRESENTATION_HEIGHT = 720


def for_display(fig: go.Figure, presentation: bool = False) -> go.Figure:
    """Any figure (these and :mod:`grade.studies.report`'s) as the app shows it: the title at the top left of the
    figure with room above the plot, so nothing is drawn over it; dataset identifiers in its labels as their names
    (:func:`grade.common.display.dataset_title`); with ``presentation``, larger fonts and one figure per screen."""
    fig = titled(go.Figure(fig))
    if fig.layout.title.text:
        fig.update_layout(title=dict(x=0.0, xanchor="left", xref="container", y=0.98, yanchor="top",
                                     yref="container", pad=dict(l=12)))
        if (fig.layout.margin.t or 0) < MIN_TOP_MARGIN:
            fig.update_layout(margin=dict(t=MIN_TOP_MARGIN))
    if presentation:
        fig = presented(fig)
    return fig


def presented(fig: go.Figure) -> go.Figure:
    """``fig`` for a projector: every font :data:`PRESENTATION_FONT_SCALE` times larger (the base font, the title,
    the legend, the axes' titles and ticks, subplot titles and cell numbers) and at least
    :data:`PRESENTATION_HEIGHT` pixels tall."""
    k = PRESENTATION_FONT_SCALE
    base = (fig.layout.font.size or 13) * k
    fig.update_layout(font=dict(size=base), title_font_size=(fig.layout.title.font.size or 17) * k,
                      legend_font_size=(fig.layout.legend.font.size or 12) * k,
                      height=max(PRESENTATION_HEIGHT, int(fig.layout.height or 450)),
                      margin=dict(t=max(fig.layout.margin.t or 0, 140), l=max(fig.layout.margin.l or 0, 90)))
    fig.update_xaxes(title_font_size=base, tickfont_size=base * 0.9)
    fig.update_yaxes(title_font_size=base, tickfont_size=base * 0.9)
    for note in fig.layout.annotations or ():
        note.font.size = (note.font.size or 14) * k
    for trace in fig.data:
        if getattr(trace, "texttemplate", None) is not None or trace.type == "heatmap":
            trace.textfont = dict(size=(getattr(trace.textfont, "size", None) or 14) * k)
    return fig


def titled(fig: go.Figure) -> go.Figure:
    """Dataset identifiers (``nq_open``) shown as their names ("NQ-Open") wherever a figure prints them: subplot
    titles, trace names (a legend), category axes and heatmap axes."""
    from grade.common.display import DATASET_TITLES, dataset_title

    def name(value):
        return dataset_title(value) if isinstance(value, str) and value in DATASET_TITLES else value

    for note in fig.layout.annotations or ():
        if isinstance(note.text, str) and note.text in DATASET_TITLES:
            note.text = dataset_title(note.text)
    for trace in fig.data:
        if isinstance(getattr(trace, "name", None), str):
            trace.name = ", ".join(name(part) for part in trace.name.split(", "))
        if trace.type == "heatmap":
            for axis in ("x", "y"):
                values = getattr(trace, axis)
                if values is not None and len(values) and all(isinstance(v, str) for v in values):
                    setattr(trace, axis, [name(v) for v in values])
    return fig


def readable_transfer(fig: go.Figure, columns: int = 2) -> go.Figure:
    """The transfer heatmaps (one panel per detector, train on rows, test on columns) readable from afar: laid out
    ``columns`` panels a row (side by side, seven datasets' cells of four panels ran into each other), the dataset
    names once per row of panels, cell numbers large, a thin gap between cells."""
    from plotly.subplots import make_subplots

    panels = [t for t in fig.data if t.type == "heatmap"]
    if not panels:
        return fig
    names = [a.text for a in fig.layout.annotations or ()][: len(panels)]
    columns = max(1, min(columns, len(panels)))
    rows = -(-len(panels) // columns)
    size = max(len(panels[0].x or ()), 1)
    out = make_subplots(rows=rows, cols=columns, subplot_titles=names, horizontal_spacing=0.03,
                        vertical_spacing=0.5 / rows if rows > 1 else 0.1)
    for i, trace in enumerate(panels):
        row, col = i // columns + 1, i % columns + 1
        out.add_trace(go.Heatmap(trace).update(textfont=dict(size=14), xgap=2, ygap=2,
                                               showscale=i == len(panels) - 1), row=row, col=col)
        out.update_xaxes(tickangle=-35, tickfont_size=13, title_text="test on" if row == rows else None,
                         row=row, col=col)
        out.update_yaxes(tickfont_size=13, showticklabels=col == 1, title_text="train on" if col == 1 else None,
                         row=row, col=col)
    for note in out.layout.annotations or ():
        note.font.size = 16
    out.update_layout(title=fig.layout.title, template="plotly_white", font=dict(size=14),
                      height=140 + rows * (60 + 46 * size), margin=dict(l=40, r=20, t=110, b=150))
    return out


def _layout(fig: go.Figure, title: str, x: str, y: str, height: int = 380, **extra) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0.0, xanchor="left", xref="container", y=0.98, yanchor="top",
                                 yref="container", pad=dict(l=12)),
                      xaxis_title=x, yaxis_title=y, height=height, **{**BASE_LAYOUT, **extra})
    return fig


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


# ----------------------------------------------------------------------------- rank ratio by layer


def reference_bands(ratios: np.ndarray, labels: np.ndarray, low: float = 25, high: float = 75) -> dict[int, np.ndarray]:
    """Per-label percentiles of a reference set. ratios: (n, L), labels: (n,) in {0, 1}.

    Returns ``{label: (3, L) array of [low, median, high]}`` for each label present.
    """
    bands = {}
    for label in (1, 0):
        rows = ratios[labels == label]
        if len(rows):
            bands[label] = np.percentile(rows, [low, 50, high], axis=0)
    return bands


def reference_scale(bands: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, the middle of the reference questions (the mean of the two classes' medians) and their spread
    (the mean of the two inter-quartile ranges): the units in which :func:`rank_ratio_trend` draws a question."""
    mids = np.stack([bands[k][1] for k in bands])
    spreads = np.stack([bands[k][2] - bands[k][0] for k in bands])
    spread = spreads.mean(axis=0)
    return mids.mean(axis=0), np.where(spread > 0, spread, 1.0)


def rank_ratio_trend(
    ratio: np.ndarray | None,
    bands: dict[int, np.ndarray] | None = None,
    *,
    title: str = "Rank ratio srank(C_g) / srank(C_h) across layers",
    name: str = "this question",
    height: int = 360,
    extra: Sequence[tuple[str, np.ndarray]] = (),
    relative: bool | None = None,
) -> go.Figure:
    """The GRADE feature vector (L,) as a line, over inter-quartile bands of a reference set.

    With bands (``relative`` None or True), every layer is drawn relative to the reference questions: 0 is their
    middle at that layer, 1 one inter-quartile range above it (:func:`reference_scale`). In raw units the ratios
    of the middle layers lie within a few hundredths of each other, so every question looks flat there and two
    questions cannot be told apart; relative to the reference, each layer shows how far a question lies from what
    is usual at that layer and on which class's side. The raw ratio stays in the hover."""
    relative = bool(bands) if relative is None else relative and bool(bands)
    centre, spread = reference_scale(bands) if relative else (0.0, 1.0)

    def drawn(values):
        return (np.asarray(values, dtype=float) - centre) / spread

    fig = go.Figure()
    for label, color, text in ((1, COLOR_YES, "answerable"), (0, COLOR_NO, "unanswerable")):
        if not bands or label not in bands:
            continue
        low, mid, high = bands[label]
        layers = np.arange(len(mid))
        fig.add_trace(go.Scatter(x=layers, y=drawn(high), mode="lines", line=dict(width=0), showlegend=False,
                                 hoverinfo="skip", legendgroup=text))
        fig.add_trace(go.Scatter(x=layers, y=drawn(low), mode="lines", line=dict(width=0), fill="tonexty",
                                 fillcolor=_rgba(color, 0.18), name=f"{text} (reference, 25-75%)",
                                 hoverinfo="skip", legendgroup=text))
        fig.add_trace(go.Scatter(x=layers, y=drawn(mid), mode="lines", line=dict(color=color, width=1.5, dash="dot"),
                                 name=f"{text} median", legendgroup=text, customdata=mid,
                                 hovertemplate="%{customdata:.4f}" if relative else None))
    for i, (label, values) in enumerate(extra):
        fig.add_trace(go.Scatter(x=np.arange(len(values)), y=drawn(values), mode="lines+markers", name=label,
                                 line=dict(color=TRACE_COLORS[i % len(TRACE_COLORS)], width=2), marker=dict(size=5),
                                 customdata=values, hovertemplate="%{customdata:.4f}" if relative else None))
    if ratio is not None:
        fig.add_trace(go.Scatter(x=np.arange(len(ratio)), y=drawn(ratio), mode="lines+markers", name=name,
                                 line=dict(color=COLOR_CURRENT, width=2.5), marker=dict(size=6),
                                 customdata=ratio, hovertemplate="%{customdata:.4f}" if relative else None))
    y_title = "rank ratio vs. the reference<br>(0: its middle; 1: one IQR above)" if relative else "rank ratio"
    fig = _layout(fig, title, "layer", y_title, height=height)
    if relative:
        fig.add_hline(y=0, line_color="#999", line_width=1)
    return fig


def probe_inputs_figure(bands, x: np.ndarray, *, height: int = 380) -> go.Figure:
    """What a probe reads of one question (x: (width,) in the probe's input order) over each class's
    inter-quartile band (:class:`grade.verdict.probe_reading.InputBands`); the inputs that separate the classes best
    alone are ringed. Rank-ratio probes: one panel; log-srank probes: C_h, C_g and the loss side by side."""
    from plotly.subplots import make_subplots

    x = np.asarray(x, dtype=float).reshape(-1)
    L = bands.n_layers
    best = set(bands.separating(5))
    if bands.inputs == "rank_ratio":
        panels = [("rank ratio", slice(0, L))]
    else:
        panels = [("log srank(C_h)", slice(0, L)), ("log srank(C_g)", slice(L, 2 * L)), ("loss", slice(2 * L, 2 * L + 1))]
    widths = [1.0] if len(panels) == 1 else [0.43, 0.43, 0.14]
    fig = make_subplots(rows=1, cols=len(panels), column_widths=widths, horizontal_spacing=0.07,
                        subplot_titles=[name for name, _ in panels])
    for col, (name, part) in enumerate(panels, start=1):
        index = np.arange(part.start, part.stop)
        where = index - part.start if name != "loss" else np.zeros(1)
        for label, color in (("answerable", COLOR_YES), ("unanswerable", COLOR_NO)):
            low, mid, high = (np.asarray(q)[part] for q in bands.quartiles[label])
            first = col == 1
            if name == "loss":  # one number: its two boxes side by side
                offset = -0.15 if label == "answerable" else 0.15
                fig.add_trace(go.Scatter(x=where + offset, y=mid, mode="markers", name=f"{label} (25-75%)",
                                         marker=dict(color=color, size=9, symbol="line-ew-open"),
                                         error_y=dict(type="data", symmetric=False, array=high - mid,
                                                      arrayminus=mid - low, color=color, thickness=6, width=0),
                                         legendgroup=label, showlegend=False), row=1, col=col)
                continue
            fig.add_trace(go.Scatter(x=where, y=high, mode="lines", line=dict(width=0), showlegend=False,
                                     hoverinfo="skip", legendgroup=label), row=1, col=col)
            fig.add_trace(go.Scatter(x=where, y=low, mode="lines", line=dict(width=0), fill="tonexty",
                                     fillcolor=_rgba(color, 0.18), name=f"{label} questions (25-75%)",
                                     hoverinfo="skip", legendgroup=label, showlegend=first), row=1, col=col)
            fig.add_trace(go.Scatter(x=where, y=mid, mode="lines", line=dict(color=color, width=1.5, dash="dot"),
                                     name=f"{label} median", legendgroup=label, showlegend=first), row=1, col=col)
        fig.add_trace(go.Scatter(x=where, y=x[part], mode="lines+markers" if name != "loss" else "markers",
                                 name="this question", line=dict(color=COLOR_CURRENT, width=2.5),
                                 marker=dict(size=7 if name != "loss" else 11, color=COLOR_CURRENT),
                                 showlegend=col == 1), row=1, col=col)
        ringed = [j for j in index if j in best]
        if ringed:
            fig.add_trace(go.Scatter(x=[(j - part.start) if name != "loss" else 0 for j in ringed],
                                     y=[x[j] for j in ringed], mode="markers", name="separates the classes best",
                                     marker=dict(size=17, symbol="circle-open", color=COLOR_G, line=dict(width=2.5)),
                                     customdata=[bands.auroc[j] for j in ringed],
                                     hovertemplate="AUROC alone %{customdata:.2f}<extra></extra>",
                                     legendgroup="best", showlegend=not any(
                                         t.name == "separates the classes best" for t in fig.data)),
                          row=1, col=col)
        if name == "loss":
            fig.update_xaxes(showticklabels=False, range=[-0.6, 0.6], row=1, col=col)
        else:
            fig.update_xaxes(title_text="layer", row=1, col=col)
    _layout(fig, "What the probe reads: this question against the two classes", "layer", None, height=height)
    return fig.update_layout(margin=dict(t=135), legend=dict(y=1.22))  # the legend clear of the panels' titles


# ------------------------------------------------------------------------------------------ spectra


def _positive_normalised(eig: np.ndarray) -> np.ndarray:
    eig = np.asarray(eig, dtype=float)
    top = eig.max() if eig.size else 0.0
    if top <= 0:
        return np.array([])
    values = eig / top
    return values[values > 0]


def spectra_figure(eig_h: np.ndarray, eig_g: np.ndarray, layer: int) -> go.Figure:
    """Normalised eigenvalues λᵢ/λ₁ of C_h and C_g (descending) on a log axis."""
    fig = go.Figure()
    for eig, color, name in ((eig_h, COLOR_H, "C_h (activations)"), (eig_g, COLOR_G, "C_g (gradients)")):
        values = _positive_normalised(eig)
        fig.add_trace(go.Scatter(x=np.arange(1, len(values) + 1), y=values, mode="lines+markers", name=name,
                                 line=dict(color=color), marker=dict(size=4),
                                 hovertemplate="i=%{x}<br>λ/λ₁=%{y:.3e}<extra>" + name + "</extra>"))
    fig.update_yaxes(type="log", exponentformat="power")
    return _layout(fig, f"Eigenvalue spectra, layer {layer}", "eigenvalue index i (descending)", "λᵢ / λ₁ (log scale)")


def naive_rank_curve(eig: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Naive rank (count of λ/λ₁ above t) for every threshold t. eig: (n,) -> (len(thresholds),)."""
    values = _positive_normalised(eig)
    return np.array([(values > t).sum() for t in thresholds])


def naive_rank_figure(eig_h: np.ndarray, eig_g: np.ndarray, srank_h: float, srank_g: float, layer: int,
                      marks: Sequence[float] = (1e-5, 1e-4)) -> go.Figure:
    """Naive rank as a function of the threshold, with each side's stable rank as a dashed level.

    The naive rank moves with a threshold nobody can justify; the stable rank is one number without
    a threshold. That is why GRADE uses it.
    """
    thresholds = np.logspace(-16, 0, 161)
    fig = go.Figure()
    for eig, srank, color, name in ((eig_h, srank_h, COLOR_H, "C_h"), (eig_g, srank_g, COLOR_G, "C_g")):
        counts = naive_rank_curve(eig, thresholds)
        fig.add_trace(go.Scatter(x=thresholds, y=counts, mode="lines", name=f"naive rank of {name}",
                                 line=dict(color=color, shape="hv"),
                                 hovertemplate="threshold %{x:.1e}: rank %{y}<extra>" + name + "</extra>"))
        fig.add_trace(go.Scatter(x=[thresholds[0], thresholds[-1]], y=[srank, srank], mode="lines",
                                 name=f"stable rank of {name} = {srank:.2f}", line=dict(color=color, dash="dash"),
                                 hoverinfo="skip"))
    for t in marks:
        fig.add_vline(x=t, line=dict(color="#888", width=1, dash="dot"))
    fig.update_xaxes(type="log", exponentformat="power", autorange="reversed", dtick=2)
    marked = " and ".join(f"{t:.0e}" for t in marks)
    return _layout(fig, f"Naive rank vs. threshold, layer {layer}",
                   f"threshold t on λ/λ₁ (log scale; dotted: t = {marked})", "number of eigenvalues above t",
                   hovermode="closest")


def stable_rank_layers_figure(srank_h: np.ndarray, srank_g: np.ndarray, layer: int | None = None) -> go.Figure:
    """Stable ranks of C_h and C_g across layers (they live on different scales, hence two axes)."""
    layers = np.arange(len(srank_h))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=layers, y=srank_h, name="srank(C_h)", mode="lines+markers", line=dict(color=COLOR_H)))
    fig.add_trace(go.Scatter(x=layers, y=srank_g, name="srank(C_g)", mode="lines+markers", line=dict(color=COLOR_G),
                             yaxis="y2"))
    if layer is not None:
        fig.add_vline(x=layer, line=dict(color="#888", dash="dot"))
    _layout(fig, "Stable ranks across layers", "layer", "srank(C_h)")
    fig.update_layout(yaxis=dict(title=dict(text="srank(C_h)", font=dict(color=COLOR_H))),
                      yaxis2=dict(title=dict(text="srank(C_g)", font=dict(color=COLOR_G)), overlaying="y", side="right",
                                  showgrid=False),
                      margin=dict(l=60, r=60, t=92, b=50))
    return fig


# ---------------------------------------------------------------------------------- reasoning steps


def step_ratio_heatmap(step_ratios: np.ndarray, step_labels: Sequence[str], title: str, zmin: float, zmax: float) -> go.Figure:
    """Rank ratio per step (rows) and layer (columns). step_ratios: (K, L)."""
    fig = go.Figure(go.Heatmap(
        z=step_ratios, x=np.arange(step_ratios.shape[1]), y=[f"step {i + 1}" for i in range(len(step_labels))],
        customdata=np.array([[text] * step_ratios.shape[1] for text in step_labels], dtype=object),
        zmin=zmin, zmax=zmax, colorscale="Viridis", colorbar=dict(title="rank ratio"),
        hovertemplate="%{y}, layer %{x}: %{z:.3f}<br>%{customdata}<extra></extra>",
    ))
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, title, "layer", "step", height=max(240, 110 + 28 * len(step_labels)), hovermode="closest",
                   margin=dict(l=60, r=20, t=50, b=50))


def step_grade_figure(traces: Sequence[tuple[str, np.ndarray]]) -> go.Figure:
    """Mean rank ratio over layers for each step of each trace: where in the reasoning the model is surprised."""
    fig = go.Figure()
    for i, (name, values) in enumerate(traces):
        fig.add_trace(go.Scatter(x=np.arange(1, len(values) + 1), y=values, mode="lines+markers", name=name,
                                 line=dict(color=TRACE_COLORS[i % len(TRACE_COLORS)], width=2), marker=dict(size=7)))
    fig.update_xaxes(dtick=1)
    return _layout(fig, "Per-step rank ratio (mean over layers)", "step", "mean rank ratio", height=320)


# ------------------------------------------------------------------------------------- projections


def projection_figure(coords: np.ndarray, correct: np.ndarray, with_context: np.ndarray, title: str,
                      hover: Sequence[str] | None = None, current: np.ndarray | None = None) -> go.Figure:
    """2-D embedding coloured by correct / incorrect, marker by with / without document.

    coords: (n, 2); correct, with_context: (n,) bool; current: (2,) or None.
    """
    fig = go.Figure()
    hover = list(hover) if hover is not None else [""] * len(coords)
    for is_correct, color, label in ((True, COLOR_YES, "correct"), (False, COLOR_NO, "incorrect")):
        for has_doc, symbol, doc_label in ((False, "circle", "no document"), (True, "diamond", "with document")):
            mask = (correct == is_correct) & (with_context == has_doc)
            if not mask.any():
                continue
            fig.add_trace(go.Scatter(
                x=coords[mask, 0], y=coords[mask, 1], mode="markers", name=f"{label}, {doc_label}",
                marker=dict(color=color, symbol=symbol, size=8 if has_doc else 7, opacity=0.75,
                            line=dict(width=0.5, color="white")),
                text=[h for h, m in zip(hover, mask) if m], hovertemplate="%{text}<extra></extra>",
            ))
    if current is not None:
        fig.add_trace(go.Scatter(x=[current[0]], y=[current[1]], mode="markers", name="current question",
                                 marker=dict(color=COLOR_CURRENT, symbol="star", size=18, line=dict(width=1, color="white")),
                                 hoverinfo="name"))
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, scaleanchor="x")
    return _layout(fig, title, "dimension 1", "dimension 2", height=520, hovermode="closest",
                   legend=dict(orientation="h", yanchor="top", y=-0.1, xanchor="left", x=0.0),
                   margin=dict(l=40, r=20, t=50, b=40))


# ------------------------------------------------------------------------------------------- probes


def roc_figure(curves: Sequence[tuple[str, np.ndarray, np.ndarray, float]]) -> go.Figure:
    """ROC curves: (name, fpr, tpr, auroc) each, with the chance diagonal."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="chance", line=dict(color="#999", dash="dash")))
    for i, (name, fpr, tpr, auroc) in enumerate(curves):
        fig.add_trace(go.Scatter(x=fpr, y=tpr, mode="lines", name=f"{name} (AUROC {auroc:.3f})",
                                 line=dict(color=[COLOR_G, COLOR_H, COLOR_YES][i % 3], width=2.5)))
    fig.update_xaxes(range=[0, 1], constrain="domain")
    fig.update_yaxes(range=[0, 1.01], scaleanchor="x")
    return _layout(fig, "ROC curve (test split)", "false positive rate", "true positive rate", height=480,
                   hovermode="closest")
