"""Probes: one question's GRADE features in, P(answerable) out.

What a probe reads is named by its ``inputs`` (:data:`INPUTS`, saved with the probe): the per-layer rank
ratios, as in the paper, or the two stable ranks per layer apart plus the loss they come from.

Two kinds, one estimator API (``fit`` / ``predict_proba`` / ``predict`` / ``score``):

* ``mlp``: the GRADE paper's probe, exactly: L -> 256 -> 128 -> 64 -> 32 -> 1, each hidden block
  Linear, BatchNorm1d, LeakyReLU(0.01), Dropout(0.5); Kaiming-uniform init; sigmoid output and BCE;
  Adam (lr 5e-3, weight decay 1e-5), batch 64, up to 100 epochs, ReduceLROnPlateau (factor 0.75,
  patience 5) on the validation loss, seed 42, threshold 0.5. The weights of the epoch with the best
  validation AUROC (ties: lower validation loss) are kept ("early selection").
* ``logreg``: standardised logistic regression (scikit-learn), C picked on the validation split; a
  simple comparison point.

A probe is saved as two files side by side: ``name.safetensors`` (every tensor: MLP weights and
BatchNorm buffers, or LR coefficients and the scaler's mean/scale) and ``name.json`` (metadata: model,
loss, srank variant, layer count, feature definition, training data and class balance, metrics,
package version, probe kind, and the SHA-256 of the tensor file). Loading checks all of it and raises
:class:`~grade.errors.ProbeError` with one readable line for anything unreadable or inconsistent.
Nothing is ever unpickled.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from . import __version__
from .artifacts import (MAX_HEADER_BYTES, MAX_METADATA_BYTES, jsonable, model_key, probe_paths,  # noqa: F401
                        read_metadata, read_weights, safetensors_header, save_artifact, sha256_file)
from .artifacts import is_count as _is_count
from .errors import ProbeError

#: Older private names, kept for callers outside the package (:mod:`grade.artifacts` has the public ones).
_model_key, _sha256, _jsonable = model_key, sha256_file, jsonable
from .metrics import binary_metrics, class_balance

PROBE_FORMAT = 1
KINDS = ("mlp", "logreg")
HIDDEN_SIZES = (256, 128, 64, 32)
FEATURE_DEFINITION = (
    "rank_ratio per layer (layer 0 first) = srank(C_g) / srank(C_h) at the MLP down projection; "
    "C_h = h h^T of the down projection input h, C_g from the gradient of the loss w.r.t. the MLP output"
)

#: What a probe can read from one question's GRADE pass, by name: the definition written into the probe's
#: metadata. :func:`probe_inputs` is the one place that turns a feature table or a result into these numbers.
INPUTS = {
    "rank_ratio": FEATURE_DEFINITION,
    "sranks_loss": (
        "log srank(C_h) per layer (layer 0 first), then log srank(C_g) per layer, then the value of the loss whose "
        "gradient was taken: 2L+1 numbers. The rank ratio is the difference of the two logs; kept apart, a probe can "
        "weigh them differently, and the loss carries what the entropy knows (results/README.md measures both)"
    ),
}

#: The feature-table columns (or result attributes) each of :data:`INPUTS` is made of.
INPUT_COLUMNS = {"rank_ratio": ("rank_ratio",), "sranks_loss": ("srank_h", "srank_g", "loss_value")}

EpochCallback = Callable[[int, int, dict[str, float]], None]  # (epoch, max epochs, metrics)

#: Package data (importlib.resources, so an installed package finds them too): the shipped probes
#: (``<model>-<loss>.{safetensors,json}``, built by ``make probes``) and the labelled reference feature
#: set the app draws its bands and projections from.
SHIPPED_PROBES_DIR = Path(str(resources.files("grade") / "assets" / "probes"))
SHIPPED_REFERENCE_FEATURES = Path(str(resources.files("grade") / "assets" / "reference_features.parquet"))


def input_width(inputs: str, n_layers: int) -> int:
    """How many numbers ``inputs`` makes of a model with ``n_layers`` layers."""
    _check_inputs(inputs)
    return n_layers if inputs == "rank_ratio" else 2 * n_layers + 1


def _layers_of(inputs: str, width: int) -> int | None:
    """The layer count behind ``width`` numbers of ``inputs`` (None where no layer count gives that width)."""
    if inputs == "rank_ratio":
        return width
    return (width - 1) // 2 if width >= 3 and width % 2 == 1 else None


def _check_inputs(inputs) -> None:
    if inputs not in INPUTS:
        raise ProbeError(f"unknown probe inputs {inputs!r}; use {' or '.join(INPUTS)}")


def probe_inputs(source, inputs: str = "rank_ratio") -> np.ndarray:
    """(n, width) float64 probe inputs from a feature table (columns ``rank_ratio``, ``srank_h``, ``srank_g``,
    ``loss_value``: :mod:`grade.features`) or, as one row, from a :class:`~grade.result.GradeResult`."""
    from .errors import InputError
    from .features import feature_matrix

    _check_inputs(inputs)
    table = hasattr(source, "columns")
    missing = [c for c in INPUT_COLUMNS[inputs] if (c not in source.columns if table else getattr(source, c, None) is None)]
    if missing:
        raise InputError(f"probe inputs {inputs!r} need {', '.join(missing)}, which these features lack")

    def per_layer(name):
        return feature_matrix(source, name) if table else np.asarray(getattr(source, name), dtype=np.float64)[None, :]

    if inputs == "rank_ratio":
        return per_layer("rank_ratio")
    loss = (source["loss_value"].to_numpy(dtype=np.float64) if table
            else np.array([source.loss_value], dtype=np.float64))[:, None]
    # a layer whose gradient vanished has stable rank 0: a floor keeps its log finite (and very low)
    return np.hstack([np.log(np.maximum(per_layer("srank_h"), 1e-6)), np.log(np.maximum(per_layer("srank_g"), 1e-6)),
                      loss])


# --------------------------------------------------------------------------------------------------
# splits (metrics: grade.metrics)


def stratified_split(y, *, fractions=(0.7, 0.15, 0.15), seed: int = 42) -> tuple[np.ndarray, ...]:
    """Seeded stratified split of row indices into ``len(fractions)`` parts (train, val, test).

    ``y`` holds the strata: labels, or any hashable group key (e.g. ``"dataset|label"``). Each stratum
    is shuffled by one ``numpy.random.default_rng(seed)`` stream and cut in the given proportions, so
    every part keeps the strata's shares; parts are returned sorted.
    """
    y = np.asarray(y)
    if not math.isclose(sum(fractions), 1.0):
        raise ValueError(f"fractions must sum to 1, got {fractions}")
    rng = np.random.default_rng(seed)
    parts: list[list[int]] = [[] for _ in fractions]
    for cls in np.unique(y):
        idx = np.flatnonzero(y == cls)
        rng.shuffle(idx)
        cuts = np.round(np.cumsum(fractions)[:-1] * len(idx)).astype(int)
        for part, chunk in zip(parts, np.split(idx, cuts)):
            part.extend(chunk.tolist())
    return tuple(np.array(sorted(p), dtype=int) for p in parts)


# --------------------------------------------------------------------------------------------------
# the paper's MLP


class MLPNet(nn.Module):
    """L -> 256 -> 128 -> 64 -> 32 -> 1 logit; hidden blocks Linear, BatchNorm1d, LeakyReLU, Dropout."""

    def __init__(self, n_inputs: int, hidden: tuple[int, ...] = HIDDEN_SIZES, dropout: float = 0.5):
        super().__init__()
        layers: list[nn.Module] = []
        width = n_inputs
        for size in hidden:
            layers += [nn.Linear(width, size), nn.BatchNorm1d(size), nn.LeakyReLU(0.01), nn.Dropout(dropout)]
            width = size
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)
        for module in self.net:
            if isinstance(module, nn.Linear):
                nn.init.kaiming_uniform_(module.weight, a=0.01, nonlinearity="leaky_relu")
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, L) -> logits (batch,)."""
        return self.net(x).squeeze(-1)


