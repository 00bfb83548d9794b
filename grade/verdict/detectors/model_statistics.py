"""What a model pass gives the detectors (:mod:`grade.verdict.detectors`): the statistics, by name, and the passes that
compute them for training tables (:func:`table_statistic`), stored records (:func:`record_statistic`), one
question (:func:`question_statistics`) and labelled rows (:func:`labelled_statistics`). Every pass is an
existing one (:func:`grade.batch.features.features_of_rows`, :func:`grade.verdict.detectors.baselines.answer_statistics`); answers
come from :mod:`grade.models.generation`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...batch.runner import ProgressBar
from ...common.errors import GradeError, ProbeError

#: statistic -> what it is. The names are the keys the training data stores them under (a feature
#: store's ``loss_value``, a baseline cache's ``p_entropy`` / ``saplma_hidden``). The module paths in brackets are
#: as the shipped detectors record them (grade.losses is grade.gradients.losses now, grade.baselines is
#: grade.verdict.detectors.baselines): their JSON's digest keys Home's shipped results.
STATISTICS: dict[str, str] = {
    "loss_value": "entropy (nats) of the next-token distribution after the prompt: the GRADE_pre loss "
                  "(grade.losses.entropy_at_last_position)",
    "p_entropy": "minus the summed full-vocabulary entropy over the greedy answer's decoding steps, the answer "
                 "at the task's length (grade.baselines.answer_statistics)",
    "saplma_hidden": "hidden_states[-12] at the greedy answer's last token, float16 "
                     "(grade.baselines.answer_statistics)",
}
#: the statistics one pass over the prompt and the greedy answer gives
ANSWER_STATISTICS = ("p_entropy", "saplma_hidden")


def table_statistic(table, statistic: str) -> np.ndarray:
    """(n, d) values of ``statistic`` for the rows of a benchmark :class:`~grade.studies.Table` (NaN rows
    where its caches lack one)."""
    n = len(table.y)
    if statistic == "loss_value":
        values = table.prompt_entropy
    elif statistic == "p_entropy":
        values = table.scores.get("P-Entropy")
    elif statistic == "saplma_hidden":
        values = table.saplma
    else:
        raise ProbeError(f"unknown statistic {statistic!r}")
    if values is None:
        return np.full((n, 1), np.nan)
    values = np.asarray(values, dtype=np.float64)
    return values.reshape(n, -1)


def record_statistic(record: dict, statistic: str) -> np.ndarray:
    """(d,) value of ``statistic`` from a feature record (``loss_value``) or a baseline record
    (:func:`grade.verdict.detectors.baselines.answer_statistics`)."""
    from .baselines import decode_vector

    value = record.get(statistic)
    if value is None:
        raise ProbeError(f"the record holds no {statistic!r}")
    if statistic == "saplma_hidden":
        return decode_vector(value).astype(np.float64)
    return np.array([float(value)])


def answer_for_task(lm, prompt_ids: list[int], task: str, shown=None):
    """The greedy answer at ``task``'s own length, which the answer statistics of the training data were
    computed on: read off ``shown`` (the greedy answer the app shows, possibly longer) where it can be
    (:func:`grade.models.generation.shorter_answer`), else generated."""
    from ...models.generation import generate, settings_for_task, shorter_answer

    settings = settings_for_task(task)
    answer = shorter_answer(lm.tokenizer, shown, settings) if shown is not None else None
    return answer if answer is not None else generate(lm, [prompt_ids], settings)[0][0]


def question_statistics(lm, prompt: str, *, task: str, statistics: Sequence[str], result=None,
                        shown_answer=None) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The statistics one question gives, for the app: ``({statistic: (d,) value}, {statistic: why
    missing})``.

    ``loss_value`` is read off ``result`` (a GRADE_pre analysis of ``prompt``); the answer statistics
    cost one pass over the prompt and the greedy answer at the task's length (:func:`answer_for_task`), or
    over the answer alone where ``result`` kept its prompt pass (``analyze(keep_prompt_pass=True)``).
    """
    from .baselines import answer_statistics
    from ...models.generation import encode_prompt

    values: dict[str, np.ndarray] = {}
    missing: dict[str, str] = {}
    if "loss_value" in statistics:
        if result is not None and result.loss == "pre":
            values["loss_value"] = np.array([float(result.loss_value)])
        else:
            missing["loss_value"] = "the analysis used the pos loss; the entropy after the prompt is the pre loss"
    wanted = [s for s in statistics if s in ANSWER_STATISTICS]
    if wanted:
        prompt_ids = encode_prompt(lm.tokenizer, prompt)
        record = answer_statistics(lm, prompt_ids, answer_for_task(lm, prompt_ids, task, shown_answer),
                                   prompt_pass=getattr(result, "prompt_pass", None))
        for statistic in wanted:
            values[statistic] = record_statistic(record, statistic)
    return values, missing


def labelled_statistics(lm, rows: list[dict], statistic: str, *, progress: bool = False,
                        batch_size: int | None = None) -> tuple[np.ndarray, list[int], list[tuple[str, str, str]]]:
    """``statistic`` for labelled rows (:func:`grade.batch.features.read_labelled`), by the passes that made the
    training data: a GRADE_pre analysis (:func:`grade.batch.features.features_of_rows`) for ``loss_value``, the
    benchmark's greedy-answer pass (:func:`grade.verdict.detectors.baselines.score_questions`) for the answer
    statistics, both batched: ``batch_size`` items at once (default: :func:`grade.models.sizing.batch_size`, from the
    device's free memory and the model's shape; 1 is the one-at-a-time path, with the same values up to float
    rounding).

    Returns ((n_kept, d) values, the kept rows' indices, skipped ``(dataset, id, reason)``).
    """
    if statistic == "loss_value":
        from ...batch.features import features_of_rows

        frame, skipped = features_of_rows(lm, rows, loss="pre", progress=progress, batch_size=batch_size)
        where = {(str(r["dataset"]), str(r["id"]), bool(r.get("context"))): i for i, r in enumerate(rows)}
        kept = [where[(str(d), str(i), bool(c))] for d, i, c in zip(frame["dataset"], frame["id"], frame["has_context"])]
        return frame["loss_value"].to_numpy(dtype=np.float64)[:, None], kept, skipped
    if statistic not in ANSWER_STATISTICS:
        raise ProbeError(f"unknown statistic {statistic!r}")
    from .baselines import items_per_batch, score_question, score_questions

    chunk = items_per_batch(lm, rows, parts=("answer",), batch_size=batch_size)
    values, kept, skipped = [], [], []

    def keep(i: int, record: dict) -> None:
        values.append(record_statistic(record, statistic))
        kept.append(i)

    with ProgressBar(progress, total=len(rows), desc=statistic, unit="q") as bar:
        for start in range(0, len(rows), chunk):
            part = list(range(start, min(start + chunk, len(rows))))
            try:
                records = score_questions(lm, [rows[i] for i in part], parts=("answer",), batch_size=batch_size)
            except GradeError:  # one bad row must not stop the others: this chunk one row at a time
                records = None
            if records is not None:
                for i, record in zip(part, records):
                    keep(i, record)
                bar.update(len(part))
                continue
            for i in part:
                try:
                    keep(i, score_question(lm, rows[i], parts=("answer",)))
                except GradeError as exc:
                    skipped.append((str(rows[i].get("dataset")), str(rows[i]["id"]), str(exc)))
                bar.update(1)
    width = values[0].shape[0] if values else 1
    return np.array(values, dtype=np.float64).reshape(len(values), width), kept, skipped
