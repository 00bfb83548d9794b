"""Train and score the step verifier on the cached features of ``scripts/studies/step_verifier_features.py``.

    python scripts/studies/train_step_verifier.py --reader smollm2-135m-instruct [--ship]
    python scripts/studies/train_step_verifier.py --reader qwen2.5-coder-1.5b-instruct --compact [--ship]

``--grade-features FILE`` adds six variants with GRADE's step features (rank ratios and epistemic shock per step,
``scripts/studies/step_grade_features.py`` on a GPU: ``scripts/gpu/grade_features_gpu.sh``) beside the verifier's own, scored
on the same traces; such a run ships nothing (the studio's verifier reads one forward pass).

``--compact`` reads the projected features a GPU run brought back (scripts/gpu/verifier_gpu.sh,
scripts/studies/compact_verifier_features.py) instead of the per-trace cache, and ships the verifier unprojected (it
reads raw hidden states). The model's own replies as written (source ``own``) are labelled here: a reply whose
answer was labelled right is correct, the others by their completions (``data/step_rollouts``,
grade.steps.rollouts.rollout_first_wrong) where usable, else left out.

Every variant is also scored with the trace's final answer known (StepVerifier.suspect's ``final_correct``: an
evaluation run grades its traces), its two thresholds chosen on dev as well.

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
import warnings
from pathlib import Path

# one BLAS thread: on a shared 2-core machine threaded BLAS is many times slower, not faster
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "studies"))

from grade.steps.locate import check_scores  # noqa: E402
from grade.steps.scoring import by_paragraph, first_error_metrics, step_paragraphs  # noqa: E402
from grade.steps.verifier import SCALARS, StepVerifier, TraceFeatures  # noqa: E402

TRACES_MODEL = "qwen2.5-coder-1.5b-instruct"
#: The annotation files of real errors (the model's own complete GSM8K replies, marked by a reader): what a shipped
#: verifier's cited numbers are measured on.
REAL_FILES = "gsm8k_qwen"
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
    "hidden(0.75,1.0)+scalars, first-step target, injected+dev+own (completions, no return)": (
        dict(layers=(3, 5), n_components=32, C=0.1, target="first"), "all+own:no_return"),
    "hidden(0.75,1.0)+scalars, first-step target, injected+dev+own (completions, first zero)": (
        dict(layers=(3, 5), n_components=32, C=0.1, target="first"), "all+own:first_zero"),
    "hidden(0.75,1.0)+scalars, cumulative, injected+dev+own (completions, no return)": (
        dict(layers=(3, 5), n_components=32, C=0.1), "all+own:no_return"),
    "hidden(0.75,1.0)+scalars, cumulative, dev+own (completions, no return)": (
        dict(layers=(3, 5), n_components=32, C=0.1), "dev+own:no_return"),
    "hidden(0.5,0.75,1.0)+scalars, first-step target, 64 components, injected+dev+own (no return)": (
        dict(layers=(1, 3, 5), n_components=64, C=0.1, target="first"), "all+own:no_return"),
}


#: GRADE's step features (scripts/studies/step_grade_features.py, read by :func:`grade_columns`), per step.
GRADE_COLUMNS = ("rank_ratio_z", "rank_ratio_band_z", "rank_ratio_change_z", "shock_max", "shock_mean_z",
                 "shock_max_so_far")


def grade_columns(row: dict) -> np.ndarray:
    """(K, len(GRADE_COLUMNS)) of one trace's GRADE step features; a step without tokens of its own takes its
    trace's mean (0 after the within-trace z-score)."""
    from grade.steps.locate import LAYER_BAND
    from grade.steps.verifier import _z

    def values(key):
        return np.array([np.nan if v is None else v for v in row[key]], dtype=float)

    def filled(x):
        return np.where(np.isfinite(x), x, np.nanmean(x) if np.isfinite(x).any() else 0.0)

    n_layers = len(next((r for r in row["ratios"] if r is not None), [np.nan]))
    ratios = np.array([r if r is not None else [np.nan] * n_layers for r in row["ratios"]], dtype=float)
    lo, hi = int(round(LAYER_BAND[0] * n_layers)), max(int(round(LAYER_BAND[1] * n_layers)), 1)
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # a step without tokens: all NaN, filled below
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, band = filled(np.nanmean(np.log(ratios), axis=1)), filled(np.nanmean(np.log(ratios[:, lo:hi]), axis=1))
    shock_max = np.nan_to_num(values("shock_max"), nan=0.0)
    return np.stack([_z(mean), _z(band), _z(np.diff(mean, prepend=mean[:1])), shock_max,
                     _z(filled(values("shock_mean"))), np.maximum.accumulate(shock_max)], axis=1)


