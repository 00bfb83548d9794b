"""Served mode (``make serve``, ``GRADE_SERVED=1``) under ``streamlit.testing.v1.AppTest``: each way a
remote browser could turn the studio against its server is tried on the real app and refused with a
message; the session stays usable. The user files of each test go to a temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TIMEOUT = 600

slow = pytest.mark.slow  # the AppTests run the embedded model


@pytest.fixture
def served(monkeypatch, tmp_path, smollm):
    """Served mode with user files under tmp_path/users; restores Streamlit's options afterwards."""
    from streamlit import config

    from studio import session

    monkeypatch.setenv("GRADE_SERVED", "1")
    monkeypatch.setenv("GRADE_USER_DATA_DIR", str(tmp_path / "users"))
    monkeypatch.delenv("GRADE_MODEL_DIRS", raising=False)
    session._settings.cache_clear()
    details = config.get_option("client.showErrorDetails")
    yield tmp_path
    session._settings.cache_clear()
    config.set_option("client.showErrorDetails", details)


def _app():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    _no_exception(at)
    return at


def _no_exception(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


def _errors(at) -> list[str]:
    return [e.value for e in at.error] + [e.value for e in at.sidebar.error]


def _model_cache() -> Path:
    from grade.models.models import cache_dir

    return cache_dir() / "models" / "smollm2-135m-instruct"


def _pick_model(at, text: str):
    at.selectbox(key="model_choice").set_value("__other__").run()
    at.text_input(key="model_path").input(text).run()
    _no_exception(at)
    return at


@slow
def test_model_paths_are_refused_alike_whether_they_exist_or_not(served):
    from grade.models.embedded import EMBEDDED_MODELS

    existing = _model_cache()
    assert (existing / "config.json").exists()
    gguf = EMBEDDED_MODELS["smollm2-135m-instruct"].locate_gguf()
    at = _app()
    messages = {}
    for text in (str(existing), str(served / "no-such-model"), "/etc", str(gguf), "HuggingFaceTB/SmolLM2-135M",
                 "../../../etc", "~"):
        _pick_model(at, text)
        messages[text] = [e.value for e in at.sidebar.error]
        assert at.button(key="analyze").disabled
    assert len({tuple(m) for m in messages.values()}) == 1, messages  # one message: it tells nothing about the paths
    [message] = messages["/etc"]
    assert "only the embedded models" in message and "/" not in message.replace(" / ", "")
    converted = list((existing.parent).glob("SmolLM2-135M-Instruct.Q4_1-*"))
    assert not converted  # the .gguf was not converted into a cached float32 copy
    at.selectbox(key="model_choice").set_value("smollm2-135m-instruct").run()
    assert not at.sidebar.error and not at.button(key="analyze").disabled


@slow
def test_models_in_the_operators_folders_load_and_nothing_outside(served, monkeypatch):
    from studio import session

    allowed = served / "models"
    allowed.mkdir()
    (allowed / "smol").symlink_to(_model_cache())  # the operator's own link
    monkeypatch.setenv("GRADE_MODEL_DIRS", str(allowed))
    session._settings.cache_clear()
    at = _app()
    _pick_model(at, "smol/../../models/smol/../..")
    assert any("only the embedded models" in m for m in _errors(at))
    _pick_model(at, "smol")
    assert not at.sidebar.error, _errors(at)
    assert not at.button(key="analyze").disabled
    assert not any(str(allowed) in c.value for c in at.sidebar.caption)  # no server path shown


@slow
def test_request_caps_bite_with_a_message(served):
    at = _app()
    at.number_input(key="max_new_tokens").set_value(100_000)
    at.text_area(key="question").input("What is the capital of France?")
    at.button(key="analyze").click().run()
    _no_exception(at)
    assert any("100,000 tokens" in e and "limit of 128" in e for e in _errors(at)), _errors(at)
    at.number_input(key="max_new_tokens").set_value(8)
    at.text_area(key="question").input("Why? " * 500)
    at.button(key="analyze").click().run()
    assert any("limit of 2,000" in e for e in _errors(at)), _errors(at)
    at.text_area(key="question").input("What is the capital of France?")
    at.button(key="analyze").click().run()
    _no_exception(at)
    assert not _errors(at) and any(m.label == "Tokens analysed" for m in at.metric)  # the session is fine


@slow
def test_reasoning_traces_are_capped_in_steps_length_and_generation(served):
    at = _app()
    at.switch_page("pages/reasoning_trace.py").run()
    _no_exception(at)
    at.text_area(key="rt_text_B").input("")  # only the trace under test is analysed
    at.text_area(key="rt_text_A").input(" ".join(f"Step {i} adds {i}." for i in range(1, 21)))
    at.button(key="rt_analyze").click().run()
    _no_exception(at)
    assert any("steps; this studio analyses at most 12" in e for e in _errors(at)), _errors(at)
    # the step verifier never reads a refused trace (it used to say "Step 2 stands out" beside the refusal)
    assert "A" not in (at.session_state["rt_verdicts"] if "rt_verdicts" in at.session_state else {})
    assert not any("Step verifier: where" in h.value for h in at.subheader)
    at.text_area(key="rt_text_A").input("x" * 5000)
    at.button(key="rt_analyze").click().run()
    assert any("5,000 characters" in e for e in _errors(at)), _errors(at)
    at.number_input(key="rt_max_tokens").set_value(100_000)
    at.button(key="rt_gen_A").click().run()
    _no_exception(at)
    assert any("limit of 256" in e for e in _errors(at)), _errors(at)


def _train(at):
    at.switch_page("pages/probes.py").run()
    _no_exception(at)
    at.radio(key="train_kind").set_value("logreg")
    at.button(key="train_probe").click().run()
    _no_exception(at)
    assert not at.error, [e.value for e in at.error]
    return at


def _save(at, name: str, replace: bool = False):
    at.text_input(key="save_name").input(name)
    at.checkbox(key="save_replace").set_value(replace)
    at.button(key="save_probe").click().run()
    _no_exception(at)
    return at


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


@slow
def test_probe_names_are_sanitised_and_never_overwritten_silently(served):
    from studio.resources import PROBES_DIR

    shipped = {p: p.stat().st_mtime_ns for p in PROBES_DIR.iterdir()}
    at = _train(_app())
    for name in (".", "..", "///"):
        _save(at, name)
        assert any("at least one letter" in e for e in _errors(at)), (name, _errors(at))
    _save(at, "../../escape")
    assert not _errors(at)
    saved = [p for p in (served / "users").rglob("*.safetensors")]
    assert [p.name for p in saved] == ["escape.safetensors"] and saved[0].parent.name == "probes"
    assert not any(str(served) in m.value for m in at.success)  # no server path in the message
    _save(at, "escape")
    assert any("exists already" in e for e in _errors(at)), _errors(at)
    _save(at, "escape", replace=True)
    assert not _errors(at)
    assert {p: p.stat().st_mtime_ns for p in PROBES_DIR.iterdir()} == shipped  # the shared probes: read-only
    assert not list(served.rglob(".*.tmp"))


@slow
def test_each_user_saves_into_their_own_folder_within_a_quota(served, monkeypatch):
    from studio import session

    monkeypatch.setenv("GRADE_LIMIT_USER_PROBES", "2")
    session._settings.cache_clear()
    first, second = _train(_app()), _train(_app())
    _save(first, "mine")
    _save(second, "mine")  # another user, the same name: no clash
    assert not _errors(first) and not _errors(second)
    folders = {p.parent.parent for p in (served / "users").rglob("mine.safetensors")}
    assert len(folders) == 2
    second.switch_page("pages/probes.py").run()
    # the probes' table (the shipped probe's cited numbers stand above it in a table of their own)
    table = next(d.value for d in [*second.dataframe, *second.table] if "file" in d.value.columns)  # grid or static
    assert list(table["name"]).count("mine") == 1  # the other user's probe is not listed
    assert not any("/" in str(f) for f in table["file"])  # names only, no server paths
    _save(first, "other")
    _save(first, "third")
    assert any("the most this studio allows" in e for e in _errors(first)), _errors(first)


@slow
def test_uploads_are_capped_and_paths_are_not_offered(served):
    at = _app()
    at.switch_page("pages/probes.py").run()
    _no_exception(at)
    assert not [t for t in at.text_input if t.key == "probe_path_text"]  # no reading server files by path
    uploader = at.file_uploader(key="probe_upload")
    uploader.set_value([("big.safetensors", b"\0" * (9 * 1024 * 1024), "application/octet-stream"),
                        ("big.json", b"{}", "application/json")])
    at.button(key="load_probe").click().run()
    _no_exception(at)
    assert any("at most 8 MB" in e for e in _errors(at)), _errors(at)
    assert not (served / "users").exists() or not _files(served / "users")  # nothing stored


@slow
def test_a_foreign_feature_file_is_refused_with_a_message(served):
    import io

    import pandas as pd

    at = _app()
    at.switch_page("pages/probes.py").run()
    at.radio(key="train_source").set_value("Upload a feature file (.parquet)").run()
    at.file_uploader(key="train_upload").set_value(("x.parquet", b"not parquet at all", "application/octet-stream"))
    at.run()
    _no_exception(at)
    assert any("could not read x.parquet" in e.lower() for e in _errors(at)), _errors(at)
    buffer = io.BytesIO()
    pd.DataFrame({"a": [1, 2]}).to_parquet(buffer)
    at.file_uploader(key="train_upload").set_value(("y.parquet", buffer.getvalue(), "application/octet-stream"))
    at.run()
    _no_exception(at)
    assert any("lack the column" in e for e in _errors(at)), _errors(at)


@slow
def test_the_traces_page_is_not_served(served):
    at = _app()
    with pytest.raises(ValueError, match="Could not find a navigation page"):  # not a page of the served app
        at.switch_page("pages/traces.py")


@slow
def test_unexpected_errors_show_a_reference_not_details(served, monkeypatch):
    from streamlit import config

    from studio import workflows

    def broken(*args, **kwargs):
        raise RuntimeError(f"boom in {served}/secret/file.py")

    monkeypatch.setattr(workflows, "analyze_question", broken)
    # France is one of Home's examples, whose results all sessions of a process share: an earlier test's
    # cached answer would be shown instead of running the broken analysis.
    from studio import session

    session.analysis_cache.clear()
    at = _app()
    assert config.get_option("client.showErrorDetails") == "none"
    at.text_area(key="question").input("What is the capital of France?")
    at.button(key="analyze").click().run()
    _no_exception(at)
    [message] = [e for e in _errors(at) if "Analysis failed" in e]
    assert "reference" in message and "secret" not in message and "boom" not in message
    assert not at.get("expandable") or not any("Details" in getattr(e, "label", "") for e in at.get("expandable"))


# ------------------------------------------------------------------------ the rules, without the app


def test_served_mode_is_chosen_by_the_environment_or_a_non_loopback_address(monkeypatch):
    from studio.served import SERVED_LIMITS, settings

    monkeypatch.delenv("GRADE_SERVED", raising=False)
    assert not settings(None).served and not settings("127.0.0.1").served and not settings("localhost").served
    assert settings("0.0.0.0").served and settings("192.168.1.5").served and settings("::").served
    monkeypatch.setenv("GRADE_SERVED", "1")
    assert settings(None).served and settings(None).limits == SERVED_LIMITS
    monkeypatch.setenv("GRADE_LIMIT_TRACE_STEPS", "20")
    assert settings(None).limits.trace_steps == 20
    monkeypatch.setenv("GRADE_LIMIT_TRACE_STEPS", "-1")
    with pytest.raises(Exception, match="at least 1"):
        settings(None)


def test_model_sources_outside_the_allowed_folders_are_refused(tmp_path):
    from grade.common.errors import ModelLoadError
    from studio.served import Settings, SERVED_LIMITS, check_model_source

    allowed = tmp_path / "models"
    (allowed / "m").mkdir(parents=True)
    (allowed / "m" / "config.json").write_text("{}")
    (allowed / "empty").mkdir()
    (allowed / "x.gguf").write_bytes(b"GGUF")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").write_text("{}")
    config = Settings(served=True, limits=SERVED_LIMITS, model_dirs=(allowed,))
    embedded = ("smollm2-135m-instruct",)
    assert check_model_source("smollm2-135m-instruct", config, embedded) == "smollm2-135m-instruct"
    assert check_model_source("m", config, embedded) == str(allowed / "m")
    assert check_model_source(str(allowed / "x.gguf"), config, embedded) == str(allowed / "x.gguf")
    for source in ("m/../../outside", str(outside), "empty", "missing", "org/name", "", str(allowed), "..", "m\x00"):
        with pytest.raises(ModelLoadError, match="only the embedded models"):
            check_model_source(source, config, embedded)
    local = Settings(served=False, limits=SERVED_LIMITS, model_dirs=())
    assert check_model_source(" /any/path ", local, embedded) == "/any/path"


def test_messages_lose_their_server_paths_and_names_their_folders():
    from grade.common.errors import InputError
    from studio.served import redact_paths, safe_probe_name

    assert redact_paths("probe file /home/u/.cache/x/probe.json does not exist") == "probe file probe.json does not exist"
    assert redact_paths("could not load '/srv/models/m': no such file '/srv/a/b.bin'") == \
        "could not load 'm': no such file 'b.bin'"
    assert redact_paths("see https://docs.ray.io/en/x and 1/2") == "see https://docs.ray.io/en/x and 1/2"
    assert [safe_probe_name(n) for n in ("my probe!", "../../etc/passwd", ".hidden", "p.json")] == \
        ["my-probe", "passwd", "hidden", "p"]
    for name in (".", "..", "", "---", "/"):
        with pytest.raises(InputError):
            safe_probe_name(name)


def test_the_served_users_files_stay_within_the_overall_cap(tmp_path):
    import time

    from studio.served import MB, SERVED_LIMITS, prune_users
    from dataclasses import replace

    limits = replace(SERVED_LIMITS, served_mb=3)
    users = []
    for i in range(4):
        folder = tmp_path / f"user{i}"
        folder.mkdir()
        (folder / "probe.safetensors").write_bytes(b"x" * MB)
        os.utime(folder / "probe.safetensors", (time.time() - 100 + i, time.time() - 100 + i))
        users.append(folder)
    removed = prune_users(tmp_path, limits, keep=users[0])
    assert removed == [users[1]]  # the least recently used one that is not the current user
    assert [u.exists() for u in users] == [True, False, True, True]


def test_the_gguf_conversion_cache_keeps_the_most_recently_used(tmp_path, monkeypatch):
    import time

    from grade.models.models import _prune_gguf_cache

    monkeypatch.setenv("GRADE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("GRADE_GGUF_CACHE_MAX", "2")
    models = tmp_path / "models"
    embedded = models / "smollm2-135m-instruct"
    embedded.mkdir(parents=True)
    folders = []
    for i in range(4):
        folder = models / f"model{i}-{i:012x}"
        folder.mkdir()
        os.utime(folder, (time.time() - 100 + i, time.time() - 100 + i))
        folders.append(folder)
    _prune_gguf_cache(keep=folders[0])
    assert [f.exists() for f in folders] == [True, False, False, True] and embedded.exists()


# ------------------------------------------------------------ sizes and fields checked before use


def _probe_pair(tmp_path: Path, **changes) -> tuple[bytes, bytes]:
    """A real trained probe's two files, its metadata changed by ``changes``."""
    import json

    import numpy as np

    from grade.verdict.probe import Probe

    rng = np.random.default_rng(0)
    probe = Probe("logreg").fit(rng.normal(size=(60, 30)), np.array([0, 1] * 30))
    probe.metadata.update({"model": "smollm2-135m-instruct", "loss": "pre", "srank": "paper"})
    weights, meta_path = probe.save(tmp_path / "made" / "p")
    meta = json.loads(meta_path.read_text())
    meta.update(changes)
    return weights.read_bytes(), json.dumps(meta).encode()


@slow
@pytest.mark.parametrize("changes, message", [
    ({"metrics": {"test": {"auroc": "0.99"}}}, "test auroc must be a number"),
    ({"model": None}, "'model' must be"),
    ({"name": "x` ![i](https://example.invalid/i.png) `"}, None),  # loads; shown escaped
])
def test_uploaded_probe_metadata_is_checked_and_shown_escaped(served, changes, message):
    weights, meta = _probe_pair(served, **changes)
    at = _app()
    at.switch_page("pages/probes.py").run()
    at.file_uploader(key="probe_upload").set_value([("p.safetensors", weights, "application/octet-stream"),
                                                    ("p.json", meta, "application/json")])
    at.button(key="load_probe").click().run()
    _no_exception(at)
    if message is not None:
        assert any(message in e for e in _errors(at)), _errors(at)
        assert not (served / "users").exists() or not [f for f in _files(served / "users") if "uploads" in f]
        return
    assert not _errors(at), _errors(at)
    shown = [m.value for m in at.markdown if "Active probe" in m.value]
    assert shown and "![i](https" not in shown[0] and "\\!\\[i\\](https" in shown[0], shown


@slow
def test_a_probe_upload_takes_two_files_at_most(served):
    weights, meta = _probe_pair(served)
    at = _app()
    at.switch_page("pages/probes.py").run()
    at.file_uploader(key="probe_upload").set_value([("p.safetensors", weights, "application/octet-stream"),
                                                    ("p.json", meta, "application/json"),
                                                    ("q.json", meta, "application/json")])
    at.button(key="load_probe").click().run()
    _no_exception(at)
    assert any("3 files were uploaded" in e for e in _errors(at)), _errors(at)


@slow
def test_a_feature_file_of_50m_rows_is_refused_from_its_metadata(served):
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from grade.batch.features import TRAINING_COLUMNS

    n = 50_000_000
    buffer = io.BytesIO()
    pq.write_table(pa.table({c: pa.nulls(n, pa.int8()) for c in TRAINING_COLUMNS}), buffer)
    data = buffer.getvalue()
    assert len(data) < 8 * 1024 * 1024  # within the upload cap: only the rows give it away
    at = _app()
    at.switch_page("pages/probes.py").run()
    at.radio(key="train_source").set_value("Upload a feature file (.parquet)").run()
    before = _peak_mb()
    at.file_uploader(key="train_upload").set_value(("big.parquet", data, "application/octet-stream"))
    at.run()
    _no_exception(at)
    assert any("holds 50,000,000 rows" in e for e in _errors(at)), _errors(at)
    assert _peak_mb() - before < 300  # decoding it first cost 1.5 GB


def _peak_mb() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return 0


@slow
def test_extract_applies_the_served_caps_row_by_row(served):
    import json

    rows = [{"id": "long", "question": "q" * 2001, "label": 1, "dataset": "d"},
            {"id": "steps", "question": "What is 1 + 1?", "task": "gsm8k", "label": 1, "dataset": "d",
             "response": " ".join(f"Step {i}: 1 + 1 = 2." for i in range(26))},
            {"id": "ok", "question": "What is the capital of France?", "label": 1, "dataset": "d",
             "response": "Paris"}]
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    at = _app()
    at.switch_page("pages/probes.py").run()
    at.radio(key="train_source").set_value("Extract from labelled questions (.jsonl)").run()
    at.file_uploader(key="train_jsonl").set_value(("rows.jsonl", data, "application/octet-stream"))
    at.run()
    at.radio(key="train_loss").set_value("pos").run()
    at.button(key="extract").click().run()
    _no_exception(at)
    warnings = [w.value for w in at.warning]
    assert any("Skipped 2 row(s) beyond this studio's limits" in w and "2,001 characters" in w for w in warnings), warnings
    assert any("Extracted 1 rows" in s.value for s in at.success), [s.value for s in at.success]


@slow
def test_a_broken_chosen_probe_can_always_be_reset(monkeypatch, tmp_path, smollm):
    from streamlit.testing.v1 import AppTest

    from studio import session

    monkeypatch.delenv("GRADE_SERVED", raising=False)
    monkeypatch.setenv("GRADE_USER_DATA_DIR", str(tmp_path / "users"))
    session._settings.cache_clear()
    weights, meta = _probe_pair(tmp_path, metrics={"test": {"auroc": "high"}})
    (tmp_path / "bad.safetensors").write_bytes(weights)
    (tmp_path / "bad.json").write_bytes(meta)
    try:
        at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
        at.session_state["probe_path"] = str(tmp_path / "bad.safetensors")
        at.switch_page("pages/probes.py").run()
        _no_exception(at)
        assert any("test auroc must be a number" in i.value for i in at.info), [i.value for i in at.info]
        at.button(key="probe_reset").click().run()
        _no_exception(at)
        assert "probe_path" not in at.session_state
    finally:
        session._settings.cache_clear()


@slow
def test_a_probe_upload_that_does_not_load_leaves_nothing_in_the_users_folder(served):
    weights, meta = _probe_pair(served)
    at = _app()
    at.switch_page("pages/probes.py").run()
    at.file_uploader(key="probe_upload").set_value([("p.safetensors", weights[: len(weights) // 2],
                                                     "application/octet-stream"), ("p.json", meta, "application/json")])
    at.button(key="load_probe").click().run()
    _no_exception(at)
    assert any("Probe not loaded" in e for e in _errors(at)), _errors(at)
    users = served / "users"
    assert not users.exists() or not [f for f in _files(users) if "uploads" in f], _files(users)
    at.file_uploader(key="probe_upload").set_value([("p.safetensors", weights, "application/octet-stream"),
                                                    ("p.json", meta, "application/json")])
    at.button(key="load_probe").click().run()  # the whole pair loads and is kept
    assert not _errors(at), _errors(at)
    assert len([f for f in _files(users) if "uploads" in f]) == 2


def test_trace_caps_are_checked_before_anything_is_tokenised():
    from grade.common.errors import InputError
    from studio.memory import prompt_tokens
    from studio.served import SERVED_LIMITS, check_trace_text

    # no tokenizer and no model: a text past its character cap must be refused before either is touched
    with pytest.raises(InputError, match="The reasoning trace is 200,000 characters, over this studio.s limit of 2,000"):
        check_trace_text("What is 2 + 2?", "7." * 100_000, None, SERVED_LIMITS)
    with pytest.raises(InputError, match="The question is 2,001 characters"):
        check_trace_text("x" * 2001, "4", None, SERVED_LIMITS)
    with pytest.raises(InputError, match="The document is 6,001 characters"):
        prompt_tokens(None, "What is 2 + 2?", "y" * 6001, SERVED_LIMITS)
