"""Figures of a benchmark result: Plotly, drawn from a :class:`~grade.studies.BenchmarkResult` only.

Plotly is part of the app's extra (``pip install grade-studio[app]``), not of the UI-free core: it is
imported inside these functions, and the benchmark writes figures only where it is installed. The
app's Benchmarks page draws the same figures interactively; under ``results/`` they are written as
PNG files (Kaleido, when it finds a Chrome/Chromium), which open anywhere, offline. No HTML is
written: an HTML figure either loads plotly.js from a CDN (not offline) or embeds its 4.6 MB.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from . import METHOD_ORDER, SUPERVISED, BenchmarkResult, format_number, grouped_scores

log = logging.getLogger(__name__)


def plotly_available() -> bool:
    try:
        import plotly  # noqa: F401
    except ImportError:
        return False
    return True


def figures(result: BenchmarkResult) -> dict[str, Any]:
    """Plotly figures of a result: name -> figure (only those with data)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figs: dict[str, Any] = {}
    main = [r for r in result.main if math.isfinite(r["auroc"])]
    if main:
        fig = go.Figure()
        for dataset in dict.fromkeys(r["dataset"] for r in main):
            rows = [r for r in main if r["dataset"] == dataset]
            fig.add_bar(name=dataset, x=[r["method"] for r in rows], y=[r["auroc"] for r in rows],
                        error_y=dict(type="data", symmetric=False,
                                     array=[r["auroc_hi"] - r["auroc"] for r in rows],
                                     arrayminus=[r["auroc"] - r["auroc_lo"] for r in rows]))
        fig.add_hline(y=0.5, line_dash="dot", line_color="grey")
        fig.update_layout(title=f"{result.model}: test AUROC with 95% bootstrap CI", barmode="group",
                          yaxis_title="AUROC", yaxis_range=[0, 1], template="plotly_white")
        figs["auroc_bars"] = fig
    methods = [m for m in SUPERVISED if any(r["method"] == m for r in result.transfer)]
    if methods:
        names = list(dict.fromkeys([r["train"] for r in result.transfer] + [r["test"] for r in result.transfer]))
        fig = make_subplots(rows=1, cols=len(methods), subplot_titles=methods, horizontal_spacing=0.08)
        for k, method in enumerate(methods, 1):
            z = [[next((r["auroc"] for r in result.transfer if r["method"] == method and r["train"] == a and r["test"] == b), None)
                  for b in names] for a in names]
            text = [[format_number(v, 2) if v is not None else "" for v in row] for row in z]
            fig.add_trace(go.Heatmap(z=z, x=names, y=names, text=text, texttemplate="%{text}", zmin=0.3, zmax=1.0,
                                     colorscale="RdBu", zmid=0.5, showscale=k == len(methods)), row=1, col=k)
            fig.update_xaxes(title_text="test on", row=1, col=k)
        fig.update_yaxes(title_text="train on", row=1, col=1)
        fig.update_layout(title=f"{result.model}: transfer (AUROC, train on row, test on column)",
                          height=380, width=max(600, 330 * len(methods)), template="plotly_white")
        figs["transfer_heatmap"] = fig
    rob = [r for r in result.robustness if math.isfinite(r["auroc_rel_change"])]
    if rob:
        fig = go.Figure()
        for variant in dict.fromkeys(r["variant"] for r in rob):
            for dataset in dict.fromkeys(r["dataset"] for r in rob):
                rows = [r for r in rob if r["variant"] == variant and r["dataset"] == dataset]
                if rows:
                    fig.add_bar(name=f"{dataset}, {variant}", x=[r["method"] for r in rows],
                                y=[100 * r["auroc_rel_change"] for r in rows])
        fig.update_layout(title=f"{result.model}: relative AUROC change under harmless perturbations (%)",
                          barmode="group", yaxis_title="change in AUROC (%)", template="plotly_white")
        figs["robustness"] = fig
    abl = [r for r in result.ablations if math.isfinite(r["auroc"])]
    if abl:
        fig = go.Figure()
        for key in dict.fromkeys((r["dataset"], r["loss"]) for r in abl):
            rows = [r for r in abl if (r["dataset"], r["loss"]) == key]
            fig.add_bar(name=f"{key[0]}, GRADE_{key[1]}", y=[r["variant"] for r in rows], x=[r["auroc"] for r in rows],
                        orientation="h", error_x=dict(type="data", symmetric=False,
                                                      array=[r["auroc_hi"] - r["auroc"] for r in rows],
                                                      arrayminus=[r["auroc"] - r["auroc_lo"] for r in rows]))
        fig.add_vline(x=0.5, line_dash="dot", line_color="grey")
        fig.update_layout(title=f"{result.model}: GRADE ablations (test AUROC)", barmode="group",
                          xaxis_range=[0, 1], height=200 + 40 * len(abl) // max(1, len({(r['dataset'], r['loss']) for r in abl})) * 2,
                          template="plotly_white", yaxis_autorange="reversed")
        figs["ablations"] = fig
    fig = risk_coverage_figure(result)
    if fig is not None:
        figs["risk_coverage"] = fig
    return figs


