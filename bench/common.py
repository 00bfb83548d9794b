"""Shared helpers: timing, memory, machine description, errors against ground truth, tables."""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def synchronize(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Timing:
    """Wall-clock seconds of repeated runs (after warm-up). ``median`` is what tables report."""

    runs: list[float] = field(default_factory=list)
    cpu_runs: list[float] = field(default_factory=list)  # process CPU seconds (all threads) of each run

    @property
    def median(self) -> float:
        return statistics.median(self.runs) if self.runs else float("nan")

    @property
    def spread(self) -> float:
        """(max - min) / median: how noisy the repeats were."""
        return (max(self.runs) - min(self.runs)) / self.median if len(self.runs) > 1 else 0.0

    def to_dict(self) -> dict:
        cpu = statistics.median(self.cpu_runs) if self.cpu_runs else None
        return {"median_s": self.median, "runs_s": self.runs, "spread": self.spread, "median_process_cpu_s": cpu}


def time_call(fn: Callable[[], object], *, repeats: int, warmup: int = 1, device=None, budget_s: float | None = None) -> Timing:
    """Median-ready wall-clock timings of ``fn()``; device work is synchronised before each clock read.

    ``budget_s`` stops repeating once that much time was spent (at least one timed run is always made).
    """
    for _ in range(warmup):
        fn()
        synchronize(device)
    timing = Timing()
    spent = 0.0
    for _ in range(repeats):
        synchronize(device)
        t, c = time.perf_counter(), time.process_time()
        fn()
        synchronize(device)
        timing.runs.append(time.perf_counter() - t)
        timing.cpu_runs.append(time.process_time() - c)
        spent += timing.runs[-1]
        if budget_s is not None and spent > budget_s:
            break
    return timing


def peak_extra_memory(fn: Callable[[], object], device) -> tuple[float, object]:
    """(GiB allocated at the peak of ``fn()`` above what was allocated before it, fn's result) on a CUDA device."""
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    result = fn()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**30, result


def max_relative_error(values, truth) -> float:
    """max over entries of |values - truth| / |truth| (entries where truth is NaN are skipped; a NaN
    value where the truth is finite counts as an infinite error)."""
    values = np.asarray(values, dtype=np.float64)
    truth = np.asarray(truth, dtype=np.float64)
    keep = np.isfinite(truth)
    if not keep.any():
        return float("nan")
    err = np.abs(values[keep] - truth[keep]) / np.maximum(np.abs(truth[keep]), np.finfo(np.float64).tiny)
    err = np.where(np.isfinite(err), err, np.inf)
    return float(err.max())


def machine() -> dict:
    """What the numbers came from."""
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover - the package needs it anyway
        pass
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = props.name
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["cuda"] = torch.version.cuda
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def fmt(value: float, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    if isinstance(value, float) and (abs(value) >= 1e4 or (value != 0 and abs(value) < 1e-3)):
        return f"{value:.2e}"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def table(rows: list[dict], columns: list[str]) -> str:
    """A Markdown table of ``rows`` (dicts) restricted to ``columns``."""
    cells = [[fmt(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines += ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |" for r in cells]
    return "\n".join(lines)


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=_jsonable))


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value)}")
