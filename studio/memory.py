"""What an analysis claims of the operator's memory budget when it is queued (``GRADE_QUEUE_MEMORY_MB``,
:mod:`studio.queue`): :func:`grade.gradients.memory.analysis_memory_bytes` (the model's shape, the token counts and the
route: ``pre``, ``pos``, step-wise, a document in the prompt) applied to what a page asks, before anything runs.
Every page that submits an analysis asks here; Home submitted its analyses with no figure before, so the budget
never held them back. Past ``Limits.analysis_memory_mb`` the analysis runs layer by layer and claims that route's
figure (measured on Qwen at the caps: bench/RESULTS.md section 14)."""

from __future__ import annotations

#: Tokens a chat template adds around a question (SmolLM2's and Qwen's are under 40).
TEMPLATE_TOKENS = 64


def prompt_tokens(lm, question: str, context: str | None, limits) -> int:
    """Tokens of the prompt of ``question`` with ``context``; a question or document past its character cap is
    refused here (:func:`studio.served.check_question`), before it is tokenised or queued."""
    from .served import check_question

    check_question(question, limits, context)
    text = (question or "") + " " + (context or "")
    return len(lm.tokenizer(text, add_special_tokens=False)["input_ids"]) + TEMPLATE_TOKENS


def home_memory_mb(lm, request: dict, limits) -> float:
    """Home's analysis of ``request`` (question, context, max_new_tokens): the larger of its two routes, ``pre``
    over the prompt and ``pos`` over the prompt and the generated answer (its longest allowed length)."""
    from grade.gradients.memory import analysis_memory_bytes

    n_prompt = prompt_tokens(lm, request.get("question") or "", request.get("context"), limits)
    n_new = int(request.get("max_new_tokens") or limits.answer_tokens)
    bound = limits.analysis_memory_mb  # the analysis runs layer by layer past it, and claims that route's memory
    return max(analysis_memory_bytes(lm, n_prompt, memory_mb=bound),
               analysis_memory_bytes(lm, n_prompt + n_new, n_new, memory_mb=bound)) / 2**20
