"""What a probe reads of one question, set against the two classes of the questions it learned from.

A probe's verdict comes from a vector of per-layer numbers (:data:`grade.verdict.probe.INPUTS`): the rank ratios, or
log srank(C_h), log srank(C_g) per layer and the loss. Where the two classes overlap on the mean rank ratio (the
GRADE number), some of these inputs still separate them; :class:`InputBands` keeps, for each input, the
quartiles of each class and how well that input alone separates them (its AUROC), so that a page can show
where one question's inputs fall and which inputs carry the verdict.

Bands are fitted once per shipped probe from the labelled feature tables it was trained on
(``scripts/build/build_probe_input_bands.py``) and saved as JSON beside the probes; they name the probe's weights by
sha256 and are only used with exactly those weights.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from ..common.metrics import auroc

#: Shipped bands, one JSON file per shipped probe (``<probe name>.json``).
SHIPPED_BANDS_DIR = Path(str(resources.files("grade") / "assets" / "probe_inputs"))

FORMAT = "grade-probe-input-bands"
CLASSES = {1: "answerable", 0: "unanswerable"}
QUANTILES = (25, 50, 75)
#: An input lies outside what the probe learned from beyond this many inter-quartile ranges past both classes'
#: quartiles (:meth:`InputBands.outside`; 3 is Tukey's "far out").
FENCE = 3.0


def input_names(inputs: str, n_layers: int) -> list[str]:
    """A short name for each of a probe's inputs, in the probe's order (see :data:`grade.verdict.probe.INPUTS`)."""
    if inputs == "rank_ratio":
        return [f"rank ratio, layer {layer}" for layer in range(n_layers)]
    return ([f"log srank(C_h), layer {layer}" for layer in range(n_layers)]
            + [f"log srank(C_g), layer {layer}" for layer in range(n_layers)] + ["loss"])


@dataclass
class InputBands:
    """Per-class quartiles of a probe's inputs and the AUROC of each input alone.

    quartiles[class] : (3, width) list, the 25th, 50th and 75th percentiles of each input over that class's
        questions (class: ``"answerable"`` / ``"unanswerable"``)
    auroc : (width,) list, the AUROC of each input alone for "answerable" (0.5: no separation; below 0.5: lower
        values go with answerable)
    outside_share_max : the largest share of inputs outside the fences (:meth:`outside`, :data:`FENCE`) among
        the questions the bands were fitted on: a question with a larger share is farther out than every one of
        them (:meth:`beyond`). None in bands fitted before it was recorded.
    """

    probe: str
    weights_sha256: str
    inputs: str
    n_layers: int
    quartiles: dict[str, list[list[float]]]
    auroc: list[float]
    counts: dict[str, int]
    source: str = ""
    format: str = field(default=FORMAT)
    outside_share_max: float | None = None

    @classmethod
    def fit(cls, X, y, *, probe: str, weights_sha256: str, inputs: str, n_layers: int, source: str = "") -> InputBands:
        """Bands of the inputs X (n, width) of questions labelled y (n,) in {0, 1} (1 = answerable)."""
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y).astype(int)
        if X.ndim != 2 or len(X) != len(y) or X.shape[1] != len(input_names(inputs, n_layers)):
            raise ValueError(f"X {X.shape} does not fit {len(y)} labels of {inputs} inputs over {n_layers} layers")
        if set(np.unique(y)) != {0, 1}:
            raise ValueError("both classes are needed to fit input bands")
        quartiles = {name: np.percentile(X[y == label], QUANTILES, axis=0).round(6).tolist()
                     for label, name in CLASSES.items()}
        separation = [round(float(auroc(y, X[:, j])), 4) for j in range(X.shape[1])]
        counts = {name: int((y == label).sum()) for label, name in CLASSES.items()}
        bands = cls(probe, weights_sha256, inputs, n_layers, quartiles, separation, counts, source)
        bands.outside_share_max = round(float(max(bands.outside(x).mean() for x in X)), 6)
        return bands

    @property
    def names(self) -> list[str]:
        return input_names(self.inputs, self.n_layers)

    def median(self, name: str) -> np.ndarray:
        """(width,) median of one class."""
        return np.asarray(self.quartiles[name][1])

    def separating(self, k: int = 5) -> list[int]:
        """Indices of the k inputs that separate the classes best alone (largest |AUROC - 0.5|)."""
        strength = np.abs(np.asarray(self.auroc) - 0.5)
        return [int(j) for j in np.argsort(-strength, kind="stable")[:k]]

    def outside(self, x, fence: float = FENCE) -> np.ndarray:
        """(width,) bool for one question's inputs x (width,): True where x lies beyond ``fence`` inter-quartile
        ranges outside both classes' quartiles together (Tukey's fences; 3: his "far out"), so farther from
        every question the probe learned from than its middle halves would place any of them."""
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        quartiles = np.asarray([self.quartiles[name] for name in CLASSES.values()])  # (2, 3, width)
        low, high = quartiles[:, 0].min(axis=0), quartiles[:, 2].max(axis=0)
        spread = high - low
        return ~np.isfinite(x) | (x < low - fence * spread) | (x > high + fence * spread)

    def beyond(self, x) -> tuple[int, int] | None:
        """(inputs outside, inputs) of one question's inputs x when more of them lie outside (:meth:`outside`) than
        of any question the bands were fitted on: the probe never saw a question like it. None otherwise, and
        for bands that did not record :attr:`outside_share_max`."""
        if self.outside_share_max is None:
            return None
        out = self.outside(x)
        return (int(out.sum()), len(out)) if out.mean() > self.outside_share_max else None

    def side(self, x) -> np.ndarray:
        """(width,) for one question's inputs x (width,): +1 where x lies on the answerable side of the midpoint
        between the two class medians, -1 on the unanswerable side, 0 where the medians are equal."""
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        yes, no = self.median("answerable"), self.median("unanswerable")
        return np.sign((x - (yes + no) / 2) * np.sign(yes - no))

    def save(self, path: str | Path) -> Path:
        from ..common.io import atomic_write

        path = Path(path)
        atomic_write(path, json.dumps(asdict(self), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> InputBands:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{path} is not a {FORMAT} file")
        bands = cls(**{k: data[k] for k in ("probe", "weights_sha256", "inputs", "n_layers", "quartiles", "auroc",
                                            "counts", "source")}, outside_share_max=data.get("outside_share_max"))
        width = len(bands.names)
        if len(bands.auroc) != width or any(np.shape(q) != (3, width) for q in bands.quartiles.values()):
            raise ValueError(f"{path}: bands do not match {bands.inputs} inputs over {bands.n_layers} layers")
        return bands


@functools.lru_cache(maxsize=4)
def _bands_by_sha(directory: str) -> dict[str, InputBands]:
    """Every readable bands file in ``directory``, by the sha256 of the weights it was fitted for (read once per
    process: the page asks on every rerun)."""
    found = {}
    for path in sorted(Path(directory).glob("*.json")):
        try:
            bands = InputBands.load(path)
        except (ValueError, KeyError, TypeError, OSError):
            continue
        found[bands.weights_sha256] = bands
    return found


def bands_for(metadata: dict, directory: str | Path = SHIPPED_BANDS_DIR) -> InputBands | None:
    """The bands fitted for the probe whose metadata this is (matched by its weights' sha256), else None."""
    bands = _bands_by_sha(str(directory)).get(metadata.get("weights_sha256") or "")
    return bands if bands is not None and bands.inputs == metadata.get("inputs", "rank_ratio") else None
