"""The probe estimator (:class:`Probe`: ``fit`` / ``predict_proba`` / ``predict`` / ``score``, saved and loaded
through :mod:`grade.verdict.probe.files`) and the seeded stratified split its early selection and the training use."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ... import __version__
from ..artifacts import check_finite_scores, check_finite_tensors, model_key, save_artifact
from ...common.errors import ProbeError
from ...common.metrics import binary_metrics, class_balance
from .files import PROBE_FORMAT, read_probe_files
from .inputs import INPUTS, MAX_INPUT_MAGNITUDE, check_inputs, input_width, layers_of, probe_inputs
from .network import KINDS, MLPNet

EpochCallback = Callable[[int, int, dict[str, float]], None]  # (epoch, max epochs, metrics)


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
        check_inputs(inputs)
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
        for part, values in (("training", X), ("validation", X_val)):
            if values.size and np.abs(values).max() > MAX_INPUT_MAGNITUDE:  # would overflow the training
                rows = np.flatnonzero((np.abs(values) > MAX_INPUT_MAGNITUDE).any(axis=1))
                raise ProbeError(f"{len(rows)} {part} row(s) (first: row {rows[0] + 1}) hold values beyond "
                                 f"±{MAX_INPUT_MAGNITUDE:g}; no real feature comes near that")
        if len(np.unique(y)) < 2:
            raise ProbeError("the training data holds one class only; a probe needs answerable and unanswerable rows")
        if layers_of(self.inputs, X.shape[1]) is None:
            raise ProbeError(f"{X.shape[1]} numbers per row are not {self.inputs!r} inputs of any layer count")
        self.n_features_in_ = X.shape[1]
        if self.kind == "mlp":
            self._fit_mlp(X, y, X_val, y_val, callback)
        else:
            self._fit_logreg(X, y, X_val, y_val, callback)
        check_finite_tensors(self.tensors(), "probe")  # a diverged training is an error, never a probe
        val_scores = self.predict_proba(X_val)[:, 1]
        check_finite_scores(val_scores, "probe")
        self.metadata = {
            **(info or {}),
            "kind": self.kind,
            "inputs": self.inputs,
            "n_layers": self.n_layers,
            "threshold": self.threshold,
            "seed": self.seed,
            "train_balance": class_balance(y),
            "val_balance": class_balance(y_val),
            "val_metrics": binary_metrics(y_val, val_scores, threshold=self.threshold, roc=False),
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
        return None if self.n_features_in_ is None else layers_of(self.inputs, self.n_features_in_)

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
        """P(answerable) for one :class:`~grade.gradients.result.GradeResult`, after checking it fits this probe."""
        self.check_compatible(result.model, result.n_layers, result.loss, srank=result.srank)
        return float(self.predict_proba(probe_inputs(result, self.inputs))[0, 1])

    # ---- compatibility -------------------------------------------------------------------------

    def check_compatible(self, lm_or_name, n_layers: int | None = None, loss: str | None = None, *,
                         srank: str | None = None) -> None:
        """Raise ProbeError unless this probe was trained for this model, depth, loss and srank variant.

        ``lm_or_name``: a :class:`~grade.models.models.LoadedModel` (its name and layer count are used) or a
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
        weights, meta, tensors = read_probe_files(path)
        kind, n_layers, inputs = meta["kind"], meta["n_layers"], meta.get("inputs", "rank_ratio")
        width = input_width(inputs, n_layers)
        threshold, seed = meta.get("threshold", 0.5), meta.get("seed", 42)
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


def load_probe(path: str | Path) -> Probe:
    """Shorthand for :meth:`Probe.load`."""
    return Probe.load(path)
