"""The app's support package (studio/) without Streamlit: figures, token colours, projections, probes on disk."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from grade.common.errors import InputError, ModelLoadError, ProbeError
from studio import figures, projections, tokens, workflows
from studio.resources import (
    ModelRegistry,
    ModelSpec,
    default_probe,
    list_probes,
    load_probe,
    probe_probability,
    reference_set,
    store_uploaded_probe,
)


def _titled(fig) -> None:
    layout = fig.layout
    assert layout.title.text and layout.xaxis.title.text and layout.yaxis.title.text


def test_figures_have_titles_axis_labels_and_legends():
    rng = np.random.default_rng(0)
    eig = np.sort(rng.random(20))[::-1] ** 4
    eig[-3:] = 0  # zeros past the rank are dropped on a log axis, not plotted as -inf
    fig = figures.spectra_figure(eig, eig / 2, layer=3)
    _titled(fig)
    assert fig.layout.yaxis.type == "log" and len(fig.data[0].y) == 17
    fig = figures.naive_rank_figure(eig, eig, 2.5, 1.5, layer=3)
    _titled(fig)
    assert {"stable rank of C_h = 2.50", "stable rank of C_g = 1.50"} <= {t.name for t in fig.data}
    _titled(figures.stable_rank_layers_figure(rng.random(6), rng.random(6), layer=2))
    ratios, labels = rng.random((40, 6)), np.array([0, 1] * 20)
    fig = figures.rank_ratio_trend(rng.random(6), figures.reference_bands(ratios, labels))
    _titled(fig)
    assert {"answerable median", "unanswerable median", "this question"} <= {t.name for t in fig.data}
    fig = figures.projection_figure(rng.random((10, 2)), np.arange(10) % 2 == 0, np.arange(10) % 3 == 0, "map",
                                    current=np.zeros(2))
    assert fig.data[-1].name == "current question" and all(t.name for t in fig.data)
    _titled(figures.roc_figure([("p", np.array([0, 0.5, 1]), np.array([0, 0.8, 1]), 0.8)]))
    _titled(figures.step_ratio_heatmap(rng.random((3, 6)), ["a.", "b.", "c."], "steps", 0, 1))


def test_reference_bands_are_per_label_percentiles():
    ratios = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [10.0, 10.0]])
    bands = figures.reference_bands(ratios, np.array([1, 1, 1, 0]))
    np.testing.assert_allclose(bands[1][1], [3.0, 4.0])  # median of the answerable rows
    np.testing.assert_allclose(bands[0], [[10, 10]] * 3)


def test_naive_rank_depends_on_the_threshold():
    eig = np.array([1.0, 1e-3, 5e-5, 5e-6, 0.0])
    counts = figures.naive_rank_curve(eig, np.array([1e-4, 1e-5, 1e-7]))
    assert counts.tolist() == [2, 3, 4]


def test_token_scores_share_one_scale_across_traces():
    a = tokens.TokenScores(["x", "y"], np.array([[1.0, 2.0], [10.0, 0.0]]), [0, 0])
    b = tokens.TokenScores(["z"], np.array([[4.0], [5.0]]), [0])
    va, vb = tokens.shared_scale([a, b])
    # layer maxima over both traces: 4 and 10; token means: x (0.25+1)/2, y (0.5+0)/2, z (1+0.5)/2
    raw = np.array([0.625, 0.25, 0.75])
    np.testing.assert_allclose(np.concatenate([va, vb]), raw / raw.max())
    one_layer = tokens.shared_scale([a, b], layer=0)
    np.testing.assert_allclose(np.concatenate(one_layer), [0.25, 0.5, 1.0])
    html = tokens.token_html(a, va, raw=np.array([1.0, 2.0]))
    assert html.count("<span") == 2 and 'title="shock' in html and "[1]" in html


def test_token_html_escapes_text():
    trace = tokens.TokenScores(["<script>", "\n"], np.ones((1, 2)), [-1, -1])
    html = tokens.token_html(trace, np.array([0.5, 1.0]))
    assert "<script>" not in html and "&lt;script&gt;" in html and "<br>" in html


@pytest.mark.parametrize("method", ["t-SNE", pytest.param("UMAP", marks=pytest.mark.slow)])  # UMAP: numba JIT, slow
def test_projection_places_a_new_point_near_its_neighbours(method):
    rng = np.random.default_rng(0)
    a = rng.normal(0, 0.3, (30, 8))
    b = rng.normal(5, 0.3, (30, 8))
    X = np.vstack([a, b])
    emb = projections.embed(X, method, x_new=np.full(8, 5.0))
    assert emb.coords.shape == (60, 2)
    centre_a, centre_b = emb.coords[:30].mean(0), emb.coords[30:].mean(0)
    assert np.linalg.norm(emb.current - centre_b) < np.linalg.norm(emb.current - centre_a)


@pytest.mark.slow  # imports umap-learn (numba)
def test_umaps_compiled_functions_go_to_numbas_disk_cache():
    """A new process (each start of the app) loads umap-learn's compiled functions instead of compiling them again
    at its first UMAP projection."""
    from numba.core.caching import FunctionCache

    projections._umap()
    own = projections.umap_dispatchers()
    assert len(own) > 50 and all(isinstance(d._cache, FunctionCache) for d in own)


def test_projection_needs_enough_points():
    with pytest.raises(ValueError, match="at least 5"):
        projections.embed(np.zeros((3, 4)), "t-SNE")


def test_inputs_are_checked_with_clear_messages():
    with pytest.raises(InputError, match="empty"):
        workflows.check_inputs("  ", None)
    with pytest.raises(InputError, match="limit"):
        workflows.check_inputs("q" * (workflows.MAX_QUESTION_CHARS + 1), None)
    with pytest.raises(InputError, match="document"):
        workflows.check_inputs("q", "d" * (workflows.MAX_CONTEXT_CHARS + 1))
    assert workflows.check_inputs(" q ", "  ") == ("q", None)


def test_edited_steps_are_joined_back():
    assert workflows.join_steps(["Step one.", "Step two.\n", "", "#### 4"]) == "Step one. Step two.\n#### 4"


def _train_probe(tmp_path, model="smollm2-135m-instruct", loss="pre", name="p"):
    from grade.verdict.probe import Probe

    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 4))
    y = (X[:, 0] > 0).astype(int)
    probe = Probe("logreg", seed=0).fit(X, y, info={"model": model, "loss": loss, "srank": "paper",
                                                  "metrics": {"test": {"auroc": 0.9, "accuracy": 0.8}}})
    probe.save(tmp_path / name)
    return tmp_path / f"{name}.safetensors", X


def test_probes_on_disk_are_listed_chosen_and_loaded(tmp_path):
    path, X = _train_probe(tmp_path, name="a")
    _train_probe(tmp_path, loss="pos", name="b")
    (tmp_path / "broken.safetensors").write_bytes(b"x")  # no JSON: skipped by the listing
    probes = list_probes(tmp_path)
    assert sorted(p.name for p in probes) == ["a", "b"]
    chosen = default_probe("smollm2-135m-instruct", probes, loss="pre")
    assert chosen.path == path and chosen.auroc == 0.9
    assert default_probe("gemma-3-270m", probes) is None
    probe = load_probe(path)
    p = probe_probability(probe, X[0])
    assert p == pytest.approx(probe.predict_proba(X[:1])[0, 1])


def test_the_default_probe_follows_the_kind_of_question():
    """Qwen ships a general GRADE_pre probe and one trained on GSM8K only: GSM8K questions get the math probe,
    every other task the general one (never a probe trained for other tasks only)."""
    probes = list_probes()
    model = "qwen2.5-coder-1.5b-instruct"
    general = default_probe(model, probes, task="qa")
    math = default_probe(model, probes, task="gsm8k")
    assert general.name == f"{model}-pre" and not general.metadata.get("tasks")
    assert math.name == f"{model}-pre-math" and "gsm8k" in math.metadata["tasks"]
    assert default_probe(model, probes, task="math").name == f"{model}-pre"  # no MATH rows behind the math probe
    assert default_probe(model, probes, loss="pos", task="gsm8k").name == f"{model}-pos-math"
    assert default_probe("smollm2-135m-instruct", probes, task="gsm8k").name == "smollm2-135m-instruct-pre"


def test_a_corrupt_or_missing_probe_raises_probe_error(tmp_path):
    path, _ = _train_probe(tmp_path)
    path.write_bytes(b"garbage" * 20)
    with pytest.raises(ProbeError, match="corrupt"):
        load_probe(path)
    with pytest.raises(ProbeError, match="does not exist"):
        load_probe(tmp_path / "missing.safetensors")


def test_uploaded_probes_are_stored_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADE_CACHE_DIR", str(tmp_path / "cache"))
    path, X = _train_probe(tmp_path)
    stored = store_uploaded_probe(path.read_bytes(), path.with_suffix(".json").read_bytes(), "mine.safetensors")
    assert stored.name == "mine.safetensors" and stored.with_suffix(".json").exists()
    assert load_probe(stored).predict_proba(X[:2]).shape == (2, 2)


def test_reference_set_filters_model_and_loss():
    import pandas as pd

    frame = pd.DataFrame({
        "model": ["m", "m", "other"], "loss": ["pre", "pos", "pre"], "srank": ["paper"] * 3,
        "id": ["1", "2", "3"], "dataset": ["d"] * 3, "label": [1, 0, 1], "has_context": [True, False, False],
        "question": ["q1", "q2", "q3"], "rank_ratio": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]],
        "hidden_layer": [1, 1, 1], "hidden": [np.ones(3, np.float32)] * 3,
    })
    ref = reference_set(frame, "m", "pre")
    assert len(ref) == 1 and ref.ratios.tolist() == [[1.0, 2.0]] and ref.with_context.tolist() == [True]
    assert ref.hidden.shape == (1, 1, 3) and ref.hidden_layers == [1]
    assert reference_set(frame, "nobody", "pre") is None


@pytest.mark.slow
def test_model_registry_loads_once_and_does_not_remember_failures(tmp_path):
    calls = []

    def counting_loader(*args, **kwargs):
        import grade

        calls.append(args[0])
        return grade.load_model(*args, **kwargs)

    registry = ModelRegistry(capacity=1, loader=counting_loader)
    spec = ModelSpec("smollm2-135m-instruct")
    results = []
    threads = [threading.Thread(target=lambda: results.append(registry.get(spec))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and all(r is results[0] for r in results)
    bad = ModelSpec(str(tmp_path / "missing"))
    for _ in range(2):
        with pytest.raises(ModelLoadError):
            registry.get(bad)
    assert calls.count(str(tmp_path / "missing")) == 2  # a failure is retried, not cached
    assert registry.loaded() == [spec]


def test_model_output_is_shown_verbatim_not_as_markdown():
    from studio.session import plain

    assert plain("# Title *x* $5$ a_b\nnext") == "\\# Title \\*x\\* \\$5\\$ a\\_b  \nnext"


def test_home_examples_are_each_models_own_known_and_wrong_questions():
    """Home's per-model examples (scripts/build/build_examples.py) say what the model's labels say: every sampled
    answer right or none; Qwen has known and unknown ones, an easy capital among the known."""
    from pathlib import Path

    from grade.batch.features import read_labelled
    from studio.resources import model_examples

    root = Path(__file__).resolve().parents[1]
    qwen = model_examples("qwen2.5-coder-1.5b-instruct")
    assert any("knows" in e["label"] for e in qwen) and any("gets wrong" in e["label"] for e in qwen)
    assert "What is the capital of Kenya?" in [e["question"] for e in qwen]
    for model in ("smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-1.5b-instruct"):
        for example in model_examples(model):
            rows = {r["id"]: r for r in read_labelled(root / "data" / "labels" / model / f"{example['dataset']}.jsonl.xz")}
            row = rows[example["id"]]
            assert row["question"] == example["question"] and row["n_correct"] == example["n_correct"]
            assert row["accuracy"] == (1.0 if "knows" in example["label"] else 0.0)
            assert f"({row['n_correct']}/{row['n_samples']} sampled answers right)" in example["label"]
    assert model_examples("some-org/some-model") == []


def test_trace_problems_are_each_models_own_solved_and_failed_gsm8k_problems():
    """The Reasoning trace page offers the loaded model's own right and wrong GSM8K problems first
    (scripts/build/build_examples.py): their sample counts are those of the model's label file."""
    import json
    from pathlib import Path

    from grade.common.io import open_text
    from studio.resources import trace_examples

    model = "qwen2.5-coder-1.5b-instruct"
    problems = trace_examples(model)
    labels = Path(__file__).resolve().parents[1] / "data" / "labels" / model / "gsm8k.jsonl.xz"
    with open_text(labels) as f:
        rows = {r["id"]: r for r in map(json.loads, f)}
    assert {p["n_correct"] for p in problems} == {0, 5} and all(p["solution"] for p in problems)
    for p in problems:
        row = rows[p["id"]]
        assert (p["question"], p["n_correct"], p["answers"]) == (row["question"], row["n_correct"], row["answers"])
    assert trace_examples("some-org/some-model") == []
