"""scripts/studies/lora_step_verifier.py: the LoRA step head reads each step where the shipped verifier does, its
adapters start as the identity and leave the reader as they found it, and the kept predictions score to the numbers
committed beside them."""

import json
import lzma
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "studies"))

pytestmark = pytest.mark.slow


def _rows(lm, n=2):
    import lora_step_verifier as L
    from grade.steps.real_errors import annotated_traces
    from grade.steps.scoring import step_paragraphs
    from grade.steps.verifier import step_scalars

    rows = []
    # the shortest few, one with an error and one without at least (training sees both classes)
    traces = sorted(annotated_traces(["gsm8k_qwen.a.jsonl"]), key=lambda t: len(t.trace))
    chosen = [next(t for t in traces if t.first_wrong is not None), next(t for t in traces if t.first_wrong is None)]
    for t in chosen[:n]:
        k = len(step_paragraphs(t.trace))
        rows.append({"id": t.id, "question": t.question, "trace": t.trace, "task": t.task, "first_wrong": t.first_wrong,
                     "paragraphs": step_paragraphs(t.trace),
                     "scalars": step_scalars([np.zeros(1)] * k, [[] for _ in range(k)])})
    L.prepare_all(lm, rows)
    return rows


def test_steps_are_read_where_the_verifier_reads_them(smollm):
    import torch

    from grade.steps.verifier import FEATURE_DEPTHS, step_features

    for r in _rows(smollm):
        with torch.no_grad():
            out = smollm.model.model(input_ids=torch.tensor([r["ids"]]), output_hidden_states=True)
        mine = out.hidden_states[-1][0, r["last"]].numpy()
        theirs = step_features(smollm, r["question"], r["trace"], task=r["task"]).hidden[:, FEATURE_DEPTHS.index(1.0)]
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(mine, theirs, atol=1e-3, rtol=1e-3)


def test_adapters_start_as_the_identity_and_are_removed(smollm):
    import torch

    import lora_step_verifier as L

    ids = torch.tensor([smollm.tokenizer("Two plus two is four.")["input_ids"]])
    before = [m for m in smollm.model.modules()]
    with torch.no_grad():
        base = smollm.model.model(input_ids=ids).last_hidden_state
    adapters = L.add_lora(smollm.model, 8, 16)
    try:
        assert len(adapters) == smollm.model.config.num_hidden_layers * len(L.TARGETS)
        smollm.model.eval()
        with torch.no_grad():
            same = smollm.model.model(input_ids=ids).last_hidden_state
            adapters[0].B.add_(1.0)  # a trained adapter changes the reading
            moved = smollm.model.model(input_ids=ids).last_hidden_state
        torch.testing.assert_close(same, base)
        assert not torch.allclose(moved, base)
    finally:
        L.remove_lora(smollm.model)
    assert [m for m in smollm.model.modules()] == before


def test_a_short_training_gives_one_probability_a_step_and_leaves_the_reader(smollm):
    import torch

    import lora_step_verifier as L

    rows = _rows(smollm)
    state = {k: v.clone() for k, v in smollm.model.state_dict().items()}
    probs = L.train_and_predict(smollm, dict(rank=4, alpha=8, lr=1e-3, head_lr=1e-2, epochs=1), rows, rows, seed=0,
                                max_tokens=1024, say=lambda m: None)
    assert [len(p) for p in probs] == [len(r["last"]) for r in rows]
    assert all(((p > 0) & (p < 1)).all() for p in probs)
    after = smollm.model.state_dict()
    assert set(after) == set(state) and all(torch.equal(after[k], v) for k, v in state.items())
    assert not smollm.model.training


def test_kept_predictions_score_to_the_committed_numbers():
    import lora_step_verifier as L

    if not (L.tsv.EXTERNAL / "mr_gsm8k.jsonl").is_file():
        pytest.skip("the external annotated traces are not here (scripts/studies/external_step_errors.py builds them)")
    committed = json.loads(lzma.decompress((L.RESULTS / f"lora_{L.READER}.json.xz").read_bytes()))
    # the committed thresholds on the kept test predictions: the committed point estimate (no bootstrap needed)
    rows = L.load_rows(L.tsv.EXTERNAL)
    _, test, _ = L.parts(rows)
    states = {s["variant"]: s for s in L.read_states(L.RESULTS / f"lora_{L.READER}_preds.json.xz")}
    best = committed["chosen"]
    v = L.StepVerifier(target="first")
    for k, x in committed["thresholds"][best].items():
        if k.startswith("threshold"):
            setattr(v, k, x)
    part = [r for r in test if r["level"] == "gsm8k"]
    m = L.tsv.metrics(v, [np.asarray(states[best]["test"][r["id"]]) for r in part], part, "known", 20)
    # the committed tables hold 4 significant digits
    assert m["f1"]["value"] == pytest.approx(committed["test"]["level gsm8k, known"][best]["f1"]["value"], rel=1e-3)
