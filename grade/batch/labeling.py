"""Labels: does the model know the answer? Sample it N times, score the samples, threshold the accuracy.

A question is *answerable* (label 1) when at least 80 % of its samples are correct and
*unanswerable* (label 0) when fewer than 20 % are (GSM8K: 60 % / 40 %); questions in between get no
label (``null``) and are left out of probe training, as in the reference pipeline.

Results go to a JSONL file, one line per question, appended and flushed as each question finishes.
A run that stops (Ctrl-C, crash, full disk) is resumed by running it again with the same output
file: ids already written are skipped, and a last line cut off mid-write is removed first.

Record fields: ``id, question, answers, context, choices, task, dataset, samples, scores, cut_off,
n_correct, n_samples, accuracy, label, majority, model, matcher, seed, max_new_tokens``. ``cut_off`` has one
boolean per sample: true where the sample stopped at ``max_new_tokens`` (files written before it existed have
no such key: not known, not false). ``context`` and
``choices`` are what the prompt used (``context`` is null for a closed-book run even when the
dataset has one), so ``format_prompt(tok, r["question"], task=r["task"], context=r["context"],
choices=r["choices"])`` rebuilds the prompt the labels were made with. ``majority`` is the most
frequent sampled answer (full text, see :func:`majority_answer`): the response the reference
appends to the prompt for ``L_pos`` features.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from .runner import RunReport, items_to_do, model_for_backend, write_in_chunks
from ..common.errors import InputError
from ..models.generation import Generation
from ..common.io import append_lines, hold_output_lock, is_compressed, open_text
from ..models.models import LoadedModel, ModelSpec
from ..models.sampling import SamplingSettings, sample_generations
from ..tasks.tasks import MATCHERS, TASKS, Question, TaskSpec, answer_format, is_correct, label_for_accuracy
from ..tasks.tasks import majority_answer as tasks_majority_answer

ProgressCallback = Callable[[int, int, dict], None]


@dataclass
class LabelSummary:
    """What a labelling run produced (counts over the whole output file, resumed lines included)."""

    path: str
    total: int = 0
    answerable: int = 0
    unanswerable: int = 0
    unlabelled: int = 0
    new: int = 0
    skipped: int = 0
    seconds: float = 0.0
    mean_accuracy: float = 0.0
    per_dataset: dict = field(default_factory=dict)
    too_long: list = field(default_factory=list)  # "id: reason" of questions skipped as too long for the model
    run: RunReport | None = None  # a Ray run's own report (workers, chunks sent again); None locally

    def balance_line(self) -> str:
        return (
            f"{self.total} questions: {self.answerable} answerable (1), {self.unanswerable} unanswerable (0), "
            f"{self.unlabelled} in between (no label); mean sample accuracy {self.mean_accuracy:.3f}"
        )


def read_records(path: str | os.PathLike, *, repair: bool = False) -> list[dict]:
    """Records of a labels file.

    Each record is written as one ``json + "\\n"``, so an interrupted write leaves a last line
    without its newline. Such a line is ignored when it is not complete JSON (and with ``repair``
    cut from the file); when it is complete, ``repair`` adds the missing newline. A bad line
    anywhere else raises :class:`InputError`: that file was not written by us, or was edited.
    An id written twice (two runs that appended to one file before runs took a lock) is read once:
    its first record.
    """
    path = Path(path)
    if not path.exists():
        return []
    if is_compressed(path):
        if repair:
            raise InputError(f"{path} is compressed: labels are appended to a plain .jsonl (decompress it: xz -dk {path})")
        with open_text(path) as handle:
            data = handle.read().encode("utf-8")
    else:
        data = path.read_bytes()
    complete = data.endswith(b"\n")
    lines = data.split(b"\n")
    if complete:
        lines.pop()  # the empty string after the final newline
    records, offset, seen = [], 0, set()
    for number, line in enumerate(lines, 1):
        unfinished = number == len(lines) and not complete
        if line.strip():
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or "id" not in record:
                    raise ValueError("not a label record")
            except ValueError:
                if not unfinished:
                    raise InputError(f"{path}, line {number}: not a label record; refusing to append to it") from None
                if repair:
                    with open(path, "r+b") as f:
                        f.truncate(offset)
                break
            key = json.dumps(record["id"], sort_keys=True)
            if key not in seen:
                seen.add(key)
                records.append(record)
            if unfinished and repair:
                with open(path, "ab") as f:
                    f.write(b"\n")
        offset += len(line) + 1
    return records


def majority_answer(question: Question, samples: list[str]) -> str | None:
    """The question's majority answer among ``samples`` (:func:`grade.tasks.tasks.majority_answer`)."""
    return tasks_majority_answer(question.task, samples, question.choices)


