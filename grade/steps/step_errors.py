"""The step-error benchmark: reasoning traces whose first wrong step is known, and how well each locator of
:mod:`grade.steps.locate` finds it.

Three sources of traces (all from the dev subsets the project ships; never a test split):

* **injected** errors in GSM8K reference solutions, one per solution, of four kinds (:data:`INJECTIONS`):
  a stated result changed (``= 28`` -> ``= 29``), a number of the question copied wrong (the step's
  result recomputed with it, as a model that misread would), a wrong operation (``+`` for ``-``, the result
  recomputed), a dropped step (the step after the gap uses a result never computed). Problems are split
  into ``train`` and ``test`` by a hash of their id (the learned step probe trains on ``train`` only);
* the **model's own** wrong traces (its majority answer on problems it never solved, from its labels file)
  whose first wrong step is an arithmetic slip verified mechanically: the first ``a op b = c`` that does
  not hold, with every number of the steps before it found in the question or the reference solution;
* **annotated** traces: error steps an analyst marked in a trace store (``annotations.json``).

:func:`build_benchmark` writes the traces as this project's trace JSONL (with ``error_step`` and
``error_kind``); ``python -m grade traces`` analyses them into a store; :func:`score_store` scores every
locator per source and kind. ``python -m grade steperrors`` does all three and writes ``results/step_errors``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..gradients.losses import split_steps
from .kinds import canonical_kind
from .step_checks import CONSTANTS, check_steps, known_numbers

INJECTIONS = ("result changed", "question number copied wrong", "wrong operation", "dropped step")
OWN_KIND = "own arithmetic slip"
ANNOTATED_KIND = "annotated"

_NUMBER = re.compile(r"(?<![\d.])\d+(?:\.\d+)?(?![\d])")
# "a op b = c" with plain numbers (calculator-style GSM8K steps): operands, operator and result spans
_BINARY = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([-+*/x×])\s*(\d+(?:\.\d+)?)\s*=\s*\$?(\d+(?:\.\d+)?)(?![\d])")
_RESULT = re.compile(r"=\s*\$?(\d+(?:\.\d+)?)(?![\d])")


@dataclass
class BenchTrace:
    """One trace with a known first wrong step (1-based, in :func:`grade.gradients.losses.split_steps`' steps)."""

    doc_id: str
    question: str
    response: str
    error_step: int
    error_kind: str
    split: str  # train / test (injected, :func:`split_of`), test (own)
    answers: tuple[str, ...] = ()
    correct: bool = False

    def to_json(self) -> str:
        row = asdict(self)
        row["answers"] = list(self.answers)
        row["task"] = "gsm8k"
        return json.dumps(row)


def split_of(doc_id: str) -> str:
    """``train`` for about half of the problems, ``test`` for the rest, fixed by the id alone."""
    return "train" if int(hashlib.sha256(doc_id.encode()).hexdigest(), 16) % 2 == 0 else "test"


def _fmt(value: Fraction) -> str | None:
    """A value as a solution would write it, or None where it is not a short decimal."""
    if value <= 0:
        return None
    if value.denominator == 1:
        return str(value.numerator)
    as_float = float(value)
    if abs(round(as_float, 2) - as_float) < 1e-9:
        return f"{as_float:.2f}".rstrip("0").rstrip(".")
    return None


def _apply(op: str, a: Fraction, b: Fraction) -> Fraction | None:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op in "*x×":
        return a * b
    return a / b if b else None


def _other_value(value: Fraction, rng: random.Random, avoid: set[Fraction]) -> Fraction | None:
    """A plausible slip: off by one or two, off by ten, or two digits swapped."""
    options = [value + d for d in (1, -1, 2, -2, 10, -10)]
    text = str(value.numerator) if value.denominator == 1 else None
    if text and len(text) >= 2 and text[-1] != text[-2]:
        options.append(Fraction(text[:-2] + text[-1] + text[-2]))
    rng.shuffle(options)
    for option in options:
        if option > 0 and option not in avoid and option != value:
            return option
    return None


def _replace(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def inject(question: str, solution: str, kind: str, rng: random.Random) -> tuple[str, int] | None:
    """``solution`` with one error of ``kind`` and the 1-based step where it first goes wrong, or None where
    this solution offers no place for that kind."""
    spans = split_steps(solution)
    # the last step is the "#### answer" line: errors go into the working
    work = [k for k, (a, b) in enumerate(spans) if "####" not in solution[a:b]]
    question_numbers = known_numbers(question)
    avoid = question_numbers | {Fraction(m.group()) for m in _NUMBER.finditer(solution.replace(",", ""))}
    order = list(work)
    rng.shuffle(order)
    for k in order:
        a, b = spans[k]
        step = solution[a:b]
        if kind == "result changed":
            matches = list(_RESULT.finditer(step))
            if not matches:
                continue
            m = rng.choice(matches)
            new = _other_value(Fraction(m.group(1)), rng, avoid)
            if new is None or _fmt(new) is None:
                continue
            return _replace(solution, a + m.start(1), a + m.end(1), _fmt(new)), k + 1
        if kind in ("question number copied wrong", "wrong operation"):
            matches = list(_BINARY.finditer(step))
            rng.shuffle(matches)
            for m in matches:
                x, op, y, result = Fraction(m.group(1)), m.group(2), Fraction(m.group(3)), Fraction(m.group(4))
                if _apply(op, x, y) != result:
                    continue
                if kind == "wrong operation":
                    swapped = {"+": "-", "-": "+", "*": "/", "x": "/", "×": "/", "/": "*"}[op]
                    new_result = _apply(swapped, x, y)
                    text = _fmt(new_result) if new_result is not None else None
                    if text is None or new_result in avoid:
                        continue
                    new_step = (step[: m.start(2)] + swapped + step[m.end(2): m.start(4)] + text + step[m.end(4):])
                    return solution[:a] + new_step + solution[b:], k + 1
                # copied wrong: an operand that is a number of the question (not an everyday constant)
                for group, value in ((1, x), (3, y)):
                    if value not in question_numbers or value in CONSTANTS:
                        continue
                    wrong = _other_value(value, rng, avoid)
                    if wrong is None or _fmt(wrong) is None:
                        continue
                    operands = (wrong, y) if group == 1 else (x, wrong)
                    new_result = _apply(op, *operands)
                    text = _fmt(new_result) if new_result is not None else None
                    if text is None:
                        continue
                    new_step = _replace(step, m.start(4), m.end(4), text)
                    new_step = _replace(new_step, m.start(group), m.end(group), _fmt(wrong))
                    return solution[:a] + new_step + solution[b:], k + 1
            continue
        if kind == "dropped step":
            if k + 1 >= len(spans) or k + 1 not in work:
                continue
            results = [Fraction(m.group(1)) for m in _RESULT.finditer(step)]
            nxt = solution[spans[k + 1][0]: spans[k + 1][1]]
            used = {Fraction(m.group()) for m in _NUMBER.finditer(nxt.replace(",", ""))}
            if not any(r in used and r not in question_numbers for r in results):
                continue
            return solution[:a] + solution[b:], k + 1
    return None


def injected_traces(rows: Iterable[dict], *, seed: int = 0, limit: int | None = None) -> list[BenchTrace]:
    """One injected error per GSM8K row (``question``, ``solution``, ``id``), the kinds taken in turn."""
    rng = random.Random(seed)
    out: list[BenchTrace] = []
    for i, row in enumerate(rows):
        if limit is not None and len(out) >= limit:
            break
        solution = row.get("solution")
        if not solution:
            continue
        # the calculator-free GSM8K solutions still contain "x" for times in places; keep as written
        for shift in range(len(INJECTIONS)):
            kind = INJECTIONS[(i + shift) % len(INJECTIONS)]
            made = inject(row["question"], solution, kind, rng)
            if made is not None:
                text, step = made
                out.append(BenchTrace(f"{row['id']}:{kind.split()[0]}", row["question"], text, step, kind,
                                      split_of(row["id"]), tuple(row.get("answers") or ())))
                break
    return out


def wrong_traces(label_rows: Iterable[dict], *, every_sample: bool = False) -> Iterable[tuple[str, dict, str]]:
    """(trace id, labels row, text) of the model's wrong answers in a labels file: the majority answer of
    each problem it never solved, or with ``every_sample`` every sample scored wrong (for files whose
    samples are stored whole, as ``python -m grade traces --generate`` writes them)."""
    for row in label_rows:
        if every_sample:
            for k, (text, score) in enumerate(zip(row.get("samples") or [], row.get("scores") or [])):
                if not score and text:
                    yield f"{row['id']}:s{k}", row, text
        elif row.get("label") == 0 and row.get("majority"):
            yield str(row["id"]), row, row["majority"]


def own_slips(label_rows: Iterable[dict], references: dict[str, str], *, every_sample: bool = False) -> list[BenchTrace]:
    """The model's wrong answers (:func:`wrong_traces`) whose first wrong step is a verified arithmetic slip.

    references : problem id -> reference solution (the numbers a correct trace may state).
    """
    out = []
    for trace_id, row, text in wrong_traces(label_rows, every_sample=every_sample):
        if row["id"] not in references:
            continue
        spans = split_steps(text)
        steps = [text[a:b] for a, b in spans]
        findings = check_steps(row["question"], steps)
        first = next((k for k, found in enumerate(findings) if any(f.kind == "arithmetic" for f in found)), None)
        if first is None:
            continue
        allowed = known_numbers(row["question"]) | known_numbers(references[row["id"]]) | set(CONSTANTS)
        before = known_numbers("\n".join(re.sub(r"^\s*\d{1,2}[.)]\s", " ", s, flags=re.M) for s in steps[:first]))
        if not before <= allowed | {v / 100 for v in allowed} | {v * 100 for v in allowed}:
            continue  # an earlier step already left the reference path: its first error is not the slip
        out.append(BenchTrace(trace_id, row["question"], text, first + 1, OWN_KIND, "test",
                              tuple(str(a) for a in row.get("answers") or ())))
    return out


def build_benchmark(dataset_rows: Sequence[dict], path: str | Path, *, label_rows: Sequence[dict] = (),
                    generated_rows: Sequence[dict] = (), n_injected: int = 400, max_own: int | None = None,
                    seed: int = 0) -> dict:
    """Write the benchmark's trace JSONL; returns counts per kind and split.

    dataset_rows : problems with ``id``, ``question``, ``solution``, ``answers`` (the injected errors' source).
    label_rows : a labels file (majority answers); generated_rows : a labels file with whole samples.
    """
    traces = injected_traces(dataset_rows, seed=seed, limit=n_injected)
    references = {r["id"]: r["solution"] for r in dataset_rows if r.get("solution")}
    own = own_slips(label_rows, references) + own_slips(generated_rows, references, every_sample=True)
    seen: set[str] = set()
    for trace in own[:max_own]:
        problem = trace.doc_id.split(":")[0]
        if problem not in seen:  # one slip per problem: the traces of one problem are not independent
            seen.add(problem)
            traces.append(trace)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from ..common.io import atomic_write

    atomic_write(path, "".join(t.to_json() + "\n" for t in traces))
    counts: dict[str, int] = {}
    for t in traces:
        key = f"{t.error_kind} ({t.split})"
        counts[key] = counts.get(key, 0) + 1
    return counts


# ------------------------------------------------------------------------------------------------
# scoring a store of analysed benchmark traces


def score_store(frame, tokens, *, probe_train_split: str = "train", n_boot: int = 1000) -> dict:
    """Every locator's metrics per source of errors, from a trace store's traces and tokens.

    frame : the store's traces (with ``error_step`` and ``error_kind``); tokens : its token rows. Injected
        errors are split into train and test by :func:`split_of` their problem's id.
    The learned probes (:class:`grade.steps.locate.StepProbe`, with and without GRADE's features) train on the
    injected errors of ``probe_train_split`` and are scored on everything else.
    """
    import pandas as pd

    from .locate import LOCATORS, StepProbe, locate, localization_metrics, signals_of_row

    by_trace = {tid: part for tid, part in tokens.groupby("trace_id")} if len(tokens) else {}
    frame = frame.copy()
    frame["split"] = [split_of(str(d).split(":")[0]) if k in INJECTIONS else "test"
                      for d, k in zip(frame["doc_id"], frame["error_kind"])]
    items = []
    for _, row in frame.iterrows():
        error = row.get("error_step")
        if error is None or error is pd.NA or not np.isfinite(error) or not 1 <= int(error) <= int(row["n_steps"]):
            continue
        part = by_trace.get(row["trace_id"])
        signals = signals_of_row(row, part.sort_values("position") if part is not None else None)
        ratios = np.array([list(r) for r in row["step_ratios"]], dtype=float)
        items.append((row, signals, ratios, int(error)))
    train = [(s, r, e) for row, s, r, e in items
             if row.get("split") == probe_train_split and row["error_kind"] in INJECTIONS]
    probes = {}
    if len(train) >= 20:
        probes = {"probe (GRADE + surprisal + loss)": StepProbe(grade=True).fit(train),
                  "probe (surprisal + loss only)": StepProbe(grade=False).fit(train)}
    groups: dict[str, list] = {}
    for row, s, r, e in items:
        if row.get("split") == probe_train_split and row["error_kind"] in INJECTIONS:
            continue  # scored only on what no probe trained on
        source = "own" if row["error_kind"] == OWN_KIND else "annotated" if row["error_kind"] == ANNOTATED_KIND \
            else "injected"
        groups.setdefault(f"{source}: all", []).append((row, s, r, e))
        if source == "injected":
            groups.setdefault(f"injected: {row['error_kind']}", []).append((row, s, r, e))
        try:  # every kind also under its id in the one vocabulary (grade.steps.kinds): injected, own or marked
            kind = canonical_kind(row["error_kind"])
        except ValueError:
            kind = None
        if kind is not None:
            groups.setdefault(f"kind: {kind}", []).append((row, s, r, e))
    results: dict = {"groups": {}, "locators": {n: d for n, (d, _) in LOCATORS.items()}}
    for group, members in groups.items():
        table = {}
        for name in LOCATORS:
            table[name] = localization_metrics([(locate(s, name), e) for _, s, _, e in members], n_boot=n_boot)
        for name, probe in probes.items():
            table[name] = localization_metrics([(probe.score(s, r), e) for _, s, r, e in members], n_boot=n_boot)
        results["groups"][group] = table
    results["probe_train"] = len(train)
    return results


def results_markdown(results: dict, *, machine: str = "") -> str:
    """The tables of :func:`score_store` as Markdown: one per group, a row per locator."""
    lines = []
    for group, table in results["groups"].items():
        any_row = next(iter(table.values()))
        lines += [f"### {group} (n = {any_row['n']}, {any_row['steps_mean']:.1f} steps on average)", "",
                  f"Chance: top-1 {any_row['top1']['chance']:.2f}, top-3 {any_row['top3']['chance']:.2f}, "
                  "step-AUROC 0.50.", "",
                  "| locator | top-1 [95 % CI] | top-3 [95 % CI] | step-AUROC [95 % CI] |", "|---|---|---|---|"]
        order = sorted(table, key=lambda n: -table[n]["top1"]["value"])
        for name in order:
            m = table[name]
            cells = [f"{m[k]['value']:.2f} [{m[k]['low']:.2f}, {m[k]['high']:.2f}]" for k in ("top1", "top3", "step_auroc")]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    if machine:
        lines.append(f"Machine: {machine}.")
    return "\n".join(lines)
