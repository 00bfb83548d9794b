"""Compressed and container files are read within the caps of grade.common.bounded: real bombs, made here.

Each bomb is read in a child process that reports its peak memory during the read above its peak before it
(``resource.getrusage``); the issue's bound is 300 MB above the process. No timing is asserted.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bombs import ROOT, gzip_bomb, lying_zip, read_in_child, xz_bomb, zip_bomb
from grade.common.bounded import Caps, TooLarge, check_zip, read_parquet
from grade.common.errors import InputError
from grade.common.io import iter_jsonl

BOUND_MB = 300


@pytest.fixture(scope="module")
def zipped(tmp_path_factory) -> Path:
    """1 GiB of zeros in one deflated zip member (about 1 MB on disk)."""
    return zip_bomb(tmp_path_factory.mktemp("zip") / "zeros.zip")


def test_a_gzip_bomb_whose_trailer_lies_is_refused_while_streaming_in_bounded_memory(tmp_path):
    bomb = gzip_bomb(tmp_path / "rows.jsonl.gz")  # 1 GiB; its trailer states 1 MiB
    assert bomb.stat().st_size < 2 * 2**20
    report = read_in_child("from grade.common.io import iter_jsonl",
                           f"for _ in iter_jsonl({str(bomb)!r}): pass")
    assert report["outcome"] == "refused", report
    assert "rows.jsonl.gz decompresses to more than" in report["message"]
    assert "GRADE_MAX_RATIO" in report["message"] and "\n" not in report["message"]
    assert report["peak_increase_mb"] < BOUND_MB, report


def test_a_gzip_file_is_refused_from_its_trailer_before_it_is_decompressed(tmp_path):
    path = tmp_path / "rows.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=1) as handle:
        for _ in range(200):
            handle.write(b"\0" * 2**20)
    with pytest.raises(TooLarge, match=r"rows\.jsonl\.gz declares 200 MB; refused unread"):
        next(iter_jsonl(path))


def test_an_xz_bomb_is_refused_in_bounded_memory(tmp_path):
    bomb = xz_bomb(tmp_path / "labels.jsonl.xz")
    report = read_in_child("from grade.batch.features import read_labelled", f"read_labelled({str(bomb)!r})")
    assert report["outcome"] == "refused" and "labels.jsonl.xz decompresses to more than" in report["message"], report
    assert report["peak_increase_mb"] < BOUND_MB, report


def test_a_compressed_label_file_at_the_command_line_exits_2_in_one_line(tmp_path):
    bomb = gzip_bomb(tmp_path / "questions.jsonl.gz", mib=256)
    done = subprocess.run([sys.executable, "-m", "grade", "traces", "--samples", str(bomb), "--out",
                           str(tmp_path / "store"), "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "questions.jsonl.gz decompresses to more than" in done.stderr
    # the command checks that --out is writable first (an empty folder): nothing is written into it
    assert not list((tmp_path / "store").rglob("*"))


def test_a_zip_bomb_is_refused_from_its_central_directory(zipped):
    with pytest.raises(TooLarge, match=r"zeros\.zip declares 1,024 MB; refused unread past"):
        check_zip(zipped)
    # the size cap bites on its own when the ratio allows it
    with pytest.raises(TooLarge, match=r"past 512 MB decoded \(GRADE_MAX_DECOMPRESSED_MB\)"):
        check_zip(zipped, Caps(ratio=100_000))


def test_a_zip_whose_entry_understates_its_member_is_refused_while_streaming(zipped, tmp_path):
    liar = lying_zip(tmp_path / "liar.zip", zipped)
    with zipfile.ZipFile(liar) as archive:
        assert archive.infolist()[0].file_size == 1024  # the metadata alone passes every cap
    report = read_in_child("from grade.common.bounded import check_zip", f"check_zip({str(liar)!r})")
    assert report["outcome"] == "refused" and "member 'zeros.json' is not readable" in report["message"], report
    assert report["peak_increase_mb"] < BOUND_MB, report


def test_a_zip_inside_a_zip_is_never_opened(zipped, tmp_path):
    nested = tmp_path / "nested.zip"
    with zipfile.ZipFile(nested, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for k in range(10):  # ten bombs of 1 GiB each, one level down
            out.write(zipped, f"inner-{k}.zip")
    report = read_in_child("from grade.common.bounded import check_zip",
                           f"assert len(check_zip({str(nested)!r})) == 10")
    assert report["outcome"] == "read", report  # ten members of about 1 MB: within the caps, and never unpacked
    assert report["peak_increase_mb"] < BOUND_MB, report


def test_a_parquet_bomb_is_refused_from_its_footer_in_bounded_memory(tmp_path):
    path = tmp_path / "features.parquet"
    # 50 million equal rows: dictionary- and run-length-encoded into a few hundred KB
    table = pa.table({"label": pa.array(np.ones(50_000_000, dtype=np.int64))})
    pq.write_table(table, path, row_group_size=5_000_000)
    del table
    assert path.stat().st_size < 2**20
    report = read_in_child("from grade.batch.features import load_features", f"load_features({str(path)!r})")
    assert report["outcome"] == "refused", report
    assert "features.parquet declares 381 MB; refused unread past 100x" in report["message"], report
    assert report["peak_increase_mb"] < BOUND_MB, report
    with pytest.raises(TooLarge, match="holds 50,000,000 rows; refused unread past 1,000 rows"):
        read_parquet(path, max_rows=1000)


def test_files_within_the_caps_read_as_before(tmp_path):
    rows = [{"id": k, "question": f"What is {k} + {k}?", "label": k % 2} for k in range(2000)]
    path = tmp_path / "rows.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in rows)
    assert [value for _, value, _ in iter_jsonl(path)] == rows
    features = tmp_path / "f.parquet"
    table = pa.table({"id": [str(k) for k in range(1000)], "rank_ratio": [[0.5, 0.25]] * 1000})
    pq.write_table(table, features, row_group_size=100)
    assert read_parquet(features).equals(pq.read_table(features))
    assert read_parquet(features, columns=["id"]).column("id").to_pylist() == [str(k) for k in range(1000)]
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as out:
        out.writestr("a.json", json.dumps(rows))
    assert [m.filename for m in check_zip(archive)] == ["a.json"]


def test_the_caps_come_from_the_environment(monkeypatch, tmp_path):
    from grade.common.bounded import caps

    monkeypatch.setenv("GRADE_MAX_DECOMPRESSED_MB", "1")
    monkeypatch.setenv("GRADE_MAX_RATIO", "100000")
    assert caps().decompressed_mb == 1
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n" * (3 * 2**20)))
    with pytest.raises(TooLarge, match="declares 3 MB; refused unread past 1 MB decoded"):
        list(iter_jsonl(path))
    monkeypatch.setenv("GRADE_MAX_RATIO", "many")
    with pytest.raises(InputError, match="GRADE_MAX_RATIO='many' is not a whole number"):
        caps()
