"""Many questions, resumable: the batch runner (local and Ray) with its Parquet part folders, labelling (labeling)
and feature extraction (features). Layer: batch; imports the engine folders only.

Resumable batch runs: one runner (:mod:`grade.batch.runner`) with a local backend (:func:`run_local`) and a
Ray backend (:func:`run_on_ray`, :mod:`grade.batch.ray_backend`), and the Parquet part folder that stores
write through (:class:`PartStore`). Ray is imported only when a Ray run starts."""

from .parts import PartStore
from .ray_backend import ClusterOptions, RayRun, connect, run_on_ray
from .runner import (BACKENDS, ProgressBar, ProgressCallback, RunReport, Sink, Work, items_to_do,
                     model_for_backend, run_local, write_in_chunks)


__all__ = ["BACKENDS", "ClusterOptions", "PartStore", "RayRun", "connect", "ProgressBar", "ProgressCallback", "RunReport",
           "Sink", "Work", "items_to_do", "model_for_backend", "run_local", "run_on_ray", "write_in_chunks"]
