"""What was measured for a method on the questions like one question, for a model: the one place the app's cards
(the probe's, each detector's) and its pages (Home, Probes, Benchmarks) ask for the numbers to cite.

Three rules live here, each once:

* **enough evidence** (:func:`enough`): a number is cited only when it rests on at least :data:`MIN_PER_CLASS`
  questions of *each* class, answerable and unanswerable; else the card says "too few answerable (or
  unanswerable) questions to judge" with both counts and no number;
* **questions like this one** (:func:`questions_like`): the one closest-dataset rule
  (:func:`grade.verdict.detectors.routing.closest_datasets`), stated once per screen, pooled where it names
  several datasets; every card of one question cites the same datasets;
* **adds nothing** (:class:`Measured`): beside the accuracy its base rate (always the larger class) and beside the
  AUROC its chance 0.5, with a flag where the number is at or below them.

The numbers are package data, ``grade/assets/measured/<model>.json``, written from a benchmark results folder by
:func:`write_measured` (``scripts/build/run_benchmark.py`` calls it for every model's results folder each time it
runs, also with ``--readme-only``; never edit the numbers by hand). One JSON per model:

* ``protocol``: ``crossfit`` (every labelled question scored out of sample, :mod:`grade.studies.crossfit`;
  numbers from ``all_questions.csv``, each method on every question it scores, and ``grade_variants.csv``)
  or ``capped`` (one held-out test split of a few capped rows, :mod:`grade.studies.runs`; ``main_table.csv``);
* ``datasets``: per dataset its task and document condition (from its labelled rows);
* ``measured[method][dataset]``: ``n``, ``answerable``, ``auroc`` with ``auroc_lo`` / ``auroc_hi`` (95%
  stratified bootstrap), ``acc`` (with ``acc_lo`` / ``acc_hi`` where measured), and ``protocol`` where a row was
  measured otherwise than the file's: ``heldout`` (the shipped probe or detector itself on a held-out split drawn
  before it was trained, ``GRADE_<loss> (shipped probe)`` and ``<form> (shipped detector)``, from
  ``heldout_scores.csv.xz``: :mod:`grade.studies.shipped_probes`). A ``dataset`` key joined by ``+`` is a pool
  (:func:`~grade.verdict.detectors.routing.pooled_name`), computed from the per-question out-of-sample scores
  (``heldout_scores.csv.xz``, ``crossfit_scores.csv.xz`` or a capped run's ``test_scores.csv.xz``) through
  :func:`grade.common.metrics.heldout_metrics`.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

from ..common.errors import ProbeError
from ..common.metrics import majority_accuracy
from .artifacts import model_key
from .detectors.routing import QUESTION_KINDS, QuestionsLike, closest_datasets, pooled_name

#: Package data (importlib.resources): ``<model>.json`` per model.
MEASURED_DIR = Path(str(resources.files("grade") / "assets" / "measured"))
MEASURED_FORMAT = 2
#: A number is cited only on at least this many questions of each class: below it an AUROC's interval spans
#: most of its range and one question moves it by several points.
MIN_PER_CLASS = 40
#: The fewest questions any cited number rests on (:data:`MIN_PER_CLASS` of each class): where only a total is
#: known, fewer than this can never be enough. The rule itself is per class (:func:`enough`).
MIN_QUESTIONS = 2 * MIN_PER_CLASS
AUROC_CHANCE = 0.5
#: What a verdict card cites, best first: the shipped probe itself on a held-out split drawn before it was trained
#: (:mod:`grade.studies.shipped_probes`), its form cross-fitted on each dataset, and, in a capped run, the closest
#: row it has. The first measured with enough of each class (:func:`enough`) is cited.
PROBE_METHODS = ("GRADE_{loss} (shipped probe)", "GRADE_{loss} (shipped)", "GRADE_{loss}")
#: The loss value alone through a logistic regression: the "Entropy after the prompt" detector's form.
LOSS_ALONE = "GRADE_{loss}[logreg,loss,all]"
#: A shipped detector itself measured on a held-out split (grade.studies.shipped_probes.DETECTOR_METHOD).
DETECTOR_ITSELF = "{form} (shipped detector)"
REGENERATE = "python scripts/build/run_benchmark.py --readme-only"

DATASET_TITLES = {"triviaqa": "TriviaQA", "nq_open": "NQ-Open", "hotpotqa": "HotpotQA (with its paragraphs)",
                  "hotpotqa_closed": "HotpotQA (closed book)", "gsm8k": "GSM8K", "math": "MATH", "mmlu": "MMLU",
                  "facts": "world-facts", "arithmetic": "arithmetic"}
#: How each protocol is named on a card, and what it means in one sentence.
PROTOCOL_WORDS = {"heldout": "Held out before training", "crossfit": "Cross-fitted", "capped": "Held-out (capped split)",
                  "test": "Held-out", "unseen": "On questions it never saw"}
PROTOCOL_SENTENCES = {
    "heldout": "the shipped artifact itself, on questions held out (per dataset and class, seeded) before it was "
               "trained on the rest",
    "crossfit": "its form refitted on each dataset's folds, every labelled question scored by a fit that never "
                "saw it (not the shipped artifact)",
    "capped": "one held-out test split of a capped benchmark run",
    "test": "its own training run's test split",
    "unseen": "the labelled questions its training left over (not a fair sample)",
}


def dataset_title(name: str) -> str:
    """A dataset's name for a reader; a pool (``a+b``) as "A + B"."""
    return " + ".join(DATASET_TITLES.get(part, part) for part in name.split("+"))


