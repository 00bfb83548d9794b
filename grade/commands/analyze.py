"""``python -m grade analyze``: GRADE features of one question, and with ``--probe`` the probe's verdict on it.

``--probe auto`` takes the shipped probe for ``--model`` and ``--task`` (the one the app's Home page uses) under
``--loss``; ``--probe PATH`` a probe file. The probe is loaded and checked against the model name, loss and
stable-rank variant before the model loads. The verdict gives the probability that the model can answer beside
the probe's measured test AUROC and accuracy and their chance rates.
"""

from __future__ import annotations

import argparse
import sys

from ..tasks.prompts import TASKS
from .common import add_model_arguments, load_model_from_args, positive_int


def register(sub) -> None:
    p = sub.add_parser("analyze", help="GRADE features of one question", description=__doc__)
    add_model_arguments(p)
    p.add_argument("--question", required=True)
    p.add_argument("--context", default=None, help="a supporting document placed before the question")
    p.add_argument("--task", default="qa", choices=TASKS, help="prompt style (default qa)")
    p.add_argument("--loss", choices=("pre", "pos"), default="pre")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--response", default=None, help="response to score under --loss pos")
    group.add_argument("--generate", action="store_true", help="score the model's own greedy answer (pos)")
    p.add_argument("--steps", action="store_true", help="pos: one loss per punctuation-delimited step")
    p.add_argument("--srank", choices=("paper", "sum", "squared"), default="paper")
    p.add_argument("--max-new-tokens", type=positive_int, default=None,
                   help="--generate: answer length in tokens (default: the task's, as in its labels; at most "
                        "what the context leaves)")
    p.add_argument("--max-tokens", type=positive_int, default=4096, help="refuse longer inputs (default 4096)")
    p.add_argument("--fast", action="store_true", help="stable ranks only (no spectra, no token scores)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--save", default=None, help="also save the full result (JSON) to this file")
    p.add_argument("--probe", default=None, metavar="PATH|auto",
                   help="also give this probe's verdict: a probe file, or 'auto' for the shipped probe of --model, "
                        "--task and --loss")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..common.errors import InputError
    from ..common.io import check_output_file
    from ..common.visible import validate_question
    from ..models.embedded import check_model_reference

    # Everything that can be checked without the model is checked before the slow load, and before torch's import.
    validate_question(args.question)
    check_model_reference(args.model)
    if args.loss == "pre" and (args.response is not None or args.generate or args.steps):
        raise InputError("--response, --generate and --steps score an answer: they need --loss pos")
    if args.generate and args.max_new_tokens is not None and args.max_new_tokens >= args.max_tokens:
        raise InputError(f"--max-new-tokens {args.max_new_tokens} leaves no room for the prompt within "
                         f"--max-tokens {args.max_tokens}")
    if args.save:
        check_output_file(args.save, "--save file")
    probe, probe_name = _probe_from_args(args)
    from ..gradients.analysis import analyze

    progress = (lambda line: print(line, file=sys.stderr)) if not args.json else None
    lm = load_model_from_args(args, progress)
    result = analyze(
        lm,
        args.question,
        context=args.context,
        task=args.task,
        loss=args.loss,
        response=args.response,
        generate=args.generate,
        steps=args.steps,
        srank=args.srank,
        spectra=not args.fast,
        max_new_tokens=args.max_new_tokens,
        max_tokens=args.max_tokens,
    )
    if args.save:
        result.save(args.save)
    verdict = None
    if probe is not None:
        from ..verdict.verdict import probe_verdict

        verdict = probe_verdict(probe, result, name=probe_name, lm=lm)
    if args.json:
        data = result.to_dict()
        summary = {k: data[k] for k in ("model", "loss", "srank", "task", "question", "context", "response",
                                        "input_ids", "response_start", "loss_value", "layers", "timings")}
        summary["grade"] = result.grade
        summary["steps"] = [
            {"text": s.text, "start": s.start, "end": s.end, "rank_ratio": [float(x) for x in s.rank_ratio]}
            for s in result.steps
        ]
        if verdict is not None:
            summary["verdict"] = verdict.to_dict()
        import json

        print(json.dumps(summary))
        return 0
    print(f"model {result.model}   loss {result.loss} = {result.loss_value:.4f}   tokens {len(result.input_ids)}")
    if result.response is not None:
        print(f"response: {result.response}")
    print(f"{'layer':>5} {'srank_h':>10} {'srank_g':>10} {'rank_ratio':>11}")
    for row in result.layer_table():
        print(f"{row['layer']:>5} {row['srank_h']:>10.4f} {row['srank_g']:>10.4f} {row['rank_ratio']:>11.4f}")
    print(f"mean rank ratio {result.grade:.4f}   ({result.timings['total_s']:.2f} s)")
    if verdict is not None:
        print(verdict.describe())
    return 0


def _probe_from_args(args: argparse.Namespace):
    """(probe, its name) for ``--probe``, loaded and checked against the model name, loss and srank variant
    before the model loads (the layer count is checked with the model); (None, None) without ``--probe``."""
    if not args.probe:
        return None, None
    from ..verdict.probe import Probe
    from ..verdict.verdict import resolve_probe

    weights = resolve_probe(args.probe, args.model, task=args.task, loss=args.loss)
    probe = Probe.load(weights)
    probe.check_compatible(args.model, loss=args.loss, srank=args.srank)
    return probe, str(probe.metadata.get("name") or weights.stem)
