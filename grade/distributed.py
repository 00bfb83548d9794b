"""Labelling and feature extraction on a Ray cluster (``--engine ray``).

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
  own random stream seeded from ``(seed, question id, sample index)`` (:mod:`grade.sampling`). No
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

import argparse
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Protocol

from .errors import GradeError, InputError, ModelLoadError

log = logging.getLogger(__name__)

ENGINES = ("local", "ray")

#: How often one chunk may be sent again after its worker died before the run gives up on it.
MAX_CHUNK_ATTEMPTS = 3
#: How often Ray restarts a dead worker (each restart reloads the model).
MAX_WORKER_RESTARTS = 3


# --------------------------------------------------------------------------------------------------
# command-line options shared by ``label`` and ``extract``


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """``--engine``, ``--address``, ``--workers``, ``--gpus-per-worker``."""
    group = parser.add_argument_group("distributed run (--engine ray)")
    group.add_argument("--engine", choices=ENGINES, default="local",
                       help="local: this process (default); ray: workers of a Ray cluster")
    group.add_argument("--address", default=None,
                       help="Ray cluster to join: 'auto' (a `ray start` cluster on this machine), host:6379, "
                            "or ray://host:10001; default: $RAY_ADDRESS, else a local cluster on this machine")
    from .commands.common import int_range

    group.add_argument("--workers", type=int_range(1, 4096), default=None,
                       help="model copies (Ray actors); default: cluster GPUs / --gpus-per-worker, or CPUs")
    group.add_argument("--gpus-per-worker", type=_gpu_count, default=None,
                       help="GPUs per model copy (default 1 with --device cuda, else 0); above 1 the model "
                            "is split across them with device_map='auto'")


def _gpu_count(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= 1024):
        raise argparse.ArgumentTypeError(f"must be a number of GPUs (0, a fraction such as 0.5, or more), got {text!r}")
    return value


def check_engine_arguments(args: argparse.Namespace) -> None:
    """Reject Ray options given without ``--engine ray`` (they would be silently ignored)."""
    if getattr(args, "engine", "local") == "ray":
        return
    given = [f"--{name.replace('_', '-')}" for name in ("address", "workers", "gpus_per_worker")
             if getattr(args, name, None) is not None]
    if given:
        raise InputError(f"{', '.join(given)} only apply with --engine ray")


# --------------------------------------------------------------------------------------------------
# what each worker loads


@dataclass(frozen=True)
class ModelSpec:
    """How a worker loads its model copy (picklable: it travels to the workers, not the model).

    ``gpus`` is the number of GPUs Ray gives the worker: 0 = CPU, 1 = one GPU (``device`` cuda),
    more = one copy split across them (device_map="auto"). ``threads`` sets torch's CPU threads.
    """

    name: str
    device: str = "cpu"
    dtype: str | None = None
    trust_remote_code: bool = False
    gpus: float = 0
    threads: int | None = None

    def load(self, progress: Callable[[str], None] | None = None):
        import torch

        from .models import load_model

        if self.threads:
            torch.set_num_threads(self.threads)
        if self.gpus > 1:
            return load_sharded_model(self.name, dtype=self.dtype, trust_remote_code=self.trust_remote_code,
                                      progress=progress)
        # Ray restricts CUDA_VISIBLE_DEVICES to the worker's own GPU, which is then always cuda:0.
        device = "cuda" if self.gpus > 0 else self.device
        return load_model(self.name, device=device, dtype=self.dtype, trust_remote_code=self.trust_remote_code,
                          progress=progress)


def load_sharded_model(
    name_or_path: str,
    *,
    dtype: str | None = None,
    trust_remote_code: bool = False,
    max_memory: dict | None = None,
    offload_folder: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
):
    """Load one model across several devices with ``device_map="auto"`` (accelerate).

    Used for models that do not fit one GPU: the decoder layers are spread over the visible GPUs
    (``max_memory`` caps each, e.g. ``{0: "70GiB", 1: "70GiB"}``), and whatever does not fit goes to
    the CPU or, with ``offload_folder``, to disk. Inputs go to the device of the input embeddings;
    accelerate moves activations between devices, and the capture hooks of :mod:`grade.capture` sit on
    the modules wherever they live. Returns a :class:`~grade.models.LoadedModel`.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .architectures import layout_for
    from .models import LoadedModel, parse_dtype, resolve_model_folder

    gpu = torch.cuda.is_available()
    torch_dtype = parse_dtype(dtype, torch.device("cuda" if gpu else "cpu"))
    source = resolve_model_folder(name_or_path, progress)
    if progress:
        progress(f"Loading {name_or_path} across {torch.cuda.device_count() if gpu else 0} GPU(s) (device_map=auto)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=torch_dtype, device_map="auto", max_memory=max_memory,
            offload_folder=str(offload_folder) if offload_folder else None, trust_remote_code=trust_remote_code,
        )
    except GradeError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"could not load model {name_or_path!r} with device_map='auto': {exc}") from exc
    layout_for(model)
    model.eval()
    model.requires_grad_(False)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = model.get_input_embeddings().weight.device
    if device.type == "meta":  # embeddings offloaded to disk: accelerate brings them to the CPU
        device = torch.device("cpu")
    return LoadedModel(name=name_or_path, model=model, tokenizer=tokenizer, device=device, dtype=torch_dtype)


