"""Step labels from completions: where does a trace stop being able to reach the gold answer?

Math-Shepherd's hard estimate, for training the step verifier on real errors at scale: from the prefix of a trace
that ends after step k (the question's prompt, then the trace up to the end of step k), the model samples ``n``
continuations; ``successes[k]`` counts those whose whole reply (prefix + continuation) is correct. The trace's
**first wrong step** is the first k with no success: after it, the model itself can no longer get the answer right.
A trace with a success after every step has none.

The label is noisy in both directions (a wrong step the model recovers from is missed; a right step the model
cannot continue from is blamed), which is why the annotated traces, not these labels, score the verifier.

The sampling goes through the project's one decoding path (:func:`grade.models.generation.generate`) with per-row
seeds (:func:`grade.models.sampling.sample_seed` of the trace id and ``k * n + i``), so a resumed or re-sharded run
draws the same continuations.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Sequence

from ..gradients.losses import split_steps

#: Sampling of the continuations: the labeller's reference temperature and nucleus.
TEMPERATURE, TOP_P = 0.7, 0.9


@dataclass
class RolloutLabel:
    """One trace's completions.

    successes : (K,) correct continuations of the prefix ending after step k (0-based), of ``n`` each.
    first_wrong : 0-based first step with no success, None where every prefix has one.
    """

    id: str
    problem: str
    question: str
    trace: str
    task: str
    answers: list[str]
    n: int
    successes: list[int]
    first_wrong: int | None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, row: dict) -> "RolloutLabel":
        return cls(**{k: row[k] for k in cls.__dataclass_fields__})


def first_without_success(successes: Sequence[int]) -> int | None:
    """0-based first step whose prefix no continuation completed correctly, or None (Math-Shepherd's hard
    estimate: one unlucky draw of ``n`` marks a step)."""
    return next((k for k, s in enumerate(successes) if s == 0), None)


def no_return_step(successes: Sequence[int]) -> int | None:
    """0-based first step from which no prefix, that one or any later, was completed correctly; None where the
    whole trace still was (a reply cut short that the model finishes right has no wrong step yet)."""
    k = len(successes)
    while k > 0 and successes[k - 1] == 0:
        k -= 1
    return None if k == len(successes) else k


#: How successes become a first wrong step: the rules scripts/studies/train_step_verifier.py tries.
LABEL_RULES = {"first_zero": first_without_success, "no_return": no_return_step}


def rollout_first_wrong(successes: Sequence[int], rule: str = "no_return") -> tuple[bool, int | None]:
    """(usable, first wrong step) by ``rule``. Not usable where no continuation from the first step succeeded:
    the model cannot solve the problem at all, so the completions say nothing about which step broke it."""
    if not successes or successes[0] == 0:
        return False, None
    return True, LABEL_RULES[rule](successes)


def prefix_prompts(tokenizer, question: str, trace: str, task: str) -> list[tuple[str, list[int]]]:
    """Per step: the trace up to the end of that step, and the token ids of the prompt followed by it."""
    from ..models.generation import encode_prompt
    from ..tasks.prompts import format_prompt

    prompt = encode_prompt(tokenizer, format_prompt(tokenizer, question, task=task))
    prefixes = [trace[:end] for _, end in split_steps(trace)]
    return [(text, prompt + tokenizer(text, add_special_tokens=False)["input_ids"]) for text in prefixes]


def rollout_labels(lm, traces: Iterable[dict], *, n: int = 8, max_new_tokens: int = 320, prompts_per_batch: int = 64,
                   seed: int = 0, on_label: Callable[[RolloutLabel], None] | None = None) -> list[RolloutLabel]:
    """Completion labels of ``traces`` (dicts with ``id``, ``question``, ``trace``, ``answers``, ``task`` and
    optionally ``problem``), ``n`` continuations per step, ``prompts_per_batch`` prefixes of one task decoded
    together (``prompts_per_batch * n`` rows). ``on_label`` is called as soon as a trace is complete (a run can
    stop any time and resume from what it wrote)."""
    from ..models.generation import generate, settings_for_task
    from ..models.sampling import sample_seed
    from ..tasks.question_sets import Question
    from ..tasks.tasks import is_correct

    traces = list(traces)
    prefixes = {t["id"]: prefix_prompts(lm.tokenizer, t["question"], t["trace"], t["task"]) for t in traces}
    counts = {t["id"]: [0] * len(prefixes[t["id"]]) for t in traces}
    steps_left = {t["id"]: len(prefixes[t["id"]]) for t in traces}
    out: list[RolloutLabel] = []
    for task in dict.fromkeys(t["task"] for t in traces):  # one stop rule per batch: a task's prefixes together
        settings = settings_for_task(task, max_new_tokens, temperature=TEMPERATURE, top_p=TOP_P)
        pending = [(t, k, text, ids) for t in traces if t["task"] == task for k, (text, ids) in enumerate(prefixes[t["id"]])]
        for start in range(0, len(pending), prompts_per_batch):
            group = pending[start:start + prompts_per_batch]
            seeds = [[sample_seed(seed, t["id"], k * n + i) for i in range(n)] for t, k, _, _ in group]
            replies = generate(lm, [ids for _, _, _, ids in group], settings, seeds)
            for (t, k, text, _), rows in zip(group, replies):
                question = Question(id=t["id"], question=t["question"], answers=list(t["answers"]), task=task)
                counts[t["id"]][k] = sum(bool(is_correct(question, text + g.text, "strict")) for g in rows)
                steps_left[t["id"]] -= 1
                if steps_left[t["id"]] == 0:
                    label = RolloutLabel(t["id"], str(t.get("problem", t["id"])), t["question"], t["trace"], task,
                                         list(t["answers"]), n, counts[t["id"]], first_without_success(counts[t["id"]]))
                    out.append(label)
                    if on_label is not None:
                        on_label(label)
    return out
