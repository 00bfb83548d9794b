"""The one decoding path (grade.models.generation): labels reproduce, greedy is argmax, stop rules, backends."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest
import torch

from grade.models.generation import DecodeSettings, encode_prompt, finish_row, generate, greedy_answer, settings_for_task

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _label_records(name: str, ids: list[str]) -> list[dict]:
    path = ROOT / "data" / "labels" / "smollm2-135m-instruct" / f"{name}.jsonl.xz"
    with lzma.open(path, "rt", encoding="utf-8") as handle:
        records = {r["id"]: r for r in map(json.loads, handle)}
    return [records[i] for i in ids]


@pytest.mark.slow
def test_committed_labels_are_reproduced_sample_for_sample(smollm):
    """Labels stay reproducible: the unified path draws the very samples of committed label files (an
    MMLU file labelled on a GPU and a fact file labelled on this CPU; samples are stored cut to 80
    characters) and picks the same majority answer."""
    from grade.batch.labeling import majority_answer, settings_for
    from grade.models.sampling import sample_answers
    from grade.tasks.tasks import TASKS, Question

    records = _label_records("mmlu", ["mmlu-high_school_psychology-val-47", "mmlu-anatomy-val-3"])
    records += _label_records("facts_known", ["known-capital-japan"])
    for r in records:
        question = Question(r["id"], r["question"], r["answers"], r["task"], r["dataset"], r["context"], r["choices"])
        settings = settings_for(TASKS[r["task"]], n_samples=r["n_samples"], seed=r["seed"],
                                max_new_tokens=r["max_new_tokens"])
        (texts,) = sample_answers(smollm, [question.prompt(smollm.tokenizer)], [r["id"]], settings)
        assert [t[:80] for t in texts] == r["samples"], r["id"]
        assert majority_answer(question, texts) == r["majority"]


@pytest.mark.slow
def test_greedy_decoding_is_transformers_greedy_search(smollm):
    from grade.models.architectures import end_of_answer_ids
    from grade.tasks.prompts import format_prompt

    for question in ("What is the capital of France?", "Name a large animal that lives in the sea."):
        ids = encode_prompt(smollm.tokenizer, format_prompt(smollm.tokenizer, question))
        ours = generate(smollm, [ids], DecodeSettings(max_new_tokens=10))[0][0]
        with torch.no_grad():
            theirs = smollm.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                           max_new_tokens=10, do_sample=False,
                                           pad_token_id=smollm.tokenizer.pad_token_id)[0, len(ids):].tolist()
        stops = end_of_answer_ids(smollm.model, smollm.tokenizer)
        cut = next((i for i, t in enumerate(theirs) if t in stops), len(theirs))
        assert ours.token_ids == theirs[:cut]
        assert ours.finish == ("end_of_answer" if cut < len(theirs) else "length")


@pytest.mark.slow
def test_stop_strings_cut_the_text_and_the_answer_ids(smollm):
    tok = smollm.tokenizer
    ids = tok("Paris.\nQuestion: next", add_special_tokens=False)["input_ids"]
    settings = DecodeSettings(max_new_tokens=50, stop_strings=("\nQuestion:",))
    row = finish_row(tok, ids, settings)
    assert row.finish == "stop_string" and row.text == "Paris."
    assert tok.decode(row.answer_ids) == "Paris." and row.token_ids == ids
    assert finish_row(tok, ids[:2], settings).finish == "end_of_answer"  # ended early: by an end token
    assert finish_row(tok, ids, DecodeSettings(max_new_tokens=len(ids))).finish == "length"
    lead = tok("\nParis", add_special_tokens=False)["input_ids"]
    assert finish_row(tok, lead, DecodeSettings(50, stop_strings=("\n",))).text == "Paris"  # a leading newline is no stop


@pytest.mark.slow
def test_answers_have_the_tasks_format(smollm):
    """analyze, the baselines and the app ask the task for the answer length and stop rule."""
    import grade
    import grade.tasks.prompts
    from grade.tasks.tasks import answer_format

    result = grade.analyze(smollm, "Which animal is a mammal?\nA. shark\nB. whale\nC. trout\nD. eel", task="mmlu",
                           loss="pos", generate=True, spectra=False)
    assert 0 < len(result.input_ids) - result.response_start <= answer_format("mmlu").max_new_tokens
    answer = greedy_answer(smollm, grade.tasks.prompts.format_prompt(smollm.tokenizer, "Count from one to twenty."), task="qa")
    assert len(answer.token_ids) <= answer_format("qa").max_new_tokens and "\n" not in answer.text
    assert settings_for_task("qa_doc") == settings_for_task("qa")


@pytest.mark.slow
def test_another_backend_plugs_in_through_the_loaded_model(smollm):
    """A backend only turns prompt ids and settings into token ids; the rest (context limit, text, stop
    rules) is shared. Here it delegates to the transformers loop and records what it was asked."""
    from dataclasses import replace

    from grade.models.generation import TorchBackend

    class Recording:
        def __init__(self, lm):
            self.inner, self.calls = TorchBackend(lm), []

        def generate_ids(self, prompts, settings, seeds):
            self.calls.append((len(prompts), settings.max_new_tokens, seeds))
            return self.inner.generate_ids(prompts, settings, seeds)

    backend = Recording(smollm)
    lm = replace(smollm, generation_backend=backend)
    prompt = grade_prompt(smollm, "What is the capital of France?")
    assert greedy_answer(lm, prompt).text == greedy_answer(smollm, prompt).text
    assert backend.calls == [(1, 12, None)]
    generate(lm, [encode_prompt(lm.tokenizer, prompt)] * 2, DecodeSettings(4, temperature=0.7, top_p=0.9), [[1], [2]])
    assert backend.calls[-1] == (2, 4, [[1], [2]])


def grade_prompt(lm, question: str) -> str:
    from grade.tasks.prompts import format_prompt

    return format_prompt(lm.tokenizer, question)


def test_settings_are_checked():
    from grade.common.errors import InputError

    for bad in (dict(max_new_tokens=0), dict(max_new_tokens=4, temperature=-1), dict(max_new_tokens=4, top_p=0),
                dict(max_new_tokens=4, top_k=0)):
        with pytest.raises(InputError):
            DecodeSettings(**bad)
    assert DecodeSettings(4).greedy and not DecodeSettings(4, temperature=0.5).greedy


@pytest.fixture(scope="module")
def gemma():
    import grade

    return grade.load_model("gemma-3-270m")


@pytest.mark.slow
def test_app_answers_of_a_base_model_start_with_bos(gemma):
    """Home's answer and a generated reasoning trace are tokenised like the labels and features: a
    base model's plain prompt starts with its BOS token."""
    from studio import workflows

    seen: list[int] = []

    def first_token(module, args, kwargs):
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[0]
        if ids.shape[1] > 1:  # a prompt pass, not a decoding step
            seen.append(int(ids[0, 0]))

    handle = gemma.model.register_forward_pre_hook(first_token, with_kwargs=True)
    try:
        analysis = workflows.analyze_question(gemma, "What is the capital of France?", max_new_tokens=4)
        workflows.generate_cot(gemma, "Tom has 3 boxes of 4 pens. How many pens?", max_new_tokens=4)
    finally:
        handle.remove()
    bos = gemma.tokenizer.bos_token_id
    assert seen and all(first == bos for first in seen), seen
    assert analysis.answer == greedy_answer(gemma, analysis.result.prompt, max_new_tokens=4).text


