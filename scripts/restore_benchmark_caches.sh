#!/usr/bin/env bash
# Restore the benchmark caches behind results/ (feature stores and baseline passes, about 23 MB) from
# the repository's history into data/benchmark/<model>/{features,baselines}, where `python -m grade
# benchmark` and `python scripts/run_benchmark.py --offline` look for them. They are kept out of the
# tracked tree (so that it stays small enough to travel to a GPU machine beside model weights), but
# every clone with full history still holds them: no network is needed.
#
#   scripts/restore_benchmark_caches.sh            # both embedded models
set -euo pipefail
cd "$(dirname "$0")/.."
# The last commit whose tree held the caches (they were filled on an H100 and the 2-core CPU).
commit=b11607c
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "error: commit $commit is not in this clone (a shallow clone?); run 'git fetch --unshallow' or recompute the caches with 'python scripts/run_benchmark.py'" >&2
  exit 2
fi
paths=()
for model in smollm2-135m-instruct gemma-3-270m; do
  paths+=("data/benchmark/$model/features" "data/benchmark/$model/baselines")
done
git archive "$commit" "${paths[@]}" | tar -x
du -sh data/benchmark/*/features data/benchmark/*/baselines
