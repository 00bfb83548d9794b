"""What the Traces page does with the engine, without Streamlit: background analysis jobs, the triage
table, one trace's token scores.

A job is a plain thread that runs :func:`grade.traces.analyze_traces` into a trace store, one part per
trace, and reports progress through its :class:`TraceJob` (kept in the page's ``st.session_state``). The
page never waits for it: it reads the store, which only ever holds whole parts, on each rerun.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from grade.common.errors import GradeError
from grade.verdict.measured import MIN_QUESTIONS as SMALL_SAMPLE
from grade.traces import TraceSource, TraceStore, analyze_traces

from grade.common.display import kind_title

from .localization import verdict_label
from .resources import user_data_dir
from .tokens import TokenScores

#: Sort keys of the triage table: label -> column.
SORT_KEYS = {
    "verifier: highest step probability": "verifier_p",
    "GRADE_pos": "grade_pos",
    "peak shock (step rank ratio)": "peak_step_ratio",
    "steps": "n_steps",
    "tokens": "n_tokens",
    "mean CE loss": "loss_value",
    "document": "doc_id",
}
CORRECTNESS = ("correct", "wrong", "unknown")
#: The triage table's columns a person reads first, in this order (the page's main table: it fits its column);
#: the rest of :func:`triage_table`'s columns go to a second table beside the trace id.
FIRST_COLUMNS = ("trace", "correctness", "cut off", "verifier", "suspect step", "error step", "GRADE_pos", "question")
#: What each triage column means, shown as the header's help.
COLUMN_HELP = {
    "trace": "doc_id:sample",
    "correctness": "The final answer against the gold answer (the source's metric, or re-scored)",
    "cut off": "Stopped at the token limit before an answer: its 'wrong' may only mean unfinished",
    "verifier": "The step verifier's first wrong step, or 'no step stands out' (one forward pass of its reader; "
                "blank: it did not run on this trace)",
    "verifier P": "The step verifier's highest probability, over the trace's steps, that a step is the first wrong one",
    "suspect step": "Where the trace most plausibly goes wrong first (arithmetic check, else token surprisal)",
    "error step": "The known (given with the trace) or marked error step, 1-based",
    "GRADE_pos": "Mean rank ratio over steps and layers: higher is taken to mean wrong",
    "question": "The question's first 90 characters",
    "check flags": "Steps the arithmetic and provenance check flags",
    "peak step": "The step with the largest rank ratio (mean over layers)",
    "peak shock": "That step's rank ratio (mean over layers)",
    "steps": "Steps in the response",
    "tokens": "Tokens in the response",
    "peak token": "The token with the highest epistemic shock",
    "error kind": "The kind of the known or marked error",
}


def stores_dir() -> Path:
    """Where the app keeps the stores of uploaded samples files."""
    return user_data_dir() / "traces"


def known_stores(folder: Path | None = None) -> list[Path]:
    """Trace stores under ``folder`` (default :func:`stores_dir`), newest first."""
    folder = folder or stores_dir()
    found = [p.parent for p in folder.glob("*/*/meta.json")] if folder.is_dir() else []
    return sorted(found, key=lambda p: -p.stat().st_mtime)


def demo_store(model: str | None = None) -> Path | None:
    """A writable copy (annotations are saved into a store) of the demo store shipped for ``model``, else of
    the first one shipped; None where none is. The copy lives under :func:`stores_dir`; it is made once and made
    again when the shipped store changes (its meta.json, which records when it was built)."""
    from importlib import resources

    shipped = Path(str(resources.files("grade") / "assets" / "demo_traces"))
    if not shipped.is_dir():
        return None
    names = sorted(p.name for p in shipped.iterdir() if (p / "meta.json").is_file())
    if not names:
        return None
    name = (model or "").split("/")[-1]
    name = name if name in names else names[0]
    copy = stores_dir() / "demo" / name
    source = shipped / name
    if not (copy / "meta.json").is_file() or (copy / "meta.json").read_bytes() != (source / "meta.json").read_bytes():
        # none yet, or made from an older shipped store (a new verifier, say): the shipped rows replace the copy's,
        # the user's annotations (annotations.json, written only into the copy) stay
        copy.parent.mkdir(parents=True, exist_ok=True)
        for part in ("traces", "tokens"):
            shutil.rmtree(copy / part, ignore_errors=True)
        shutil.copytree(source, copy, dirs_exist_ok=True)
    return copy


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:60] or "samples"


def upload_folder(name: str, data: bytes) -> Path:
    """Keep an uploaded samples file in a folder named after it and its content (the same upload lands in
    the same place, so an interrupted analysis resumes); returns the file's path."""
    folder = stores_dir() / f"{_slug(Path(name).stem)}-{hashlib.sha1(data).hexdigest()[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / Path(name).name
    if not target.exists():
        target.write_bytes(data)
    return target


