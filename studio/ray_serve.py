"""Home's analyses on Ray Serve replicas instead of in the Streamlit process (no Streamlit here).

Where one machine is not enough for a class (a GPU node, several replicas), the operator sets
``GRADE_BACKEND`` and the studio sends each Home analysis to a Ray Serve application whose replicas hold the
model; the queue in front of the replicas, their number (``GRADE_SERVE_REPLICAS``, or autoscaling between
``GRADE_SERVE_MIN_REPLICAS`` and ``GRADE_SERVE_MAX_REPLICAS``) and their placement are Ray's:

* ``GRADE_BACKEND=ray://HEAD:10001``: the Ray cluster whose head runs the Ray Client server on port 10001
  (``ray start --head`` starts it there); the ``grade`` and ``studio`` packages travel with the connection;
* ``GRADE_BACKEND=ray`` (or ``ray:auto``): ``$RAY_ADDRESS``, else a local cluster of this machine that listens
  on the loopback address only (:func:`grade.distributed.connect`).

Each replica loads one model (``GRADE_SERVE_NUM_GPUS`` GPUs each, default 0: CPU; ``GRADE_SERVE_NUM_CPUS``
CPUs each, default 1) and runs :func:`studio.workflows.analyze_question` on it, with the probe and detectors
the page sends (small objects, so the replicas need no probe files). Serve's HTTP proxy is not started: the
studio talks to the replicas through a deployment handle, so nothing new listens on the network.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from grade.common.errors import GradeError

BACKEND_VARIABLE = "GRADE_BACKEND"
APP_PREFIX = "grade-studio"


def backend_address() -> str | None:
    """The Ray address from ``GRADE_BACKEND`` ('' for a local or $RAY_ADDRESS cluster), None for in-process."""
    raw = os.environ.get(BACKEND_VARIABLE, "").strip()
    if not raw or raw.lower() in ("local", "process", "in-process"):
        return None
    if raw.lower() in ("ray", "ray:auto", "auto"):
        return ""
    if raw.startswith("ray://"):
        return raw
    raise GradeError(f"{BACKEND_VARIABLE}={raw!r}: use ray://HEAD:10001, ray (a local or $RAY_ADDRESS cluster), "
                     "or leave it unset to analyse in this process")


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


def _float_env(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else default


@dataclass(frozen=True)
class ReplicaOptions:
    replicas: int = 2
    min_replicas: int | None = None  # both set: autoscaling between them
    max_replicas: int | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    max_ongoing_requests: int = 1  # one analysis at a time per replica: the rest wait in Ray's queue

    @classmethod
    def from_environment(cls) -> "ReplicaOptions":
        low, high = os.environ.get("GRADE_SERVE_MIN_REPLICAS"), os.environ.get("GRADE_SERVE_MAX_REPLICAS")
        return cls(replicas=_int_env("GRADE_SERVE_REPLICAS", 2), min_replicas=int(low) if low else None,
                   max_replicas=int(high) if high else None, num_cpus=_float_env("GRADE_SERVE_NUM_CPUS", 1.0),
                   num_gpus=_float_env("GRADE_SERVE_NUM_GPUS", 0.0))


class Analyzer:
    """One replica: one loaded model, Home's analysis on request."""

    def __init__(self, source: str, device: str, dtype: str | None):
        import grade

        self.lm = grade.load_model(source, device=device, dtype=dtype)

    def info(self) -> dict:
        return {"name": self.lm.name, "n_layers": self.lm.n_layers, "pid": os.getpid()}

    def analyze(self, request: dict):
        from .workflows import analyze_question

        return analyze_question(self.lm, request["question"], context=request.get("context"),
                                task=request.get("task", "qa"), probe=request.get("probe"),
                                probe_info=request.get("probe_info"), max_new_tokens=request.get("max_new_tokens"),
                                model_label=request.get("model_label", ""), limits=request["limits"],
                                detectors=request.get("detectors"))


