"""Loading models: embedded GGUF models, local folders, ``.gguf`` files and hub ids.

GGUF files are de-quantised by transformers once and the result is cached on disk as
safetensors + tokenizer, so every later load takes about a second. The cache lives under
``$GRADE_CACHE_DIR`` (default: ``~/.cache/grade-studio``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import logging
import os
import shutil
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from .architectures import down_projections, layout_for
from ..common.errors import GradeError, ModelLoadError
from ..common.io import cache_dir
from .embedded import DEFAULT_MODEL, EMBEDDED_MODELS, check_model_reference

log = logging.getLogger(__name__)


_model_locks: "weakref.WeakKeyDictionary[torch.nn.Module, threading.RLock]" = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def model_lock(model: torch.nn.Module) -> threading.RLock:
    """One re-entrant lock per model object: hooks are per module, so two analyses must not overlap."""
    with _registry_lock:
        lock = _model_locks.get(model)
        if lock is None:
            lock = _model_locks[model] = threading.RLock()
        return lock


@dataclass
class LoadedModel:
    """A causal LM ready for GRADE: frozen parameters, eval mode, a known MLP layout."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    #: Another engine that writes answers for this model (see :class:`grade.models.generation.Backend`);
    #: None: the decoding loop on ``model``.
    generation_backend: object | None = None

    @property
    def lock(self) -> threading.RLock:
        """Held while hooks are attached or the model generates (shared with :mod:`grade.gradients.capture`)."""
        return model_lock(self.model)

    @property
    def n_layers(self) -> int:
        return len(down_projections(self.model))

    @property
    def max_context(self) -> int:
        config = self.model.config
        text_config = getattr(config, "get_text_config", lambda: config)()
        return int(getattr(text_config, "max_position_embeddings", None) or getattr(text_config, "n_positions", 2048))

    @property
    def is_chat(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))


#: Plain English that any word-piece tokenizer encodes in about one token per word.
_TOKENIZER_PROBE = "The capital of France is Paris, and the answer to the question is 42."


def check_tokenizer_is_not_character_level(tokenizer, source: str) -> None:
    """Refuse a tokenizer that splits plain English into single characters.

    Some transformers releases convert some GGUF vocabularies wrongly (5.17 does so for Gemma-3: every
    token one character, no BOS). The model then still loads and generates, only nonsense, and every
    label or feature made with it is silently wrong, so this is checked once, at conversion.
    """
    n_tokens = len(tokenizer(_TOKENIZER_PROBE, add_special_tokens=False)["input_ids"])
    n_words = len(_TOKENIZER_PROBE.split())
    if n_tokens > 2 * n_words:
        import transformers

        raise ModelLoadError(
            f"the tokenizer converted from {source} splits plain English into {n_tokens} tokens for "
            f"{n_words} words (character level): this transformers release ({transformers.__version__}) "
            "converts this GGUF vocabulary wrongly. Install the transformers version in requirements.txt "
            "(`make install`) and load the model again."
        )


_conversion_lock = threading.Lock()


@contextlib.contextmanager
def _gguf_read_once():
    """Inside: each GGUF file parsed once, however often transformers opens it.

    transformers opens the file for the config, for the tokenizer and for the weights, and each opening parses
    every metadata field (the whole vocabulary, value by value, each value a slice of a ``numpy.memmap``, whose
    slicing is several times slower than a plain array's): for a vocabulary of 150,000-260,000 tokens those
    parses, not the de-quantisation, were most of a conversion. Here one reader per file, reading through a plain
    array view of its memory map, one metadata parse for the config and the tokenizer (each gets a copy), and
    one map of tensor names per architecture (transformers builds it again for every module of the model).
    The stand-ins are module attributes of gguf and transformers, so one conversion at a time holds them (a second
    thread's exit would otherwise put back the first's stand-ins for good).
    """
    import copy

    import gguf
    import numpy as np
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    with _conversion_lock:
        original_reader, original_load = gguf.GGUFReader, gguf_utils.load_gguf_checkpoint
        original_names = gguf.get_tensor_name_map

        class PlainArrayReader(original_reader):
            @property
            def data(self):
                return self._data

            @data.setter
            def data(self, value):
                self._data = value.view(np.ndarray) if isinstance(value, np.memmap) else value

        readers: dict[tuple[str, str], gguf.GGUFReader] = {}
        metadata: dict[str, dict] = {}

        def reader(path, mode="r"):
            key = (os.path.realpath(path), mode)
            if key not in readers:
                readers[key] = PlainArrayReader(path, mode)
            return readers[key]

        def load_gguf_checkpoint(path, return_tensors=False, **kwargs):
            if return_tensors or kwargs:
                return original_load(path, return_tensors, **kwargs)
            key = os.path.realpath(path)
            if key not in metadata:
                metadata[key] = original_load(path, False)
            return copy.deepcopy(metadata[key])

        gguf.GGUFReader, gguf_utils.load_gguf_checkpoint = reader, load_gguf_checkpoint
        gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(original_names)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf_utils.load_gguf_checkpoint = original_reader, original_load
            gguf.get_tensor_name_map = original_names


