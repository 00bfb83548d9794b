"""The detectors' estimators, sklearn-like (``fit`` / ``predict_proba``): :class:`KindLogistic` (one scalar, a
slope and an intercept per kind of question) and :class:`SaplmaMLP` (the benchmark's SAPLMA recipe). Each
gives its tensors for a file and is rebuilt from them (:mod:`grade.verdict.detectors.files`)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from ...common.errors import ProbeError
from ..probe import Probe


class KindLogistic:
    """Logistic regression on one scalar statistic with a slope and an intercept per kind of question.

    A summed entropy grows with the answer's length and the classes' shares differ between datasets, so
    one cut for all kinds would call every long answer unknown; per kind, the statistic is read on its
    own scale. Inputs to :class:`grade.verdict.probe.Probe`'s standardised logistic regression (C picked on the
    validation AUROC): ``[x * 1{kind = k} for k] + [1{kind = k} for k]``.

    ``fit(x, kinds, y, x_val, kinds_val, y_val)``: x (n,) or (n, 1), kinds (n,) names, y (n,) 0/1.
    ``predict_proba(x, kinds)``: (n, 2) [P(unanswerable), P(answerable)].
    """

    def __init__(self, kinds: Sequence[str] = (), seed: int = 42):
        self.kinds = list(kinds)
        self.seed = seed
        self.probe = None

    def _design(self, x, kinds) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        kinds = np.asarray(kinds, dtype=object).reshape(-1)
        if len(kinds) != len(x):
            raise ProbeError(f"{len(x)} values but {len(kinds)} kinds of question")
        unknown = sorted(set(kinds) - set(self.kinds))
        if unknown:
            raise ProbeError(f"kind(s) of question {', '.join(map(str, unknown))} not among this detector's "
                             f"({', '.join(self.kinds)})")
        onehot = (kinds[:, None] == np.array(self.kinds, dtype=object)[None, :]).astype(np.float64)
        return np.concatenate([x[:, None] * onehot, onehot], axis=1)

    def fit(self, x, kinds, y, x_val, kinds_val, y_val) -> "KindLogistic":
        self.kinds = sorted(set(np.asarray(kinds, dtype=object).tolist()) | set(self.kinds))
        self.probe = Probe("logreg", seed=self.seed).fit(self._design(x, kinds), y, self._design(x_val, kinds_val), y_val)
        return self

    def predict_proba(self, x, kinds) -> np.ndarray:
        if self.probe is None:
            raise ProbeError("this detector is not fitted yet")
        return self.probe.predict_proba(self._design(x, kinds))

    @property
    def training(self) -> dict[str, Any]:
        return {**self.probe.metadata.get("training", {}), "inputs": "x * one-hot(kind), one-hot(kind); standardised"}

    def tensors(self) -> dict[str, torch.Tensor]:
        return self.probe.tensors()

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], kinds: list[str], seed: int = 42) -> "KindLogistic":
        width = 2 * len(kinds)
        probe = Probe("logreg", seed=seed)
        probe.coef_ = tensors["coef"].double().numpy()
        probe.intercept_ = float(tensors["intercept"][0])
        probe.mean_ = tensors["scaler_mean"].double().numpy()
        probe.scale_ = tensors["scaler_scale"].double().numpy()
        if not (probe.coef_.shape == probe.mean_.shape == probe.scale_.shape == (width,)) or not (probe.scale_ > 0).all():
            raise ValueError(f"coefficients do not fit {len(kinds)} kinds of question")
        probe.n_features_in_ = width
        model = cls(kinds, seed)
        model.probe = probe
        return model


class SaplmaNet(nn.Module):
    """d -> 256 -> 128 -> 64 -> 1 logit, ReLU (Azaria & Mitchell 2023)."""

    def __init__(self, n_inputs: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_inputs, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                                 nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, d) -> logits (batch,)."""
        return self.net(x).squeeze(-1)