# --------------------------------------------------------------------------------------------------
# the estimator


@dataclass
class TrainingHistory:
    train_loss: list[float]
    val_loss: list[float]
    val_auroc: list[float]
    lr: list[float]
    best_epoch: int


class Probe:
    """A knowledge-gap probe over per-layer rank ratios.

    Parameters
    ----------
    kind : ``"mlp"`` (the paper's probe) or ``"logreg"``.
    seed : seeds weight init, batch order, dropout and the internal validation split.
    epochs, batch_size, lr, weight_decay : MLP training settings (paper defaults).
    threshold : decision threshold for :meth:`predict`.
    inputs : what the probe reads of a question (:data:`INPUTS`); ``fit`` takes X of shape (n, width)
        with width = :func:`input_width` of the model's layer count (L for ``rank_ratio``).

    After :meth:`fit`, ``metadata`` holds what :meth:`save` writes to JSON; the caller adds model,
    loss and data descriptions through ``fit(..., info=...)`` or by updating ``metadata``.
    """

    def __init__(self, kind: str = "mlp", *, seed: int = 42, epochs: int = 100, batch_size: int = 64,
                 lr: float = 5e-3, weight_decay: float = 1e-5, threshold: float = 0.5,
                 validation_fraction: float = 0.15, inputs: str = "rank_ratio"):
        if kind not in KINDS:
            raise ProbeError(f"unknown probe kind {kind!r}; use {' or '.join(KINDS)}")
        _check_inputs(inputs)
        self.kind = kind
        self.inputs = inputs
        self.seed = seed
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.threshold = threshold
        self.validation_fraction = validation_fraction
        self.net: MLPNet | None = None
        self.coef_: np.ndarray | None = None  # logreg: (L,)
        self.intercept_: float | None = None
        self.mean_: np.ndarray | None = None  # logreg scaler: (L,)
        self.scale_: np.ndarray | None = None
        self.n_features_in_: int | None = None  # input width (= layer count for rank ratios)
        self.history: TrainingHistory | None = None
        self.metadata: dict[str, Any] = {}

    # ---- fitting -------------------------------------------------------------------------------

    def fit(self, X, y, X_val=None, y_val=None, *, callback: EpochCallback | None = None,
            info: dict[str, Any] | None = None) -> "Probe":
        """Train on X (n, L), y (n,) in {0, 1}. Without ``X_val``/``y_val`` a stratified
        ``validation_fraction`` of the data is held out for early selection."""
        self.n_features_in_ = None  # refitting may change the layer count
        X, y = self._check_xy(X, y)
        if X_val is None:
            train, val = stratified_split(y, fractions=(1 - self.validation_fraction, self.validation_fraction),
                                          seed=self.seed)
            X, y, X_val, y_val = X[train], y[train], X[val], y[val]
        else:
            X_val, y_val = self._check_xy(X_val, y_val)
        if len(np.unique(y)) < 2:
            raise ProbeError("the training data holds one class only; a probe needs answerable and unanswerable rows")
        if _layers_of(self.inputs, X.shape[1]) is None:
            raise ProbeError(f"{X.shape[1]} numbers per row are not {self.inputs!r} inputs of any layer count")
        self.n_features_in_ = X.shape[1]
        if self.kind == "mlp":
            self._fit_mlp(X, y, X_val, y_val, callback)
        else:
            self._fit_logreg(X, y, X_val, y_val, callback)
        self.metadata = {
            **(info or {}),
            "kind": self.kind,
            "inputs": self.inputs,
            "n_layers": self.n_layers,
            "threshold": self.threshold,
            "seed": self.seed,
            "train_balance": class_balance(y),
            "val_balance": class_balance(y_val),
            "val_metrics": binary_metrics(y_val, self.predict_proba(X_val)[:, 1], threshold=self.threshold, roc=False),
        }
        if self.kind == "mlp":
            self.metadata["training"] = {
                "epochs_max": self.epochs, "best_epoch": self.history.best_epoch, "batch_size": self.batch_size,
                "lr": self.lr, "weight_decay": self.weight_decay, "optimizer": "Adam",
                "scheduler": "ReduceLROnPlateau(factor=0.75, patience=5) on validation BCE",
                "selection": "best validation AUROC, ties to lower validation BCE",
            }
        else:
            self.metadata["training"] = {"C": self.C_, "selection": "C with the best validation AUROC"}
        return self

    def _fit_mlp(self, X, y, X_val, y_val, callback):
        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        net = MLPNet(X.shape[1])
        opt = torch.optim.Adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.75, patience=5)
        bce = nn.BCEWithLogitsLoss()  # = sigmoid + BCE, numerically safer
        Xt, yt = torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
        Xv, yv = torch.tensor(X_val, dtype=torch.float32), torch.tensor(y_val, dtype=torch.float32)
        best_key, best_state, best_epoch = None, None, 0
        hist = TrainingHistory([], [], [], [], 0)
        with torch.enable_grad():
            for epoch in range(1, self.epochs + 1):
                net.train()
                order = rng.permutation(len(Xt))
                total = 0.0
                for start in range(0, len(order), self.batch_size):
                    batch = order[start:start + self.batch_size]
                    if len(batch) < 2:  # BatchNorm cannot normalise a batch of one
                        continue
                    opt.zero_grad()
                    loss = bce(net(Xt[batch]), yt[batch])
                    loss.backward()
                    opt.step()
                    total += float(loss.detach()) * len(batch)
                net.eval()
                with torch.no_grad():
                    logits = net(Xv)
                    val_loss = float(bce(logits, yv))
                    p = torch.sigmoid(logits).numpy()
                auroc = binary_metrics(y_val, p, roc=False)["auroc"]
                auroc = 0.5 if auroc is None else auroc
                sched.step(val_loss)
                lr = opt.param_groups[0]["lr"]
                hist.train_loss.append(total / len(Xt))
                hist.val_loss.append(val_loss)
                hist.val_auroc.append(auroc)
                hist.lr.append(lr)
                key = (auroc, -val_loss)
                if best_key is None or key > best_key:
                    best_key, best_state, best_epoch = key, copy.deepcopy(net.state_dict()), epoch
                if callback is not None:
                    callback(epoch, self.epochs, {"train_loss": hist.train_loss[-1], "val_loss": val_loss,
                                                  "val_auroc": auroc, "lr": lr})
        net.load_state_dict(best_state)
        net.eval()
        hist.best_epoch = best_epoch
        self.net, self.history = net, hist

    def _fit_logreg(self, X, y, X_val, y_val, callback):
        from sklearn.linear_model import LogisticRegression

        mean = X.mean(axis=0)
        scale = X.std(axis=0)
        scale[scale == 0] = 1.0  # a constant feature: leave it unscaled (sklearn does the same)
        Z, Zv = (X - mean) / scale, (X_val - mean) / scale
        grid = (0.01, 0.1, 1.0, 10.0)
        best = None
        for step, C in enumerate(grid, 1):
            model = LogisticRegression(C=C, max_iter=5000, random_state=self.seed).fit(Z, y)
            p = model.predict_proba(Zv)[:, 1]
            auroc = binary_metrics(y_val, p, roc=False)["auroc"]
            auroc = 0.5 if auroc is None else auroc
            key = (auroc, -C)  # ties: stronger regularisation
            if best is None or key > best[0]:
                best = (key, C, model)
            if callback is not None:
                callback(step, len(grid), {"C": C, "val_auroc": auroc})
        _, self.C_, model = best
        self.coef_, self.intercept_ = model.coef_[0].astype(np.float64), float(model.intercept_[0])
        self.mean_, self.scale_ = mean.astype(np.float64), scale.astype(np.float64)

    # ---- predicting ----------------------------------------------------------------------------

    @property
    def n_layers(self) -> int | None:
        """The model depth this probe reads (None before fitting)."""
        return None if self.n_features_in_ is None else _layers_of(self.inputs, self.n_features_in_)

    def _check_fitted(self):
        if self.n_features_in_ is None:
            raise ProbeError("this probe is not trained yet (call fit or Probe.load)")

    def _check_xy(self, X, y=None):
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1:
            X = X[None, :]
        if X.ndim != 2:
            raise ProbeError(f"features must be (n, n_layers), got shape {X.shape}")
        if not np.isfinite(X).all():
            raise ProbeError("features contain NaN or inf")
        if self.n_features_in_ is not None and X.shape[1] != self.n_features_in_:
            expected = (f"{self.n_layers} layers" if self.inputs == "rank_ratio"
                        else f"{self.n_features_in_} numbers ({self.inputs} of {self.n_layers} layers)")
            raise ProbeError(f"this probe expects {expected}, the features have {X.shape[1]}")
        if y is None:
            return X
        y = np.asarray(y).astype(int)
        if y.shape != (len(X),) or not np.isin(y, (0, 1)).all():
            raise ProbeError("labels must be a vector of 0/1, one per row")
        return X, y

    def predict_proba(self, X) -> np.ndarray:
        """(n, 2) probabilities [P(unanswerable), P(answerable)], like scikit-learn."""
        self._check_fitted()
        X = self._check_xy(X)
        if self.kind == "mlp":
            self.net.eval()
            with torch.no_grad():
                p = torch.sigmoid(self.net(torch.tensor(X, dtype=torch.float32))).double().numpy()
        else:
            z = ((X - self.mean_) / self.scale_) @ self.coef_ + self.intercept_
            p = 1.0 / (1.0 + np.exp(-z))
        return np.stack([1 - p, p], axis=1)

    def predict(self, X) -> np.ndarray:
        """(n,) 1 = answerable, at the probe's threshold."""
        return (self.predict_proba(X)[:, 1] >= self.threshold).astype(int)

    def score(self, X, y) -> float:
        """Accuracy at the threshold (scikit-learn's convention for classifiers)."""
        X, y = self._check_xy(X, y)
        return float((self.predict(X) == y).mean())

    def evaluate(self, X, y, *, roc: bool = True) -> dict[str, Any]:
        """:func:`binary_metrics` of this probe on (X, y)."""
        X, y = self._check_xy(X, y)
        return binary_metrics(y, self.predict_proba(X)[:, 1], threshold=self.threshold, roc=roc)

    def predict_result(self, result) -> float:
        """P(answerable) for one :class:`~grade.result.GradeResult`, after checking it fits this probe."""
        self.check_compatible(result.model, result.n_layers, result.loss, srank=result.srank)
        return float(self.predict_proba(probe_inputs(result, self.inputs))[0, 1])

    # ---- compatibility -------------------------------------------------------------------------

    def check_compatible(self, lm_or_name, n_layers: int | None = None, loss: str | None = None, *,
                         srank: str | None = None) -> None:
        """Raise ProbeError unless this probe was trained for this model, depth, loss and srank variant.

        ``lm_or_name``: a :class:`~grade.models.LoadedModel` (its name and layer count are used) or a
        model name; None skips the model check.
        """
        meta = self.metadata
        name = lm_or_name
        if lm_or_name is not None and not isinstance(lm_or_name, str):
            name = lm_or_name.name
            n_layers = lm_or_name.n_layers if n_layers is None else n_layers
        trained = meta.get("model")
        if name is not None and trained and model_key(name) != model_key(trained):
            raise ProbeError(f"this probe was trained on {trained}, not {name}")
        if n_layers is not None and int(n_layers) != self.n_layers:
            raise ProbeError(f"this probe expects {self.n_layers} layers, the model has {n_layers}")
        if loss is not None and meta.get("loss") and loss != meta["loss"]:
            raise ProbeError(f"this probe was trained on GRADE_{meta['loss']} features, not GRADE_{loss}")
        if srank is not None and meta.get("srank") and srank != meta["srank"]:
            raise ProbeError(f"this probe was trained with the {meta['srank']} stable rank, not {srank}")

    # ---- saving and loading --------------------------------------------------------------------

    def tensors(self) -> dict[str, torch.Tensor]:
        self._check_fitted()
        if self.kind == "mlp":
            return {k: v.detach().clone().contiguous() for k, v in self.net.state_dict().items()}
        return {
            "coef": torch.tensor(self.coef_, dtype=torch.float64),
            "intercept": torch.tensor([self.intercept_], dtype=torch.float64),
            "scaler_mean": torch.tensor(self.mean_, dtype=torch.float64),
            "scaler_scale": torch.tensor(self.scale_, dtype=torch.float64),
        }

    def save(self, path: str | Path) -> tuple[Path, Path]:
        """Write ``path.safetensors`` and ``path.json`` (a given extension is dropped first)."""
        weights, meta_path, self.metadata = save_artifact(path, "probe", self.tensors(),
                                                          {"format": "grade-probe", "kind": self.kind},
                                                          self._metadata_for)
        return weights, meta_path

    def _metadata_for(self, weights_name: str, digest: str) -> dict[str, Any]:
        return {
            **self.metadata,
            "format": "grade-probe",
            "format_version": PROBE_FORMAT,
            "kind": self.kind,
            "inputs": self.inputs,
            "n_layers": self.n_layers,
            "threshold": self.threshold,
            "feature_definition": INPUTS[self.inputs],
            "package_version": __version__,
            "weights_file": weights_name,
            "weights_sha256": digest,
        }

    @classmethod
    def load(cls, path: str | Path) -> "Probe":
        """Load a probe saved by :meth:`save`; any problem raises ProbeError with one clear line."""
        weights, meta_path = probe_paths(path)
        meta = read_metadata(weights, meta_path, "probe", PROBE_FORMAT)
        kind, n_layers = meta.get("kind"), meta.get("n_layers")
        if kind not in KINDS or not isinstance(n_layers, int) or isinstance(n_layers, bool) or n_layers < 1:
            raise ProbeError(f"{meta_path} names no valid probe kind and layer count")
        check_probe_metadata(meta, meta_path)
        inputs = meta.get("inputs", "rank_ratio")  # probes from before inputs were named read rank ratios
        if inputs not in INPUTS:
            raise ProbeError(f"{meta_path}: unknown probe inputs {inputs!r}; this version reads {', '.join(INPUTS)}")
        width = input_width(inputs, n_layers)
        threshold, seed = meta.get("threshold", 0.5), meta.get("seed", 42)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            raise ProbeError(f"{meta_path}: 'threshold' must be a number from 0 to 1, not {threshold!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ProbeError(f"{meta_path}: 'seed' must be a whole number of at least 0, not {seed!r}")
        for key in ("model", "loss", "srank"):
            if meta.get(key) is not None and not isinstance(meta[key], str):
                raise ProbeError(f"{meta_path}: {key!r} must be text, not {meta[key]!r}")
        check_weights_header(weights, kind, width, n_layers)  # before a tensor or a network takes memory
        tensors = read_weights(weights, meta_path, meta, "probe", digest_required=False)
        probe = cls(kind, threshold=float(threshold), seed=seed, inputs=inputs)
        probe.n_features_in_ = width
        probe.metadata = meta
        try:
            if kind == "mlp":
                net = MLPNet(width)
                net.load_state_dict(tensors, strict=True)
                net.eval()
                probe.net = net
            else:
                probe.coef_ = tensors["coef"].double().numpy()
                probe.intercept_ = float(tensors["intercept"][0])
                probe.mean_ = tensors["scaler_mean"].double().numpy()
                probe.scale_ = tensors["scaler_scale"].double().numpy()
                if not (probe.coef_.shape == probe.mean_.shape == probe.scale_.shape == (width,)):
                    raise ValueError("coefficient shapes do not match the layer count")
                if not (probe.scale_ > 0).all():  # fitting never writes one (a constant feature gets 1)
                    raise ValueError("a scaler scale is zero or negative")
        except (KeyError, RuntimeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ProbeError(f"probe weights {weights} do not fit a {kind} probe of {n_layers} layers ({first})") from None
        return probe

    def __repr__(self) -> str:
        model = self.metadata.get("model", "?")
        return (f"Probe(kind={self.kind!r}, inputs={self.inputs!r}, model={model!r}, loss={self.metadata.get('loss')!r}, "
                f"n_layers={self.n_layers})")


LOSSES = ("pre", "pos")
SRANKS = ("paper", "sum", "squared")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def probe_metadata_problem(meta) -> str | None:
    """What is wrong with a probe's metadata, in one line, or None: every field the studio and
    :meth:`Probe.load` read is checked for its type (numbers are numbers, ``model`` is present and
    text, ...), so that a file from elsewhere cannot pass text where a number is shown or skip the
    model check by leaving ``model`` out."""
    if not isinstance(meta, dict):
        return "the metadata is not a JSON object"
    model = meta.get("model")
    if not isinstance(model, str) or not model.strip():
        return "'model' must be the name of the model the probe was trained on (text)"
    if len(model) > 500:
        return "'model' is longer than 500 characters"
    if meta.get("loss") not in LOSSES:
        return f"'loss' must be {' or '.join(LOSSES)}, not {meta.get('loss')!r:.60}"
    if meta.get("srank", "paper") not in SRANKS:
        return f"'srank' must be {', '.join(SRANKS)}, not {meta.get('srank')!r:.60}"
    if meta.get("kind") not in KINDS:
        return f"'kind' must be {' or '.join(KINDS)}, not {meta.get('kind')!r:.60}"
    n_layers = meta.get("n_layers")
    if not _is_count(n_layers) or n_layers < 1:  # its weights are checked against it (check_weights_header)
        return f"'n_layers' must be a whole number of at least 1, not {n_layers!r:.60}"
    if meta.get("inputs", "rank_ratio") not in INPUTS:
        return f"unknown probe inputs {meta.get('inputs')!r:.60}; this version reads {', '.join(INPUTS)}"
    name = meta.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > 200):
        return "'name' must be text of at most 200 characters"
    tasks = meta.get("tasks")
    if tasks is not None and (not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks)):
        return "'tasks' must be a list of task names"
    metrics = meta.get("metrics", {})
    if not isinstance(metrics, dict):
        return "'metrics' must be an object"
    test = metrics.get("test", metrics)
    if not isinstance(test, dict):
        return "'metrics.test' must be an object"
    for key in ("auroc", "accuracy"):
        value = test.get(key)
        if value is not None and (not _is_number(value) or not 0.0 <= value <= 1.0):
            return f"the test {key} must be a number from 0 to 1, not {value!r:.60}"
    for key in ("n", "positives"):
        if test.get(key) is not None and not _is_count(test[key]):
            return f"the test '{key}' must be a whole number, not {test[key]!r:.60}"
    roc = test.get("roc")
    if roc is not None:
        if not isinstance(roc, dict) or not all(
                isinstance(roc.get(k), list) and all(_is_number(x) for x in roc[k]) for k in ("fpr", "tpr")) \
                or len(roc["fpr"]) != len(roc["tpr"]):
            return "'metrics.test.roc' must hold two lists of numbers of one length, 'fpr' and 'tpr'"
    balance = meta.get("train_balance")
    if balance is not None and (not isinstance(balance, dict) or not all(
            _is_count(balance.get(k)) for k in ("answerable", "unanswerable"))):
        return "'train_balance' must give whole numbers 'answerable' and 'unanswerable'"
    training = meta.get("training_data")
    if training is not None:
        datasets = training.get("datasets") if isinstance(training, dict) else None
        if not isinstance(training, dict) or (datasets is not None and not (isinstance(datasets, dict) and all(
                isinstance(d, dict) for d in datasets.values()))):
            return "'training_data' must be an object whose 'datasets' are objects"
    return None


