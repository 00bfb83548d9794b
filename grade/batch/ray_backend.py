"""The Ray backend of the batch runner (:mod:`grade.batch.runner`): labelling, feature extraction and trace
analysis on a Ray cluster (``--engine ray``).

Why Ray, and why actors rather than Ray Data: GRADE's batch work is "load a 7-70B model once, then
push thousands of independent questions through it". A Ray actor is exactly one long-lived process
holding one model copy (on one GPU, on several GPUs of one node, or on CPU cores); the driver streams
chunks of questions to the actors and writes every finished chunk itself. Ray Data's
``map_batches(..., concurrency=N)`` runs the same actors, but its ``write_parquet`` writes from the
workers to a path that every node must reach and has no notion of "skip the questions already in the
output", which is what makes a killed run resumable here. Ray core gives us retries of dead workers,
GPU placement (``num_gpus``) and a way to attach to a running cluster (``ray.init(address=...)``);
the scheduling loop below is all the rest.

Guarantees, and what makes them hold:

* **Same results whatever the number of workers.** The work on one question is a pure function of
  ``(model, question, settings)``: features are deterministic, and every sampled answer draws from its
  own random stream seeded from ``(seed, question id, sample index)`` (:mod:`grade.models.sampling`). No
  state crosses questions, so chunking and scheduling cannot change a result. Bitwise equality also
  needs the same kernels (device, dtype, torch threads): across thread counts we measured float32
  differences of ~5e-7 in loss values and none in rank ratios on the CPU.
* **Nothing lost, nothing twice.** Only the driver writes, one output part per finished chunk, atomically
  (temporary name, then rename). A chunk whose worker dies is sent again (the actor is restarted by
  Ray and reloads its model); a re-run first reads the keys already in the output and only sends the
  rest. A chunk is written once, when its result arrives, so no key can be written twice.
* **Big models.** ``gpus_per_worker > 1`` loads the model with ``device_map="auto"`` across the GPUs
  that Ray assigns to the worker (always on one node); the capture hooks sit on the modules wherever
  they live and the spectra code gathers each layer's tensors on one device.

Work functions (what runs on a worker) are small picklable objects with ``process(lm, items)``;
sinks (what the driver writes) have ``done_keys()``, ``key(item)`` and ``write(results)``.
"""


from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..common.errors import GradeError, InputError, ModelLoadError
from .runner import ProgressBar, RunReport, Sink, Work, items_to_do

if TYPE_CHECKING:
    from ..models.models import ModelSpec

log = logging.getLogger(__name__)

#: How often one chunk may be sent again after its worker died before the run gives up on it.
MAX_CHUNK_ATTEMPTS = 3
#: How often Ray restarts a dead worker (each restart reloads the model).
MAX_WORKER_RESTARTS = 3


@dataclass(frozen=True)
class ClusterOptions:
    """Where and how wide to run. ``address=None``: $RAY_ADDRESS if set, else a local cluster."""

    address: str | None = None
    workers: int | None = None
    gpus_per_worker: float = 0
    cpus_per_worker: float | None = None


class _Worker:
    """One model copy. Wrapped with ``ray.remote`` at run time (Ray is imported only when used)."""

    def __init__(self, spec: ModelSpec, work: Work):
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        self.lm = spec.load()
        self.work = work

    def pid(self) -> int:
        return os.getpid()

    def describe(self) -> dict:
        import socket

        model = self.lm.model
        return {"pid": os.getpid(), "host": socket.gethostname(), "device": str(self.lm.device),
                "device_map": {str(k): str(v) for k, v in (getattr(model, "hf_device_map", None) or {}).items()},
                "n_layers": self.lm.n_layers}

    def process(self, items: list) -> dict:
        start = time.perf_counter()
        outcome = self.work.process(self.lm, items)
        outcome["seconds"] = time.perf_counter() - start
        outcome["pid"] = os.getpid()
        return outcome


def _import_ray():
    try:
        import ray
    except ImportError:
        raise GradeError("--engine ray needs the ray package: pip install 'ray>=2.60'") from None
    return ray


def _package_root() -> Path:
    return Path(__file__).resolve().parent.parent


def connect(address: str | None = None, *, num_cpus: int | None = None, num_gpus: int | None = None) -> bool:
    """Join the Ray cluster at ``address`` (or $RAY_ADDRESS), else start a local one.

    Returns True when this call started or joined the cluster (and the caller should shut it down),
    False when Ray was already initialised in this process. On a remote cluster the ``grade`` package
    travels with the job (``runtime_env.py_modules``); torch, transformers and accelerate must be
    installed on the nodes.
    """
    ray = _import_ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    env_vars = {"TRANSFORMERS_VERBOSITY": "error"}
    for name in ("GRADE_CACHE_DIR", "HF_HOME", "HF_HUB_OFFLINE"):
        if os.environ.get(name):
            env_vars[name] = os.environ[name]
    try:
        if address:
            ray.init(address=address, runtime_env={"py_modules": [str(_package_root())], "env_vars": env_vars},
                     logging_level=logging.WARNING, log_to_driver=False)
        else:
            _local_cluster_on_loopback(ray)
            # Local workers are forked from this machine's Python: they find grade via PYTHONPATH.
            root = str(_package_root().parent)
            path = os.environ.get("PYTHONPATH", "")
            if root not in path.split(os.pathsep):
                os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, path) if p)
            # The workers take the environment of the raylet that ray.init starts: the variables go there, not
            # into a runtime_env, with which every worker would start through Ray's setup process and the
            # workers Ray starts ahead for the first driver (one per CPU, without that environment) would sit
            # unused beside them.
            with _environment(env_vars):
                ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
                         logging_level=logging.WARNING, log_to_driver=False, object_store_memory=512 * 1024 * 1024)
    except Exception as exc:  # ConnectionError, RuntimeError, ...: one readable line
        where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        raise GradeError(f"could not start or join {where}: {exc}") from exc
    return True


