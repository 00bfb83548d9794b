#!/usr/bin/env bash
# The GPU runs behind Qwen2.5-Coder-1.5B-Instruct's labels, features and benchmark caches (one H200):
#
#   MODEL=NAME scripts/gpu/gpu_label_extract.sh OUT_DIR labels     # label_gpu.sh jobs in two lanes
#   MODEL=NAME [STEMS="a b"] [LOSSES="pre pos"] scripts/gpu/gpu_label_extract.sh OUT_DIR features
#                                                              # feature stores of the labels files
#   MODEL=NAME scripts/gpu/gpu_label_extract.sh OUT_DIR benchmark  # `grade benchmark` caches (baselines too)
#
# Several processes share the GPU (HF generate and one-question analyses leave most of it idle), but
# not too many: three labelling and extraction jobs at once ran an H200 out of memory beside a MATH
# labelling job (5 x 512-token samples of 32 questions). Every step resumes what is already written.
set -u
out=${1:?usage: scripts/gpu/gpu_label_extract.sh OUT_DIR labels|features|benchmark}
what=${2:?labels, features or benchmark}
export MODEL=${MODEL:?set MODEL}
. "$(dirname "$0")/common.sh"
mkdir -p "$out/labels" "$out/features"
common=(--model "$MODEL" --device cuda --dtype float32)

extract() {  # labels file stem, loss
  "$PY" -m grade extract "${common[@]}" --labels "$out/labels/$1.jsonl" --loss "$2" \
    --out "$out/features/$1.$2.parquet" --no-hidden --quiet >> "$out/extract_$1_$2.log" 2>&1
  echo "extract $1 $2: exit $? after $SECONDS s" >> "$out/progress.log"
}

case $what in
  labels)
    (COT_SAMPLES=5 BATCH=128 scripts/gpu/label_gpu.sh "$out/labels" gsm8k
     COT_SAMPLES=5 BATCH=100 scripts/gpu/label_gpu.sh "$out/labels" math) > "$out/lane_a.log" 2>&1 &
    (BATCH=16 scripts/gpu/label_gpu.sh "$out/labels" triviaqa mmlu nq_open hotpotqa hotpotqa_context) > "$out/lane_b.log" 2>&1 &
    wait ;;
  math)  # more MATH questions (resumes the file): MATH_LIMIT of them
    COT_SAMPLES=5 BATCH=${BATCH:-100} scripts/gpu/label_gpu.sh "$out/labels" math > "$out/math.log" 2>&1
    echo "math: exit $? after $SECONDS s" >> "$out/progress.log" ;;
  features)
    stems=${STEMS:-$(for f in "$out"/labels/*.jsonl; do basename "$f" .jsonl; done)}
    for loss in ${LOSSES:-pre pos}; do
      for stem in $stems; do
        extract "$stem" "$loss" &
        while [ "$(jobs -rp | wc -l)" -ge 3 ]; do sleep 2; done
      done
    done
    wait ;;
  benchmark)
    l=$out/labels
    "$PY" -m grade benchmark "${common[@]}" --labels-dir "$l" --cache-dir "$out/bench" --out "$out/results" \
      --datasets triviaqa nq_open "hotpotqa=$l/hotpotqa_context.jsonl" "hotpotqa_closed=$l/hotpotqa.jsonl" gsm8k \
      --max-per-class "${MAX_PER_CLASS:-150}" --document-pair hotpotqa hotpotqa_closed --length-split hotpotqa \
      --robustness-datasets triviaqa gsm8k --no-figures --threads 4 > "$out/benchmark.log" 2>&1
    echo "benchmark: exit $? after $SECONDS s" >> "$out/progress.log" ;;
  *) echo "unknown step $what" >&2; exit 2 ;;
esac
