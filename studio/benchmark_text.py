"""The Benchmarks page's sentences, each built from the rows its chart or table draws (no Streamlit).

A sentence beside a chart takes the chart's own methods (:func:`drawn_methods` reads them off the figure) and
names its metric, so that it can neither name a method the chart leaves out nor quote a number it does not
draw; the page builds the chart first and hands it over.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

from grade.common.display import dataset_title
from grade.studies import GRADE_METHODS, LENGTH_METHODS

#: How each protocol's numbers were measured, said once at the top of the page.
PROTOCOLS = {
    "crossfit": ("**Protocol: cross-fitted.** Every labelled question is scored once, by detectors fitted on the other "
                 "four of five folds (stratified by question), so every question counts and none is scored by a "
                 "detector that saw it; per dataset, every method is scored on the same questions. Intervals: 95% "
                 "stratified bootstrap."),
    "capped": ("**Protocol: one held-out split.** A few capped rows per dataset are split 60/20/20 once; detectors "
               "are fitted on the first part and scored on the held-out test part (a few dozen questions, so the "
               "95% bootstrap intervals are wide)."),
}
#: The detector Home shows as "Entropy after the prompt": the GRADE_pre loss alone, a variant of the cross-fitted run.
ENTROPY_AFTER_PROMPT = "Entropy after the prompt"
LOSS_ALONE_VARIANT = "GRADE_pre[logreg,loss,all]"


def protocol_text(protocol: Mapping | None) -> str:
    name = (protocol or {}).get("protocol") or "capped"
    return PROTOCOLS.get(name, PROTOCOLS["capped"])


def _finite(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def drawn_methods(fig) -> list[str]:
    """The methods a Plotly figure draws: its traces' names, the reference lines (oracle, answering everything)
    left out."""
    names = [getattr(t, "name", None) for t in fig.data]
    return list(dict.fromkeys(n for n in names if n and n not in ("oracle", "answer everything (chance)")))


def selective_sentence(rows: Sequence[Mapping], drawn: Iterable[str]) -> str | None:
    """One sentence of the selective-answering rows whose method the chart draws (``drawn``): per dataset, the
    best detector by the accuracy of the questions it lets the model answer at the table's coverage, its gain
    over answering everything, GRADE's best curve where the best is another, and length alone where it does as
    well (a confound, never "the best")."""
    from grade.studies.output import selective_best

    parts, coverage = [], None
    for cell in selective_best([dict(r) for r in rows], methods=set(drawn)):
        best, g, length = cell["best"], cell["grade"], cell["length"]
        coverage = cell["coverage"] if coverage is None else coverage
        text = (f"on {dataset_title(cell['dataset'])} {best['method']} is best, {best['acc_at_coverage']:.2f} against "
                f"{best['base_rate']:.2f} answering everything ({best['acc_at_coverage'] - best['base_rate']:+.2f})")
        if g is not None:
            text += f", GRADE's best curve {g['method']} {g['acc_at_coverage']:.2f}"
        if length is not None:
            text += f", length alone as good or better ({length['method']} {length['acc_at_coverage']:.2f})"
        parts.append(text)
    if not parts:
        return None
    share = "half" if coverage in (None, 0.5) else f"{100 * float(coverage):.0f}%"
    return (f"**Accuracy of the answered questions when the model answers only the {share} a detector is surest of** "
            f"(the curves at {share if share != 'half' else '50%'} across): " + "; ".join(parts) + ".")


def entropy_rows(variants: Sequence[Mapping]) -> list[dict]:
    """Home's "Entropy after the prompt" as main-table rows (dataset, method, n, positives, auroc and accuracy with
    their intervals), read from the cross-fitted run's GRADE variants (the ``pre`` loss alone)."""
    out = []
    for r in variants:
        if r.get("variant") != LOSS_ALONE_VARIANT:
            continue
        out.append({"dataset": r["dataset"], "method": ENTROPY_AFTER_PROMPT, "n": r["n"], "positives": r["positives"],
                    **{k: r.get(k) for k in ("auroc", "auroc_lo", "auroc_hi", "acc", "acc_lo", "acc_hi")}})
    return out


def split_notes(notes: Iterable[str]) -> tuple[list[str], list[str]]:
    """A run's notes as (transfer pairs not measured, the rest); the "Against ..." findings of a cross-fitted run
    are left out (the paired paragraph says them, from the same rows as its table)."""
    missing, other = [], []
    for note in notes:
        if note.startswith("transfer ") and "not measured" in note:
            missing.append(note)
        elif not note.startswith("Against "):
            other.append(note)
    return missing, other


def shipped_probe_table(model: str, loss: str):
    """The shipped GRADE_<loss> probe's quality as Home's verdict card and the Probes page cite it
    (:func:`grade.verdict.measured.shipped_probe_quality`, the same file), one row per kind of question; an empty
    frame where the model has none. The Probes page shows the same table."""
    import pandas as pd

    from grade.verdict.detectors.routing import kind_of_dataset
    from grade.verdict.measured import shipped_probe_quality

    rows = []
    for m in shipped_probe_quality(model, loss):
        cited = m.enough and m.auroc is not None
        rows.append({
            "questions like": getattr(kind_of_dataset(m.datasets[0]), "title", ""),
            "datasets": " + ".join(dataset_title(d) for d in m.datasets),
            "answerable / unanswerable": f"{m.answerable} / {m.unanswerable}",
            "AUROC [95% interval]": (f"{m.auroc:.2f} [{m.auroc_lo:.2f}, {m.auroc_hi:.2f}]" if cited and
                                     m.auroc_lo is not None else (f"{m.auroc:.2f}" if cited else "–")),
            "accuracy (always the larger class)": (f"{m.acc:.0%} ({m.accuracy_chance:.0%})"
                                                   if cited and m.acc is not None else "–"),
            "what it says": (m.adds_nothing or "better than guessing") if cited else m.too_few,
            "measured": m.protocol_sentence,
        })
    return pd.DataFrame(rows)


def one_protocol(table):
    """:func:`shipped_probe_table` as a page shows it: where every row was measured the same way, without its
    ``measured`` column, and that sentence (said once beside the table, not on every row); else the table and None."""
    if "measured" in table and len(table) and table["measured"].nunique() == 1:
        return table.drop(columns="measured"), str(table["measured"].iloc[0])
    return table, None


def titled_text(text: str) -> str:
    """A results file's note with its dataset identifiers (``nq_open``, ``hotpotqa_closed``) as their names."""
    import re

    from grade.common.display import DATASET_TITLES

    names = sorted((k for k in DATASET_TITLES if k != "all"), key=len, reverse=True)
    return re.sub(r"(?<![\w:])(" + "|".join(map(re.escape, names)) + r")(?![\w:])", lambda m: dataset_title(m.group(1)),
                  text)


def titled_rows(rows: Iterable[Mapping]) -> list[dict]:
    """Rows with their ``dataset`` as its name, for a sentence builder that prints it."""
    return [{**r, "dataset": dataset_title(r["dataset"])} if "dataset" in r else dict(r) for r in rows]


def missing_transfer_line(notes: Sequence[str]) -> str:
    """The transfer pairs a run did not measure, in one line (the notes all give the same reason)."""
    reasons = {n.split(": ", 1)[1] for n in notes if ": " in n}
    why = f": {next(iter(reasons))}" if len(reasons) == 1 else ""
    return f"{len(notes)} transfer pairs of this run were not measured{why}."
