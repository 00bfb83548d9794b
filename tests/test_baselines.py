"""Baselines (grade.verdict.detectors.baselines), the metrics (grade.common.metrics) and the benchmark's studies (grade.studies).

The estimators are checked against their definitions on arrays where the answer is known in closed
form; the model passes are checked on the embedded chat model (slow); the protocol is checked on
synthetic tables where the right answer is known (a perfect score, a useless score).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from grade.verdict.detectors import baselines as B


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small probes on a shared CPU: more threads only add contention."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------------------------------ estimators


def test_entropy_sum_of_uniform_and_peaked_distributions():
    import torch

    vocab = 50
    uniform = torch.zeros(3, vocab)
    assert B.entropy_sum(uniform) == pytest.approx(3 * math.log(vocab))
    peaked = torch.full((2, vocab), -1e4)
    peaked[:, 0] = 0
    assert B.entropy_sum(peaked) == pytest.approx(0.0, abs=1e-9)


def _coe_by_loops(h):
    L = len(h) - 1

    def ang(a, b):
        return math.acos(max(-1.0, min(1.0, float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))))

    M = [np.linalg.norm(h[l + 1] - h[l]) / np.linalg.norm(h[L] - h[0]) for l in range(L)]
    A = [ang(h[l + 1], h[l]) / ang(h[L], h[0]) for l in range(L)]
    r = np.mean(M) - np.mean(A)
    c = math.hypot(np.mean([m * math.cos(a) for m, a in zip(M, A)]), np.mean([m * math.sin(a) for m, a in zip(M, A)]))
    return r, c


def test_coe_matches_the_definition_written_as_loops():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(9, 16)).cumsum(axis=0)
    r, c = B.coe_scores(h)
    r_ref, c_ref = _coe_by_loops(h)
    assert r == pytest.approx(r_ref, rel=1e-9)
    assert c == pytest.approx(c_ref, rel=1e-9)


def test_coe_of_a_constant_rotation():
    # h_l on a circle, turning by theta per layer: every chord is sin(theta/2)/sin(L theta/2) of the
    # end-to-end chord and every angle 1/L of the total, so CoE-R = M - 1/L and CoE-C = M
    L, theta = 4, 0.3
    h = np.stack([[math.cos(theta * l), math.sin(theta * l), 0.0] for l in range(L + 1)])
    m = math.sin(theta / 2) / math.sin(L * theta / 2)
    r, c = B.coe_scores(h)
    assert r == pytest.approx(m - 1 / L, rel=1e-9)
    assert c == pytest.approx(m, rel=1e-9)


def test_eigenscore_definition_and_direction():
    rng = np.random.default_rng(1)
    base = rng.normal(size=32)
    same = np.stack([base] * 10)
    spread = rng.normal(size=(10, 32))
    # identical embeddings: C = z zᵀ for every pair (z = base centred over its own dimension), rank one:
    # singular values K|z|² + a once and a (K-1) times
    z = base - base.mean()
    expected_same = (math.log10(10 * z @ z + 1e-3) + 9 * math.log10(1e-3)) / 10
    assert B.eigenscore(same, alpha=1e-3) == pytest.approx(expected_same, rel=1e-9)
    # literal definition on the spread set: J_d centring, then mean log10 svdvals(C + aI)
    J = np.eye(32) - np.ones((32, 32)) / 32
    C = spread @ J @ spread.T
    expected = np.mean(np.log10(np.linalg.svd(C + 1e-3 * np.eye(10), compute_uv=False)))
    assert B.eigenscore(spread) == pytest.approx(expected, rel=1e-9)
    assert B.eigenscore(spread) > B.eigenscore(same)  # more diverse samples = more hallucination


def test_self_consistency_is_the_majority_share():
    assert B.self_consistency(["a", "a", "b", "a"]) == 0.75
    assert B.self_consistency(["x"] * 10) == 1.0
    assert math.isnan(B.self_consistency([]))


def test_internal_confidence_weights():
    w_layer, w_tok = B.ic_weights(31, 6)
    assert w_layer.sum() == pytest.approx(1) and w_tok.sum() == pytest.approx(1)
    assert w_layer.argmax() == 30 and w_tok.argmax() == 5
    assert w_layer[29] / w_layer[30] == pytest.approx(math.exp(-1))
    assert B.internal_confidence(np.full((6, 31), 0.3)) == pytest.approx(0.3)
    p = np.zeros((6, 31))
    p[-1, -1] = 1.0  # only the last token at the last layer says Yes
    assert B.internal_confidence(p) == pytest.approx(w_layer[-1] * w_tok[-1])


def test_self_consistency_counts_only_samples_with_an_answer():
    assert B.self_consistency([None, None, "a"]) == pytest.approx(1 / 3)
    assert B.self_consistency([None, None]) == 0.0  # no answer agrees with nothing


def test_baseline_answer_length_is_the_tasks():
    from grade.tasks.tasks import PROMPT_ONLY_TASKS, TASKS, answer_format

    config = B.BaselineConfig()
    for task in list(TASKS) + list(PROMPT_ONLY_TASKS):
        assert config.new_tokens(task) == answer_format(task).max_new_tokens
    assert B.BaselineConfig(max_new_tokens={"qa": 7}).new_tokens("qa") == 7


def test_vector_codec_roundtrip():
    x = np.linspace(-3, 3, 100).astype(np.float32)
    y = B.decode_vector(B.encode_vector(x))
    assert y.shape == x.shape and np.allclose(x, y, atol=2e-3)


# ------------------------------------------------------------------------------------------ with a model


@pytest.fixture(scope="module")
def smol(smollm):
    """The session's SmolLM2 (tests/conftest.py), loaded once per run rather than once more for this module."""
    return smollm


