"""The naive rank against the stable rank, for GRADE_pre of one model (issue 13, item 5).

The paper uses the stable rank Σλ/λ₁ because a naive rank, the count of eigenvalues with λ/λ₁ above a
threshold, moves with the threshold. This measures what the naive rank would have given: for
``--per-class`` answerable and as many unanswerable questions of each labels file (seeded), the exact
float64 spectra of C_h and C_g per layer (``grade.analyze(..., spectra=True)``), the naive rank ratio
rank(C_g)/rank(C_h) at each threshold beside the stable-rank ratio, stored one row per question in
``--out`` (Parquet), then one Markdown row per labels file: 5-fold logistic-regression AUROC of each
ratio vector, and the share of (question, layer) cells whose naive ratio is exactly 1 (both ranks equal:
no information). Resumes: questions already in ``--out`` are not analysed again.

    python experiments/naive_rank.py --model qwen2.5-coder-1.5b-instruct \\
        --labels data/labels/qwen2.5-coder-1.5b-instruct/{triviaqa,gsm8k}.jsonl.xz --per-class 60 \\
        --out runs/naive_rank/qwen.parquet
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from grade.batch.features import analyze_row
from grade.common.io import iter_jsonl
from grade.common.metrics import cross_validated_auroc

THRESHOLDS = (1e-6, 1e-4, 1e-2)


def naive_rank(eig: np.ndarray, threshold: float) -> np.ndarray:
    """(L,) count of eigenvalues per layer with λ/λ₁ > threshold; eig (L, n), descending."""
    top = eig[:, :1]
    return (eig > threshold * np.where(top > 0, top, np.inf)).sum(axis=1)


def pick(rows: list[dict], per_class: int, seed: int) -> list[dict]:
    """At most ``per_class`` seeded rows of each label (as many of each), alternating answerable and unanswerable, so that a run stopped
    early (a time limit) still holds both classes."""
    rng = np.random.default_rng(seed)
    groups = []
    for label in (1, 0):
        group = [r for r in rows if r.get("label") == label]
        groups.append([group[i] for i in sorted(rng.permutation(len(group))[:per_class])])
    return [row for pair in zip(*groups) for row in pair]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--labels", type=Path, nargs="+", required=True)
    parser.add_argument("--per-class", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--report-only", action="store_true", help="only print the table of what --out holds")
    args = parser.parse_args()

    done = pd.read_parquet(args.out) if args.out.exists() else pd.DataFrame()
    if not args.report_only:
        import grade

        lm = grade.load_model(args.model, device=args.device, dtype=args.dtype)
        records = done.to_dict("records")
        seen = {(r["file"], r["id"]) for r in records}
        for path in args.labels:
            name = path.name.split(".")[0]
            rows = pick([value for _, value, problem in iter_jsonl(path) if problem is None], args.per_class, args.seed)
            for i, row in enumerate(rows):
                if (name, row["id"]) in seen:
                    continue
                result = analyze_row(lm, row, loss="pre", keep_hidden=False, spectra=True)
                record = {"file": name, "id": row["id"], "label": int(row["label"]), "n_tokens": len(result.input_ids),
                          "srank_ratio": result.rank_ratio.tolist()}
                for t in THRESHOLDS:
                    record[f"naive_{t:g}"] = (naive_rank(result.eig_g, t) / naive_rank(result.eig_h, t)).tolist()
                records.append(record)
                print(f"{name} {i + 1}/{len(rows)}", file=sys.stderr, flush=True)
                if len(records) % 10 == 0:  # a killed run keeps what it finished
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    pd.DataFrame(records).to_parquet(args.out, index=False)
        done = pd.DataFrame(records)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        done.to_parquet(args.out, index=False)
    columns = ["srank_ratio"] + [f"naive_{t:g}" for t in THRESHOLDS]
    print(f"| labels | n (answerable) | {' | '.join(columns)} | share of naive ratios = 1 at {', '.join(f'{t:g}' for t in THRESHOLDS)} |")
    print("|---|---|" + "---|" * (len(columns) + 1))
    for name, group in done.groupby("file"):
        y = group["label"].to_numpy(int)
        cells = []
        if min(y.sum(), len(y) - y.sum()) < 5:  # five folds need five rows of each class
            continue
        for column in columns:
            x = np.stack(group[column].to_numpy())
            # a constant column (every naive ratio 1.0) carries nothing: AUROC 0.5 by definition
            cells.append("0.500 (constant)" if np.ptp(x, axis=0).max() == 0 else f"{cross_validated_auroc(x, y):.3f}")
        ones = [f"{np.mean(np.stack(group[f'naive_{t:g}'].to_numpy()) == 1.0):.2f}" for t in THRESHOLDS]
        print(f"| {name} | {len(y)} ({int(y.sum())}) | {' | '.join(cells)} | {', '.join(ones)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
