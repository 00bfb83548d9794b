"""A step verifier: which step of a reasoning trace goes wrong first, or none, from one forward pass.

Process-reward-model style. The model reads question and trace once (forward only, no gradients);
each step k gets features from that pass (:func:`step_features`): the residual stream at the step's last
token at a few depths, token surprisal, the step's loss and the arithmetic / provenance check of
:mod:`grade.steps.step_checks`. A small classifier (:class:`StepVerifier`: a projection of the hidden
states and a logistic regression) turns them into per-step probabilities (``target``: of step k being the
first wrong one, or of an error by step k). The suspect step is the first step whose probability passes a
threshold chosen on annotated dev traces; where none does, the answer is "no wrong step". With the
``localizer`` a second head on the same inputs, trained to pick a wrong trace's first wrong step among its
steps, spreads the trace's probability of a wrong step over its steps: the verdict is its likeliest step
where that probability passes the threshold.

Three layers, as in :mod:`grade.steps.locate`: the model pass (:func:`step_features`), a pure estimator
(:class:`StepVerifier`, numpy at prediction time) and what the studio calls (:func:`verify_trace`).
Steps are 0-based in arrays and 1-based where a user sees them (``suspect_step``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ..common.errors import GradeError
from ..gradients.losses import split_steps, token_char_ends
from .scoring import first_error_f1
from .step_checks import check_steps

#: Depths (fractions of the layer count) whose hidden states :func:`step_features` keeps; the verifier
#: uses a subset of them (``StepVerifier.layers``). 1.0 is the last layer's output (after the final norm).
FEATURE_DEPTHS = (0.25, 0.5, 0.625, 0.75, 0.875, 1.0)
#: Per-step scalars of :func:`step_features`, in this order.
SCALARS = ("surprisal_max", "surprisal_mean", "surprisal_max_z", "log_tokens", "position", "is_last",
           "check_arithmetic", "check_provenance", "check_so_far", "surprisal_max_so_far_z")
#: The prompt style the traces are read with: the one the labeller sampled them with (a GSM8K reply is
#: scored as the model's own answer to the GSM8K prompt).
DEFAULT_TASK = "gsm8k"
#: Package data: ``<model>.json`` + ``<model>.safetensors``, the shipped verifier of an embedded model.
ASSET_DIR = "assets/step_verifier"
FORMAT = "grade-step-verifier"
FORMAT_VERSION = 1


def _layer_indices(n_layers: int) -> list[int]:
    """Indices into ``hidden_states`` (0 = embeddings, n_layers = last layer) of :data:`FEATURE_DEPTHS`."""
    return [int(round(f * n_layers)) for f in FEATURE_DEPTHS]


@dataclass
class TraceFeatures:
    """Per-step features of one trace (K steps of :func:`grade.gradients.losses.split_steps`).

    hidden : (K, len(FEATURE_DEPTHS), D) float32, the residual stream at each step's last token.
    scalars : (K, len(SCALARS)) float32.
    """

    hidden: np.ndarray
    scalars: np.ndarray
    n_tokens: int = 0
    findings: list[list[dict]] = field(default_factory=list)

    @property
    def n_steps(self) -> int:
        return int(self.scalars.shape[0])

    def save(self, path: str | Path) -> None:
        """npz (float16 hidden states: features, not weights; half the disk of a cache)."""
        np.savez(path, hidden=self.hidden.astype(np.float16), scalars=self.scalars,
                 n_tokens=np.array(self.n_tokens), findings=np.array(json.dumps(self.findings)))

    @classmethod
    def load(cls, path: str | Path) -> "TraceFeatures":
        with np.load(path) as data:
            return cls(data["hidden"].astype(np.float32), data["scalars"].astype(np.float32), int(data["n_tokens"]),
                       json.loads(str(data["findings"])))


def _z(x: np.ndarray) -> np.ndarray:
    sd = float(np.std(x))
    return (x - float(np.mean(x))) / sd if sd > 0 else np.zeros_like(x)


def step_scalars(surprisal: Sequence[np.ndarray], findings: Sequence[Sequence[dict]]) -> np.ndarray:
    """(K, len(SCALARS)) from each step's token surprisals (nats; a step without tokens: empty) and check
    findings. Pure: no model."""
    k = len(findings)
    s_max = np.array([float(np.max(s)) if len(s) else 0.0 for s in surprisal])
    s_mean = np.array([float(np.mean(s)) if len(s) else 0.0 for s in surprisal])
    n_tok = np.array([len(s) for s in surprisal], dtype=float)
    arith = np.array([any(f["kind"] == "arithmetic" for f in found) for found in findings], dtype=float)
    prov = np.array([any(f["kind"] == "provenance" for f in found) for found in findings], dtype=float)
    z_max = _z(s_max)
    columns = {
        "surprisal_max": s_max, "surprisal_mean": s_mean, "surprisal_max_z": z_max,
        "log_tokens": np.log1p(n_tok), "position": np.arange(k) / max(k - 1, 1),
        "is_last": (np.arange(k) == k - 1).astype(float),
        "check_arithmetic": arith, "check_provenance": prov,
        # "by step k" features: an error found earlier stays found (p_k is cumulative)
        "check_so_far": np.maximum.accumulate(np.maximum(arith, prov)) if k else np.zeros(0),
        "surprisal_max_so_far_z": np.maximum.accumulate(z_max) if k else np.zeros(0),
    }
    return np.stack([columns[n] for n in SCALARS], axis=1).astype(np.float32)


def _trace_ids(lm, question: str, trace: str, task: str) -> tuple[list[int], list[int]]:
    from ..models.generation import encode_prompt
    from ..tasks.prompts import format_prompt

    prompt_ids = encode_prompt(lm.tokenizer, format_prompt(lm.tokenizer, question, task=task))
    response_ids = lm.tokenizer(trace, add_special_tokens=False)["input_ids"]
    return prompt_ids, response_ids


def step_token_ranges(tokenizer, response_ids: list[int], spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """[first, end) response-token range of each character span: a token belongs to the step in which it
    starts (as :func:`grade.gradients.losses.steps_for_response`), but a step too short to own a token keeps
    an empty range here instead of merging, so that step k stays the annotators' step k."""
    ends = token_char_ends(tokenizer, response_ids)
    starts = [0] + ends[:-1]
    out, token = [], 0
    for _, char_end in spans:
        first = token
        while token < len(response_ids) and starts[token] < char_end:
            token += 1
        out.append((first, token))
    return out


