"""The trace store: a folder of Parquet parts (traces and tokens), its meta.json and the analyst's
annotations (see :mod:`grade.traces`)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pyarrow as pa

from .. import __version__
from ..batch.parts import PartStore
from ..common.bounded import read_parquet
from ..common.errors import InputError
from .sources import TraceItem

FORMAT_VERSION = 3  # 2: step-error localization columns and token surprisal; 3: the step verifier's verdict


#: Stores a run may add parts to: format 3 only adds nullable columns (:data:`ADDED_COLUMNS`), read as null in a
#: format-2 store's older parts; format 1 lacks the localization columns, so its stores are read, never resumed.
RESUMABLE_FORMATS = (2, 3)


#: Error kinds an analyst can mark: the one vocabulary of grade.steps.kinds (older names are read through it).
from ..steps.kinds import ERROR_KINDS, canonical_kind  # noqa: E402


TRACE_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),  # "<doc_id>:<sample>", the store's key
        ("doc_id", pa.string()),
        ("sample", pa.int32()),  # index of the generation within its document (0 for one per document)
        ("task", pa.string()),
        ("source", pa.string()),  # where ``correct`` comes from, e.g. "metric exact_match, filter strict-match"
        ("question", pa.string()),
        ("response", pa.string()),
        ("answers", pa.list_(pa.string())),  # gold answers, when the input names them
        ("correct", pa.bool_()),  # null: not known
        ("model", pa.string()),
        ("loss", pa.string()),
        ("srank", pa.string()),
        ("n_layers", pa.int32()),
        ("n_tokens", pa.int32()),  # response tokens
        ("n_steps", pa.int32()),
        ("grade_pos", pa.float64()),  # mean over steps and layers of the rank ratio
        ("loss_value", pa.float64()),  # mean over steps of the step's cross-entropy
        ("rank_ratio", pa.list_(pa.float64())),  # (L,) mean over steps: the GRADE_pos feature vector
        ("step_texts", pa.list_(pa.string())),  # (K,)
        ("step_ratio", pa.list_(pa.float64())),  # (K,) mean over layers: the step's shock
        ("step_loss", pa.list_(pa.float64())),  # (K,)
        ("step_start", pa.list_(pa.int32())),  # (K,) first response token of each step
        ("step_ratios", pa.list_(pa.list_(pa.float64()))),  # (K, L)
        ("peak_step", pa.int32()),  # 1-based step with the largest step_ratio
        ("peak_step_text", pa.string()),
        ("peak_step_ratio", pa.float64()),
        ("peak_token", pa.string()),  # the token with the largest shock
        ("peak_token_position", pa.int32()),
        ("peak_token_step", pa.int32()),
        ("peak_token_class", pa.string()),
        # step-error localization (grade.steps.locate): the default locator's ranking and the signals behind it
        ("locator", pa.string()),  # name of the locator behind suspect_step
        ("suspect_step", pa.int32()),  # 1-based: the step the locator ranks first
        ("suspect_step_text", pa.string()),
        ("step_ranking", pa.list_(pa.int32())),  # (K,) 1-based steps, most suspect first
        ("step_check", pa.list_(pa.float64())),  # (K,) the check's score, 0 = nothing found
        ("step_findings", pa.list_(pa.string())),  # (K,) each step's check findings as a JSON list
        ("step_surprisal_max", pa.list_(pa.float64())),  # (K,)
        ("step_surprisal_mean", pa.list_(pa.float64())),  # (K,)
        ("step_shock_max", pa.list_(pa.float64())),  # (K,)
        ("step_shock_mean", pa.list_(pa.float64())),  # (K,)
        ("known_error_step", pa.int32()),  # 1-based first wrong step given with the trace (a benchmark's), or null
        ("known_error_kind", pa.string()),
        ("seconds", pa.float64()),  # analysis time of this trace
        ("format_version", pa.int32()),
        ("package_version", pa.string()),
        # added within format 2 (parts written before lack it; :meth:`TraceStore.traces` reads them as null)
        ("cut_off", pa.bool_()),  # generation stopped at its token limit, so "wrong" may mean unfinished; null: not known
        # format 3: the step verifier (grade.steps.verifier), one forward pass of its reader model; every column
        # null where it did not run (parts of format 2, no verifier shipped, or it failed on this trace)
        ("verifier_reader", pa.string()),  # the model that read the trace for the verifier; null: it did not run
        ("verifier_suspect_step", pa.int32()),  # 1-based; null with a reader: no step stands out
        ("verifier_suspect_step_text", pa.string()),
        ("verifier_threshold", pa.float64()),  # a step is suspect once its probability passes this
        # (K_v,) per step of split_steps(response): K_v can exceed n_steps where a step too short to own a token
        # was merged into the next for the GRADE analysis; the verifier keeps the annotators' steps
        ("step_verifier_probability", pa.list_(pa.float64())),
    ]
)

#: Nullable columns parts written before them lack (``cut_off`` came within format 2, the verifier's with
#: format 3) -> the pandas dtype they are read as; :meth:`TraceStore.traces` reads them as null there.
ADDED_COLUMNS = {"cut_off": "boolean", "verifier_reader": "object", "verifier_suspect_step": "Int64",
                 "verifier_suspect_step_text": "object", "verifier_threshold": "float64",
                 "step_verifier_probability": "object"}

TOKEN_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("position", pa.int32()),  # index among the response tokens
        ("step", pa.int32()),  # 1-based
        ("token", pa.string()),  # decoded text of the token
        ("token_class", pa.string()),
        ("shock", pa.float32()),  # in [0, 1] within its trace, see :func:`token_shock`
        ("surprisal", pa.float32()),  # nats: cross-entropy of the token given everything before it
        ("scores", pa.list_(pa.float32())),  # (L,) raw row sums of C_g
    ]
)


def _missing(value) -> bool:
    """None, NaN or pandas' NA."""
    import pandas as pd

    return value is None or bool(pd.isna(value))


