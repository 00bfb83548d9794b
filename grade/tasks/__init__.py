"""Tasks and their questions: the task registry, prompts, answer grading, question sets (the shipped subsets,
the teaching sets, hf: datasets). Layer: engine; imports engine folders only.
"""