def settings_for(spec: TaskSpec, *, n_samples: int | None, seed: int, max_new_tokens: int | None = None) -> SamplingSettings:
    """Reference sampling settings for a task, with optional overrides."""
    fmt = answer_format(spec.name, max_new_tokens)
    return SamplingSettings(
        n_samples=n_samples or spec.default_samples,
        max_new_tokens=fmt.max_new_tokens,
        seed=seed,
        stop_strings=fmt.stop_strings,
    )


class LabelStore:
    """A labels JSONL file: its records, the rule for resuming it, and appends of whole lines.

    Used by the local labeller and by the Ray driver (:class:`LabelFileSink`), so both resume a file
    under the same conditions: same model, matcher, seed, samples per question and answer length.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def read(self, *, repair: bool = False) -> list[dict]:
        """The records (see :func:`read_records`)."""
        return read_records(self.path, repair=repair)

    def open_for_resume(self, run: dict, *, n_samples: int | None, max_new_tokens: int | None) -> list[dict]:
        """Create the folder, take the file's lock (:func:`grade.common.io.hold_output_lock`: one writer per
        file, until this process ends), repair a cut last line, check that the file was written with
        the same settings as this run (``run``: model, matcher, seed) and return its records."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        hold_output_lock(self.path, "the labels file")
        records = self.read(repair=True)
        for record in records:
            self.check_record(record, run, n_samples=n_samples, max_new_tokens=max_new_tokens)
        return records

    def check_record(self, record: dict, run: dict, *, n_samples: int | None, max_new_tokens: int | None) -> None:
        """Raise :class:`InputError` if a stored record was made with other settings than this run."""
        resume = "use the same settings to resume, or another output file"
        for key, value in run.items():
            if key in record and record[key] != value:
                raise InputError(f"{self.path} was written with {key}={record[key]!r}, this run uses {value!r}; {resume}")
        if n_samples and record.get("n_samples") not in (None, n_samples):
            raise InputError(f"{self.path} was written with {record['n_samples']} samples per question, this run "
                             f"uses {n_samples}; {resume}")
        task = record.get("task", "")
        expected = answer_format(task, max_new_tokens).max_new_tokens if task in TASKS else max_new_tokens
        if expected and record.get("max_new_tokens") not in (None, expected):
            raise InputError(f"{self.path} was written with answers of up to {record['max_new_tokens']} tokens, this "
                             f"run uses {expected}; {resume}")

    def append(self, records: list[dict]) -> None:
        """One write of whole lines, flushed and synced: a kill leaves at most a cut last line, which
        :meth:`read` with ``repair`` removes."""
        append_lines(self.path, [json.dumps(r, ensure_ascii=False) for r in records])