def model_spec_from_args(args: argparse.Namespace, gpus: float) -> ModelSpec:
    return ModelSpec(name=args.model, device=args.device, dtype=args.dtype,
                     trust_remote_code=getattr(args, "trust_remote_code", False), gpus=gpus)


# --------------------------------------------------------------------------------------------------
# work (runs on the workers) and sinks (run on the driver)


class Work(Protocol):
    """Per-chunk work. ``process`` must be a pure function of (model, items, settings)."""

    def process(self, lm, items: list) -> dict:  # {"results": [...], "skipped": [(key..., reason)]}
        ...


class Sink(Protocol):
    def key(self, item) -> tuple: ...

    def done_keys(self) -> set: ...

    def write(self, results: list) -> None: ...


@dataclass(frozen=True)
class FeatureWork:
    """GRADE features of labelled rows: :func:`grade.features.analyze_row` on each, as the local path."""

    loss: str = "pre"
    srank: str = "paper"
    keep_hidden: bool = True

    def process(self, lm, rows: list[dict]) -> dict:
        from .features import feature_rows

        skipped: list[tuple[str, str, str]] = []
        records = [record for _, record in feature_rows(lm, rows, loss=self.loss, srank=self.srank,
                                                        keep_hidden=self.keep_hidden, skipped=skipped)
                   if record is not None]
        return {"results": records, "skipped": skipped}


class FeatureStoreSink:
    """The Parquet feature store of :mod:`grade.features` (:class:`~grade.features.FeatureStore`): one
    part file per finished chunk, stored rows first brought in line with the labelled rows as locally."""

    def __init__(self, out: str | Path, model: str, loss: str, srank: str, rows: list[dict] | None = None):
        from .features import FeatureStore

        self.store = FeatureStore(out).create()
        self.out = self.store.path
        self.store.check(model, loss, srank)
        if rows is not None:
            self.store.refresh(rows, loss)

    def key(self, row: dict) -> tuple:
        from .features import row_key

        return row_key(row)

    def done_keys(self) -> set:
        return self.store.keys()

    def write(self, records: list[dict]) -> None:
        self.store.write(records)


@dataclass(frozen=True)
class LabelWork:
    """Sampled answers, scores and labels of questions: :func:`grade.labeling.label_questions` itself,
    run on each chunk into a file private to the worker, whose records go back to the driver.

    Running the very function of the local path (rather than a copy of its loop) keeps the records
    identical field for field. Chunks start at multiples of ``questions_per_batch`` in the list of
    questions to do, so the questions decoded together are the ones the local path decodes together.
    """

    n_samples: int | None = None
    matcher: str = "strict"
    seed: int = 0
    max_new_tokens: int | None = None
    questions_per_batch: int = 4
    sample_chars: int | None = None

    def process(self, lm, questions: list) -> dict:
        import tempfile

        from .labeling import label_questions, read_records

        with tempfile.TemporaryDirectory(prefix="grade-label-") as folder:
            path = Path(folder) / "chunk.jsonl"
            label_questions(lm, questions, path, n_samples=self.n_samples, matcher=self.matcher, seed=self.seed,
                            max_new_tokens=self.max_new_tokens, questions_per_batch=self.questions_per_batch,
                            sample_chars=self.sample_chars)
            return {"results": read_records(path), "skipped": []}


