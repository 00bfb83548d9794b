"""What was measured for a method on a dataset for a model: the one place the app's cards (and anything else)
ask for the AUROC to cite beside a verdict.

The numbers are package data, ``grade/assets/measured/<model>.json``, written from a benchmark results folder by
:func:`write_measured` (``scripts/build/run_benchmark.py`` calls it for every model's results folder each time it
runs, also with ``--readme-only``; never edit the numbers by hand). One JSON per model:

* ``protocol``: ``crossfit`` (every labelled question scored out of sample, :mod:`grade.studies.crossfit`;
  numbers from ``all_questions.csv``, each method on every question it scores, and ``grade_variants.csv``)
  or ``capped`` (one held-out test split of a few capped rows, :mod:`grade.studies.runs`; ``main_table.csv``);
* ``datasets``: per dataset its task and document condition (from its labelled rows), how the router
  :func:`grade.verdict.detectors.routing.closest_kind` picks the dataset closest to a question;
* ``measured[method][dataset]``: ``n``, ``answerable``, ``auroc`` with ``auroc_lo`` / ``auroc_hi`` (95%
  stratified bootstrap), ``acc`` (with ``acc_lo`` / ``acc_hi`` where the run measured them), and ``protocol``
  where a row was measured otherwise than the file's (``unseen``: ``GRADE_<loss> (shipped probe)``, the shipped
  probe itself on the labelled questions it never saw, from ``shipped_probes.csv``).

A number measured on fewer than :data:`MIN_QUESTIONS` questions is not a result: :meth:`Measured.sentence`
then says "too few questions to judge its AUROC (n=...)" and gives no number.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..common.errors import ProbeError
from ..common.metrics import majority_accuracy
from .artifacts import model_key

#: Package data (importlib.resources): ``<model>.json`` per model.
MEASURED_DIR = Path(str(resources.files("grade") / "assets" / "measured"))
MEASURED_FORMAT = 1
#: Below this many questions an AUROC's interval is too wide to decide anything: it is not cited as a result.
MIN_QUESTIONS = 100
AUROC_CHANCE = 0.5
#: What a verdict card cites, best first: the shipped probe itself on the labelled questions it never saw
#: (:mod:`grade.studies.shipped_probes`), its form cross-fitted on each dataset, and, in a capped run, the closest
#: row it has. The first measured on enough questions (:data:`MIN_QUESTIONS`) is cited.
PROBE_METHODS = ("GRADE_{loss} (shipped probe)", "GRADE_{loss} (shipped)", "GRADE_{loss}")
#: The loss value alone through a logistic regression: the "Entropy after the prompt" detector's form.
LOSS_ALONE = "GRADE_{loss}[logreg,loss,all]"
#: A shipped detector itself measured on the questions it never saw (grade.studies.shipped_probes.DETECTOR_METHOD).
DETECTOR_ITSELF = "{form} (shipped detector)"
REGENERATE = "python scripts/build/run_benchmark.py --readme-only"

DATASET_TITLES = {"triviaqa": "TriviaQA", "nq_open": "NQ-Open", "hotpotqa": "HotpotQA (with its paragraphs)",
                  "hotpotqa_closed": "HotpotQA (closed book)", "gsm8k": "GSM8K", "math": "MATH", "mmlu": "MMLU",
                  "facts": "world-facts", "arithmetic": "arithmetic"}
PROTOCOL_WORDS = {"crossfit": "Cross-fitted", "capped": "Held-out (capped split)", "test": "Held-out",
                  "unseen": "On questions it never saw:"}


def dataset_title(name: str) -> str:
    return DATASET_TITLES.get(name, name)


def _fmt(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


@dataclass(frozen=True)
class Measured:
    """One method's measured numbers on one dataset's questions (``protocol``: crossfit, capped or test)."""

    model: str
    method: str
    dataset: str
    protocol: str
    n: int
    answerable: int | None
    auroc: float | None
    auroc_lo: float | None = None
    auroc_hi: float | None = None
    acc: float | None = None
    acc_lo: float | None = None
    acc_hi: float | None = None

    @property
    def enough(self) -> bool:
        """Enough questions that the AUROC is cited as a result (:data:`MIN_QUESTIONS`)."""
        return self.n >= MIN_QUESTIONS

    @property
    def auroc_chance(self) -> float:
        return AUROC_CHANCE

    @property
    def accuracy_chance(self) -> float | None:
        """The accuracy of always answering the larger class of these questions."""
        return majority_accuracy(self.n, self.answerable)

    def sentence(self) -> str:
        """What a card cites: the AUROC with its interval, n (answerable) and chance, or, under
        :data:`MIN_QUESTIONS` questions or without an AUROC, why there is no number to cite."""
        where = f"{dataset_title(self.dataset)} questions"
        if not self.enough:
            split = {"capped": ", capped split", "test": ", held-out split"}.get(self.protocol, "")
            return f"too few questions to judge its AUROC (n={self.n}, {where}{split})"
        if self.auroc is None:
            return f"AUROC not measured on {self.n} {where}"
        interval = (f" [{_fmt(self.auroc_lo)}, {_fmt(self.auroc_hi)}]"
                    if self.auroc_lo is not None and self.auroc_hi is not None else "")
        answerable = f" ({self.answerable} answerable)" if self.answerable is not None else ""
        text = (f"{PROTOCOL_WORDS.get(self.protocol, 'Measured')} AUROC {_fmt(self.auroc)}{interval} on {self.n} "
                f"{where}{answerable}; chance {_fmt(self.auroc_chance)}")
        if self.acc is not None and self.accuracy_chance is not None:
            acc_interval = (f" [{self.acc_lo:.0%}, {self.acc_hi:.0%}]" if self.acc_lo is not None and self.acc_hi is not None
                            else "")
            text += f"; accuracy {self.acc:.0%}{acc_interval} (always the larger class: {self.accuracy_chance:.0%})"
        return text

    @classmethod
    def from_test(cls, model: str, method: str, dataset: str, test: dict) -> "Measured | None":
        """A detector's own held-out test metrics (its metadata), for a model without a benchmark file."""
        if not test or test.get("n") is None:
            return None
        return cls(model, method, dataset, "test", int(test["n"]), _int(test.get("positives")), _float(test.get("auroc")),
                   _float(test.get("auroc_lo")), _float(test.get("auroc_hi")),
                   _float(test.get("acc", test.get("accuracy"))))


