#!/usr/bin/env bash
# The GPU part of the Qwen-read step verifier (grade.steps.verifier; scripts/studies/train_step_verifier.py does the rest
# on a CPU):
#
#   TIME_LIMIT=SECONDS scripts/gpu/verifier_gpu.sh GGUF OUT_DIR
#
# 1. GPU 0: Qwen2.5-Coder-1.5B-Instruct's per-step features (float32, one forward pass a trace) of every trace the
#    verifier learns from or is scored on, its own replies as written included (--own), then compacted to the
#    projected states a device call can bring back (scripts/studies/compact_verifier_features.py -> OUT_DIR/compact);
# 2. every GPU, LANES_PER_GPU lanes each (GPU 0 once its features are done): completion labels of the model's own
#    replies (scripts/studies/step_rollouts.py, one shard per lane -> OUT_DIR/rollouts/<lane>.jsonl).
#
# LANES_PER_GPU=0: the features only (the completion labels are already there).
# EXTERNAL=DIR: the features of the annotated traces only, other models' in DIR first
#   (scripts/studies/external_step_errors.py; carry DIR), for scripts/studies/transfer_step_verifier.py --compact.
#
# Every job resumes what is already there, so the script is run again, call after call, until the logs say done;
# jobs stop TIME_LIMIT seconds (default 480) after the start, so that a call ends inside the device's limit.
# GGUF: the model's GGUF assembled on the GPU machine (scripts/gpu/gpu_pieces.sh; prepare_gpu_model.py needs the
# tokenizer in .tok/qwen and the gguf wheel installed).
set -u
gguf=${1:?GGUF file}
out=${2:?output folder}
. "$(dirname "$0")/common.sh"
MODEL=$QWEN_MODEL
mkdir -p "$out/logs" "$out/rollouts"
prepare_once "$out" "$gguf" || exit 2
ngpu=$(nvidia-smi -L | wc -l)
per=${LANES_PER_GPU:-2}
which="--own"
[ -n "${EXTERNAL:-}" ] && which="--external $EXTERNAL --only annotated"
lanes=$((ngpu * per))

rollouts() {  # lane number, GPU
  CUDA_VISIBLE_DEVICES=$2 timeout "$(left)" "$PY" scripts/studies/step_rollouts.py --device cuda --dtype bfloat16 \
    --shard "$1/$lanes" --out "$out/rollouts/$1.jsonl" --time-limit $(( $(left) - 100 )) \
    >> "$out/logs/rollouts.$1.log" 2>&1
}

(
  if [ ! -f "$out/compact/meta.npz" ]; then
    CUDA_VISIBLE_DEVICES=0 timeout "$(left)" "$PY" scripts/studies/step_verifier_features.py --reader "$MODEL" --device cuda \
      --dtype float32 $which >> "$out/logs/features.log" 2>&1 \
      && "$PY" scripts/studies/compact_verifier_features.py --reader "$MODEL" --out "$out/compact" >> "$out/logs/features.log" 2>&1 \
      && xz -c "data/step_verifier/$MODEL/traces.jsonl" > "$out/compact/traces.jsonl.xz"
  fi
  [ "$lanes" -gt 0 ] && rollouts 0 0
) &
for lane in $(seq 1 $((lanes - 1))); do
  rollouts "$lane" $((lane % ngpu)) &
done
wait
tail -n 2 "$out/logs/features.log"
for f in "$out"/rollouts/*.jsonl; do echo "$f: $(wc -l < "$f") traces"; done
