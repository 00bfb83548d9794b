#!/usr/bin/env bash
# Label the shared datasets with an embedded model (MODEL, default smollm2-135m-instruct) on a CUDA
# GPU: the same settings as the CPU files in data/labels (10 samples, temperature 0.7, top-p 0.9, seed 0, float32, samples cut to 80
# characters), only more questions per batch. Every job resumes its file, so the script can be run
# again after an interruption or a time limit (TIME_LIMIT seconds per job, default none).
#
#   [MODEL=NAME] [BATCH=N] [COT_SAMPLES=N] [MATH_LIMIT=N] scripts/gpu/label_gpu.sh OUT_DIR [JOB ...]
#       jobs: triviaqa mmlu hotpotqa_context hotpotqa nq_open gsm8k math; BATCH overrides every job's
#       questions per batch (batching changes no sample: see below); COT_SAMPLES sets the samples of
#       the chain-of-thought jobs (gsm8k, math; default 10, the paper uses 5); MATH_LIMIT the number
#       of MATH questions (default 500)
#
# Sample texts match the CPU files' up to float rounding: each sample draws from its own seeded
# generator, whatever the batch (grade/models/sampling.py).
set -euo pipefail
. "$(dirname "$0")/common.sh"
out=${1:?usage: scripts/gpu/label_gpu.sh OUT_DIR [JOB ...]}
shift
jobs=("$@")
[ ${#jobs[@]} -gt 0 ] || jobs=(mmlu hotpotqa_context hotpotqa nq_open gsm8k math)
cot=(--samples "${COT_SAMPLES:-10}")
mkdir -p "$out"
common=(--model "${MODEL:-smollm2-135m-instruct}" --device cuda --dtype float32 --sample-chars 80 --quiet)
limit=()
[ -n "${TIME_LIMIT:-}" ] && limit=(timeout "$TIME_LIMIT")

run() {  # name, label arguments...
  local name=$1
  shift
  echo "== $name: $*" >&2
  local start=$SECONDS
  local batch=()
  [ -n "${BATCH:-}" ] && batch=(--batch "$BATCH")  # the last --batch wins
  "${limit[@]}" "$PY" -m grade label "${common[@]}" --out "$out/$name.jsonl" "$@" "${batch[@]}" || echo "   (stopped: exit $?)" >&2
  echo "   $((SECONDS - start)) s, $(wc -l < "$out/$name.jsonl") rows" >&2
}

for job in "${jobs[@]}"; do
  case $job in
    triviaqa) run triviaqa --dataset triviaqa --matcher lenient --max-new-tokens 24 --batch 64 ;;
    mmlu) run mmlu --dataset mmlu --batch 128 ;;
    hotpotqa_context) run hotpotqa_context --dataset hotpotqa --with-context --matcher lenient --max-new-tokens 24 --batch 32 ;;
    hotpotqa) run hotpotqa --dataset hotpotqa --matcher lenient --max-new-tokens 24 --batch 64 ;;
    nq_open) run nq_open --dataset nq_open --matcher lenient --max-new-tokens 24 --batch 64 ;;
    gsm8k) run gsm8k --dataset gsm8k --batch 64 "${cot[@]}" ;;
    math) run math --dataset math --limit "${MATH_LIMIT:-500}" --batch 32 "${cot[@]}" ;;
    *) echo "unknown job $job" >&2; exit 2 ;;
  esac
done
