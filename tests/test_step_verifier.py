"""The step verifier (grade.steps.verifier) and its training traces (grade.steps.real_errors), on the embedded
SmolLM2 and the annotated real traces."""

import json
import lzma

import numpy as np
import pytest

from grade.gradients.losses import split_steps
from grade.steps.real_errors import annotated_traces, held_out_problems, training_traces
from grade.steps.scoring import first_error_f1, first_error_metrics
from grade.steps.verifier import (FEATURE_DEPTHS, SCALARS, StepVerifier, TraceFeatures, shipped_verifier, step_features,
                                  verify_trace)

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def annotated():
    return annotated_traces()


@pytest.fixture(scope="module")
def small(annotated):
    """Four short dev traces, two with a first wrong step, two correct in every step."""
    dev = sorted((t for t in annotated if t.split == "dev"), key=lambda t: len(t.trace))
    wrong = [t for t in dev if t.first_wrong is not None][:2]
    right = [t for t in dev if t.first_wrong is None][:2]
    return wrong + right


@pytest.fixture(scope="module")
def features(smollm, small, one_torch_thread):
    return [step_features(smollm, t.question, t.trace) for t in small]


def test_annotations_split_by_problem(annotated):
    assert len(annotated) >= 470
    by_problem = {}
    for t in annotated:
        assert t.split in ("dev", "test")
        assert by_problem.setdefault(t.problem, t.split) == t.split  # one split per problem


def test_features_have_a_row_per_step(smollm, small, features):
    for t, f in zip(small, features):
        k = len(split_steps(t.trace))
        assert f.hidden.shape == (k, len(FEATURE_DEPTHS), smollm.model.config.hidden_size)
        assert f.scalars.shape == (k, len(SCALARS))
        assert np.isfinite(f.hidden).all() and np.isfinite(f.scalars).all()
        assert len(f.findings) == k
        # the cumulative check column never falls
        col = f.scalars[:, SCALARS.index("check_so_far")]
        assert (np.diff(col) >= 0).all()


def test_a_prefix_reads_the_same(smollm, small, features):
    """Causal: step k's features depend on the text up to step k only (the per-trace z-scores aside)."""
    t, f = small[0], features[0]
    spans = split_steps(t.trace)
    cut = t.trace[: spans[2][1]]
    g = step_features(smollm, t.question, cut)
    np.testing.assert_allclose(g.hidden[:2], f.hidden[:2], atol=1e-3)


