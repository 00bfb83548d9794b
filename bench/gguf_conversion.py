"""``python -m bench.gguf_conversion``: a model's one-time GGUF conversion, transformers' route as it comes
against the same route with each file parsed once (``grade.models.models._gguf_read_once``), side by side.

Each round converts every model twice, each time in a fresh process into an empty folder (imports included,
as on a first load), the two routes alternating; the two conversions' files must be byte for byte the same.

    python -m bench.gguf_conversion [--models smollm2-135m-instruct ...] [--repeats 1] [--out bench/results/gguf_conversion]
"""

from __future__ import annotations

import argparse
import filecmp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, machine, table, write_json

MODELS = ("smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-1.5b-instruct")

# the conversion only, in a process of its own; "plain" takes the parse-once context away
CONVERT = """
import contextlib, sys
from pathlib import Path
from grade.models import embedded, models
if sys.argv[1] == "plain":
    models._gguf_read_once = contextlib.nullcontext
models._convert_gguf(embedded.EMBEDDED_MODELS[sys.argv[2]].locate_gguf(), Path(sys.argv[3]), None)
"""


def _convert(route: str, model: str, target: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", CONVERT, route, model, str(target)], check=True, cwd=ROOT,
                   env={**os.environ, "TQDM_DISABLE": "1"})
    return time.perf_counter() - start


def _same_files(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir())
    _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    return names == sorted(p.name for p in b.iterdir()) and not mismatch and not errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gguf_conversion")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    rows = []
    for model in args.models:
        seconds: dict[str, list[float]] = {"plain": [], "read once": []}
        same = True
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as scratch:
                folders = {route: Path(scratch) / route.replace(" ", "_") for route in seconds}
                for route, folder in folders.items():
                    seconds[route].append(_convert("plain" if route == "plain" else "once", model, folder))
                same = same and _same_files(folders["plain"], folders["read once"])
        plain, once = (statistics.median(seconds[r]) for r in ("plain", "read once"))
        rows.append({"model": model, "plain s": round(plain, 1), "read once s": round(once, 1),
                     "read once / plain": round(once / plain, 2), "same files": same})
        print(rows[-1], flush=True)
    print(table(rows, list(rows[0])))
    write_json(args.out / "gguf_conversion.json", {"machine": machine(), "load_before": load_before,
                                                    "load_after": os.getloadavg(), "repeats": args.repeats,
                                                    "rows": rows})
    return 0 if all(r["same files"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