def label_questions(
    lm: LoadedModel | ModelSpec,
    questions: Iterable[Question],
    out: str | os.PathLike,
    *,
    n_samples: int | None = None,
    matcher: str = "strict",
    seed: int = 0,
    max_new_tokens: int | None = None,
    questions_per_batch: int | None = 4,
    sample_chars: int | None = None,
    progress: bool | ProgressCallback = False,
    callback: ProgressCallback | None = None,
    show_progress: bool | None = None,
    backend: str = "local",
    cluster=None,
    chunk_size: int = 32,
) -> LabelSummary:
    """Sample, score and label ``questions``, appending one JSON line per question to ``out``.

    Parameters
    ----------
    lm : a model from :func:`grade.load_model`, or a :class:`grade.models.models.ModelSpec` (loaded here, or by every
        Ray worker).
    n_samples : samples per question (default: the task's, 10).
    matcher : ``strict`` (reference) or ``lenient``; see :func:`grade.tasks.tasks.is_correct`.
    seed : with the question id, fixes every sample (reruns reproduce the file).
    max_new_tokens : answer length (default: the task's, e.g. 12 for short QA).
    questions_per_batch : questions decoded together (see :func:`grade.models.sampling.sample_answers`); None:
        as many as the device's free memory holds (:func:`grade.models.sizing.batch_size`, the longest prompt and
        answer, ``n_samples`` rows a question). Batching changes no sample: each draws from its own seeded stream.
    sample_chars : store each sample cut to this many characters (scores use the full text).
    progress : draw a tqdm progress bar on stderr (the package's convention, :mod:`grade.batch.runner`).
    callback : called as ``callback(done, total, record)`` after each question is written; an
        exception raised there stops the run, leaving a valid, resumable file.
    show_progress : the older name of ``progress``; a function given as ``progress`` is taken as ``callback``
        (the older spelling), so existing callers keep working.
    backend : ``local`` (this process) or ``ray`` (:data:`grade.batch.BACKENDS`): same file format, same
        records; on Ray ``callback(done, total, run)`` follows every written chunk of ``chunk_size`` questions.
    cluster : where and how wide a Ray run goes (:class:`grade.batch.ClusterOptions`; default a local cluster).

    Returns a :class:`LabelSummary` over the whole file (on Ray with the run's report as ``run``).
    """
    if callable(progress):  # the older spelling: progress=callback, show_progress=bar
        progress, callback = False, progress if callback is None else callback
    if show_progress is not None:
        progress = show_progress
    lm = model_for_backend(lm, backend, cluster)
    out = Path(out)
    questions = _checked(questions, matcher, questions_per_batch)
    if backend == "ray":
        work = LabelWork(n_samples=n_samples, matcher=matcher, seed=seed, max_new_tokens=max_new_tokens,
                         questions_per_batch=questions_per_batch, sample_chars=sample_chars)
        return _label_on_ray(lm, questions, out, work, chunk_size=chunk_size, cluster=cluster, progress=progress, callback=callback)
    run = {"model": lm.name, "matcher": matcher, "seed": seed}
    sink = LabelFileSink(out, run, n_samples, max_new_tokens)
    report = RunReport(out=out, workers=1)
    todo = items_to_do(questions, sink.key, sink.done_keys(), report)
    if questions_per_batch is None:
        questions_per_batch = _questions_per_batch(lm, todo, n_samples, seed, max_new_tokens)
    start = time.perf_counter()
    total, done = len(questions), len(questions) - len(todo)
    too_long: list[str] = []

    def labelled():
        # grouped by task so that a batch shares one answer length and stop rule
        for i in range(0, len(todo), questions_per_batch):
            batch = todo[i : i + questions_per_batch]
            by_task: dict[str, list[Question]] = {}
            for q in batch:
                by_task.setdefault(q.task, []).append(q)
            for task_questions in by_task.values():
                spec = task_questions[0].spec
                settings = settings_for(spec, n_samples=n_samples, seed=seed, max_new_tokens=max_new_tokens)
                task_questions = _fitting(lm, task_questions, lm.max_context - settings.max_new_tokens, too_long)
                if not task_questions:
                    continue
                samples = sample_generations(
                    lm,
                    [q.prompt(lm.tokenizer) for q in task_questions],
                    [q.id for q in task_questions],
                    settings,
                    questions_per_batch=len(task_questions),
                )
                for q, generations in zip(task_questions, samples):
                    record = _record(q, generations, matcher, settings, run, sample_chars)
                    yield record, record

    # one record a write: a question is on disk before the callback hears of it
    write_in_chunks(sink, labelled(), total=total, initial=done, chunk_size=1, report=report,
                    progress=progress, desc=f"labelling {out.name}", unit="q", callback=callback,
                    postfix=lambda r: {"label": r["label"], "acc": f"{r['accuracy']:.1f}"},
                    bar_options={"dynamic_ncols": True})
    summary = summarize(out)
    summary.new = len(todo) - len(too_long)
    summary.skipped = total - len(todo)
    summary.seconds = time.perf_counter() - start
    summary.too_long = too_long
    return summary


