"""Traces with a known first wrong step for the step verifier: the annotated real errors and the injected ones.

* :func:`annotated_traces`: the package's ``grade/datasets/real_step_errors/*.jsonl`` (the model's own GSM8K
  replies, read step by step; see that folder's README), each with its ``split`` (dev / test, fixed by the
  problem id) and ``first_wrong_step`` (0-based, None = every step correct).
* :func:`training_traces`: what the verifier may learn from at scale, never a problem of an annotated test
  row: one injected error (:func:`grade.steps.step_errors.inject`) in each of the model's own correct traces
  (annotated-correct dev traces and majority replies of problems it solved) and in GSM8K reference solutions;
  :func:`own_traces`: the model's own replies as written, labelled by completions (:mod:`grade.steps.rollouts`).

:class:`LabelledTrace` is the one row type; its ``first_wrong`` is 0-based in ``split_steps(trace)``.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from importlib import resources
from typing import Iterable, Sequence

from ..gradients.losses import split_steps
from .step_errors import INJECTIONS, inject

#: The annotated files' folder (package data).
ANNOTATED_DIR = "datasets/real_step_errors"


@dataclass(frozen=True)
class LabelledTrace:
    """One trace with a known first wrong step (0-based) or None, and where it came from.

    source : ``annotated`` (a reader marked it), ``injected own`` (an error put into the model's correct
        trace), ``injected reference`` (into a GSM8K reference solution); kind : the error's kind.
    """

    id: str
    problem: str
    question: str
    trace: str
    first_wrong: int | None
    kind: str | None
    source: str
    split: str
    file: str = ""
    confidence: str = "high"
    task: str = "gsm8k"  # the prompt style the model answered under (grade.tasks.prompts)
    final_correct: bool | None = None  # whether the final answer matches the gold one (None: not known)


def _folder(folder=None):
    from pathlib import Path

    return Path(str(resources.files("grade") / ANNOTATED_DIR)) if folder is None else Path(folder)


def annotation_rows(name: str, folder=None) -> list[dict]:
    """The rows of one annotation file by its name (``gsm8k_qwen.a.jsonl``), stored as such or xz-compressed
    (``.jsonl.xz``, as the package keeps them: the tracked tree travels to GPU machines)."""
    from ..common.errors import InputError
    from ..common.io import iter_jsonl

    base = _folder(folder)
    path = base / name if (base / name).is_file() else base / f"{name}.xz"
    # a folder given by the user (fetched annotation sets) is read within the decompression and line caps
    rows = []
    for number, value, problem in iter_jsonl(path):
        if problem is not None:
            raise InputError(f"{path}:{number}: {problem}")
        rows.append(value)
    return rows


def annotation_files(folder=None) -> list[str]:
    """The annotation files' names (``*.jsonl``, compressed or not), sorted."""
    base = _folder(folder)
    return sorted({p.name.removesuffix(".xz") for p in [*base.glob("*.jsonl"), *base.glob("*.jsonl.xz")]})


def annotated_traces(files: Sequence[str] | None = None, folder=None) -> list[LabelledTrace]:
    """The annotated traces of ``files`` (names in the folder; default every annotation file), in file order.

    folder : default the package's :data:`ANNOTATED_DIR`; a path reads another copy of the same format.
    """
    names = annotation_files(folder) if files is None else list(files)
    out = []
    for name in names:
        for row in annotation_rows(name, folder):
            first = row.get("first_wrong_step")
            if first is not None and not 0 <= int(first) < len(split_steps(row["trace"])):
                raise ValueError(f"{name}: {row['id']} marks step {first} of {len(split_steps(row['trace']))}")
            # a file with several traces of one problem names it in ``problem`` (folds and the test ban group by it)
            out.append(LabelledTrace(f"{name.split('.')[0]}:{row['id']}", row.get("problem", row["id"]),
                                     row["question"], row["trace"],
                                     None if first is None else int(first), row.get("kind"), "annotated",
                                     row["split"], name, row.get("confidence", "high"), row.get("dataset", "gsm8k"),
                                     row.get("final_correct")))
    return out


def held_out_problems(traces: Iterable[LabelledTrace]) -> set[str]:
    """Problem ids of every annotated test row: nothing the verifier trains on may share one."""
    return {t.problem for t in traces if t.split == "test"}