class GradeStepVerifier(StepVerifier):
    """The verifier with GRADE's step features beside its own (a variant of this script; the studio's verifier
    reads one forward pass only). ``grade`` : names of :data:`GRADE_COLUMNS` used; features carry ``.grade``."""

    def __init__(self, grade=GRADE_COLUMNS, **settings):
        super().__init__(**settings)
        self.grade = tuple(grade)

    def _raw(self, f):
        hidden, scalars = super()._raw(f)
        cols = [GRADE_COLUMNS.index(n) for n in self.grade]
        return hidden, np.concatenate([scalars, f.grade[:, cols].astype(np.float64)], axis=1)


def attach_grade(rows: list[dict], path: Path) -> list[dict]:
    """Give each row's features their GRADE columns (``.grade``); rows without them are left out."""
    import lzma

    stored = {r["key"]: r for r in map(json.loads, lzma.open(path, "rt"))}
    kept = []
    for r in rows:
        g = stored.get(r["key"])
        if g is None or g["steps"] != r["features"].n_steps:
            continue
        r["features"].grade = grade_columns(g)
        kept.append(r)
    return kept


#: With --grade-features: the same verifiers with GRADE's step features beside their own.
POSITION = ("log_tokens", "position", "is_last")
GRADE_VARIANTS = {
    "GRADE + hidden(0.75,1.0)+scalars, first-step target, injected+dev+own (no return)": (
        dict(layers=(3, 5), n_components=32, C=0.1, target="first", grade=GRADE_COLUMNS), "all+own:no_return"),
    "GRADE + hidden(0.75,1.0)+scalars, first-step target, injected+dev": (
        dict(layers=(3, 5), n_components=32, C=0.1, target="first", grade=GRADE_COLUMNS), "all"),
    "GRADE + hidden(0.75,1.0)+scalars, cumulative, injected+dev": (
        dict(layers=(3, 5), n_components=32, C=0.1, grade=GRADE_COLUMNS), "all"),
    "GRADE + scalars (check + surprisal), cumulative, injected+dev": (dict(layers=(), C=0.1, grade=GRADE_COLUMNS),
                                                                      "all"),
    "GRADE's step features and position only, cumulative, injected+dev": (
        dict(layers=(), C=0.1, scalars=POSITION, grade=GRADE_COLUMNS), "all"),
    "GRADE's step features and position only, first-step target, injected+dev": (
        dict(layers=(), C=0.1, scalars=POSITION, target="first", grade=GRADE_COLUMNS), "all"),
}


def load(reader: str, compact: bool = False):
    folder = ROOT / "data/step_verifier" / reader
    rows = [json.loads(line) for line in (folder / "traces.jsonl").read_text().splitlines()]
    if compact:
        from compact_verifier_features import load_compact

        stored = load_compact(folder / "compact")
    have = []
    for r in rows:
        if compact:
            if r["key"] in stored:
                r["features"] = stored[r["key"]]
                have.append(r)
            continue
        path = folder / f"{r['key']}.npz"
        if path.is_file():
            r["features"] = TraceFeatures.load(path)
            have.append(r)
    return rows, have


