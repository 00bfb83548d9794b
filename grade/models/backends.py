"""llama.cpp as a generation backend of the one decoding path (:mod:`grade.models.generation`).

GRADE reads its features from the torch model, but the torch model is a slow generator on a CPU
(Qwen2.5-Coder-1.5B: about 2-4 tokens/s on two cores). llama.cpp runs the same GGUF file with
quantised kernels at 20+ tokens/s. Whatever generates the text, the features are then computed by the
torch model on the exact ids returned here (prompt + generated), never on re-tokenised text; the
GGUF vocabulary is the one transformers converted the tokenizer from, so an id means the same token
on both sides.

It plugs in at :class:`grade.models.generation.Backend` (prompt ids and :class:`~grade.models.generation.DecodeSettings`
in, generated ids out); stop tokens and stop strings follow the same rules as the torch loop.
:func:`fast_backend` offers it for an embedded model that asks for it
(``EmbeddedModel.fast_generation``) on a CPU when ``llama_cpp`` is importable, and
:func:`grade.models.generation.backend_for` uses it for greedy decoding only: sampled answers (labels) are
drawn by the torch loop, whose per-sample random streams the committed labels come from.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Sequence

import torch

from .cancel import check_cancelled
from ..common.errors import InputError, ModelLoadError
from .decoding import DecodeSettings, hits_stop
from .embedded import EMBEDDED_MODELS
from .models import LoadedModel

log = logging.getLogger(__name__)

#: llama.cpp context size: prompt + answer must fit (the KV cache of Qwen2.5-1.5B at 8192 tokens is ~230 MB).
LLAMA_CPP_CONTEXT = 8192


class LlamaCppBackend:
    """llama.cpp (through ``llama-cpp-python``) on a GGUF file, on the CPU.

    Each call starts from an empty KV cache, so its output depends only on its arguments (and the
    thread count), not on earlier calls. Greedy decoding is llama.cpp's greedy sampler; sampling uses
    temperature, top-p and top-k from the settings (min-p off, no repetition penalty), seeded per row.
    """

    name = "llama.cpp"

    def __init__(self, gguf_path: str | Path, *, n_threads: int | None = None, n_ctx: int = LLAMA_CPP_CONTEXT):
        import llama_cpp

        threads = n_threads or torch.get_num_threads()
        try:
            self._llama = llama_cpp.Llama(
                model_path=str(gguf_path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                n_gpu_layers=0, verbose=False,
            )
        except (ValueError, RuntimeError) as exc:
            raise ModelLoadError(f"llama.cpp could not load {gguf_path}: {exc}") from exc
        self.gguf_path = Path(gguf_path)
        self.n_ctx = n_ctx
        self.n_threads = threads
        self._lock = threading.Lock()

    #: llama.cpp's sampler settings that make it greedy (every other sampler switched off)
    GREEDY_OPTIONS = dict(temp=0.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0)

    def generate_row(self, prompt_ids: Sequence[int], settings: DecodeSettings, seed: int | None, *,
                     stop_ids: Collection[int] = (), tokenizer=None) -> list[int]:
        """One answer's ids: cut before the first of ``stop_ids`` (not returned), ended once the text
        (decoded by ``tokenizer``) holds a stop string, at most ``settings.max_new_tokens``."""
        prompt = list(prompt_ids)
        if len(prompt) + settings.max_new_tokens > self.n_ctx:
            raise InputError(f"the prompt's {len(prompt)} tokens and {settings.max_new_tokens} new ones exceed "
                             f"llama.cpp's context of {self.n_ctx} tokens")
        stop = set(stop_ids)
        options = dict(self.GREEDY_OPTIONS)
        if not settings.greedy:
            options.update(temp=settings.temperature, top_p=settings.top_p, top_k=settings.top_k or 0)
        out: list[int] = []
        with self._lock:
            self._llama.reset()
            if seed is not None:
                self._llama.set_seed(int(seed) & 0xFFFFFFFF)
            for token in self._llama.generate(prompt, reset=True, **options):
                check_cancelled()  # a cancelled job stops within one token
                if token in stop:
                    break
                out.append(int(token))
                if len(out) == settings.max_new_tokens:
                    break
                if settings.stop_strings and tokenizer is not None and hits_stop(tokenizer.decode(out), settings.stop_strings):
                    break
        return out

    def close(self, timeout: float = 5.0) -> None:
        """Free the llama.cpp model now (llama-cpp-python's ``Llama.close``), not in ``Llama.__del__`` at
        interpreter shutdown, where it raised ``TypeError: 'NoneType' object is not callable`` once the
        modules it calls were torn down. Waits at most ``timeout`` s for a generation in progress."""
        if self._lock.acquire(timeout=timeout):
            try:
                close = getattr(self._llama, "close", None)
                if close is not None:
                    close()
            finally:
                self._lock.release()

    def vocabulary_size(self) -> int:
        return self._llama.n_vocab()

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's own tokenisation of ``text`` (no BOS, special tokens parsed), for checks."""
        return self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)


