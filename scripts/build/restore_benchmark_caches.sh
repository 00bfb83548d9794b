#!/usr/bin/env bash
# Restore the benchmark caches behind results/ (feature stores and baseline passes, about 23 MB) from
# the repository's history into data/benchmark/<model>/{features,baselines}, where `python -m grade
# benchmark` and `python scripts/build/run_benchmark.py --offline` look for them. They are kept out of the
# tracked tree (so that it stays small enough to travel to a GPU machine beside model weights), but
# every clone with full history still holds them: no network is needed.
#
#   scripts/build/restore_benchmark_caches.sh            # into this checkout (data/ is ignored by git)
#   scripts/build/restore_benchmark_caches.sh DEST       # into DEST/data/... instead (a test's temporary folder)
#   scripts/build/restore_benchmark_caches.sh --labels   # only the label files kept in history (below)
#   scripts/build/restore_benchmark_caches.sh --assets   # only the shipped files kept in history (below; `make install`)
#
# Two more kinds of files live in history only, each restored into this checkout (whatever DEST is), where git
# ignores them; a file already there is kept (one being labelled again, say):
# - the label files that only the benchmark's and the probes' and detectors' builds read (the datasets that neither
#   the app's examples nor the tests read: SmolLM2's and Gemma's, Qwen2.5-Coder's MATH, MMLU and NQ-open), beside
#   the tracked ones in data/labels, since every run names them relative to the repository;
# - the weights of the step verifier that Qwen2.5-Coder reads with on a GPU (grade/assets/step_verifier; its .json,
#   which the pages cite, stays tracked): `make install` restores them, and a GPU driver that reads with Qwen
#   carries them to the GPU machine.
set -euo pipefail
dest=$(realpath -m -- "${1:-$(dirname "$0")/../..}")
cd "$(dirname "$0")/../.."
HISTORY_LABELS=(data/labels/smollm2-135m-instruct/{nq_open,math}.jsonl.xz
                data/labels/gemma-3-270m/{nq_open,mmlu,math,hotpotqa_context,hotpotqa}.jsonl.xz)
# Qwen2.5-Coder's: read also by its GPU drivers (crossfit_gpu.sh, step_split_gpu.sh), which say to carry them
QWEN_HISTORY_LABELS=(data/labels/qwen2.5-coder-1.5b-instruct/{math,mmlu,nq_open}.jsonl.xz)
HISTORY_ASSETS=(grade/assets/step_verifier/qwen2.5-coder-1.5b-instruct.safetensors)
# keep|replace, the message that begins the commit which took the files out of the tree (its parent holds them), files...
# keep: a file already there stays (a label file being labelled again); replace: one that differs from the kept one
# is restored again (a shipped file replaced since it was restored: its checksum in the tracked .json is the new one's)
restore_kept() {
  local mode=$1 message=$2 missing=() f commit tmp
  shift 2
  # found by its message, so that a rebase does not lose it; the newest such commit holds the newest files
  commit=$(git log --format=%H -1 --grep="^$message" || true)
  for f in "$@"; do
    if [ ! -e "$f" ]; then
      missing+=("$f")
    elif [ "$mode" = replace ] && [ -n "$commit" ] \
        && [ "$(git hash-object "$f")" != "$(git rev-parse -q --verify "$commit^:$f" || true)" ]; then
      missing+=("$f")
      rm -f "$f"
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ -z "$commit" ] || ! git cat-file -e "$commit^^{commit}" 2>/dev/null; then
    echo "error: the commit '$message' is not in this clone (a shallow clone?); run 'git fetch --unshallow'" >&2
    exit 2
  fi
  # unpacked aside, then each file renamed into place: a reader never sees half a file, and two runs at once agree
  tmp=$(mktemp -d "$(dirname "${missing[0]}")/.restore.XXXXXX")
  git archive "$commit^" "${missing[@]}" | tar -x -C "$tmp"
  for f in "${missing[@]}"; do [ -e "$f" ] || mv -n "$tmp/$f" "$f" || [ -e "$f" ]; done
  rm -rf "$tmp"
}
if [ "${1:-}" = "--assets" ]; then
  restore_kept replace "Shipped files kept in history" "${HISTORY_ASSETS[@]}"
  exit 0
fi
restore_kept keep "Label files only the build scripts read kept in history" "${HISTORY_LABELS[@]}"
restore_kept keep "Qwen's label files only the build scripts read kept in history" "${QWEN_HISTORY_LABELS[@]}"
[ "${1:-}" = "--labels" ] && exit 0
mkdir -p "$dest"
#
# The commits whose trees held the caches: SmolLM2's and Gemma's were filled on an H100 and the 2-core
# CPU; Qwen2.5-Coder's on an H200 (benchmark caches, and the feature stores its probes were trained on,
# data/probe_features). Each commit was followed by one that took the files out of the tree again.
restore() {  # commit, paths...
  local commit=$1
  shift
  if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "error: commit $commit is not in this clone (a shallow clone?); run 'git fetch --unshallow' or recompute the caches with 'python scripts/build/run_benchmark.py'" >&2
    exit 2
  fi
  git archive "$commit" "$@" | tar -x -C "$dest"
}
paths=()
for model in smollm2-135m-instruct gemma-3-270m; do
  paths+=("data/benchmark/$model/features" "data/benchmark/$model/baselines")
