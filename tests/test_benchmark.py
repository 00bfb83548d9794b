"""The benchmark's orchestration (grade.studies.benchmark) and its outputs under results/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Samples whose labeller's majority ("Paris.", by answer key) differs from their most frequent raw text.
SAMPLES = ["Paris.", "paris", "The answer is Lyon", "the answer is Lyon", "Lyon"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _rows():
    return [{"id": "r1", "dataset": "facts", "question": "What is the capital of France?", "task": "qa", "label": 0,
             "accuracy": 0.0, "samples": SAMPLES, "majority": "Paris."},
            {"id": "r2", "dataset": "facts", "question": "Who wrote the novel Middlemarch?", "task": "qa", "label": 1,
             "accuracy": 1.0, "samples": ["George Eliot"] * 3, "majority": "George Eliot"}]


@pytest.mark.slow
def test_perturbed_rows_score_the_original_response_and_keep_their_accuracy(smollm, tmp_path):
    """Robustness rows are the original rows under another wording: same response under pos (the
    labeller's majority answer), same label record (an accuracy of 0.0 stays 0.0)."""
    from grade.studies.benchmark import LazyModel, ensure_features, feature_store

    model, said = LazyModel(lambda: smollm, offline=False), []
    frames = {}
    for variant in ("original", "reworded"):
        store = feature_store(tmp_path, smollm.name, "facts", variant, "pos")
        frames[variant] = ensure_features(model, store, _rows(), variant, "pos", None, said.append).set_index("id")
    for variant, frame in frames.items():
        assert frame.loc["r1", "response"] == "Paris." and frame.loc["r2", "response"] == "George Eliot", variant
        assert frame.loc["r1", "accuracy"] == 0.0 and frame.loc["r2", "accuracy"] == 1.0, variant
    assert frames["reworded"].loc["r1", "question"] == frames["original"].loc["r1", "question"]
    assert frames["reworded"].loc["r1", "rank_ratio"].tolist() != frames["original"].loc["r1", "rank_ratio"].tolist()

    # relabelled with another majority answer: offline, the stale row is left out (not scored on the old
    # response); online, it is computed again
    rows = _rows()
    rows[0]["majority"] = "The capital of France is Paris."
    store = feature_store(tmp_path, smollm.name, "facts", "reworded", "pos")
    offline = ensure_features(LazyModel(lambda: pytest.fail("loaded offline"), offline=True), store, rows,
                              "reworded", "pos", None, said.append)
    assert list(offline["id"]) == ["r2"] and "offline: left out" in said[-1]
    online = ensure_features(model, store, rows, "reworded", "pos", None, said.append).set_index("id")
    assert len(online) == 2 and online.loc["r1", "response"] == "The capital of France is Paris."


def test_every_figure_under_results_opens_offline():
    """Figures under results/ are PNG files (the app draws them interactively); an HTML figure would
    fetch plotly.js from a CDN. The README links only files that exist."""
    results = ROOT / "results"
    for page in results.rglob("*.html"):
        text = page.read_text(encoding="utf-8", errors="replace")
        assert not re.search(r"<script[^>]+src=[\"']https?://", text), f"{page} loads a script from the network"
    readme = (results / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)]+)\)", readme)
    assert links and all((results / link).is_file() for link in links if not link.startswith("http")), links
    assert all(link.endswith(".png") for link in links if "/" in link and not link.startswith("http"))


def test_a_run_without_model_or_caches_writes_what_it_looked_at(tmp_path):
    """Offline with no caches: nothing is computed, every dataset says why it is missing."""
    from grade.studies.benchmark import BenchmarkConfig, run_benchmark

    config = BenchmarkConfig(model="smollm2-135m-instruct", datasets=["nowhere"], labels_dirs=[tmp_path],
                             cache_dir=tmp_path / "cache", offline=True)
    result = run_benchmark(config, lambda: pytest.fail("loaded offline"), lambda line: None)
    assert result.main == [] and "no labelled file" in result.datasets["nowhere"]["reason"]
    assert any("nothing was benchmarked" in note for note in result.notes)
