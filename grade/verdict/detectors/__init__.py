"""Detectors beside GRADE's probe: other ways to tell whether a model can answer, for the same question.

Laid out as lm-polygraph lays out uncertainty methods: **statistics** (what a model pass gives: the
entropy after the prompt, P-Entropy of the greedy answer, a hidden state) are computed apart from the
**estimators** that turn one statistic into P(answerable), and the metrics are :mod:`grade.common.metrics`'s.
One job a module:

* :mod:`~grade.verdict.detectors.specs`: :data:`DETECTORS`, each detector, the statistic it reads and its estimator;
* statistics, in :mod:`grade.verdict.detectors.model_statistics` (re-exported here): :func:`table_statistic` (training data:
  the benchmark's tables), :func:`labelled_statistics` (labelled questions, for ``grade evaluate
  --detector``), :func:`question_statistics` (one question in the app);
* :mod:`~grade.verdict.detectors.estimators`, sklearn-like (``fit`` / ``predict_proba``): :class:`KindLogistic` (one
  scalar, a slope and an intercept per kind of question) and :class:`SaplmaMLP` (the benchmark's SAPLMA recipe);
* :mod:`~grade.verdict.detectors.files`: :class:`Detector`, a fitted estimator with its metadata, saved as
  safetensors + JSON (never pickle) and checked on load like a probe (:mod:`grade.verdict.artifacts`), and the
  shipped files;
* :mod:`~grade.verdict.detectors.routing`: :func:`closest_kind` (which training dataset a question is most like: its
  calibration and test AUROC apply), each detector's verdict on one question and :func:`disagreement` (the
  sentence the app shows when verdicts differ);
* :mod:`~grade.verdict.detectors.training`: :func:`fit_detector` trains one on the benchmark's train / validation
  split and measures it on each dataset's held-out test questions.

The shipped detectors (``grade/assets/detectors/<model>-<name>.{safetensors,json}``) are built by
``scripts/build/build_detectors.py`` from the benchmark's caches.
"""

from .model_statistics import (ANSWER_STATISTICS, STATISTICS, answer_for_task, labelled_statistics,  # noqa: F401
                                question_statistics, record_statistic, table_statistic)
from .estimators import KindLogistic, SaplmaMLP, SaplmaNet  # noqa: F401
from .files import (DETECTOR_FORMAT, SHIPPED_DETECTORS_DIR, Detector, detector_file, detectors_for,  # noqa: F401
                    no_detectors_reason, resolve_detector)
from .routing import (RELATED_TASKS, DetectorVerdict, closest_kind, disagreement, needed_statistics,  # noqa: F401
                      verdicts)
from .specs import DETECTORS, THRESHOLD, DetectorSpec, spec_of  # noqa: F401
from .training import fit_detector  # noqa: F401
