"""The precomputed results the app ships for its examples, per embedded model, computed by the app's own code.

    python scripts/build/build_example_results.py [--model smollm2-135m-instruct ...] [--only home|trace|projections]

* **home**: every Home example (:func:`studio.workflows.home_examples`) analysed as Home's Analyze button does
  (:func:`studio.workflows.analyze_question` with the default probe for the question's task, the shipped
  detectors, the default answer length and the local answer-length cap), on the CPU in the model's default
  dtype (float32), as the app loads it. Of the hidden states only the layers the reference set stores are kept
  (float16): Projections draws the question there; the other layers load as NaN.
  The request records what generated the answer (llama.cpp and torch answers can part after some tokens) and
  the app uses a result only with the same generator, so each example is built with every generator the app may
  answer with here: torch (the app before ``make run``'s background build of llama-cpp-python is done, and
  ``make test``'s environment) and, for Qwen where llama-cpp-python is importable, llama.cpp. Results of a
  generator this run could not use are kept.
* **trace**: the Reasoning trace page's reference solutions of the model's own problems and of the problem the
  page opens on (:func:`studio.workflows.analyze_trace`). The model's generated traces are not shipped.
* **projections**: Projections' t-SNE and UMAP of the shipped reference set for the model (loss ``pre``, the
  layer the page opens on, all datasets), hidden states and GRADE features.

Each result is written to ``studio/assets/examples/<model>/`` as ``<kind>-<hash>.safetensors`` + ``.json``,
named by a hash of the request it answers (:mod:`studio.analysis_cache`), with the request, the machine and the
versions recorded beside it; results of the rebuilt kinds that no longer match a request are removed. A changed
probe, detector or setting therefore needs a rebuild: the app then simply computes (and
``tests/test_shipped_examples.py`` fails for SmolLM2). Spectra, features and token scores are stored as float32.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("home", "trace", "projections")
DEFAULT_MODELS = ("smollm2-135m-instruct", "qwen2.5-coder-1.5b-instruct", "gemma-3-270m")


def machine() -> str:
    """One line naming where a result was computed."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()}-core {cpu}, {platform.system()}"


