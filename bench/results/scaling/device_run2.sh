#!/bin/bash
# Ran on the device tool (2x H200, 32 cores) from the repo root with .devcarry/ carried: ray_site.zip (the
# ray 2.60.0 cp312 wheel without ray/jars, ray/rllib and the dashboard front-end, to fit the 64 MiB limit),
# wheels of jsonschema, jsonschema-specifications, referencing, rpds-py, SmolLM2 config + tokenizer files
# (model/) and 200 TriviaQA rows (datasets/triviaqa/dev.jsonl). Kept as the record of how the numbers were made.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
REPO=$(pwd); C=$REPO/.devcarry
if [ ! -d /tmp/site/ray ]; then python3 - <<PY
import zipfile, os
z = zipfile.ZipFile("$C/ray_site.zip")
for i in z.infolist():
    path = z.extract(i, "/tmp/site")
    mode = (i.external_attr >> 16) & 0o777
    if mode: os.chmod(path, mode)
PY
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $C/whl/*.whl || exit 1; fi
export PYTHONPATH=/tmp/site:$REPO GRADE_DATASETS_DIR=$C/datasets GRADE_CACHE_DIR=/tmp/gcache TRANSFORMERS_VERBOSITY=error
nvidia-smi --query-gpu=name --format=csv,noheader
[ -d /tmp/model ] || python3 -c "import sys; sys.path.insert(0,'bench'); from bench_scaling import random_model; from pathlib import Path; random_model(Path('$C/model'), Path('/tmp/model'))" || exit 1
echo "== scaling GPU"
timeout 200 python3 bench/bench_scaling.py --model /tmp/model --questions 160 --workers 1 2 --gpus-per-worker 1 --chunk-size 8 --out $OUT/scaling_gpu2.json 2>&1 | grep -v WARNING | tail -9
timeout 100 python3 bench/bench_scaling.py --model /tmp/model --questions 160 --workers 4 --gpus-per-worker 0.5 --chunk-size 8 --no-local --out $OUT/scaling_gpu4.json 2>&1 | grep -v WARNING | tail -5
echo "== scaling CPU"
timeout 250 python3 bench/bench_scaling.py --model /tmp/model --questions 64 --workers 1 2 4 --chunk-size 4 --out $OUT/scaling_cpu2.json 2>&1 | grep -v WARNING | tail -9
