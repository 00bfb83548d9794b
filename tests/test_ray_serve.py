"""Home's analysis on Ray Serve (studio/ray_serve.py): a local Ray cluster on the loopback address, two CPU
replicas of the embedded SmolLM2, against the same analysis computed in this process."""

from __future__ import annotations

import numpy as np
import pytest

MODEL = "smollm2-135m-instruct"
QUESTION = "What is the capital of France?"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("ray.serve")
    import ray

    from studio.ray_serve import RayServeBackend, ReplicaOptions

    assert not ray.is_initialized()
    server = RayServeBackend("", ReplicaOptions(replicas=2, num_cpus=1))
    try:
        yield server
    finally:
        from ray import serve

        server.shutdown()
        serve.shutdown()
        ray.shutdown()


def test_the_ray_serve_backend_answers_a_home_analysis_like_the_process(backend, monkeypatch):
    import grade
    from studio import workflows
    from studio.resources import default_probe, list_probes, load_detectors, load_probe
    from studio.served import SERVED_LIMITS

    lm = grade.load_model(MODEL)
    info = default_probe(lm.name, list_probes(), task="qa")
    assert info is not None
    probe = load_probe(info.path)
    detectors, _ = load_detectors(lm.name)
    request = {"question": QUESTION, "context": None, "task": "qa", "probe": probe, "probe_info": info,
               "max_new_tokens": 16, "model_label": MODEL, "limits": SERVED_LIMITS, "detectors": detectors}
    remote = backend.analyze(MODEL, "cpu", None, request)
    local = workflows.analyze_question(lm, QUESTION, task="qa", probe=probe, probe_info=info, max_new_tokens=16,
                                       model_label=MODEL, limits=SERVED_LIMITS, detectors=detectors)
    # the same float32 kernels in two processes: once in five runs the replica's layer-0 ratios differed from this
    # process's by up to 4e-6 (relative), the rounding the other routes' comparisons allow for
    np.testing.assert_allclose(remote.result.rank_ratio, local.result.rank_ratio, rtol=1e-5, atol=1e-6)
    assert remote.answer == local.answer and "Paris" in remote.answer
    assert remote.verdict is not None and abs(remote.verdict.probability - local.verdict.probability) < 1e-5
    assert [v.title for v in remote.detector_verdicts] == [v.title for v in local.detector_verdicts]

    # two replicas, each its own process holding the model (not this one)
    from ray import serve

    from studio.ray_serve import app_name

    status = serve.status().applications[app_name(MODEL, "cpu", None)]
    replicas = status.deployments["analyzer"].replica_states
    assert replicas.get("RUNNING") == 2, replicas
    handle = backend.handle(MODEL, "cpu", None)
    pids = {handle.info.remote().result()["pid"] for _ in range(12)}
    import os

    assert os.getpid() not in pids and 1 <= len(pids) <= 2


def test_several_requests_at_once_are_queued_by_ray_and_all_answered(backend):
    """Four analyses at once on two replicas: Ray queues the other two (one request at a time per replica),
    and each caller gets its own question's result."""
    from concurrent.futures import ThreadPoolExecutor

    from studio.served import SERVED_LIMITS

    questions = ["What is the capital of France?", "Who wrote Pride and Prejudice?",
                 "What is the largest planet in the solar system?", "In which year did World War II end?"]

    def ask(question):
        return backend.analyze(MODEL, "cpu", None, {"question": question, "context": None, "task": "qa",
                                                    "max_new_tokens": 8, "limits": SERVED_LIMITS})

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(ask, questions))
    for question, analysis in zip(questions, results):
        assert question in analysis.result.prompt
    assert len({tuple(np.round(a.result.rank_ratio, 6)) for a in results}) == 4