done
restore b11607c "${paths[@]}"
# The robustness study's GRADE_pos stores whose rows scored another response than the original rows
# (grade/studies/benchmark.py now scores the labeller's majority answer there too): rescored on the 2-core CPU,
# kept in the tree of one later commit (found by its message, so that a rebase does not lose it).
rescored=()
for store in gemma-3-270m/features/facts.{reworded,irrelevant}.pos.parquet \
             smollm2-135m-instruct/features/hotpotqa.{reworded,irrelevant}.pos.parquet; do
  rescored+=("data/benchmark/$store")
done
(cd "$dest" && rm -rf "${rescored[@]}")
restore "$(git log --format=%H -1 --grep='^Rescored robustness caches in history' || true)" "${rescored[@]}"
qwen=qwen2.5-coder-1.5b-instruct
restore "$(git log --format=%H -1 --grep='^Qwen caches in history' || true)" \
  "data/benchmark/$qwen/features" "data/benchmark/$qwen/baselines" "data/probe_features/$qwen"
# Qwen's GSM8K caches as finished on a second GPU lease (the same later commit as the rescored stores)
finished=("data/benchmark/$qwen/baselines/gsm8k.jsonl" "data/benchmark/$qwen/baselines/gsm8k.samples.jsonl"
          "data/benchmark/$qwen/features/gsm8k.pre.parquet" "data/benchmark/$qwen/features/gsm8k.pos.parquet")
(cd "$dest" && rm -rf "${finished[@]}")
restore "$(git log --format=%H -1 --grep='^Rescored robustness caches in history' || true)" "${finished[@]}"
# Qwen's MATH feature stores (GRADE_pre of every labelled question, GRADE_pos of the first 160), from an H100
restore "$(git log --format=%H -1 --grep='^Qwen MATH caches in history' || true)" \
  "data/probe_features/$qwen/pre/math.parquet" "data/probe_features/$qwen/pos/math.parquet"
# Qwen's step-wise GRADE_pos stores of GSM8K and MATH recomputed after the step split changed (a list marker opens
# the step it numbers), on an H100: the stores the shipped pos probes are trained on now
stepwise=("data/probe_features/$qwen/pos/gsm8k.parquet" "data/probe_features/$qwen/pos/math.parquet")
(cd "$dest" && rm -rf "${stepwise[@]}")
restore "$(git log --format=%H -1 --grep='^Qwen step-split caches in history' || true)" "${stepwise[@]}"
# ... and the benchmark's 80 GSM8K rows of that GSM8K store (the same rows and responses as before the split)
bench_stepwise=("data/benchmark/$qwen/features/gsm8k.pos.parquet")
(cd "$dest" && rm -rf "${bench_stepwise[@]}")
restore "$(git log --format=%H -1 --grep='^Qwen benchmark step-split cache in history' || true)" "${bench_stepwise[@]}"
# Qwen's cross-fitted benchmark: every baseline pass that the GPU lease of the cross-fit run finished (batched, replacing
# the earlier rows of the same questions; nq_open and the robustness variants stay as above) and the feature stores of
# every labelled question of the seven datasets (grade.studies.crossfit reads them from crossfit_features/)
crossfit=("data/benchmark/$qwen/baselines/"{triviaqa,hotpotqa,hotpotqa_closed,gsm8k,math}{,.samples}.jsonl
          "data/benchmark/$qwen/crossfit_features")
(cd "$dest" && rm -rf "${crossfit[@]}")
restore "$(git log --format=%H -1 --grep='^Qwen cross-fit caches in history' || true)" "${crossfit[@]}"
# ... and what a second lease added (every baseline pass of NQ-open, MMLU, GSM8K and MATH; MATH GRADE_pos 612 of 742)
second=("data/benchmark/$qwen/baselines/"{nq_open,mmlu,gsm8k,math}{,.samples}.jsonl
        "data/benchmark/$qwen/baselines/triviaqa.samples.jsonl" "data/benchmark/$qwen/crossfit_features/pos/math.parquet")
(cd "$dest" && rm -rf "${second[@]}")
restore "$(git log --format=%H -1 --grep='^Qwen second-lease cross-fit caches in history' || true)" "${second[@]}"
(cd "$dest" && du -sh 2>/dev/null data/benchmark/*/features data/benchmark/*/baselines data/benchmark/*/crossfit_features data/probe_features/*)