def label_own(rows: list[dict], rollouts_path: Path) -> dict[str, list[dict]]:
    """{rule: the ``own`` rows labelled by it}: label-1 replies correct, the others by usable completions."""
    import lzma

    from grade.steps.rollouts import LABEL_RULES, rollout_first_wrong

    labels = {str(r["id"]): r.get("label") for r in
              map(json.loads, lzma.open(ROOT / "data/labels" / TRACES_MODEL / "gsm8k.jsonl.xz", "rt"))}
    rollouts = {}
    if rollouts_path.is_file():
        rollouts = {r["id"]: r["successes"] for r in map(json.loads, lzma.open(rollouts_path, "rt"))}
    annotated = {r["key"] for r in rows if r["source"] == "annotated"}  # the same reply, marked by a reader
    out = {}
    for rule in LABEL_RULES:
        kept = []
        for r in rows:
            if r["source"] != "own" or r["key"] in annotated:
                continue
            if labels.get(r["problem"]) == 1:
                kept.append({**r, "first_wrong": None})
            elif r["problem"] in rollouts:
                usable, first = rollout_first_wrong(rollouts[r["problem"]], rule)
                if usable:
                    kept.append({**r, "first_wrong": first})
        out[rule] = kept
    return out


def file_group(row: dict) -> str:
    """The annotation file a row comes from without its part and suffix (gsm8k_qwen.a.jsonl: gsm8k_qwen)."""
    return row["file"].split(".")[0]


def fold_of(problem: str, n: int = 5) -> int:
    import hashlib

    return int(hashlib.md5(problem.encode()).hexdigest(), 16) % n


def fit(settings: dict, rows: list[dict], dev_weight: float = 2.0) -> StepVerifier:
    weights = [dev_weight if r["source"] == "annotated" else 1.0 for r in rows]
    cls = GradeStepVerifier if "grade" in settings else StepVerifier
    return cls(**settings).fit([r["features"] for r in rows], [r["first_wrong"] for r in rows], weights)


OWN: dict[str, list[dict]] = {}  # rule -> labelled own rows (main fills it)


def training_rows(sources: str, train: list[dict], dev: list[dict]) -> list[dict]:
    base, _, rule = sources.partition("+own:")
    rows = {"all": train + dev, "injected": train, "dev": dev}[base]
    return rows + OWN.get(rule, []) if rule else rows


def predictions(verifier: StepVerifier, rows: list[dict]) -> list[np.ndarray]:
    return [verifier.predict_proba(r["features"]) for r in rows]


