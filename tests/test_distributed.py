"""Labelling and extraction on a Ray cluster (grade.batch, grade.batch.labeling, grade.batch.features): a real local cluster of 2 CPU workers,
the embedded model, compared with the single-process path; a worker is killed and a run interrupted."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grade.commands.cli import main
from grade.common.errors import InputError

ROOT = Path(__file__).resolve().parents[1]

QUESTIONS = [
    ("q1", "What is the capital of France?", ["Paris"]),
    ("q2", "How many legs does a spider have?", ["eight", "8"]),
    ("q3", "Who wrote the novel Middlemarch?", ["George Eliot"]),
    ("q4", "What is 7 + 5?", ["12", "twelve"]),
    ("q5", "What colour is the sky on a clear day?", ["blue"]),
    ("q6", "In which year did the Battle of Hastings take place?", ["1066"]),
    ("q7", "What is the chemical symbol for gold?", ["Au"]),
    ("q8", "Which planet is known as the Red Planet?", ["Mars"]),
]


def labelled_rows():
    return [{"id": qid, "dataset": "facts", "question": q, "label": i % 2} for i, (qid, q, _) in enumerate(QUESTIONS)]


def write_questions(path):
    path.write_text("".join(json.dumps({"id": qid, "question": q, "answers": a}) + "\n" for qid, q, a in QUESTIONS))
    return path


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster with 2 CPUs, started here and stopped after this module; yields its address."""
    ray = pytest.importorskip("ray")
    from grade.batch import connect

    started = connect(num_cpus=2)
    yield ray.get_runtime_context().gcs_address
    if started:
        ray.shutdown()


def test_ray_options_need_engine_ray(tmp_path, capsys):
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"id": "a", "question": "q?", "label": 1}) + "\n")
    assert main(["extract", "--labels", str(labels), "--out", str(tmp_path / "f"), "--workers", "2"]) == 2
    assert "--workers only apply with --engine ray" in capsys.readouterr().err
    questions = write_questions(tmp_path / "qs.jsonl")
    assert main(["label", "--dataset", str(questions), "--out", str(tmp_path / "l.jsonl"), "--address", "auto",
                 "--gpus-per-worker", "2"]) == 2
    assert "--address, --gpus-per-worker only apply" in capsys.readouterr().err
    assert not (tmp_path / "f").exists() and not (tmp_path / "l.jsonl").exists()


def test_cluster_options_are_checked(tmp_path):
    from grade.commands.engine import _cluster_from_args, check_engine_arguments
    from argparse import Namespace

    args = Namespace(engine="ray", address=None, workers=0, gpus_per_worker=None, device="cpu")
    with pytest.raises(InputError, match="--workers"):
        _cluster_from_args(args)
    args.workers, args.gpus_per_worker = 2, 1.5
    with pytest.raises(InputError, match="whole number"):
        _cluster_from_args(args)
    args.gpus_per_worker = None
    args.device = "cuda"
    assert _cluster_from_args(args).gpus_per_worker == 1  # --device cuda: one GPU per worker by default
    check_engine_arguments(args)  # all allowed with --engine ray


@pytest.mark.slow
def test_impossible_placements_fail_at_once(ray_cluster):
    """Ray would wait forever for GPUs the cluster does not have: say so instead."""
    from grade.batch import ClusterOptions, RayRun
    from grade.batch.features import FeatureWork
    from grade.models.models import ModelSpec
    from grade.common.errors import GradeError

    with pytest.raises(GradeError, match="the cluster has 0"):
        RayRun(FeatureWork(), ModelSpec("smollm2-135m-instruct"), ClusterOptions(workers=1, gpus_per_worker=1))