@dataclass(frozen=True)
class LlamaCppGenerator:
    """A llama.cpp model generating for one loaded model: a :class:`grade.models.generation.Backend`.

    ``stop_ids``: the model's end-of-answer tokens (:func:`grade.models.architectures.end_of_answer_ids`);
    ``tokenizer``: decodes answers for the stop strings.
    """

    llama: LlamaCppBackend
    tokenizer: object
    stop_ids: frozenset[int]
    name: str = "llama.cpp"

    def generate_ids(self, prompts, settings: DecodeSettings, seeds) -> list[list[list[int]]]:
        return [[self.llama.generate_row(prompt, settings, seed, stop_ids=self.stop_ids, tokenizer=self.tokenizer)
                 for seed in ([None] if seeds is None else seeds[q])]
                for q, prompt in enumerate(prompts)]


_llama_backends: dict[tuple[str, int], LlamaCppBackend] = {}
_llama_lock = threading.Lock()
_warned: set = set()


# ------------------------------------------------------------------ the Makefile's background build
#
# `make run` builds llama-cpp-python in the background (Makefile, target install-fast-background) into the
# virtual environment the app runs from (sys.prefix): the build holds LLAMA_BUILD_LOCK (flock) while it runs,
# writes LLAMA_BUILD_LOG, and touches LLAMA_BUILD_STAMP once installed. The app generates with torch meanwhile
# and looks for llama_cpp again whenever the stamp or the log changes, so the next generation after the build
# uses llama.cpp without a restart; never while the build runs (pip may be half-way through writing it).

LLAMA_BUILD_LOG = "llama-build.log"
LLAMA_BUILD_LOCK = ".llama-build.lock"
LLAMA_BUILD_STAMP = ".installed-fast"


@dataclass(frozen=True)
class LlamaBuild:
    """Where the background build of llama-cpp-python stands.

    ``state``: "installed" (llama_cpp importable), "building", "failed" (the last build did not install) or
    "absent" (no build and no package). ``steps``: the last ``[done/total]`` compile step in the log;
    ``started``: when the build started (Unix time, from the log's first line); ``last_line``: the log's
    last non-empty line."""

    state: str
    log: Path
    started: float | None = None
    steps: tuple[int, int] | None = None
    last_line: str = ""


def build_folder() -> Path:
    """The virtual environment the app runs from (``sys.prefix``): where `make run` builds llama-cpp-python."""
    return Path(sys.prefix)


