"""The outcome rule: what the step verifier is told about a trace's final answer, decided in one place.

Two protocols, each with its own threshold and its own measured numbers in the shipped verifier's file
(``grade/assets/step_verifier/<reader>.json``, key ``protocols``):

* ``unknown``, the final answer not given (the process-reward protocol): a step is suspect once its probability
  passes ``threshold``; no step passes: "none".
* ``known``, the final answer's truth given: a wrong final answer means some step is wrong, so the verifier names
  its most suspect step; a right one means "none" unless a step passes ``threshold_right``.

:func:`decide_outcome` picks the protocol from what a page or a run knows: the run's own grading of the trace
(``correct``), else the gold answers (graded here), else nothing. A reply cut at its token limit has no final
answer to judge, so it is read under ``unknown``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

#: Protocol -> how a page names it.
PROTOCOLS = {"unknown": "final answer not given (the process-reward protocol)",
             "known": "final answer's correctness given"}


@dataclass(frozen=True)
class Outcome:
    """What is known of a trace's final answer.

    final_correct : True / False where known, None where not (what :func:`grade.steps.verifier.verify_trace` takes);
    protocol : ``known`` or ``unknown`` (:data:`PROTOCOLS`); reason : why, in words a page can show.
    """

    final_correct: bool | None
    protocol: str
    reason: str

    def threshold(self, verifier, level: str | None = None) -> float | None:
        """The threshold the verifier applies under this outcome to a trace of ``level`` (its own where the
        verifier has thresholds per level, else the pooled); None where it names its most suspect step whatever
        the probabilities (a final answer known to be wrong)."""
        if self.final_correct is False:
            return None
        unknown, right = verifier.thresholds(level)
        return float(right if self.final_correct else unknown)

    def measured(self, verifier, level: str = "gsm8k") -> dict:
        """The numbers the shipped ``verifier`` cites for this protocol at ``level`` (``gsm8k`` or ``math``), as
        measured on the real annotated test halves by paragraph; {} where that was not measured."""
        protocols = (getattr(verifier, "info", None) or {}).get("protocols") or {}
        return dict((protocols.get(self.protocol) or {}).get("measured", {}).get(level) or {})


def decide_outcome(*, correct: bool | None = None, response: str | None = None,
                   answers: Sequence[str] | None = None, task: str = "gsm8k", cut_off: bool | None = False) -> Outcome:
    """The outcome rule. ``correct``: the run's own grading of the trace (an evaluation log's metric), used as
    given; else ``answers`` (gold answers) grade ``response`` with the task's strict grader; else unknown.
    ``cut_off``: the reply stopped at its token limit (then unknown, whatever the grading said)."""
    if cut_off:
        return Outcome(None, "unknown", "the reply was cut at its token limit: no final answer to judge")
    if correct is not None:
        return Outcome(bool(correct), "known", "the run graded the final answer "
                       + ("right" if correct else "wrong"))
    gold = [str(a) for a in (answers or []) if str(a).strip()]
    if gold and response is not None and str(response).strip():
        from ..tasks.registry import task_spec

        spec = task_spec(task)
        if spec is not None and spec.labelled:
            right = bool(spec.is_correct(str(response), gold, None))
            return Outcome(right, "known", f"the final answer {'matches' if right else 'does not match'} the gold answer")
    return Outcome(None, "unknown", "no gold answer given")
