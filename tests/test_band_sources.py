"""Home's "What the probe reads" caption names where each shipped probe's input bands come from: in display names,
no file path or raw dataset identifier (the caption once read "pre/gsm8k.parquet, pre/nq_open.parquet ...")."""

from __future__ import annotations

import json
import re

from grade.verdict.probe_reading import SHIPPED_BANDS_DIR


def test_every_shipped_band_source_reads_as_plain_words():
    files = sorted(SHIPPED_BANDS_DIR.glob("*.json"))
    assert files
    for path in files:
        source = json.loads(path.read_text())["source"]
        assert "labelled questions" in source, (path.name, source)
        assert not re.search(r"\.parquet|/|\b[a-z]+_[a-z_]+\b|\bpre\b|\bpos\b", source), (path.name, source)
