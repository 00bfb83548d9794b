"""What each detector is: the statistic it reads and the estimator that reads it (:data:`DETECTORS`, one table),
and the probability at which a verdict turns to "answerable"."""

from __future__ import annotations

from dataclasses import dataclass

from ...common.errors import ProbeError

THRESHOLD = 0.5  # P(answerable) at which a detector's verdict turns to "answerable"


@dataclass(frozen=True)
class DetectorSpec:
    name: str  # file and command-line name
    title: str  # what the app calls it
    statistic: str  # a key of STATISTICS
    estimator: str  # "kind-logistic" or "saplma-mlp"
    summary: str  # one line for a reader of the app
    measured_as: str = ""  # the benchmark's name of this detector's form (grade.verdict.measured)


DETECTORS: dict[str, DetectorSpec] = {spec.name: spec for spec in (
    DetectorSpec("prompt-entropy", "Entropy after the prompt", "loss_value", "kind-logistic",
                 "how unsure the model is about the first token of its answer (the GRADE_pre loss), "
                 "read through a logistic regression", "GRADE_pre[logreg,loss,all]"),
    DetectorSpec("p-entropy", "P-Entropy of the answer", "p_entropy", "kind-logistic",
                 "how unsure the model was over all tokens of its greedy answer, read through a logistic regression",
                 "P-Entropy"),
    DetectorSpec("saplma", "Hidden-state probe (SAPLMA)", "saplma_hidden", "saplma-mlp",
                 "an MLP on the hidden state 12 layers from the top at the answer's last token", "SAPLMA"),
)}


def spec_of(name: str) -> DetectorSpec:
    if name not in DETECTORS:
        raise ProbeError(f"unknown detector {name!r}; the detectors are {', '.join(DETECTORS)}")
    return DETECTORS[name]
