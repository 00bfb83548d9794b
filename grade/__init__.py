"""GRADE: gradient dynamics for knowledge-gap detection.

>>> import grade
>>> lm = grade.load_model("smollm2-135m-instruct")
>>> result = grade.analyze(lm, "What is the capital of France?")
>>> result.rank_ratio.shape  # (n_layers,)
"""

__version__ = "0.1.0"

from .errors import GradeError  # noqa: E402
from .models import DEFAULT_MODEL, EMBEDDED_MODELS, LoadedModel, load_model  # noqa: E402
from .result import GradeResult, StepResult  # noqa: E402
from .analysis import analyze  # noqa: E402

__all__ = [
    "DEFAULT_MODEL",
    "EMBEDDED_MODELS",
    "GradeError",
    "GradeResult",
    "LoadedModel",
    "StepResult",
    "analyze",
    "load_model",
    "__version__",
]
