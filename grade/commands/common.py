"""Arguments shared by several commands."""

from __future__ import annotations

import argparse

from ..models import DEFAULT_MODEL, EMBEDDED_MODELS


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", default=DEFAULT_MODEL,
        help=f"embedded model ({', '.join(EMBEDDED_MODELS)}), a model folder, a .gguf file or a hub id",
    )
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--dtype", default=None, help="float32 (CPU default), bfloat16 (GPU default), float16")
    parser.add_argument("--trust-remote-code", action="store_true", help="let transformers run the model's own code")


def load_model_from_args(args: argparse.Namespace, progress=None):
    from ..models import load_model

    return load_model(args.model, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code, progress=progress)
