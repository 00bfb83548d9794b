"""A fair, bounded queue of analyses, one per model, shared by every session of one app process (no Streamlit).

Why: a served studio runs each analysis in the Streamlit process, on one shared model. Eight students clicking
Analyze at once used to run eight analyses side by side on the same cores (each page saying "Analyzing ..." for
minutes, one waiting 141 s for an analysis of seconds). Here every analysis is a job in its model's queue:

* **workers**: each model has a small pool of worker threads (``GRADE_QUEUE_WORKERS``, default
  :func:`default_workers`: one, because one analysis already uses every core of a CPU through torch's
  threads and the engine holds the model's lock for each pass, so two at once only interleave);
* **an operator cap on the total**: at most ``GRADE_MAX_RUNNING`` analyses run at once over all models
  (default: the number of workers of one model), and, with ``GRADE_QUEUE_MEMORY_MB`` set, a job starts only
  while the memory its running neighbours claim plus its own claim fit in it (a job's claim: what the page
  estimates for it, :func:`grade.gradients.memory.analysis_memory_bytes`; one that could never fit is refused in one
  line); the queue keeps its order, so a large job at the head waits rather than be overtaken;
* **bounded**: at most ``GRADE_QUEUE_MAX`` jobs wait per model (default 32); more are refused in one line;
* **one per user**: a user (a browser session, or a logged-in user) holds at most one ticket that is waiting or
  running; asking again while one is is refused in one line;
* **cancel**: a cancelled ticket frees its user at once; a waiting job nobody else waits for leaves the queue,
  and a running one is stopped: the worker runs each job inside :func:`grade.models.cancel.cancellable`, so the
  engine raises :class:`grade.models.cancel.Cancelled` at its next check (between passes, step groups, steps and
  layers) and the worker takes the next job;
* **shared**: a request whose ``job_key`` equals a job that is waiting or running joins that job instead of
  computing it again (each ticket keeps its own ``on_result``, e.g. its own cache key);
* **feedback**: :meth:`AnalysisQueue.status` gives a ticket's position and an estimate of when its result comes,
  from the measured durations of the model's recent jobs of each kind (an exponential average per model and
  kind: a 20-step trace takes many times a Home analysis, and a job waiting behind one is told so); a kind not
  yet measured here takes its reference duration (:mod:`studio.wait_seconds`, per route and size), scaled by how
  this machine compares on the kinds it has measured.

A job's progress lines (what the engine reports) are kept in the job for the waiting page to show: the worker
thread cannot write to a Streamlit page.
"""

from __future__ import annotations

import itertools
import logging
import os
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from grade.models.cancel import Cancelled, cancellable
from grade.common.errors import InputError

from .served import env_number
from .wait_seconds import reference_seconds

log = logging.getLogger("grade.studio")

WORKERS_VARIABLE = "GRADE_QUEUE_WORKERS"
MAX_RUNNING_VARIABLE = "GRADE_MAX_RUNNING"
MAX_WAITING_VARIABLE = "GRADE_QUEUE_MAX"
MEMORY_VARIABLE = "GRADE_QUEUE_MEMORY_MB"
DEFAULT_MAX_WAITING = 32
#: Seconds assumed for a model's first job, before one has been measured.
DEFAULT_SECONDS = 10.0
#: Weight of the newest measured duration in a model's running average.
SMOOTHING = 0.3

WAITING, RUNNING, DONE, FAILED, CANCELLED = "waiting", "running", "done", "failed", "cancelled"


class QueueRefused(InputError):
    """A request the queue does not take (full, or the user already has one): one line for the page."""


