"""The step verifier's feature cache made small enough to leave a GPU machine, and read back.

    python scripts/studies/compact_verifier_features.py --reader qwen2.5-coder-1.5b-instruct --out DIR [--components 128]

A reader of Qwen's width keeps 6 x 1536 float16 numbers per step: about 0.5 GB for the 2,500 traces the verifier
learns from, while a device call brings back at most 8 files of 16 MiB. The verifier itself only ever uses the
leading principal directions of the standardised hidden states (StepVerifier's projection), so this keeps, per
depth in ``--depths``, the standardised states projected on the first ``--components`` principal directions of
the steps of every trace that is not an annotated test trace, and the projection itself:

* ``DIR/meta.npz``: keys, steps per trace, scalars, tokens, findings (JSON), the depths kept;
* ``DIR/basis.npz``: per depth ``mean_<i>``, ``scale_<i>`` (D,) and ``components_<i>`` (P, D) float32;
* ``DIR/hidden_<i>.npz``: per depth the projected states (steps, P) float16.

:func:`load_compact` gives back :class:`~grade.steps.verifier.TraceFeatures` whose hidden states are the projected
ones (zeros at depths not kept); :func:`unproject` turns a verifier fitted on them into one that reads raw hidden
states, the form the studio ships and runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def compact(folder: Path, out: Path, depths: list[int], n_components: int) -> dict:
    from sklearn.utils.extmath import randomized_svd

    from grade.steps.verifier import TraceFeatures

    rows = [json.loads(line) for line in (folder / "traces.jsonl").read_text().splitlines()]
    keys, features, fit_keys = [], {}, set()
    for r in rows:
        path = folder / f"{r['key']}.npz"
        if r["key"] in features or not path.is_file():
            continue
        features[r["key"]] = TraceFeatures.load(path)
        keys.append(r["key"])
    for r in rows:
        if r["key"] in features and not (r["source"] == "annotated" and r["split"] == "test"):
            fit_keys.add(r["key"])
    out.mkdir(parents=True, exist_ok=True)
    n_steps = np.array([features[k].n_steps for k in keys])
    np.savez(out / "meta.npz", keys=np.array(keys), n_steps=n_steps,
             scalars=np.concatenate([features[k].scalars for k in keys]).astype(np.float32),
             n_tokens=np.array([features[k].n_tokens for k in keys]),
             findings=np.array(json.dumps([features[k].findings for k in keys])), depths=np.array(depths))
    basis = {}
    for d in depths:
        fit = np.concatenate([features[k].hidden[:, d] for k in keys if k in fit_keys]).astype(np.float64)
        mean, sd = fit.mean(axis=0), fit.std(axis=0)
        scale = np.where(sd > 1e-8, sd, 1.0)
        _, _, vt = randomized_svd((fit - mean) / scale, n_components, random_state=0)
        basis[f"mean_{d}"], basis[f"scale_{d}"], basis[f"components_{d}"] = (
            mean.astype(np.float32), scale.astype(np.float32), vt.astype(np.float32))
        every = np.concatenate([features[k].hidden[:, d] for k in keys]).astype(np.float64)
        projected = ((every - basis[f"mean_{d}"]) / basis[f"scale_{d}"]) @ basis[f"components_{d}"].T
        np.savez(out / f"hidden_{d}.npz", hidden=projected.astype(np.float16))
    np.savez(out / "basis.npz", **basis)
    return {"traces": len(keys), "steps": int(n_steps.sum()), "fitted_on_traces": len(fit_keys)}


def load_compact(out: Path) -> dict:
    """{key: TraceFeatures} with hidden (K, len(FEATURE_DEPTHS), P): the projected states at the kept depths."""
    from grade.steps.verifier import FEATURE_DEPTHS, TraceFeatures

    with np.load(out / "meta.npz") as meta:
        keys, n_steps, scalars = list(meta["keys"]), meta["n_steps"], meta["scalars"]
        n_tokens, findings, depths = meta["n_tokens"], json.loads(str(meta["findings"])), list(meta["depths"])
    hidden = {}
    for d in depths:
        with np.load(out / f"hidden_{d}.npz") as h:
            hidden[d] = h["hidden"].astype(np.float32)
    width = next(iter(hidden.values())).shape[1]
    starts = np.concatenate([[0], np.cumsum(n_steps)])
    result = {}
    for i, key in enumerate(keys):
        a, b = starts[i], starts[i + 1]
        h = np.zeros((b - a, len(FEATURE_DEPTHS), width), dtype=np.float32)
        for d in depths:
            h[:, d] = hidden[d][a:b]
        result[str(key)] = TraceFeatures(h, scalars[a:b], int(n_tokens[i]), findings[i])
    return result


def unproject(verifier, basis_path: Path):
    """The verifier fitted on projected states as one that reads raw hidden states, predicting the same.

    Projected: u_d = ((h_d - m_d) / s_d) @ V_d.T; the verifier: x = ((u - a) / c) @ C.T (C split per depth
    into C_d). So x = sum_d ((h_d - m_d) / s_d) @ (C_d diag(1/c_d) V_d).T - (a / c) @ C.T: raw mean m, raw scale s,
    components [C_d diag(1/c_d) V_d] and the constant folded into the intercept."""
    from copy import deepcopy

    with np.load(basis_path) as b:
        basis = {k: b[k].astype(np.float64) for k in b.files}
    raw = deepcopy(verifier)
    if not verifier.layers:
        return raw
    width = basis[f"components_{verifier.layers[0]}"].shape[0]
    C = verifier.components_  # (Q, width * L)
    a, c = verifier.h_mean_, verifier.h_scale_
    blocks, means, scales = [], [], []
    for j, d in enumerate(verifier.layers):
        part = slice(j * width, (j + 1) * width)
        blocks.append((C[:, part] / c[part]) @ basis[f"components_{d}"])
        means.append(basis[f"mean_{d}"])
        scales.append(basis[f"scale_{d}"])
    raw.components_ = np.concatenate(blocks, axis=1)
    raw.h_mean_, raw.h_scale_ = np.concatenate(means), np.concatenate(scales)
    n_hidden = C.shape[0]
    offset = -(a / c) @ C.T  # (Q,)
    raw.intercept_ = float(verifier.intercept_ + offset @ verifier.coef_[:n_hidden])
    for name in ("h_mean_", "h_scale_", "components_"):
        setattr(raw, name, getattr(raw, name).astype(np.float32).astype(np.float64))
    raw.intercept_ = float(np.float32(raw.intercept_))
    return raw


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reader", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--depths", type=int, nargs="+", default=[1, 3, 5],
                   help="indices into grade.steps.verifier.FEATURE_DEPTHS (default 0.5, 0.75 and 1.0)")
    p.add_argument("--components", type=int, default=128)
    args = p.parse_args(argv)
    print(compact(ROOT / "data/step_verifier" / args.reader, args.out, args.depths, args.components))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
