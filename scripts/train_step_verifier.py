"""Train and score the step verifier on the cached features of ``scripts/step_verifier_features.py``.

    python scripts/train_step_verifier.py --reader smollm2-135m-instruct [--ship]

Every variant is scored on the annotated **dev** traces out of fold (5 folds by problem id; a fold's model
never saw that fold's problems, not even with an injected error), its threshold chosen there to maximise the
first-error F1. The variant with the best dev F1 is then trained on every training trace and the whole dev
half, and every variant and baseline is scored once on the annotated **test** half (never used before).
Writes ``results/step_errors/<traces model>/verifier_<reader>[_<tag>].json`` and ``.md``; ``--files`` keeps the
annotated traces of some annotation files only (dev and test alike). With ``--ship`` the chosen verifier goes to
``grade/assets/step_verifier/<reader>.{json,safetensors}`` with its provenance and numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

# one BLAS thread: on a shared 2-core machine threaded BLAS is many times slower, not faster
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grade.steps.locate import check_scores  # noqa: E402
from grade.steps.verifier import (SCALARS, StepVerifier, TraceFeatures,  # noqa: E402
                                  first_error_metrics)

TRACES_MODEL = "qwen2.5-coder-1.5b-instruct"
NO_CHECK = tuple(n for n in SCALARS if not n.startswith("check"))
#: name -> (StepVerifier settings, training sources): every variant tried.
VARIANTS = {
    "hidden(0.75,1.0)+scalars, cumulative, injected+dev": (dict(layers=(3, 5), n_components=32, C=0.1), "all"),
    "hidden(0.75,1.0)+scalars, cumulative, injected only": (dict(layers=(3, 5), n_components=32, C=0.1), "injected"),
    "hidden(0.75,1.0)+scalars, cumulative, dev only": (dict(layers=(3, 5), n_components=32, C=0.1), "dev"),
    "hidden(0.75,1.0)+scalars, first-step target, injected+dev": (dict(layers=(3, 5), n_components=32, C=0.1,
                                                                       target="first"), "all"),
    "hidden(0.5)+scalars, cumulative, injected+dev": (dict(layers=(1,), n_components=32, C=0.1), "all"),
    "hidden(0.75,1.0)+scalars, 8 components, injected+dev": (dict(layers=(3, 5), n_components=8, C=0.1), "all"),
    "hidden(0.75,1.0)+scalars, C=0.01, injected+dev": (dict(layers=(3, 5), n_components=32, C=0.01), "all"),
    "hidden(0.75,1.0) without the check, injected+dev": (dict(layers=(3, 5), n_components=32, C=0.1,
                                                              scalars=NO_CHECK), "all"),
    "scalars only (check + surprisal), cumulative, injected+dev": (dict(layers=(), C=0.1), "all"),
}


def load(reader: str):
    folder = ROOT / "data/step_verifier" / reader
    rows = [json.loads(line) for line in (folder / "traces.jsonl").read_text().splitlines()]
    have = []
    for r in rows:
        path = folder / f"{r['key']}.npz"
        if path.is_file():
            r["features"] = TraceFeatures.load(path)
            have.append(r)
    return rows, have


def fold_of(problem: str, n: int = 5) -> int:
    import hashlib

    return int(hashlib.md5(problem.encode()).hexdigest(), 16) % n


def fit(settings: dict, rows: list[dict], dev_weight: float = 2.0) -> StepVerifier:
    weights = [dev_weight if r["source"] == "annotated" else 1.0 for r in rows]
    return StepVerifier(**settings).fit([r["features"] for r in rows], [r["first_wrong"] for r in rows], weights)


def training_rows(sources: str, train: list[dict], dev: list[dict]) -> list[dict]:
    return {"all": train + dev, "injected": train, "dev": dev}[sources]


def predictions(verifier: StepVerifier, rows: list[dict]) -> list[np.ndarray]:
    return [verifier.predict_proba(r["features"]) for r in rows]


def score(verifier: StepVerifier, probs: list[np.ndarray], rows: list[dict], n_boot: int) -> dict:
    return first_error_metrics([verifier.suspect(p) for p in probs], [verifier.step_scores(p) for p in probs],
                               [r["first_wrong"] for r in rows], n_boot=n_boot)


def baselines(rows: list[dict], n_boot: int) -> dict:
    """The check's and the default locator's answers on the same traces (the reader's surprisal)."""
    out = {}
    for r in rows:
        f = r["features"]
        r["_check"] = check_scores(f.findings)
        r["_surprisal"] = f.scalars[:, SCALARS.index("surprisal_max")]
    first_flag = [int(np.flatnonzero(r["_check"])[0]) if r["_check"].any() else None for r in rows]
    wrong = [r["first_wrong"] for r in rows]
    from grade.steps.locate import _rank01

    loc = [10.0 * r["_check"] + _rank01(r["_surprisal"]) for r in rows]
    out["check+surprisal (the suspect_step today; never says none)"] = first_error_metrics(
        [int(np.argmax(s)) for s in loc], loc, wrong, n_boot=n_boot)
    out["check alone, none where it finds nothing"] = first_error_metrics(first_flag, [r["_check"] for r in rows],
                                                                         wrong, n_boot=n_boot)
    out["surprisal_max alone (never says none)"] = first_error_metrics(
        [int(np.argmax(r["_surprisal"])) for r in rows], [r["_surprisal"] for r in rows], wrong, n_boot=n_boot)
    return out


def check_everywhere(rows: list[dict], split: str, n_boot: int, folder=None) -> dict:
    """The model-free check (none where it finds nothing) on every annotated trace of ``split``, features or not
    (``folder``: another copy of the annotations, e.g. files not yet in this checkout)."""
    from grade.gradients.losses import split_steps
    from grade.steps.real_errors import annotated_traces
    from grade.steps.step_checks import check_steps

    traces = [t for t in annotated_traces(folder=folder) if t.split == split]
    out = {}
    for file in sorted({t.file for t in traces}):
        part = [t for t in traces if t.file == file]
        scores = [check_scores([[f.to_dict() for f in found] for found in
                                check_steps(t.question, [t.trace[a:b] for a, b in split_steps(t.trace)])])
                  for t in part]
        first = [int(np.flatnonzero(c)[0]) if c.any() else None for c in scores]
        out[file] = first_error_metrics(first, scores, [t.first_wrong for t in part], n_boot=n_boot)
    return out


def cell(m: dict) -> str:
    if m is None or not np.isfinite(m["value"]):
        return "-"
    return f"{m['value']:.2f} [{m['low']:.2f}, {m['high']:.2f}]"


def table(results: dict, title: str, chosen: str | None = None) -> list[str]:
    any_row = next(iter(results.values()))
    lines = [f"### {title} (erroneous n = {any_row['n_wrong']}, correct n = {any_row['n_correct']}, "
             f"{any_row['steps_mean']:.1f} steps on average on the erroneous ones)", "",
             f"Chance: F1 {any_row['f1']['chance']:.2f}, exact first step {any_row['wrong_exact']['chance']:.2f} at "
             f"\"none\" accuracy {any_row['none_acc']['chance']:.2f} (the best trace-blind rule), top-1 "
             f"{any_row['top1']['chance']:.2f}, top-3 {any_row['top3']['chance']:.2f}.", "",
             "| method | F1 | exact first wrong step | \"none\" on correct traces | top-1 | top-3 |",
             "|---|---|---|---|---|---|"]
    for name, m in results.items():
        label = f"**{name}** (chosen on dev)" if name == chosen else name
        lines.append(f"| {label} | " + " | ".join(cell(m[k]) for k in ("f1", "wrong_exact", "none_acc", "top1", "top3"))
                     + " |")
    return lines + [""]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reader", default="smollm2-135m-instruct")
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--ship", action="store_true")
    p.add_argument("--files", nargs="+", default=None, metavar="NAME",
                   help="annotation files whose traces form dev and test (e.g. gsm8k_qwen.a gsm8k_qwen.b; default all)")
    p.add_argument("--tag", default="", help="added to the results' file names (a variant's run)")
    p.add_argument("--machine", default=None)
    p.add_argument("--more-annotations", default=None,
                   help="a folder of annotation files for the model-free check's table (e.g. files not yet copied here)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    rows, have = load(args.reader)
    if args.files:
        wanted = {f.split(".jsonl")[0] for f in args.files}
        rows = [r for r in rows if r["source"] != "annotated" or r["file"].split(".jsonl")[0] in wanted]
        have = [r for r in have if r["source"] != "annotated" or r["file"].split(".jsonl")[0] in wanted]
    dev = [r for r in have if r["source"] == "annotated" and r["split"] == "dev"]
    test = [r for r in have if r["source"] == "annotated" and r["split"] == "test"]
    test_problems = {r["problem"] for r in rows if r["source"] == "annotated" and r["split"] == "test"}
    train = [r for r in have if r["source"] != "annotated"]
    if any(r["problem"] in test_problems for r in train + dev):
        raise SystemExit("a training trace shares a problem with an annotated test row")
    print(f"features: {len(have)} of {len(rows)} traces; dev {len(dev)}, test {len(test)}, injected {len(train)}")
    dev_results, thresholds = {}, {}
    for name, (settings, sources) in VARIANTS.items():
        probs: list = [None] * len(dev)
        for k in range(5):
            held = {r["problem"] for r in dev if fold_of(r["problem"]) == k}
            fit_rows = [r for r in training_rows(sources, train, [r for r in dev if r["problem"] not in held])
                        if r["problem"] not in held]
            verifier = fit(settings, fit_rows)
            for i, r in enumerate(dev):
                if r["problem"] in held:
                    probs[i] = verifier.predict_proba(r["features"])
        chosen = verifier.choose_threshold(probs, [r["first_wrong"] for r in dev])
        thresholds[name] = chosen["threshold"]
        dev_results[name] = score(verifier, probs, dev, args.n_boot)
        print(f"dev {name}: F1 {dev_results[name]['f1']['value']:.3f} exact "
              f"{dev_results[name]['wrong_exact']['value']:.3f} none {dev_results[name]['none_acc']['value']:.3f} "
              f"top1 {dev_results[name]['top1']['value']:.3f} tau {chosen['threshold']:.3f}", flush=True)
    dev_results.update(baselines(dev, args.n_boot))
    best = max(VARIANTS, key=lambda n: dev_results[n]["f1"]["value"])
    # the test half, once: every variant trained on everything it may see, its dev threshold kept
    test_results, final = {}, {}
    for name, (settings, sources) in VARIANTS.items():
        verifier = fit(settings, training_rows(sources, train, dev))
        verifier.threshold = thresholds[name]
        final[name] = verifier
        test_results[name] = score(verifier, predictions(verifier, test), test, args.n_boot)
    test_results.update(baselines(test, args.n_boot))
    # per kind of error and per annotation file, the chosen verifier and the default locator
    chosen = final[best]
    probs = predictions(chosen, test)
    per_kind = {}
    for kind in sorted({r["kind"] for r in test if r["kind"]}):
        idx = [i for i, r in enumerate(test) if r["kind"] == kind]
        rows_k = [test[i] for i in idx]
        per_kind[kind] = {
            "verifier": first_error_metrics([chosen.suspect(probs[i]) for i in idx],
                                            [chosen.step_scores(probs[i]) for i in idx],
                                            [r["first_wrong"] for r in rows_k], n_boot=args.n_boot),
            **{k: v for k, v in baselines(rows_k, args.n_boot).items() if k.startswith("check+")}}
    per_file = {}
    for file in sorted({r["file"] for r in test}):
        idx = [i for i, r in enumerate(test) if r["file"] == file]
        per_file[file] = first_error_metrics([chosen.suspect(probs[i]) for i in idx],
                                             [chosen.step_scores(probs[i]) for i in idx],
                                             [test[i]["first_wrong"] for i in idx], n_boot=args.n_boot)
    everywhere = {split: check_everywhere(rows, split, args.n_boot, args.more_annotations)
                  for split in ("dev", "test")}
    machine = args.machine or f"{platform.processor() or platform.machine()} ({platform.node()})"
    results = {
        "reader": args.reader, "traces_model": TRACES_MODEL, "machine": machine, "files": args.files or "all",
        "counts": {"dev": len(dev), "test": len(test), "injected": len(train),
                   "injected_by_source": {s: sum(r["source"] == s for r in train)
                                          for s in ("injected own", "injected reference")}},
        "chosen": best, "thresholds": thresholds, "dev_out_of_fold": dev_results, "test": test_results,
        "test_per_kind": per_kind, "test_per_file": per_file, "check_alone_every_annotated_trace": everywhere,
        "variants": {n: {"settings": {**s, "scalars": list(s.get("scalars", SCALARS))}, "training": src}
                     for n, (s, src) in VARIANTS.items()},
        "seconds": time.perf_counter() - t0,
    }
    out = ROOT / "results/step_errors" / TRACES_MODEL
    name = f"verifier_{args.reader}" + (f"_{args.tag}" if args.tag else "")
    (out / f"{name}.json").write_text(json.dumps(results, indent=1, default=float) + "\n")
    md = [f"## Step verifier: reader {args.reader}, traces of {TRACES_MODEL} (`scripts/train_step_verifier.py`)", "",
          *table(dev_results, "dev half, out of fold (5 folds by problem id)", best),
          *table(test_results, "test half (scored once, threshold from dev)", best)]
    md += ["### test half per kind of error (erroneous traces only: exact / top-1 / top-3)", "",
           "| kind | n | verifier exact | verifier top-1 | verifier top-3 | check+surprisal top-1 | check+surprisal top-3 |",
           "|---|---|---|---|---|---|---|"]
    for kind, m in per_kind.items():
        v, b = m["verifier"], next(x for k, x in m.items() if k.startswith("check+"))
        md.append(f"| {kind} | {v['n_wrong']} | {cell(v['wrong_exact'])} | {cell(v['top1'])} | {cell(v['top3'])} | "
                  f"{cell(b['top1'])} | {cell(b['top3'])} |")
    md += ["", *table(per_file, "test half per annotation file, chosen verifier")]
    for split, per in everywhere.items():
        md += table(per, f"model-free check alone (none where it finds nothing), every annotated {split} trace per file")
    md.append(f"Machine: {machine}.")
    (out / f"{name}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    if args.ship:
        measured = {k: test_results[best][k] for k in ("f1", "wrong_exact", "none_acc", "top1", "top3")}
        measured.update(n_wrong=test_results[best]["n_wrong"], n_correct=test_results[best]["n_correct"],
                        data="annotated test half of grade/datasets/real_step_errors (gsm8k_qwen.a/b)",
                        locator_today={k: test_results["check+surprisal (the suspect_step today; never says none)"][k]
                                       for k in ("f1", "top1", "top3")})
        chosen.info = {"variant": best, "reader": args.reader, "traces_model": TRACES_MODEL,
                       "trained_on": {"annotated dev traces": len(dev), **results["counts"]["injected_by_source"]},
                       "never_trained_on": "any problem of an annotated test row",
                       "threshold_from": "annotated dev half, out of fold, maximising the first-error F1",
                       "measured": measured, "machine": machine}
        meta, weights = chosen.save(ROOT / "grade/assets/step_verifier" / args.reader)
        print(f"shipped {meta} ({weights.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