def step_features(lm, question: str, trace: str, *, task: str = DEFAULT_TASK) -> TraceFeatures:
    """Per-step features of ``trace`` read by ``lm`` as its answer to ``question``: one forward pass.

    Returns :class:`TraceFeatures` with hidden (K, len(FEATURE_DEPTHS), D) and scalars (K, len(SCALARS)),
    K = ``len(split_steps(trace))``.
    """
    return _read(lm, [_prepare(lm, question, trace, task)])[0]


def step_features_batch(lm, traces: Sequence[tuple[str, str, str]], *,
                        batch_size: int | None = None) -> list[TraceFeatures | GradeError]:
    """:func:`step_features` of many ``(question, trace, task)``: the forward passes of traces of like length
    batched (:func:`grade.models.sizing.batches`: as many as the device's memory holds, ``batch_size`` where
    given). Right-padded: a causal model's states at a trace's own tokens never see the padding after them, so
    each trace's features are its own pass's (to float rounding). Returns, per trace in order, its features or
    the error that refuses it (too long for the model, no steps)."""
    from ..models.sizing import batches

    out: list[TraceFeatures | GradeError | None] = [None] * len(traces)
    ready = []
    for k, (question, trace, task) in enumerate(traces):
        try:
            ready.append((k, _prepare(lm, question, trace, task)))
        except GradeError as exc:
            out[k] = exc
    lengths = [len(p.prompt_ids) + len(p.response_ids) for _, p in ready]
    longest_answer = max((len(p.response_ids) for _, p in ready), default=1)
    for group in batches(lm, lengths, kind="forward", override=batch_size, logits_per_row=longest_answer):
        for k, features in zip([ready[i][0] for i in group], _read(lm, [ready[i][1] for i in group])):
            out[k] = features
    return out


@dataclass
class _Prepared:
    """One trace tokenised for the reader: its steps' character spans and token ranges."""

    question: str
    trace: str
    spans: list[tuple[int, int]]
    prompt_ids: list[int]
    response_ids: list[int]
    ranges: list[tuple[int, int]]