@pytest.mark.slow
def test_extract_on_ray_matches_local_despite_a_killed_worker_and_an_interrupted_run(smollm, ray_cluster, tmp_path):
    from grade.batch import ClusterOptions
    from grade.models.models import ModelSpec
    from grade.batch.features import extract_features, load_features

    rows = labelled_rows()
    import torch

    # one row a batched pass on one thread, as each Ray worker (1 CPU) with its chunk of one row: float32 kernels
    # round by the batch's shape and the thread count, so the same kernels give the same floats
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        extract_features(smollm, rows, tmp_path / "local.parquet", batch_size=1)
    finally:
        torch.set_num_threads(threads)
    spec, cluster, store = ModelSpec("smollm2-135m-instruct"), ClusterOptions(workers=2), tmp_path / "ray.parquet"

    killed = []

    def kill_then_interrupt(done, total, run):
        if not killed:  # SIGKILL a worker that still holds a chunk: its chunk must be sent again
            killed.append(run.worker_pids[1])
            os.kill(run.worker_pids[1], signal.SIGKILL)
        if done >= 5:
            raise KeyboardInterrupt  # the driver stops too: what is written must stay usable

    with pytest.raises(KeyboardInterrupt):
        extract_features(spec, rows, store, chunk_size=1, backend="ray", cluster=cluster, callback=kill_then_interrupt)
    first = load_features(store)
    assert 5 <= len(first) < len(rows) and first["id"].is_unique

    report = extract_features(spec, rows, store, chunk_size=1, backend="ray", cluster=cluster)
    assert report.already == len(first) and report.written == len(rows) - len(first)  # only the missing ones

    local = load_features(tmp_path / "local.parquet").sort_values("id").reset_index(drop=True)
    ray = load_features(store).sort_values("id").reset_index(drop=True)
    assert ray["id"].tolist() == local["id"].tolist()  # every question once
    for column in ("rank_ratio", "srank_h", "srank_g"):
        np.testing.assert_allclose(np.stack(ray[column]), np.stack(local[column]), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.stack([np.stack(h) for h in ray["hidden"]]),
                               np.stack([np.stack(h) for h in local["hidden"]]), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ray["loss_value"], local["loss_value"], rtol=1e-6, atol=1e-6)
    assert (ray["label"] == local["label"]).all() and (ray["n_tokens"] == local["n_tokens"]).all()