def _fmt(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


def enough(n: int | None, answerable: int | None) -> bool:
    """The one evidence rule: at least :data:`MIN_PER_CLASS` answerable and as many unanswerable questions."""
    if n is None or answerable is None:
        return False
    return answerable >= MIN_PER_CLASS and n - answerable >= MIN_PER_CLASS


def too_few(n: int | None, answerable: int | None) -> str | None:
    """Why a number on ``n`` questions (``answerable`` of them answerable) is not cited, else None."""
    if enough(n, answerable):
        return None
    if n is None or answerable is None:
        return f"too few questions of each class known to judge (n={n})"
    thin = "answerable" if answerable < MIN_PER_CLASS else "unanswerable"
    return (f"too few {thin} questions to judge ({answerable} answerable, {n - answerable} unanswerable; "
            f"a number needs {MIN_PER_CLASS} of each)")


@dataclass(frozen=True)
class Measured:
    """One method's measured numbers on one dataset's questions or a pool of datasets (``a+b``); ``protocol``:
    heldout, crossfit, capped or test (:data:`PROTOCOL_SENTENCES`)."""

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
    threshold: float | None = None

    @property
    def datasets(self) -> tuple[str, ...]:
        return tuple(self.dataset.split("+"))

    @property
    def unanswerable(self) -> int | None:
        return None if self.answerable is None else self.n - self.answerable

    @property
    def enough(self) -> bool:
        """Enough of each class that the numbers are cited (:func:`enough`)."""
        return enough(self.n, self.answerable)

    @property
    def too_few(self) -> str | None:
        return too_few(self.n, self.answerable)

    @property
    def auroc_chance(self) -> float:
        return AUROC_CHANCE

    @property
    def accuracy_chance(self) -> float | None:
        """The base rate: the accuracy of always answering the larger class of these questions."""
        return majority_accuracy(self.n, self.answerable)

    @property
    def larger_class(self) -> str | None:
        if self.answerable is None:
            return None
        return "can answer" if self.answerable > self.n - self.answerable else "cannot answer"

    @property
    def auroc_adds_nothing(self) -> bool | None:
        """The AUROC is at or below chance (0.5); None where there is none."""
        return None if self.auroc is None else self.auroc <= AUROC_CHANCE

    @property
    def accuracy_adds_nothing(self) -> bool | None:
        """The accuracy is at or below always answering the larger class; None where either is unknown."""
        chance = self.accuracy_chance
        return None if self.acc is None or chance is None else self.acc <= chance

    @property
    def adds_nothing(self) -> str | None:
        """One sentence where the verdict is no better than guessing, else None."""
        if self.auroc_adds_nothing:
            return (f"no better than chance: its AUROC {_fmt(self.auroc)} is at or below {_fmt(AUROC_CHANCE)}, so its "
                    "probability does not rank these questions")
        if self.accuracy_adds_nothing:
            return (f"its yes/no verdict is no better than guessing the larger class: accuracy {self.acc:.0%} where "
                    f"always saying \"{self.larger_class}\" scores {self.accuracy_chance:.0%}")
        return None

    @property
    def protocol_sentence(self) -> str:
        return PROTOCOL_SENTENCES.get(self.protocol, self.protocol)

    def sentence(self) -> str:
        """What a card cites: the AUROC with its interval, the counts of both classes and chance, the accuracy with
        its base rate, and where it adds nothing, that; with too few of a class, why there is no number."""
        where = f"{dataset_title(self.dataset)} questions"
        if not self.enough:
            return f"{self.too_few} ({where})"
        if self.auroc is None:
            return f"AUROC not measured on {self.n} {where}"
        interval = (f" [{_fmt(self.auroc_lo)}, {_fmt(self.auroc_hi)}]"
                    if self.auroc_lo is not None and self.auroc_hi is not None else "")
        text = (f"{PROTOCOL_WORDS.get(self.protocol, 'Measured')}: AUROC {_fmt(self.auroc)}{interval} on {self.n} "
                f"{where} ({self.answerable} answerable, {self.unanswerable} unanswerable); chance "
                f"{_fmt(self.auroc_chance)}")
        if self.acc is not None and self.accuracy_chance is not None:
            acc_interval = (f" [{self.acc_lo:.0%}, {self.acc_hi:.0%}]" if self.acc_lo is not None and self.acc_hi is not None
                            else "")
            text += f"; accuracy {self.acc:.0%}{acc_interval} (always the larger class: {self.accuracy_chance:.0%})"
        if self.adds_nothing:
            text += f". {self.adds_nothing[:1].upper()}{self.adds_nothing[1:]}"
        return text

    def as_dict(self) -> dict[str, Any]:
        """Everything a page shows, as plain values (the numbers, both counts, chance, flags and the protocol)."""
        return {**asdict(self), "unanswerable": self.unanswerable, "enough": self.enough, "too_few": self.too_few,
                "auroc_chance": AUROC_CHANCE, "accuracy_chance": self.accuracy_chance,
                "auroc_adds_nothing": self.auroc_adds_nothing, "accuracy_adds_nothing": self.accuracy_adds_nothing,
                "adds_nothing": self.adds_nothing, "protocol_sentence": self.protocol_sentence,
                "datasets_title": dataset_title(self.dataset)}

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
    """What was measured for ``method`` on ``dataset`` (or a pool, ``a+b``) for ``model``; None where nothing was."""
    data = read_measured(model, folder)
    row = ((data or {}).get("measured", {}).get(method) or {}).get(dataset)
    if not row:
        return None
    return Measured(data["model"], method, dataset, row.get("protocol", data["protocol"]), int(row["n"]),
                    _int(row.get("answerable")),
                    _float(row.get("auroc")), _float(row.get("auroc_lo")), _float(row.get("auroc_hi")),
                    _float(row.get("acc")), _float(row.get("acc_lo")), _float(row.get("acc_hi")),
                    _float(row.get("threshold")))


def questions_like(model: str, *, task: str, has_context: bool, folder: str | Path = MEASURED_DIR) -> QuestionsLike:
    """The datasets every card cites for a question of ``task`` (with or without a document) on ``model``: the
    one closest-dataset rule (:func:`~grade.verdict.detectors.routing.closest_datasets`) among the datasets the
    model's file measured."""
    data = read_measured(model, folder) or {}
    return closest_datasets(task, has_context, (data.get("datasets") or {}).keys())


def questions_line(like: QuestionsLike) -> str:
    """The sentence a screen states once: "short answers, no document → TriviaQA + NQ-Open, pooled"."""
    if not like.datasets:
        return f"{like.why or 'no labelled questions like this one were measured'}: no card cites a number"
    title = like.kind.title if like.kind is not None else f"{like.task} questions"
    pooled = ", pooled" if len(like.datasets) > 1 else ""
    why = f" ({like.why})" if like.why else ""
    return f"{title} → {dataset_title(like.key)}{pooled}{why}"


def _first_enough(found: Iterable[Measured | None]) -> Measured | None:
    found = [f for f in found if f is not None]
    return next((f for f in found if f.enough), found[0] if found else None)


def cited(model: str, methods: Iterable[str], like: QuestionsLike, folder: str | Path = MEASURED_DIR) -> Measured | None:
    """The row a card cites for the questions ``like`` names: the first of ``methods`` measured on that pool with
    enough of each class, else the first measured there at all (its sentence then says why there is no number)."""
    if not like.datasets:
        return None
    return _first_enough(measured(model, method, like.key, folder) for method in methods)


def probe_methods(loss: str) -> tuple[str, ...]:
    return tuple(form.format(loss=loss) for form in PROBE_METHODS)


def detector_methods(name: str) -> tuple[str, ...]:
    """The rows a detector's card may cite, best first: the shipped detector itself, then its form."""
    from .detectors.specs import DETECTORS

    spec = DETECTORS.get(name)
    method = spec.measured_as if spec is not None else ""
    return (DETECTOR_ITSELF.format(form=method), method) if method else ()


def probe_measured(model: str, loss: str, *, task: str, has_context: bool,
                   folder: str | Path = MEASURED_DIR) -> Measured | None:
    """What the probe card cites for a question: the shipped probe's row on the questions like it
    (:func:`questions_like`, :func:`cited`)."""
    return cited(model, probe_methods(loss), questions_like(model, task=task, has_context=has_context, folder=folder),
                 folder)


def detector_measured(model: str, name: str, *, task: str, has_context: bool,
                      folder: str | Path = MEASURED_DIR) -> Measured | None:
    """What detector ``name``'s card cites for a question: the same questions as the probe card's
    (:func:`questions_like`)."""
    return cited(model, detector_methods(name), questions_like(model, task=task, has_context=has_context,
                                                               folder=folder), folder)


@dataclass(frozen=True)
class QuestionEvidence:
    """Every card's evidence for one question on one screen: the questions like it (stated once, ``line``), the
    probe's row and each detector's row (by detector name), all on the same datasets."""

    model: str
    loss: str
    questions: QuestionsLike
    probe: Measured | None
    detectors: dict[str, Measured | None] = field(default_factory=dict)

    @property
    def line(self) -> str:
        return questions_line(self.questions)

    @property
    def datasets(self) -> tuple[str, ...]:
        return self.questions.datasets


def question_evidence(model: str, loss: str, *, task: str, has_context: bool, detectors: Iterable[str] = (),
                      folder: str | Path = MEASURED_DIR) -> QuestionEvidence:
    """The evidence of every card on a screen (``detectors``: detector names, e.g.
    :data:`grade.verdict.detectors.DETECTORS`' keys), from one call of the closest-dataset rule."""
    like = questions_like(model, task=task, has_context=has_context, folder=folder)
    return QuestionEvidence(model, loss, like, cited(model, probe_methods(loss), like, folder),
                            {name: cited(model, detector_methods(name), like, folder) for name in detectors})


def shipped_probe_quality(model: str, loss: str, folder: str | Path = MEASURED_DIR) -> list[Measured]:
    """The shipped probe's cited numbers, one row per kind of question the model's file measured (the rows every
    card cites, :data:`~grade.verdict.detectors.routing.QUESTION_KINDS` order): what Home, Probes and Benchmarks
    show for the shipped probe of ``model`` and ``loss``."""
    data = read_measured(model, folder) or {}
    available = (data.get("datasets") or {}).keys()
    rows = []
    for kind in QUESTION_KINDS:
        like = closest_datasets(kind.tasks[0], bool(kind.with_document), available)
        if like.datasets and not like.why and like.kind == kind:
            found = cited(model, probe_methods(loss), like, folder)
            if found is not None:
                rows.append(found)
    return rows


def probe_evidence(model: str, loss: str, *, task: str, has_context: bool, verdict=None,
                   folder: str | Path = MEASURED_DIR) -> str:
    """The sentence a verdict card cites (:func:`probe_measured`); for a model without a benchmark file, the
    probe's own test split (``verdict``: :class:`~grade.verdict.verdict.Verdict`), held to the same rule."""
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
    :func:`detector_measured` on the questions like this one; for a model without a benchmark file, the detector's
    own test questions of its routed kind, held to the same rule."""
    found = detector_measured(model, detector.name, task=task, has_context=has_context, folder=folder)
    if found is None and detector.kind:
        found = Measured.from_test(model, detector.name, detector.kind, detector.test)
    return "not measured on questions like this one" if found is None else found.sentence()


# ------------------------------------------------------------------------------------------------ writing


def _rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _number_row(row: dict) -> dict[str, Any]:
    out = {"n": int(float(row["n"])), "answerable": _int(row.get("positives"))}
    for key in ("auroc", "auroc_lo", "auroc_hi", "acc", "acc_lo", "acc_hi", "threshold"):
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


def pooled_metrics(y, s, threshold: float | None = None, *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """AUROC (through :func:`grade.common.metrics.auroc`) with its stratified-bootstrap interval, and where a
    threshold is given the accuracy at it with its interval, on out-of-sample scores ``s`` of labels ``y``."""
    import numpy as np

    from ..common.metrics import bootstrap_ci, heldout_metrics

    y, s = np.asarray(y).astype(int), np.asarray(s, dtype=float)
    m = heldout_metrics(y, s, 0.5 if threshold is None else threshold, n_boot=n_boot, seed=seed)
    out = {"n": m["n"], "positives": m["positives"], "auroc": m["auroc"], "auroc_lo": m["auroc_lo"],
           "auroc_hi": m["auroc_hi"]}
    if threshold is not None:
        out["acc"] = m["acc"]
        out["acc_lo"], out["acc_hi"] = bootstrap_ci(y, s, lambda t, p: float(((p >= threshold) == t).mean()),
                                                    n_boot=n_boot, seed=seed)
        out["threshold"] = threshold
    return out


def _score_frames(folder: Path) -> list[tuple[Any, str]]:
    """The per-question out-of-sample scores of a results folder, long form (dataset, id, label, method, score
    [, threshold]), each with the protocol its rows are cited under."""
    import pandas as pd

    frames = []
    if (folder / "heldout_scores.csv.xz").is_file():
        frames.append((pd.read_csv(folder / "heldout_scores.csv.xz"), "heldout"))
    if (folder / "crossfit_scores.csv.xz").is_file():
        wide = pd.read_csv(folder / "crossfit_scores.csv.xz")
        keep = [c for c in wide.columns if c not in ("dataset", "id", "label", "fold", "confidently_wrong")]
        frames.append((wide.melt(id_vars=["dataset", "id", "label"], value_vars=keep, var_name="method",
                                 value_name="score").dropna(subset=["score"]), "crossfit"))
    elif (folder / "test_scores.csv.xz").is_file():
        frames.append((pd.read_csv(folder / "test_scores.csv.xz").dropna(subset=["score"]), "capped"))
    return frames


def pooled_rows(folder: Path, methods: set[str] | None = None) -> dict[str, dict[str, dict]]:
    """{method: {pool name: row}} for every kind of question whose pool holds two or more datasets scored in
    ``folder`` (:data:`~grade.verdict.detectors.routing.QUESTION_KINDS`), from its per-question scores; the held-out
    scores also per dataset (with the accuracy at the artifact's threshold). ``methods``: only these."""
    out: dict[str, dict[str, dict]] = {}
    for frame, protocol in _score_frames(folder):
        for method, rows in frame.groupby("method"):
            if methods is not None and method not in methods:
                continue
            threshold = (float(rows["threshold"].iloc[0]) if "threshold" in rows and rows["threshold"].notna().all()
                         else None)
            present = set(rows["dataset"])
            pools = [tuple(d for d in kind.datasets if d in present) for kind in QUESTION_KINDS]
            pools = [p for p in pools if len(p) > 1] + ([(d,) for d in sorted(present)] if protocol == "heldout" else [])
            for pool in pools:
                part = rows[rows["dataset"].isin(pool)]
                if part["label"].nunique() < 2:
                    continue
                m = pooled_metrics(part["label"], part["score"], threshold)
                out.setdefault(method, {})[pooled_name(pool)] = {**_number_row(m), "protocol": protocol}
    return out


def build_measured(folder: str | Path, root: str | Path | None = None) -> dict:
    """The measured-numbers file (module docstring) of one benchmark results folder; ``root``: where the
    labelled files its ``summary.json`` names are relative to (the repository)."""
    folder = Path(folder)
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    crossfit = (summary.get("protocol") or {}).get("protocol") == "crossfit"
    table = (folder / "all_questions.csv") if crossfit and (folder / "all_questions.csv").is_file() else folder / "main_table.csv"
    out: dict[str, dict] = {}
    for row in _rows(table):
        out.setdefault(row["method"], {})[row["dataset"]] = _number_row(row)
    if crossfit:  # the loss alone (the "Entropy after the prompt" detector's statistic) is one of GRADE's variants
        for row in _rows(folder / "grade_variants.csv"):
            if row["variant"] in {LOSS_ALONE.format(loss=loss) for loss in ("pre", "pos")}:
                out.setdefault(row["variant"], {})[row["dataset"]] = _number_row(row)
    # pools, and the shipped probes and detectors themselves on the held-out split
    for method, rows in pooled_rows(folder).items():
        if method in out or method.endswith(("(shipped probe)", "(shipped detector)")) or "[" in method:
            out.setdefault(method, {}).update(rows)
    used = {d for rows in out.values() for key in rows for d in key.split("+")}
    datasets = {name: _dataset_meta(name, entry, Path(root) if root else None)
                for name, entry in (summary.get("datasets") or {}).items() if name in used}
    return {"format": MEASURED_FORMAT, "model": summary["model"], "protocol": "crossfit" if crossfit else "capped",
            "source": f"results/{folder.name}/{table.name}", "regenerate": REGENERATE,
            "min_per_class": MIN_PER_CLASS, "datasets": datasets, "measured": out}


def write_measured(folder: str | Path, out_dir: str | Path = MEASURED_DIR, root: str | Path | None = None) -> Path:
    """:func:`build_measured` of ``folder`` written to ``<out_dir>/<model>.json``; returns the path."""
    data = build_measured(folder, root)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{Path(folder).name}.json"
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    _read.cache_clear()
    return path


__all__ = ["Measured", "QuestionEvidence", "MIN_PER_CLASS", "MIN_QUESTIONS", "MEASURED_DIR", "enough", "too_few",
           "measured", "questions_like", "questions_line", "cited", "probe_measured", "detector_measured",
           "question_evidence", "shipped_probe_quality", "probe_evidence", "detector_evidence", "pooled_metrics",
           "read_measured", "build_measured", "write_measured", "dataset_title"]
