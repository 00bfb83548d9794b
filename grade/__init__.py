"""GRADE: gradient dynamics for knowledge-gap detection.

>>> import grade
>>> lm = grade.load_model("smollm2-135m-instruct")
>>> result = grade.analyze(lm, "What is the capital of France?")
>>> result.rank_ratio.shape  # (n_layers,)
"""

__version__ = "0.1.0"

import importlib  # noqa: E402
import importlib.util  # noqa: E402

# The public names are imported when first used (PEP 562), not with the package: ``import grade`` and
# ``python -m grade`` start without torch (about 2 s), so the command line can answer --help at once and
# an interrupt during that import is handled by the command line, not printed as a traceback.
_PUBLIC = {
    "GradeError": "common.errors",
    "DEFAULT_MODEL": "models.models",
    "EMBEDDED_MODELS": "models.models",
    "LoadedModel": "models.models",
    "load_model": "models.models",
    "GradeResult": "gradients.result",
    "StepResult": "gradients.result",
    "analyze": "gradients.analysis",
}


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        if name.isidentifier() and not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
            return importlib.import_module(f".{name}", __name__)  # ``grade.models`` as the eager import gave it
        raise AttributeError(f"module 'grade' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_PUBLIC))


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