class LabelFileSink:
    """The labels JSONL file of :mod:`grade.labeling` (:class:`~grade.labeling.LabelStore`): resumed under
    the local path's conditions, whole lines appended, flushed and synced."""

    def __init__(self, out: str | Path, run: dict, n_samples: int | None, max_new_tokens: int | None = None):
        from .labeling import LabelStore

        self.store = LabelStore(out)
        self.out = self.store.path
        self._existing = self.store.open_for_resume(run, n_samples=n_samples, max_new_tokens=max_new_tokens)

    def key(self, question) -> tuple:
        return (question.id,)

    def done_keys(self) -> set:
        return {(r["id"],) for r in self._existing}

    def write(self, records: list[dict]) -> None:
        self.store.append(records)


# --------------------------------------------------------------------------------------------------
# the Ray side


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


@dataclass
class RunReport:
    """What one distributed run did."""

    out: Path
    written: int = 0  # results written by this run
    already: int = 0  # items found in the output and not sent
    skipped: list[tuple] = field(default_factory=list)  # (..., reason) per item the work refused
    resent: int = 0  # chunks sent again after their worker died
    workers: int = 0
    seconds: float = 0.0  # wall clock of the run, model loads excluded
    busy_seconds: float = 0.0  # summed over workers: time spent in the work itself

    @property
    def utilisation(self) -> float:
        """Share of the workers' time spent working (1.0: no worker ever waited for the driver)."""
        return self.busy_seconds / (self.workers * self.seconds) if self.workers and self.seconds else 0.0

    def __str__(self) -> str:
        return (f"{self.written} rows written, {self.already} already stored, {len(self.skipped)} skipped, "
                f"{self.workers} workers, {self.resent} chunks resent, {self.seconds:.1f} s -> {self.out}")


def _import_ray():
    try:
        import ray
    except ImportError:
        raise GradeError("--engine ray needs the ray package: pip install 'ray>=2.60'") from None
    return ray


def _package_root() -> Path:
    return Path(__file__).resolve().parent


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
            ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, logging_level=logging.WARNING,
                     log_to_driver=False, runtime_env={"env_vars": env_vars},
                     object_store_memory=512 * 1024 * 1024)
    except Exception as exc:  # ConnectionError, RuntimeError, ...: one readable line
        where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        raise GradeError(f"could not start or join {where}: {exc}") from exc
    return True


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
        done = sink.done_keys()
        todo, seen = [], set()
        for item in items:
            key = sink.key(item)
            if key in done:
                report.already += 1
            elif key not in seen:  # a duplicate input row is sent once
                seen.add(key)
                todo.append(item)
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

        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(todo), desc=f"ray x{len(self.actors)}", unit="q", file=sys.stderr)
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
                if bar is not None:
                    bar.update(len(queue[chunk]))
                if callback is not None:
                    callback(finished_items, len(todo), self)
        finally:
            if bar is not None:
                bar.close()
            for ref in list(pending) + list(probes):  # Ctrl-C or error: in-flight work is dropped, a re-run redoes it
                self.ray.cancel(ref, force=False)
        report.seconds = time.perf_counter() - t0
        return report


