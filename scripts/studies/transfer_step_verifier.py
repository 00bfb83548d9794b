"""The step verifier chosen and measured on other models' traces that people annotated (MR-GSM8K, Mr-Ben; built by
``scripts/studies/external_step_errors.py``), by paragraph, in both protocols of :mod:`grade.steps.outcome`.

    python scripts/studies/transfer_step_verifier.py [--external DIR] [--reader smollm2-135m-instruct] [--ship]
    python scripts/studies/transfer_step_verifier.py --reader qwen2.5-coder-1.5b-instruct --compact   # GPU features

Features: ``scripts/studies/step_verifier_features.py --external DIR`` (cached per trace); ``--compact``: the
projected ones a GPU run brought back (``scripts/gpu/verifier_gpu.sh`` with ``EXTERNAL``, read from
``data/step_verifier/<reader>/compact``; the verifier shipped before reads raw states and is not scored then, and
``--ship`` writes the chosen one unprojected). Every variant (a training
set and the verifier's settings) is scored on the external **dev** halves out of fold (5 folds by problem: a fold's
model never saw that fold's problems); each protocol's threshold is chosen there (the mean of the GSM8K-level and
MATH-level F1 by paragraph, maximised); the variant with the best mean over levels and protocols is chosen. Then every
variant is trained on all it may see and scored once on the external **test** halves, beside the verifier shipped
before, the check-then-surprisal locator and chance. Levels: GSM8K (MR-GSM8K's annotated solutions and GSM8K
reference solutions, correct) and MATH (Mr-Ben's math solutions). The project's own annotation files (Qwen's traces,
the written ones) and Mr-Ben's other subjects (``mr_ben_<subject>.jsonl`` beside the external files) are training
data only here.

Writes ``results/step_errors/transfer/verifier_<reader>.json`` and ``.md``; ``--ship`` writes the chosen verifier to
``grade/assets/step_verifier/<reader>.{json,safetensors}`` with each protocol's threshold and test numbers.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "studies"))

from grade.steps.kinds import canonical_kind  # noqa: E402
from grade.steps.locate import _rank01, check_scores  # noqa: E402
from grade.steps.scoring import by_paragraph, first_error_metrics, step_paragraphs  # noqa: E402
from grade.steps.verifier import SCALARS, StepVerifier, TraceFeatures, shipped_verifier, trace_key  # noqa: E402

EXTERNAL = ROOT / "data/real_step_errors_external"
#: External annotation files -> level; the GSM8K references carry no errors ("none" at GSM8K level).
LEVELS = {"mr_gsm8k": "gsm8k", "gsm8k_reference": "gsm8k", "mr_ben_math": "math"}
OWN_REAL = ("gsm8k_qwen", "gsm8k_qwen_cut", "math_qwen")
#: Mr-Ben's other subjects (the same three writers and annotators as its math): training data only, both halves,
#: never scored ("science": physics and chemistry, worked with numbers as math is; "biology" apart)
SCIENCE = ("mr_ben_physics", "mr_ben_chemistry")
BIOLOGY = ("mr_ben_biology",)
WRITTEN = ("gsm8k_written", "math_written")
#: a variant's training sources besides the external dev half -> their annotation files
TRAINING_FILES = {"own": OWN_REAL, "written": WRITTEN, "science": SCIENCE, "biology": BIOLOGY}
NO_CHECK = tuple(n for n in SCALARS if not n.startswith("check"))
BASE = dict(layers=(3, 5), n_components=32, C=0.1, target="first")
#: the shipped settings (chosen on dev): three depths, 64 components and the localizer head
LOCALIZER = {**BASE, "layers": (1, 3, 5), "n_components": 64, "localizer": True}
#: name -> (StepVerifier settings, training sources besides the external dev half (TRAINING_FILES): "own" = Qwen's
#: annotated traces (every half: none is cited here), "written" = the files written with planted errors, "science" /
#: "biology" = Mr-Ben's other subjects; "-ext": no external dev).
VARIANTS = {
    "first-step, hidden(0.75,1.0)+scalars; external dev": (BASE, ()),
    "first-step, hidden(0.75,1.0)+scalars; external dev + Qwen's annotated": (BASE, ("own",)),
    "first-step, hidden(0.75,1.0)+scalars; external dev + Qwen's + written": (BASE, ("own", "written")),
    "first-step, hidden(0.75,1.0)+scalars; Qwen's annotated only (no external)": (BASE, ("own", "-ext")),
    "cumulative, hidden(0.75,1.0)+scalars; external dev + Qwen's annotated": (
        {**BASE, "target": "cumulative"}, ("own",)),
    "first-step, hidden(0.5,0.75,1.0) 64 components; external dev + Qwen's annotated": (
        {**BASE, "layers": (1, 3, 5), "n_components": 64}, ("own",)),
    "first-step, hidden without the check; external dev + Qwen's annotated": (
        {**BASE, "scalars": NO_CHECK}, ("own",)),
    "first-step, scalars only (check + surprisal); external dev + Qwen's annotated": (
        {**BASE, "layers": ()}, ("own",)),
    "first-step, C=0.01; external dev + Qwen's annotated": ({**BASE, "C": 0.01}, ("own",)),
    "first-step, hidden(0.5,0.75,1.0) 64 components, localizer; external dev + Qwen's annotated": (LOCALIZER, ("own",)),
    "first-step, hidden(0.5,0.75,1.0) 64 components, localizer; external dev + Qwen's + written": (
        LOCALIZER, ("own", "written")),
    "first-step, hidden(0.5,0.75,1.0) 64 components, localizer; external dev + Qwen's + Mr-Ben physics, chemistry": (
        LOCALIZER, ("own", "science")),
    "first-step, hidden(0.5,0.75,1.0) 64 components, localizer; external dev + Qwen's + Mr-Ben physics, chemistry, "
    "biology": (LOCALIZER, ("own", "science", "biology")),
}
PROTOCOLS = ("unknown", "known")


def load_rows(reader: str, external: Path, compact: bool = False) -> tuple[list[dict], dict]:
    from grade.steps.real_errors import annotated_traces

    folder = ROOT / "data/step_verifier" / reader
    stored = None
    if compact:
        from compact_verifier_features import load_compact

        stored = load_compact(folder / "compact")
    # "external": a scored source (LEVELS); the others are training data only
    traces = annotated_traces(folder=external) + annotated_traces()
    rows, missing = [], {}
    for t in traces:
        group = t.file.split(".")[0]
        key = trace_key(reader, t.question, t.trace, t.task)
        path = folder / f"{key}.npz"
        if (key not in stored) if stored is not None else not path.is_file():
            missing[group] = missing.get(group, 0) + 1
            continue
        rows.append({"id": t.id, "problem": t.problem, "file": group, "split": t.split, "first_wrong": t.first_wrong,
                     "kind": canonical_kind(t.kind) if t.kind else None, "final_correct": t.final_correct,
                     "trace": t.trace, "external": group in LEVELS, "level": LEVELS.get(group, t.task),
                     "features": stored[key] if stored is not None else TraceFeatures.load(path),
                     "paragraphs": step_paragraphs(t.trace)})
    return rows, missing


def fold_of(problem: str, n: int = 5) -> int:
    import hashlib

    return int(hashlib.md5(problem.encode()).hexdigest(), 16) % n


def training_pool(sources: tuple, ext_dev: list[dict], others: list[dict]) -> list[dict]:
    pool = [] if "-ext" in sources else list(ext_dev)
    for source, files in TRAINING_FILES.items():
        if source in sources:
            pool += [r for r in others if r["file"] in files]
    return pool


def fit(settings: dict, rows: list[dict]) -> StepVerifier:
    return StepVerifier(**settings).fit([r["features"] for r in rows], [r["first_wrong"] for r in rows])


def answers(verifier: StepVerifier, probs, rows, protocol: str, tau: float | None = None):
    """Paragraph-level (predicted, scores, first_wrong) under ``protocol``; ``tau``: the threshold tried."""
    out = []
    for p, r in zip(probs, rows):
        final = r["final_correct"] if protocol == "known" else None
        tried = tau
        if tau is not None and protocol == "known" and final is None:  # not known: the unknown protocol's, chosen first
            tried = verifier.thresholds(r["level"])[0]
        out.append(verifier.suspect(p, threshold=tried, final_correct=final, level=r["level"]))
    return by_paragraph(out, [verifier.step_scores(p) for p in probs], [r["first_wrong"] for r in rows],
                        [r["paragraphs"] for r in rows])


def f1_of(pred, wrong) -> float:
    a = [p == e for p, e in zip(pred, wrong) if e is not None]
    b = [p is None for p, e in zip(pred, wrong) if e is None]
    a, b = (float(np.mean(a)) if a else 0.0), (float(np.mean(b)) if b else 0.0)
    return 2 * a * b / (a + b) if a + b else 0.0


def level_mean_f1(verifier, probs, rows, protocol, tau) -> float:
    values = []
    for level in ("gsm8k", "math"):
        idx = [i for i, r in enumerate(rows) if r["level"] == level]
        if idx:
            pred, _, wrong = answers(verifier, [probs[i] for i in idx], [rows[i] for i in idx], protocol, tau)
            values.append(f1_of(pred, wrong))
    return float(np.mean(values)) if values else 0.0


def choose_thresholds(verifier: StepVerifier, probs, rows) -> dict:
    """Each protocol's threshold maximising the mean of the two levels' F1 by paragraph (midway to the next
    candidate, as StepVerifier._best)."""
    allp = np.concatenate([verifier.decision_values(p) for p in probs])
    candidates = np.unique(np.concatenate([np.quantile(allp, np.linspace(0, 1, 301)), [1.0]]))
    out = {}
    for protocol, attr in (("unknown", "threshold"), ("known", "threshold_right")):
        values = [level_mean_f1(verifier, probs, rows, protocol, tau) for tau in candidates]
        i = int(np.argmax(values))
        tau = float((candidates[i] + candidates[i + 1]) / 2) if i + 1 < len(candidates) else float(candidates[i])
        setattr(verifier, attr, tau)
        out[attr] = tau
        out[f"dev_f1_{protocol}"] = float(values[i])
    return out


def choose_level_thresholds(verifier: StepVerifier, probs, rows) -> dict:
    """Each level's two thresholds chosen on that level's traces alone (:func:`choose_thresholds` on them), set as
    the verifier's ``level_thresholds``; its pooled thresholds are left as they were."""
    pooled = verifier.threshold, verifier.threshold_right
    chosen = {}
    for level in ("gsm8k", "math"):
        idx = [i for i, r in enumerate(rows) if r["level"] == level]
        if idx:
            taus = choose_thresholds(verifier, [probs[i] for i in idx], [rows[i] for i in idx])
            chosen[level] = {k: taus[k] for k in ("threshold", "threshold_right")}
    verifier.threshold, verifier.threshold_right = pooled
    verifier.level_thresholds = chosen
    return chosen


