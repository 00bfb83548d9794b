"""2-D embeddings of a labelled question set (t-SNE, UMAP), with a new question placed on them.

Features are standardised per column (rank ratios of different layers, hidden-state dimensions) and
reduced to at most 50 principal components first, the usual preparation for both methods.
t-SNE has no out-of-sample mapping, so a new point is placed at the distance-weighted mean of its
``k`` nearest reference neighbours in the (standardised, reduced) feature space; UMAP maps it with
its own ``transform``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import numpy as np
from sklearn.decomposition import PCA
from sklearn.manifold import TSNE
from sklearn.preprocessing import StandardScaler

Method = Literal["t-SNE", "UMAP"]


@dataclass
class Embedding:
    coords: np.ndarray  # (n, 2) reference points
    current: np.ndarray | None  # (2,) the new point, if one was given
    method: str


def _prepare(X: np.ndarray, x_new: np.ndarray | None, max_dims: int = 50, seed: int = 0):
    scaler = StandardScaler().fit(X)
    Z = scaler.transform(X)
    z_new = scaler.transform(x_new[None, :]) if x_new is not None else None
    if Z.shape[1] > max_dims and Z.shape[0] > max_dims:
        pca = PCA(n_components=max_dims, random_state=seed).fit(Z)
        Z = pca.transform(Z)
        z_new = pca.transform(z_new) if z_new is not None else None
    return Z, z_new


def place_by_neighbours(Z: np.ndarray, coords: np.ndarray, z_new: np.ndarray, k: int = 10) -> np.ndarray:
    """Distance-weighted mean of the embedded positions of the ``k`` nearest points. Z: (n, d), z_new: (d,)."""
    distances = np.linalg.norm(Z - z_new, axis=1)
    nearest = np.argsort(distances)[: min(k, len(Z))]
    weights = 1.0 / (distances[nearest] + 1e-9)
    return (coords[nearest] * weights[:, None]).sum(0) / weights.sum()


def umap_dispatchers() -> list:
    """The numba-compiled functions that umap-learn's loaded modules define (not those they import)."""
    import sys

    from numba.core.registry import CPUDispatcher

    return [obj for name, module in list(sys.modules.items()) if name == "umap" or name.startswith("umap.")
            for obj in list(vars(module).values()) if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == name]


@functools.cache
def _umap():
    """umap-learn (a slow import: numba), with numba's on-disk cache turned on for the functions it compiles: it
    asks for the cache on few of them, so every new process (each start of the app) compiled about a hundred again
    at its first UMAP projection; now only the first process after an install does. Once per process: ``import
    umap`` loads every module of umap-learn that a projection uses."""
    import umap

    for dispatcher in umap_dispatchers():
        dispatcher.enable_caching()
    return umap


def embed(X: np.ndarray, method: Method, x_new: np.ndarray | None = None, seed: int = 0,
          coords: np.ndarray | None = None) -> Embedding:
    """Embed reference features X (n, d) in 2-D and place ``x_new`` (d,) on the same map. ``coords`` (n, 2):
    this embedding computed before (t-SNE, or UMAP without ``x_new``: UMAP places a point with its fitted model)."""
    X = np.asarray(X, dtype=np.float64)
    if len(X) < 5:
        raise ValueError(f"need at least 5 labelled questions for a projection, got {len(X)}")
    if coords is not None and (method == "t-SNE" or x_new is None):
        Z, z_new = _prepare(X, None if x_new is None else np.asarray(x_new, dtype=np.float64), seed=seed)
        current = place_by_neighbours(Z, coords, z_new[0]) if z_new is not None else None
        return Embedding(coords=np.asarray(coords), current=current, method=method)
    Z, z_new = _prepare(X, None if x_new is None else np.asarray(x_new, dtype=np.float64), seed=seed)
    if method == "t-SNE":
        perplexity = float(min(30.0, (len(Z) - 1) / 3))
        coords = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(Z)
        current = place_by_neighbours(Z, coords, z_new[0]) if z_new is not None else None
    elif method == "UMAP":
        umap = _umap()
        reducer = umap.UMAP(n_components=2, n_neighbors=min(15, len(Z) - 1), random_state=seed)
        coords = reducer.fit_transform(Z)
        current = reducer.transform(z_new)[0] if z_new is not None else None
    else:
        raise ValueError(f"unknown projection method {method!r}")
    return Embedding(coords=np.asarray(coords), current=None if current is None else np.asarray(current), method=method)


def compile_ahead() -> None:
    """A small UMAP projection (random points, a new one placed on them), run for what it leaves behind: the
    functions a projection compiles, in numba's disk cache (see :func:`_umap`). ``make install`` runs it in the
    background (``python -m studio.projections``)."""
    rng = np.random.default_rng(0)
    embed(rng.normal(size=(40, 8)), "UMAP", x_new=rng.normal(size=8))


if __name__ == "__main__":
    compile_ahead()