def test_save_load_round_trip_is_exact(small, features, tmp_path):
    verifier = StepVerifier(layers=(3, 5), n_components=4, C=0.1).fit(features, [t.first_wrong for t in small])
    verifier.threshold = 0.37
    verifier.info = {"trained_on": "four traces"}
    verifier.save(tmp_path / "v")
    again = StepVerifier.load(tmp_path / "v.json")
    for f in features:
        assert np.array_equal(verifier.predict_proba(f), again.predict_proba(f))
    assert again.threshold == 0.37 and again.info["trained_on"] == "four traces"
    assert not (tmp_path / "v.json").read_text().count("pickle")
    # a weights file of another verifier is refused
    (tmp_path / "v.safetensors").write_bytes((tmp_path / "v.safetensors").read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(Exception, match="checksum"):
        StepVerifier.load(tmp_path / "v")


def test_the_localizer_spreads_the_wrongness_over_the_steps(small, features, tmp_path):
    """With the localizer the output sums to the logistic regression's largest p_k, its largest step is the
    listwise head's, the verdict is that step where the sum passes the threshold, and a file keeps both heads."""
    first = [t.first_wrong for t in small]
    plain = StepVerifier(layers=(3, 5), n_components=4, target="first").fit(features, first)
    verifier = StepVerifier(layers=(3, 5), n_components=4, target="first", localizer=True).fit(features, first)
    assert np.array_equal(plain.coef_, verifier.coef_)  # the same logistic regression beside the head
    for f, e in zip(features, first):
        P = verifier.predict_proba(f)
        assert P.shape == (f.n_steps,) and (P >= 0).all()
        assert P.sum() == pytest.approx(plain.predict_proba(f).max())
        X = verifier._design(*verifier._raw(f))
        assert int(np.argmax(P)) == int(np.argmax(X @ verifier.loc_coef_))
        assert verifier.suspect(P, threshold=P.sum() - 1e-9) == int(np.argmax(P))
        assert verifier.suspect(P, threshold=P.sum() + 1e-9) is None
        assert verifier.suspect(P, threshold=2.0, final_correct=False) == int(np.argmax(P))  # known wrong: a step
    # trained on two wrong traces, the head puts each one's first wrong step first
    for f, e in zip(features, first):
        if e is not None:
            assert int(np.argmax(verifier.predict_proba(f))) == e
    verifier.save(tmp_path / "v")
    again = StepVerifier.load(tmp_path / "v")
    assert again.localizer and all(np.array_equal(verifier.predict_proba(f), again.predict_proba(f)) for f in features)
    assert "localizer" not in json.loads(plain.save(tmp_path / "plain")[0].read_text())  # older files read as before
    with pytest.raises(ValueError, match="first"):
        StepVerifier(target="cumulative", localizer=True)


def test_threshold_none_and_first_over(small, features):
    verifier = StepVerifier(layers=(), C=1.0).fit(features, [t.first_wrong for t in small])
    p = np.array([0.1, 0.6, 0.4, 0.9])
    assert verifier.suspect(p, 0.95) is None
    assert verifier.suspect(p, 0.5) == 1  # the first over the threshold, not the largest
    assert verifier.suspect(p, 0.05) == 0
    assert list(verifier.step_scores(p)) == pytest.approx([0.1, 0.5, -0.2, 0.5])
    chosen = verifier.choose_threshold([p, np.array([0.2, 0.3])], [1, None])
    assert chosen["f1"] == 1.0 and 0.3 <= chosen["threshold"] < 0.6


def test_first_error_scores():
    m = first_error_f1([2, None, 1, None], [2, None, 0, 3])
    assert m["wrong_exact"] == pytest.approx(1 / 3) and m["none_acc"] == 1.0
    assert m["f1"] == pytest.approx(0.5)
    full = first_error_metrics([2, None, 1, None], [np.arange(4.0)[::-1]] * 4, [2, None, 0, 3], n_boot=200)
    assert full["n_wrong"] == 3 and full["n_correct"] == 1
    assert full["top1"]["value"] == pytest.approx(1 / 3)  # step 0 ranks first in each
    assert full["f1"]["chance"] < full["f1"]["value"]
    never_none = first_error_f1([0, 0], [0, None])
    assert never_none["f1"] == 0.0


def test_training_traces_never_touch_a_test_problem(annotated):
    labels = [json.loads(line) for line in lzma.open(ROOT / "data/labels/qwen2.5-coder-1.5b-instruct/gsm8k.jsonl.xz", "rt")]
    from grade.tasks.tasks import load_questions

    refs = [{"id": q.id, "question": q.question, "solution": q.solution} for q in load_questions("gsm8k")]
    train = training_traces(annotated, labels, refs, n_reference=200)
    banned = held_out_problems(annotated)
    assert banned and train
    assert not {t.problem for t in train} & banned
    for t in train[:50]:  # the injected step is where the text first differs from a clean trace
        assert 0 <= t.first_wrong < len(split_steps(t.trace))


def test_a_problem_banned_later_changes_no_other_training_trace(annotated):
    """A new annotation file's test problems leave every other injected trace as it was (its cached features
    stay valid): each trace has its own random generator."""
    import dataclasses

    labels = [json.loads(line) for line in lzma.open(ROOT / "data/labels/qwen2.5-coder-1.5b-instruct/gsm8k.jsonl.xz", "rt")]
    from grade.tasks.tasks import load_questions

    refs = [{"id": q.id, "question": q.question, "solution": q.solution} for q in load_questions("gsm8k")]
    before = training_traces(annotated, labels, refs, n_reference=150)
    newly = sorted({t.problem for t in before})[::7]  # problems some training traces come from
    extra = [dataclasses.replace(annotated[0], id=f"new:{p}", problem=p, split="test") for p in newly]
    after = training_traces(annotated + extra, labels, refs, n_reference=150)
    assert {t.problem for t in after}.isdisjoint(newly)
    assert after == [t for t in before if t.problem not in newly]


@pytest.mark.parametrize("name, task, n_flawed", [("gsm8k_written.jsonl", "gsm8k", 150), ("math_written.jsonl", "math", 80)])
def test_written_traces_mark_a_step_inside_the_marked_paragraph(name, task, n_flawed):
    """grade/datasets/real_step_errors/*_written: the step each mark became starts in the writer's paragraph, the
    flawed and correct traces of a problem share its split, and correct traces end on the gold answer."""
    from grade.steps.real_errors import annotation_rows
    from grade.steps.scoring import step_paragraphs
    from grade.tasks.tasks import Question, is_correct

    rows = annotation_rows(name)
    splits = {}
    for r in rows:
        assert r["dataset"] == task and splits.setdefault(r["problem"], r["split"]) == r["split"]
        if r["first_wrong_step"] is None:
            assert r["final_correct"] and is_correct(Question(id="", question="", answers=r["answers"], task=task), r["trace"])
            continue
        paragraphs = step_paragraphs(r["trace"])
        assert paragraphs[r["first_wrong_step"]] == r["first_wrong_paragraph"]
        assert r["first_wrong_text"] in r["trace"].split("\n\n")[r["first_wrong_paragraph"]]
    flawed = [r for r in rows if r["first_wrong_step"] is not None]
    assert len(flawed) >= n_flawed and {r["split"] for r in flawed} == {"dev", "test"}


def test_shipped_verifier_reads_a_trace(smollm, small, one_torch_thread):
    verifier = shipped_verifier("smollm2-135m-instruct")
    if verifier is None:
        pytest.skip("no verifier shipped for SmolLM2")
    assert verifier.info["never_trained_on"] and "measured" in verifier.info
    t = small[0]
    result = verify_trace(smollm, t.question, t.trace)
    k = len(split_steps(t.trace))
    assert len(result.step_probability) == k == len(result.step_texts)
    assert sorted(result.ranking) == list(range(1, k + 1))
    assert result.suspect_step is None or 1 <= result.suspect_step <= k
    assert result.measured["f1"]["value"] >= 0


def test_trace_features_file_round_trip(features, tmp_path):
    f = features[0]
    f.save(tmp_path / "f.npz")
    g = TraceFeatures.load(tmp_path / "f.npz")
    assert np.array_equal(g.scalars, f.scalars) and g.findings == f.findings
    np.testing.assert_allclose(g.hidden, f.hidden, rtol=1e-3, atol=1e-2)  # float16 on disk


def test_a_known_final_answer_decides_none_or_a_step(small, features):
    verifier = StepVerifier(layers=(), C=1.0).fit(features, [t.first_wrong for t in small])
    verifier.threshold, verifier.threshold_right = 0.5, 0.8
    p = np.array([0.1, 0.6, 0.4, 0.3])
    assert verifier.suspect(p) == 1  # unknown: the first over 0.5
    assert verifier.suspect(p, final_correct=True) is None  # right: nothing passes 0.8
    low = np.array([0.1, 0.2, 0.15])
    assert verifier.suspect(low) is None
    assert verifier.suspect(low, final_correct=False) == int(np.argmax(verifier.step_scores(low)))  # wrong: a step
    # chosen on traces with their final answers: the known rule never does worse there than the unknown one
    probs = [p, low, np.array([0.7, 0.9])]
    chosen = verifier.choose_threshold(probs, [1, 1, None], [False, False, True])
    assert chosen["known"]["f1"] >= chosen["f1"]
    assert verifier.suspect(probs[2], final_correct=True) is None


def test_known_final_threshold_survives_a_round_trip(small, features, tmp_path):
    verifier = StepVerifier(layers=(3,), n_components=2).fit(features, [t.first_wrong for t in small])
    verifier.threshold, verifier.threshold_right = 0.4, 0.9
    verifier.save(tmp_path / "v")
    again = StepVerifier.load(tmp_path / "v")
    assert (again.threshold, again.threshold_right) == (0.4, 0.9)


def test_reader_on_a_cpu_is_the_small_one():
    from grade.steps.verifier import CPU_READER, shipped_readers, verifier_reader

    if CPU_READER not in shipped_readers():
        pytest.skip("no CPU reader shipped")
    assert verifier_reader("qwen2.5-coder-1.5b-instruct", "cpu") == CPU_READER
    assert verifier_reader("gemma-3-270m", "cuda:0") == CPU_READER  # no verifier of its own
    if "qwen2.5-coder-1.5b-instruct" in shipped_readers():
        assert verifier_reader("Qwen/qwen2.5-coder-1.5b-instruct", "cuda:0") == "qwen2.5-coder-1.5b-instruct"


def test_compacted_features_give_the_same_verifier(smollm, small, features, tmp_path):
    """scripts/studies/compact_verifier_features.py: a verifier fitted on the projected states, unprojected, predicts on raw
    states what it predicted on projected ones (up to the float16 of the projected store)."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts" / "studies"))
    from compact_verifier_features import compact, load_compact, unproject
    from grade.steps.verifier import trace_key

    folder = tmp_path / "cache"
    folder.mkdir()
    rows = []
    for t, f in zip(small, features):
        key = trace_key("smollm2-135m-instruct", t.question, t.trace, t.task)
        f.save(folder / f"{key}.npz")
        rows.append({"key": key, "source": "annotated", "split": "dev"})
    (folder / "traces.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    compact(folder, tmp_path / "compact", [3, 5], 6)
    stored = load_compact(tmp_path / "compact")
    keys = [r["key"] for r in rows]
    for localizer in (False, True):  # the localizer's scores move by one constant per trace: its softmax does not
        projected = StepVerifier(layers=(3, 5), n_components=4, target="first", localizer=localizer).fit(
            [stored[k] for k in keys], [t.first_wrong for t in small])
        raw = unproject(projected, tmp_path / "compact" / "basis.npz")
        assert raw.components_.shape == (4, 2 * smollm.model.config.hidden_size)
        for k, f in zip(keys, features):
            np.testing.assert_allclose(raw.predict_proba(f), projected.predict_proba(stored[k]), atol=2e-3)


def test_completion_label_rules():
    from grade.steps.rollouts import first_without_success, no_return_step, rollout_first_wrong

    assert first_without_success([3, 0, 2, 0]) == 1 and first_without_success([1, 2]) is None
    assert no_return_step([3, 0, 2, 0, 0]) == 3  # the model recovers after step 1, not after step 3
    assert no_return_step([3, 0, 2]) is None  # a prefix that still reaches the answer: nothing wrong yet
    assert rollout_first_wrong([0, 0, 0]) == (False, None)  # never solved: says nothing about the steps
    assert rollout_first_wrong([2, 1, 0, 0]) == (True, 2)


@pytest.mark.slow
def test_completions_of_a_real_trace(smollm, one_torch_thread):
    """grade.steps.rollouts: one continuation per step of a real reply, counted against the gold answer."""
    from grade.steps.rollouts import rollout_labels

    rows = [json.loads(line) for line in lzma.open(ROOT / "data/labels/qwen2.5-coder-1.5b-instruct/gsm8k.jsonl.xz", "rt")]
    row = next(r for r in rows if r.get("label") == 1 and len(split_steps(r["majority"])) <= 8)
    trace = {"id": row["id"], "question": row["question"], "trace": row["majority"].strip(),
             "answers": row["answers"], "task": "gsm8k"}
    got = []
    labels = rollout_labels(smollm, [trace], n=1, max_new_tokens=8, prompts_per_batch=4, on_label=got.append)
    assert got == labels and len(labels) == 1
    k = len(split_steps(trace["trace"]))
    assert len(labels[0].successes) == k and all(s in (0, 1) for s in labels[0].successes)
    assert labels[0].successes[-1] == 1  # the whole correct reply, continued by nothing or a few tokens, is right


def test_chance_with_the_final_answer_known():
    # two erroneous traces of 4 steps (one ends wrong), one correct: the blind rule that reads the final answer
    m = first_error_metrics([0, 1, None], [np.zeros(4)] * 3, [0, 2, None], n_boot=50,
                            final_correct=[False, True, True])
    assert m["wrong_exact"]["chance"] == pytest.approx(0.5 * 0.25)
    assert m["none_acc"]["chance"] == 1.0
    assert m["f1"]["chance"] == pytest.approx(2 * 0.125 / 1.125)


def test_a_run_that_grades_its_traces_tells_the_verifier(smollm, small, one_torch_thread):
    """grade.traces.analysis.verify_item: a trace graded wrong always gets a suspect step; one cut at its token limit
    is read as if its final answer were not known (wrong may mean unfinished)."""
    from grade.traces.analysis import verify_item
    from grade.traces.sources import TraceItem

    t = next(x for x in small if x.first_wrong is None)
    base = dict(doc_id="d", sample=0, question=t.question, response=t.trace, task="gsm8k")
    wrong = verify_item(smollm, TraceItem(correct=False, **base), t.trace)
    unknown = verify_item(smollm, TraceItem(correct=None, **base), t.trace)
    cut = verify_item(smollm, TraceItem(correct=False, cut_off=True, **base), t.trace)
    assert wrong["verifier_suspect_step"] is not None
    assert wrong["step_verifier_probability"] == unknown["step_verifier_probability"]  # the same reading
    assert cut["verifier_suspect_step"] == unknown["verifier_suspect_step"]
    assert cut["verifier_threshold"] == unknown["verifier_threshold"]


@pytest.mark.slow
def test_grade_step_features_land_on_the_verifiers_steps(smollm, small, features, one_torch_thread):
    """scripts/studies/step_grade_features.py: the step-wise pos analysis of a real trace, one row per verifier step, and
    the six columns the --grade-features variants read from it (finite, within-trace z-scores)."""
    import sys

    import grade

    sys.path.insert(0, str(ROOT / "scripts" / "studies"))
    from step_grade_features import trace_grade_features
    from train_step_verifier import GRADE_COLUMNS, grade_columns

    t, f = small[0], features[0]
    row = trace_grade_features(smollm, t.question, t.trace, "gsm8k")
    assert row["steps"] == f.n_steps == len(row["ratios"]) == len(row["shock_max"])
    result = grade.analyze(smollm, t.question, task="gsm8k", loss="pos", response=t.trace, steps=True, spectra=False)
    own = [r for r in row["ratios"] if r is not None]
    assert len(own) == len(result.steps)  # every step with tokens of its own, in order
    for ratios, step in zip(own, result.steps):
        np.testing.assert_allclose(ratios, step.rank_ratio, rtol=1e-4, atol=1e-5)
    columns = grade_columns(row)
    assert columns.shape == (f.n_steps, len(GRADE_COLUMNS)) and np.isfinite(columns).all()
    assert abs(columns[:, GRADE_COLUMNS.index("rank_ratio_z")].mean()) < 1e-6


def test_grade_in_verifier_line_reads_the_measured_numbers():
    from studio.localization import WITH_GRADE, WITHOUT_GRADE, grade_in_verifier_line

    model = "qwen2.5-coder-1.5b-instruct"
    test = json.loads(lzma.open(ROOT / f"results/step_errors/{model}/verifier_{model}_grade_gsm8k.json.xz", "rt").read())["test"]
    line = grade_in_verifier_line(model)
    for name in (WITH_GRADE, WITHOUT_GRADE):
        assert f"{test[name]['f1']['value']:.2f} [{test[name]['f1']['low']:.2f}" in line
    assert f"chance {test[WITH_GRADE]['f1']['chance']:.2f}" in line
    assert grade_in_verifier_line("smollm2-135m-instruct") == ""  # not measured: nothing borrowed


def test_scores_by_paragraph(annotated):
    """A step counts for the blank-line paragraph it starts in; a paragraph ranks by its steps' highest score."""
    from grade.steps.scoring import by_paragraph, step_paragraphs

    t = next(t for t in annotated if t.first_wrong is not None and t.trace.count("\n\n") >= 2)
    spans = split_steps(t.trace)
    para = step_paragraphs(t.trace)
    assert len(para) == len(spans) and para[0] == 0 and (np.diff(para) >= 0).all()
    assert para[-1] == len([b for b in t.trace.strip().split("\n\n") if b.strip()]) - 1
    written = "Step 1: Read.\nThe price is $22.\n\nStep 2: Subtract.\nD = 22 - 16 = 6.\n \n#### 6"
    assert step_paragraphs(written).tolist() == [0, 0, 1, 1, 2]
    scores = np.zeros(len(spans))
    scores[t.first_wrong] = 1.0
    pred, sc, wrong = by_paragraph([t.first_wrong, None], [scores, scores], [t.first_wrong, None], [para, para])
    assert pred == [wrong[0], None] and wrong[1] is None
    assert int(np.argmax(sc[0])) == wrong[0] and len(sc[0]) == len(set(para.tolist()))
    m = first_error_metrics(pred, sc, wrong, n_boot=10)
    assert m["top1"]["value"] == 1.0 and m["f1"]["value"] == 1.0


@pytest.mark.parametrize("reader", ["smollm2-135m-instruct", "qwen2.5-coder-1.5b-instruct"])
def test_each_shipped_verifier_cites_other_models_traces_marked_by_people(reader):
    """The numbers a page cites beside a verifier's verdict, read from its file alone (the GPU reader's weights
    live in history): each protocol's and level's, measured on the external annotated test halves by paragraph,
    with intervals and chance; each protocol's threshold the one it applies; never a written or own trace."""
    info = json.loads((ROOT / f"grade/assets/step_verifier/{reader}.json").read_text())
    assert info["reader"] == reader and "test half" in info["never_trained_on"]
    assert "annotated by people" in info["traces_model"]
    for protocol, attr in (("unknown", "threshold"), ("known", "threshold_right")):
        cell = info["protocols"][protocol]
        assert cell["threshold"] == info[attr]
        for level in ("gsm8k", "math"):
            m = cell["measured"][level]
            assert f"external annotated test halves ({level} level), by paragraph" == m["data"]
            assert m["n_wrong"] > 250 and m["n_correct"] > 50
            for name in ("f1", "wrong_exact", "none_acc", "top1"):
                assert m[name]["low"] <= m[name]["value"] <= m[name]["high"] and 0 <= m[name]["chance"] <= 1
    assert info["measured"] == info["protocols"]["unknown"]["measured"]["gsm8k"]  # the key the pages read
    assert set(info["level_thresholds"]) == {"gsm8k", "math"}


# ------------------------------------------------------------------------------ the outcome rule


def test_the_outcome_rule_follows_what_is_known_of_the_final_answer():
    from grade.steps.outcome import PROTOCOLS, decide_outcome

    right = decide_outcome(response="4 pens cost 12 dollars, so the change is 20 - 12 = 8.\n#### 8", answers=["8"])
    wrong = decide_outcome(response="The change is 9 dollars.\n#### 9", answers=["8"])
    assert (right.final_correct, right.protocol) == (True, "known") and (wrong.final_correct, wrong.protocol) == (False, "known")
    assert decide_outcome(response="#### 9").protocol == "unknown"  # no gold answer
    assert decide_outcome(response="The answer is $\\boxed{\\frac{1}{2}}$.", answers=["1/2"], task="math").final_correct
    # the run's own grading wins over the gold answers; a reply cut at its limit is never judged
    assert decide_outcome(correct=False, response="#### 8", answers=["8"]).final_correct is False
    cut = decide_outcome(correct=False, cut_off=True)
    assert (cut.final_correct, cut.protocol) == (None, "unknown") and "token limit" in cut.reason
    assert set(PROTOCOLS) == {"unknown", "known"}


def test_the_outcome_picks_the_shipped_verifiers_threshold_and_the_numbers_it_cites():
    from grade.steps.outcome import decide_outcome
    from grade.steps.verifier import shipped_verifier

    verifier = shipped_verifier("smollm2-135m-instruct")
    unknown, right, wrong = (decide_outcome(), decide_outcome(correct=True), decide_outcome(correct=False))
    assert unknown.threshold(verifier) == verifier.threshold and right.threshold(verifier) == verifier.threshold_right
    assert wrong.threshold(verifier) is None  # the most suspect step, whatever its probability
    p = np.array([0.0, 0.0, 0.0])
    assert verifier.suspect(p, final_correct=wrong.final_correct) == 0 and verifier.suspect(p) is None
    protocols = verifier.info["protocols"]
    for outcome in (unknown, right):
        for level in ("gsm8k", "math"):
            cited = outcome.measured(verifier, level)
            assert cited == protocols[outcome.protocol]["measured"][level]
            assert cited["n_wrong"] > 50 and cited["n_correct"] > 50 and 0 <= cited["f1"]["value"] <= 1
            assert cited["f1"]["low"] <= cited["f1"]["value"] <= cited["f1"]["high"]
            assert "external annotated test halves" in cited["data"]
    assert protocols["unknown"]["threshold"] == verifier.threshold
    assert protocols["known"]["threshold"] == verifier.threshold_right