def _questions_per_batch(lm: LoadedModel, questions: list[Question], n_samples: int | None, seed: int,
                         max_new_tokens: int | None) -> int:
    """Questions sampled together by the rule of :func:`grade.models.sizing.batch_size`: the longest prompt and
    answer among ``questions``, ``n_samples`` rows a question."""
    from ..models.sizing import batch_size
    from ..models.generation import encode_prompt

    longest, rows = 1, 1
    for q in questions:
        settings = settings_for(q.spec, n_samples=n_samples, seed=seed, max_new_tokens=max_new_tokens)
        prompt = q.prompt(lm.tokenizer)
        if len(prompt) > MAX_CHARS_PER_TOKEN * lm.max_context:
            continue  # skipped as too long when its batch comes
        longest = max(longest, len(encode_prompt(lm.tokenizer, prompt)) + settings.max_new_tokens)
        rows = max(rows, settings.n_samples)
    return batch_size(lm, tokens=min(longest, lm.max_context), kind="generate", rows_per_item=rows)


def _checked(questions: Iterable[Question], matcher: str, questions_per_batch: int | None) -> list[Question]:
    """The questions as a list, refused when empty or with a repeated id; the settings checked."""
    questions = list(questions)
    if not questions:
        raise InputError("no questions to label")
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        raise InputError("question ids must be unique")
    if matcher not in MATCHERS:
        raise InputError(f"unknown matcher {matcher!r}; use strict or lenient")
    if questions_per_batch is not None and questions_per_batch < 1:
        raise InputError("questions_per_batch must be at least 1")
    return questions


def _label_on_ray(spec, questions: list[Question], out: Path, work: "LabelWork", *, chunk_size: int, cluster,
                  progress: bool, callback) -> LabelSummary:
    """:func:`label_questions` on Ray workers (:func:`grade.batch.run_on_ray`), resumed under the local path's
    conditions before any worker starts."""
    from .ray_backend import ClusterOptions, run_on_ray

    sink = LabelFileSink(out, {"model": spec.name, "matcher": work.matcher, "seed": work.seed}, work.n_samples,
                         work.max_new_tokens)
    report = run_on_ray(questions, work, sink, spec, cluster or ClusterOptions(), chunk_size=chunk_size,
                        progress=progress, callback=callback, align=work.questions_per_batch or 1)
    summary = summarize(out)
    summary.new, summary.skipped, summary.seconds, summary.run = report.written, report.already, report.seconds, report
    return summary


@dataclass(frozen=True)
class LabelWork:
    """Sampled answers, scores and labels of questions: :func:`label_questions` itself,
    run on each chunk into a file private to the worker, whose records go back to the driver.

    Running the very function of the local path (rather than a copy of its loop) keeps the records
    identical field for field. Chunks start at multiples of ``questions_per_batch`` in the list of
    questions to do, so the questions decoded together are the ones the local path decodes together.
    """

    n_samples: int | None = None
    matcher: str = "strict"
    seed: int = 0
    max_new_tokens: int | None = None
    questions_per_batch: int | None = 4  # None: each worker's device decides (grade.models.sizing)
    sample_chars: int | None = None

    def process(self, lm, questions: list) -> dict:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="grade-label-") as folder:
            path = Path(folder) / "chunk.jsonl"
            label_questions(lm, questions, path, n_samples=self.n_samples, matcher=self.matcher, seed=self.seed,
                            max_new_tokens=self.max_new_tokens, questions_per_batch=self.questions_per_batch,
                            sample_chars=self.sample_chars)
            return {"results": read_records(path), "skipped": []}