def default_workers() -> int:
    """Worker threads per model: one per 16 cores (one on a laptop or a 2-core VM). torch already spreads one
    analysis over every core, so more threads on the same cores only make every analysis slower."""
    return max(1, (os.cpu_count() or 1) // 16)


def _env_int(name: str, default: int) -> int:
    """A whole number of at least 1 from the environment (:func:`studio.served.env_number`)."""
    return int(env_number(name, default, whole=True, minimum=1))


@dataclass
class Job:
    """One computation; several tickets may wait for it (identical requests)."""

    id: int
    model: Hashable
    key: Hashable
    fn: Callable[[Callable[[str], None]], Any]
    submitted: float
    state: str = WAITING
    started: float | None = None
    finished: float | None = None
    result: Any = None
    error: BaseException | None = None
    progress: list[str] = field(default_factory=list)
    tickets: list["Ticket"] = field(default_factory=list)
    done_event: threading.Event = field(default_factory=threading.Event)
    memory_mb: float = 0.0  # what the job claims of the operator's memory budget while it runs
    kind: Hashable = None  # what kind of work (e.g. "trace"): durations are averaged per model and kind
    cancel_event: threading.Event = field(default_factory=threading.Event)  # set: the engine stops at its next check


@dataclass(eq=False)
class Ticket:
    """One user's place in a queue: what the page keeps in its session state."""

    id: int
    user: Hashable
    job: Job
    on_result: Callable[[Any], None] | None = None
    cancelled: bool = False
    position: int = 0  # its job's place in the queue when the ticket was given (0: it joined a running job)
    delivered: float | None = None  # when the page first took the result (time.monotonic())

    @property
    def state(self) -> str:
        return CANCELLED if self.cancelled else self.job.state

    @property
    def done(self) -> bool:
        return self.state in (DONE, FAILED, CANCELLED)

    def wait(self, timeout: float | None = None) -> bool:
        """True once the job is finished (or this ticket cancelled), waiting at most ``timeout`` seconds."""
        if self.cancelled:
            return True
        return self.job.done_event.wait(timeout)

    def result(self):
        """The job's result; its exception is raised again where it failed."""
        if self.delivered is None and self.done:
            self.delivered = time.monotonic()
            job = self.job
            if job.started is not None and job.finished is not None:
                log.info("analysis delivered: queue position %d, waited %.1f s, its work %.1f s, taken %.1f s after "
                         "it ended", self.position, self.delivered - job.submitted, job.finished - job.started,
                         self.delivered - job.finished)
        if self.cancelled or self.job.state == CANCELLED:
            raise QueueRefused("The analysis was cancelled.")
        if self.job.state == FAILED:
            raise self.job.error
        if self.job.state != DONE:
            raise RuntimeError("the analysis has not finished")
        return self.job.result


@dataclass(frozen=True)
class TicketStatus:
    state: str
    position: int  # 1 = next to start; 0 = running or finished
    waiting: int  # jobs waiting for this model, this one included
    estimate_s: float  # seconds until the result, from the measured durations (rough before the first)
    measured: bool  # whether the estimate rests on measured durations of this model
    elapsed_s: float  # since the ticket's job was submitted
    progress: tuple[str, ...]  # the engine's progress lines of a running job
    shared: int  # tickets waiting for the same job (identical requests), this one included


class AnalysisQueue:
    """Per-model bounded queues of jobs with worker threads, a cap on all running jobs and one ticket per user."""

    def __init__(self, workers: int | None = None, max_running: int | None = None, max_waiting: int | None = None,
                 default_seconds: float = DEFAULT_SECONDS, memory_mb: float | None = None,
                 reference: Callable[[Hashable], float | None] | None = None):
        self.workers = workers or _env_int(WORKERS_VARIABLE, default_workers())
        self.max_running = max_running or _env_int(MAX_RUNNING_VARIABLE, self.workers)
        self.max_waiting = max_waiting or _env_int(MAX_WAITING_VARIABLE, DEFAULT_MAX_WAITING)
        # None: no memory budget (the running cap alone bounds what analyses hold together)
        self.memory_mb = memory_mb if memory_mb is not None else (
            _env_int(MEMORY_VARIABLE, 0) if os.environ.get(MEMORY_VARIABLE, "").strip() else None)
        self.default_seconds = default_seconds
        # kind -> seconds it took on a reference machine (None: not known); shapes the first estimates
        self.reference = reference or (lambda kind: None)
        self._cond = threading.Condition()
        self._waiting: dict[Hashable, deque[Job]] = {}
        self._background: dict[Hashable, deque[Job]] = {}
        self._running: dict[Hashable, list[Job]] = {}
        self._by_key: dict[tuple[Hashable, Hashable], Job] = {}
        self._users: dict[Hashable, Ticket] = {}
        self._threads: dict[Hashable, list[threading.Thread]] = {}
        self._average: dict[Hashable, float] = {}
        self._ids = itertools.count(1)
        self.peak_running = 0  # the most jobs that ever ran at once (for the tests and bench)
        self.peak_memory_mb = 0.0  # the most memory running jobs ever claimed together
        self.completed = 0

    # ---------------------------------------------------------------------------------------- submit

    def submit(self, model: Hashable, user: Hashable, job_key: Hashable,
               fn: Callable[[Callable[[str], None]], Any], on_result: Callable[[Any], None] | None = None,
               memory_mb: float = 0.0, kind: Hashable = None) -> Ticket:
        """A ticket for ``fn(progress)`` in ``model``'s queue, or :class:`QueueRefused`.

        ``job_key`` says which requests are identical: one waiting or running with the same key is joined, not
        computed again. ``on_result`` is called (in the worker thread) with the result once it is computed,
        also when the ticket's user has gone. ``memory_mb``: what the job claims of the operator's memory
        budget while it runs (a job claiming more than the whole budget is refused). ``kind``: its estimate
        comes from the durations of the model's jobs of the same kind."""
        with self._cond:
            if self.memory_mb is not None and memory_mb > self.memory_mb:
                raise QueueRefused(f"This analysis needs about {memory_mb:,.0f} MB; this studio runs analyses of at "
                                   f"most {self.memory_mb:,} MB. Try a shorter text.")
            held = self._users.get(user)
            if held is not None and not held.done:
                where = self._position(held.job)
                raise QueueRefused(
                    "You already have an analysis " + (f"waiting in the queue (position {where})" if where
                                                       else "running") +
                    "; wait for its result or cancel it before asking another.")
            job = self._by_key.get((model, job_key))
            if job is not None and job.state == WAITING and job in self._background.get(model, ()):
                # a user asks for what was only precomputing: it moves to the user queue's end
                self._background[model].remove(job)
                self._waiting.setdefault(model, deque()).append(job)
            if job is None:
                waiting = self._waiting.setdefault(model, deque())
                if len(waiting) >= self.max_waiting:
                    raise QueueRefused(f"The queue for this model is full ({self.max_waiting} analyses waiting); "
                                       "try again in a minute.")
                job = Job(id=next(self._ids), model=model, key=job_key, fn=fn, submitted=time.monotonic(),
                          memory_mb=memory_mb, kind=kind)
                waiting.append(job)
                self._by_key[(model, job_key)] = job
                self._start_workers(model)
            ticket = Ticket(id=next(self._ids), user=user, job=job, on_result=on_result, position=self._position(job))
            job.tickets.append(ticket)
            self._users[user] = ticket
            self._cond.notify_all()
            return ticket

    def submit_background(self, model: Hashable, job_key: Hashable, fn: Callable[[Callable[[str], None]], Any],
                          on_result: Callable[[Any], None] | None = None) -> bool:
        """Queue work nobody waits for (e.g. precomputing Home's examples): it runs only when no user's job
        waits for ``model``, is never counted ahead of one, and is skipped when the same key is already
        queued. False when it was not queued (already there, or the background queue is full)."""
        with self._cond:
            background = self._background.setdefault(model, deque())
            if (model, job_key) in self._by_key or len(background) >= self.max_waiting:
                return False
            job = Job(id=next(self._ids), model=model, key=job_key, fn=fn, submitted=time.monotonic())
            job.tickets.append(Ticket(id=next(self._ids), user=None, job=job, on_result=on_result))
            background.append(job)
            self._by_key[(model, job_key)] = job
            self._start_workers(model)
            self._cond.notify_all()
            return True

    def cancel(self, ticket: Ticket) -> bool:
        """Withdraw ``ticket`` and free its user: a job that nobody else waits for leaves the queue if it waits,
        and is stopped if it runs (the engine raises :class:`grade.models.cancel.Cancelled` at its next check; the job
        ends CANCELLED and its worker takes the next one). False if finished."""
        with self._cond:
            if ticket.done:
                return False
            ticket.cancelled = True
            job = ticket.job
            if self._users.get(ticket.user) is ticket:
                del self._users[ticket.user]
            if all(t.cancelled or t.user is None for t in job.tickets):
                if job.state == WAITING:
                    self._waiting[job.model].remove(job)
                    self._by_key.pop((job.model, job.key), None)
                    job.state = CANCELLED
                    job.finished = time.monotonic()
                    job.done_event.set()
                elif job.state == RUNNING:
                    # Nobody joins a job that is stopping: a new identical request computes afresh.
                    self._by_key.pop((job.model, job.key), None)
                    job.cancel_event.set()
            self._cond.notify_all()
            return True

    def active_ticket(self, user: Hashable) -> Ticket | None:
        with self._cond:
            ticket = self._users.get(user)
            return ticket if ticket is not None and not ticket.done else None

    # ---------------------------------------------------------------------------------------- status

    def _position(self, job: Job) -> int:
        if job.state != WAITING:
            return 0
        return list(self._waiting[job.model]).index(job) + 1

    def average_seconds(self, model: Hashable, kind: Hashable = None) -> float:
        with self._cond:
            return self._seconds(model, kind)

    def _seconds(self, model: Hashable, kind: Hashable) -> float:  # called with the lock held
        """The measured average of ``model``'s jobs of ``kind``; before one is measured, of its other jobs."""
        measured = self._average.get((model, kind))
        if measured is not None:
            return measured
        reference = self.reference(kind)
        if reference is not None:
            # this machine's speed against the reference machine's, on the kinds both have measured
            ratios = [seconds / known for (m, k), seconds in self._average.items()
                      if m == model and (known := self.reference(k))]
            return reference * (statistics.median(ratios) if ratios else 1.0)
        others = [v for (m, _), v in self._average.items() if m == model]
        return max(others) if others else self.default_seconds

    def status(self, ticket: Ticket) -> TicketStatus:
        with self._cond:
            job, now = ticket.job, time.monotonic()
            average = self._seconds(job.model, job.kind)
            waiting = list(self._waiting.get(job.model, ()))
            position = self._position(job) if not ticket.cancelled else 0
            if ticket.state == RUNNING:
                estimate = max(average - (now - job.started), 0.0)
            elif ticket.state == WAITING:
                # Each worker slot frees when its running job ends (by its kind's average); the jobs ahead take
                # the earliest free slot in turn, and so does this one.
                slots = min(self.workers, self.max_running)
                free = sorted(max(self._seconds(j.model, j.kind) - (now - j.started), 0.0)
                              for j in self._running.get(job.model, []))
                free = (free + [0.0] * slots)[:slots]
                for ahead in waiting[: position - 1]:
                    free[0] += self._seconds(ahead.model, ahead.kind)
                    free.sort()
                estimate = free[0] + average
            else:
                estimate = 0.0
            return TicketStatus(state=ticket.state, position=position, waiting=len(waiting), estimate_s=estimate,
                                measured=(job.model, job.kind) in self._average, elapsed_s=now - job.submitted,
                                progress=tuple(job.progress), shared=sum(not t.cancelled and t.user is not None for t in job.tickets))

    def running(self) -> int:
        with self._cond:
            return sum(len(jobs) for jobs in self._running.values())

    # --------------------------------------------------------------------------------------- workers

    def _start_workers(self, model: Hashable) -> None:
        threads = self._threads.setdefault(model, [])
        while len(threads) < self.workers:
            thread = threading.Thread(target=self._work, args=(model,), daemon=True,
                                      name=f"grade-queue-{len(threads)}-{model}")
            threads.append(thread)
            thread.start()

    def _startable(self, model: Hashable) -> deque[Job] | None:
        """The queue whose head job may start now (user jobs before background work), or None. Called with the
        lock held."""
        queue = self._waiting.get(model) or self._background.get(model)
        if not queue or self.running_total() >= self.max_running:
            return None
        if self.memory_mb is not None and self.running_memory() + queue[0].memory_mb > self.memory_mb:
            return None
        return queue

    def _next(self, model: Hashable) -> Job:
        with self._cond:
            while (queue := self._startable(model)) is None:
                self._cond.wait()
            job = queue.popleft()
            job.state, job.started = RUNNING, time.monotonic()
            self._running.setdefault(model, []).append(job)
            self.peak_running = max(self.peak_running, self.running_total())
            self.peak_memory_mb = max(self.peak_memory_mb, self.running_memory())
            return job

    def running_total(self) -> int:  # called with the lock held
        return sum(len(jobs) for jobs in self._running.values())

    def running_memory(self) -> float:  # called with the lock held
        return sum(job.memory_mb for jobs in self._running.values() for job in jobs)

    def _work(self, model: Hashable) -> None:
        while True:
            job = self._next(model)
            try:
                with cancellable(job.cancel_event):
                    result, error = job.fn(job.progress.append), None
            except BaseException as exc:  # the page shows it; the worker goes on
                result, error = None, exc
            with self._cond:
                job.finished = time.monotonic()
                job.result, job.error = result, error
                cancelled = isinstance(error, Cancelled) and job.cancel_event.is_set()
                job.state = DONE if error is None else CANCELLED if cancelled else FAILED
                self._running[model].remove(job)
                if self._by_key.get((model, job.key)) is job:
                    del self._by_key[(model, job.key)]
                for ticket in job.tickets:
                    if ticket.user is not None and self._users.get(ticket.user) is ticket:
                        del self._users[ticket.user]
                if error is None:
                    took = job.finished - job.started
                    last = self._average.get((model, job.kind))
                    self._average[(model, job.kind)] = took if last is None else (1 - SMOOTHING) * last + SMOOTHING * took
                    self.completed += 1
                callbacks = [t.on_result for t in job.tickets if t.on_result is not None] if error is None else []
                self._cond.notify_all()
            # the waiting pages first: a callback (a cache writing the result to disk) must not hold back the result
            job.done_event.set()
            for callback in callbacks:
                try:
                    callback(result)
                except Exception:  # a cache that refuses an entry must not stop the worker
                    pass


_shared: AnalysisQueue | None = None
_shared_lock = threading.Lock()


def shared_queue() -> AnalysisQueue:
    """The one queue of this process (created under a lock: concurrent first calls get the same one)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            # With a Ray Serve backend (GRADE_BACKEND) the replicas compute and Ray queues: the studio only
            # keeps one ticket per user, shares identical requests and bounds what it sends at once.
            remote = bool(os.environ.get("GRADE_BACKEND", "").strip())
            _shared = AnalysisQueue(workers=None if not remote else _env_int(WORKERS_VARIABLE, 16),
                                    reference=reference_seconds)
        return _shared