def store_folder(samples: Path, metric: str | None, filter_name: str | None, prompt: str) -> Path:
    """The store the page analyses ``samples`` into: one per file and reading settings (a store holds
    traces read one way only)."""
    samples = Path(samples)
    home = samples.parent if samples.parent.parent == stores_dir() else \
        stores_dir() / f"{_slug(samples.stem)}-{hashlib.sha1(str(samples.resolve()).encode()).hexdigest()[:12]}"
    return home / _slug(f"{metric or 'file'}-{filter_name or 'all'}-{prompt}")


class Cancelled(Exception):
    """Raised inside a job's progress callback to stop it (finished traces stay stored)."""


@dataclass
class TraceJob:
    """A background analysis: progress, outcome, and a way to stop it."""

    store: Path
    total: int
    done: int = 0
    current: str = ""
    error: str | None = None
    finished: bool = False
    cancelled: bool = False
    started: float = field(default_factory=time.monotonic)
    written: int = 0
    already: int = 0
    skipped: list = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def running(self) -> bool:
        return not self.finished

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    def stop(self) -> None:
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.finished

    def status_line(self) -> str:
        elapsed = time.monotonic() - self.started
        rate = f", {60 * self.done / elapsed:.1f} traces/min" if self.done and elapsed > 0 else ""
        if self.finished:
            if self.error:
                return f"Stopped by an error after {self.done} of {self.total} traces: {self.error}"
            word = "Stopped" if self.cancelled else "Finished"
            skipped = f", {len(self.skipped)} skipped" if self.skipped else ""
            return f"{word}: {self.written} traces analysed, {self.already} already stored{skipped} ({elapsed:.0f} s{rate})"
        return f"Analysing trace {self.done + 1} of {self.total} ({self.current or 'starting'}; {elapsed:.0f} s{rate})"


def start_job(lm, source: TraceSource, store: Path, *, srank: str = "paper") -> TraceJob:
    """Analyse ``source`` into ``store`` on a daemon thread; each trace is written as soon as it is done."""
    already = TraceStore(store).done_keys() if TraceStore(store).exists() else set()
    job = TraceJob(store=Path(store), total=sum(1 for i in source.items if i.trace_id not in already))

    def callback(done: int, total: int, trace: str) -> None:
        job.done, job.current = done, trace
        if job._stop.is_set():
            raise Cancelled

    def work() -> None:
        try:
            report = analyze_traces(lm, source, store, srank=srank, chunk_size=1, callback=callback)
            job.skipped = report.skipped
        except Cancelled:
            job.cancelled = True
        except GradeError as exc:
            job.error = str(exc)
        except Exception as exc:  # shown in the page; the session stays usable
            job.error = f"{type(exc).__name__}: {exc}"
        finally:
            stored = TraceStore(store)
            job.written = len(stored.done_keys() - already) if stored.exists() else 0
            job.already = len(already)
            job.finished = True

    job._thread = threading.Thread(target=work, name=f"grade-traces-{Path(store).name}", daemon=True)
    job._thread.start()
    return job


# --------------------------------------------------------------------------------------------- table


