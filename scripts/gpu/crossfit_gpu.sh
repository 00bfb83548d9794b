#!/usr/bin/env bash
# The GPU part of Qwen2.5-Coder-1.5B-Instruct's cross-fitted benchmark (every labelled question of the seven
# datasets scored out of sample; grade/studies/crossfit.py does the rest on a CPU):
#
#   TIME_LIMIT=SECONDS scripts/gpu/crossfit_gpu.sh GGUF OUT_DIR
#
# 1. MMLU labelled again with a reply long enough for a chat model's letter ("The correct answer is C."): the
#    letter read by the lenient rule (grade.tasks.grading.mmlu_letter), 12 new tokens instead of 4; then its GRADE_pre
#    and GRADE_pos feature stores of the new labels;
# 2. GRADE_pos (step-wise) of the labelled MATH questions the stores lack (resumes the carried store of the first 160);
# 3. every baseline pass (scripts/studies/score_all_questions.py) for every labelled question of the seven datasets.
#
# Jobs run in lanes, LANES_PER_GPU (default 2) per GPU; the long passes are split by question id over several
# lanes (--shard), each into a cache folder of its own that scripts/build/merge_benchmark_caches.py adds back to
# data/benchmark. Every job resumes what OUT_DIR holds, so the script is run again, call after call, until every
# lane says done. Every job stops TIME_LIMIT
# seconds (default 480) after the lanes start, so that a call ends inside the device's command limit with its
# outputs written.
# GGUF: the model's GGUF, assembled on the GPU machine (scripts/gpu/gpu_pieces.sh; prepare_gpu_model.py needs the
# tokenizer in .tok/qwen and the gguf wheel).
#
# A later session resumes what earlier leases filled (restore_benchmark_caches.sh restores it here) without
# carrying the 40 MB caches: carry their question ids alone, and DONE=.gpu/done seeds the lanes' caches with them:
#   mkdir -p .gpu/done && for f in data/benchmark/$MODEL/baselines/{triviaqa,nq_open,hotpotqa,hotpotqa_closed,gsm8k,math,mmlu}*.jsonl; do
#     python3 -c 'import json,sys; [print(json.dumps({"id": json.loads(l)["id"]})) for l in open(sys.argv[1]) if l.strip()]' \
#       "$f" > ".gpu/done/${f##*/}"; done
# and carry the stores the run extends (MMLU's labels and stores, MATH's pos store: data/benchmark/$MODEL/crossfit_features).
# Back here, add the new records to the restored caches by id (an id-only line is no record):
#   python scripts/build/merge_benchmark_caches.py OUT_DIR/bench OUT_DIR/shards/* --into data/benchmark
set -u
gguf=${1:?GGUF file}
out=${2:?output folder}
. "$(dirname "$0")/common.sh"
MODEL=$QWEN_MODEL
# Qwen's MATH, MMLU and NQ-open label files are kept in history, not tracked: restore them here
# (scripts/build/restore_benchmark_caches.sh --labels) and carry them to the GPU machine
for f in data/labels/$MODEL/{math,mmlu,nq_open}.jsonl.xz; do
  [ -f "$f" ] || { echo "error: $f is not here: run scripts/build/restore_benchmark_caches.sh --labels and carry it" >&2; exit 2; }
done
mkdir -p "$out/labels" "$out/features" "$out/logs"
[ -f "$out/prepared" ] || { prepare_qwen "$gguf" && touch "$out/prepared"; } || exit 2
if [ -n "${DONE:-}" ] && [ -d "$DONE" ]; then
  mkdir -p "$out/bench/$MODEL/baselines"
  for f in "$DONE"/*.jsonl; do [ -e "$out/bench/$MODEL/baselines/${f##*/}" ] || cp "$f" "$out/bench/$MODEL/baselines/"; done
fi
labels=data/labels/$MODEL
common=(--model "$MODEL" --device cuda --dtype float32)
ngpu=$(nvidia-smi -L | wc -l)
lane_no=0