def app_name(source: str, device: str, dtype: str | None) -> str:
    import hashlib

    digest = hashlib.sha256(f"{source}\0{device}\0{dtype}".encode()).hexdigest()[:12]
    return f"{APP_PREFIX}-{digest}"


class RayServeBackend:
    """Deploys (or finds) one Serve application per model and sends analyses to it."""

    def __init__(self, address: str = "", options: ReplicaOptions | None = None):
        self.address = address
        self.options = options or ReplicaOptions.from_environment()
        self._handles: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self._connected = False

    def _connect(self) -> None:
        if self._connected:
            return
        import ray

        if not ray.is_initialized():
            if self.address:  # a remote cluster: both packages travel with the connection
                import logging
                from pathlib import Path

                import grade
                import studio

                env = {"TRANSFORMERS_VERBOSITY": "error"}
                env.update({k: os.environ[k] for k in ("GRADE_CACHE_DIR", "HF_HOME", "HF_HUB_OFFLINE")
                            if os.environ.get(k)})
                ray.init(address=self.address, logging_level=logging.WARNING, log_to_driver=False,
                         runtime_env={"py_modules": [str(Path(grade.__file__).parent),
                                                     str(Path(studio.__file__).parent)], "env_vars": env})
            else:  # $RAY_ADDRESS, else a local cluster on the loopback address
                from grade.batch import connect

                connect(None)
        from ray import serve

        # No HTTP proxy: the studio reaches the replicas through handles only.
        serve.start(proxy_location="Disabled")
        self._connected = True

    def handle(self, source: str, device: str = "cpu", dtype: str | None = None):
        """The deployment handle of ``source``'s application, deploying it the first time."""
        key = (source, device, dtype)
        with self._lock:
            if key in self._handles:
                return self._handles[key]
            try:
                self._connect()
                from ray import serve

                name = app_name(*key)
                try:
                    handle = serve.get_app_handle(name)
                except Exception:  # not deployed yet
                    opts = self.options
                    config = {"ray_actor_options": {"num_cpus": opts.num_cpus, "num_gpus": opts.num_gpus},
                              "max_ongoing_requests": opts.max_ongoing_requests}
                    if opts.min_replicas is not None and opts.max_replicas is not None:
                        config["autoscaling_config"] = {"min_replicas": opts.min_replicas,
                                                        "max_replicas": opts.max_replicas,
                                                        "target_ongoing_requests": 1}
                    else:
                        config["num_replicas"] = opts.replicas
                    deployment = serve.deployment(Analyzer, name="analyzer", **config)
                    handle = serve.run(deployment.bind(source, device, dtype), name=name, route_prefix=None)
            except GradeError:
                raise
            except Exception as exc:
                raise GradeError(f"the Ray Serve backend could not start {source!r}: {type(exc).__name__}: "
                                 f"{exc}") from exc
            self._handles[key] = handle
            return handle

    def replica_device(self, device: str) -> str:
        """Where the replicas load the model: their GPU when they are given one (the studio's own machine may
        have none, so its sidebar offers only the CPU), else the device the user picked."""
        return "cuda" if self.options.num_gpus > 0 else device

    def analyze(self, source: str, device: str, dtype: str | None, request: dict):
        """One Home analysis on a replica (waits in Ray's queue while all replicas are busy)."""
        return self.handle(source, self.replica_device(device), dtype).analyze.remote(request).result()

    def shutdown(self) -> None:
        from ray import serve

        with self._lock:
            for key in list(self._handles):
                try:
                    serve.delete(app_name(*key))
                except Exception:
                    pass
            self._handles.clear()


_backend: RayServeBackend | None = None
_backend_lock = threading.Lock()


def shared_backend() -> RayServeBackend | None:
    """The process's Ray Serve backend when ``GRADE_BACKEND`` names one, else None (analyse in process)."""
    global _backend
    address = backend_address()
    if address is None:
        return None
    with _backend_lock:
        if _backend is None or _backend.address != address:
            _backend = RayServeBackend(address)
        return _backend
