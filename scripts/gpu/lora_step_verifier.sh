#!/usr/bin/env bash
# The GPU part of scripts/studies/lora_step_verifier.py: SmolLM2-135M-Instruct (the CPU product's reader) with LoRA
# adapters and a step head, 5 folds by problem over the external dev halves and a final fit that predicts the test
# halves; per-step predictions written to OUT_DIR (resumable), scored afterwards on a CPU (`... score --preds`).
#
#   TIME_LIMIT=SECONDS scripts/gpu/lora_step_verifier.sh GGUF OUT_DIR
#   scripts/gpu/lora_step_verifier.sh --smoke OUT_DIR   # adapters, head, one training step on a randomly initialised
#                                                      # reader of SmolLM2's shape (.lora/config.json): tokens a second
#
# GGUF: SmolLM2-135M-Instruct's, assembled from .gpu/spieces as scripts/gpu/triage_gpu.sh says; the gguf wheel
# installed; carried: data/real_step_errors_external, .tok, .lora (scalars.npz from `lora_step_verifier.py train
# --export-scalars .lora/scalars.npz --out /tmp/x`, config.json).
set -u
. "$(dirname "$0")/common.sh"
if [ "${1:-}" = "--smoke" ]; then
  "$PY" - <<'PYEOF'
import json, sys, time, types
import numpy as np, torch
sys.path.insert(0, "scripts/studies")
import lora_step_verifier as L
from transformers import LlamaConfig, LlamaForCausalLM
cfg = LlamaConfig(**{k: v for k, v in json.load(open(".lora/config.json")).items() if not k.startswith("_")})
model = LlamaForCausalLM(cfg).cuda().float()
for p in model.parameters():
    p.requires_grad_(False)
lm = types.SimpleNamespace(model=model, device=torch.device("cuda"), tokenizer=types.SimpleNamespace(pad_token_id=2))
rng = np.random.default_rng(0)
rows = []
for _ in range(64):
    n = int(rng.integers(250, 450))
    rows.append({"ids": rng.integers(0, 49000, n).tolist(), "last": sorted(rng.choice(np.arange(100, n), 6, replace=False).tolist()),
                 "scalars": rng.random((6, len(L.SCALARS))).astype(np.float32), "first_wrong": int(rng.integers(0, 6)) if rng.random() < .5 else None})
settings = dict(rank=16, alpha=32, lr=2e-4, head_lr=1e-3, epochs=2)
t0 = time.perf_counter()
p = L.train_and_predict(lm, settings, rows, rows, seed=0, max_tokens=16384)
torch.cuda.synchronize()
dt = time.perf_counter() - t0
tokens = sum(len(r["ids"]) for r in rows)
print(f"smoke: {len(p)} predictions, {dt:.1f} s for 2 epochs + 1 pass over {tokens} tokens: "
      f"{3 * tokens / dt:.0f} tokens/s; peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
PYEOF
  exit $?
fi
gguf=${1:?GGUF file}
out=${2:?output folder}
MODEL=smollm2-135m-instruct
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p "$out"
if [ ! -f /tmp/lora_prepared ]; then
  "$PY" scripts/gpu/prepare_gpu_model.py --name "$MODEL" --gguf "$gguf" --sha256 "$SHA256" \
    --tokenizer .tok/smollm2 --check-ids .tok/smollm2_ids.json > "$out/prepare.log" 2>&1 \
    && touch /tmp/lora_prepared || { tail -5 "$out/prepare.log"; exit 2; }
fi
timeout "$(left)" "$PY" scripts/studies/lora_step_verifier.py train --device cuda --out "$out" \
  --time-limit "$(( $(left) - 20 ))" 2>&1 | grep -v "Loading weights" | tee "$out/train.log"
