"""A step head fine-tuned on the reader (LoRA) instead of a probe on its frozen states, chosen on other models'
annotated traces (MR-GSM8K, Mr-Ben; the dev halves) and scored once on their test halves, by paragraph, in both
protocols, beside the shipped step verifier (``scripts/studies/transfer_step_verifier.py``).

    # the GPU part (one command; resumable: each variant's predictions file is rewritten after every fold)
    python scripts/studies/lora_step_verifier.py train --device cuda --out DIR [--time-limit S]
    # scoring (CPU): thresholds per protocol on the dev halves out of fold, then the test halves once; without
    # --preds it rescores the predictions kept in results/; --probe-per-level also refits the shipped probe
    python scripts/studies/lora_step_verifier.py score --preds DIR [--probe-per-level]
    # a check of the whole path on a CPU in a minute or two (one trace of each file and half, one epoch, two folds)
    python scripts/studies/lora_step_verifier.py train --device cpu --limit 1 --folds 2 --epochs 1 --only r16 \
        --out /tmp/lora_check
    python scripts/studies/lora_step_verifier.py score --preds /tmp/lora_check --n-boot 50 --no-write

Each trace is read as :mod:`grade.steps.verifier` reads it (the reader's chat template, the same steps and the same
token at each step's end: ``grade.steps.verifier._prepare``). The head: a layer norm of the residual stream at each
step's last token at the verifier's depths 0.75 and 1.0, the verifier's per-step scalars (surprisal of the frozen
reader, length, position, the model-free check), one linear layer; target "this step is the first wrong one" (steps
after it left out), each trace's weight spread over its steps and the two classes balanced (as
``StepVerifier.fit``). LoRA adapters on every attention and MLP projection of the reader, trained with the head;
the variant ``head only`` trains the same head on the frozen reader. Training data: the external dev halves plus the
repository's Qwen-annotated traces (``gsm8k_qwen``, ``gsm8k_qwen_cut``, ``math_qwen``, both halves: none of them is
cited here), as the shipped verifier's. Folds: 5 by problem over the external dev halves (``fold_of``), the Qwen
traces in every fold's training set; after the folds each variant is trained on all of it and predicts the test
halves. The per-step scalars come from the feature cache of ``scripts/studies/step_verifier_features.py``
(``--export-scalars`` packs them for the GPU machine); a trace missing there is read by the frozen reader.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts/studies"))

import transfer_step_verifier as tsv  # noqa: E402  (levels, folds, thresholds, metrics of the probe's study)

from grade.steps.kinds import canonical_kind  # noqa: E402
from grade.steps.scoring import step_paragraphs  # noqa: E402
from grade.steps.verifier import (FEATURE_DEPTHS, SCALARS, StepVerifier, TraceFeatures, _layer_indices,  # noqa: E402
                                  _prepare, step_features_batch, step_targets, trace_key)

READER = "smollm2-135m-instruct"
DEPTHS = (3, 5)  # indices into FEATURE_DEPTHS: 0.75 and 1.0, the shipped verifier's deepest two
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: name -> settings; tried in this order (the first is the experiment the issue asks for).
VARIANTS = {
    "LoRA r16 (attention + MLP), head on hidden(0.75,1.0)+scalars, 2 epochs":
        dict(rank=16, alpha=32, lr=2e-4, head_lr=1e-3, epochs=2),
    "head only (frozen reader), hidden(0.75,1.0)+scalars, 3 epochs":
        dict(rank=0, alpha=0, lr=0.0, head_lr=1e-3, epochs=3),
    "LoRA r8 (attention + MLP), head on hidden(0.75,1.0)+scalars, 2 epochs":
        dict(rank=8, alpha=16, lr=1e-4, head_lr=1e-3, epochs=2),
    # p_k = P(an error by step k), every step of a wrong trace trained on; ranked by its rise (StepVerifier's rule)
    "LoRA r16 (attention + MLP), cumulative target, head on hidden(0.75,1.0)+scalars, 2 epochs":
        dict(rank=16, alpha=32, lr=2e-4, head_lr=1e-3, epochs=2, target="cumulative"),
}
SHIPPED = ROOT / "results/step_errors/transfer/verifier_smollm2-135m-instruct.json.xz"
RESULTS = ROOT / "results/step_errors/transfer"


def slug(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()[:10]


# ------------------------------------------------------------------------------------------------ data


def load_rows(external: Path, limit: int | None = None) -> list[dict]:
    """Every external trace and the repository's Qwen-annotated ones (no features): the probe study's fields."""
    from grade.steps.real_errors import annotated_traces

    traces = [(t, True) for t in annotated_traces(folder=external)] + [(t, False) for t in annotated_traces()]
    rows = []
    for t, external_row in traces:
        group = t.file.split(".")[0]
        if not external_row and group not in tsv.OWN_REAL:
            continue
        rows.append({"id": t.id, "problem": t.problem, "file": group, "split": t.split, "first_wrong": t.first_wrong,
                     "kind": canonical_kind(t.kind) if t.kind else None, "final_correct": t.final_correct,
                     "question": t.question, "trace": t.trace, "task": t.task, "external": external_row,
                     "level": tsv.LEVELS.get(group, t.task), "paragraphs": step_paragraphs(t.trace),
                     "key": trace_key(READER, t.question, t.trace, t.task)})
    test_problems = {r["problem"] for r in rows if r["external"] and r["split"] == "test"}
    rows = [r for r in rows if r["external"] or r["problem"] not in test_problems]
    if limit:  # the CPU check: a few traces of each (file, split)
        seen: dict = {}
        keep = []
        for r in rows:
            k = (r["file"], r["split"])
            if seen.get(k, 0) < limit:
                seen[k] = seen.get(k, 0) + 1
                keep.append(r)
        rows = keep
    return rows


def parts(rows: list[dict]) -> tuple[list[dict], list[dict], list[dict]]:
    ext_dev = [r for r in rows if r["external"] and r["split"] == "dev"]
    test = [r for r in rows if r["external"] and r["split"] == "test"]
    own = [r for r in rows if not r["external"]]
    return ext_dev, test, own


def export_scalars(rows: list[dict], path: Path) -> None:
    """The per-step scalars of every row found in the feature cache, packed by trace key (a few hundred kB)."""
    folder = ROOT / "data/step_verifier" / READER
    out = {}
    for r in rows:
        f = folder / f"{r['key']}.npz"
        if f.is_file():
            out[r["key"]] = TraceFeatures.load(f).scalars
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **out)
    print(f"{len(out)} of {len(rows)} traces' scalars -> {path}")


def attach_scalars(rows: list[dict], lm, packed: Path | None) -> None:
    """rows[i]["scalars"]: (K, len(SCALARS)) from ``packed`` where there, else read by the frozen reader."""
    cache = dict(np.load(packed)) if packed and packed.is_file() else {}
    missing = [r for r in rows if r["key"] not in cache]
    if missing:
        print(f"reading {len(missing)} traces' scalars with the frozen reader", flush=True)
        feats = step_features_batch(lm, [(r["question"], r["trace"], r["task"]) for r in missing])
        for r, f in zip(missing, feats):
            if isinstance(f, Exception):
                raise f
            cache[r["key"]] = f.scalars
    for r in rows:
        r["scalars"] = np.asarray(cache[r["key"]], dtype=np.float32)


# ------------------------------------------------------------------------------------------------ model


def add_lora(model, rank: int, alpha: float, dropout: float = 0.05):
    """LoRA adapters (x A^T B^T alpha / r; B starts at zero) on every projection named in TARGETS; returns them."""
    import torch

    class LoRALinear(torch.nn.Module):
        def __init__(self, base: torch.nn.Linear):
            super().__init__()
            self.base = base
            self.A = torch.nn.Parameter(torch.empty(rank, base.in_features, device=base.weight.device))
            self.B = torch.nn.Parameter(torch.zeros(base.out_features, rank, device=base.weight.device))
            torch.nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
            self.scale = alpha / rank
            self.drop = torch.nn.Dropout(dropout)

        def forward(self, x):
            return self.base(x) + (self.drop(x) @ self.A.t().to(x.dtype)) @ self.B.t().to(x.dtype) * self.scale

    adapters = []
    for module in list(model.modules()):
        for name in TARGETS:
            child = getattr(module, name, None)
            if isinstance(child, torch.nn.Linear):
                wrapped = LoRALinear(child)
                setattr(module, name, wrapped)
                adapters.append(wrapped)
    return adapters


def remove_lora(model) -> None:
    for module in list(model.modules()):
        for name in TARGETS:
            child = getattr(module, name, None)
            if child is not None and hasattr(child, "base") and hasattr(child, "A"):
                setattr(module, name, child.base)


class Head:
    """LayerNorm per depth, the standardised scalars, dropout, one linear layer: a logit per step."""

    def __init__(self, hidden: int, n_scalars: int, s_mean, s_scale, device):
        import torch

        self.norms = torch.nn.ModuleList([torch.nn.LayerNorm(hidden) for _ in DEPTHS]).to(device)
        self.linear = torch.nn.Linear(hidden * len(DEPTHS) + n_scalars, 1).to(device)
        self.drop = torch.nn.Dropout(0.1)
        self.s_mean = torch.tensor(s_mean, dtype=torch.float32, device=device)
        self.s_scale = torch.tensor(s_scale, dtype=torch.float32, device=device)

    def parameters(self):
        return list(self.norms.parameters()) + list(self.linear.parameters())

    def train(self, on: bool) -> None:
        self.norms.train(on), self.drop.train(on)

    def __call__(self, hs: list, scalars):
        import torch

        x = torch.cat([n(h.float()) for n, h in zip(self.norms, hs)] + [(scalars - self.s_mean) / self.s_scale], dim=1)
        return self.linear(self.drop(x)).squeeze(1)


def prepare_all(lm, rows: list[dict]) -> None:
    for r in rows:
        p = _prepare(lm, r["question"], r["trace"], r["task"])
        assert len(p.spans) == len(r["scalars"]) == len(r["paragraphs"]), r["id"]
        r["ids"] = p.prompt_ids + p.response_ids
        n_prompt = len(p.prompt_ids)
        # the token each step is read at, as grade.steps.verifier._read
        r["last"] = [n_prompt + (max(e - 1, 0) if e > a else max(a - 1, 0)) for a, e in p.ranges]


def batches(rows: list[dict], max_tokens: int, rng: np.random.Generator | None) -> list[list[int]]:
    """Indices grouped by length (padding small), at most ``max_tokens`` padded tokens a batch; shuffled if rng."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]["ids"]))
    if rng is not None:  # jitter lengths a little so that batches differ between epochs
        order = sorted(order, key=lambda i: len(rows[i]["ids"]) * (1 + 0.1 * rng.random()))
    out, cur, width = [], [], 0
    for i in order:
        w = max(width, len(rows[i]["ids"]))
        if cur and w * (len(cur) + 1) > max_tokens:
            out.append(cur)
            cur, w = [], len(rows[i]["ids"])
        cur.append(i)
        width = w
    if cur:
        out.append(cur)
    if rng is not None:
        rng.shuffle(out)
    return out