def _prepare(lm, question: str, trace: str, task: str) -> _Prepared:
    from ..common.errors import InputError

    spans = split_steps(trace)
    if not spans:
        raise InputError("the trace has no steps")
    prompt_ids, response_ids = _trace_ids(lm, question, trace, task)
    if len(prompt_ids) + len(response_ids) > lm.max_context:
        raise InputError(f"question and trace have {len(prompt_ids) + len(response_ids)} tokens; this model "
                         f"accepts at most {lm.max_context}")
    return _Prepared(question, trace, spans, prompt_ids, response_ids,
                     step_token_ranges(lm.tokenizer, response_ids, spans))


def _read(lm, prepared: Sequence[_Prepared]) -> list[TraceFeatures]:
    """One forward pass over ``prepared`` traces (right-padded), and each trace's features."""
    import torch

    rows = [p.prompt_ids + p.response_ids for p in prepared]
    width = max(len(r) for r in rows)
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=lm.device)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=lm.device)
    with lm.lock, torch.no_grad():
        out = lm.model(input_ids=ids, attention_mask=mask if len(rows) > 1 else None, output_hidden_states=True,
                       use_cache=False)
    layers = _layer_indices(len(out.hidden_states) - 1)
    features = []
    for b, p in enumerate(prepared):
        n_prompt, n = len(p.prompt_ids), len(rows[b])
        logits = out.logits[b, n_prompt - 1: n - 1].float()
        surprisal = torch.nn.functional.cross_entropy(logits, ids[b, n_prompt:n], reduction="none").cpu().numpy()
        # a step with no token of its own is read at the last token before it (what the model had seen)
        last = [max(end - 1, 0) if end > first else max(first - 1, 0) for first, end in p.ranges]
        positions = torch.tensor([n_prompt + t for t in last], device=ids.device)
        hidden = torch.stack([out.hidden_states[i][b, positions].float() for i in layers], dim=1).cpu().numpy()
        texts = [p.trace[a:c] for a, c in p.spans]
        findings = [[f.to_dict() for f in found] for found in check_steps(p.question, texts)]
        scalars = step_scalars([surprisal[a:c] for a, c in p.ranges], findings)
        features.append(TraceFeatures(hidden.astype(np.float32), scalars, n, findings))
    return features


def trace_key(model: str, question: str, trace: str, task: str = DEFAULT_TASK) -> str:
    """A cache key of one trace's features: the model, prompt style, question and trace text."""
    return hashlib.sha1("\x00".join((model, task, question, trace)).encode()).hexdigest()[:20]


def cached_features(lm, question: str, trace: str, folder: str | Path, *, task: str = DEFAULT_TASK) -> TraceFeatures:
    """:func:`step_features`, computed once per (model, task, question, trace) and kept under ``folder``."""
    path = Path(folder) / f"{trace_key(lm.name, question, trace, task)}.npz"
    if path.is_file():
        return TraceFeatures.load(path)
    features = step_features(lm, question, trace, task=task)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    features.save(tmp)
    tmp.replace(path)
    return features


# ------------------------------------------------------------------------------------------------
# the estimator


def step_targets(n_steps: int, first_wrong: int | None, target: str) -> tuple[np.ndarray, np.ndarray]:
    """(y (K,), used (K,) bool) of one trace; ``first_wrong`` 0-based or None.

    ``cumulative``: y_k = 1 from the first wrong step on (an error has occurred by step k).
    ``first``: y_k = 1 at the first wrong step only, the steps after it left out of training.
    """
    k = np.arange(n_steps)
    if first_wrong is None:
        return np.zeros(n_steps), np.ones(n_steps, dtype=bool)
    if target == "cumulative":
        return (k >= first_wrong).astype(float), np.ones(n_steps, dtype=bool)
    if target == "first":
        return (k == first_wrong).astype(float), k <= first_wrong
    raise ValueError(f"unknown target {target!r}; cumulative or first")


def _fit_listwise(traces: Sequence[tuple[np.ndarray, int, float]], penalty: float) -> np.ndarray:
    """(d,) weights w of a softmax over each trace's steps, ``softmax(X w)``, maximising the weighted mean
    log-probability of each trace's first wrong step minus ``penalty * |w|^2``; traces: (X (K, d), first wrong
    step, weight) of the wrong traces."""
    from scipy.optimize import minimize

    total = sum(wt for _, _, wt in traces) or 1.0

    def loss(w):
        value, grad = penalty * float(w @ w), 2 * penalty * w
        for X, e, wt in traces:
            s = X @ w
            q = np.exp(s - s.max())
            q /= q.sum()
            value -= wt / total * float(np.log(q[e] + 1e-300))
            grad = grad - wt / total * (X[e] - q @ X)
        return value, grad

    return minimize(loss, np.zeros(traces[0][0].shape[1]), jac=True, method="L-BFGS-B").x