def metrics(verifier, probs, rows, protocol, n_boot) -> dict:
    pred, scores, wrong = answers(verifier, probs, rows, protocol)
    return first_error_metrics(pred, scores, wrong, n_boot=n_boot,
                               final_correct=[r["final_correct"] for r in rows] if protocol == "known" else None)


def locator_metrics(rows, protocol, n_boot) -> dict:
    """The older locator (the check's first finding, else the most surprising step: never "none"), with "none"
    where the final answer is known right under ``known``."""
    pred, scores = [], []
    for r in rows:
        f = r["features"]
        s = 10.0 * check_scores(f.findings) + _rank01(f.scalars[:, SCALARS.index("surprisal_max")])
        scores.append(s)
        pred.append(None if protocol == "known" and r["final_correct"] is True else int(np.argmax(s)))
    p, sc, w = by_paragraph(pred, scores, [r["first_wrong"] for r in rows], [r["paragraphs"] for r in rows])
    return first_error_metrics(p, sc, w, n_boot=n_boot,
                               final_correct=[r["final_correct"] for r in rows] if protocol == "known" else None)


def check_alone_metrics(rows, protocol, n_boot) -> dict:
    pred, scores = [], []
    for r in rows:
        c = check_scores(r["features"].findings)
        scores.append(c)
        first = int(np.flatnonzero(c)[0]) if c.any() else None
        if protocol == "known" and r["final_correct"] is True:
            first = None
        elif protocol == "known" and r["final_correct"] is False and first is None:
            first = int(np.argmax(r["features"].scalars[:, SCALARS.index("surprisal_max")]))
        pred.append(first)
    p, sc, w = by_paragraph(pred, scores, [r["first_wrong"] for r in rows], [r["paragraphs"] for r in rows])
    return first_error_metrics(p, sc, w, n_boot=n_boot,
                               final_correct=[r["final_correct"] for r in rows] if protocol == "known" else None)


