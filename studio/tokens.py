"""Per-token "epistemic shock" as coloured HTML (no Streamlit).

A token's score at layer l is the row sum of that layer's C_g (``GradeResult.token_scores``). Layers
have very different scales, so before averaging over layers every layer is divided by the largest
absolute score that layer reaches over *all traces shown together*; the colour scale is then shared
by the traces, so the same colour means the same shock in both.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from plotly.colors import get_colorscale, sample_colorscale

COLORSCALE = "YlOrRd"


@dataclass
class TokenScores:
    """Display strings and raw scores of the scored tokens of one trace. scores: (L, n_scored)."""

    tokens: list[str]
    scores: np.ndarray
    step_of_token: list[int]  # step index of each token (0-based), -1 if none


def shared_scale(traces: Sequence[TokenScores], layer: int | None = None) -> list[np.ndarray]:
    """Per-token values in [0, 1] on one scale for all ``traces``.

    ``layer=None`` averages the per-layer normalised scores over layers; otherwise one layer is used.
    Returns one (n_scored,) array per trace.
    """
    if not traces:
        return []
    n_layers = traces[0].scores.shape[0]
    layers = range(n_layers) if layer is None else [layer]
    per_layer_max = np.zeros(n_layers)
    for trace in traces:
        if trace.scores.size:
            per_layer_max = np.maximum(per_layer_max, np.nanmax(np.abs(trace.scores), axis=1))
    per_layer_max[per_layer_max == 0] = 1.0
    values = [np.nanmean(np.abs(t.scores[list(layers)]) / per_layer_max[list(layers), None], axis=0)
              if t.scores.size else np.zeros(0) for t in traces]
    top = max((float(np.nanmax(v)) for v in values if v.size), default=1.0) or 1.0
    return [np.nan_to_num(v / top) for v in values]


def step_probability_values(trace: TokenScores, probability) -> np.ndarray:
    """Each token's colour value under the step verifier's view: its step's probability of being the first wrong
    step (already in [0, 1], so not rescaled: the same colour means the same probability on every trace); 0
    where a token has no step or the verifier read fewer steps."""
    p = [float(x) for x in (probability if probability is not None else [])]
    return np.array([p[k] if 0 <= k < len(p) else 0.0 for k in trace.step_of_token[: len(trace.tokens)]], dtype=float)


def _text_color(value: float) -> str:
    return "#ffffff" if value > 0.72 else "#111111"


def token_html(trace: TokenScores, values: np.ndarray, raw: np.ndarray | None = None, step_marks: bool = True,
               label: str = "shock", flagged: frozenset[int] | set[int] = frozenset(), suspect: int | None = None) -> str:
    """Tokens as coloured ``<span>``s; hovering shows the normalised and the raw score (``label``: what the
    colour is, e.g. shock or surprisal). Step marks of ``flagged`` steps (0-based: the arithmetic / provenance
    check found something) are red with a warning sign; the ``suspect`` step's mark is boxed."""
    colors = sample_colorscale(COLORSCALE, np.clip(values, 0, 1).tolist()) if len(values) else []
    parts = ['<div style="font-family: ui-monospace, Menlo, monospace; font-size: 0.92rem; line-height: 1.9; '
             'white-space: normal; word-break: break-word;">']
    previous_step = None
    for i, (token, value, color) in enumerate(zip(trace.tokens, values, colors)):
        step = trace.step_of_token[i] if i < len(trace.step_of_token) else -1
        starts_step = step_marks and step != previous_step and step >= 0
        if starts_step:  # the mark has its own colour; the token keeps its shock colour (and is underlined)
            mark, sign = ("#c0392b", "⚠") if step in flagged else ("#6a3d9a", "")
            box = "border:1.5px solid #c0392b; border-radius:3px; padding:0 2px;" if step == suspect else ""
            what = " (suspect step)" if step == suspect else ""
            parts.append(f'<sup title="step {step + 1}{what}" style="color:{mark}; font-weight:600; margin:0 2px; '
                         f'{box}">[{step + 1}{sign}]</sup>')
            previous_step = step
        raw_text = f", raw {raw[i]:.3g}" if raw is not None else ""
        title = f"{label} {value:.3f}{raw_text} (step {step + 1})" if step >= 0 else f"{label} {value:.3f}{raw_text}"
        shown = html.escape(token).replace("\n", "↵<br>")
        underline = " text-decoration: underline 2px #6a3d9a; text-underline-offset: 3px;" if starts_step else ""
        parts.append(f'<span title="{html.escape(title)}" style="background:{color}; color:{_text_color(value)}; '
                     f'padding:1px 1px; border-radius:3px;{underline}">{shown}</span>')
    parts.append("</div>")
    return "".join(parts)


def colorbar_html(label: str = "epistemic shock (shared scale)") -> str:
    # The scale's own stops at their own positions: the gradient is exactly the scale the tokens are coloured from
    # (11 evenly resampled stops drew a slightly different scale between them).
    gradient = ", ".join(f"{color} {position * 100:.1f}%" for position, color in get_colorscale(COLORSCALE))
    return (f'<div style="display:flex; align-items:center; gap:8px; font-size:0.8rem; color:#444;">'
            f'<span>low</span><div style="width:220px; height:12px; border-radius:3px; '
            f'background: linear-gradient(to right, {gradient});"></div><span>high</span>'
            f'<span style="margin-left:6px;">{html.escape(label)}</span></div>')


def probability_bar_html(probability: float, threshold: float = 0.5) -> str:
    """A horizontal bar for P(answerable), green at or above the threshold, red below, threshold marked."""
    color = "#2a9d8f" if probability >= threshold else "#d62728"
    width = max(0.0, min(1.0, probability)) * 100
    return (f'<div style="position:relative; height:14px; border-radius:7px; background:#eceff3; margin:2px 0 4px;">'
            f'<div style="width:{width:.1f}%; height:100%; border-radius:7px; background:{color};"></div>'
            f'<div title="decision threshold" style="position:absolute; left:{threshold * 100:.0f}%; top:-3px; '
            f'height:20px; border-left:2px dashed #555;"></div></div>'
            f'<div style="display:flex; justify-content:space-between; font-size:0.75rem; color:#666;">'
            f'<span>0%</span><span>threshold {threshold:.0%}</span><span>100%</span></div>')
