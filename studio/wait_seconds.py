"""How long Home's analyses took on a reference machine, per route and size: the shape of the queue's estimate
before this machine has measured an analysis of that kind (no Streamlit).

Why: the queue learns each kind's duration from the jobs it runs (:mod:`studio.queue`), but the first analysis
of a kind has nothing of its own to go by. A 256-token word problem estimated from five short answers was told
"about 3 s" and took 28 s. The durations below were measured by ``python -m bench.click_to_verdict --prior``
(click to verdict, per model, answer engine, task and answer length; ``studio/assets/wait_seconds.json``). The
queue scales them by how this machine compares on the kinds it has measured, so a slower or busier machine
shifts every estimate together.

A kind (:func:`home_kind`): ``("home", model, engine, task, answer tokens)``. A size not measured is read off the
line through the engine's measured sizes (seconds = fixed part + per token x tokens): the answer dominates once
it is long.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Hashable

import numpy as np

TABLE = Path(__file__).parent / "assets" / "wait_seconds.json"


def home_kind(model: str, engine: str, task: str, tokens: int) -> tuple:
    """The queue kind of one of Home's analyses: its route (model, what writes the answer) and its size."""
    return ("home", model, engine, task, int(tokens))


@functools.lru_cache(maxsize=1)
def _rows(path: Path = TABLE) -> tuple[dict, ...]:
    if not path.is_file():
        return ()
    return tuple(json.loads(path.read_text(encoding="utf-8")).get("rows", ()))


def reference_seconds(kind: Hashable, rows: tuple[dict, ...] | None = None) -> float | None:
    """Seconds an analysis of ``kind`` took on the reference machine, or None where nothing measured says."""
    if not (isinstance(kind, tuple) and len(kind) == 5 and kind[0] == "home"):
        return None
    _, model, engine, task, tokens = kind
    route = [r for r in (_rows() if rows is None else rows) if r["model"] == model and r["engine"] == engine]
    exact = [float(r["seconds"]) for r in route if r["task"] == task and int(r["tokens"]) == int(tokens)]
    if exact:
        return exact[0]
    sizes = np.array([float(r["tokens"]) for r in route])
    if len(set(sizes.tolist())) < 2:
        return None
    seconds = np.array([float(r["seconds"]) for r in route])
    per_token, fixed = np.polyfit(sizes, seconds, 1)
    return float(max(fixed + per_token * float(tokens), seconds.min()))