def verifier_peak(frame: pd.DataFrame) -> pd.Series:
    """Per trace, the step verifier's highest probability that a step is the first wrong one (NaN where the
    verifier did not run): the Traces page's default order, most suspect first."""
    if "step_verifier_probability" not in frame:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return frame["step_verifier_probability"].map(
        lambda p: float(np.max(p)) if p is not None and not (isinstance(p, float) and np.isnan(p)) and len(p) else np.nan)


def sort_options(frame: pd.DataFrame) -> list[str]:
    """The sort keys a store offers, the verifier's probability first where the verifier ran on its traces."""
    return [k for k in SORT_KEYS if SORT_KEYS[k] != "verifier_p" or verifier_peak(frame).notna().any()]


def correctness_label(value) -> str:
    return "unknown" if value is None or pd.isna(value) else ("correct" if bool(value) else "wrong")


def is_cut_off(value) -> bool:
    """Whether a stored ``cut_off`` says the trace stopped at its token limit (null: not known, shown as not)."""
    return value is not None and not pd.isna(value) and bool(value)


def trace_labels(table: pd.DataFrame, frame: pd.DataFrame) -> dict[str, str]:
    """How the trace picker names each trace of a :func:`triage_table`; a cut-off one says so beside its
    correctness (``frame``: the store's traces, whose ``cut_off`` the table may not show)."""
    cut = dict(zip(frame["trace_id"], frame["cut_off"])) if "cut_off" in frame else {}
    return {t: f"{t} · {c}{' (cut off)' if is_cut_off(cut.get(t)) else ''} · GRADE_pos {g:.4f}"
            for t, c, g in zip(table["trace"], table["correctness"], table["GRADE_pos"])}


def cut_off_badge(value, token_limit: int | None = None) -> str:
    """The Markdown badge beside a cut-off trace's correctness badge (as on the Reasoning trace page); "" else."""
    if not is_cut_off(value):
        return ""
    return f":orange-badge[cut off at {token_limit} tokens]" if token_limit else ":orange-badge[cut off at the token limit]"


def cut_off_warning(correct, token_limit: int | None = None) -> str:
    """Why a cut-off trace's correctness is to be read with care."""
    limit = f"the {token_limit}-token limit" if token_limit else "its token limit"
    unfinished = ', so "wrong" may only mean unfinished' if correctness_label(correct) == "wrong" else ""
    return f"Generation stopped at {limit} before the model finished its answer{unfinished}."


def triage_table(frame: pd.DataFrame, *, correctness=CORRECTNESS, grade_range=None, peak_range=None,
                 steps_range=None, sort: str = "GRADE_pos", descending: bool = True) -> pd.DataFrame:
    """The rows of a store's trace frame that pass the filters, sorted, with the columns the page shows
    (``cut off`` beside ``correctness`` where the store knows it).

    Ranges are inclusive ``(low, high)``; ``None`` keeps everything.
    """
    shown = frame.assign(correctness=[correctness_label(v) for v in frame["correct"]], verifier_p=verifier_peak(frame))
    keep = shown["correctness"].isin(list(correctness))
    for column, bounds in (("grade_pos", grade_range), ("peak_step_ratio", peak_range), ("n_steps", steps_range)):
        if bounds is not None:
            keep &= shown[column].between(bounds[0], bounds[1])
    shown = shown[keep]
    column = SORT_KEYS[sort] if SORT_KEYS[sort] in shown and shown[SORT_KEYS[sort]].notna().any() else "grade_pos"
    shown = shown.sort_values([column, "trace_id"], ascending=[not descending, True], kind="stable")
    missing = pd.Series([None] * len(shown), index=shown.index, dtype="object")
    suspect = shown["suspect_step"] if "suspect_step" in shown else missing  # stores of format 1 have none
    flagged = (shown["step_check"].map(lambda v: int(np.sum(np.asarray(v) > 0)) if v is not None else None)
               if "step_check" in shown else missing)
    columns = {"trace": shown["trace_id"], "correctness": shown["correctness"]}
    # only stores of generated traces know it; an all-blank column would only say nothing
    if "cut_off" in shown and shown["cut_off"].notna().any():
        columns["cut off"] = shown["cut_off"].astype("boolean")
    # stores of format 3 where the verifier ran; a blank cell: not run, never "no step stands out"
    if "verifier_reader" in shown and shown["verifier_reader"].notna().any():
        columns["verifier"] = [None if pd.isna(reader) else verdict_label(step)
                               for reader, step in zip(shown["verifier_reader"], shown["verifier_suspect_step"])]
        columns["verifier P"] = shown["verifier_p"]
    return pd.DataFrame({
        **columns,
        "suspect step": suspect,
        "check flags": flagged,
        "GRADE_pos": shown["grade_pos"],
        "peak step": shown["peak_step"],
        "peak shock": shown["peak_step_ratio"],
        "steps": shown["n_steps"],
        "tokens": shown["n_tokens"],
        "peak token": shown["peak_token"].map(repr),
        "error step": shown["error_step"],
        "error kind": shown["error_kind"].map(lambda k: kind_title(k) if isinstance(k, str) and k else None),
        "question": shown["question"].str.slice(0, 90),
    }).reset_index(drop=True)


