"""The probes' two kinds and the tensors each is made of: the GRADE paper's MLP (:class:`MLPNet`) and a
standardised logistic regression (:func:`expected_shapes` gives either's tensors without building them)."""

from __future__ import annotations

import torch
from torch import nn

KINDS = ("mlp", "logreg")
HIDDEN_SIZES = (256, 128, 64, 32)


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


def expected_shapes(kind: str, width: int) -> dict[str, tuple[int, ...]]:
    """The tensors (name: shape) of a ``kind`` probe reading ``width`` numbers, computed without
    allocating them (the MLP is built on torch's ``meta`` device)."""
    if kind == "logreg":
        return {"coef": (width,), "intercept": (1,), "scaler_mean": (width,), "scaler_scale": (width,)}
    with torch.device("meta"):
        net = MLPNet(width)
    return {name: tuple(t.shape) for name, t in net.state_dict().items()}