@pytest.mark.slow
def test_prompt_variants(smol):
    item = {"id": "x", "question": "What is the capital of France?", "task": "qa"}
    original = B.task_prompt(smol, item)
    reworded = B.task_prompt(smol, item, "reworded")
    irrelevant = B.task_prompt(smol, item, "irrelevant")
    assert B.REWORDED_INSTRUCTIONS["qa"] in reworded and B.REWORDED_INSTRUCTIONS["qa"] not in original
    assert B.IRRELEVANT_TEXT in irrelevant and "capital of France" in irrelevant
    with pytest.raises(Exception):
        B.task_prompt(smol, item, "shouted")
    assert "Reply only Yes or No" in B.ic_prompt(smol, item)


@pytest.mark.slow
def test_answer_states_are_the_decoders_and_p_entropy_runs_entropy_sum(smol, monkeypatch):
    """The states and entropies of the answer pass are those of the decoding steps: checked against
    a plain forward pass over prompt + answer; P-Entropy is computed by the tested entropy_sum."""
    import torch

    from grade.models.generation import encode_prompt, generate, settings_for_task

    item = {"id": "x", "question": "What is the capital of France?", "task": "qa"}
    ids = encode_prompt(smol.tokenizer, B.task_prompt(smol, item))
    (answer,), = generate(smol, [ids], settings_for_task("qa"))
    passes = B.answer_states(smol, ids, [answer], entropies=True)
    n = len(answer.answer_ids)
    assert passes.states[0].shape == (n, smol.n_layers + 1, smol.model.config.hidden_size)
    assert passes.prompt_states.shape == (smol.n_layers + 1, smol.model.config.hidden_size)
    with torch.no_grad():
        full = smol.model(input_ids=torch.tensor([ids + answer.token_ids]), output_hidden_states=True)
    plain = torch.stack(full.hidden_states, dim=2)[0].float().numpy()  # (T, L+1, d)
    np.testing.assert_allclose(passes.states[0], plain[len(ids): len(ids) + n], atol=2e-3, rtol=1e-3)
    steps = full.logits[0, len(ids) - 1: len(ids) - 1 + answer.steps]
    assert passes.entropies[0] == pytest.approx(B.entropy_sum(steps), rel=1e-4)

    calls = []
    monkeypatch.setattr(B, "entropy_sum", lambda logits: calls.append(len(logits)) or 0.0)
    record = B.score_question(smol, item, config=B.BaselineConfig(n_samples=2), parts=("answer",))
    assert sum(calls) == answer.steps and record["p_entropy"] == 0.0


