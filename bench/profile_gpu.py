"""Where the time of one GRADE_pre analysis goes on a GPU at n = 512: wall time per stage (low-memory
mode on and off, the floor beside them), then torch.profiler tables of both. `python -m bench.profile_gpu`
(random Llama-3.1-8B shape, bf16; needs a CUDA GPU)."""
import time, torch
import grade
from bench.synthetic import random_llama, words
from bench.pipeline import floor_pass
lm = random_llama("cuda")
gen = torch.Generator().manual_seed(512)
ids = torch.randint(0, lm.model.config.vocab_size - 3, (512,), generator=gen)
prompt = words(ids.tolist())
def run(low):
    return grade.analyze(lm, "benchmark", prompt=prompt, spectra=False, low_memory=low)
for low in (True, False):
    for _ in range(3): run(low)
    torch.cuda.synchronize()
    ts = []
    stages = []
    for _ in range(10):
        t = time.perf_counter(); r = run(low); torch.cuda.synchronize(); ts.append(time.perf_counter() - t); stages.append(r.timings)
    ts.sort()
    med = {k: sorted(s[k] for s in stages)[5] for k in stages[0]}
    print("low_memory", low, "median", round(ts[5], 4), {k: round(v, 4) for k, v in med.items()}, flush=True)
ids_gpu = ids.unsqueeze(0).cuda()
for _ in range(3): floor_pass(lm, ids_gpu)
torch.cuda.synchronize(); ts=[]
for _ in range(10):
    t = time.perf_counter(); floor_pass(lm, ids_gpu); torch.cuda.synchronize(); ts.append(time.perf_counter()-t)
print("floor", round(sorted(ts)[5], 4))
from torch.profiler import profile, ProfilerActivity
for low in (True, False):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run(low); torch.cuda.synchronize()
    print("==== low_memory", low)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=50))