def groups(rows: list[dict]) -> dict[str, list[int]]:
    """Scored groups: each level, each source file."""
    out = {f"level {lv}": [i for i, r in enumerate(rows) if r["level"] == lv] for lv in ("gsm8k", "math")}
    for file in sorted({r["file"] for r in rows}):
        out[f"source {file}"] = [i for i, r in enumerate(rows) if r["file"] == file]
    return {k: v for k, v in out.items() if v}


def kind_groups(rows: list[dict], least: int = 5) -> dict[str, list[dict]]:
    """{"<level>: <kind>": rows} of the traces with an error of each kind at each level, where ``least`` or more."""
    out = {}
    for kind in sorted({r["kind"] for r in rows if r["kind"]}):
        for level in ("gsm8k", "math"):
            part = [r for r in rows if r["kind"] == kind and r["level"] == level]
            if len(part) >= least:
                out[f"{level}: {kind}"] = part
    return out


def cell(m: dict | None) -> str:
    if not m or not np.isfinite(m["value"]):
        return "-"
    return f"{m['value']:.2f} [{m['low']:.2f}, {m['high']:.2f}]"


def table(results: dict, title: str, chosen: str | None = None) -> list[str]:
    any_row = next(iter(results.values()))
    lines = [f"#### {title} (with an error {any_row['n_wrong']}, correct {any_row['n_correct']})", "",
             f"Chance: F1 {any_row['f1']['chance']:.2f}, exact {any_row['wrong_exact']['chance']:.2f}, \"none\" "
             f"{any_row['none_acc']['chance']:.2f}, top-1 {any_row['top1']['chance']:.2f}, top-3 "
             f"{any_row['top3']['chance']:.2f}.", "",
             "| method | F1 | exact first wrong paragraph | \"none\" on correct | top-1 | top-3 |", "|---|---|---|---|---|---|"]
    for name, m in results.items():
        label = f"**{name}** (chosen on dev)" if name == chosen else name
        lines.append(f"| {label} | " + " | ".join(cell(m.get(k)) for k in ("f1", "wrong_exact", "none_acc", "top1", "top3"))
                     + " |")
    return lines + [""]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reader", default="smollm2-135m-instruct")
    p.add_argument("--external", type=Path, default=EXTERNAL)
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--only", nargs="+", default=None, metavar="VARIANT")
    p.add_argument("--ship", action="store_true")
    p.add_argument("--compact", action="store_true",
                   help="features from data/step_verifier/<reader>/compact (a GPU run's projected states)")
    p.add_argument("--name", default=None, help="results file name (default verifier_<reader>)")
    p.add_argument("--machine", default=None, help="what the numbers came from (default: this CPU, its cores and load)")
    args = p.parse_args(argv)
    if args.machine is None:
        from bench.common import machine

        m = machine()
        args.machine = f"{m['cpu']}, {m['cpu_count']} cores, load average {m['load_average'][0]:.1f} at the start"
    t0 = time.perf_counter()
    rows, missing = load_rows(args.reader, args.external, args.compact)
    ext = [r for r in rows if r["external"]]
    dev = [r for r in ext if r["split"] == "dev"]
    test = [r for r in ext if r["split"] == "test"]
    others = [r for r in rows if not r["external"]]
    test_problems = {r["problem"] for r in test}
    others = [r for r in others if r["problem"] not in test_problems]
    print(f"features: external dev {len(dev)}, test {len(test)}, own files {len(others)}; missing {missing}", flush=True)
    variants = {n: v for n, v in VARIANTS.items() if not args.only or n in args.only}
    dev_scores, thresholds, base_of = {}, {}, {}

    def score_dev(name, verifier, probs):
        dev_scores[name] = {
            f"{protocol} {g}": metrics(verifier, [probs[i] for i in idx], [dev[i] for i in idx], protocol, args.n_boot)
            for protocol in PROTOCOLS for g, idx in groups(dev).items() if g.startswith("level")}
        mean = float(np.mean([m["f1"]["value"] for m in dev_scores[name].values()]))
        dev_scores[name]["mean F1 (levels x protocols)"] = mean
        print(f"dev {name}: mean F1 {mean:.3f}; " + ", ".join(
            f"{k} {m['f1']['value']:.2f}" for k, m in dev_scores[name].items() if isinstance(m, dict)), flush=True)

    for name, (settings, sources) in variants.items():
        probs: list = [None] * len(dev)
        verifier = None
        for k in range(5):
            held = {r["problem"] for r in dev if fold_of(r["problem"]) == k}
            pool = training_pool(sources, [r for r in dev if r["problem"] not in held], others)
            verifier = fit(settings, pool)
            for i, r in enumerate(dev):
                if r["problem"] in held:
                    probs[i] = verifier.predict_proba(r["features"])
        chosen_tau = choose_thresholds(verifier, probs, dev)
        thresholds[name] = {k: v for k, v in chosen_tau.items() if k.startswith("threshold")}
        score_dev(name, verifier, probs)
        # the same probabilities with each level's thresholds chosen on that level's dev traces (a trace's task,
        # GSM8K or MATH, is known where the verifier reads it): a rule of its own, chosen only if it wins on dev
        per_level = f"{name}; thresholds per level"
        thresholds[per_level] = {**thresholds[name], "level_thresholds": choose_level_thresholds(verifier, probs, dev)}
        base_of[per_level] = name
        score_dev(per_level, verifier, probs)
        verifier.level_thresholds = {}
    shipped = None if args.compact else shipped_verifier(args.reader)
    before = "verifier shipped before (Qwen's traces; its thresholds)"
    if shipped is not None:  # scored on dev as it is (it never saw an external trace): shipped again only if it wins
        probs = [shipped.predict_proba(r["features"]) for r in dev]
        dev_scores[before] = {
            f"{protocol} {g}": metrics(shipped, [probs[i] for i in idx], [dev[i] for i in idx], protocol, args.n_boot)
            for protocol in PROTOCOLS for g, idx in groups(dev).items() if g.startswith("level")}
        dev_scores[before]["mean F1 (levels x protocols)"] = float(np.mean(
            [m["f1"]["value"] for m in dev_scores[before].values()]))
    best = max(dev_scores, key=lambda n: dev_scores[n]["mean F1 (levels x protocols)"])
    # the test halves, once: every variant trained on all it may see, its dev thresholds kept
    final = {}
    for name, (settings, sources) in variants.items():
        verifier = fit(settings, training_pool(sources, dev, others))
        for k, v in thresholds[name].items():
            setattr(verifier, k, v)
        final[name] = verifier
    for name, base in base_of.items():  # the same fit, each level's thresholds
        final[name] = copy.deepcopy(final[base])
        final[name].level_thresholds = thresholds[name]["level_thresholds"]
    methods = {**{n: final[n] for n in thresholds}, before: shipped}
    final[before] = shipped
    per_group: dict = {}
    for g, idx in groups(test).items():
        part = [test[i] for i in idx]
        for protocol in PROTOCOLS:
            res = {}
            for name, verifier in methods.items():
                if verifier is None:
                    continue
                res[name] = metrics(verifier, [verifier.predict_proba(r["features"]) for r in part], part, protocol,
                                    args.n_boot)
            res["check, then surprisal (the older locator" + (
                "; none where the final answer is right)" if protocol == "known" else "; never none)")] = \
                locator_metrics(part, protocol, args.n_boot)
            res["check alone (none where it finds nothing" + (
                ", the final answer right; else the most surprising step)" if protocol == "known" else ")")] = \
                check_alone_metrics(part, protocol, args.n_boot)
            per_group[f"{g}, {protocol}"] = res
    # per kind of error: the chosen verifier and the older locator, erroneous test traces
    chosen = final[best]
    per_kind = {}
    for key, part in kind_groups(test).items():
        probs = [chosen.predict_proba(r["features"]) for r in part]
        per_kind[key] = {protocol: {"verifier": metrics(chosen, probs, part, protocol, args.n_boot),
                                    "locator": locator_metrics(part, protocol, args.n_boot)} for protocol in PROTOCOLS}
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = ""
    results = {"date": time.strftime("%Y-%m-%d"), "commit": commit, "machine": args.machine, "reader": args.reader,
               "counts": {"external dev": len(dev), "external test": len(test), "own files (training)": len(others),
                          "missing features": missing},
               "chosen": best, "thresholds": thresholds, "dev_out_of_fold": dev_scores, "test": per_group,
               "test_per_kind": per_kind,
               "variants": {n: {"settings": {**s, "scalars": list(s.get("scalars", SCALARS))}, "training": list(src)}
                            for n, (s, src) in variants.items()},
               "seconds": time.perf_counter() - t0}
    out = ROOT / "results/step_errors/transfer"
    out.mkdir(parents=True, exist_ok=True)
    name = args.name or f"verifier_{args.reader}"
    import lzma

    # xz-compressed, as the tracked tree's other large results are (the .md beside it holds the tables)
    (out / f"{name}.json.xz").write_bytes(lzma.compress((json.dumps(results, indent=1, default=float) + "\n").encode(), preset=9 | lzma.PRESET_EXTREME))
    md = [f"## Step verifier on other models' annotated traces: reader {args.reader}", "",
          f"{results['date']}, commit {commit}, {args.machine}. Scored by paragraph (each of our steps counts for the "
          "paragraph it starts in). `unknown`: final answer not given (the process-reward protocol); `known`: the final "
          "answer's correctness given. Thresholds chosen per protocol on the external dev halves out of fold.", "",
          "### dev halves, out of fold (F1 by paragraph)", "",
          "| variant | mean | " + " | ".join(k for k in next(iter(dev_scores.values())) if k.startswith(PROTOCOLS))
          + " |", "|---|---|" + "---|" * 4]
    for n, d in dev_scores.items():
        label = f"**{n}**" if n == best else n
        md.append(f"| {label} | {d['mean F1 (levels x protocols)']:.3f} | " + " | ".join(
            f"{m['f1']['value']:.2f}" for k, m in d.items() if isinstance(m, dict)) + " |")
    md.append("")
    md.append("### test halves (scored once)")
    md.append("")
    for g, res in per_group.items():
        md += table(res, g, best)
    md += ["### test halves per kind of error (chosen verifier vs the older locator; exact first wrong paragraph)", "",
           "| level: kind | n | verifier, unknown | verifier, known | locator, unknown | locator, known |",
           "|---|---|---|---|---|---|"]
    for k, m in per_kind.items():
        md.append(f"| {k} | {m['unknown']['verifier']['n_wrong']} | {cell(m['unknown']['verifier']['wrong_exact'])} | "
                  f"{cell(m['known']['verifier']['wrong_exact'])} | {cell(m['unknown']['locator']['wrong_exact'])} | "
                  f"{cell(m['known']['locator']['wrong_exact'])} |")
    (out / f"{name}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    if args.ship and best == before:
        print("the verifier shipped before wins on dev: nothing shipped")
    elif args.ship:
        level_of = {"gsm8k": "level gsm8k", "math": "level math"}
        keep = ("f1", "wrong_exact", "none_acc", "top1", "top3", "n_wrong", "n_correct")
        protocols = {}
        for protocol, attr in (("unknown", "threshold"), ("known", "threshold_right")):
            protocols[protocol] = {
                "threshold": getattr(chosen, attr),
                "measured": {lv: {**{k: per_group[f"{g}, {protocol}"][best][k] for k in keep},
                                  "locator_today": {k: v for k, v in next(
                                      m for n, m in per_group[f"{g}, {protocol}"].items()
                                      if n.startswith("check, then")).items() if k in ("f1", "top1", "top3")},
                                  "data": f"external annotated test halves ({g.split()[-1]} level), by paragraph"}
                             for lv, g in level_of.items()}}
        gsm = protocols["unknown"]["measured"]["gsm8k"]
        pool = training_pool(variants[base_of.get(best, best)][1], dev, others)
        chosen.info = {
            "variant": best, "reader": args.reader,
            "traces_model": "other models (MR-GSM8K's and Mr-Ben's solutions, annotated by people)",
            "trained_on": {"external dev traces": len(dev), **{f: sum(r["file"] == f for r in pool)
                                                               for files in TRAINING_FILES.values() for f in files}},
            "never_trained_on": "any problem of an external test half",
            "threshold_from": ("external dev halves, out of fold, each protocol and each level (GSM8K, MATH) "
                               "maximising that level's F1 by paragraph" if best in base_of else
                               "external dev halves, out of fold, each protocol maximising the mean F1 by paragraph "
                               "of the GSM8K and MATH levels"),
            "protocols": protocols,
            # the keys the pages read: the GSM8K level, by paragraph
            "measured": gsm, "measured_final_known": protocols["known"]["measured"]["gsm8k"],
            "machine": args.machine, "date": results["date"], "commit": commit}
        if args.compact:  # the studio reads raw hidden states
            from compact_verifier_features import unproject

            chosen = unproject(chosen, ROOT / "data/step_verifier" / args.reader / "compact/basis.npz")
        meta, weights = chosen.save(ROOT / "grade/assets/step_verifier" / args.reader)
        print(f"shipped {meta} ({weights.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