def forward(lm, head, rows: list[dict], idx: list[int], layers: list[int], grad: bool):
    """Logits of every step of rows[idx] (concatenated in order)."""
    import torch

    device = lm.device
    width = max(len(rows[i]["ids"]) for i in idx)
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([rows[i]["ids"] + [pad] * (width - len(rows[i]["ids"])) for i in idx], device=device)
    mask = torch.tensor([[1] * len(rows[i]["ids"]) + [0] * (width - len(rows[i]["ids"])) for i in idx], device=device)
    b = torch.cat([torch.full((len(rows[i]["last"]),), j, dtype=torch.long) for j, i in enumerate(idx)]).to(device)
    t = torch.cat([torch.tensor(rows[i]["last"], dtype=torch.long) for i in idx]).to(device)
    s = torch.from_numpy(np.concatenate([rows[i]["scalars"] for i in idx])).to(device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast(
        "cpu", enabled=False)
    with torch.set_grad_enabled(grad), autocast:
        out = lm.model.model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
        hs = [out.hidden_states[k][b, t] for k in layers]
    with torch.set_grad_enabled(grad):
        return head(hs, s)


def target_of(settings: dict) -> str:
    """A variant's target (:func:`grade.steps.verifier.step_targets`): ``first`` unless it names another."""
    return settings.get("target", "first")


def step_weights(rows: list[dict], target: str = "first") -> None:
    """rows[i]["y"], ["w"]: the ``target``'s per-step labels and weights (a trace's weight spread over its used steps;
    classes balanced over the training set, mean weight 1 over used steps); unused steps weight 0."""
    pos = neg = 0.0
    for r in rows:
        y, used = step_targets(len(r["last"]), r["first_wrong"], target)
        w = np.where(used, 1.0 / max(int(used.sum()), 1), 0.0)
        r["y"], r["w"] = y.astype(np.float32), w
        pos += float((w * y).sum())
        neg += float((w * (1 - y)).sum())
    n = sum(int((r["w"] > 0).sum()) for r in rows)
    for r in rows:
        r["w"] = (r["w"] * np.where(r["y"] > 0, 0.5 / max(pos, 1e-9), 0.5 / max(neg, 1e-9)) * n).astype(np.float32)


def train_and_predict(lm, settings: dict, train: list[dict], predict: list[dict], *, seed: int, max_tokens: int,
                      say=print) -> list[np.ndarray]:
    """Fresh adapters and head, trained on ``train``; per-step probabilities of ``predict``."""
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    layers = [_layer_indices(lm.model.config.num_hidden_layers)[k] for k in DEPTHS]
    remove_lora(lm.model)
    adapters = add_lora(lm.model, settings["rank"], settings["alpha"]) if settings["rank"] else []
    S = np.concatenate([r["scalars"] for r in train])
    s_mean, sd = S.mean(axis=0), S.std(axis=0)
    head = Head(lm.model.config.hidden_size, len(SCALARS), s_mean, np.where(sd > 1e-8, sd, 1.0), lm.device)
    step_weights(train, target_of(settings))
    groups = [{"params": head.parameters(), "lr": settings["head_lr"], "weight_decay": 0.01}]
    if adapters:
        groups.append({"params": [p for a in adapters for p in (a.A, a.B)], "lr": settings["lr"], "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups)
    plan = [batches(train, max_tokens, rng) for _ in range(settings["epochs"])]
    total = sum(len(p) for p in plan)
    warm = max(1, total // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min((k + 1) / warm, max(0.0, (total - k) / max(total - warm, 1))))
    lm.model.train(bool(adapters))
    head.train(True)
    step = 0
    t0 = time.perf_counter()
    for epoch, plan_e in enumerate(plan):
        run_loss = 0.0
        for idx in plan_e:
            logits = forward(lm, head, train, idx, layers, grad=True)
            y = torch.from_numpy(np.concatenate([train[i]["y"] for i in idx])).to(logits.device)
            w = torch.from_numpy(np.concatenate([train[i]["w"] for i in idx])).to(logits.device)
            loss = (torch.nn.functional.binary_cross_entropy_with_logits(logits.float(), y, reduction="none") * w).sum() \
                / max(float((w > 0).sum()), 1.0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for g in groups for p in g["params"]], 1.0)
            opt.step()
            sched.step()
            step += 1
            run_loss += float(loss.detach())
        say(f"  epoch {epoch + 1}: loss {run_loss / max(len(plan_e), 1):.4f} ({time.perf_counter() - t0:.0f} s)")
    lm.model.eval()
    head.train(False)
    out: list = [None] * len(predict)
    for idx in batches(predict, max_tokens * 2, None):
        p = torch.sigmoid(forward(lm, head, predict, idx, layers, grad=False).float()).cpu().numpy()
        k = 0
        for i in idx:
            n = len(predict[i]["last"])
            out[i] = p[k:k + n]
            k += n
    remove_lora(lm.model)
    return out


def run_train(args) -> int:
    import torch

    from grade import load_model

    t_start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = load_rows(args.external, args.limit)
    if args.export_scalars:
        export_scalars(rows, args.export_scalars)
        return 0
    torch.backends.cuda.matmul.allow_tf32 = True
    lm = load_model(READER, device=args.device, dtype="float32")  # the reader as on a CPU; bf16 autocast
    for p in lm.model.parameters():
        p.requires_grad_(False)
    attach_scalars(rows, lm, args.scalars)
    prepare_all(lm, rows)
    ext_dev, test, own = parts(rows)
    print(f"rows: external dev {len(ext_dev)}, test {len(test)}, Qwen's annotated (training) {len(own)}; "
          f"{time.perf_counter() - t_start:.0f} s", flush=True)
    names = [n for n in VARIANTS if not args.only or any(o in n for o in args.only)]
    if args.epochs:
        for n in names:
            VARIANTS[n] = {**VARIANTS[n], "epochs": args.epochs}
    fold_seconds: list[float] = []
    for name in names:
        path = args.out / f"preds_{slug(name)}.json"
        state = json.loads(path.read_text()) if path.is_file() else {
            "variant": name, "settings": VARIANTS[name], "folds": {}, "test": None, "seconds": {}}
        # the test halves' predictions first, so that a run cut short has them (they are scored only after the
        # thresholds are chosen on the dev folds, whichever ran)
        jobs = ["all"] + [str(k) for k in range(args.folds)]
        for job in jobs:
            if (job == "all" and state["test"] is not None) or job in state["folds"]:
                continue
            left = args.time_limit - (time.perf_counter() - t_start)
            need = 1.3 * (max(fold_seconds) if fold_seconds else 0)
            if left < need:
                print(f"stopping: {left:.0f} s left, a fold takes about {need / 1.3:.0f} s", flush=True)
                return 0
            t0 = time.perf_counter()
            if job == "all":
                train, predict = ext_dev + own, test
            else:
                held = {r["problem"] for r in ext_dev if tsv.fold_of(r["problem"], args.folds) == int(job)}
                train = [r for r in ext_dev if r["problem"] not in held] + own
                predict = [r for r in ext_dev if r["problem"] in held]
            print(f"{name}: {job} (train {len(train)}, predict {len(predict)})", flush=True)
            probs = train_and_predict(lm, VARIANTS[name], train, predict, seed=args.seed + len(state["folds"]),
                                      max_tokens=args.max_tokens, say=lambda m: print(m, flush=True))
            preds = {r["id"]: [round(float(x), 6) for x in p] for r, p in zip(predict, probs)}
            if job == "all":
                state["test"] = preds
            else:
                state["folds"][job] = preds
            state["seconds"][job] = time.perf_counter() - t0
            fold_seconds.append(state["seconds"][job])
            state["device"] = torch.cuda.get_device_name() if lm.device.type == "cuda" else "cpu"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
            tmp.replace(path)
            print(f"  {job} done in {state['seconds'][job]:.0f} s", flush=True)
    print(f"all done in {time.perf_counter() - t_start:.0f} s")
    return 0


# ------------------------------------------------------------------------------------------------ scoring


def read_states(preds: Path) -> list[dict]:
    """Each variant's predictions: a folder of ``preds_*.json`` (what the GPU run wrote) or their xz bundle."""
    import lzma

    if preds.is_file():
        return list(json.loads(lzma.decompress(preds.read_bytes())).values())
    return [json.loads(p.read_text()) for p in sorted(preds.glob("preds_*.json"))]


def probe_probs(external: Path) -> tuple[str, dict, dict, bool]:
    """The shipped verifier's variant (a probe on frozen states) refitted as the probe study fits it: its dev
    predictions out of fold and its test predictions, by trace id (needs the local feature cache), and whether it
    has the localizer (its verdicts then follow that rule)."""
    import lzma

    name = json.loads(lzma.decompress(SHIPPED.read_bytes()))["chosen"]
    # "...; thresholds per level" is its base variant's fit with each level's thresholds (the probe study's rule)
    settings, sources = tsv.VARIANTS[name.removesuffix("; thresholds per level")]
    rows, _ = tsv.load_rows(READER, external)
    dev = [r for r in rows if r["external"] and r["split"] == "dev"]
    test = [r for r in rows if r["external"] and r["split"] == "test"]
    test_problems = {r["problem"] for r in test}
    others = [r for r in rows if not r["external"] and r["problem"] not in test_problems]
    oof = {}
    for k in range(5):
        held = {r["problem"] for r in dev if tsv.fold_of(r["problem"]) == k}
        v = tsv.fit(settings, tsv.training_pool(sources, [r for r in dev if r["problem"] not in held], others))
        oof.update({r["id"]: v.predict_proba(r["features"]) for r in dev if r["problem"] in held})
    v = tsv.fit(settings, tsv.training_pool(sources, dev, others))
    return name, oof, {r["id"]: v.predict_proba(r["features"]) for r in test}, bool(settings.get("localizer"))


def per_level(dev: list[dict], dev_probs: dict, test: list[dict], test_probs: dict, n_boot: int,
              target: str = "first", localizer: bool = False) -> dict:
    """Each level its own thresholds (chosen on its dev traces out of fold), then its test traces scored once."""
    out = {}
    for level in ("gsm8k", "math"):
        d = [r for r in dev if r["level"] == level and r["id"] in dev_probs]
        t = [r for r in test if r["level"] == level and r["id"] in test_probs]
        if not d or not t:
            continue
        v = StepVerifier(target=target, localizer=localizer)
        chosen = tsv.choose_thresholds(v, [np.asarray(dev_probs[r["id"]]) for r in d], d)
        for protocol in tsv.PROTOCOLS:
            out[f"level {level}, {protocol}"] = {
                "thresholds": {k: x for k, x in chosen.items() if k.startswith("threshold")},
                "dev": tsv.metrics(v, [np.asarray(dev_probs[r["id"]]) for r in d], d, protocol, n_boot),
                "test": tsv.metrics(v, [np.asarray(test_probs[r["id"]]) for r in t], t, protocol, n_boot)}
    return out


def paired(rows: list[dict], a: tuple, b: tuple, protocol: str, n_boot: int, seed: int = 0) -> dict:
    """Differences a - b of F1, exact, "none", top-1 and top-3 by paragraph on the same traces, with 95 % paired
    bootstrap intervals (erroneous and correct traces resampled apart, as first_error_metrics); a, b: (verifier
    holding the thresholds, per-step probabilities per row)."""
    from grade.steps.locate import _hit_at

    per = []
    for verifier, probs in (a, b):
        pred, scores, wrong = tsv.answers(verifier, probs, rows, protocol)
        w = [i for i, e in enumerate(wrong) if e is not None]
        ok = [i for i, e in enumerate(wrong) if e is None]
        per.append({"wrong_exact": np.array([float(pred[i] == wrong[i]) for i in w]),
                    "none_acc": np.array([float(pred[i] is None) for i in ok]),
                    "top1": np.array([_hit_at(np.asarray(scores[i], float), wrong[i], 1) for i in w]),
                    "top3": np.array([_hit_at(np.asarray(scores[i], float), wrong[i], 3) for i in w])})
    rng = np.random.default_rng(seed)
    nw, no = len(per[0]["wrong_exact"]), len(per[0]["none_acc"])
    bw, bo = rng.integers(0, max(nw, 1), (n_boot, nw)), rng.integers(0, max(no, 1), (n_boot, no))

    def f1(x, y):
        return np.where(x + y > 0, 2 * x * y / np.maximum(x + y, 1e-12), 0.0)

    out = {}
    for key in ("wrong_exact", "none_acc", "top1", "top3", "f1"):
        if key == "f1":
            if not (nw and no):
                continue
            va = [f1(m["wrong_exact"][bw].mean(1), m["none_acc"][bo].mean(1)) for m in per]
            v0 = [float(f1(m["wrong_exact"].mean(), m["none_acc"].mean())) for m in per]
        else:
            n, idx = (no, bo) if key == "none_acc" else (nw, bw)
            if not n:
                continue
            va = [m[key][idx].mean(1) for m in per]
            v0 = [float(m[key].mean()) for m in per]
        d = va[0] - va[1]
        out[key] = {"value": v0[0] - v0[1], "low": float(np.percentile(d, 2.5)), "high": float(np.percentile(d, 97.5))}
    return out


def run_score(args) -> int:
    import lzma

    rows = load_rows(args.external)
    ext_dev, test, own = parts(rows)
    training = {f: sum(r["file"] == f for r in ext_dev + own) for f in sorted({r["file"] for r in ext_dev + own})}
    states = read_states(args.preds)
    order = {n: i for i, n in enumerate(VARIANTS)}
    states.sort(key=lambda s: order.get(s["variant"], 99))
    dev_scores, thresholds, test_scores, complete, levels = {}, {}, {}, {}, {}
    for s in states:
        name = s["variant"]
        oof = {i: p for fold in s["folds"].values() for i, p in fold.items()}
        dev = [r for r in ext_dev if r["id"] in oof]
        if not dev:
            continue
        complete[name] = {"settings": s["settings"], "dev folds": sorted(s["folds"]), "dev traces": len(dev),
                          "of": len(ext_dev), "test": s["test"] is not None, "seconds": s.get("seconds"),
                          "device": s.get("device")}
        probs = [np.asarray(oof[r["id"]]) for r in dev]
        # the LoRA head's p_k are given: the verifier object only holds thresholds, the suspect rule and the ranking
        v = StepVerifier(target=target_of(s["settings"]))
        thresholds[name] = tsv.choose_thresholds(v, probs, dev)
        dev_scores[name] = {
            f"{protocol} {g}": tsv.metrics(v, [probs[i] for i in idx], [dev[i] for i in idx], protocol, args.n_boot)
            for protocol in tsv.PROTOCOLS for g, idx in tsv.groups(dev).items() if g.startswith("level")}
        dev_scores[name]["mean F1 (levels x protocols)"] = float(np.mean(
            [m["f1"]["value"] for m in dev_scores[name].values()]))
        if s["test"] is not None:
            part_all = [r for r in test if r["id"] in s["test"]]
            for g, idx in tsv.groups(part_all).items():
                part = [part_all[i] for i in idx]
                for protocol in tsv.PROTOCOLS:
                    test_scores.setdefault(f"{g}, {protocol}", {})[name] = tsv.metrics(
                        v, [np.asarray(s["test"][r["id"]]) for r in part], part, protocol, args.n_boot)
            levels[name] = per_level(ext_dev, oof, test, s["test"], args.n_boot, target_of(s["settings"]))
    if not dev_scores:
        print("no predictions found")
        return 1
    full = [n for n in dev_scores if complete[n]["dev traces"] == complete[n]["of"] and complete[n]["test"]]
    best = max(full or dev_scores, key=lambda n: dev_scores[n]["mean F1 (levels x protocols)"])
    shipped = json.loads(lzma.decompress(SHIPPED.read_bytes())) if SHIPPED.is_file() else None
    ship_name = shipped["chosen"] if shipped else None
    differences = {}
    if args.probe_per_level and shipped:
        _, oof, tp, localizer = probe_probs(args.external)
        levels["shipped verifier (probe on frozen states), refitted"] = per_level(ext_dev, oof, test, tp, args.n_boot,
                                                                                 localizer=localizer)
        # the chosen LoRA head against the probe on the same test traces, each with its own dev thresholds
        lora = next(s for s in states if s["variant"] == best)
        va, vb = head_verifier(lora, thresholds[best]), StepVerifier(target="first", localizer=localizer)
        for k, x in shipped["thresholds"][ship_name].items():
            setattr(vb, k, x)
        for level in ("gsm8k", "math"):
            part = [r for r in test if r["level"] == level]
            for protocol in tsv.PROTOCOLS:
                differences[f"level {level}, {protocol}"] = paired(
                    part, (va, [np.asarray(lora["test"][r["id"]]) for r in part]),
                    (vb, [np.asarray(tp[r["id"]]) for r in part]), protocol, args.n_boot)
    per_kind = kind_table(next(s for s in states if s["variant"] == best), thresholds[best], test, args.n_boot)
    import subprocess

    commit = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h", "--", str(Path(__file__).resolve())],
                            capture_output=True, text=True).stdout.strip()
    results = {"date": time.strftime("%Y-%m-%d"), "script_commit": commit, "reader": READER, "chosen": best,
               "training_traces": training, "variants": VARIANTS,
               "runs": complete, "thresholds": thresholds, "dev_out_of_fold": dev_scores, "test": test_scores,
               "per_level_thresholds": levels, "chosen_minus_probe_test": differences, "test_per_kind": per_kind,
               "shipped_verifier": {"variant": ship_name, "commit": shipped and shipped.get("commit"),
                                    "dev_out_of_fold": shipped and shipped["dev_out_of_fold"][ship_name],
                                    "test": shipped and {g: res[ship_name] for g, res in shipped["test"].items()}}}
    md = render(results, args)
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        keep = ("f1", "wrong_exact", "none_acc", "top1", "top3", "n_wrong", "n_correct")
        small = json.loads(json.dumps(results, default=float))
        for section in ("dev_out_of_fold", "test"):
            for key, d in small[section].items():
                for n, m in d.items():
                    if isinstance(m, dict):
                        d[n] = {k: v for k, v in m.items() if k in keep}
        for n, d in small["per_level_thresholds"].items():
            for key, m in d.items():
                for half in ("dev", "test"):
                    m[half] = {k: v for k, v in m[half].items() if k in keep}
        for key, d in small["test_per_kind"].items():
            for protocol, m in d.items():
                d[protocol] = {k: v for k, v in m.items() if k in keep}
        for key, d in (small["shipped_verifier"]["test"] or {}).items():
            small["shipped_verifier"]["test"][key] = {k: v for k, v in d.items() if k in keep}
        # xz-compressed, as the study's other JSON results (the .md beside it holds the tables)
        (RESULTS / f"lora_{READER}.json.xz").write_bytes(lzma.compress((json.dumps(rounded(small), indent=1) + "\n").encode()))
        (RESULTS / f"lora_{READER}.md").write_text(md + "\n")
        if args.preds.is_dir():  # the per-step predictions kept beside the tables, so that scoring can be rerun
            bundle = {s["variant"]: s for s in states}
            (RESULTS / f"lora_{READER}_preds.json.xz").write_bytes(lzma.compress(json.dumps(bundle).encode(), preset=9 | lzma.PRESET_EXTREME))
    print(md)
    return 0


def head_verifier(state: dict, chosen: dict) -> StepVerifier:
    """A verifier holding a head's rule and its dev thresholds (``chosen``: tsv.choose_thresholds's answer): the
    head's p_k are given, so it only decides verdicts and ranks steps."""
    verifier = StepVerifier(target=target_of(state["settings"]))
    for k, x in chosen.items():
        if k.startswith("threshold"):
            setattr(verifier, k, x)
    return verifier


def kind_table(state: dict, chosen: dict, test: list[dict], n_boot: int) -> dict:
    """The chosen head's test traces with an error, per level and kind of error (5 or more), scored in both protocols
    with its dev thresholds: {"<level>: <kind>": {protocol: metrics}} (the probe's own table: the verifier study's)."""
    verifier = head_verifier(state, chosen)
    scored = [r for r in test if r["id"] in (state["test"] or {})]
    return {key: {protocol: tsv.metrics(verifier, [np.asarray(state["test"][r["id"]]) for r in part], part, protocol,
                                        n_boot) for protocol in tsv.PROTOCOLS}
            for key, part in tsv.kind_groups(scored).items()}


def rounded(value):
    """Floats to 4 significant digits, inside dicts and lists: the tables' precision (the per-step predictions
    are kept whole in the .json.xz beside them)."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def render(results: dict, args) -> str:
    best = results["chosen"]
    ship = results["shipped_verifier"]
    lines = [f"## A step head fine-tuned on the reader (LoRA): reader {READER}", "",
             f"{results['date']}. Scored by paragraph; `unknown`: final answer not given, `known`: its correctness "
             "given. Thresholds per protocol chosen on the external dev halves out of fold (5 folds by problem), "
             "the variant of the best mean F1 over levels and protocols chosen there, then scored once on the test "
             "halves. Beside it the step verifier shipped now (a probe on frozen states; "
             f"`verifier_{READER}.md`, commit {ship['commit']}).", "",
             "Training traces (every fold: the external dev halves less the fold's problems, plus Qwen's): "
             + ", ".join(f"{f} {n}" for f, n in results["training_traces"].items()) + ". Trained on "
             + ", ".join(sorted({str(c["device"]) for c in results["runs"].values()})) + " (the script at commit "
             f"{results['script_commit']}); scored on a CPU.", "",
             "### dev halves, out of fold (F1 by paragraph)", "",
             "| variant | folds | mean | unknown GSM8K | unknown MATH | known GSM8K | known MATH |",
             "|---|---|---|---|---|---|---|"]
    keys = ("unknown level gsm8k", "unknown level math", "known level gsm8k", "known level math")
    for n, d in results["dev_out_of_fold"].items():
        label = f"**{n}**" if n == best else n
        lines.append(f"| {label} | {len(results['runs'][n]['dev folds'])} | {d['mean F1 (levels x protocols)']:.3f} | "
                     + " | ".join(tsv.cell(d.get(k, {}).get("f1")) for k in keys) + " |")
    if ship["dev_out_of_fold"]:
        d = ship["dev_out_of_fold"]
        lines.append(f"| shipped verifier (probe; {ship['variant']}) | 5 | {d['mean F1 (levels x protocols)']:.3f} | "
                     + " | ".join(tsv.cell(d.get(k, {}).get("f1")) for k in keys) + " |")
    lines += ["", "### test halves (scored once)", ""]
    for g, res in results["test"].items():
        res = dict(res)
        if ship["test"] and g in ship["test"]:
            res["shipped verifier (probe on frozen states)"] = ship["test"][g]
        lines += tsv.table(res, g, best)
    if results.get("per_level_thresholds"):
        lines += ["### a threshold per level (secondary: each level's thresholds chosen on its own dev traces out of "
                  "fold; the reader knows a trace's task)", "",
                  "| method | level, protocol | dev F1 | test F1 | test exact | test \"none\" on correct |",
                  "|---|---|---|---|---|---|"]
        for n, d in results["per_level_thresholds"].items():
            for key, m in d.items():
                lines.append(f"| {n} | {key} | {tsv.cell(m['dev']['f1'])} | {tsv.cell(m['test']['f1'])} | "
                             f"{tsv.cell(m['test']['wrong_exact'])} | {tsv.cell(m['test']['none_acc'])} |")
        lines.append("")
    if results.get("chosen_minus_probe_test"):
        lines += [f"### test halves: the chosen LoRA head minus the probe (the shipped verifier refitted, its dev "
                  "thresholds), paired 95 % bootstrap intervals", "",
                  "| level, protocol | F1 | exact | \"none\" on correct | top-1 | top-3 |", "|---|---|---|---|---|---|"]
        for key, d in results["chosen_minus_probe_test"].items():
            lines.append(f"| {key} | " + " | ".join(
                f"{d[k]['value']:+.2f} [{d[k]['low']:+.2f}, {d[k]['high']:+.2f}]" if k in d else "-"
                for k in ("f1", "wrong_exact", "none_acc", "top1", "top3")) + " |")
        lines.append("")
    if results.get("test_per_kind"):
        lines += ["### test halves per kind of error (the chosen head; exact first wrong paragraph)", "",
                  "| level: kind | n | final answer not given | its truth given |", "|---|---|---|---|"]
        for key, d in results["test_per_kind"].items():
            lines.append(f"| {key} | {d['unknown']['n_wrong']} | {tsv.cell(d['unknown']['wrong_exact'])} | "
                         f"{tsv.cell(d['known']['wrong_exact'])} |")
        lines.append("")
    lines += ["### what ran", ""]
    for n, c in results["runs"].items():
        secs = c["seconds"] or {}
        lines.append(f"- {n}: {c['settings']}; dev folds {', '.join(c['dev folds'])} ({c['dev traces']} of "
                     f"{c['of']} dev traces), test {'yes' if c['test'] else 'no'}; {sum(secs.values()):.0f} s on "
                     f"{c['device']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="stage", required=True)
    t = sub.add_parser("train")
    t.add_argument("--device", default="cuda")
    t.add_argument("--out", type=Path, required=True, help="predictions folder (resumable)")
    t.add_argument("--external", type=Path, default=tsv.EXTERNAL)
    t.add_argument("--scalars", type=Path, default=ROOT / ".lora/scalars.npz")
    t.add_argument("--export-scalars", type=Path, default=None, help="pack the cached scalars there and stop")
    t.add_argument("--limit", type=int, default=None, help="traces per (file, split): the CPU check")
    t.add_argument("--folds", type=int, default=5)
    t.add_argument("--epochs", type=int, default=None, help="override every variant's")
    t.add_argument("--only", nargs="+", default=None, help="variants whose names contain one of these")
    t.add_argument("--max-tokens", type=int, default=None,
                   help="padded tokens per training batch (default 16384 on a GPU, 1024 on a CPU)")
    t.add_argument("--time-limit", type=float, default=1e9, help="seconds: no new fold starts that would pass it")
    t.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("score")
    s.add_argument("--preds", type=Path, default=RESULTS / f"lora_{READER}_preds.json.xz",
                   help="the GPU run's folder, or the predictions kept in results (default)")
    s.add_argument("--external", type=Path, default=tsv.EXTERNAL)
    s.add_argument("--n-boot", type=int, default=1000)
    s.add_argument("--no-write", action="store_true")
    s.add_argument("--probe-per-level", action="store_true",
                   help="also refit the shipped verifier's probe (local feature cache) with a threshold per level")
    args = p.parse_args(argv)
    if args.stage == "train":
        if args.max_tokens is None:
            args.max_tokens = 1024 if args.device == "cpu" else 16384
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, "2")
        return run_train(args)
    return run_score(args)


if __name__ == "__main__":
    raise SystemExit(main())