def check_probe_metadata(meta, where) -> dict:
    """``meta`` when :func:`probe_metadata_problem` finds nothing, else one-line :class:`ProbeError`."""
    problem = probe_metadata_problem(meta)
    if problem:
        raise ProbeError(f"{where}: {problem}")
    return meta


def expected_shapes(kind: str, width: int) -> dict[str, tuple[int, ...]]:
    """The tensors (name: shape) of a ``kind`` probe reading ``width`` numbers, computed without
    allocating them (the MLP is built on torch's ``meta`` device)."""
    if kind == "logreg":
        return {"coef": (width,), "intercept": (1,), "scaler_mean": (width,), "scaler_scale": (width,)}
    with torch.device("meta"):
        net = MLPNet(width)
    return {name: tuple(t.shape) for name, t in net.state_dict().items()}


def check_weights_header(weights: Path, kind: str, width: int, n_layers: int) -> None:
    """Refuse, from the header alone, weights whose tensors are not those of a ``kind`` probe of
    ``width`` inputs: the layer count claimed in the JSON is checked before a network is built."""
    found = {name: shape for name, (_, shape) in safetensors_header(weights).items()}
    wanted = expected_shapes(kind, width)
    if found != wanted:
        missing = sorted(set(wanted) - set(found))
        wrong = sorted(k for k in set(wanted) & set(found) if wanted[k] != found[k])
        detail = (f"{wrong[0]} is {list(found[wrong[0]])}, not {list(wanted[wrong[0]])}" if wrong
                  else f"missing {missing[0]}" if missing else f"unexpected {sorted(set(found) - set(wanted))[0]}")
        raise ProbeError(f"probe weights {weights} do not fit a {kind} probe of {n_layers} layers ({detail:.200})")


