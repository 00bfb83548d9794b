"""A folder of Parquet part files, one part per written chunk, each written atomically: the generic sink
store of batch runs (features: :class:`grade.batch.features.FeatureStore`; traces: :class:`grade.traces.TraceStore`)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..common.errors import InputError
from ..common.io import atomic_path


class PartStore:
    """Parquet part files ``part-<index>-<random>.parquet`` in the folder ``path`` (created on first write).

    ``what``: how an error message names the folder (``"a feature store"``).
    """

    what = "a part store"

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    def create(self):
        if self.path.exists() and not self.path.is_dir():
            raise InputError(f"{self.path} exists and is not {self.what} folder")
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    def parts(self) -> list[Path]:
        return sorted(p for p in self.path.glob("part-*.parquet") if p.is_file()) if self.path.is_dir() else []

    def write(self, records: list[dict[str, Any]], schema: pa.Schema) -> Path | None:
        """Write one chunk atomically: a reader never sees a half-written part."""
        if not records:
            return None
        self.create()
        parts = self.parts()
        index = int(parts[-1].name.split("-")[1]) + 1 if parts else 0  # parts may have been removed
        name = f"part-{index:05d}-{uuid.uuid4().hex[:8]}.parquet"
        with atomic_path(self.path / name) as tmp:
            pq.write_table(pa.Table.from_pylist(records, schema=schema), tmp, compression="zstd")
        return self.path / name
