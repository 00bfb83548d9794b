"""Prompts, built with the model's chat template when it has one.

The wording follows the reference pipeline's settings (see ``shared/notes/method.md``) in our own
words: short QA asks for one or a few words from the model's own knowledge; the with-document variant
puts the passage first; GSM8K asks for brief reasoning and a final ``#### <number>``; MATH asks for
the final answer in ``\\boxed{}``.
"""

from __future__ import annotations

INSTRUCTIONS: dict[str, str] = {
    "qa": "Answer the question with one or a few words, using only your own knowledge.",
    "qa_doc": "Answer the question with one or a few words. You may use the document above.",
    "mmlu": "Answer the multiple-choice question with the letter (A, B, C or D) of the correct option.",
    "gsm8k": "Solve the problem. Reason briefly, step by step, then give the final answer on its own line as '#### <number>'.",
    "math": "Solve the problem. Reason step by step and put the final answer in \\boxed{}.",
    "cot": "Answer the question. Reason step by step in short sentences.",
}

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