def origin(request: dict) -> dict:
    import torch

    import grade

    return {"request": request, "by": "scripts/build/build_example_results.py", "computed_on": machine(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "grade": grade.__version__}


def build_home(lm, say, missing: bool = False) -> tuple[list[Path], set[str]]:
    """The Home examples' results, written; returns their paths and the generators their requests name. With
    ``missing``, a result already shipped for its exact request is kept as it is, not recomputed."""
    from grade.verdict.detectors import detectors_for
    from studio.analysis_cache import home_request, shipped_path
    from grade.batch.features import load_features
    from studio.resources import (DETECTORS_DIR, REFERENCE_FEATURES, ModelSpec, default_probe, list_probes,
                                  load_detectors, load_probe, reference_set)
    from studio.served import LOCAL_LIMITS
    from studio.workflows import analyze_question, home_answer_tokens, home_examples

    detectors, detectors_problem = load_detectors(lm.name, DETECTORS_DIR)
    probes, written, generators = list_probes(), [], set()
    frame = load_features(REFERENCE_FEATURES)
    label = ModelSpec(source=lm.name, device="cpu", dtype="auto").label
    for generator in answer_generators(lm):
        lm.generation_backend = generator
        try:
            for name, (question, context, task) in home_examples(lm.name).items():
                info = default_probe(lm.name, probes, task=task)
                if info is None:
                    say(f"  skipped (no probe for {task}): {name}")
                    continue
                request = home_request(lm, question, context, task, home_answer_tokens(task), LOCAL_LIMITS.answer_tokens,
                                       info.path, detectors_for(lm.name, DETECTORS_DIR))
                path = shipped_path(request)
                generators.add(request["generator"])
                if missing and path.with_name(path.name + ".json").is_file():
                    written.append(path)
                    continue
                start = time.perf_counter()
                analysis = analyze_question(lm, question, context=context, task=task, probe=load_probe(info.path),
                                            probe_info=info, max_new_tokens=home_answer_tokens(task), model_label=label,
                                            limits=LOCAL_LIMITS, detectors=detectors)
                analysis.detectors_problem = detectors_problem  # as Home sets it
                analysis.origin = origin(request)
                # Of the hidden states only the layers Projections draws the question on (the reference set's).
                reference = reference_set(frame, lm.name, analysis.result.loss)
                analysis.save(path, half=("last_hidden",), hidden_layers=reference.hidden_layers if reference else [])
                written.append(path)
                say(f"  {time.perf_counter() - start:6.1f} s  {path.name}  {request['generator']}: {name}")
        finally:
            lm.generation_backend = None
    return written, generators


def answer_generators(lm) -> list:
    """What Home may answer with for ``lm`` in this environment: the torch loop, and llama.cpp where it generates
    for ``lm`` here (:func:`grade.models.backends.fast_backend`)."""
    from grade.models.backends import fast_backend
    from grade.models.generation import TorchBackend

    fast = fast_backend(lm)
    return [TorchBackend(lm)] + ([fast] if fast is not None else [])



def build_traces(lm, say) -> list[Path]:
    from studio.analysis_cache import shipped_path, trace_request
    from studio.served import LOCAL_LIMITS
    from studio.workflows import analyze_trace, trace_example_problems

    written = []
    for row in trace_example_problems(lm.name):
        solution = (row.get("solution") or "").strip()
        if not solution:
            continue
        start = time.perf_counter()
        trace = analyze_trace(lm, row["question"], solution, title="Trace B", limits=LOCAL_LIMITS)
        request = trace_request(lm, row["question"], solution)
        trace.origin = origin(request)
        path = shipped_path(request)
        trace.save(path)
        written.append(path)
        say(f"  {time.perf_counter() - start:6.1f} s  {path.name}  {len(trace.result.steps)} steps: {row['question'][:60]}")
    return written


def build_projections(model: str, say) -> list[Path]:
    from studio.projections import embed
    from studio.resources import REFERENCE_FEATURES, reference_set
    from studio.analysis_cache import embedding_request, save_embedding

    from grade.batch.features import load_features

    reference = reference_set(load_features(REFERENCE_FEATURES), model, "pre")
    if reference is None:
        say(f"  no reference rows for {model}")
        return []
    stored = len(reference.hidden_layers) // 2  # the layer the page opens on
    written = []
    for kind in ("hidden", "grade"):
        if kind == "hidden" and reference.hidden is None:
            continue
        X = reference.hidden[:, stored] if kind == "hidden" else reference.ratios
        for method in ("t-SNE", "UMAP"):
            start = time.perf_counter()
            coords = embed(X, method).coords
            request = embedding_request(model, X, method)
            path = save_embedding(request, coords, origin(request))
            written.append(path)
            say(f"  {time.perf_counter() - start:6.1f} s  {path.name}  {method} of {kind} ({X.shape[0]} x {X.shape[1]})")
    return written


def prune(folder: Path, kind: str, keep: list[Path], say, generators: set[str] | None = None) -> None:
    """Remove the files of ``kind`` in ``folder`` that this run did not write (requests no longer asked), but
    not those answered by a generator outside ``generators`` (the ones this run used; None: any)."""
    import json

    names = {p.name for p in keep}
    for path in sorted(folder.glob(f"{kind}-*")):
        stem = path.name.split(".")[0]
        if stem in names:
            continue
        if generators is not None:
            described = path.with_name(stem + ".json")
            try:
                used = json.loads(described.read_text())["origin"]["request"].get("generator")
            except (OSError, ValueError, KeyError, TypeError):
                used = None
            if used is not None and used not in generators:
                continue
        path.unlink()
        say(f"  removed {path.name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help="embedded model (repeat; default: all three)")
    parser.add_argument("--only", choices=KINDS, action="append", help="build only these kinds (repeat)")
    parser.add_argument("--missing", action="store_true",
                        help="home: compute only the examples without a shipped result (the others are kept as shipped)")
    args = parser.parse_args()
    os.environ["GRADE_SHIPPED_RESULTS"] = "1"

    import grade
    from grade.verdict.artifacts import model_key
    from studio.analysis_cache import shipped_folder

    def say(line: str) -> None:
        print(line, flush=True)

    kinds = args.only or list(KINDS)
    for model in args.model or DEFAULT_MODELS:
        if model not in grade.EMBEDDED_MODELS:
            print(f"{model!r} is not an embedded model ({', '.join(grade.EMBEDDED_MODELS)})", file=sys.stderr)
            return 2
        folder = shipped_folder() / model_key(model)
        lm = grade.load_model(model, device="cpu") if {"home", "trace"} & set(kinds) else None
        say(f"{model} on {machine()}, load average {os.getloadavg()[0]:.1f}")
        for kind in kinds:
            generators = None
            if kind == "home":
                written, generators = build_home(lm, say, args.missing)
            elif kind == "trace":
                written = build_traces(lm, say)
            else:
                written = build_projections(model, say)
            prune(folder, kind, written, say, generators)
        total = sum(f.stat().st_size for f in folder.glob("*")) if folder.is_dir() else 0
        say(f"{model}: {total / 1024:.0f} KiB in {folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
