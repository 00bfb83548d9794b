"""Prompts, built with the model's chat template when it has one.

The wording (each task's instruction, :mod:`grade.tasks.registry`) follows the reference pipeline's settings (see ``shared/notes/method.md``) in our own
words: short QA asks for one or a few words from the model's own knowledge; the with-document variant
puts the passage first; GSM8K asks for brief reasoning and a final ``#### <number>``; MATH asks for
the final answer in ``\\boxed{}``.
"""

from __future__ import annotations

from .registry import REGISTRY

#: Each task's instruction (:data:`grade.tasks.registry.REGISTRY`), and ``qa_doc``: short QA's wording when a document
#: comes first.
INSTRUCTIONS: dict[str, str] = {}
for _name, _spec in REGISTRY.items():
    INSTRUCTIONS[_name] = _spec.instruction
    if _spec.document_instruction:
        INSTRUCTIONS[f"{_name}_doc"] = _spec.document_instruction

TASKS = tuple(INSTRUCTIONS)


def user_message(question: str, *, task: str = "qa", context: str | None = None, choices: list[str] | None = None) -> str:
    """The text of the user's turn (no template applied)."""
    if task not in INSTRUCTIONS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    if task == "qa" and context:
        task = "qa_doc"
    parts = []
    if context:
        parts.append(f"Document:\n{context.strip()}")
    body = f"Question: {question.strip()}"
    if choices:
        body += "\n" + "\n".join(f"{letter}. {choice}" for letter, choice in zip("ABCD", choices))
    parts.append(body)
    parts.append(INSTRUCTIONS[task])
    return "\n\n".join(parts)


def format_prompt(
    tokenizer,
    question: str,
    *,
    task: str = "qa",
    context: str | None = None,
    choices: list[str] | None = None,
) -> str:
    """The full prompt text, ending where the model's answer starts.

    Chat models get their chat template with the generation prompt; base models (no template) get a
    plain ``...\\nAnswer:`` completion format.
    """
    message = user_message(question, task=task, context=context, choices=choices)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True
        )
    return f"{message}\n\nAnswer:"
