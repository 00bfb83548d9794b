"""Result objects: plain data that can save and load itself (JSON, never pickle) and renders nothing."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_VERSION = 1


def _to_jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return _to_jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (np.floating, np.integer)):
        return _to_jsonable(value.item())
    return value


def _array(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    return np.array([[np.nan if v is None else v for v in row] for row in value], dtype=float) if value and isinstance(value[0], list) else np.array([np.nan if v is None else v for v in value], dtype=float)


@dataclass
class StepResult:
    """One reasoning step of a step-wise ``pos`` analysis. Arrays are (L,) or (L, n_tokens)."""

    text: str
    start: int  # index of the step's first token in ``input_ids``
    end: int  # one past its last token
    loss_value: float
    srank_h: np.ndarray
    srank_g: np.ndarray
    rank_ratio: np.ndarray
    token_scores: np.ndarray  # (L, end - start): row sums of C_g for this step's tokens
    eig_h: np.ndarray | None = None  # (L, end) spectra of the prefix ending with this step
    eig_g: np.ndarray | None = None

    _ARRAYS = ("srank_h", "srank_g", "rank_ratio", "token_scores", "eig_h", "eig_g")


@dataclass
class GradeResult:
    """Everything one GRADE analysis of one question produced.

    ``L`` = number of layers, ``n`` = number of tokens analysed (``len(input_ids)``).

    Attributes
    ----------
    rank_ratio : (L,) the GRADE feature vector: ``srank(C_g) / srank(C_h)`` per layer (for step-wise
        ``pos``, the mean over steps).
    srank_h, srank_g : (L,) stable ranks of ``C_h`` and ``C_g``.
    eig_h, eig_g : (L, n) eigenvalue spectra, descending, or None when only features were computed.
    token_scores : (L, n) per-token epistemic shock (row sums of ``C_g``); NaN where a token is not
        scored (prompt tokens under a ``pos`` loss), None for ``pre``.
    last_hidden : (L + 1, d_model) hidden states of the last prompt token (embeddings first), when kept.
    token_surprisal : (n,) cross-entropy (nats) of each response token under a ``pos`` loss, NaN for
        prompt tokens; None for ``pre``.
    """

    model: str
    loss: str
    srank: str
    task: str
    question: str
    context: str | None
    prompt: str
    response: str | None
    input_ids: list[int]
    tokens: list[str]
    response_start: int | None
    loss_value: float
    srank_h: np.ndarray
    srank_g: np.ndarray
    rank_ratio: np.ndarray
    eig_h: np.ndarray | None = None
    eig_g: np.ndarray | None = None
    token_scores: np.ndarray | None = None
    last_hidden: np.ndarray | None = None
    token_surprisal: np.ndarray | None = None
    steps: list[StepResult] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    package_version: str = ""
    #: The analysis' prompt pass for a later pass over an answer (``analyze(keep_prompt_pass=True)``): lives
    #: in this process only, never saved, compared or copied into a dict.
    prompt_pass: Any = field(default=None, repr=False, compare=False)

    _ARRAYS = ("srank_h", "srank_g", "rank_ratio", "eig_h", "eig_g", "token_scores", "last_hidden", "token_surprisal")
    _NOT_SAVED = ("prompt_pass",)

    @property
    def n_layers(self) -> int:
        return int(len(self.rank_ratio))

    @property
    def grade(self) -> float:
        """Mean rank ratio over layers: a one-number summary (the probe uses the whole vector)."""
        return float(np.mean(self.rank_ratio))

    def layer_table(self) -> list[dict[str, float]]:
        return [
            {"layer": i, "srank_h": float(h), "srank_g": float(g), "rank_ratio": float(r)}
            for i, (h, g, r) in enumerate(zip(self.srank_h, self.srank_g, self.rank_ratio))
        ]

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "steps" and f.name not in self._NOT_SAVED}  # steps: written below
        data["steps"] = [{f.name: getattr(s, f.name) for f in fields(s)} for s in self.steps]
        data["layers"] = self.layer_table()
        data["format_version"] = FORMAT_VERSION
        return _to_jsonable(data)

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GradeResult":
        data = dict(data)
        data.pop("layers", None)
        data.pop("format_version", None)
        steps = []
        for raw in data.pop("steps", []):
            raw = dict(raw)
            for key in StepResult._ARRAYS:
                raw[key] = _array(raw.get(key))
            steps.append(StepResult(**raw))
        for key in cls._ARRAYS:
            data[key] = _array(data.get(key))
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known}, steps=steps)

    def save(self, path: str | Path) -> None:
        """Write the JSON atomically: a reader (or a crash) never sees half a file."""
        from ..common.io import atomic_write

        atomic_write(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> "GradeResult":
        return cls.from_dict(json.loads(Path(path).read_text()))
