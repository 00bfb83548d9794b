# Sourced by the Qwen GPU scripts (step_errors_gpu.sh, step_split_gpu.sh, gpu_pieces.sh): the model, the sha256 of
# its assembled GGUF, and filling its conversion cache on the GPU machine from that GGUF (prepare_gpu_model.py).
MODEL=qwen2.5-coder-1.5b-instruct
QWEN_GGUF_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046

prepare_qwen() {  # GGUF file; the tokenizer converted on a CPU machine is in .tok/qwen
  "${PY:-python3}" scripts/gpu/prepare_gpu_model.py --name "$MODEL" --gguf "$1" --sha256 "$QWEN_GGUF_SHA256" \
    --tokenizer .tok/qwen --check-ids .tok/qwen_ids.json
}

prepare_once() {  # OUT_DIR GGUF: prepare_qwen once per output folder (stamp OUT_DIR/prepared, log OUT_DIR/logs)
  [ -f "$1/prepared" ] && return 0
  mkdir -p "$1/logs"
  prepare_qwen "$2" > "$1/logs/prepare.log" 2>&1 && touch "$1/prepared" && return 0
  tail -5 "$1/logs/prepare.log"
  return 2
}
