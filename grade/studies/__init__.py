"""Studies: the benchmark (its runs, studies, tables and report figures), GRADE next to the baselines and detectors.
Layer: learning; imports the engine folders, batch/ and verdict/.

The benchmark's studies, run on cached features: GRADE next to the baselines.

Everything here works from files, never from a model, so the tables regenerate in seconds:

* labels: ``<labels dir>/<dataset>.jsonl`` (``grade label``: id, question, task, samples, accuracy, label);
* GRADE features: Parquet feature stores (:mod:`grade.batch.features`), one per (dataset, variant, loss);
* baseline scores: the per-question JSONL caches of :mod:`grade.verdict.detectors.baselines`.

:mod:`grade.studies.benchmark` fills the caches (that part needs the model) and then calls :func:`run_studies`
here; the metrics are :mod:`grade.common.metrics`'s, the figures :mod:`grade.studies.report`'s. A
:class:`BenchmarkResult` saves itself as CSV + JSON + Markdown and loads back (:meth:`BenchmarkResult.save`,
:meth:`BenchmarkResult.load`); it draws nothing.

Protocol (per model and dataset)
--------------------------------
* Rows with a label; a dataset enters only if each class has at least ``min_per_class`` rows
  (the others are reported with their counts). ``max_per_class`` caps each class (seeded), as the
  reference caps at 1000: a compute budget, not a balancing step.
* One seeded split, stratified by label: train / validation / test (default 60 / 20 / 20). With
  ``--eval-labels`` (questions never seen during development) every development row is used for
  training and validation and the new rows are the test set.
* Supervised methods train on train and select on validation (GRADE: the paper's MLP probe with
  early selection; Align-P: layer and C; SAPLMA: fixed recipe). Training-free scores are used as
  they are; their accuracy uses the threshold that maximises accuracy on train + validation
  (their AUROC needs no threshold). Judge is a yes/no answer: accuracy only.
* AUROC with a percentile bootstrap confidence interval (stratified resampling of the test set,
  ``n_boot`` draws), so that small test sets are not over-read.
* Selective answering: with the same per-question test scores, the model answers the share of questions a
  detector scores highest and abstains on the rest; accuracy at 50 % coverage and the area under the
  accuracy-coverage curve, with the same kind of interval, beside answering everything and the oracle.

Every score is oriented so that higher = answerable; none is flipped after looking at test data.
Single-feature GRADE ablations (a threshold on one layer's ratio) pick their direction on train.

The package, by job: :mod:`~grade.studies.tables` (protocol, rows, splits, tables), :mod:`~grade.studies.scorers`
(the methods fitted and scored), :mod:`~grade.studies.runs` (the studies and :class:`BenchmarkResult`) and
:mod:`~grade.studies.output` (Markdown and CSV). Every name is importable from ``grade.studies`` as before.
"""

from .tables import GRADE_METHODS, SUPERVISED, UNSUPERVISED, LENGTH_METHODS, METHOD_ORDER, Protocol, metrics, Table, read_labels, confidently_wrong, select_rows, assign_splits, _grade_arrays, build_table  # noqa: F401
from .scorers import Scorer, ProbeScorer, LayerThreshold, LengthScorer, AlignP, SAPLMA, FixedScore, make_scorer, _seed_of, evaluate_method, evaluate_scores  # noqa: F401
from .runs import main_table, score_rows, grouped_scores, selective_answering, transfer_matrix, source_tables, robustness, ablations, confidently_wrong_study, length_halves, condition_transfer, BenchmarkResult, run_studies  # noqa: F401
from .output import format_number, main_markdown, selective_markdown, selective_summary, write_csv, write_scores  # noqa: F401

__all__ = [
    "GRADE_METHODS",
    "SUPERVISED",
    "UNSUPERVISED",
    "LENGTH_METHODS",
    "METHOD_ORDER",
    "Protocol",
    "metrics",
    "Table",
    "read_labels",
    "confidently_wrong",
    "select_rows",
    "assign_splits",
    "build_table",
    "Scorer",
    "ProbeScorer",
    "LayerThreshold",
    "LengthScorer",
    "AlignP",
    "SAPLMA",
    "FixedScore",
    "make_scorer",
    "evaluate_method",
    "evaluate_scores",
    "main_table",
    "score_rows",
    "grouped_scores",
    "selective_answering",
    "transfer_matrix",
    "source_tables",
    "robustness",
    "ablations",
    "confidently_wrong_study",
    "length_halves",
    "condition_transfer",
    "BenchmarkResult",
    "run_studies",
    "format_number",
    "main_markdown",
    "selective_markdown",
    "selective_summary",
    "write_csv",
    "write_scores",
]