def _convert_gguf(
    gguf_path: Path, target: Path, say: Callable[[str], None] | None, dtype: torch.dtype = torch.float32
) -> None:
    """De-quantise a GGUF file into ``target`` (safetensors + tokenizer, weights in ``dtype``), atomically."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if say:
        say(f"Converting {gguf_path.name} (once)")
    folder, filename = str(gguf_path.parent), gguf_path.name
    try:
        with _gguf_read_once():
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=dtype)
    except Exception as exc:  # transformers raises many types for unreadable/unsupported GGUF files
        raise ModelLoadError(f"could not convert GGUF file {gguf_path}: {exc}") from exc
    check_tokenizer_is_not_character_level(tokenizer, gguf_path.name)
    # The weights are already de-quantised; dropping the quantizer lets save_pretrained write them.
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first: keep its copy
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _convert_once(folder: Path, gguf_path: Callable[[], Path], say: Callable[[str], None] | None,
                  dtype: torch.dtype = torch.float32) -> bool:
    """Convert ``gguf_path()`` into ``folder`` unless a copy is there; True when it was there already.

    The conversion holds a file lock beside ``folder``: another process after the same copy (the app's server, a
    test worker, a Ray worker on this machine) waits for it instead of converting the same file on the same cores.
    """
    if (folder / "config.json").exists():
        return True
    from filelock import FileLock

    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{folder}.lock"):
        if not (folder / "config.json").exists():  # else made while this process waited
            _convert_gguf(gguf_path(), folder, say, dtype)
    return False


def _embedded_gguf(entry) -> Path:
    try:
        return entry.locate_gguf()
    except (importlib.metadata.PackageNotFoundError, ModuleNotFoundError, FileNotFoundError) as exc:
        raise ModelLoadError(
            f"embedded model {entry.name!r} needs the package(s) {', '.join(entry.packages)}: "
            f"run `make install` ({exc})"
        ) from None


def _gguf_cache_folder(gguf_path: Path) -> Path:
    stat = gguf_path.stat()
    key = hashlib.sha1(f"{gguf_path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return cache_dir() / "models" / f"{gguf_path.stem}-{key}"


#: de-quantised copies of user-given .gguf files kept at most (``$GRADE_GGUF_CACHE_MAX``); each is a
#: float32 model, several times the size of its GGUF file
GGUF_CACHE_MAX = 4


def _prune_gguf_cache(keep: Path) -> None:
    """Remove the least recently used conversions of user-given GGUF files beyond the cap.

    Only folders named like :func:`_gguf_cache_folder` are candidates (the embedded models' copies
    are never removed); ``keep`` (the one just made or used) always stays.
    """
    import re

    try:
        limit = max(1, int(os.environ.get("GRADE_GGUF_CACHE_MAX") or GGUF_CACHE_MAX))
    except ValueError:
        limit = GGUF_CACHE_MAX
    folders = [f for f in (cache_dir() / "models").glob("*") if f.is_dir() and re.search(r"-[0-9a-f]{12}$", f.name)]
    folders.sort(key=lambda f: f.stat().st_mtime, reverse=True)  # most recently used first
    for folder in [f for f in folders if f != keep][max(0, limit - 1):]:
        log.info("removing the cached conversion %s (more than %d kept)", folder.name, limit)
        shutil.rmtree(folder, ignore_errors=True)


def resolve_model_folder(name_or_path: str, say: Callable[[str], None] | None = None, *,
                         progress: Callable[[str], None] | None = None) -> str:
    """Turn a model reference into something ``from_pretrained`` can read (a folder or a hub id).
    ``say``: called with a line while a slow step runs (``progress``: its older name)."""
    say = say or progress
    name_or_path = check_model_reference(name_or_path)
    if name_or_path in EMBEDDED_MODELS:
        entry = EMBEDDED_MODELS[name_or_path]
        folder = cache_dir() / "models" / entry.name
        _convert_once(folder, lambda: _embedded_gguf(entry), say, getattr(torch, entry.cache_dtype))
        return str(folder)
    path = Path(name_or_path).expanduser()
    if path.suffix == ".gguf":
        folder = _gguf_cache_folder(path)
        if _convert_once(folder, lambda: path, say):
            os.utime(folder)  # marks it used: the cache keeps the most recently used conversions
        _prune_gguf_cache(keep=folder)
        return str(folder)
    if path.is_dir():
        return str(path)
    return name_or_path  # a hub id


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers a TCP connection within ``timeout`` seconds.

    Without a network, ``from_pretrained`` retries with back-off for about a minute before it
    fails; one short connection attempt first lets an uncached hub id fail in seconds.
    """
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    try:
        from huggingface_hub import constants

        endpoint = urlparse(constants.ENDPOINT)
    except Exception:  # an unusual huggingface_hub: let from_pretrained decide
        return True
    try:
        with socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def parse_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """A torch dtype from a name; ``None`` / ``"auto"``: float32 on a CPU, bfloat16 elsewhere."""
    if dtype is None or dtype == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if isinstance(dtype, torch.dtype):
        return dtype
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    try:
        return table[str(dtype).lower()]
    except KeyError:
        raise ModelLoadError(f"unknown dtype {dtype!r}; use one of {', '.join(table)}") from None