def _float(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _int(value) -> int | None:
    value = _float(value)
    return None if value is None else int(value)


# ------------------------------------------------------------------------------------------------ reading


def measured_path(model: str, folder: str | Path = MEASURED_DIR) -> Path | None:
    """The measured-numbers file of ``model`` in ``folder`` (names compared as probes compare them), else None."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob("*.json")):
        if model_key(path.stem) == model_key(model):
            return path
    return None


@lru_cache(maxsize=16)
def _read(path: str, stamp: float) -> dict:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("format") != MEASURED_FORMAT:
        raise ProbeError(f"{path}: measured-numbers format {data.get('format')!r}, expected {MEASURED_FORMAT}")
    return data


def read_measured(model: str, folder: str | Path = MEASURED_DIR) -> dict | None:
    """The whole file of ``model`` (see the module docstring), None where there is none."""
    path = measured_path(model, folder)
    return None if path is None else _read(str(path), path.stat().st_mtime)


def measured(model: str, method: str, dataset: str, folder: str | Path = MEASURED_DIR) -> Measured | None:
    """What was measured for ``method`` on ``dataset`` for ``model``; None where nothing was."""
    data = read_measured(model, folder)
    row = ((data or {}).get("measured", {}).get(method) or {}).get(dataset)
    if not row:
        return None
    return Measured(data["model"], method, dataset, row.get("protocol", data["protocol"]), int(row["n"]),
                    _int(row.get("answerable")),
                    _float(row.get("auroc")), _float(row.get("auroc_lo")), _float(row.get("auroc_hi")),
                    _float(row.get("acc")), _float(row.get("acc_lo")), _float(row.get("acc_hi")))


def closest_measured(model: str, method: str, *, task: str, has_context: bool, dataset: str | None = None,
                     folder: str | Path = MEASURED_DIR) -> Measured | None:
    """The measured numbers of ``method`` on the dataset closest to a question of ``task`` (with or without a
    document): ``dataset`` itself where it was measured (a detector's routed kind), else the rule that picks a
    detector's kind (:func:`~grade.verdict.detectors.routing.closest_kind`, among the datasets ``method`` was
    measured on). None where no measured dataset is like the question."""
    from .detectors.routing import closest_kind

    data = read_measured(model, folder)
    rows = ((data or {}).get("measured", {}).get(method)) or {}
    if not rows:
        return None
    if dataset is not None and dataset in rows:
        return measured(model, method, dataset, folder)
    kinds = {name: {**(data["datasets"].get(name) or {}), "test": {"n": row["n"]}} for name, row in rows.items()}
    best, _ = closest_kind(kinds, task, has_context)
    return None if best is None else measured(model, method, best, folder)


def probe_measured(model: str, loss: str, *, task: str, has_context: bool,
                   folder: str | Path = MEASURED_DIR) -> Measured | None:
    """The measured numbers a verdict card cites for the question's closest dataset: the first of
    :data:`PROBE_METHODS` measured there on enough questions, else the first measured there at all."""
    found = [closest_measured(model, form.format(loss=loss), task=task, has_context=has_context, folder=folder)
             for form in PROBE_METHODS]
    found = [f for f in found if f is not None]
    return next((f for f in found if f.enough), found[0] if found else None)


def probe_evidence(model: str, loss: str, *, task: str, has_context: bool, verdict=None,
                   folder: str | Path = MEASURED_DIR) -> str:
    """The sentence a verdict card cites: the shipped probe's form measured on the dataset closest to the question
    (:func:`probe_measured`); for a model without a benchmark file, the probe's own test split (``verdict``:
    :class:`~grade.verdict.verdict.Verdict`), flagged by n the same way."""
    found = probe_measured(model, loss, task=task, has_context=has_context, folder=folder)
    if found is None and verdict is not None and verdict.n_test:
        found = Measured(model, f"GRADE_{loss}", "pooled test", "test", int(verdict.n_test), verdict.positives,
                         verdict.auroc, acc=verdict.accuracy)
    if found is None:
        return "not measured on questions like this one"
    if found.method.endswith("(shipped)") and found.enough:
        form = " (the probe's form, refitted on this dataset's folds)"
    elif found.method.endswith(("(shipped)", "(shipped probe)")) or found.protocol == "test" or not found.enough:
        form = ""
    else:
        form = f" ({found.method}, the paper's form)"
    return found.sentence() + form


def detector_evidence(model: str, detector, *, task: str, has_context: bool, folder: str | Path = MEASURED_DIR) -> str:
    """The sentence a detector card cites (``detector``: a :class:`~grade.verdict.detectors.routing.DetectorVerdict`):
    the detector's form measured on its routed kind (or the dataset closest to the question); for a model
    without a benchmark file, the detector's own test questions of that kind, flagged by n the same way."""
    from .detectors.specs import DETECTORS

    spec = DETECTORS.get(detector.name)
    method = spec.measured_as if spec is not None else ""
    # the shipped detector itself where enough of its kind's questions were unseen by it, else its form
    candidates = [DETECTOR_ITSELF.format(form=method), method] if method else []
    found = [closest_measured(model, m, task=task, has_context=has_context, dataset=detector.kind, folder=folder)
             for m in candidates]
    found = [f for f in found if f is not None]
    found = next((f for f in found if f.enough), found[0] if found else None)
    if found is None and detector.kind:
        found = Measured.from_test(model, method or detector.name, detector.kind, detector.test)
    return "not measured on questions like this one" if found is None else found.sentence()


