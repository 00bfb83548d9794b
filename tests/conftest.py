import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@pytest.fixture(scope="session")
def smollm():
    """The embedded default model, loaded once per test session (converted on first use, then cached)."""
    import grade

    return grade.load_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    from grade.tasks import datasets_dir

    return datasets_dir()