class StepVerifier:
    """Per-step probability that the trace has gone wrong, from :class:`TraceFeatures`.

    Parameters
    ----------
    layers : indices into :data:`FEATURE_DEPTHS` whose hidden states are used (empty: scalars only).
    n_components : the hidden states (concatenated over ``layers``, standardised) are projected on this many
        principal components before the logistic regression.
    scalars : names of :data:`SCALARS` used.
    target : ``cumulative`` (p_k = P(error by step k); ranking by its rise) or ``first`` (p_k = P(step k is the
        first wrong step); ranking by p_k), see :func:`step_targets`.
    C : inverse L2 strength of the logistic regression.
    localizer : also fit a second linear head on the same inputs that says *which* step of a wrong trace is its
        first wrong one (a softmax over the trace's steps, trained on the wrong traces alone: a listwise target
        that ranks a trace's steps against each other, where the logistic regression scores each step against
        every step of every trace). Its output is then ``P_k = w * softmax(s)_k``: the logistic regression's
        largest p_k as the trace's wrongness w, spread over the steps by the head's scores s, so that
        ``sum(P) = w`` and the most suspect step is the head's; ``first`` target only.
    threshold : without the localizer the suspect step is the first with p_k > threshold; with it, the step of
        the largest P_k where ``sum(P) > threshold`` (:meth:`choose_threshold` sets it); threshold_right : the same
        where the trace's final answer is known to be right (:meth:`suspect`).
    level_thresholds : ``{level: {"threshold": .., "threshold_right": ..}}``, the two thresholds of traces of one
        level (``gsm8k``, ``math``: :func:`trace_level`) where they were chosen on that level's own dev traces; a
        level not named here takes ``threshold`` and ``threshold_right``.

    Fitted attributes (all numpy, saved as safetensors): ``h_mean_`` (H,), ``h_scale_`` (H,), ``components_``
    (P, H), ``s_mean_`` (S,), ``s_scale_`` (S,), ``coef_`` (P + S,), ``intercept_``; with the localizer
    ``loc_coef_`` (P + S,).
    """

    #: L2 penalty of the localizer's mean log-likelihood (its dev top-1 was the same from 1e-3 to 1e-1)
    LOCALIZER_PENALTY = 0.01

    def __init__(self, layers: Sequence[int] = (3, 5), n_components: int = 32, scalars: Sequence[str] = SCALARS,
                 target: str = "cumulative", C: float = 0.1, threshold: float = 0.5,
                 threshold_right: float | None = None, level_thresholds: dict | None = None,
                 localizer: bool = False):
        if localizer and target != "first":
            raise ValueError("the localizer spreads the first-step target's wrongness: target must be 'first'")
        self.layers = tuple(int(i) for i in layers)
        self.n_components = int(n_components)
        self.scalars = tuple(scalars)
        self.target = target
        self.C = float(C)
        self.localizer = bool(localizer)
        self.threshold = float(threshold)
        self.threshold_right = float(threshold if threshold_right is None else threshold_right)
        self.level_thresholds = {str(level): {k: float(v[k]) for k in ("threshold", "threshold_right")}
                                 for level, v in (level_thresholds or {}).items()}
        self.info: dict = {}

    def get_params(self) -> dict:
        params = {"layers": list(self.layers), "n_components": self.n_components, "scalars": list(self.scalars),
                  "target": self.target, "C": self.C, "threshold": self.threshold,
                  "threshold_right": self.threshold_right}
        if self.localizer:  # absent from the files of verifiers without one, which read as before
            params["localizer"] = True
        return {**params, "level_thresholds": self.level_thresholds} if self.level_thresholds else params

    def thresholds(self, level: str | None = None) -> tuple[float, float]:
        """``(threshold, threshold_right)`` of a trace of ``level`` (its own where chosen for it, else the pooled)."""
        own = self.level_thresholds.get(level) if level else None
        return (own["threshold"], own["threshold_right"]) if own else (self.threshold, self.threshold_right)

    def _raw(self, f: TraceFeatures) -> tuple[np.ndarray, np.ndarray]:
        hidden = f.hidden[:, list(self.layers)].reshape(f.n_steps, -1) if self.layers else np.zeros((f.n_steps, 0))
        cols = [SCALARS.index(n) for n in self.scalars]
        return hidden.astype(np.float64), f.scalars[:, cols].astype(np.float64)

    def fit(self, traces: Sequence[TraceFeatures], first_wrong: Sequence[int | None],
            weights: Sequence[float] | None = None) -> "StepVerifier":
        """traces : K_i steps each; first_wrong : 0-based first wrong step of each, None = all correct;
        weights : per trace (default 1), spread over its steps so that long traces do not count more."""
        from sklearn.linear_model import LogisticRegression

        weights = np.ones(len(traces)) if weights is None else np.asarray(weights, dtype=float)
        H, S, y, w = [], [], [], []
        for f, e, wt in zip(traces, first_wrong, weights):
            target, used = step_targets(f.n_steps, e, self.target)
            h, s = self._raw(f)
            H.append(h[used]), S.append(s[used]), y.append(target[used])
            w.append(np.full(int(used.sum()), wt / max(int(used.sum()), 1)))
        H, S, y, w = np.concatenate(H), np.concatenate(S), np.concatenate(y), np.concatenate(w)
        if H.shape[1]:
            self.h_mean_, sd = H.mean(axis=0), H.std(axis=0)
            self.h_scale_ = np.where(sd > 1e-8, sd, 1.0)
            Z = (H - self.h_mean_) / self.h_scale_
            # the largest principal directions of the standardised states; randomized: a full SVD of
            # (steps, layers x D) costs tens of seconds on a shared CPU for the same leading directions
            from sklearn.utils.extmath import randomized_svd

            _, _, vt = randomized_svd(Z - Z.mean(axis=0), min(self.n_components, *Z.shape), random_state=0)
            self.components_ = vt
        else:
            self.h_mean_ = self.h_scale_ = np.zeros(0)
            self.components_ = np.zeros((0, 0))
        self.s_mean_, sd = S.mean(axis=0), S.std(axis=0)
        self.s_scale_ = np.where(sd > 1e-8, sd, 1.0)
        X = self._design(H, S)
        # balanced: correct steps outnumber wrong ones several times over
        pos = float((w * y).sum()) or 1.0
        neg = float((w * (1 - y)).sum()) or 1.0
        w = w * np.where(y > 0, 0.5 / pos, 0.5 / neg) * len(y)
        model = LogisticRegression(C=self.C, max_iter=5000).fit(X, y, sample_weight=w)
        self.coef_, self.intercept_ = model.coef_[0], float(model.intercept_[0])
        names = ["h_mean_", "h_scale_", "components_", "s_mean_", "s_scale_", "coef_"]
        if self.localizer:
            wrong = [(self._design(*self._raw(f)), int(e), wt) for f, e, wt in zip(traces, first_wrong, weights)
                     if e is not None]
            self.loc_coef_ = _fit_listwise(wrong, self.LOCALIZER_PENALTY)
            names.append("loc_coef_")
        # kept at the precision they are saved with, so that a loaded verifier predicts bit for bit the same
        for name in names:
            setattr(self, name, getattr(self, name).astype(np.float32).astype(np.float64))
        self.intercept_ = float(np.float32(self.intercept_))
        return self

    def _design(self, H: np.ndarray, S: np.ndarray) -> np.ndarray:
        parts = []
        if self.components_.size:
            parts.append(((H - self.h_mean_) / self.h_scale_) @ self.components_.T)
        parts.append((S - self.s_mean_) / self.s_scale_)
        return np.concatenate(parts, axis=1)

    def predict_proba(self, f: TraceFeatures) -> np.ndarray:
        """(K,) p_k of one trace (see ``target``); with the localizer P_k (see ``localizer``)."""
        if not hasattr(self, "coef_"):
            raise RuntimeError("the step verifier is not fitted")
        X = self._design(*self._raw(f))
        p = 1.0 / (1.0 + np.exp(-(X @ self.coef_ + self.intercept_)))
        if not self.localizer:
            return p
        s = X @ self.loc_coef_
        e = np.exp(s - s.max())
        return float(p.max()) * e / e.sum()

    def step_scores(self, p: np.ndarray) -> np.ndarray:
        """(K,) ranking scores, higher = more likely the first wrong step: the rise of p_k (cumulative
        target) or p_k itself (first, and the localizer's P_k)."""
        return np.diff(p, prepend=0.0) if self.target == "cumulative" else np.asarray(p)

    def decision_values(self, p: np.ndarray) -> np.ndarray:
        """The values of one trace's output at which its verdict can change with the threshold: each p_k (the
        first over the threshold), or with the localizer the one ``sum(P)``."""
        return np.array([float(np.sum(p))]) if self.localizer else np.asarray(p, dtype=float)

    def suspect(self, p: np.ndarray, threshold: float | None = None, final_correct: bool | None = None,
                level: str | None = None) -> int | None:
        """0-based suspect step, or None (no wrong step): the first step with p_k > threshold, or with the
        localizer the step of the largest P_k where ``sum(P) > threshold``.

        final_correct : whether the trace's final answer matches the gold one, where that is known (an evaluation
        run's traces). Known wrong: some step is wrong, so the most suspect step (:meth:`step_scores`), whatever
        ``threshold``; known right: the rule above with ``threshold_right`` (the final answer of most such traces
        is right because every step is). Unknown: with ``threshold``. A ``threshold`` given replaces either.
        level : the trace's level (:func:`trace_level`): its own thresholds where the verifier has them.
        """
        p = np.asarray(p, dtype=float)
        if final_correct is False:
            return int(np.argmax(self.step_scores(p)))
        unknown, right = self.thresholds(level)
        tau = threshold if threshold is not None else right if final_correct else unknown
        if self.localizer:
            return int(np.argmax(p)) if float(np.sum(p)) > tau else None
        over = np.flatnonzero(p > tau)
        return int(over[0]) if over.size else None

    @staticmethod
    def _best(candidates: np.ndarray, score) -> float:
        """The candidate threshold of the highest ``score(tau)`` (first on ties), moved midway to the next one:
        the rule chosen, not a value on a training trace's edge."""
        values = [score(tau) for tau in candidates]
        i = int(np.argmax(values))
        return float((candidates[i] + candidates[i + 1]) / 2) if i + 1 < len(candidates) else float(candidates[i])

    def choose_threshold(self, probs: Sequence[np.ndarray], first_wrong: Sequence[int | None],
                         final_correct: Sequence[bool | None] | None = None) -> dict:
        """Set ``threshold`` to the value that maximises the first-error F1 (:func:`first_error_f1`) over these
        (dev) traces; with ``final_correct`` (per trace) also ``threshold_right``, the best F1 where the final
        answers are known. Returns {"threshold", "f1", "wrong_exact", "none_acc"} of the unknown-answer rule and,
        with ``final_correct``, ``known``: the same of the known-answer rule."""
        candidates = np.unique(np.concatenate([self.decision_values(p) for p in probs] + [np.array([1.0])]))
        self.threshold = self._best(candidates, lambda tau: first_error_f1(
            [self.suspect(p, tau) for p in probs], first_wrong)["f1"])
        best = {"threshold": self.threshold, **first_error_f1([self.suspect(p) for p in probs], first_wrong)}
        if final_correct is not None:
            def known(tau=None):
                if tau is not None:
                    self.threshold_right = tau
                return first_error_f1([self.suspect(p, final_correct=c) for p, c in zip(probs, final_correct)],
                                      first_wrong)

            self.threshold_right = self._best(candidates, lambda tau: known(tau)["f1"])
            best["known"] = {"threshold_right": self.threshold_right, **known()}
        return best

    # ---- files: JSON (settings, provenance, measured numbers) + safetensors (arrays)

    def _tensors(self) -> dict[str, np.ndarray]:
        tensors = {"h_mean": self.h_mean_, "h_scale": self.h_scale_, "components": self.components_,
                   "s_mean": self.s_mean_, "s_scale": self.s_scale_, "coef": self.coef_,
                   "intercept": np.array([self.intercept_])}
        return {**tensors, "loc_coef": self.loc_coef_} if self.localizer else tensors

    def save(self, path: str | Path) -> tuple[Path, Path]:
        """Write ``path.json`` and ``path.safetensors`` (float32 arrays); returns both paths."""
        from safetensors.numpy import save_file

        base = Path(path).with_suffix("") if Path(path).suffix in (".json", ".safetensors") else Path(path)
        weights, meta = base.with_name(base.name + ".safetensors"), base.with_name(base.name + ".json")
        weights.parent.mkdir(parents=True, exist_ok=True)
        tensors = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in self._tensors().items()}
        save_file(tensors, str(weights))
        digest = hashlib.sha256(weights.read_bytes()).hexdigest()
        meta.write_text(json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION, **self.get_params(),
                                    "feature_depths": list(FEATURE_DEPTHS), "all_scalars": list(SCALARS),
                                    "weights": weights.name, "weights_sha256": digest, **self.info},
                                   indent=1) + "\n", encoding="utf-8")
        return meta, weights

    @classmethod
    def load(cls, path: str | Path) -> "StepVerifier":
        """Read what :meth:`save` wrote (checked: format, version, weights checksum, feature layout)."""
        from safetensors.numpy import load_file

        from ..common.errors import InputError

        base = Path(path).with_suffix("") if Path(path).suffix in (".json", ".safetensors") else Path(path)
        meta_path = base.with_name(base.name + ".json")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
            raise InputError(f"{meta_path} is not a step verifier of format {FORMAT_VERSION}")
        if tuple(meta["feature_depths"]) != FEATURE_DEPTHS or tuple(meta["all_scalars"]) != SCALARS:
            raise InputError(f"{meta_path} was trained on other features than this version computes")
        weights = meta_path.with_name(meta["weights"])
        if not weights.is_file():  # the Qwen reader's weights live in the repository's history, not its tracked tree
            raise InputError(f"{weights.name} is not here: a clone of the repository restores it with `make install` "
                             "(scripts/build/restore_benchmark_caches.sh --assets)")
        if hashlib.sha256(weights.read_bytes()).hexdigest() != meta["weights_sha256"]:
            raise InputError(f"{weights} does not belong to {meta_path.name} (checksum mismatch)")
        t = load_file(str(weights))
        params = {k: meta[k] for k in ("layers", "n_components", "scalars", "target", "C", "threshold")}
        params.update({k: meta[k] for k in ("threshold_right", "level_thresholds", "localizer") if k in meta})
        verifier = cls(**params)
        verifier.h_mean_, verifier.h_scale_ = t["h_mean"].astype(np.float64), t["h_scale"].astype(np.float64)
        verifier.components_ = t["components"].astype(np.float64)
        verifier.s_mean_, verifier.s_scale_ = t["s_mean"].astype(np.float64), t["s_scale"].astype(np.float64)
        verifier.coef_, verifier.intercept_ = t["coef"].astype(np.float64), float(t["intercept"][0])
        if verifier.localizer:
            verifier.loc_coef_ = t["loc_coef"].astype(np.float64)
        verifier.info = {k: v for k, v in meta.items() if k not in params and k not in (
            "format", "format_version", "feature_depths", "all_scalars", "weights", "weights_sha256")}
        return verifier