@pytest.mark.slow
def test_llama_cpp_generates_under_the_same_stop_rules(smollm):
    """llama.cpp (the embedded Qwen's CPU generator) behind the same boundary: the end-of-answer tokens,
    stop strings and lengths of the torch loop, seeded sampling, one row per seed."""
    from dataclasses import replace

    pytest.importorskip("llama_cpp")
    from grade.models.backends import llama_cpp_generator

    lm = replace(smollm, generation_backend=llama_cpp_generator(smollm, n_threads=1))
    prompt = encode_prompt(lm.tokenizer, grade_prompt(lm, "Name three colours, one per line."))
    (answer,), = generate(lm, [prompt], DecodeSettings(24, stop_strings=("\n",)))
    assert answer.text and "\n" not in answer.text and len(answer.token_ids) <= 24
    assert answer.finish in ("stop_string", "end_of_answer", "length")
    sampling = DecodeSettings(8, temperature=0.7, top_p=0.9)
    first = generate(lm, [prompt], sampling, [[5, 6]])[0]
    again = generate(lm, [prompt], sampling, [[5, 6]])[0]
    assert [g.token_ids for g in first] == [g.token_ids for g in again] and len(first) == 2


def test_the_answer_engine_is_the_backend_that_generates(smollm):
    """What the sidebar names is what backend_for picks: a model's own backend by its name, else the torch loop for
    a model without llama.cpp generation (SmolLM2)."""
    from dataclasses import replace

    from grade.models.generation import answer_engine

    class Engine:
        name = "another engine"

        def generate_ids(self, prompts, settings, seeds):
            return [[[]] for _ in prompts]

    assert answer_engine(smollm) == "torch"
    assert answer_engine(replace(smollm, generation_backend=Engine())) == "another engine"


def test_a_llama_cpp_that_cannot_generate_leaves_generation_to_torch(tmp_path, caplog):
    """The llama.cpp check runs in a child process, so a build that crashes (a native build used AMX on our
    VM and died with a segmentation fault at the first token) or a file it cannot read costs a warning and the
    torch loop, never the app."""
    import logging

    from grade.models import backends

    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    with caplog.at_level(logging.WARNING, logger="grade.models.backends"):
        assert backends.llama_cpp_runs(broken) is False
        assert backends.llama_cpp_runs(broken) is False  # asked once per file and process
    assert sum("torch loop generates instead" in r.message for r in caplog.records) == 1
