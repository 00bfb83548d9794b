"""The probe's verdict on one question: which probe judges a model's questions of a task (:func:`default_probe`),
and what it says of one :class:`~grade.gradients.result.GradeResult` (:func:`probe_verdict`): the probability that the
model can answer, beside the probe's measured test AUROC and accuracy and their chance rates.

The app's Home page and ``python -m grade analyze --probe`` both ask here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .artifacts import model_key, probe_paths
from ..common.errors import ProbeError
from ..common.metrics import majority_accuracy
from .probe import SHIPPED_PROBES_DIR, ProbeInfo, list_probes, probe_inputs, probe_test_metrics
from .probe_reading import bands_for

#: The AUROC of a probe that guesses: what a measured test AUROC is read against.
AUROC_CHANCE = 0.5


@dataclass
class Verdict:
    """One probe's answer on one question.

    ``auroc`` / ``accuracy``: the probe's measured metrics on its held-out test questions (None where its file
    records none); ``n_test`` / ``positives``: how many test questions, how many of them answerable.
    """

    probability: float  # P(the model can answer)
    probe_name: str
    auroc: float | None
    loss: str
    threshold: float = 0.5
    accuracy: float | None = None
    n_test: int | None = None
    positives: int | None = None
    # inputs_outside of inputs_total lie outside the probe's bands, more than of any question it learned from
    # (grade.verdict.probe_reading.InputBands.beyond); None: within them, or the probe has no bands to tell
    inputs_outside: int | None = None
    inputs_total: int | None = None
    bands_checked: bool = False  # whether the probe's input bands were there to check against

    @property
    def answerable(self) -> bool:
        return self.probability >= self.threshold

    @property
    def in_range(self) -> bool | None:
        """Whether this question's probe inputs lie within what the probe learned from (its shipped input
        bands): False when more of them lie far outside than of any question it learned from; None where the
        probe has no bands to tell (a probe of one's own)."""
        if not self.bands_checked:
            return None
        return self.inputs_outside is None

    def out_of_range_text(self) -> str | None:
        """What a page says instead of a percentage when :attr:`in_range` is False, else None."""
        if self.in_range is not False:
            return None
        return (f"{self.inputs_outside} of the probe's {self.inputs_total} inputs for this question lie far outside "
                "the range of the questions it learned from, more than for any one of them: it never saw a question "
                f"like this one, so its percentage ({self.probability:.0%}) means nothing here.")

    @property
    def auroc_chance(self) -> float:
        return AUROC_CHANCE

    @property
    def accuracy_chance(self) -> float | None:
        """The test accuracy of always answering the test split's larger class (None: its size is not recorded)."""
        return majority_accuracy(self.n_test, self.positives)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values: the fields, ``answerable`` and both chance rates."""
        return {**asdict(self), "answerable": self.answerable, "auroc_chance": self.auroc_chance,
                "accuracy_chance": self.accuracy_chance}

    def describe(self) -> str:
        """One line: the probability, the verdict and the probe's measured test metrics beside their chance rates."""
        word = "can probably answer" if self.answerable else "probably cannot answer"
        if self.in_range is False:
            word = "is outside what the probe learned from (no verdict)"
        measured = (f"test AUROC {self.auroc:.3f} (chance {self.auroc_chance:.2f})" if self.auroc is not None
                    else "test AUROC not recorded")
        if self.accuracy is not None:
            measured += f", accuracy {self.accuracy:.3f}"
            if self.accuracy_chance is not None:
                measured += f" (always the larger class: {self.accuracy_chance:.3f}, {self.n_test} test questions)"
        return (f"probe {self.probe_name} (loss {self.loss}): P(can answer) = {self.probability:.3f}, the model "
                f"{word}; {measured}")


def default_probe(model_name: str, probes: Sequence[ProbeInfo] | None = None, loss: str = "pre",
                  task: str | None = None) -> ProbeInfo | None:
    """The probe to use for ``model_name`` on questions of ``task``, among ``probes`` (default: the shipped ones,
    best test AUROC first): same model, preferring ``loss``; among those, a probe trained for that task's kind
    of question (metadata ``tasks``), else a general one. A probe trained for other tasks only is never the
    default. None when no probe fits."""
    probes = list_probes(SHIPPED_PROBES_DIR) if probes is None else probes
    # model names compared as the probe's compatibility check compares them (grade.verdict.artifacts.model_key)
    same_model = [p for p in probes if p.model and model_key(p.model) == model_key(model_name)]
    preferred = [p for p in same_model if p.loss == loss] or same_model
    for_task = [p for p in preferred if task and task in (p.metadata.get("tasks") or ())]
    general = [p for p in preferred if not p.metadata.get("tasks")]
    chosen = for_task or general
    return chosen[0] if chosen else None


def resolve_probe(name_or_path: str | Path, model_name: str, *, task: str | None = None, loss: str = "pre",
                  folder: str | Path = SHIPPED_PROBES_DIR) -> Path:
    """A probe's weights path from ``auto`` (:func:`default_probe` among the probes in ``folder``) or a path to
    a probe file (with or without its extension); raises ProbeError with one line where there is none."""
    if str(name_or_path) != "auto":
        return probe_paths(name_or_path)[0]
    chosen = default_probe(model_name, list_probes(folder), loss=loss, task=task)
    if chosen is None:
        known = sorted({str(p.model) for p in list_probes(folder) if p.model})
        raise ProbeError(f"no probe for {model_name} in {folder}"
                         + (f" (there are probes for {', '.join(known)})" if known else "")
                         + "; give the path of a probe file instead")
    return chosen.path


def probe_probability(probe, inputs: np.ndarray) -> float:
    """P(answerable) for one input vector (width,) (:func:`grade.verdict.probe.probe_inputs`, float64 as
    :meth:`grade.verdict.probe.Probe.predict_result` reads it), whatever shape
    ``predict_proba`` returns."""
    proba = np.asarray(probe.predict_proba(np.asarray(inputs, dtype=np.float64)[None, :]), dtype=float)
    if proba.ndim == 2 and proba.shape[1] == 2:  # scikit-learn style: (n, [P(no), P(yes)])
        proba = proba[:, 1]
    value = float(proba.reshape(-1)[0])
    if not np.isfinite(value):
        raise ProbeError("the probe returned a non-finite probability")
    return value


def probe_verdict(probe, result, *, name: str | None = None, lm=None) -> Verdict:
    """The verdict of ``probe`` (:class:`grade.verdict.probe.Probe`) on ``result``, after the probe's own check that the
    model (``lm``'s name and depth where given, else the result's), depth, loss and srank variant fit; a
    mismatch raises ProbeError. ``name``: what to call the probe (default: its metadata's name, else "probe")."""
    probe.check_compatible(lm if lm is not None else result.model, result.n_layers, result.loss, srank=result.srank)
    metadata = getattr(probe, "metadata", None) or {}
    measured = probe_test_metrics(metadata)

    def number(key, kind=float):
        value = measured.get(key)
        return None if value is None or isinstance(value, bool) else kind(value)

    inputs = probe_inputs(result, probe.inputs)[0]
    beyond, checked = None, False
    bands = bands_for(metadata)
    if (bands is not None and bands.outside_share_max is not None and bands.n_layers == result.n_layers
            and len(bands.names) == len(inputs)):
        beyond, checked = bands.beyond(inputs), True
    return Verdict(probability=probe_probability(probe, inputs),
                   probe_name=name or str(metadata.get("name") or "probe"), auroc=number("auroc"), loss=result.loss,
                   threshold=float(getattr(probe, "threshold", 0.5)), accuracy=number("accuracy"),
                   n_test=number("n", int), positives=number("positives", int),
                   inputs_outside=beyond[0] if beyond else None, inputs_total=beyond[1] if beyond else None,
                   bands_checked=checked)


def detector_reads_answer(name: str) -> bool:
    """Whether the detector ``name`` (:data:`grade.verdict.detectors.specs.DETECTORS`) reads the model's answer
    (P-Entropy, SAPLMA) rather than the question alone (the entropy after the prompt)."""
    from .detectors.model_statistics import ANSWER_STATISTICS
    from .detectors.specs import DETECTORS

    spec = DETECTORS.get(name)
    return spec is not None and spec.statistic in ANSWER_STATISTICS


def withheld(*, reads_answer: bool, cut_off: bool, max_new_tokens: int | None = None,
             in_range: bool | None = None) -> str | None:
    """Why a verdict on one question must not be presented as meaningful, else None: it reads an answer that
    was cut off by its length (the model had not finished: GRADE_pos, P-Entropy and SAPLMA would judge a
    fragment), or the probe's inputs lie outside what it learned from (``in_range`` False)."""
    if reads_answer and cut_off:
        at = f" at {max_new_tokens} tokens" if max_new_tokens else ""
        return (f"it reads the answer, and the answer was cut off{at} before the model finished: a verdict on an "
                "unfinished answer means nothing. Raise the answer length and analyse again.")
    if in_range is False:
        return "this question's probe inputs lie far outside those of every question the probe learned from."
    return None
