"""The tokenizer files that travel to a GPU machine beside an embedded model's GGUF (CPU machine side):

    python scripts/gpu/carry_tokenizer.py --name smollm2-135m-instruct --out .tok/smollm2

Writes ``OUT/`` (the tokenizer as this machine's transformers saves it, ``tokenizer.json`` xz-compressed) and
``OUT_ids.json`` (the ids of a few texts), which ``scripts/gpu/prepare_gpu_model.py --tokenizer OUT --check-ids
OUT_ids.json`` checks there. Why: the GPU machines' transformers converts some GGUF vocabularies differently, and a
tokenizer that differs in one id would make features incomparable (prepare_gpu_model.py says more). ``.tok/`` is
not tracked: it is made again from the model's conversion cache (``grade.load_model(NAME)`` fills it).
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import sys
from pathlib import Path

TEXTS = (
    "Janet’s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for her friends "
    "every day with four. How much in dollars does she make every day at the farmers' market?",
    "Step 1: 16 - 3 - 4 = 9 eggs are left. Step 2: 9 * $2 = $18.\n\nThe answer is 18.",
    "Let $f(x) = \\frac{x^2 + 1}{x - 1}$. Find $f(2)$: $\\boxed{5}$.",
    "What is the capital of France?",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="embedded model name (grade.models.models.EMBEDDED_MODELS)")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from grade.common.io import cache_dir
    from grade.models.embedded import EMBEDDED_MODELS

    if args.name not in EMBEDDED_MODELS:
        print(f"error: unknown embedded model {args.name!r}", file=sys.stderr)
        return 2
    folder = cache_dir() / "models" / args.name
    if not (folder / "tokenizer.json").is_file():
        print(f"error: {folder} holds no converted tokenizer: run python -c \"import grade; grade.load_model("
              f"'{args.name}')\" first", file=sys.stderr)
        return 2
    tokenizer = AutoTokenizer.from_pretrained(folder)
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    tokenizer.save_pretrained(args.out)
    plain = args.out / "tokenizer.json"
    with plain.open("rb") as src, lzma.open(plain.with_suffix(".json.xz"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    plain.unlink()
    ids = {text: tokenizer(text)["input_ids"] for text in TEXTS}
    args.out.with_name(args.out.name + "_ids.json").write_text(json.dumps(ids, ensure_ascii=False), encoding="utf-8")
    print(f"{args.out}: {sum(f.stat().st_size for f in args.out.iterdir()) / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