@contextlib.contextmanager
def _environment(variables: dict[str, str]):
    """``variables`` in this process's environment for the block (for the processes it starts), then as before."""
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _local_cluster_on_loopback(ray) -> None:
    """Make a cluster that this process starts listen on 127.0.0.1 only.

    On Linux Ray takes the machine's outward address as the node address (``ray.init`` even turns
    an explicit 127.0.0.1 into it) and its GCS, raylet and workers then listen on every interface:
    anyone who can reach the machine could submit code to them. Ray's single-machine mode (its
    default on macOS and Windows, selected by ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``) uses the
    loopback address instead; the environment carries it to the processes Ray starts, and the
    constant is set too in case ray was imported before. Token authentication (on by default for a
    new local cluster in ray 2.60) stays on as a second line.
    """
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        from ray._private import ray_constants
    except ImportError:  # a Ray layout we do not know: the environment variable alone still applies
        return
    ray_constants.ENABLE_RAY_CLUSTER = False


def _plan_workers(cluster: ClusterOptions) -> tuple[int, float, float]:
    """(workers, GPUs each, CPUs each) from the options and the cluster's resources."""
    ray = _import_ray()
    resources = ray.cluster_resources()
    total_cpus = float(resources.get("CPU", 1))
    total_gpus = float(resources.get("GPU", 0))
    gpus = cluster.gpus_per_worker
    if gpus > 0:
        if total_gpus < gpus:
            raise GradeError(f"each worker needs {gpus:g} GPU(s) but the cluster has {total_gpus:g}")
        workers = cluster.workers or max(1, int(total_gpus // gpus))
        if workers * gpus > total_gpus + 1e-9:  # Ray would wait for GPUs forever
            raise GradeError(f"{workers} workers x {gpus:g} GPU(s) need {workers * gpus:g} GPUs; "
                             f"the cluster has {total_gpus:g}")
        cpus = cluster.cpus_per_worker or 1
    else:
        workers = cluster.workers or max(1, int(total_cpus))
        # CPU workers share the cores: one torch thread per core a worker owns, not oversubscription.
        cpus = cluster.cpus_per_worker or max(1.0, math.floor(total_cpus / workers))
    if workers < 1:
        raise InputError("--workers must be at least 1")
    if workers * cpus > total_cpus:
        # More workers than cores (asked for): reserve a share of a core each so that all of them
        # start; each still runs as many threads as asked (the cores are oversubscribed).
        log.warning("%d workers on %g CPUs: the cores are shared", workers, total_cpus)
        cpus = total_cpus / workers
    return workers, gpus, cpus


def run_on_ray(
    items: list,
    work: Work,
    sink: Sink,
    spec: ModelSpec,
    cluster: ClusterOptions = ClusterOptions(),
    *,
    chunk_size: int = 32,
    progress: bool = False,
    callback: Callable[[int, int, "RayRun"], None] | None = None,
    align: int = 1,
) -> RunReport:
    """Process ``items`` on Ray workers and write the results through ``sink``.

    Items whose key is already in the sink are not sent; the rest go out in chunks of at most
    ``chunk_size`` (smaller when there are few items, so every worker gets several chunks). Each
    worker holds at most two chunks (one running, one queued) so the GPU never waits for the driver.
    ``callback(done, total, run)`` is called after every written chunk (tests use ``run.worker_pids``).
    ``align``: chunk sizes are multiples of it.
    """
    started = connect(cluster.address)
    try:
        with RayRun(work, spec, cluster) as run:
            return run.execute(items, sink, chunk_size=chunk_size, progress=progress, callback=callback, align=align)
    finally:
        if started:
            _import_ray().shutdown()


class RayRun:
    """A pool of model-holding Ray actors for one run (use as a context manager)."""

    def __init__(self, work: Work, spec: ModelSpec, cluster: ClusterOptions):
        ray = _import_ray()
        self.ray = ray
        n, gpus, cpus = _plan_workers(cluster)
        # The CPU thread count must be known to the worker before its model runs.
        self.spec = replace(spec, gpus=gpus, threads=spec.threads or (None if gpus else max(1, int(cpus))))
        remote = ray.remote(_Worker).options(num_cpus=cpus, num_gpus=gpus, max_restarts=MAX_WORKER_RESTARTS,
                                             max_task_retries=0)
        self.actors = [remote.remote(self.spec, work) for _ in range(n)]
        self.state = ["ready"] * n  # per actor: ready, recovering (being restarted by Ray) or dead
        self.worker_pids: dict[int, int] = {}

    def __enter__(self) -> "RayRun":
        # Wait for every model load now, so a load error is reported once and clearly.
        try:
            pids = self.ray.get([a.pid.remote() for a in self.actors])
        except self.ray.exceptions.RayActorError as exc:
            raise ModelLoadError(f"a Ray worker could not load model {self.spec.name!r}: {_cause(exc)}") from None
        self.worker_pids = dict(enumerate(pids))
        return self

    def __exit__(self, *exc) -> None:
        for actor in self.actors:
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:  # already dead
                pass

    def describe(self) -> list[dict]:
        return self.ray.get([a.describe.remote() for a, st in zip(self.actors, self.state) if st == "ready"])

    def execute(self, items: list, sink: Sink, *, chunk_size: int = 32, progress: bool = False,
                callback=None, align: int = 1) -> RunReport:
        t0 = time.perf_counter()
        report = RunReport(out=Path(getattr(sink, "out", "")), workers=len(self.actors))
        todo = items_to_do(items, sink.key, sink.done_keys(), report)  # a duplicate input row is sent once
        if not todo:
            report.seconds = time.perf_counter() - t0
            return report
        size = max(1, min(chunk_size, math.ceil(len(todo) / (2 * len(self.actors)))))
        if align > 1:  # whole decoding batches per chunk (see LabelWork)
            size = max(align, size // align * align)
        queue = [todo[i : i + size] for i in range(0, len(todo), size)]  # chunks still to send
        attempts = [0] * len(queue)
        waiting = list(range(len(queue)))
        pending: dict[Any, tuple[int, int]] = {}  # object ref -> (actor index, chunk index)
        probes: dict[Any, int] = {}  # object ref -> actor index: returns once a restarted worker is back
        load = [0] * len(self.actors)  # chunks in flight per actor
        finished_items = 0

        bar = ProgressBar(progress, total=len(todo), desc=f"ray x{len(self.actors)}", unit="q")
        try:
            while waiting or pending:
                for index in range(len(self.actors)):
                    while waiting and self.state[index] == "ready" and load[index] < 2:
                        chunk = waiting.pop(0)
                        pending[self.actors[index].process.remote(queue[chunk])] = (index, chunk)
                        load[index] += 1
                if not pending and not probes:
                    raise GradeError("every Ray worker died; the finished questions are saved: re-run to go on")
                ready, _ = self.ray.wait(list(pending) + list(probes), num_returns=1)
                ref = ready[0]
                if ref in probes:
                    index = probes.pop(ref)
                    try:
                        self.worker_pids[index] = self.ray.get(ref)
                        self.state[index] = "ready"
                    except self.ray.exceptions.RayActorError as exc:  # out of restarts
                        self.state[index] = "dead"
                        log.warning("a Ray worker is gone for good: %s", _cause(exc))
                    continue
                index, chunk = pending.pop(ref)
                load[index] -= 1
                try:
                    outcome = self.ray.get(ref)
                except self.ray.exceptions.RayActorError as exc:
                    # The worker process died (killed, out of memory, node lost): its chunk goes to the
                    # front of the queue, for whichever worker is free first. Ray restarts the actor,
                    # which reloads its model; a probe call tells us when it can take work again.
                    attempts[chunk] += 1
                    report.resent += 1
                    log.warning("a Ray worker died (%s); its chunk of %d questions is sent again",
                                _cause(exc), len(queue[chunk]))
                    if attempts[chunk] >= MAX_CHUNK_ATTEMPTS:
                        raise GradeError(f"a chunk of {len(queue[chunk])} questions killed its worker "
                                         f"{attempts[chunk]} times; the rest is saved: {_cause(exc)}") from None
                    waiting.insert(0, chunk)
                    if self.state[index] == "ready":
                        self.state[index] = "recovering"
                        probes[self.actors[index].pid.options(max_task_retries=-1).remote()] = index
                    continue
                except self.ray.exceptions.RayTaskError as exc:  # a bug, not a dead worker: stop
                    raise GradeError(f"a Ray worker failed: {_cause(exc)}") from None
                self.worker_pids[index] = outcome["pid"]
                report.busy_seconds += outcome["seconds"]
                sink.write(outcome["results"])
                report.written += len(outcome["results"])
                report.skipped += outcome["skipped"]
                finished_items += len(queue[chunk])
                bar.update(len(queue[chunk]))
                if callback is not None:
                    callback(finished_items, len(todo), self)
        finally:
            bar.close()
            for ref in list(pending) + list(probes):  # Ctrl-C or error: in-flight work is dropped, a re-run redoes it
                self.ray.cancel(ref, force=False)
        report.seconds = time.perf_counter() - t0
        return report


def _cause(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__

