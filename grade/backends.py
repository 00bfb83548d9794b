"""Generation backends: prompt token ids in, generated token ids out.

GRADE reads its features from the torch model, but the torch model is a slow generator on a CPU
(Qwen2.5-Coder-1.5B: about 2-4 tokens/s on two cores). llama.cpp runs the same GGUF file with
quantised kernels at 20+ tokens/s. Whatever generates the text, the features are then computed by the
torch model on the exact ids returned here (prompt + generated), never on re-tokenised text; the
GGUF vocabulary is the one transformers converted the tokenizer from, so an id means the same token
on both sides (``tests/test_qwen.py`` checks this).

Interface, shared by every backend::

    backend.generate(prompt_ids, max_new_tokens, sampling=None | Sampling(...), stop_ids=...) -> list[int]

:func:`backend_for` picks one for a loaded model: llama.cpp for an embedded model that asks for it
(``EmbeddedModel.fast_generation``) on a CPU when ``llama_cpp`` is importable, torch otherwise.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Literal, Protocol, Sequence

import torch

from .errors import InputError, ModelLoadError
from .models import EMBEDDED_MODELS, LoadedModel

log = logging.getLogger(__name__)

BackendName = Literal["auto", "torch", "llama.cpp"]

#: llama.cpp context size: prompt + answer must fit (the KV cache of Qwen2.5-1.5B at 8192 tokens is ~230 MB).
LLAMA_CPP_CONTEXT = 8192


@dataclass(frozen=True)
class Sampling:
    """Sampling instead of greedy decoding: temperature, nucleus (top-p) and a seed."""

    temperature: float
    top_p: float = 1.0
    seed: int = 0


class GenerationBackend(Protocol):
    name: str

    def generate(
        self,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        *,
        sampling: Sampling | None = None,
        stop_ids: Collection[int] = (),
    ) -> list[int]:
        """Generated token ids after ``prompt_ids`` (greedy unless ``sampling``), at most
        ``max_new_tokens``, cut before the first id in ``stop_ids`` (which is not returned)."""
        ...


def _cut_at_stop(ids: Sequence[int], stop_ids: Collection[int]) -> list[int]:
    stop = set(stop_ids)
    for i, token in enumerate(ids):
        if token in stop:
            return list(ids[:i])
    return list(ids)


class TorchBackend:
    """Hugging Face ``generate`` on the loaded torch model."""

    name = "torch"

    def __init__(self, lm: LoadedModel):
        self.lm = lm

    def generate(self, prompt_ids, max_new_tokens, *, sampling=None, stop_ids=()):
        lm = self.lm
        ids = torch.tensor([list(prompt_ids)], device=lm.device)
        options: dict = {"do_sample": False}
        if sampling is not None:
            options = {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0}
        if stop_ids:
            options["eos_token_id"] = sorted(set(stop_ids))
        devices = [lm.device] if lm.device.type == "cuda" else []
        with lm.lock, torch.no_grad(), torch.random.fork_rng(devices=devices):
            if sampling is not None:
                torch.manual_seed(sampling.seed)
            out = lm.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                pad_token_id=lm.tokenizer.pad_token_id,
                **options,
            )
        return _cut_at_stop(out[0, ids.shape[1] :].tolist(), stop_ids)


class LlamaCppBackend:
    """llama.cpp (through ``llama-cpp-python``) on a GGUF file, on the CPU.

    Each call starts from an empty KV cache, so its output depends only on its arguments (and the
    thread count), not on earlier calls. Greedy decoding is llama.cpp's greedy sampler; sampling uses
    temperature and top-p only (top-k and min-p off, no repetition penalty), as the torch backend does.
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

    def generate(self, prompt_ids, max_new_tokens, *, sampling=None, stop_ids=()):
        prompt = list(prompt_ids)
        if len(prompt) + max_new_tokens > self.n_ctx:
            raise InputError(f"the prompt's {len(prompt)} tokens and {max_new_tokens} new ones exceed llama.cpp's "
                             f"context of {self.n_ctx} tokens")
        if max_new_tokens <= 0:
            return []
        stop = set(stop_ids)
        options = dict(temp=0.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0)
        if sampling is not None:
            options.update(temp=sampling.temperature, top_p=sampling.top_p)
        out: list[int] = []
        with self._lock:
            self._llama.reset()
            if sampling is not None:
                self._llama.set_seed(sampling.seed)
            for token in self._llama.generate(prompt, reset=True, **options):
                if token in stop:
                    break
                out.append(int(token))
                if len(out) == max_new_tokens:
                    break
        return out

    def vocabulary_size(self) -> int:
        return self._llama.n_vocab()

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's own tokenisation of ``text`` (no BOS, special tokens parsed), for checks."""
        return self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)


_llama_backends: dict[tuple[str, int], LlamaCppBackend] = {}
_llama_lock = threading.Lock()
_warned: set[str] = set()


def llama_cpp_available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def llama_cpp_backend(gguf_path: str | Path, n_threads: int | None = None) -> LlamaCppBackend:
    """One llama.cpp model per (file, thread count) per process: loading maps the file and allocates
    the KV cache, so it is done once."""
    key = (str(Path(gguf_path).resolve()), n_threads or torch.get_num_threads())
    with _llama_lock:
        if key not in _llama_backends:
            _llama_backends[key] = LlamaCppBackend(gguf_path, n_threads=key[1])
        return _llama_backends[key]


def backend_for(lm: LoadedModel, prefer: BackendName = "auto") -> GenerationBackend:
    """The generation backend for ``lm``.

    ``auto``: llama.cpp for an embedded model with ``fast_generation`` on a CPU when ``llama_cpp`` is
    importable (the model's GGUF file is already on disk); torch otherwise, with a log line saying why.
    ``torch`` / ``llama.cpp`` force one (``llama.cpp`` needs a model with a known GGUF file).
    """
    if prefer not in ("auto", "torch", "llama.cpp"):
        raise ValueError(f"unknown generation backend {prefer!r}; use auto, torch or llama.cpp")
    if prefer == "torch":
        return TorchBackend(lm)
    entry = EMBEDDED_MODELS.get(lm.name)
    if prefer == "auto" and (entry is None or not entry.fast_generation or lm.device.type != "cpu"):
        return TorchBackend(lm)
    if entry is None:
        raise ModelLoadError(f"llama.cpp generation needs an embedded model ({', '.join(EMBEDDED_MODELS)}), not {lm.name!r}")
    if not llama_cpp_available():
        if prefer == "llama.cpp":
            raise ModelLoadError("llama.cpp generation needs the package llama-cpp-python: run `make install`")
        if lm.name not in _warned:
            _warned.add(lm.name)
            log.warning("llama_cpp is not importable: %s generates with torch on the CPU (several times slower); "
                        "`make install` builds llama-cpp-python", lm.name)
        return TorchBackend(lm)
    return llama_cpp_backend(entry.locate_gguf())
