# The preamble every GPU driver in this folder sources first (`. "$(dirname "$0")/common.sh"`):
# - the working folder becomes the repository's root (an OUT_DIR given as a relative path lies under it);
# - PY: the Python that runs the jobs ($PYTHON, default python3);
# - deadline, left: TIME_LIMIT seconds (default 480) from now, and the seconds left to it, so that the jobs of one
#   device call stop inside the device's command limit with their outputs written;
# - Qwen2.5-Coder-1.5B-Instruct's drivers: QWEN_MODEL, the sha256 of its GGUF as assembled from the 22 package parts
#   (gpu_pieces.sh), and filling its conversion cache on the GPU machine from that GGUF (prepare_gpu_model.py).
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY=${PYTHON:-python3}
deadline=$(( $(date +%s) + ${TIME_LIMIT:-480} ))
left() { echo $(( deadline - $(date +%s) )); }

QWEN_MODEL=qwen2.5-coder-1.5b-instruct
QWEN_GGUF_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046

prepare_qwen() {  # GGUF file; the tokenizer converted on a CPU machine is in .tok/qwen
  "$PY" scripts/gpu/prepare_gpu_model.py --name "$QWEN_MODEL" --gguf "$1" --sha256 "$QWEN_GGUF_SHA256" \
    --tokenizer .tok/qwen --check-ids .tok/qwen_ids.json
}

prepare_once() {  # OUT_DIR GGUF: prepare_qwen once per output folder (stamp OUT_DIR/prepared, log OUT_DIR/logs)
  [ -f "$1/prepared" ] && return 0
  mkdir -p "$1/logs"
  prepare_qwen "$2" > "$1/logs/prepare.log" 2>&1 && touch "$1/prepared" && return 0
  tail -5 "$1/logs/prepare.log"
  return 2
}