@pytest.mark.slow
def test_a_kept_prompt_pass_gives_the_detectors_the_same_statistics_in_one_pass(smol):
    """Home's detectors start from the GRADE pre analysis' own prompt pass: the same statistics bit for bit
    as a pass of their own, with one model pass (the answer's) instead of two, as often as it is used (a pass
    grows the cache it is given), and the kept pass is never written with the result."""
    import grade
    from grade.models.generation import encode_prompt, greedy_answer

    question = "What is the capital of France?"
    result = grade.analyze(smol, question, task="qa", loss="pre", keep_prompt_pass=True)
    assert result.prompt_pass is not None and "prompt_pass" not in result.to_dict()
    assert grade.GradeResult.from_dict(result.to_dict()).prompt_pass is None
    ids = encode_prompt(smol.tokenizer, result.prompt)
    answer = greedy_answer(smol, ids, task="qa")
    calls = []
    handle = smol.model.register_forward_hook(lambda *args: calls.append(1))
    try:
        own = B.answer_statistics(smol, ids, answer)
        passes_own = len(calls)
        shared = [B.answer_statistics(smol, ids, answer, prompt_pass=result.prompt_pass) for _ in range(2)]
    finally:
        handle.remove()
    assert passes_own == 2 and len(calls) == passes_own + 2
    assert shared[0] == own and shared[1] == own
    assert grade.analyze(smol, question, task="qa", loss="pos", response="Paris.",
                         keep_prompt_pass=True).prompt_pass is None  # pos reads the response too: no prompt pass


@pytest.mark.slow
def test_sampled_baseline_answers_are_seeded(smol):
    from grade.models.generation import DecodeSettings, encode_prompt, generate

    item = {"id": "x", "question": "What is the capital of France?", "task": "qa"}
    ids = encode_prompt(smol.tokenizer, B.task_prompt(smol, item))
    config = B.BaselineConfig()
    settings = DecodeSettings(6, temperature=config.temperature, top_p=config.top_p, top_k=config.top_k)
    a = generate(smol, [ids], settings, [[1, 2, 3]])[0]
    b = generate(smol, [ids], settings, [[1, 2, 3]])[0]
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    last = B.answer_states(smol, ids, a, layer=15).states
    assert all(s.ndim == 2 and s.shape[1] == smol.model.config.hidden_size for s in last)


@pytest.mark.slow
def test_score_question_and_resumable_cache(smol, tmp_path):
    config = B.BaselineConfig(n_samples=3)
    items = [
        {"id": "q1", "question": "What is the capital of France?", "task": "qa", "dataset": "t"},
        {"id": "q2", "question": "Which animal is a mammal?", "task": "mmlu", "dataset": "t",
         "choices": ["shark", "whale", "trout", "eel"]},
    ]
    path = tmp_path / "cache.jsonl"
    done = B.score_items(smol, items[:1], path, config=config)
    assert set(done) == {"q1"}
    record = done["q1"]
    for key in B.SCORE_KEYS.values():
        assert np.isfinite(record[key]), key
    assert 0 <= record["ic"] <= 1 and record["judge"] in (0.0, 1.0)
    assert record["p_entropy"] <= 0 and len(record["sample_keys"]) == 3
    assert "paris" in record["greedy_answer"].lower()
    assert B.decode_vector(record["saplma_hidden"]).shape == (smol.model.config.hidden_size,)
    # a rerun scores only the new question and keeps the old record
    calls = []
    done = B.score_items(smol, items, path, config=config, progress=lambda i, n, r: calls.append(r["id"]))
    assert calls == ["q2"] and set(done) == {"q1", "q2"}
    assert done["q2"]["sample_keys"][0] in {"A", "B", "C", "D", None}
    with open(path, "a") as fh:  # an interrupted write leaves half a line: it is ignored
        fh.write('{"id": "q3", "dataset"')
    assert set(B.read_cache(path)) == {"q1", "q2"}


# ------------------------------------------------------------------------------------------ protocol

from grade.common import metrics as M  # noqa: E402
from grade import studies as E  # noqa: E402


def test_auroc_matches_scikit_learn_with_ties():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 200)
    s = np.round(rng.normal(size=200) + y, 1)  # rounded: many ties
    assert M.auroc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert math.isnan(M.auroc(np.ones(5), np.arange(5)))


def test_bootstrap_interval_contains_the_estimate_and_narrows_with_more_data():
    rng = np.random.default_rng(4)

    def width(n):
        y = np.repeat([0, 1], n)
        s = rng.normal(size=2 * n) + 0.8 * y
        lo, hi = M.bootstrap_ci(y, s, M.auroc, n_boot=300, seed=1)
        assert lo <= M.auroc(y, s) <= hi
        return hi - lo

    assert width(400) < width(20)


