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
:class:`~grade.common.errors.ProbeError` with one readable line for anything unreadable or inconsistent.
Nothing is ever unpickled.

One job a module: :mod:`~grade.verdict.probe.inputs` (what a probe reads), :mod:`~grade.verdict.probe.network` (the two kinds'
tensors), :mod:`~grade.verdict.probe.files` (reading and checking the files, the shipped probes, a folder's listing),
:mod:`~grade.verdict.probe.estimator` (:class:`Probe`), :mod:`~grade.verdict.probe.training` (training on a feature table).
Every name is importable from ``grade.verdict.probe``.
"""


from ..artifacts import (MAX_HEADER_BYTES, MAX_METADATA_BYTES, is_count, jsonable, model_key, probe_paths,  # noqa: F401
                         read_metadata, read_weights, safetensors_header, save_artifact, sha256_file)
from ...common.metrics import binary_metrics, class_balance  # noqa: F401
from .estimator import EpochCallback, Probe, TrainingHistory, load_probe, stratified_split  # noqa: F401
from .files import (LOSSES, PROBE_FORMAT, SHIPPED_PROBES_DIR, SHIPPED_REFERENCE_FEATURES, SRANKS,  # noqa: F401
                    ProbeInfo, check_probe_metadata, check_weights_header, list_probes, probe_metadata_path,
                    probe_metadata_problem, probe_test_metrics, read_probe_files, read_probe_info)
from .inputs import (FEATURE_DEFINITION, INPUT_COLUMNS, INPUTS, check_inputs, input_width, layers_of,  # noqa: F401
                     probe_inputs)
from .network import HIDDEN_SIZES, KINDS, MLPNet, expected_shapes  # noqa: F401
from .training import format_metrics, train_from_features  # noqa: F401

#: Older private names, kept for callers outside the package (:mod:`grade.verdict.artifacts` has the public ones).
_model_key, _sha256, _jsonable, _is_count = model_key, sha256_file, jsonable, is_count
_layers_of, _check_inputs = layers_of, check_inputs
