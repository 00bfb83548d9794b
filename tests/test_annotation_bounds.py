"""An annotation folder the user points at (fetched step-error sets, ``GRADE_STEP_ERRORS_SOURCES``) is read within
the decompression caps of grade.common.bounded: an xz bomb named like an annotation file is refused in one line, in
bounded memory (the issue's bound: 300 MB above the process). No timing is asserted."""

from __future__ import annotations

from bombs import read_in_child, xz_bomb

BOUND_MB = 300


def test_an_annotation_file_that_is_an_xz_bomb_is_refused_in_bounded_memory(tmp_path):
    xz_bomb(tmp_path / "mr_gsm8k.jsonl.xz")
    report = read_in_child("from grade.steps.real_errors import annotation_rows",
                           f"annotation_rows('mr_gsm8k.jsonl', folder={str(tmp_path)!r})")
    assert report["outcome"] == "refused", report
    assert "mr_gsm8k.jsonl.xz decompresses to more than" in report["message"] and "\n" not in report["message"]
    assert report["peak_increase_mb"] < BOUND_MB, report