def test_best_threshold_separates_separable_scores():
    y = np.array([0, 0, 0, 1, 1])
    s = np.array([0.1, 0.2, 0.3, 0.7, 0.9])
    t = M.best_threshold(y, s)
    assert 0.3 < t < 0.7
    assert M.best_threshold(np.ones(3, int), np.array([1.0, 2.0, 3.0])) < 1.0  # all answerable


def _synthetic_table(name, n=120, informative=True, seed=0):
    """A table whose GRADE array and scores carry the label (or not): the protocol must find it."""
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], n // 2)
    signal = (y - 0.5) * (2.0 if informative else 0.0)
    grade_pre = rng.normal(size=(n, 6)) + signal[:, None] * np.linspace(0.2, 1.0, 6)
    split = E.assign_splits([f"{name}{i}" for i in range(n)], y, E.Protocol())
    table = E.Table(name, "original", np.array([f"{name}{i}" for i in range(n)], dtype=object), y, split)
    table.grade = {"pre": grade_pre, "srank_g_pre": np.abs(grade_pre) + 1, "srank_h_pre": np.ones((n, 6))}
    table.scores = {"P-Entropy": signal + rng.normal(size=n), "Judge": (rng.random(n) < 0.5).astype(float),
                    "IC": rng.normal(size=n)}
    table.align = {3: rng.normal(size=(n, 8)) + signal[:, None]}
    table.saplma = rng.normal(size=(n, 8)) + signal[:, None]
    table.confidently_wrong = (y == 0) & (rng.random(n) < 0.3)
    return table


@pytest.mark.slow
def test_protocol_finds_signal_and_reports_no_signal_honestly():
    protocol = E.Protocol(n_boot=200, probe_epochs=30)
    tables = {"good": _synthetic_table("good"), "noise": _synthetic_table("noise", informative=False, seed=1)}
    rows, fitted = E.main_table(tables, protocol)
    cell = {(r["dataset"], r["method"]): r for r in rows}
    assert cell[("good", "GRADE_pre")]["auroc"] > 0.85
    assert cell[("good", "Align-P")]["auroc"] > 0.85 and cell[("good", "SAPLMA")]["auroc"] > 0.85
    assert cell[("good", "P-Entropy")]["auroc"] > 0.75
    assert 0.25 < cell[("good", "IC")]["auroc"] < 0.75  # a random score stays near chance
    assert math.isnan(cell[("good", "Judge")]["auroc"])  # accuracy only
    assert cell[("noise", "GRADE_pre")]["auroc_lo"] < 0.5 < cell[("noise", "GRADE_pre")]["auroc_hi"] + 1e-9
    assert ("good", "GRADE_pos") not in cell  # no pos features: no row rather than a made-up one
    assert cell[("good", "GRADE_pre")]["n"] == int((tables["good"].split == "test").sum())

    transfer = E.transfer_matrix(tables, fitted, protocol)
    pairs = {(r["method"], r["train"], r["test"]): r["auroc"] for r in transfer}
    assert pairs[("GRADE_pre", "good", "good")] == pytest.approx(cell[("good", "GRADE_pre")]["auroc"])
    assert ("GRADE_pre", "good", "noise") in pairs

    ablations = E.ablations(tables, protocol)
    kinds = {r["variant"] for r in ablations}
    assert any(k.startswith("threshold on the mean") for k in kinds) and any("srank(C_g)" in k for k in kinds)
    cw = E.confidently_wrong_study(tables, fitted, protocol)
    pooled = [r for r in cw if r["dataset"] == "all" and r["method"] == "GRADE_pre"][0]
    assert pooled["n"] == sum(int(t.confidently_wrong[t.rows("test")].sum()) for t in tables.values())