def build_running(folder: Path | None = None) -> bool:
    """Whether a process holds the build's lock (the Makefile's background build runs). Probed with a shared,
    non-blocking flock released at once; the Makefile waits a second or two for the lock, so a probe never
    stops a build from starting. False where flock does not exist."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        fd = os.open(build_folder() / LLAMA_BUILD_LOCK if folder is None else folder / LLAMA_BUILD_LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing releases the probe's lock
    return False


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


_STEP = re.compile(rb"\[(\d+)/(\d+)\]")


def llama_build_status(folder: Path | None = None) -> LlamaBuild:
    """The background build's state, read from its files (cheap: a lock probe, two stats, the log's tail)."""
    folder = build_folder() if folder is None else folder
    log_path = folder / LLAMA_BUILD_LOG
    running = build_running(folder)
    started, steps, last = None, None, ""
    try:
        with open(log_path, "rb") as f:
            head = f.readline()
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            tail = f.read()
        if head.startswith(b"started "):
            started = float(head.split()[1])
        found = _STEP.findall(tail)
        if found:
            steps = (int(found[-1][0]), int(found[-1][1]))
        lines = [line.strip() for line in tail.decode("utf-8", "replace").splitlines() if line.strip()]
        last = lines[-1] if lines else ""
    except (OSError, ValueError, IndexError):
        pass
    if running:
        state = "building"
    elif llama_cpp_available(folder):
        state = "installed"
    elif "did not install" in last:
        state = "failed"
    else:
        state = "absent"
    return LlamaBuild(state, log_path, started, steps, last)


_available: dict[str, object] = {}


def llama_cpp_available(folder: Path | None = None) -> bool:
    """Whether ``llama_cpp`` is importable, without importing a package a build is still installing. The
    answer is kept until the build's stamp or log changes (a stat of each per call), so a build that
    finishes while the app runs is found at the next generation."""
    if "llama_cpp" in sys.modules:
        return True
    folder = build_folder() if folder is None else folder
    if build_running(folder):
        return False
    key = (str(folder), _mtime(folder / LLAMA_BUILD_STAMP), _mtime(folder / LLAMA_BUILD_LOG))
    if _available.get("key") != key:
        importlib.invalidate_caches()  # a package installed since the last look
        try:
            import llama_cpp  # noqa: F401
            ok = True
        except (ImportError, OSError, RuntimeError):  # not installed; its shared library does not load
            ok = False
        _available.update(key=key, ok=ok)
    return bool(_available["ok"])


_SMOKE = """
import sys, llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_threads=1, n_threads_batch=1, verbose=False)
print(next(llm.generate(llm.tokenize(b"1, 2, 3,"), reset=True, temp=0.0)))
"""
_runs: dict[str, bool] = {}


def llama_cpp_runs(gguf_path: str | Path) -> bool:
    """Whether this llama.cpp build generates a token from ``gguf_path`` without crashing, tried once per
    file and process in a child process. Why: a llama.cpp built for another CPU's instructions (a native
    build that used AMX on our Xeon VM) dies with a segmentation fault at the first token, which would take
    the whole app down with it; then the torch loop generates instead."""
    import subprocess

    # A new build (another stamp) is tried afresh.
    key = f"{Path(gguf_path).resolve()}:{_mtime(build_folder() / LLAMA_BUILD_STAMP)}"
    if key not in _runs:
        try:
            done = subprocess.run([sys.executable, "-c", _SMOKE, str(Path(gguf_path).resolve())],
                                  capture_output=True, timeout=120)
            _runs[key] = done.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _runs[key] = False
        if not _runs[key]:
            log.warning("llama.cpp crashed generating one token from %s (a build for another CPU?): the torch "
                        "loop generates instead; rebuild llama-cpp-python with `make install-fast`", Path(gguf_path).name)
    return _runs[key]


def llama_cpp_backend(gguf_path: str | Path, n_threads: int | None = None) -> LlamaCppBackend:
    """One llama.cpp model per (file, thread count) per process: loading maps the file and allocates
    the KV cache, so it is done once."""
    key = (str(Path(gguf_path).resolve()), n_threads or torch.get_num_threads())
    with _llama_lock:
        if key not in _llama_backends:
            if not _llama_backends:
                atexit.register(close_llama_backends)
            _llama_backends[key] = LlamaCppBackend(gguf_path, n_threads=key[1])
        return _llama_backends[key]


def close_llama_backends() -> None:
    """Close every llama.cpp model of this process (registered with atexit when the first one loads): at
    interpreter shutdown ``Llama.__del__`` would otherwise print a TypeError traceback."""
    with _llama_lock:
        backends = list(_llama_backends.values())
        _llama_backends.clear()
    for backend in backends:
        try:
            backend.close()
        except Exception as exc:  # noqa: BLE001 - at exit: say it, never raise
            log.debug("closing llama.cpp model %s: %s", backend.gguf_path, exc)


def llama_cpp_generator(lm: LoadedModel, n_threads: int | None = None) -> LlamaCppGenerator:
    """llama.cpp on ``lm``'s GGUF file, generating for ``lm`` (an embedded model)."""
    from .architectures import end_of_answer_ids

    entry = EMBEDDED_MODELS.get(lm.name)
    if entry is None:
        raise ModelLoadError(f"llama.cpp generation needs an embedded model ({', '.join(EMBEDDED_MODELS)}), not {lm.name!r}")
    if not llama_cpp_available():
        raise ModelLoadError("llama.cpp generation needs the package llama-cpp-python: run `make install-fast`")
    return LlamaCppGenerator(llama_cpp_backend(entry.locate_gguf(), n_threads), lm.tokenizer,
                             frozenset(end_of_answer_ids(lm.model, lm.tokenizer)))


def fast_backend(lm: LoadedModel) -> LlamaCppGenerator | None:
    """llama.cpp for an embedded model with ``fast_generation`` on a CPU when ``llama_cpp`` is importable;
    None otherwise (the torch loop generates), with a log line when only the package is missing."""
    entry = EMBEDDED_MODELS.get(lm.name)
    if entry is None or not entry.fast_generation or lm.device.type != "cpu":
        return None
    if not llama_cpp_available():
        if build_running():
            if (lm.name, "building") not in _warned:
                _warned.add((lm.name, "building"))
                log.warning("llama-cpp-python is being built in the background (%s): %s generates with torch "
                            "until it is installed", build_folder() / LLAMA_BUILD_LOG, lm.name)
        elif lm.name not in _warned:
            _warned.add(lm.name)
            log.warning("llama_cpp is not importable: %s generates with torch on the CPU (several times slower); "
                        "`make install-fast` builds llama-cpp-python", lm.name)
        return None
    if not llama_cpp_runs(entry.locate_gguf()):
        return None
    return llama_cpp_generator(lm)