@dataclass
class VerifierResult:
    """The verifier's reading of one trace.

    step_probability : (K,) p_k per step (0-based list); suspect_step : 1-based first step with p_k over the
    threshold, None = no wrong step found; ranking : 1-based steps, most suspect first; measured : the
    verifier's accuracy on the annotated test traces as shipped (F1, exact first step, none accuracy, top-1,
    top-3 with intervals and chance), or {} where not measured; final_correct : the final answer's known
    correctness the verdict used (None: unknown), which also picks the measured numbers shown.
    """

    step_probability: list[float]
    suspect_step: int | None
    ranking: list[int]
    threshold: float
    step_texts: list[str]
    seconds: float
    measured: dict
    final_correct: bool | None = None
    findings: list[list[dict]] | None = None  # per step, the model-free check's findings the features read

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _short(model: str) -> str:
    return Path(str(model).rstrip("/")).name.lower()


def shipped_readers() -> list[str]:
    """The reader models a verifier is shipped for (package data), sorted."""
    from importlib import resources

    folder = resources.files("grade") / ASSET_DIR
    return sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json")) if folder.is_dir() else []


def shipped_verifier(model: str) -> StepVerifier | None:
    """The verifier shipped for ``model`` (package data), or None where there is none."""
    from importlib import resources

    base = resources.files("grade") / ASSET_DIR / f"{_short(model)}.json"
    if not base.is_file():
        return None
    return StepVerifier.load(Path(str(base)))