def test_robustness_is_zero_change_for_an_unchanged_input_and_negative_for_noise():
    protocol = E.Protocol(n_boot=50, probe_epochs=30)
    table = _synthetic_table("good")
    _, fitted = E.main_table({"good": table}, protocol)
    test = table.rows("test")
    same = E.Table("good", "reworded", table.ids[test], table.y[test], np.array(["test"] * len(test), dtype=object),
                   grade={k: v[test] for k, v in table.grade.items()},
                   scores={k: v[test] for k, v in table.scores.items()})
    noisy = E.Table("good", "irrelevant", table.ids[test], table.y[test], np.array(["test"] * len(test), dtype=object),
                    grade={k: np.random.default_rng(9).normal(size=v[test].shape) for k, v in table.grade.items()})
    rows = E.robustness({"good": table}, {("good", "reworded"): same, ("good", "irrelevant"): noisy}, fitted, protocol)
    by = {(r["variant"], r["method"]): r for r in rows}
    assert by[("reworded", "GRADE_pre")]["auroc_rel_change"] == pytest.approx(0.0)
    assert by[("irrelevant", "GRADE_pre")]["auroc_rel_change"] < 0
    assert ("irrelevant", "P-Entropy") not in by  # not computed for that variant: left out


@pytest.mark.slow
def test_results_roundtrip_through_files(tmp_path):
    protocol = E.Protocol(n_boot=50, probe_epochs=10)
    tables = {"good": _synthetic_table("good")}
    result = E.run_studies("m", tables, {}, {"good": {"eligible": True}}, protocol, notes=["a note"],
                             studies=("transfer",))
    from grade.studies.benchmark import write_results
    from grade.studies.report import figures

    written = write_results(result, tmp_path, figures=True)
    again = E.BenchmarkResult.load(tmp_path)
    assert [r["method"] for r in again.main] == [r["method"] for r in result.main]
    assert again.main[0]["auroc"] == pytest.approx(result.main[0]["auroc"], abs=1e-4)
    assert again.notes == ["a note"]
    md = (tmp_path / "main_table.md").read_text()
    assert f"{result.main[0]['auroc']:.3f}" in md
    # figures are PNG files (where Kaleido finds a browser) and never HTML that needs a CDN
    assert not list(tmp_path.glob("*.html"))
    assert all(p.suffix != ".html" for p in written)
    assert {"auroc_bars", "transfer_heatmap"} <= set(figures(again))
    with pytest.raises(Exception):
        E.BenchmarkResult.load(tmp_path / "nothing")


def test_pooled_sources_become_their_own_transfer_tables():
    protocol = E.Protocol(n_boot=50, probe_epochs=10)
    table = _synthetic_table("pool")
    table.source = np.array(["a" if i % 2 else "b" for i in range(len(table.y))], dtype=object)
    sources = E.source_tables({"pool": table}, protocol)
    assert set(sources) == {"pool:a", "pool:b"}
    assert len(sources["pool:a"].y) == int((table.source == "a").sum())
    result = E.run_studies("m", {"pool": table}, {}, {}, protocol, studies=("transfer",))
    between = [r for r in result.transfer if r.get("between_sources")]
    assert {(r["train"], r["test"]) for r in between if r["method"] == "GRADE_pre"} == {
        ("pool:a", "pool:a"), ("pool:a", "pool:b"), ("pool:b", "pool:a"), ("pool:b", "pool:b")}
    assert any("exploratory" in note for note in result.notes)


def test_benchmarks_page_renders_results_and_an_empty_run(tmp_path, monkeypatch):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    protocol = E.Protocol(n_boot=50, probe_epochs=10)
    good = _synthetic_table("good")
    halves = E.length_halves(good, np.arange(len(good.y)) % 5, protocol)[:2]
    result = E.run_studies("model-a", {"good": good}, {}, {"good": {"eligible": True}}, protocol,
                             studies=("transfer", "ablations", "conditions"), condition_pairs={"short/long": halves})
    result.save(tmp_path / "model-a")
    empty = E.BenchmarkResult("model-b", {}, {"x": {"eligible": False, "reason": "too few"}}, [], [], [], [], [], [])
    empty.save(tmp_path / "model-b")
    monkeypatch.setenv("GRADE_RESULTS_DIR", str(tmp_path))
    page = Path(__file__).resolve().parent.parent / "pages" / "benchmarks.py"
    at = AppTest.from_file(str(page), default_timeout=120)
    at.session_state["benchmark_section"] = "Conditions"  # the page builds the open tab only
    at.run()
    assert not at.exception
    assert at.selectbox[0].value == "model-a"  # a run with a table comes first
    assert len(at.dataframe) >= 2
    from grade.common.display import column_title

    # the conditions' table: each row's training condition under the page's column title
    assert any("good:short" in str(df.value.get(column_title("train"), "")) for df in at.dataframe
               if hasattr(df.value, "get"))
    at.selectbox[0].select("model-b").run()
    assert not at.exception and any("No method" in i.value for i in at.info)