def risk_coverage_figure(result: BenchmarkResult, datasets: list[str] | None = None):
    """Selective answering, one panel per dataset: each detector's accuracy on the test questions it lets the
    model answer against the share answered (:func:`grade.common.metrics.accuracy_coverage`), with answering
    everything (the base rate, dotted: chance) and the oracle (dashed). None without per-question scores."""
    from plotly.subplots import make_subplots

    from ..common.metrics import accuracy_coverage

    curves = {k: v for k, v in grouped_scores(result.test_scores).items() if np.isfinite(v[1]).all()}
    names = [d for d in dict.fromkeys(d for d, _ in curves) if datasets is None or d in datasets]
    if not names:
        return None
    cols = min(3, len(names))
    nrows = -(-len(names) // cols)
    fig = make_subplots(rows=nrows, cols=cols, subplot_titles=names, horizontal_spacing=0.06,
                        vertical_spacing=0.16 if nrows > 1 else 0.1)
    # GRADE bold in two colours of its own, the baselines thin in muted ones, length alone dashed grey: a
    # reader looks for GRADE first, then for what beats it
    bold = {"GRADE_pre": "#1f5fbf", "GRADE_pos": "#d62728"}
    palette = ["#1b9e77", "#d95f02", "#7570b3", "#66a61e", "#e6ab02", "#a6761d", "#17becf", "#bcbd22", "#e377c2"]
    methods = [m for m in METHOD_ORDER if any((d, m) in curves for d in names)]
    baselines = [m for m in methods if m not in bold and not m.startswith("Length")]
    for k, dataset in enumerate(names):
        row, col = k // cols + 1, k % cols + 1
        y = next(v[0] for (d, _), v in curves.items() if d == dataset)
        coverage, oracle = accuracy_coverage(y, y)
        fig.add_scatter(x=coverage, y=oracle, mode="lines", name="oracle", legendgroup="oracle", showlegend=k == 0,
                        line=dict(color="black", dash="dash", width=1.5), row=row, col=col)
        fig.add_scatter(x=[0, 1], y=[y.mean()] * 2, mode="lines", name="answer everything (chance)",
                        legendgroup="chance", showlegend=k == 0, line=dict(color="grey", dash="dot", width=1.5),
                        row=row, col=col)
        for method in methods:
            if (dataset, method) not in curves:
                continue
            coverage, accuracy = accuracy_coverage(*curves[(dataset, method)])
            if method in bold:
                line = dict(color=bold[method], width=3)
            elif method.startswith("Length"):
                line = dict(color="#8c8c8c", width=1.2, dash="dash" if method.endswith("pre") else "longdashdot")
            else:
                line = dict(color=palette[baselines.index(method) % len(palette)], width=1.4)
            fig.add_scatter(x=coverage, y=accuracy, mode="lines", name=method, legendgroup=method,
                            showlegend=k == 0, line=line, row=row, col=col)
        fig.update_xaxes(range=[0, 1], title_text="share answered (coverage)", row=row, col=col)
        fig.update_yaxes(range=[0, 1.02], title_text="accuracy of the answered" if col == 1 else None, row=row, col=col)
    fig.update_layout(title=f"{result.model}: selective answering (test questions; abstain below a detector's threshold)",
                      height=120 + 300 * nrows, width=max(700, 380 * cols), template="plotly_white",
                      margin=dict(t=90))
    return fig


#: PNG scale where the figure's own size already reads well: the panels of many lines compress badly
SCALES = {"risk_coverage": 1.25}


def write_figures(result: BenchmarkResult, out: str | Path, *, scale: float = 2) -> list[Path]:
    """Every figure of :func:`figures` as ``<out>/<name>.png``; nothing where Plotly is not installed
    or Kaleido cannot render (it needs a Chrome/Chromium): the CSV tables are the results, the figures
    a view of them."""
    if not plotly_available():
        log.info("plotly is not installed: no figures written")
        return []
    out = Path(out)
    written = []
    for name, fig in figures(result).items():
        path = out / f"{name}.png"
        try:
            fig.write_image(path, scale=SCALES.get(name, scale))
        except Exception as exc:  # no Kaleido, or no browser for it
            log.warning("figure %s not rendered (%s); the CSV tables hold its numbers", name, exc)
            continue
        written.append(path)
    return written