#: The reader on a CPU, whatever model wrote the trace: there the verifier's answer must come within seconds
#: (bench/step_verifier.py times it), which a 135M reader's forward pass gives and a 1.5B one's does not.
CPU_READER = "smollm2-135m-instruct"


def verifier_reader(model: str, device: str = "cpu") -> str | None:
    """The model that reads traces of ``model`` on ``device`` for the step verifier: on a GPU ``model`` itself
    where a verifier is shipped for it; else :data:`CPU_READER`; None where no verifier is shipped.

    The one place this is decided. Another model's reader is no stand-in of the model's own: each shipped
    verifier was trained and measured with its reader reading the text Qwen wrote, and carries its own numbers."""
    readers = shipped_readers()
    if not readers:
        return None
    own = _short(model)
    if own in readers and (str(device).split(":")[0] != "cpu" or own == CPU_READER):
        return own
    return CPU_READER if CPU_READER in readers else readers[0]


_READERS: dict[tuple[str, str], object] = {}
_READERS_LOCK = threading.Lock()


def load_reader(lm, loader=None):
    """The loaded reader model of :func:`verifier_reader` for traces of ``lm``, or None where no verifier is
    shipped: ``lm`` itself where it is the reader in float32 (the precision the verifier was measured at), else
    the reader loaded on ``lm``'s device in float32 by ``loader(name, device=, dtype=)`` (default
    :func:`grade.load_model`, kept for the process: a CLI run or a Ray worker loads it once; the studio passes
    its model registry's loader)."""
    import torch

    reader = verifier_reader(lm.name, str(lm.device))
    if reader is None:
        return None
    if _short(lm.name) == reader and lm.dtype == torch.float32:
        return lm
    if loader is not None:
        return loader(reader, device=str(lm.device), dtype="float32")
    from ..models.models import load_model

    key = (reader, str(lm.device))
    with _READERS_LOCK:
        if key not in _READERS:
            _READERS[key] = load_model(reader, device=str(lm.device), dtype="float32")
        return _READERS[key]