def test_condition_study_tests_unseen_questions_both_ways_and_sees_a_flip():
    """Same questions under two conditions: a detector trained under one is tested on every question
    of the other it did not train on; a label relation that flips between conditions shows as AUROC < 0.5."""
    protocol = E.Protocol(n_boot=50, probe_epochs=30)
    with_doc = _synthetic_table("q")
    same = _synthetic_table("q", seed=3)  # same ids, same direction of the signal
    flipped = _synthetic_table("q", seed=4)
    flipped.grade = {k: -v for k, v in flipped.grade.items()}
    flipped.align = {k: -v for k, v in flipped.align.items()}
    flipped.saplma = -flipped.saplma
    same.dataset, flipped.dataset = "q_same", "q_flipped"

    rows = E.condition_transfer("doc", with_doc, same, protocol)
    by = {(r["method"], r["train"], r["test"]): r for r in rows}
    seen = set(with_doc.ids[with_doc.rows(("train", "val"))])
    cross = by[("GRADE_pre", "q", "q_same")]
    assert cross["n"] == sum(i not in seen for i in same.ids) and cross["auroc"] > 0.8
    assert by[("GRADE_pre", "q", "q")]["n"] == len(with_doc.rows("test"))
    assert ("Align-P", "q_same", "q") in by and all(r["study"] == "doc" for r in rows)

    flip = {(r["method"], r["train"], r["test"]): r["auroc"] for r in E.condition_transfer("doc", with_doc, flipped, protocol)}
    assert flip[("GRADE_pre", "q", "q_flipped")] < 0.2 and flip[("Align-P", "q", "q_flipped")] < 0.2


def test_length_halves_split_at_the_median_and_roundtrip(tmp_path):
    protocol = E.Protocol(n_boot=50, probe_epochs=10)
    table = _synthetic_table("h")
    lengths = np.arange(len(table.y)) % 7 * 100.0
    short, long, median = E.length_halves(table, lengths, protocol)
    assert median == np.median(lengths)
    assert len(short.y) == int((lengths <= median).sum()) and len(long.y) == int((lengths > median).sum())
    assert set(short.ids).isdisjoint(long.ids) and set(short.split) == {"train", "val", "test"}
    result = E.run_studies("m", {"h": table}, {}, {}, protocol, studies=("conditions",),
                           condition_pairs={"short/long": (short, long)})
    assert {(r["train"], r["test"]) for r in result.conditions if r["method"] == "GRADE_pre"} == {
        ("h:short", "h:short"), ("h:short", "h:long"), ("h:long", "h:long"), ("h:long", "h:short")}
    result.save(tmp_path)
    again = E.BenchmarkResult.load(tmp_path)
    assert len(again.conditions) == len(result.conditions)
    assert again.conditions[0]["auroc"] == pytest.approx(result.conditions[0]["auroc"], abs=1e-4)