per=${LANES_PER_GPU:-2}  # lanes sharing one GPU (the decoding loop leaves most of a GPU idle)
lane() {  # a lane: its jobs run one after another on GPU (lane number / per) mod ngpu
  local gpu=$(( (lane_no / per) % ngpu )) name=$1
  shift
  (export CUDA_VISIBLE_DEVICES=$gpu; for job in "$@"; do $job || exit; done; echo "lane $name: done") \
    >> "$out/logs/$name.log" 2>&1 &
  lane_no=$((lane_no + 1))
}
job() {  # one command, stopped at the deadline (exit 124, as timeout(1) says)
  local left=$(( deadline - $(date +%s) ))
  [ "$left" -gt 10 ] || return 124
  echo "== $* ($(date +%T))"
  timeout "$left" "$@"
  local rc=$?
  echo "   exit $rc ($(date +%T))"
  return $rc
}
score() {  # batch, NAME=LABELS ..., then --parts
  local batch=$1; shift
  job "$PY" scripts/studies/score_all_questions.py "${common[@]}" --cache-dir "$out/bench" --batch "$batch" "$@"
}
extract() {  # labels, loss, store
  job "$PY" -m grade extract "${common[@]}" --labels "$1" --loss "$2" --no-hidden --out "$3" --quiet
}

shards() {  # NAME=LABELS part batch N: N lanes share the pass, each scoring its crc32(id) % N share into a
  # cache folder of its own under OUT_DIR/shards (seeded with the ids already done), merged back here later
  local spec=$1 part=$2 batch=$3 n=$4 i
  for i in $(seq 0 $((n - 1))); do
    local dir="$out/shards/${spec%%=*}.$part.$i"
    mkdir -p "$dir/$MODEL/baselines"
    [ -n "${DONE:-}" ] && for f in "$DONE"/*.jsonl; do [ -e "$dir/$MODEL/baselines/${f##*/}" ] || cp "$f" "$dir/$MODEL/baselines/"; done
    lane "${spec%%=*}.$part.$i" "job $PY scripts/studies/score_all_questions.py ${common[*]} --cache-dir $dir --batch $batch --parts $part --shard $i/$n $spec"
  done
}

stores=data/benchmark/$MODEL/crossfit_features  # what earlier leases extracted (restored or carried), resumed
seed() {  # store in crossfit_features, store in OUT_DIR
  [ -d "$2" ] || [ ! -d "$stores/$1" ] || cp -r "$stores/$1" "$2"
}
mmlu_labels() {  # the committed labels are this relabelling: the command below then only resumes them
  [ -f "$out/labels/mmlu.jsonl" ] || xz -dc "$labels/mmlu.jsonl.xz" > "$out/labels/mmlu.jsonl"
  job "$PY" -m grade label "${common[@]}" --dataset mmlu --matcher lenient --max-new-tokens 12 --batch 128 \
    --sample-chars 80 --out "$out/labels/mmlu.jsonl" --quiet
}
mmlu_pre() { seed pre/mmlu.parquet "$out/features/mmlu.pre.parquet"; extract "$out/labels/mmlu.jsonl" pre "$out/features/mmlu.pre.parquet"; }
mmlu_pos() { seed pos/mmlu.parquet "$out/features/mmlu.pos.parquet"; extract "$out/labels/mmlu.jsonl" pos "$out/features/mmlu.pos.parquet"; }
mmlu_main() { score 128 "mmlu=$out/labels/mmlu.jsonl" --parts main; }
mmlu_samples() { score 64 "mmlu=$out/labels/mmlu.jsonl" --parts samples; }
math_pos() {
  seed pos/math.parquet "$out/features/math.pos.parquet"
  [ -d "$out/features/math.pos.parquet" ] || cp -r "data/probe_features/$MODEL/pos/math.parquet" "$out/features/math.pos.parquet"
  extract "$labels/math.jsonl.xz" pos "$out/features/math.pos.parquet"
}
short_a() { score 64 "triviaqa=$labels/triviaqa.jsonl.xz" "nq_open=$labels/nq_open.jsonl.xz"; }
# the benchmark's names: hotpotqa is the question with its two paragraphs, hotpotqa_closed without
short_b() { score 32 "hotpotqa=$labels/hotpotqa_context.jsonl.xz" "hotpotqa_closed=$labels/hotpotqa.jsonl.xz"; }

# the lanes, most work first; a pass split in N shards takes N lanes
lane math_pos math_pos
shards "math=$labels/math.jsonl.xz" samples 12 5
shards "math=$labels/math.jsonl.xz" main 32 2
shards "gsm8k=$labels/gsm8k.jsonl.xz" samples 24 3
shards "gsm8k=$labels/gsm8k.jsonl.xz" main 64 1
lane mmlu mmlu_labels mmlu_pre mmlu_pos mmlu_main mmlu_samples
lane short_a short_a
lane short_b short_b
wait
grep -h "^lane .*: done" "$out"/logs/*.log | sort -u