def trace_level(task: str | None) -> str:
    """The level a trace's numbers and thresholds are kept for: ``math`` for the MATH task, else ``gsm8k``."""
    return "math" if task == "math" else "gsm8k"


def verify_trace(lm, question: str, response: str, *, verifier: StepVerifier | None = None,
                 task: str = DEFAULT_TASK, final_correct: bool | None = None,
                 features: TraceFeatures | None = None) -> VerifierResult:
    """Read ``response`` with ``lm`` (one forward pass) and name its first wrong step, or none.

    verifier : default the one shipped for ``lm.name`` (:func:`shipped_verifier`).
    final_correct : whether the response's final answer is right, where a gold answer says so (see
        :meth:`StepVerifier.suspect`); None: unknown.
    features : the trace's features where already read (:func:`step_features_batch`); None: read here.
    """
    import time

    from ..common.errors import InputError

    t = time.perf_counter()
    verifier = verifier or shipped_verifier(lm.name)
    if verifier is None:
        raise InputError(f"no step verifier is shipped for {lm.name}; train one (scripts/studies/train_step_verifier.py)")
    response = response.strip()
    if features is None:  # given: read by step_features_batch with other traces
        features = step_features(lm, question, response, task=task)
    p = verifier.predict_proba(features)
    level = trace_level(task)
    suspect = verifier.suspect(p, final_correct=final_correct, level=level)
    scores = verifier.step_scores(p)
    ranking = [int(k) + 1 for k in sorted(range(len(scores)), key=lambda k: (-scores[k], k))]
    texts = [response[a:b] for a, b in split_steps(response)]
    unknown, right = verifier.thresholds(level)
    threshold = {None: unknown, True: right, False: 0.0}[final_correct]
    measured = dict(verifier.info.get("measured", {}))
    if final_correct is not None and "measured_final_known" in verifier.info:
        measured = dict(verifier.info["measured_final_known"])
    protocols = verifier.info.get("protocols")
    if protocols:  # the numbers of this protocol at this trace's level (grade.steps.outcome)
        from .outcome import decide_outcome

        measured = decide_outcome(correct=final_correct).measured(verifier, level) or measured
    return VerifierResult([float(x) for x in p], None if suspect is None else suspect + 1, ranking,
                          threshold, texts, time.perf_counter() - t, measured, final_correct, features.findings)
