"""Benchmarks: GRADE at the cost of one backward pass.

``python -m bench`` (or ``make bench``) runs the CPU part on the embedded SmolLM2 and writes
``runs/bench/cpu_results.json`` plus Markdown tables; ``python -m bench.gpu --out DIR`` runs the GPU
part (Llama-3.1-8B shape, random weights, bf16). Results and how they were produced: ``bench/RESULTS.md``.

Modules: :mod:`bench.cpu` (single-question GRADE_pre vs the reference recipe), :mod:`bench.stepwise`
(step-wise GRADE_pos vs recomputing each prefix), :mod:`bench.gpu` (all GPU targets),
:mod:`bench.pipeline` (the floor pass and the engine's tensors), :mod:`bench.synthetic` (random-weight
model and word tokenizer), :mod:`bench.common` (timing, memory, errors, tables). The labelling
throughput benchmark is ``bench/bench_labelling.py``; ``python -m bench`` runs it too.
"""