def score(verifier: StepVerifier, probs: list[np.ndarray], rows: list[dict], n_boot: int, known: bool = False,
          paragraphs: bool = False) -> dict:
    """The field's scores; ``known``: with each trace's final answer known (its annotated ``final_correct``);
    ``paragraphs``: scored by the paragraph each step starts in (grade.steps.scoring.by_paragraph)."""
    answers = ([verifier.suspect(p, final_correct=r.get("final_correct") if known else None)
                for p, r in zip(probs, rows)], [verifier.step_scores(p) for p in probs], [r["first_wrong"] for r in rows])
    if paragraphs:
        answers = by_paragraph(*answers, [step_paragraphs(r["trace"]) for r in rows])
    return first_error_metrics(*answers, n_boot=n_boot,
                               final_correct=[r.get("final_correct") for r in rows] if known else None)


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
    p.add_argument("--score-only", nargs="+", default=None, metavar="NAME",
                   help="annotation files left out of --files whose test half is still scored in the per-file tables "
                        "(what the verifier does on traces of a kind it never learned from)")
    p.add_argument("--tag", default="", help="added to the results' file names (a variant's run)")
    p.add_argument("--machine", default=None)
    p.add_argument("--compact", action="store_true", help="features from data/step_verifier/<reader>/compact")
    p.add_argument("--rollouts", type=Path, default=ROOT / "data/step_rollouts" / TRACES_MODEL / "gsm8k.jsonl.xz")
    p.add_argument("--only", nargs="+", default=None, metavar="VARIANT", help="these variants only (a quick look)")
    p.add_argument("--more-annotations", default=None,
                   help="a folder of annotation files for the model-free check's table (e.g. files not yet copied here)")
    p.add_argument("--grade-features", type=Path, default=None,
                   help="GRADE's step features (scripts/studies/step_grade_features.py, all lanes' lines in one .jsonl.xz): "
                        "every variant also with them, scored on the traces that have them")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    rows, have = load(args.reader, args.compact)
    if args.grade_features:
        if args.ship:
            raise SystemExit("--ship with --grade-features: the studio's verifier reads one forward pass, no GRADE")
        n_before = len(have)
        have = attach_grade(have, args.grade_features)
        print(f"GRADE's step features for {len(have)} of {n_before} traces with features")
    OWN.update(label_own(have, args.rollouts))
    variants = {n: v for n, v in {**VARIANTS, **(GRADE_VARIANTS if args.grade_features else {})}.items()
                if not args.only or n in args.only}
    if not any(OWN.values()):
        variants = {n: v for n, v in variants.items() if "+own:" not in v[1]}
    extra_test = [r for r in have if r["source"] == "annotated" and r["split"] == "test"
                  and r["file"].split(".jsonl")[0] in (args.score_only or ())]
    if args.files:
        wanted = {f.split(".jsonl")[0] for f in args.files}
        rows_all = rows
        rows = [r for r in rows if r["source"] != "annotated" or r["file"].split(".jsonl")[0] in wanted]
        have = [r for r in have if r["source"] != "annotated" or r["file"].split(".jsonl")[0] in wanted]
        # nor errors injected into the left-out files' traces: a run without a file learns nothing from it
        left_out = {r["problem"] for r in rows_all if r["source"] == "annotated"} - {
            r["problem"] for r in rows if r["source"] == "annotated"}
        have = [r for r in have if r["source"] == "annotated" or r["problem"] not in left_out]
    dev = [r for r in have if r["source"] == "annotated" and r["split"] == "dev"]
    test = [r for r in have if r["source"] == "annotated" and r["split"] == "test"]
    test_problems = {r["problem"] for r in rows if r["source"] == "annotated" and r["split"] == "test"}
    train = [r for r in have if r["source"] not in ("annotated", "own")]
    if any(r["problem"] in test_problems for r in train + dev + [o for own in OWN.values() for o in own]):
        raise SystemExit("a training trace shares a problem with an annotated test row")
    print(f"features: {len(have)} of {len(rows)} traces; dev {len(dev)}, test {len(test)}, injected {len(train)}; "
          + ", ".join(f"own by {rule}: {len(o)} ({sum(r['first_wrong'] is not None for r in o)} with an error)"
                      for rule, o in OWN.items()))
    dev_results, dev_known, thresholds, dev_probs, dev_verifiers = {}, {}, {}, {}, {}
    for name, (settings, sources) in variants.items():
        probs: list = [None] * len(dev)
        for k in range(5):
            held = {r["problem"] for r in dev if fold_of(r["problem"]) == k}
            fit_rows = [r for r in training_rows(sources, train, [r for r in dev if r["problem"] not in held])
                        if r["problem"] not in held]
            verifier = fit(settings, fit_rows)
            for i, r in enumerate(dev):
                if r["problem"] in held:
                    probs[i] = verifier.predict_proba(r["features"])
        chosen = verifier.choose_threshold(probs, [r["first_wrong"] for r in dev], [r.get("final_correct") for r in dev])
        thresholds[name] = {k: getattr(verifier, k) for k in ("threshold", "threshold_right")}
        dev_probs[name], dev_verifiers[name] = probs, verifier
        dev_results[name] = score(verifier, probs, dev, args.n_boot)
        dev_known[name] = score(verifier, probs, dev, args.n_boot, known=True)
        print(f"dev {name}: F1 {dev_results[name]['f1']['value']:.3f} exact "
              f"{dev_results[name]['wrong_exact']['value']:.3f} none {dev_results[name]['none_acc']['value']:.3f} "
              f"top1 {dev_results[name]['top1']['value']:.3f} tau {chosen['threshold']:.3f}; final answer known: "
              f"F1 {dev_known[name]['f1']['value']:.3f} exact {dev_known[name]['wrong_exact']['value']:.3f} "
              f"none {dev_known[name]['none_acc']['value']:.3f}", flush=True)
    dev_results.update(baselines(dev, args.n_boot))
    best = max(variants, key=lambda n: dev_results[n]["f1"]["value"])
    # the test half, once: every variant trained on everything it may see, its dev thresholds kept
    test_results, test_known, final = {}, {}, {}
    test_para, test_para_known = {}, {}
    for name, (settings, sources) in variants.items():
        verifier = fit(settings, training_rows(sources, train, dev))
        for k, v in thresholds[name].items():
            setattr(verifier, k, v)
        final[name] = verifier
        test_probs = predictions(verifier, test)
        test_results[name] = score(verifier, test_probs, test, args.n_boot)
        test_known[name] = score(verifier, test_probs, test, args.n_boot, known=True)
        test_para[name] = score(verifier, test_probs, test, args.n_boot, paragraphs=True)
        test_para_known[name] = score(verifier, test_probs, test, args.n_boot, known=True, paragraphs=True)
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
    # every annotation file apart, in the four ways the field and the hidden check score: by step or by paragraph,
    # the final answer unknown or known; dev out of fold and test, the chosen variant
    per_file_modes = {}
    for half, rows_h, probs_h, verifier_h in (("dev", dev, dev_probs[best], dev_verifiers[best]),
                                              ("test", test + extra_test, probs + predictions(chosen, extra_test),
                                               chosen)):
        for file in sorted({file_group(r) for r in rows_h}):
            idx = [i for i, r in enumerate(rows_h) if file_group(r) == file]
            part, part_probs = [rows_h[i] for i in idx], [probs_h[i] for i in idx]
            per_file_modes[f"{half}: {file}"] = {
                f"{unit}{', final answer known' if known else ''}": score(verifier_h, part_probs, part, args.n_boot,
                                                                         known=known, paragraphs=unit == "paragraph")
                for unit in ("step", "paragraph") for known in (False, True)}
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
        "own_labelled": {rule: {"traces": len(o), "with_error": sum(r["first_wrong"] is not None for r in o)}
                         for rule, o in OWN.items()},
        "grade_features": (f"{args.grade_features.name}: scripts/studies/step_grade_features.py (step-wise pos, fast path, "
                           "float32, one H200)") if args.grade_features else None,
        "chosen": best, "thresholds": thresholds, "dev_out_of_fold": dev_results, "test": test_results,
        "dev_out_of_fold_final_answer_known": dev_known, "test_final_answer_known": test_known,
        "test_by_paragraph": test_para, "test_by_paragraph_final_answer_known": test_para_known,
        "test_per_kind": per_kind, "test_per_file": per_file, "per_file_chosen": per_file_modes,
        "check_alone_every_annotated_trace": everywhere,
        "variants": {n: {"settings": {**s, "scalars": list(s.get("scalars", SCALARS))}, "training": src}
                     for n, (s, src) in variants.items()},
        "seconds": time.perf_counter() - t0,
    }
    out = ROOT / "results/step_errors" / TRACES_MODEL
    name = f"verifier_{args.reader}" + (f"_{args.tag}" if args.tag else "")
    import lzma

    # xz-compressed, as the tracked tree's other large results are (the .md beside it holds the tables)
    (out / f"{name}.json.xz").write_bytes(lzma.compress((json.dumps(results, indent=1, default=float) + "\n").encode()))
    md = [f"## Step verifier: reader {args.reader}, traces of {TRACES_MODEL} (`scripts/studies/train_step_verifier.py`)", "",
          *table(dev_results, "dev half, out of fold (5 folds by problem id)", best),
          *table(test_results, "test half (scored once, threshold from dev)", best),
          *table(dev_known, "dev half, out of fold, final answer known (a wrong one: some step is wrong)", best),
          *table(test_known, "test half, final answer known (thresholds from dev)", best),
          *table(test_para, "test half scored by paragraph (blank-line blocks; a step counts for the paragraph it "
                            "starts in)", best),
          *table(test_para_known, "test half scored by paragraph, final answer known", best)]
    md += ["### test half per kind of error (erroneous traces only: exact / top-1 / top-3)", "",
           "| kind | n | verifier exact | verifier top-1 | verifier top-3 | check+surprisal top-1 | check+surprisal top-3 |",
           "|---|---|---|---|---|---|---|"]
    for kind, m in per_kind.items():
        v, b = m["verifier"], next(x for k, x in m.items() if k.startswith("check+"))
        md.append(f"| {kind} | {v['n_wrong']} | {cell(v['wrong_exact'])} | {cell(v['top1'])} | {cell(v['top3'])} | "
                  f"{cell(b['top1'])} | {cell(b['top3'])} |")
    md += ["", *table(per_file, "test half per annotation file, chosen verifier")]
    for where, modes in per_file_modes.items():
        md += table(modes, f"chosen verifier, {where}" + (" (out of fold)" if where.startswith("dev") else ""))
    for split, per in everywhere.items():
        md += table(per, f"model-free check alone (none where it finds nothing), every annotated {split} trace per file")
    md.append(f"Machine: {machine}.")
    (out / f"{name}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    if args.ship:
        # the numbers a page cites are those on real errors (the model's own traces, marked by a reader), never
        # mixed with traces written with planted errors; those are saved apart, by paragraph
        real = per_file_modes.get(f"test: {REAL_FILES}")
        files = REAL_FILES + ".a/.b" if real else ", ".join(args.files) if args.files else "every annotation file"
        plain, with_final = (real["step"], real["step, final answer known"]) if real else (test_results[best],
                                                                                           test_known[best])
        measured = {k: plain[k] for k in ("f1", "wrong_exact", "none_acc", "top1", "top3")}
        measured.update(n_wrong=plain["n_wrong"], n_correct=plain["n_correct"],
                        data=f"annotated test half of grade/datasets/real_step_errors ({files})")
        real_rows = [r for r in test if file_group(r) == REAL_FILES] if real else test
        today = baselines(real_rows, args.n_boot)["check+surprisal (the suspect_step today; never says none)"]
        measured["locator_today"] = {k: today[k] for k in ("f1", "top1", "top3")}
        known = {k: with_final[k] for k in ("f1", "wrong_exact", "none_acc", "top1", "top3")}
        known.update(n_wrong=with_final["n_wrong"], n_correct=with_final["n_correct"],
                     data=measured["data"] + ", the final answer's correctness known")
        chosen.info = {"variant": best, "reader": args.reader, "traces_model": TRACES_MODEL,
                       "trained_on": {"annotated dev traces": len(dev), **results["counts"]["injected_by_source"],
                                      **({"own replies labelled by completions": len(OWN[variants[best][1].partition("+own:")[2]])}
                                         if "+own:" in variants[best][1] else {})},
                       "never_trained_on": "any problem of an annotated test row",
                       "threshold_from": "annotated dev half, out of fold, maximising the first-error F1",
                       "measured": measured, "measured_final_known": known, "machine": machine,
                       "measured_by_paragraph": {where.removeprefix("test: "): {
                           mode: {k: m[k] for k in ("f1", "wrong_exact", "none_acc", "top1", "top3", "n_wrong",
                                                    "n_correct")} for mode, m in modes.items() if "paragraph" in mode}
                           for where, modes in per_file_modes.items() if where.startswith("test: ")}}
        if args.compact:  # fitted on projected states: ship the same verifier reading raw ones
            from compact_verifier_features import unproject

            info = chosen.info
            chosen = unproject(chosen, ROOT / "data/step_verifier" / args.reader / "compact" / "basis.npz")
            chosen.info = info
        meta, weights = chosen.save(ROOT / "grade/assets/step_verifier" / args.reader)
        print(f"shipped {meta} ({weights.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
