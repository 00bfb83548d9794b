#!/usr/bin/env bash
# GRADE's step features of the step verifier's traces on a GPU machine (scripts/studies/step_grade_features.py; the
# verifier variant with them is trained on a CPU by scripts/studies/train_step_verifier.py --grade-features):
#
#   TIME_LIMIT=SECONDS LANES=8 scripts/gpu/grade_features_gpu.sh GGUF OUT_DIR
#
# LANES processes share the GPU (Qwen2.5-Coder-1.5B is small; each lane's CPU work, tokenising and the step
# split, would leave it idle otherwise), each a shard of the traces into OUT_DIR/<lane>.jsonl. Every lane resumes
# what its file holds, so the script is run again, call after call, until the logs say done; lanes stop starting
# traces TIME_LIMIT seconds (default 480) after the start. GGUF as in scripts/gpu/verifier_gpu.sh.
set -u
gguf=${1:?GGUF file}
out=${2:?output folder}
. "$(dirname "$0")/common.sh"
MODEL=$QWEN_MODEL
mkdir -p "$out/logs"
prepare_once "$out" "$gguf" || exit 2
lanes=${LANES:-8}
limit=$(left)
for lane in $(seq 0 $((lanes - 1))); do
  OMP_NUM_THREADS=${THREADS:-2} timeout $((limit + 120)) "$PY" scripts/studies/step_grade_features.py --reader "$MODEL" --device cuda \
    --dtype float32 --shard "$lane/$lanes" --out "$out/$lane.jsonl" --time-limit "$limit" >> "$out/logs/$lane.log" 2>&1 &
done
wait
for lane in $(seq 0 $((lanes - 1))); do tail -n 1 "$out/logs/$lane.log"; done