@pytest.mark.slow
def test_label_command_on_an_existing_cluster_matches_local(smollm, ray_cluster, tmp_path):
    """``python -m grade label --engine ray --address ...`` joins the running cluster (the grade package
    travels as a runtime_env module) and writes the records of the single-process path."""
    import torch

    from grade.batch.labeling import label_questions, read_records
    from grade.tasks.tasks import load_questions

    dataset = write_questions(tmp_path / "facts.jsonl")
    settings = dict(n_samples=3, matcher="lenient", seed=7, max_new_tokens=6, questions_per_batch=2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each Ray worker (1 CPU): the same kernels, the same floats
    try:
        label_questions(smollm, load_questions(dataset), tmp_path / "local.jsonl", **settings)
    finally:
        torch.set_num_threads(threads)

    out = tmp_path / "ray.jsonl"
    # An earlier run wrote the first decoding batch, then died mid-line: resumed, the cut line dropped.
    first_batch = read_records(tmp_path / "local.jsonl")[:2]
    out.write_text("".join(json.dumps(r) + "\n" for r in first_batch) + '{"id": "q3", "quest')
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": ""}
    command = [sys.executable, "-m", "grade", "label", "--dataset", str(dataset), "--out", str(out),
               "--samples", "3", "--matcher", "lenient", "--seed", "7", "--max-new-tokens", "6", "--batch", "2",
               "--quiet", "--engine", "ray", "--address", ray_cluster, "--workers", "2"]
    done = subprocess.run(command, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "6 rows written, 2 already stored" in done.stdout

    local = {r["id"]: r for r in read_records(tmp_path / "local.jsonl")}
    ray = read_records(out)
    assert sorted(r["id"] for r in ray) == sorted(local)  # the cut line was dropped, nothing twice
    for record in ray:
        assert record == local[record["id"]]  # samples, scores, labels, every field
        assert len(record["cut_off"]) == 3  # the flag too: Ray workers run label_questions itself


@pytest.mark.slow
def test_device_map_model_keeps_every_layer_hooked(smollm, tmp_path):
    """A model dispatched by accelerate (here: its last layers offloaded to disk, as a GPU split would
    move them to other devices) still has all its MLPs captured, with the plain model's features."""
    import grade
    from grade.gradients.capture import capture_mlp
    from grade.models.models import load_sharded_model

    sharded = load_sharded_model("smollm2-135m-instruct", max_memory={"cpu": "480MB"}, offload_folder=tmp_path)
    placements = set(sharded.model.hf_device_map.values())
    assert "disk" in placements and "cpu" in placements  # really dispatched over two places
    assert sharded.n_layers == smollm.n_layers

    plain = grade.analyze(smollm, "What is the capital of France?", spectra=False, keep_hidden=True)
    split = grade.analyze(sharded, "What is the capital of France?", spectra=False, keep_hidden=True)
    np.testing.assert_allclose(split.rank_ratio, plain.rank_ratio, rtol=1e-6)
    np.testing.assert_allclose(split.last_hidden, plain.last_hidden, rtol=1e-5, atol=1e-6)
    import torch

    with capture_mlp(sharded.model) as capture, torch.no_grad():
        sharded.model(input_ids=torch.tensor([[1, 2, 3]]))
    assert capture.complete() and len(capture.hidden) == smollm.n_layers


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # pragma: no cover
        return 0


@pytest.mark.slow
@pytest.mark.skipif(_gpu_count() < 2, reason="needs 2 GPUs (run on a multi-GPU machine)")
def test_model_split_across_two_gpus_matches_one_gpu():
    """device_map over 2 GPUs: activations and gradients cross devices mid-model; every layer is still
    hooked, features and sampled answers equal those of the same model on one GPU."""
    import grade
    from grade.models.architectures import down_projections
    from grade.models.models import load_sharded_model
    from grade.tasks.prompts import format_prompt
    from grade.models.sampling import SamplingSettings, sample_answers

    name = os.environ.get("GRADE_TEST_MODEL", "smollm2-135m-instruct")
    whole = grade.load_model(name, device="cuda:0", dtype="float32")
    size = sum(p.numel() * p.element_size() for p in whole.model.parameters())
    split = load_sharded_model(name, dtype="float32", max_memory={0: int(size * 0.6), 1: int(size * 2)})
    layer_devices = {m.weight.device for m in down_projections(split.model)}
    assert len(layer_devices) == 2 and split.n_layers == whole.n_layers

    question = "What is the capital of France?"
    for kwargs in (dict(loss="pre"), dict(loss="pre", spectra=True),
                   dict(loss="pos", response="Paris. It is on the Seine.", steps=True)):
        a = grade.analyze(whole, question, keep_hidden=True, **kwargs)
        b = grade.analyze(split, question, keep_hidden=True, **kwargs)
        np.testing.assert_allclose(b.rank_ratio, a.rank_ratio, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(b.last_hidden, a.last_hidden, rtol=1e-4, atol=1e-5)

    prompt = format_prompt(whole.tokenizer, question)
    settings = SamplingSettings(n_samples=4, max_new_tokens=8, seed=3, stop_strings=("\n",))
    assert sample_answers(split, [prompt], ["q1"], settings) == sample_answers(whole, [prompt], ["q1"], settings)


def test_ray_labelling_resumes_only_with_the_same_answer_length(tmp_path, monkeypatch):
    """The Ray driver resumes a labels file under the local path's conditions, answer length included,
    and says so before any worker starts."""
    from grade.batch import labeling
    from grade.models import models
    from grade.batch import ray_backend
    from grade.tasks.tasks import load_questions

    out = tmp_path / "labels.jsonl"
    out.write_text(json.dumps({"id": "known-capital-france", "task": "qa", "model": "smollm2-135m-instruct",
                               "matcher": "strict", "seed": 0, "n_samples": 10, "max_new_tokens": 24}) + "\n")
    monkeypatch.setattr(ray_backend, "run_on_ray", lambda *a, **k: pytest.fail("a cluster was started"))
    spec = models.ModelSpec("smollm2-135m-instruct")
    questions = load_questions("facts_known", limit=3)
    with pytest.raises(InputError, match="answers of up to 24 tokens, this run uses 12"):
        labeling.label_questions(spec, questions, out, backend="ray")
    with pytest.raises(InputError, match="answers of up to 24 tokens, this run uses 16"):
        labeling.label_questions(spec, questions, out, max_new_tokens=16, backend="ray")


@pytest.mark.slow
def test_one_function_per_batch_job_checks_its_backend_before_any_work(smollm, tmp_path, monkeypatch):
    """Labelling, feature extraction and trace analysis take ``backend``: an unknown one, cluster options for a
    local run, or a loaded model for Ray (whose workers load their own) are refused in one line, before a
    cluster starts or an output is written."""
    from grade.batch import ClusterOptions, ray_backend
    from grade.batch.features import extract_features
    from grade.batch.labeling import label_questions
    from grade.tasks.tasks import load_questions
    from grade.traces import analyze_traces, read_traces

    monkeypatch.setattr(ray_backend, "run_on_ray", lambda *a, **k: pytest.fail("a cluster was started"))
    questions, rows = load_questions("facts_known", limit=2), labelled_rows()
    source = read_traces(ROOT / "tests" / "data" / "samples_gsm8k_2025-11-26T17-00-00.000000.jsonl")
    jobs = {"labels": lambda out, **k: label_questions(smollm, questions, out, **k),
            "features": lambda out, **k: extract_features(smollm, rows, out, **k),
            "traces": lambda out, **k: analyze_traces(smollm, source, out, **k)}
    for name, job in jobs.items():
        with pytest.raises(InputError, match="unknown backend 'spark'; use local or ray"):
            job(tmp_path / name, backend="spark")
        with pytest.raises(InputError, match="cluster options apply to the ray backend only"):
            job(tmp_path / name, cluster=ClusterOptions(workers=2))
        with pytest.raises(InputError, match="give a grade.models.models.ModelSpec, not a loaded model"):
            job(tmp_path / name, backend="ray")
        assert not (tmp_path / name).exists()
