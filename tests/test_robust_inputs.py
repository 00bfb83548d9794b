"""Uploads and inputs (issue 32, item 3): one rule for invisible-only text in the CLI and the app, the lm-eval
reader's named skips, probe names that keep their letters, upload counts refused as the files arrive, and no
temporary file name in a served message. Real components: the CLI in this process, the lm-eval GSM8K fixture,
the served app under AppTest with the embedded SmolLM2 (``slow``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grade.common.errors import InputError

from test_cli_inputs import assert_one_error, run_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT / "tests" / "data" / "samples_gsm8k_2025-11-26T17-00-00.000000.jsonl"
INVISIBLE = [" \u200b ", "\u200b", "\ufeff\u2060", "\u200d\u200c\n\t", "\u3164", "\u202e \u202c"]


@pytest.mark.parametrize("text", INVISIBLE)
def test_invisible_only_questions_are_refused_alike_by_the_cli_and_the_app(text):
    from grade.common.visible import is_blank
    from studio.workflows import check_inputs

    assert is_blank(text)
    assert_one_error(run_cli(["analyze", "--question", text]), "the question is empty")
    with pytest.raises(InputError, match="the question box is empty"):
        check_inputs(text, None)


@pytest.mark.parametrize("text", ["Paris?", "\u200bWho?", "ДА", "2 + 2", "\u0301a"])
def test_visible_questions_pass_both(text):
    from grade.common.visible import is_blank
    from studio.workflows import check_inputs

    assert not is_blank(text)
    assert run_cli(["analyze", "--question", text])[0] == "model"  # past every check, at the model load
    assert check_inputs(text, "\u200b \u200b")[1] is None  # an invisible-only document is no document


def _gsm8k_rows() -> list[dict]:
    return [json.loads(line) for line in GSM8K.read_text().splitlines() if line.strip()]


def test_an_lm_eval_row_without_doc_is_named_and_skipped(tmp_path):
    from grade.traces import read_traces

    rows = _gsm8k_rows()
    whole = read_traces(GSM8K)
    del rows[2]["doc"]
    rows[4]["doc"] = {"text": "no question here"}
    path = tmp_path / "samples_gsm8k_x.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = read_traces(path)
    assert any("line 3 skipped: missing field 'doc'" in note for note in source.notes), source.notes
    assert any("line 5 skipped: no question in 'doc'" in note for note in source.notes), source.notes
    assert 0 < len(source.items) < len(whole.items)
    for row in rows:
        row.pop("doc", None)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match="line 1: missing field 'doc'"):  # nothing left: refused, first reason named
        read_traces(path)


@pytest.mark.parametrize("typed, name", [("проба-1", "проба-1"), ("模型 探针", "模型-探针"), ("ｐｒｏｂｅ１", "probe1"),
                                         ("a\u200bb", "ab"), ("पहचान", "पहचान"), ("../../проба.json", "проба"),
                                         ("my probe!", "my-probe")])
def test_probe_names_keep_letters_of_any_script(typed, name):
    from studio.served import safe_probe_name

    assert safe_probe_name(typed) == name


def test_probe_names_stay_within_a_file_names_bytes():
    from studio.served import safe_probe_name

    name = safe_probe_name("я" * 300)
    assert len((name + ".safetensors").encode()) <= 255
    for bad in ("\u200b", "..", "-\u202e-", "!!!"):
        with pytest.raises(InputError):
            safe_probe_name(bad)


@pytest.fixture
def served(monkeypatch, tmp_path, smollm):
    from studio import session

    monkeypatch.setenv("GRADE_SERVED", "1")
    monkeypatch.setenv("GRADE_USER_DATA_DIR", str(tmp_path / "users"))
    session._settings.cache_clear()
    yield tmp_path
    session._settings.cache_clear()


def _app():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
    assert not at.exception, [e.value for e in at.exception]
    return at.switch_page("pages/probes.py").run()


@pytest.mark.slow
def test_a_probe_upload_of_too_many_files_is_refused_as_it_arrives(served):
    at = _app()
    files = [(f"p{i}.json", b"{}", "application/json") for i in range(5)]
    at.file_uploader(key="probe_upload").set_value(files).run()  # no "Load probe" click
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert any("5 files were uploaded" in e for e in errors), errors
    uploaders = [u for u in at.file_uploader if u.key and u.key.startswith("probe_upload")]
    assert [u.key for u in uploaders] == ["probe_upload_1"] and not uploaders[0].value  # the files are let go


@pytest.mark.slow
def test_served_extract_messages_name_the_users_file_never_a_temporary_one(served):
    rows = [{"id": "a", "question": "What is the capital of France?", "label": 1},
            {"id": "a", "question": "What is the capital of France?", "label": 0}]
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    at = _app()
    at.radio(key="train_source").set_value("Extract from labelled questions (.jsonl)").run()
    at.file_uploader(key="train_jsonl").set_value(("my_questions.jsonl", data, "application/octet-stream")).run()
    at.button(key="extract").click().run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [w.value for w in at.warning] + [e.value for e in at.error] + [s.value for s in at.success]
    assert any("my\\_questions" in w or "my_questions" in w for w in shown), shown
    assert not [w for w in shown if "tmp" in w], shown
