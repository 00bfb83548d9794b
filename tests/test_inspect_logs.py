"""Inspect AI eval logs as trace sources (grade.inspect_logs through grade.traces.read_traces).

The logs are real: ``inspect_ai`` writes them at test time, in a child process, with its mock model
(``mockllm/model``, no network) answering three GSM8K questions of the project's dev set with set replies,
some right and some wrong. The mock's token usage is given with each reply, because inspect_ai would otherwise
count the prompt's tokens with tiktoken, which downloads its vocabulary.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from bombs import ROOT, ZSTD_METHOD, lying_zip, read_in_child, zip_bomb
from grade.commands.cli import main
from grade.common.errors import InputError
from grade.tasks.tasks import load_questions
from grade.traces import read_traces

# Runs in a child process: inspect_ai sets up logging and an event loop, and keeps its own data files
# (pointed at the test's folder through XDG_DATA_HOME / XDG_CACHE_HOME).
WRITE_LOGS = r'''
import json, sys
from pathlib import Path

from inspect_ai import Task, eval
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageSystem, ChatMessageUser, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import Score, includes, match, mean, scorer
from inspect_ai.solver import generate

out = Path(sys.argv[1])
spec = json.loads((out / "spec.json").read_text())
replies = {q["question"]: q["reply"] for q in spec["questions"]}
stops = {q["question"]: q["stop"] for q in spec["questions"]}


def reply(messages, tools, tool_choice, config):
    question = next(m.text for m in messages if m.role == "user")
    output = ModelOutput.from_content(model="mockllm/model", content=replies[question], stop_reason=stops[question])
    output.usage = ModelUsage(input_tokens=50, output_tokens=20, total_tokens=70)  # no tiktoken download
    return output


@scorer(metrics=[mean()])
def graded():
    """A third scorer whose values are set per sample (1, 0.5 or false)."""
    async def score(state, target):
        return Score(value=state.metadata["graded"])
    return score


def samples(chat=False):
    rows = []
    for q in spec["questions"]:
        text = q["question"]
        task_input = [ChatMessageSystem(content="Solve it."), ChatMessageUser(content=text)] if chat else text
        rows.append(Sample(id=q["id"], input=task_input, target=q["target"], metadata={"graded": q["graded"]}))
    return rows


def run(name, dataset_name, *, fmt, epochs=1, chat=False, log_samples=True):
    task = Task(dataset=MemoryDataset(samples(chat), name=dataset_name), solver=generate(),
                scorer=[match(numeric=True), includes(), graded()], name=name, epochs=epochs)
    model = get_model("mockllm/model", custom_outputs=reply)
    [log] = eval(task, model=model, log_dir=str(out / name), log_format=fmt, display="none",
                 log_samples=log_samples, max_samples=1)
    assert log.status == "success", log.error
    return log.location


paths = {
    "eval": run("gsm8k_mini", "gsm8k-dev", fmt="eval", epochs=2),
    "json": run("gsm8k_chat", "gsm8k-dev", fmt="json", chat=True),
    "unnamed": run("arithmetic", "numbers", fmt="eval"),
    "no_samples": run("gsm8k_scores_only", "gsm8k-dev", fmt="eval", log_samples=False),
}
(out / "paths.json").write_text(json.dumps(paths))
'''


@pytest.fixture(scope="module")
def questions():
    """Three GSM8K dev questions with set replies: right (worked solution), wrong, right; a third
    scorer's values (1, 0.5, false); and the replies' stop reasons (the wrong one hit the token limit)."""
    chosen = load_questions("gsm8k", limit=3)
    gold = [q.answers[0] for q in chosen]
    replies = [chosen[0].solution.split("####")[0] + f"The answer is {gold[0]}.",
               f"Let me think step by step.\nIt is {int(gold[1]) + 7}.\nThe answer is {int(gold[1]) + 7}.",
               f"Step one.\nStep two.\nThe answer is {gold[2]}."]
    return [{"id": q.id, "question": q.question, "target": q.answers[0], "reply": r, "graded": g, "gold": a, "stop": stop}
            for q, r, g, a, stop in zip(chosen, replies, [1, 0.5, False], gold, ["stop", "max_tokens", "unknown"])]


@pytest.fixture(scope="module")
def logs(tmp_path_factory, questions) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("inspect")
    (out / "spec.json").write_text(json.dumps({"questions": questions}))
    env = {**os.environ, "XDG_DATA_HOME": str(out / "data"), "XDG_CACHE_HOME": str(out / "cache"),
           "INSPECT_LOG_DIR": str(out), "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-c", WRITE_LOGS, str(out)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {k: Path(v) for k, v in json.loads((out / "paths.json").read_text()).items()}


def test_an_eval_log_gives_one_trace_per_sample_and_epoch(logs, questions):
    source = read_traces(logs["eval"])
    assert logs["eval"].suffix == ".eval"
    assert (source.format, source.task, source.metric) == ("inspect", "gsm8k", "match")  # task from its name
    assert source.metrics == ["match", "includes", "graded"] and source.filter is None
    ids = [q["id"] for q in questions]
    assert [(i.doc_id, i.sample) for i in source.items] == [(d, k) for d in ids for k in (0, 1)]  # dataset order
    for item in source.items:
        q = questions[ids.index(item.doc_id)]
        assert item.question == q["question"] and item.response == q["reply"]
        assert item.answers == (q["gold"],) and item.task == "gsm8k" and item.prompt is None
        assert item.source == "scorer match" and item.trace_id == f"{item.doc_id}:{item.sample}"
    assert [i.correct for i in source.items] == [True, True, False, False, True, True]
    # from each output's stop reason: max_tokens is cut off, "unknown" says nothing
    assert [i.cut_off for i in source.items] == [False, False, True, True, None, None]
    assert any("also has includes, graded" in note for note in source.notes)
    assert source.describe() == {"file": logs["eval"].name, "format": "inspect", "task": "gsm8k", "metric": "match",
                                 "filter": None, "prompt": "task"}
    assert [i.trace_id for i in read_traces(logs["eval"], limit=3).items] == [f"{ids[0]}:0", f"{ids[0]}:1",
                                                                            f"{ids[1]}:0"]


def test_metric_names_the_scorer_and_other_score_values_leave_correctness_unknown(logs):
    graded = read_traces(logs["eval"], metric="graded")
    assert graded.metric == "graded"
    assert [i.correct for i in graded.items] == [True, True, None, None, False, False]  # 1, 0.5, false
    assert any("2 traces have a graded score" in note and "0.5 (2)" in note for note in graded.notes)
    includes = read_traces(logs["eval"], metric="includes")
    assert [i.correct for i in includes.items] == [True, True, False, False, True, True]
    with pytest.raises(InputError, match="has no scorer 'accuracy'; it has match, includes, graded"):
        read_traces(logs["eval"], metric="accuracy")


def test_a_json_log_with_chat_input_gives_the_user_message_as_the_question(logs, questions):
    assert logs["json"].suffix == ".json"
    head = json.loads(logs["json"].read_text())
    assert {"eval", "samples"} <= head.keys()
    source = read_traces(logs["json"])
    assert (source.format, source.task) == ("inspect", "gsm8k")
    assert [i.question for i in source.items] == [q["question"] for q in questions]  # not the system message
    assert [i.correct for i in source.items] == [True, False, True] and {i.sample for i in source.items} == {0}
    assert [i.cut_off for i in source.items] == [False, True, None]


def test_the_task_comes_from_task_then_names_else_task_is_required(logs):
    with pytest.raises(InputError, match="cannot tell GSM8K from MATH from task 'arithmetic' or dataset 'numbers'; "
                                         "give --task gsm8k or --task math"):
        read_traces(logs["unnamed"])
    source = read_traces(logs["unnamed"], task="gsm8k")
    assert source.task == "gsm8k" and len(source.items) == 3
    assert read_traces(logs["eval"], task="math").task == "math"  # --task wins over the log's name


def test_bad_logs_give_one_error_line(logs, tmp_path):
    with pytest.raises(InputError, match="holds no samples"):
        read_traces(logs["no_samples"])
    garbage = tmp_path / "garbage.eval"
    garbage.write_text("not a zip file\n")
    with pytest.raises(InputError, match=r"garbage\.eval is not a readable Inspect AI eval log"):
        read_traces(garbage)
    truncated = tmp_path / "truncated.eval"
    truncated.write_bytes(logs["eval"].read_bytes()[:2000])
    with pytest.raises(InputError, match=r"truncated\.eval is not a readable Inspect AI eval log"):
        read_traces(truncated)
    broken = tmp_path / "broken.json"  # has the keys, not the schema
    broken.write_text(json.dumps({"eval": {"task": 1}, "samples": []}))
    with pytest.raises(InputError, match=r"broken\.json is not a readable Inspect AI eval log \(ValidationError"):
        read_traces(broken)
    with pytest.raises(InputError, match="does not exist"):
        read_traces(tmp_path / "missing.eval")
    with pytest.raises(InputError, match="--filter and --prompt run apply to lm-evaluation-harness"):
        read_traces(logs["eval"], prompt="run")
    # a .json that is not an Inspect log still goes to the JSONL readers
    other = tmp_path / "trace.json"
    other.write_text(json.dumps({"question": "What is 2+2?", "response": "4", "correct": True}) + "\n")
    assert read_traces(other).format == "jsonl"
    assert zipfile.is_zipfile(logs["eval"])


def test_without_inspect_ai_the_error_says_how_to_install_it(logs, monkeypatch):
    monkeypatch.setitem(sys.modules, "inspect_ai.log", None)  # import inspect_ai.log -> ImportError
    with pytest.raises(InputError, match=r"needs the inspect_ai package: pip install 'grade-studio\[inspect\]'"):
        read_traces(logs["eval"])
    with pytest.raises(InputError, match="needs the inspect_ai package"):
        read_traces(logs["json"])


@pytest.mark.slow
def test_the_command_analyses_a_trace_of_an_inspect_log(logs, questions, tmp_path, capsys):
    import torch

    threads = torch.get_num_threads()
    stdout = io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout):
            code = main(["traces", "--samples", str(logs["json"]), "--out", str(tmp_path / "store"),
                         "--model", "smollm2-135m-instruct", "--limit", "1", "--json", "--quiet", "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    printed = json.loads(stdout.getvalue())
    assert printed["n"] == 1
    [trace] = printed["traces"]
    assert (trace["doc_id"], trace["sample"], trace["correct"], trace["cut_off"]) == (questions[0]["id"], 0, True, False)
    assert np.isfinite(trace["grade_pos"]) and trace["grade_pos"] > 0 and trace["n_steps"] >= 1
    meta = json.loads((tmp_path / "store" / "meta.json").read_text())
    assert meta["source"]["format"] == "inspect" and meta["source"]["metric"] == "match"


# ----------------------------------------------------------------------------- bombs (grade.common.bounded)

@pytest.fixture(scope="module")
def eval_bomb(logs, tmp_path_factory) -> Path:
    """The real .eval log with one more sample member: 1 GiB of zeros, compressed with zstd as inspect_ai
    compresses the others."""
    import inspect_ai.log  # noqa: F401  (zipfile learns inspect_ai's zstd members)

    return zip_bomb(tmp_path_factory.mktemp("bomb") / "bomb.eval", base=logs["eval"],
                    member="samples/bomb_epoch_1.json", compression=ZSTD_METHOD)


@pytest.mark.slow
def test_an_eval_log_with_a_huge_member_is_refused_before_inspect_reads_it(eval_bomb, tmp_path):
    assert eval_bomb.stat().st_size < 3 * 2**20
    report = read_in_child("from grade.traces import read_traces", f"read_traces({str(eval_bomb)!r})")
    assert report["outcome"] == "refused", report
    assert "Inspect AI eval log" in report["message"] and "bomb.eval declares 1,024 MB; refused unread past" \
        in report["message"], report
    assert report["peak_increase_mb"] < 300, report
    done = subprocess.run([sys.executable, "-m", "grade", "traces", "--samples", str(eval_bomb), "--out",
                           str(tmp_path / "store"), "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "bomb.eval declares 1,024 MB" in done.stderr, done.stderr
    assert not list((tmp_path / "store").rglob("*"))  # --out was checked writable; nothing was written


def test_an_eval_log_whose_member_understates_its_size_is_refused_while_counting(eval_bomb, tmp_path):
    liar = lying_zip(tmp_path / "liar.eval", eval_bomb)
    report = read_in_child("from grade.traces import read_traces", f"read_traces({str(liar)!r})")
    assert report["outcome"] == "refused", report
    assert "member 'samples/bomb_epoch_1.json' is not readable" in report["message"], report
    assert report["peak_increase_mb"] < 300, report


@pytest.mark.slow
def test_a_zip_bomb_inside_an_eval_log_is_never_unpacked(logs, tmp_path):
    import inspect_ai.log  # noqa: F401  (zipfile learns inspect_ai's zstd members)

    inner = zip_bomb(tmp_path / "inner.zip")  # 1 GiB of zeros one level down
    nested = tmp_path / "nested.eval"
    with zipfile.ZipFile(logs["eval"]) as source, zipfile.ZipFile(nested, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            out.writestr(info, source.read(info))
        out.write(inner, "samples/nested_epoch_1.json")
    report = read_in_child("from grade.traces import read_traces", f"read_traces({str(nested)!r})")
    # within the caps (about 1 MB), handed to inspect_ai, which reads the member as JSON, not as an archive
    assert report["outcome"] == "refused" and "nested.eval is not a readable Inspect AI eval log" in report["message"]
    assert report["peak_increase_mb"] < 300, report