def _cause(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__


# --------------------------------------------------------------------------------------------------
# entry points used by the commands


def _gpus_for(args: argparse.Namespace) -> float:
    gpus = args.gpus_per_worker
    if gpus is None:
        return 1.0 if str(args.device).startswith("cuda") else 0.0
    if gpus < 0:
        raise InputError("--gpus-per-worker cannot be negative")
    if gpus > 1 and gpus != int(gpus):
        raise InputError("--gpus-per-worker above 1 must be a whole number")
    return float(gpus)


def _cluster_from_args(args: argparse.Namespace) -> ClusterOptions:
    if args.workers is not None and args.workers < 1:
        raise InputError("--workers must be at least 1")
    return ClusterOptions(address=args.address, workers=args.workers, gpus_per_worker=_gpus_for(args))


def extract_features_distributed(
    spec: ModelSpec,
    rows: list[dict],
    out: str | Path,
    *,
    loss: str = "pre",
    srank: str = "paper",
    keep_hidden: bool = True,
    chunk_size: int = 32,
    cluster: ClusterOptions = ClusterOptions(),
    progress: bool = False,
    callback=None,
) -> RunReport:
    """:func:`grade.features.extract_features` on Ray workers: same store, same rows, same values."""
    rows = [r for r in rows if r.get("label") is not None]
    sink = FeatureStoreSink(out, spec.name, loss, srank, rows)
    return run_on_ray(rows, FeatureWork(loss, srank, keep_hidden), sink, spec, cluster,
                      chunk_size=chunk_size, progress=progress, callback=callback)


def run_extract(args: argparse.Namespace, rows: list[dict]) -> int:
    """``python -m grade extract --engine ray``: called by :mod:`grade.commands.extract`."""
    cluster = _cluster_from_args(args)
    spec = model_spec_from_args(args, cluster.gpus_per_worker)
    report = extract_features_distributed(spec, rows, args.out, loss=args.loss, srank=args.srank,
                                          keep_hidden=not args.no_hidden, chunk_size=args.chunk_size,
                                          cluster=cluster, progress=not args.quiet)
    print(report)
    for *key, reason in report.skipped[:10]:
        print(f"  skipped {'/'.join(map(str, key[:2]))}: {reason}", file=sys.stderr)
    return 0


def label_questions_distributed(
    spec: ModelSpec,
    questions: list,
    out: str | Path,
    *,
    n_samples: int | None = None,
    matcher: str = "strict",
    seed: int = 0,
    max_new_tokens: int | None = None,
    questions_per_batch: int = 4,
    sample_chars: int | None = None,
    chunk_size: int = 32,
    cluster: ClusterOptions = ClusterOptions(),
    progress: bool = False,
    callback=None,
):
    """:func:`grade.labeling.label_questions` on Ray workers: same file format, same records.

    Returns ``(RunReport, LabelSummary)``; the summary covers the whole output file.
    """
    from .labeling import summarize

    questions = list(questions)
    if not questions:
        raise InputError("no questions to label")
    if len({q.id for q in questions}) != len(questions):
        raise InputError("question ids must be unique")
    if questions_per_batch < 1:
        raise InputError("questions_per_batch must be at least 1")
    sink = LabelFileSink(out, {"model": spec.name, "matcher": matcher, "seed": seed}, n_samples, max_new_tokens)
    work = LabelWork(n_samples, matcher, seed, max_new_tokens, questions_per_batch, sample_chars)
    report = run_on_ray(questions, work, sink, spec, cluster, chunk_size=chunk_size, progress=progress,
                        callback=callback, align=questions_per_batch)
    summary = summarize(out)
    summary.new, summary.skipped, summary.seconds = report.written, report.already, report.seconds
    return report, summary


def run_label(args: argparse.Namespace, questions: list) -> int:
    """``python -m grade label --engine ray``: called by :mod:`grade.commands.label`."""
    cluster = _cluster_from_args(args)
    spec = model_spec_from_args(args, cluster.gpus_per_worker)
    report, summary = label_questions_distributed(
        spec, questions, args.out, n_samples=args.samples, matcher=args.matcher, seed=args.seed,
        max_new_tokens=args.max_new_tokens, questions_per_batch=args.batch, sample_chars=args.sample_chars,
        cluster=cluster, progress=not args.quiet,
    )
    print(report)
    print(summary.balance_line())
    return 0