def _restored_caches(tmp_path, model: str = "smollm2-135m-instruct"):
    """The benchmark caches behind results/ (kept out of the tracked tree), taken from the repository's
    history into ``tmp_path`` as scripts/build/restore_benchmark_caches.sh does (its first commit: SmolLM2's
    and Gemma's caches); None without that history."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    script = (root / "scripts" / "build" / "restore_benchmark_caches.sh").read_text()
    commit = next(line.split()[1] for line in script.splitlines() if line.startswith("restore ") and "$" not in line.split()[1])
    paths = [f"data/benchmark/{model}/features", f"data/benchmark/{model}/baselines"]
    archive = subprocess.run(["git", "archive", commit, *paths], cwd=root, capture_output=True)
    if archive.returncode:
        return None
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    return tmp_path / "data" / "benchmark"


@pytest.mark.slow
def test_document_studies_regenerate_offline_from_the_committed_caches(tmp_path):
    """The with/without-document and short/long studies of results/ from the caches of git history
    (HotpotQA with and without its paragraphs), no model loaded; ``--studies conditions``: those condition studies
    and the main table only, and the other studies' tables empty."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    cache = _restored_caches(tmp_path)
    if cache is None:
        pytest.skip("the benchmark caches are not in this clone's history (a shallow clone?)")
    labels = root / "data" / "labels" / "smollm2-135m-instruct"
    out = tmp_path / "documents"
    done = subprocess.run(
        [sys.executable, "-m", "grade", "benchmark", "--model", "smollm2-135m-instruct", "--offline",
         "--cache-dir", str(cache), "--datasets", f"hotpotqa={labels / 'hotpotqa_context.jsonl.xz'}",
         f"hotpotqa_closed={labels / 'hotpotqa.jsonl.xz'}",
         "--document-pair", "hotpotqa", "hotpotqa_closed", "--length-split", "hotpotqa",
         "--variants", "none", "--studies", "conditions", "--n-boot", "50", "--no-figures", "--out", str(out)],
        cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = E.BenchmarkResult.load(out)
    assert [r["dataset"] for r in result.main if r["method"] == "GRADE_pre"] == ["hotpotqa"]
    assert "used in the with/without-document study only" in result.datasets["hotpotqa_closed"]["reason"]
    pairs = {(r["study"], r["train"], r["test"]) for r in result.conditions if r["method"] == "GRADE_pre"}
    assert ("with/without document", "hotpotqa", "hotpotqa_closed") in pairs
    assert ("with/without document", "hotpotqa_closed", "hotpotqa") in pairs
    assert ("short/long (hotpotqa)", "hotpotqa:short", "hotpotqa:long") in pairs
    assert not result.ablations and not result.transfer and not result.robustness and not result.confidently_wrong
    closed = [r for r in result.conditions if r["test"] == "hotpotqa_closed" and r["train"] == "hotpotqa"][0]
    assert closed["n"] > result.datasets["hotpotqa_closed"]["split"]["test"]["n"]  # every unseen question, not a split


def test_caps_per_dataset():
    from grade.commands.benchmark import parse_caps
    from grade.common.errors import InputError

    assert parse_caps(["60", "mmlu=250"]) == (60, {"mmlu": 250})
    assert parse_caps(None) == (None, {})
    for bad in (["sixty"], ["mmlu=0"], ["mmlu="]):
        with pytest.raises(InputError, match="max-per-class"):
            parse_caps(bad)

    rows = [{"id": f"q{i}", "label": int(i < 40)} for i in range(200)]  # 40 answerable, 160 unanswerable
    protocol = E.Protocol(max_per_class=10, max_per_class_by_dataset={"mmlu": 100})
    kept, info = E.select_rows(rows, protocol, "mmlu")
    assert sum(r["label"] for r in kept) == 40 and len(kept) == 140 and info["eligible"]
    kept, _ = E.select_rows(rows, protocol, "triviaqa")
    assert len(kept) == 20
    assert E.select_rows(rows, protocol, "triviaqa")[0] == kept  # seeded


def test_length_alone_is_a_row_of_every_table():
    """Length_pre (prompt tokens of the GRADE_pre store) is scored beside every method, its direction fitted
    on train: here shorter questions are the answerable ones, so its test AUROC is that of -n_tokens."""
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 120
    y = (np.arange(n) % 2).astype(int)
    n_tokens = np.where(y == 1, rng.integers(10, 40, n), rng.integers(30, 60, n))
    rows = [{"id": f"q{i}", "label": int(y[i]), "question": f"question {i}"} for i in range(n)]
    frame = pd.DataFrame({"id": [r["id"] for r in rows], "n_tokens": n_tokens,
                          "rank_ratio": [rng.normal(size=4) for _ in range(n)],
                          "srank_g": [rng.random(4) for _ in range(n)], "srank_h": [rng.random(4) for _ in range(n)]})
    split = E.assign_splits([r["id"] for r in rows], y, E.Protocol(n_boot=20))
    table = E.build_table("d", "original", rows, split, features={"pre": frame}, baseline_cache=None)
    assert np.array_equal(table.scores["Length_pre"], n_tokens.astype(float))
    main, _ = E.main_table({"d": table}, E.Protocol(n_boot=20), methods=("Length_pre",))
    test = table.rows("test")
    assert [r["method"] for r in main] == ["Length_pre"]
    assert main[0]["auroc"] == pytest.approx(M.auroc(y[test], -n_tokens[test].astype(float)))
    assert main[0]["auroc"] > 0.8