def _parse_device(device: str | torch.device | None) -> torch.device:
    device = torch.device(device or "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("CUDA was asked for but no GPU is available; use device='cpu'")
    return device


def load_model(
    name_or_path: str = DEFAULT_MODEL,
    *,
    device: str | torch.device | None = "cpu",
    dtype: str | torch.dtype | None = None,
    trust_remote_code: bool = False,
    say: Callable[[str], None] | None = None,
    progress: Callable[[str], None] | None = None,
) -> LoadedModel:
    """Load a causal LM for GRADE.

    Parameters
    ----------
    name_or_path : an embedded model name (see :data:`EMBEDDED_MODELS`), a local Hugging Face model
        folder, a local ``.gguf`` file, or a hub id (needs a network or a filled hub cache).
    device : ``"cpu"`` (default), ``"cuda"``, ``"cuda:1"``, ...
    dtype : ``None`` picks float32 on CPU and bfloat16 on GPU; or ``"float32" | "bfloat16" | "float16"``.
    trust_remote_code : passed to transformers; off unless the user turns it on.
    say : called with a human-readable line while slow steps (conversion) run (``progress``: its older name;
        the package's convention: ``progress`` is a bar, ``callback`` a per-item count, ``say`` a line).
    """
    say = say or progress
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = _parse_device(device)
    torch_dtype = parse_dtype(dtype, device)
    source = resolve_model_folder(name_or_path, say)
    offline = source == name_or_path.strip() and not Path(source).exists() and not _hub_reachable()
    if say:
        say(f"Loading {name_or_path}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, local_files_only=offline)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, trust_remote_code=trust_remote_code,
                                                     local_files_only=offline)
    except GradeError:
        raise
    except Exception as exc:
        if offline:
            raise ModelLoadError(f"hub model {name_or_path!r} is not in the local Hugging Face cache and the hub "
                                 "cannot be reached (no network)") from exc
        raise ModelLoadError(f"could not load model {name_or_path!r}: {exc}") from exc
    layout_for(model)  # fail now, with the list of supported architectures, not mid-analysis
    model.to(device)
    model.eval()
    model.requires_grad_(False)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(name=name_or_path, model=model, tokenizer=tokenizer, device=device, dtype=torch_dtype)


# --------------------------------------------------------------------------------------------------
# a model copy described for a worker, and one model across several GPUs


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

    def load(self, say: Callable[[str], None] | None = None):
        if self.threads:
            torch.set_num_threads(self.threads)
        if self.gpus > 1:
            return load_sharded_model(self.name, dtype=self.dtype, trust_remote_code=self.trust_remote_code,
                                      say=say)
        # Ray restricts CUDA_VISIBLE_DEVICES to the worker's own GPU, which is then always cuda:0.
        device = "cuda" if self.gpus > 0 else self.device
        return load_model(self.name, device=device, dtype=self.dtype, trust_remote_code=self.trust_remote_code,
                          say=say)


def load_sharded_model(
    name_or_path: str,
    *,
    dtype: str | None = None,
    trust_remote_code: bool = False,
    max_memory: dict | None = None,
    offload_folder: str | Path | None = None,
    say: Callable[[str], None] | None = None,
    progress: Callable[[str], None] | None = None,
):
    """Load one model across several devices with ``device_map="auto"`` (accelerate).

    Used for models that do not fit one GPU: the decoder layers are spread over the visible GPUs
    (``max_memory`` caps each, e.g. ``{0: "70GiB", 1: "70GiB"}``), and whatever does not fit goes to
    the CPU or, with ``offload_folder``, to disk. Inputs go to the device of the input embeddings;
    accelerate moves activations between devices, and the capture hooks of :mod:`grade.gradients.capture` sit on
    the modules wherever they live. Returns a :class:`~grade.models.models.LoadedModel`.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gpu = torch.cuda.is_available()
    torch_dtype = parse_dtype(dtype, torch.device("cuda" if gpu else "cpu"))
    say = say or progress
    source = resolve_model_folder(name_or_path, say)
    if say:
        say(f"Loading {name_or_path} across {torch.cuda.device_count() if gpu else 0} GPU(s) (device_map=auto)")
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