# ------------------------------------------------------------------------------------------------ writing


def _rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _number_row(row: dict) -> dict[str, Any]:
    out = {"n": int(float(row["n"])), "answerable": _int(row.get("positives"))}
    for key in ("auroc", "auroc_lo", "auroc_hi", "acc", "acc_lo", "acc_hi"):
        value = _float(row.get(key))
        if value is not None:
            out[key] = round(value, 4)
    return out


def _dataset_meta(name: str, entry: dict, root: Path | None) -> dict[str, Any]:
    """Task and document condition of a dataset, read from its labelled rows (the most common task; with a
    document when most rows have one); from its name where the files are not here."""
    from ..tasks.question_sets import DATASET_TASKS

    tasks, with_doc, rows = Counter(), 0, 0
    for file in entry.get("labelled_files") or []:
        path = Path(file) if root is None or Path(file).is_absolute() else root / file
        if not path.is_file():
            continue
        from ..studies.tables import read_labels

        for r in read_labels(path):
            rows += 1
            tasks[r.get("task") or DATASET_TASKS.get(name, "qa")] += 1
            with_doc += bool(r.get("context"))
    base = name.rsplit("_", 1)[0]
    task = tasks.most_common(1)[0][0] if tasks else DATASET_TASKS.get(name, DATASET_TASKS.get(base, "qa"))
    meta = {"task": task, "with_document": bool(rows and with_doc >= rows / 2)}
    for key in ("labelled", "answerable", "unanswerable"):
        if entry.get(key) is not None:
            meta[key] = int(entry[key])
    return meta


