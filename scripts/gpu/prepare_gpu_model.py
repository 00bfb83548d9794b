"""Fill an embedded model's conversion cache on a machine whose transformers converts its GGUF
tokenizer differently: weights de-quantised there, tokenizer files brought from a machine with the
transformers version in requirements.txt.

Why: the GPU machines lent to this project carry transformers 5.17 and no network. 5.17 converts
Gemma-3's GGUF vocabulary to one token per character (grade.models.models refuses it), and a tokenizer that
differs in any id from the one the CPU machines use would make labels and features incomparable. So
the tokenizer is converted here (``AutoTokenizer.from_pretrained(folder, gguf_file=...)``, then
``save_pretrained``), carried there, and checked there against the ids listed in ``--check-ids``.

    python scripts/gpu/prepare_gpu_model.py --name qwen2.5-coder-1.5b-instruct --gguf /tmp/model.gguf \
        --tokenizer .tok/qwen [--check-ids ids.json]

The GGUF gets there in pieces small enough for one device call beside the tracked tree
(``scripts/gpu/gpu_pieces.sh``), appended in name order to one file and checked by ``--sha256``.

Afterwards ``grade.load_model(NAME)`` (and ``python -m grade label --model NAME``) read the cache
``$GRADE_CACHE_DIR/models/NAME`` without looking for the model's packages.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import shutil
import sys
import tempfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="embedded model name (grade.models.models.EMBEDDED_MODELS)")
    parser.add_argument("--gguf", required=True, type=Path)
    parser.add_argument("--sha256", default=None, help="expected sha256 of the GGUF file")
    parser.add_argument("--tokenizer", required=True, type=Path,
                        help="folder of tokenizer files saved by the requirements.txt transformers (tokenizer.json may be .xz)")
    parser.add_argument("--check-ids", type=Path, default=None,
                        help="JSON {text: ids} made on the CPU machine: the carried tokenizer must reproduce them here")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grade.common.io import cache_dir
    from grade.models.embedded import EMBEDDED_MODELS
    from grade.models.models import check_tokenizer_is_not_character_level

    if args.name not in EMBEDDED_MODELS:
        print(f"error: unknown embedded model {args.name!r}", file=sys.stderr)
        return 2
    if args.sha256:
        digest = hashlib.sha256()
        with args.gguf.open("rb") as handle:
            while block := handle.read(1 << 24):
                digest.update(block)
        if digest.hexdigest() != args.sha256:
            print(f"error: {args.gguf} has sha256 {digest.hexdigest()}, expected {args.sha256}", file=sys.stderr)
            return 2
    target = cache_dir() / "models" / args.name
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=args.name + ".", dir=target.parent))
    try:
        for file in args.tokenizer.iterdir():
            if file.name.endswith(".xz"):
                with lzma.open(file) as src, open(tmp / file.name[:-3], "wb") as dst:
                    shutil.copyfileobj(src, dst)
            else:
                shutil.copy(file, tmp / file.name)
        tokenizer = AutoTokenizer.from_pretrained(tmp)
        check_tokenizer_is_not_character_level(tokenizer, str(args.tokenizer))
        if args.check_ids:
            for text, ids in json.loads(args.check_ids.read_text(encoding="utf-8")).items():
                got = tokenizer(text)["input_ids"]
                if got != ids:
                    print(f"error: the carried tokenizer gives other ids here for {text[:40]!r}", file=sys.stderr)
                    return 2
        model = AutoModelForCausalLM.from_pretrained(str(args.gguf.parent), gguf_file=args.gguf.name, dtype=torch.float32)
        model.hf_quantizer = None  # already de-quantised; lets save_pretrained write the weights
        model.config.__dict__.pop("quantization_config", None)
        model.save_pretrained(tmp)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{args.name}: cached at {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