def more_columns(table: pd.DataFrame) -> list[str]:
    """The triage table's columns that are not among :data:`FIRST_COLUMNS`, after the trace id."""
    return ["trace", *(c for c in table.columns if c not in FIRST_COLUMNS)]


def mark_line(saved: dict, given: dict) -> str:
    """What the page says of a trace's error step: the analyst's saved mark where there is one (``saved``: the
    store's annotation), else the step given with the trace (``given``: ``error_step``, ``kind``), else ""."""
    from grade.common.display import kind_title

    def what(mark: dict) -> str:
        step = mark.get("error_step")
        kind = mark.get("kind")
        return (f"**step {int(step)}**" if step is not None and not pd.isna(step) else "**no error step**") + \
            (f" ({kind_title(kind)})" if isinstance(kind, str) and kind else "")

    if saved:
        when = str(saved.get("updated") or "").replace("T", " ")
        return f"Your mark, saved{' ' + when if when else ''}: {what(saved)}."
    if given.get("error_step") is not None:
        return f"Known error step, given with the trace: {what(given)}. Save to keep your own mark instead."
    return ""


def ranking_note(ranking: list[dict]) -> str | None:
    """Why the Aggregates panel's AUROCs say little, from its ``ranking`` rows (:func:`grade.traces.aggregate`):
    no AUROC without both wrong and correct traces, and an interval too wide to decide on few traces."""
    if not ranking:
        return None
    n, wrong = int(ranking[0]["n"]), int(ranking[0]["wrong"])
    if n == 0 or wrong in (0, n):
        what = "no trace of known correctness" if n == 0 else \
            f"all {n} traces of known correctness are {'wrong' if wrong == n else 'correct'}"
        return f"No AUROC: {what}, and an AUROC needs both wrong and correct traces."
    if n < SMALL_SAMPLE:
        return (f"Only n = {n} traces ({wrong} wrong, {n - wrong} correct): far too few to judge an AUROC; the "
                f"interval shows how far it could land by chance. Read it as an illustration, not a result.")
    return None


def token_scores(tokens: pd.DataFrame, n_layers: int, *, surprisal: bool = False) -> TokenScores:
    """The Reasoning trace heatmap's input from a trace's token rows (sorted by position): the per-layer shock
    scores, or with ``surprisal`` each token's surprisal as one row (NaN in stores of format 1)."""
    if surprisal:
        values = tokens["surprisal"].to_numpy(dtype=np.float64) if "surprisal" in tokens else np.full(len(tokens), np.nan)
        scores = values[None, :]
    else:
        scores = np.stack([np.asarray(s, dtype=np.float64) for s in tokens["scores"]], axis=1) if len(tokens) \
            else np.zeros((n_layers, 0))
    return TokenScores(tokens["token"].tolist(), scores, [int(s) - 1 for s in tokens["step"]])


def step_ratios(row) -> np.ndarray:
    """(K, L) rank ratio per step and layer of one trace row."""
    return np.stack([np.asarray(r, dtype=np.float64) for r in row["step_ratios"]])