def load_probe(path: str | Path) -> Probe:
    """Shorthand for :meth:`Probe.load`."""
    return Probe.load(path)


# --------------------------------------------------------------------------------------------------
# training from stored features


def train_from_features(
    df,
    *,
    kind: str = "mlp",
    seed: int = 42,
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
    holdout_datasets: tuple[str, ...] = (),
    max_per_class: int | None = None,
    callback: EpochCallback | None = None,
    sources: list[str] | None = None,
    inputs: str = "rank_ratio",
) -> tuple[Probe, dict[str, Any]]:
    """Train a probe on a feature table (see :mod:`grade.features`) and measure it.

    Rows are split train / validation / test, stratified by dataset and label (seeded), keeping the
    rows of one question (or of one ``group``, where the table has that column) together. Datasets in
    ``holdout_datasets`` are kept out of all three and scored separately: the probe never sees them,
    which measures transfer to a new kind of question. ``max_per_class`` caps each class (random,
    seeded), as the reference does with 1000. ``inputs`` names what the probe reads (:data:`INPUTS`).

    Returns the fitted probe (metadata filled in, metrics included) and the report dict that is
    also stored under ``metadata["metrics"]``.
    """
    from .errors import InputError

    _check_inputs(inputs)
    if df.empty:
        raise InputError("no feature rows to train on")
    for column, what in (("model", "models"), ("loss", "loss variants"), ("srank", "stable-rank variants")):
        values = sorted(df[column].unique())
        if len(values) > 1:
            raise InputError(f"the features mix {what}: {', '.join(values)}; train one probe per combination")
    unknown = set(holdout_datasets) - set(df["dataset"])
    if unknown:
        raise InputError(f"held-out dataset(s) {', '.join(sorted(unknown))} not in the features")
    df = df.reset_index(drop=True)
    held = df["dataset"].isin(holdout_datasets).to_numpy()
    pool = np.flatnonzero(~held)
    if "group" in df and held.any():  # never train on another wording of a held-out question
        pool = pool[~df["group"].iloc[pool].isin(set(df["group"][held])).to_numpy()]
    if max_per_class:
        rng = np.random.default_rng(seed)
        keep = []
        for cls in (0, 1):
            idx = pool[df["label"].to_numpy()[pool] == cls]
            keep.extend(rng.permutation(idx)[:max_per_class].tolist() if len(idx) > max_per_class else idx.tolist())
        pool = np.array(sorted(keep), dtype=int)
    X = probe_inputs(df, inputs)
    y = df["label"].to_numpy().astype(int)
    # Split whole questions: one asked with and without its document lands in one part only; a
    # ``group`` column (e.g. one fact in several wordings) groups rows further.
    group = df.groupby(["group"] if "group" in df else ["dataset", "id"], sort=False).ngroup().to_numpy()
    strata = (df["dataset"].astype(str) + "|" + df["label"].astype(str)).to_numpy()
    first = {}
    for i in pool:
        first.setdefault(group[i], i)
    groups = np.array(list(first))
    parts = stratified_split(strata[[first[g] for g in groups]], fractions=fractions, seed=seed)
    part_of = {g: k for k, idx in enumerate(parts) for g in groups[idx]}
    tr, va, te = (pool[[part_of[group[i]] == k for i in pool]] for k in range(3))
    if min(len(tr), len(va), len(te)) == 0 or len(np.unique(y[tr])) < 2:
        balance = class_balance(y[pool])
        raise InputError(
            f"{balance['n']} rows ({balance['answerable']} answerable, {balance['unanswerable']} unanswerable) are "
            f"too few to split into training ({len(tr)}), validation ({len(va)}) and test ({len(te)}) rows with both "
            "classes in training; add rows or change the fractions"
        )
    info = {
        "model": df["model"].iloc[0],
        "loss": df["loss"].iloc[0],
        "srank": df["srank"].iloc[0],
        "feature_definition": INPUTS[inputs],
        "training_data": {
            "sources": sources or [],
            "datasets": {
                name: {**class_balance(group["label"]), "with_document": int(group["has_context"].sum())}
                for name, group in df.iloc[pool].groupby("dataset")
            },
            "split": {"fractions": list(fractions), "seed": seed, "stratified_by": "dataset and label, whole questions",
                      "train": class_balance(y[tr]), "validation": class_balance(y[va]), "test": class_balance(y[te])},
            "holdout_datasets": list(holdout_datasets),
            "max_per_class": max_per_class,
        },
    }
    probe = Probe(kind, seed=seed, inputs=inputs).fit(X[tr], y[tr], X[va], y[va], callback=callback, info=info)

    def by_dataset(rows):
        out = {}
        for name in sorted(set(df["dataset"].iloc[rows])):
            sub = rows[df["dataset"].to_numpy()[rows] == name]
            out[name] = probe.evaluate(X[sub], y[sub], roc=False)
        return out

    report: dict[str, Any] = {"test": probe.evaluate(X[te], y[te]), "test_by_dataset": by_dataset(te)}
    held_rows = np.flatnonzero(held)
    if len(held_rows):
        report["holdout"] = probe.evaluate(X[held_rows], y[held_rows])
        report["holdout_by_dataset"] = by_dataset(held_rows)
    probe.metadata["metrics"] = report
    return probe, report


def format_metrics(report: dict[str, Any]) -> str:
    """A small text table of a :func:`train_from_features` report."""
    lines = [f"{'split':<10} {'dataset':<22} {'n':>5} {'pos':>5} {'acc':>6} {'auroc':>6}"]

    def row(split, name, m):
        auroc = "  -  " if m["auroc"] is None else f"{m['auroc']:.3f}"
        lines.append(f"{split:<10} {name:<22} {m['n']:>5} {m['positives']:>5} {m['accuracy']:>6.3f} {auroc:>6}")

    for split in ("test", "holdout"):
        if split in report:
            row(split, "(all)", report[split])
            for name, m in report.get(f"{split}_by_dataset", {}).items():
                row(split, name, m)
    return "\n".join(lines)