def _injected(question: str, text: str, i: int, rng: random.Random) -> tuple[str, int, str] | None:
    """One error in ``text``, the kinds taken in turn from ``i``: (new text, 0-based step, kind)."""
    for shift in range(len(INJECTIONS)):
        kind = INJECTIONS[(i + shift) % len(INJECTIONS)]
        made = inject(question, text, kind, rng)
        if made is not None:
            new, step = made
            # the injected number must not move a step boundary: step k must stay the error's step
            expected = len(split_steps(text)) - (kind == "dropped step")
            if len(split_steps(new)) == expected:
                return new, step - 1, kind
    return None


def training_traces(annotated: Sequence[LabelledTrace], label_rows: Iterable[dict], reference_rows: Iterable[dict],
                    *, seed: int = 0, n_reference: int | None = None) -> list[LabelledTrace]:
    """Injected-error traces for training (split ``train``), none from a problem of an annotated test row.

    annotated : every annotated trace (their test problems are excluded; their correct dev traces get errors).
    label_rows : the model's labels file (``id``, ``question``, ``label``, ``majority``): majority replies of
        problems it solved (label 1) and that no annotation holds get errors too.
    reference_rows : GSM8K problems (``id``, ``question``, ``solution``): reference solutions with an error.
    """
    banned = held_out_problems(annotated)
    annotated_problems = {t.problem for t in annotated}
    own = [(t.problem, t.question, t.trace) for t in annotated
           if t.split == "dev" and t.first_wrong is None and t.source == "annotated"]
    own += [(str(r["id"]), r["question"], r["majority"]) for r in label_rows
            if r.get("label") == 1 and r.get("majority") and str(r["id"]) not in annotated_problems]
    out = []
    for problem, question, text in own:
        if problem in banned:
            continue
        # the kind and the generator from the problem alone: a problem banned or annotated later (a new annotation
        # file) changes no other trace's error, so cached features stay valid
        made = _injected(question, text, zlib.crc32(problem.encode()), random.Random(f"{seed}:own:{problem}"))
        if made is not None:
            new, step, kind = made
            out.append(LabelledTrace(f"own:{problem}:{kind.split()[0]}", problem, question, new, step, kind,
                                     "injected own", "train"))
    refs = [r for r in reference_rows if r.get("solution")][:n_reference]
    for row in refs:
        if str(row["id"]) in banned:
            continue
        made = _injected(row["question"], row["solution"], zlib.crc32(str(row["id"]).encode()),
                         random.Random(f"{seed}:ref:{row['id']}"))
        if made is not None:
            new, step, kind = made
            out.append(LabelledTrace(f"ref:{row['id']}:{kind.split()[0]}", str(row["id"]), row["question"], new, step,
                                     kind, "injected reference", "train"))
    return out


def own_traces(annotated: Sequence[LabelledTrace], label_rows: Iterable[dict]) -> list[LabelledTrace]:
    """The model's own replies as written (the majority reply of each labelled question; source ``own``, split
    ``train``), never of a problem of an annotated test row. ``first_wrong`` is None here: a reply whose answer
    was labelled right is taken as correct, the others get theirs from completions
    (:mod:`grade.steps.rollouts`)."""
    banned = held_out_problems(annotated)
    return [LabelledTrace(f"own:{r['id']}", str(r["id"]), r["question"], r["majority"].strip(), None, None, "own",
                          "train", task=r.get("task", "gsm8k"))
            for r in label_rows if r.get("majority", "").strip() and str(r["id"]) not in banned]


def trace_line(row: dict) -> dict:
    """One annotation row as a line of the project's trace JSONL (``python -m grade traces --samples``): the first
    wrong step as the 1-based ``error_step``, its kind as ``error_kind``; the prompt style from the row's dataset."""
    wrong_at = row["first_wrong_step"]
    return {"doc_id": row["id"], "question": row["question"], "response": row["trace"], "answers": row["answers"],
            "correct": bool(row["final_correct"]), "task": row.get("dataset", "gsm8k"),
            "error_step": None if wrong_at is None else wrong_at + 1, "error_kind": row["kind"]}