def _kind_id(kind):
    try:
        return canonical_kind(kind)
    except ValueError:
        return kind


def _atomic_write_text(path: Path, text: str) -> None:
    from ..common.io import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text)


_ANNOTATION_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _LOCKS_GUARD:
        return _ANNOTATION_LOCKS.setdefault(str(path.resolve()), threading.Lock())


def _with_added_columns(frame):
    """``frame`` (one part) with every column of :data:`ADDED_COLUMNS`: all null where the part predates it
    (typed, so that concatenating old and new parts keeps true / false / null apart)."""
    import pandas as pd

    for column, dtype in ADDED_COLUMNS.items():
        frame[column] = frame[column].astype(dtype) if column in frame else \
            pd.Series([None] * len(frame), dtype=dtype, index=frame.index)
    return frame


class TraceStore:
    """A trace store folder (see the module docstring). Reading never needs a model."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise InputError(f"{self.path} exists and is not a trace store folder")

    # ------------------------------------------------------------------ layout
    @property
    def traces_dir(self) -> Path:
        return self.path / "traces"

    @property
    def tokens_dir(self) -> Path:
        return self.path / "tokens"

    @property
    def meta_path(self) -> Path:
        return self.path / "meta.json"

    @property
    def annotations_path(self) -> Path:
        return self.path / "annotations.json"

    def exists(self) -> bool:
        return self.meta_path.is_file()

    # ------------------------------------------------------------------ metadata
    def meta(self) -> dict:
        if not self.exists():
            raise InputError(f"{self.path} is not a trace store (no meta.json); make one with `python -m grade traces`")
        try:
            return json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"{self.meta_path} cannot be read: {exc}") from None

    def prepare(self, model: str, srank: str, source: dict) -> None:
        """Create the store, or check that a resumed run matches what it holds."""
        wanted = {"model": model, "loss": "pos", "srank": srank, "source": source}
        if self.exists():
            have = self.meta()
            if have.get("format_version", 1) not in RESUMABLE_FORMATS:
                raise InputError(f"{self.path} was written by an older version (format {have.get('format_version', 1)}, "
                                 f"now {FORMAT_VERSION}); it can still be opened, but new traces go to another --out")
            for key in ("model", "loss", "srank"):
                if have.get(key) != wanted[key]:
                    raise InputError(f"{self.path} holds traces of {key} {have.get(key)!r}; this run uses "
                                     f"{wanted[key]!r}: use another --out")
            old = have.get("source") or {}
            for key, value in source.items():
                if key in old and old[key] != value:
                    raise InputError(f"{self.path} holds traces read with {key}={old[key]!r}; this run uses "
                                     f"{value!r}: use the same settings to resume, or another --out")
            return
        self.traces_dir.mkdir(parents=True, exist_ok=True)
        self.tokens_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write_text(self.meta_path, json.dumps({**wanted, "format_version": FORMAT_VERSION,
                                                       "package_version": __version__,
                                                       "created": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=2))

    # ------------------------------------------------------------------ rows
    def done_keys(self) -> set[str]:
        keys: set[str] = set()
        for part in PartStore(self.traces_dir).parts():
            keys.update(read_parquet(part, columns=["trace_id"]).column("trace_id").to_pylist())
        return keys

    def write(self, results: list[dict]) -> None:
        """Append analysed traces (``{"trace": row, "tokens": [rows]}`` each): tokens first, so that a stored
        trace always has its tokens (tokens of a trace that a kill left unstored are dropped on reading)."""
        if not results:
            return
        tokens = [t for r in results for t in r["tokens"]]
        if tokens:
            PartStore(self.tokens_dir).write(tokens, TOKEN_SCHEMA)
        PartStore(self.traces_dir).write([r["trace"] for r in results], TRACE_SCHEMA)

    def version(self) -> int:
        """Changes whenever rows or annotations are added (for caches)."""
        files = list(self.traces_dir.glob("part-*.parquet")) if self.traces_dir.is_dir() else []
        if self.annotations_path.exists():
            files.append(self.annotations_path)
        return sum(f.stat().st_mtime_ns + f.stat().st_size for f in files) + len(files)

    def traces(self, *, annotated: bool = True):
        """One row per trace (pandas DataFrame, :data:`TRACE_SCHEMA` columns), in the order analysed;
        with ``annotated`` also ``error_step``, ``error_kind`` and ``note`` from the annotations."""
        import pandas as pd

        parts = PartStore(self.traces_dir).parts()
        frames = [_with_added_columns(read_parquet(p).to_pandas()) for p in parts]
        frame = pd.concat(frames, ignore_index=True) if frames else TRACE_SCHEMA.empty_table().to_pandas()
        frame = frame.drop_duplicates("trace_id", keep="last").reset_index(drop=True)
        frame["correct"] = frame["correct"].astype("boolean")
        for column, dtype in ADDED_COLUMNS.items():
            frame[column] = frame[column].astype(dtype)
        if annotated:
            notes = self.annotations()
            known = dict(zip(frame["trace_id"], zip(frame.get("known_error_step", [None] * len(frame)),
                                                   frame.get("known_error_kind", [None] * len(frame)))))
            # the analyst's mark where there is one, else the step the input gave (a benchmark's known error)
            frame["error_step"] = pd.array(
                [notes[t].get("error_step") if t in notes else (None if _missing(known[t][0]) else int(known[t][0]))
                 for t in frame["trace_id"]], dtype="Int64")
            # an analyst's mark saved under an older name reads as its kind's id (grade.steps.kinds)
            frame["error_kind"] = [_kind_id(notes[t].get("kind")) if t in notes else known[t][1] for t in frame["trace_id"]]
            frame["note"] = [notes.get(t, {}).get("note") for t in frame["trace_id"]]
        return frame

    def tokens(self, trace: str | None = None):
        """Token rows (pandas DataFrame, :data:`TOKEN_SCHEMA` columns) of one trace or of all stored traces."""
        import pandas as pd
        import pyarrow.compute as pc

        parts = PartStore(self.tokens_dir).parts()
        tables = []
        for part in parts:
            table = read_parquet(part)
            if trace is not None:
                table = table.filter(pc.equal(table["trace_id"], trace))
            if table.num_rows:
                tables.append(table)
        frame = pa.concat_tables(tables).to_pandas() if tables else TOKEN_SCHEMA.empty_table().to_pandas()
        # A chunk killed between its two writes leaves tokens without a trace; a re-run writes them again.
        stored = self.done_keys()
        frame = frame[frame["trace_id"].isin(stored)]
        return frame.drop_duplicates(["trace_id", "position"], keep="last").sort_values(
            ["trace_id", "position"], kind="stable").reset_index(drop=True)

    # ------------------------------------------------------------------ annotations
    def annotations(self) -> dict[str, dict]:
        """trace_id -> {"error_step": int | None, "kind": str, "note": str, "updated": str}."""
        if not self.annotations_path.exists():
            return {}
        try:
            data = json.loads(self.annotations_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"{self.annotations_path} cannot be read: {exc}") from None
        return dict(data.get("annotations") or {})

    def annotate(self, trace: str, *, error_step: int | None, kind: str | None, note: str = "") -> dict:
        """Save (or, with no step, kind or note, remove) the analyst's mark for one trace; atomic."""
        frame = self.traces(annotated=False)
        match = frame[frame["trace_id"] == trace]
        if match.empty:
            raise InputError(f"no trace {trace!r} in {self.path}")
        n_steps = int(match.iloc[0]["n_steps"])
        if error_step is not None and not 1 <= int(error_step) <= n_steps:
            raise InputError(f"error step {error_step} is outside 1..{n_steps}")
        try:
            kind = canonical_kind(kind)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        entry = {"error_step": None if error_step is None else int(error_step), "kind": kind, "note": note or "",
                 "updated": time.strftime("%Y-%m-%dT%H:%M:%S")}
        with _lock_for(self.annotations_path):
            notes = self.annotations()
            if error_step is None and kind is None and not note:
                notes.pop(trace, None)
            else:
                notes[trace] = entry
            _atomic_write_text(self.annotations_path, json.dumps(
                {"format_version": FORMAT_VERSION, "annotations": notes}, indent=1, ensure_ascii=False))
        return entry

    def export_annotations(self, fmt: str = "csv") -> str:
        """Annotated traces as CSV or JSONL text: ids, correctness, GRADE_pos, the peak step and the mark."""
        frame = self.traces()
        frame = frame[frame["error_step"].notna() | frame["error_kind"].notna() | frame["note"].fillna("").astype(bool)]
        columns = ["trace_id", "doc_id", "sample", "correct", "grade_pos", "n_steps", "peak_step", "peak_step_text",
                   "peak_token", "peak_token_step", "error_step", "error_kind", "note"]
        texts = frame["step_texts"].tolist()
        frame = frame[columns].copy()
        frame["error_step_text"] = [None if _missing(step) else str(list(steps)[int(step) - 1])
                                    for steps, step in zip(texts, frame["error_step"])]
        if fmt == "csv":
            return frame.to_csv(index=False)
        if fmt == "jsonl":
            records = json.loads(frame.to_json(orient="records"))
            return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        raise InputError(f"unknown export format {fmt!r}; use csv or jsonl")


class TraceStoreSink:
    """The sink of a trace run: the trace store (on Ray written by the driver only)."""

    def __init__(self, store: TraceStore):
        self.store = store
        self.out = store.path

    def key(self, item: TraceItem) -> str:
        return item.trace_id

    def done_keys(self) -> set:
        return self.store.done_keys()

    def write(self, results: list[dict]) -> None:
        self.store.write(results)
