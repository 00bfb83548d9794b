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


def write_scores(rows: list[dict], path: Path) -> None:
    """Per-question scores as xz-compressed CSV, every float written exactly (shortest round-trip form), so that
    curves drawn from the file are the ones the tables were computed from."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False, compression={"method": "xz"})


def _cell(value, lo, hi) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{format_number(value)} [{format_number(lo, 2)}, {format_number(hi, 2)}]" if math.isfinite(lo) else format_number(value)


def selective_markdown(result) -> str:
    """A result's selective-answering table: methods as rows, per dataset the accuracy at the study's coverage
    and the area under the accuracy-coverage curve, each with its 95% bootstrap interval; first the two
    references, answering everything (the base rate: what a score unrelated to the labels gives) and the oracle."""
    rows = result.selective
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    if not datasets:
        return "No selective-answering study in these results.\n"
    cell = {(r["dataset"], r["method"]): r for r in rows}
    first = {d: next(r for r in rows if r["dataset"] == d) for d in datasets}
    share = f"{100 * first[datasets[0]]['coverage']:.0f}%"
    head = "| method | " + " | ".join(f"{d} Acc at {share} coverage [95% CI] | {d} area [95% CI]" for d in datasets) + " |"
    lines = [head, "|---|" + "---|---|" * len(datasets)]
    lines.append("| answer everything (chance) | " + " | ".join(
        f"{format_number(first[d]['base_rate'])} | {format_number(first[d]['base_rate'])}" for d in datasets) + " |")
    lines.append("| oracle | " + " | ".join(
        f"{format_number(first[d]['oracle_acc_at_coverage'])} | {format_number(first[d]['oracle_auacc'])}" for d in datasets) + " |")
    for method in METHOD_ORDER:
        if not any((d, method) in cell for d in datasets):
            continue
        parts = []
        for d in datasets:
            r = cell.get((d, method))
            parts += (["n/a", "n/a"] if r is None else
                      [_cell(r["acc_at_coverage"], r["acc_at_coverage_lo"], r["acc_at_coverage_hi"]),
                       _cell(r["auacc"], r["auacc_lo"], r["auacc_hi"])])
        lines.append(f"| {method} | " + " | ".join(parts) + " |")
    tests = ", ".join(f"{d}: n={first[d]['n']} ({first[d]['positives']} answerable)" for d in datasets)
    summary = selective_summary(rows)
    return "\n".join(lines) + f"\n\nTest sets: {tests}.\n" + (f"\n{summary}\n" if summary else "")


def selective_best(rows, methods=None) -> list[dict]:
    """Per dataset of a selective-answering table (in the rows' order): the detector with the best accuracy at the
    table's coverage (``best``), GRADE's best where the best is another (``grade``, else None), and the best
    length baseline where it does as well (``length``, else None: length is a confound, never "the best");
    ``coverage`` the table's coverage. ``methods``: only these methods' rows (a chart's curves), default all."""
    from .tables import GRADE_METHODS, LENGTH_METHODS

    by: dict[str, dict[str, dict]] = {}
    lengths: dict[str, list[dict]] = {}
    for r in rows:
        value = r.get("acc_at_coverage")
        if (methods is not None and r["method"] not in methods) or value is None or not math.isfinite(float(value)):
            continue
        if r["method"] in LENGTH_METHODS:
            lengths.setdefault(r["dataset"], []).append(r)
        else:
            by.setdefault(r["dataset"], {})[r["method"]] = r
    out = []
    for dataset, cells in by.items():
        best = max(cells.values(), key=lambda r: r["acc_at_coverage"])
        grade = [cells[m] for m in GRADE_METHODS if m in cells]
        g = max(grade, key=lambda r: r["acc_at_coverage"]) if grade and best["method"] not in GRADE_METHODS else None
        length = max(lengths.get(dataset, []), key=lambda r: r["acc_at_coverage"], default=None)
        if length is not None and length["acc_at_coverage"] < best["acc_at_coverage"]:
            length = None
        out.append({"dataset": dataset, "best": best, "grade": g, "length": length, "coverage": best.get("coverage")})
    return out


def selective_summary(rows: list[dict]) -> str | None:
    """One sentence from a selective-answering table (:func:`selective_best`): per dataset, the detector with the
    best accuracy at the table's coverage, its gain over answering everything, GRADE's best, and the length
    baselines where they do as well."""
    parts = []
    for cell in selective_best(rows):
        best, g, length = cell["best"], cell["grade"], cell["length"]
        text = (f"on {cell['dataset']} the best is {best['method']}, {best['acc_at_coverage']:.3f} vs. "
                f"{best['base_rate']:.3f} answering everything ({best['acc_at_coverage'] - best['base_rate']:+.3f}")
        if g is not None:
            text += f"; best GRADE: {g['method']} {g['acc_at_coverage']:.3f}"
        if length is not None:
            text += f"; length alone as good or better: {length['method']} {length['acc_at_coverage']:.3f}"
        parts.append(text + ")")
    if not parts:
        return None
    coverage = selective_best(rows)[0]["coverage"]
    share = "half" if coverage == 0.5 else f"{100 * coverage:.0f}%"
    return (f"Answering only the {share} of the test questions a detector is surest of: " + "; ".join(parts) + ".")
