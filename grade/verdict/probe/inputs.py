"""What a probe reads of one question's GRADE pass (:data:`INPUTS`, by name, saved with the probe): the per-layer
rank ratios, as in the paper, or the two stable ranks per layer apart plus the loss they come from;
:func:`probe_inputs` is the one place that turns a feature table or a result into these numbers."""

from __future__ import annotations

import numpy as np

from ...common.errors import InputError, ProbeError

FEATURE_DEFINITION = (
    "rank_ratio per layer (layer 0 first) = srank(C_g) / srank(C_h) at the MLP down projection; "
    "C_h = h h^T of the down projection input h, C_g from the gradient of the loss w.r.t. the MLP output"
)

#: What a probe can read from one question's GRADE pass, by name: the definition written into the probe's
#: metadata. :func:`probe_inputs` is the one place that turns a feature table or a result into these numbers.
INPUTS = {
    "rank_ratio": FEATURE_DEFINITION,
    "sranks_loss": (
        "log srank(C_h) per layer (layer 0 first), then log srank(C_g) per layer, then the value of the loss whose "
        "gradient was taken: 2L+1 numbers. The rank ratio is the difference of the two logs; kept apart, a probe can "
        "weigh them differently, and the loss carries what the entropy knows (results/README.md measures both)"
    ),
}

#: The feature-table columns (or result attributes) each of :data:`INPUTS` is made of.
INPUT_COLUMNS = {"rank_ratio": ("rank_ratio",), "sranks_loss": ("srank_h", "srank_g", "loss_value")}

#: The largest magnitude a probe input may have. Real features are far below it (rank ratios and stable ranks are at
#: most the hidden width, losses tens of nats; the shipped reference features span 0.07 to 10.3); a larger value is
#: a broken or hand-made feature file, and squaring it (a batch norm's variance, a scaler's standard deviation)
#: overflows float32 near 1e19 and float64 near 1e154. :func:`check_input_values` refuses it by column and rows.
MAX_INPUT_MAGNITUDE = 1e6


def input_width(inputs: str, n_layers: int) -> int:
    """How many numbers ``inputs`` makes of a model with ``n_layers`` layers."""
    check_inputs(inputs)
    return n_layers if inputs == "rank_ratio" else 2 * n_layers + 1


def layers_of(inputs: str, width: int) -> int | None:
    """The layer count behind ``width`` numbers of ``inputs`` (None where no layer count gives that width)."""
    if inputs == "rank_ratio":
        return width
    return (width - 1) // 2 if width >= 3 and width % 2 == 1 else None


def check_inputs(inputs) -> None:
    if inputs not in INPUTS:
        raise ProbeError(f"unknown probe inputs {inputs!r}; use {' or '.join(INPUTS)}")


def probe_inputs(source, inputs: str = "rank_ratio") -> np.ndarray:
    """(n, width) float64 probe inputs from a feature table (columns ``rank_ratio``, ``srank_h``, ``srank_g``,
    ``loss_value``: :mod:`grade.batch.features`) or, as one row, from a :class:`~grade.gradients.result.GradeResult`."""
    from ...batch.features import feature_matrix  # the feature tables (and pyarrow) load only when a table is read

    check_inputs(inputs)
    table = hasattr(source, "columns")
    missing = [c for c in INPUT_COLUMNS[inputs] if (c not in source.columns if table else getattr(source, c, None) is None)]
    if missing:
        raise InputError(f"probe inputs {inputs!r} need {', '.join(missing)}, which these features lack")

    def per_layer(name):
        return feature_matrix(source, name) if table else np.asarray(getattr(source, name), dtype=np.float64)[None, :]

    if inputs == "rank_ratio":
        return per_layer("rank_ratio")
    loss = (source["loss_value"].to_numpy(dtype=np.float64) if table
            else np.array([source.loss_value], dtype=np.float64))[:, None]
    # a layer whose gradient vanished has stable rank 0: a floor keeps its log finite (and very low)
    return np.hstack([np.log(np.maximum(per_layer("srank_h"), 1e-6)), np.log(np.maximum(per_layer("srank_g"), 1e-6)),
                      loss])


def check_input_values(df, inputs: str = "rank_ratio", where: str = "the features") -> None:
    """Raise InputError (one line naming the column and the rows) where a column ``inputs`` reads holds a value that
    is not finite or beyond ±:data:`MAX_INPUT_MAGNITUDE`: training on it overflows, or lets one row decide all."""
    check_inputs(inputs)
    for column in INPUT_COLUMNS[inputs]:
        if column not in df.columns:
            continue  # probe_inputs names a missing column
        bad = []
        for position, value in enumerate(df[column].tolist()):
            try:
                vector = np.asarray(value, dtype=np.float64).ravel()
            except (TypeError, ValueError):
                vector = np.array([np.nan])
            if not (np.isfinite(vector).all() and (np.abs(vector) <= MAX_INPUT_MAGNITUDE).all()):
                bad.append(position)
        if bad:
            def name(position):
                row = df.iloc[position]
                return f"{row['dataset']}/{row['id']}" if "dataset" in df.columns and "id" in df.columns \
                    else f"row {position + 1}"

            shown = ", ".join(name(i) for i in bad[:3]) + (", ..." if len(bad) > 3 else "")
            raise InputError(f"{where}: column {column!r} holds values that are not finite or beyond "
                             f"±{MAX_INPUT_MAGNITUDE:g} in {len(bad)} of {len(df)} rows ({shown}); no real feature "
                             "comes near that: re-extract those rows or drop them")