class SaplmaMLP:
    """SAPLMA: :class:`SaplmaNet`, sigmoid and BCE; Adam lr 1e-3, 5 epochs, batch 32, no early stopping.
    Inputs are standardised with the training mean and standard deviation (hidden-state scales differ by
    orders of magnitude between models; the original works on raw states of larger models). The
    benchmark's SAPLMA (:class:`grade.studies.SAPLMA`) is this estimator.

    ``fit(X, y)``: X (n, d), y (n,) 0/1. ``predict_proba(X)``: (n, 2).
    """

    def __init__(self, seed: int = 42, epochs: int = 5, batch_size: int = 32, lr: float = 1e-3):
        self.seed, self.epochs, self.batch_size, self.lr = seed, epochs, batch_size, lr
        self.net: SaplmaNet | None = None
        self.mean: np.ndarray | None = None  # (d,)
        self.std: np.ndarray | None = None  # (d,)
        self.half = False  # weights rounded to (and stored in) float16

    def fit(self, X, y) -> "SaplmaMLP":
        x = np.asarray(X, dtype=np.float64)
        self.mean, self.std = x.mean(0), x.std(0) + 1e-6
        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        self.net = SaplmaNet(x.shape[1])
        opt = torch.optim.Adam(self.net.parameters(), lr=self.lr)
        xt = torch.tensor((x - self.mean) / self.std, dtype=torch.float32)
        yt = torch.tensor(np.asarray(y), dtype=torch.float32)
        loss_fn = nn.BCEWithLogitsLoss()
        with torch.enable_grad():
            self.net.train()
            for _ in range(self.epochs):
                order = rng.permutation(len(xt))
                for start in range(0, len(order), self.batch_size):
                    batch = order[start:start + self.batch_size]
                    opt.zero_grad()
                    loss = loss_fn(self.net(xt[batch]), yt[batch])
                    loss.backward()
                    opt.step()
        self.net.eval()
        return self

    def half_precision(self) -> "SaplmaMLP":
        """Round the network's weights to float16 (computing stays float32). A shipped detector is stored
        so: its first layer is most of the file (1536 x 256 weights for Qwen), the hidden states it reads
        are float16 already, and rounding before the test metrics are measured makes the saved detector
        exactly the measured one."""
        with torch.no_grad():
            for param in self.net.parameters():
                param.copy_(param.half().float())
        self.half = True
        return self

    def predict_proba(self, X, kinds=None) -> np.ndarray:
        if self.net is None:
            raise ProbeError("this detector is not fitted yet")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.mean):
            raise ProbeError(f"this detector reads vectors of {len(self.mean)} values, not shape {X.shape}")
        x = torch.tensor((X - self.mean) / self.std, dtype=torch.float32)
        with torch.no_grad():
            p = torch.sigmoid(self.net(x)).double().numpy()
        return np.stack([1 - p, p], axis=1)

    @property
    def training(self) -> dict[str, Any]:
        return {"epochs": self.epochs, "batch_size": self.batch_size, "lr": self.lr, "optimizer": "Adam",
                "selection": "none (fixed recipe)", "inputs": "standardised with the training mean and std"}

    def tensors(self) -> dict[str, torch.Tensor]:
        dtype = torch.float16 if self.half else torch.float32
        return {**{f"net.{k}": v.detach().to(dtype if v.is_floating_point() else v.dtype).contiguous()
                   for k, v in self.net.state_dict().items()},
                "scaler_mean": torch.tensor(self.mean, dtype=torch.float64),
                "scaler_std": torch.tensor(self.std, dtype=torch.float64)}

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], n_inputs: int, seed: int = 42) -> "SaplmaMLP":
        model = cls(seed)
        model.mean = tensors["scaler_mean"].double().numpy()
        model.std = tensors["scaler_std"].double().numpy()
        if model.mean.shape != (n_inputs,) or model.std.shape != (n_inputs,) or not (model.std > 0).all():
            raise ValueError(f"the scaler does not fit {n_inputs} inputs")
        net = SaplmaNet(n_inputs)
        # float16 weights (a shipped detector) are read into the float32 network exactly
        net.load_state_dict({k.removeprefix("net."): v.float() if v.is_floating_point() else v
                             for k, v in tensors.items() if k.startswith("net.")}, strict=True)
        net.eval()
        model.net = net
        model.half = any(v.dtype == torch.float16 for k, v in tensors.items() if k.startswith("net."))
        return model
