"""Sentences the pages compute from the numbers they show (no Streamlit), and the short explanations
of the terms they use, so that a claim on a page cannot drift away from its own table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from grade.studies import GRADE_METHODS, LENGTH_METHODS  # length alone: a confound, not a detector

#: Below this many test questions (or with one class missing) an AUROC and its interval say little.
# one rule with the cards' citations: an AUROC on fewer questions is not read as a result
from grade.verdict.measured import MIN_PER_CLASS, too_few  # noqa: E402
from grade.verdict.measured import MIN_QUESTIONS as SMALL_TEST_SET  # noqa: E402


#: One-line explanations of the terms the pages use, in words a student follows.
TERMS = {
    "AUROC": "**AUROC** (area under the ROC curve): the chance that the detector gives a randomly picked answerable "
             "question a higher score than a randomly picked unanswerable one. 0.5 is guessing, 1.0 is perfect; "
             "below 0.5 the score points the wrong way. Where an interval follows in brackets, it is a 95% bootstrap "
             "interval: with few questions it is wide.",
    "loss pre": "**loss `pre`**: the loss GRADE differentiates when it looks at the question alone: the entropy "
                "(uncertainty) of the model's next-token distribution right after the prompt, so no answer needs "
                "to be generated. **loss `pos`** instead is the mean cross-entropy of the model's own answer "
                "tokens given the prompt.",
    "SAPLMA": "**SAPLMA**: a baseline detector, a small neural network (layers of 256, 128 and 64 units) trained "
              "on the model's hidden state 12 layers from the top at the answer's last token: it asks whether "
              "the internal representation alone tells answerable from unanswerable.",
    "rank ratio": "**rank ratio**: per layer, the stable rank of the gradient covariance C_g divided by that of the "
                  "activation covariance C_h: how many directions the gradient spreads over, relative to how many "
                  "the activations use.",
}


def explain(*terms: str) -> str:
    """The explanations of ``terms`` as a markdown list."""
    return "\n".join(f"- {TERMS[t]}" for t in terms)


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def small_sample_problem(n, positives) -> str | None:
    """Why an AUROC measured on ``n`` questions with ``positives`` answerable ones says little, else None."""
    if _missing(n):
        return None
    n = int(n)
    if not _missing(positives) and (int(positives) == 0 or int(positives) == n):
        return f"n = {n} with only one class ({'all answerable' if int(positives) == n else 'none answerable'}): " \
               "no AUROC can be measured"
    if not _missing(positives):  # the cards' one evidence rule: enough questions of each class
        return too_few(n, int(positives))
    if n < 2 * MIN_PER_CLASS:
        return f"only n = {n} test questions"
    return None


def small_sample_warning(items: Iterable[tuple[str, object, object]]) -> str | None:
    """One warning for the (label, n, positives) whose AUROC rests on too few questions, else None."""
    problems = [f"{label}: {problem}" for label, n, pos in items if (problem := small_sample_problem(n, pos))]
    if not problems:
        return None
    return (f"Small test sets (under {MIN_PER_CLASS} questions of either class): their AUROC and interval "
            "can land anywhere by chance, read them as anecdotes. " + "; ".join(dict.fromkeys(problems)) + ".")


# ------------------------------------------------------------------------------------ benchmarks


#: The GRADE forms the app serves (its shipped probes): the ones the paired paragraph speaks for.
SHIPPED_FORMS = ("GRADE_pre (shipped)", "GRADE_pos (shipped)")


def paired_summary(rows: Sequence[Mapping], forms: Sequence[str] = SHIPPED_FORMS) -> str | None:
    """One plain paragraph of a cross-fitted run's ``paired.csv`` rows: per reference (P-Entropy; length, the
    prompt's for ``pre`` and the whole text's for ``pos``), the datasets where GRADE's shipped forms win or lose
    beyond the 95% interval of the paired AUROC difference, and those where the interval holds 0."""
    def cell(r) -> str:
        loss = str(r["method"]).split("_")[1].split(" ")[0]
        return f"{loss} {float(r['diff']):+.2f} [{float(r['lo']):+.2f}, {float(r['hi']):+.2f}]"

    sentences = []
    for label, refs in (("P-Entropy", ("P-Entropy",)), ("length alone", ("Length_pre", "Length_pos"))):
        chosen = [r for r in rows if r["method"] in forms and r["reference"] in refs
                  and (len(refs) == 1 or str(r["reference"]).endswith(str(r["method"]).split("_")[1].split(" ")[0]))]
        if not chosen:
            continue
        by: dict[str, dict[str, list]] = {}
        for r in chosen:
            by.setdefault(r["verdict"], {}).setdefault(r["dataset"], []).append(r)
        parts = []
        for verdict, word in (("wins", "beats it"), ("loses", "trails it")):
            found = by.get(verdict, {})
            if found:
                parts.append(f"{word} on " + "; ".join(
                    f"{d} ({', '.join(cell(r) for r in cells)}, n={int(cells[0]['n'])})" for d, cells in found.items()))
        ties = [d for d in by.get("tie", {}) if d not in by.get("wins", {}) and d not in by.get("loses", {})]
        if ties:
            parts.append(f"is within the interval of it on {', '.join(ties)}")
        sentences.append(f"Against {label}, GRADE's shipped form " + "; ".join(parts) + ".")
    if not sentences:
        return None
    return (" ".join(sentences) + " (AUROC difference with its 95% paired-bootstrap interval, on the questions "
            "both score; a difference whose interval holds 0 decides nothing.)")


def benchmark_summary(rows: Sequence[Mapping]) -> str | None:
    """One sentence: on which datasets of a main table GRADE (its better variant) has the highest test AUROC
    among the detectors, and on which it loses, to whom. ``rows``: the main table (dataset, method, n, auroc).
    The length baselines are left out of "the detectors" (they are a confound, not a detector)."""
    datasets: dict[str, dict[str, float]] = {}
    sizes: dict[str, int] = {}
    for row in rows:
        auroc = row.get("auroc")
        if _missing(auroc):
            continue
        datasets.setdefault(row["dataset"], {})[row["method"]] = float(auroc)
        if not _missing(row.get("n")):
            sizes[row["dataset"]] = int(row["n"])
    wins, losses = [], []
    others: set[str] = set()
    for dataset, scores in datasets.items():
        grade = {m: scores[m] for m in GRADE_METHODS if m in scores}
        rivals = {m: a for m, a in scores.items() if m not in GRADE_METHODS and m not in LENGTH_METHODS}
        if not grade or not rivals:
            continue
        others |= set(rivals)
        best_grade = max(grade, key=grade.get)
        best_rival = max(rivals, key=rivals.get)
        rank = 1 + sum(a > grade[best_grade] for a in rivals.values())
        if grade[best_grade] >= rivals[best_rival]:
            wins.append(f"{dataset} ({best_grade} {grade[best_grade]:.3f} vs. {best_rival} {rivals[best_rival]:.3f})")
        else:
            losses.append(f"{dataset} ({best_grade} {grade[best_grade]:.3f}, rank {rank} of {len(rivals) + 1}; "
                          f"best {best_rival} {rivals[best_rival]:.3f})")
    if not wins and not losses:
        return None
    total = len(wins) + len(losses)
    size_text = ""
    if sizes:
        lo, hi = min(sizes.values()), max(sizes.values())
        size_text = f", on {lo}–{hi} test questions per dataset" if lo != hi else f", on {lo} test questions per dataset"
    head = (f"Against the {len(others)} other detectors (length baselines aside), GRADE's better variant has the "
            f"highest test AUROC on {len(wins)} of {total} datasets{size_text}")
    parts = [head]
    if wins:
        parts.append("it wins on " + ", ".join(wins))
    if losses:
        parts.append("it loses on " + ", ".join(losses))
    return "; ".join(parts) + "."


def pick_results_folder(names: Sequence[str], model: str | None) -> str | None:
    """The results folder of ``model`` (its exact name, else the first that starts with it), else None."""
    if not model:
        return None
    if model in names:
        return model
    return next((n for n in names if n.startswith(model)), None)


# ----------------------------------------------------------------------------------- projections


def separability_summary(table: Sequence[Mapping], majority: float, majority_document: float | None = None) -> str | None:
    """What a 5-NN separability table (rows: feature space; columns: the property predicted) shows: for each
    property, which space predicts it better and whether either beats always guessing the larger class
    (``majority`` for correct / incorrect, ``majority_document`` for with / without document)."""
    rows = {r["feature space"]: r for r in table}
    if not {"hidden state", "GRADE features"} <= set(rows):
        return None
    hidden, grade = rows["hidden state"], rows["GRADE features"]
    sentences = []
    for target, what, base in (("correct / incorrect", "whether the model answered correctly", majority),
                               ("with / without document", "whether a document was in the prompt", majority_document)):
        h, g = hidden.get(target), grade.get(target)
        if _missing(h) or _missing(g):
            continue
        better = "GRADE features" if g > h else "hidden states"
        text = (f"For {what}, {better} predict it better ({max(g, h):.3f} vs. {min(g, h):.3f} 5-NN accuracy)"
                if g != h else f"For {what}, both spaces score {g:.3f}")
        if base is not None:
            beats = [name for name, v in (("hidden states", h), ("GRADE features", g)) if v > base + 0.02]
            text += (f"; the majority guess scores {base:.3f}, so " +
                     ("neither space beats it by more than 0.02" if not beats
                      else " and ".join(beats) + (" beats" if len(beats) == 1 else " beat") + " it"))
        sentences.append(text + ".")
    return " ".join(sentences) or None


# ------------------------------------------------------------------------------------------- home


def headline_reading(value: float, ratios: np.ndarray | None, labels: np.ndarray | None) -> str | None:
    """Where this question's GRADE number (the mean rank ratio over layers) falls among the labelled reference
    questions of the same model and loss: their medians by label, and whether a lower or higher number goes
    with answerable there. None without a reference set."""
    if ratios is None or labels is None or len(ratios) == 0:
        return None
    means = np.asarray(ratios, dtype=float).mean(axis=1)
    labels = np.asarray(labels).astype(int)
    if labels.min() == labels.max():
        return None
    yes, no = float(np.median(means[labels == 1])), float(np.median(means[labels == 0]))
    share_yes = float((means[labels == 1] <= value).mean())
    share_no = float((means[labels == 0] <= value).mean())
    direction = ("lower for answerable ones" if yes < no else "higher for answerable ones") if yes != no else \
        "the same for both"
    return (f"This number is the mean of the per-layer rank ratios, not a verdict: on the {len(means)} labelled "
            f"reference questions of this model its median is {yes:.3f} for answerable and {no:.3f} for unanswerable "
            f"questions ({direction}), and the two groups overlap; {value:.3f} is above {share_yes:.0%} of the "
            f"answerable and {share_no:.0%} of the unanswerable ones. The probe reads the per-layer values, not "
            f"their mean, which is why its verdict can point the other way.")


def probe_reading(bands, x, k: int = 5) -> str:
    """What the probe-inputs chart shows, for one question's inputs x (width,) against the bands of the
    probe's labelled questions (:class:`grade.verdict.probe_reading.InputBands`): which inputs separate the classes
    best alone, and on which side of each this question lies."""
    x = np.asarray(x, dtype=float).reshape(-1)
    names, side, counts = bands.names, bands.side(x), bands.counts
    best = bands.separating(k)
    parts = []
    for j in best:
        a = bands.auroc[j]
        parts.append(f"{names[j]} (AUROC alone {max(a, 1 - a):.2f}, {'higher' if a > 0.5 else 'lower'} for answerable)")
    yes = sum(1 for j in best if side[j] > 0)
    median_strength = float(np.median(np.maximum(bands.auroc, 1 - np.asarray(bands.auroc))))
    return (f"The probe reads {len(names)} numbers of this question. Over the {counts['answerable']} answerable and "
            f"{counts['unanswerable']} unanswerable questions it learned from, a typical one of them alone separates the "
            f"two classes with an AUROC of only {median_strength:.2f} (0.50 is chance): the bands overlap, and the "
            f"probe weighs many numbers together. The {len(best)} that separate best alone (ringed): {'; '.join(parts)}. "
            f"This question lies on the answerable side of {yes} of these {len(best)}.")


# ------------------------------------------------------------------------------- what Home's cards cite


@dataclass(frozen=True)
class CardEvidence:
    """What one card cites (``text``) and, where its measured numbers on these questions are no better than
    guessing (:attr:`grade.verdict.measured.Measured.adds_nothing`), why (``adds_nothing``)."""

    text: str
    adds_nothing: str | None = None

    def verdict_sentence(self, answerable: bool | None) -> str:
        """The verdict in words: what it says, or, where it adds nothing on such questions, that instead."""
        if self.adds_nothing:
            return "**No better than guessing the larger class** on questions like this: read nothing into it."
        return f"The model **{'can probably answer' if answerable else 'probably cannot answer'}**."


@dataclass(frozen=True)
class ScreenEvidence:
    """Every card's citation on one screen, all on the same questions: ``line`` names them once."""

    line: str
    probe: CardEvidence
    detectors: dict[str, CardEvidence]


def screen_evidence(model: str, loss: str, *, task: str, has_context: bool, verdict=None,
                    detectors: Sequence = ()) -> ScreenEvidence:
    """What the probe card and every detector card (``detectors``: their verdicts) cite for one question, from
    one call of the closest-dataset rule (:func:`grade.verdict.measured.question_evidence`)."""
    from grade.verdict.measured import detector_evidence, probe_evidence, question_evidence

    evidence = question_evidence(model, loss, task=task, has_context=has_context, detectors=[v.name for v in detectors])

    def card(found, text: str) -> CardEvidence:
        return CardEvidence(text, found.adds_nothing if found is not None and found.enough else None)

    probe = card(evidence.probe, probe_evidence(model, loss, task=task, has_context=has_context, verdict=verdict))
    cards = {v.name: card(evidence.detectors.get(v.name),
                          detector_evidence(model, v, task=task, has_context=has_context)) for v in detectors}
    return ScreenEvidence(evidence.line, probe, cards)