def build_measured(folder: str | Path, root: str | Path | None = None) -> dict:
    """The measured-numbers file (module docstring) of one benchmark results folder; ``root``: where the
    labelled files its ``summary.json`` names are relative to (the repository)."""
    folder = Path(folder)
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    crossfit = (summary.get("protocol") or {}).get("protocol") == "crossfit" or (folder / "crossfit_state.json").is_file()
    table = (folder / "all_questions.csv") if crossfit and (folder / "all_questions.csv").is_file() else folder / "main_table.csv"
    out: dict[str, dict] = {}
    for row in _rows(table):
        out.setdefault(row["method"], {})[row["dataset"]] = _number_row(row)
    # the shipped probes and detectors themselves, on the questions each never saw (grade.studies.shipped_probes)
    for row in _rows(folder / "shipped_probes.csv") + _rows(folder / "shipped_detectors.csv"):
        out.setdefault(row["method"], {})[row["dataset"]] = {**_number_row(row), "protocol": row["protocol"]}
    if crossfit:  # the loss alone (the "Entropy after the prompt" detector's statistic) is one of GRADE's variants
        for row in _rows(folder / "grade_variants.csv"):
            if row["variant"] in {LOSS_ALONE.format(loss=loss) for loss in ("pre", "pos")}:
                out.setdefault(row["variant"], {})[row["dataset"]] = _number_row(row)
    used = {d for rows in out.values() for d in rows}
    datasets = {name: _dataset_meta(name, entry, Path(root) if root else None)
                for name, entry in (summary.get("datasets") or {}).items() if name in used}
    return {"format": MEASURED_FORMAT, "model": summary["model"], "protocol": "crossfit" if crossfit else "capped",
            "source": f"results/{folder.name}/{table.name}", "regenerate": REGENERATE,
            "min_questions": MIN_QUESTIONS, "datasets": datasets, "measured": out}


def write_measured(folder: str | Path, out_dir: str | Path = MEASURED_DIR, root: str | Path | None = None) -> Path:
    """:func:`build_measured` of ``folder`` written to ``<out_dir>/<model>.json``; returns the path."""
    data = build_measured(folder, root)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{Path(folder).name}.json"
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    _read.cache_clear()
    return path


__all__ = ["Measured", "MIN_QUESTIONS", "MEASURED_DIR", "measured", "closest_measured", "probe_measured",
           "probe_evidence", "detector_evidence",
           "read_measured", "build_measured", "write_measured", "dataset_title"]