class LabelFileSink:
    """The sink of a labelling run: the labels JSONL file (:class:`LabelStore`): resumed under
    the local path's conditions, whole lines appended, flushed and synced."""

    def __init__(self, out: str | Path, run: dict, n_samples: int | None, max_new_tokens: int | None = None):
        self.store = LabelStore(out)
        self.out = self.store.path
        self._existing = self.store.open_for_resume(run, n_samples=n_samples, max_new_tokens=max_new_tokens)

    def key(self, question) -> tuple:
        return (question.id,)

    def done_keys(self) -> set:
        return {(r["id"],) for r in self._existing}

    def write(self, records: list[dict]) -> None:
        self.store.append(records)


#: No tokenizer turns more than this many characters into one token on average: a prompt with more
#: characters than this times the room left is too long without being tokenised.
MAX_CHARS_PER_TOKEN = 64


def _fitting(lm: LoadedModel, questions: list[Question], limit: int, too_long: list[str]) -> list[Question]:
    """``questions`` whose prompt fits in ``limit`` tokens; each other one is named in ``too_long`` and
    skipped, so that one over-long row never stops the run (characters are counted before tokens)."""
    from ..models.generation import encode_prompt

    fitting = []
    for q in questions:
        prompt = q.prompt(lm.tokenizer)
        if len(prompt) > MAX_CHARS_PER_TOKEN * max(limit, 1):
            too_long.append(f"{q.id}: the prompt has {len(prompt):,} characters, far more than {lm.name}'s "
                            f"{limit:,} tokens before the answer")
            continue
        n_tokens = len(encode_prompt(lm.tokenizer, prompt))
        if n_tokens > limit:
            too_long.append(f"{q.id}: the prompt has {n_tokens:,} tokens; {lm.name} allows {limit:,} before the answer")
            continue
        fitting.append(q)
    return fitting


def _record(q: Question, generations: list[Generation], matcher: str, settings: SamplingSettings, run: dict,
            sample_chars: int | None) -> dict:
    texts = [g.text for g in generations]
    scores = [int(is_correct(q, t, matcher)) for t in texts]
    n_correct = sum(scores)
    record = {
        "id": q.id,
        "question": q.question,
        "answers": q.answers,
        "context": q.context,
        "choices": q.choices,
        "task": q.task,
        "dataset": q.dataset,
        "samples": [t[:sample_chars] for t in texts] if sample_chars else texts,
        "scores": scores,
        # a sample that hit max_new_tokens may have no final answer yet: its 0 can mean unfinished
        "cut_off": [g.finish == "length" for g in generations],
        "n_correct": n_correct,
        "n_samples": len(texts),
        "accuracy": n_correct / len(texts),
        "label": label_for_accuracy(n_correct, len(texts), q.spec),
        "majority": majority_answer(q, texts),
        **run,
        "max_new_tokens": settings.max_new_tokens,
    }
    if q.extra:
        record["extra"] = q.extra
    return record


def summarize(path: str | os.PathLike) -> LabelSummary:
    """Class balance of a labels file, overall and per dataset."""
    records = read_records(path)
    summary = LabelSummary(path=str(path))
    for r in records:
        per = summary.per_dataset.setdefault(r.get("dataset", ""), {"total": 0, "1": 0, "0": 0, "none": 0})
        per["total"] += 1
        key = "none" if r.get("label") is None else str(r["label"])
        per[key] += 1
    summary.total = len(records)
    summary.answerable = sum(r.get("label") == 1 for r in records)
    summary.unanswerable = sum(r.get("label") == 0 for r in records)
    summary.unlabelled = summary.total - summary.answerable - summary.unanswerable
    if records:
        summary.mean_accuracy = sum(float(r.get("accuracy", 0.0)) for r in records) / len(records)
    return summary


def labelled_examples(path: str | os.PathLike) -> list[dict]:
    """The records of a labels file that carry a label (0 or 1): the probe's training rows."""
    return [r for r in read_records(path) if r.get("label") in (0, 1)]
