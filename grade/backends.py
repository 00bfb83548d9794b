"""llama.cpp as a generation backend of the one decoding path (:mod:`grade.generation`).

GRADE reads its features from the torch model, but the torch model is a slow generator on a CPU
(Qwen2.5-Coder-1.5B: about 2-4 tokens/s on two cores). llama.cpp runs the same GGUF file with
quantised kernels at 20+ tokens/s. Whatever generates the text, the features are then computed by the
torch model on the exact ids returned here (prompt + generated), never on re-tokenised text; the
GGUF vocabulary is the one transformers converted the tokenizer from, so an id means the same token
on both sides.

It plugs in at :class:`grade.generation.Backend` (prompt ids and :class:`~grade.generation.DecodeSettings`
in, generated ids out); stop tokens and stop strings follow the same rules as the torch loop.
:func:`fast_backend` offers it for an embedded model that asks for it
(``EmbeddedModel.fast_generation``) on a CPU when ``llama_cpp`` is importable, and
:func:`grade.generation.backend_for` uses it for greedy decoding only: sampled answers (labels) are
drawn by the torch loop, whose per-sample random streams the committed labels come from.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Sequence

import torch

from .errors import InputError, ModelLoadError
from .decoding import DecodeSettings, hits_stop
from .models import EMBEDDED_MODELS, LoadedModel

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
                if token in stop:
                    break
                out.append(int(token))
                if len(out) == settings.max_new_tokens:
                    break
                if settings.stop_strings and tokenizer is not None and hits_stop(tokenizer.decode(out), settings.stop_strings):
                    break
        return out

    def vocabulary_size(self) -> int:
        return self._llama.n_vocab()

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's own tokenisation of ``text`` (no BOS, special tokens parsed), for checks."""
        return self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)


@dataclass(frozen=True)
class LlamaCppGenerator:
    """A llama.cpp model generating for one loaded model: a :class:`grade.generation.Backend`.

    ``stop_ids``: the model's end-of-answer tokens (:func:`grade.architectures.end_of_answer_ids`);
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
_warned: set[str] = set()


def llama_cpp_available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


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
    import sys

    key = str(Path(gguf_path).resolve())
    if key not in _runs:
        try:
            done = subprocess.run([sys.executable, "-c", _SMOKE, key], capture_output=True, timeout=120)
            _runs[key] = done.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _runs[key] = False
        if not _runs[key]:
            log.warning("llama.cpp crashed generating one token from %s (a build for another CPU?): the torch "
                        "loop generates instead; rebuild llama-cpp-python with `make install-fast`", Path(key).name)
    return _runs[key]


def llama_cpp_backend(gguf_path: str | Path, n_threads: int | None = None) -> LlamaCppBackend:
    """One llama.cpp model per (file, thread count) per process: loading maps the file and allocates
    the KV cache, so it is done once."""
    key = (str(Path(gguf_path).resolve()), n_threads or torch.get_num_threads())
    with _llama_lock:
        if key not in _llama_backends:
            _llama_backends[key] = LlamaCppBackend(gguf_path, n_threads=key[1])
        return _llama_backends[key]


def llama_cpp_generator(lm: LoadedModel, n_threads: int | None = None) -> LlamaCppGenerator:
    """llama.cpp on ``lm``'s GGUF file, generating for ``lm`` (an embedded model)."""
    from .architectures import end_of_answer_ids

    entry = EMBEDDED_MODELS.get(lm.name)
    if entry is None:
        raise ModelLoadError(f"llama.cpp generation needs an embedded model ({', '.join(EMBEDDED_MODELS)}), not {lm.name!r}")
    if not llama_cpp_available():
        raise ModelLoadError("llama.cpp generation needs the package llama-cpp-python: run `make install`")
    return LlamaCppGenerator(llama_cpp_backend(entry.locate_gguf(), n_threads), lm.tokenizer,
                             frozenset(end_of_answer_ids(lm.model, lm.tokenizer)))


def fast_backend(lm: LoadedModel) -> LlamaCppGenerator | None:
    """llama.cpp for an embedded model with ``fast_generation`` on a CPU when ``llama_cpp`` is importable;
    None otherwise (the torch loop generates), with a log line when only the package is missing."""
    entry = EMBEDDED_MODELS.get(lm.name)
    if entry is None or not entry.fast_generation or lm.device.type != "cpu":
        return None
    if not llama_cpp_available():
        if lm.name not in _warned:
            _warned.add(lm.name)
            log.warning("llama_cpp is not importable: %s generates with torch on the CPU (several times slower); "
                        "`make install` builds llama-cpp-python", lm.name)
        return None
    if not llama_cpp_runs(entry.locate_gguf()):
        return None
    return llama_cpp_generator(lm)
