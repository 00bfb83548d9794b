#!/bin/bash
# Ran on the device tool (2x H200, 32 cores) from the repo root with .devcarry/ carried: ray_site.zip (the
# ray 2.60.0 cp312 wheel without ray/jars, ray/rllib and the dashboard front-end, to fit the 64 MiB limit),
# wheels of jsonschema, jsonschema-specifications, referencing, rpds-py, SmolLM2 config + tokenizer files
# (model/) and 200 TriviaQA rows (datasets/triviaqa/dev.jsonl). Kept as the record of how the numbers were made.
# One device call: install Ray (carried), build a random-weight SmolLM2-135M, then
# (1) the 2-GPU device_map test, (2) extract --engine ray --gpus-per-worker 2 vs one GPU,
# (3) scaling: CPU workers 1/2/4 x 1 thread, GPU workers 1/2 x 1 GPU (and 4 x 0.5).
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
REPO=$(pwd); C=$REPO/.devcarry
python3 - <<PY
import zipfile, os
z = zipfile.ZipFile("$C/ray_site.zip")
for i in z.infolist():
    path = z.extract(i, "/tmp/site")
    mode = (i.external_attr >> 16) & 0o777
    if mode: os.chmod(path, mode)
PY
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $C/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$REPO GRADE_DATASETS_DIR=$C/datasets GRADE_CACHE_DIR=/tmp/gcache TRANSFORMERS_VERBOSITY=error
python3 -c "import ray, torch, transformers, accelerate, pyarrow; print('ray', ray.__version__, 'torch', torch.__version__, 'tf', transformers.__version__, 'gpus', torch.cuda.device_count(), 'cpus', __import__('os').cpu_count())"
nvidia-smi --query-gpu=name,memory.total --format=csv
python3 -c "import sys; sys.path.insert(0,'bench'); from bench_scaling import random_model; from pathlib import Path; random_model(Path('$C/model'), Path('/tmp/model'))" || exit 1
echo "== 2-GPU device_map test"
GRADE_TEST_MODEL=/tmp/model timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_distributed.py -k two_gpus 2>&1 | tail -15
echo "== extract --engine ray --gpus-per-worker 2 vs local cuda"
python3 - <<PY
import json
rows=[json.loads(l) for l in open("$C/datasets/triviaqa/dev.jsonl")][:16]
open("/tmp/labels.jsonl","w").write("".join(json.dumps({"id":r["id"],"dataset":"triviaqa","question":r["question"],"label":i%2})+"\n" for i,r in enumerate(rows)))
PY
timeout 120 python3 -m grade extract --model /tmp/model --device cuda --dtype float32 --labels /tmp/labels.jsonl --out /tmp/one.parquet --quiet 2>&1 | tail -2
timeout 150 python3 -m grade extract --model /tmp/model --device cuda --dtype float32 --labels /tmp/labels.jsonl --out /tmp/two.parquet --quiet --engine ray --workers 1 --gpus-per-worker 2 2>&1 | grep -v WARNING | tail -3
python3 -c "
import numpy as np; from grade.batch.features import load_features as L
a=L('/tmp/one.parquet').sort_values('id'); b=L('/tmp/two.parquet').sort_values('id')
print('rows', len(a), len(b), 'max |diff| rank_ratio', np.abs(np.stack(a.rank_ratio)-np.stack(b.rank_ratio)).max())"
echo "== scaling CPU"
timeout 170 python3 bench/bench_scaling.py --model /tmp/model --questions 48 --workers 1 2 4 --out $OUT/scaling_cpu.json 2>&1 | grep -v WARNING | tail -9
echo "== scaling GPU"
timeout 150 python3 bench/bench_scaling.py --model /tmp/model --questions 160 --workers 1 2 --gpus-per-worker 1 --chunk-size 8 --out $OUT/scaling_gpu.json 2>&1 | grep -v WARNING | tail -8
