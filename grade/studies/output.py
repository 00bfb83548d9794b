"""The benchmark's written output: numbers, the main table as Markdown, CSV files."""

from __future__ import annotations

import math
from pathlib import Path

from .tables import METHOD_ORDER


def format_number(x: float, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


def main_markdown(result) -> str:
    """A :class:`~grade.studies.runs.BenchmarkResult`'s main table: methods as rows, datasets as column pairs,
    ``Acc`` and ``AUROC [95% CI]``."""
    datasets = list(dict.fromkeys(r["dataset"] for r in result.main))
    if not datasets:
        return "No dataset qualified for the benchmark (see summary.json for the class counts).\n"
    cell = {(r["dataset"], r["method"]): r for r in result.main}
    head = "| method | " + " | ".join(f"{d} Acc | {d} AUROC [95% CI]" for d in datasets) + " |"
    sep = "|---|" + "---|---|" * len(datasets)
    lines = [head, sep]
    for method in METHOD_ORDER:
        if not any((d, method) in cell for d in datasets):
            continue
        parts = []
        for d in datasets:
            r = cell.get((d, method))
            if r is None:
                parts += ["n/a", "n/a"]
                continue
            a = format_number(r["auroc"])
            ci = f" [{format_number(r['auroc_lo'], 2)}, {format_number(r['auroc_hi'], 2)}]" if math.isfinite(r["auroc"]) else ""
            parts += [format_number(r["acc"]), a + ci]
        lines.append(f"| {method} | " + " | ".join(parts) + " |")
    tests = ", ".join(f"{d}: n={cell[(d, next(m for m in METHOD_ORDER if (d, m) in cell))]['n']}"
                      f" ({cell[(d, next(m for m in METHOD_ORDER if (d, m) in cell))]['positives']} answerable)"
                      for d in datasets)
    lines.append("")
    lines.append(f"Test sets: {tests}.")
    return "\n".join(lines) + "\n"


def write_csv(rows: list[dict], path: Path) -> None:
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.4f")
