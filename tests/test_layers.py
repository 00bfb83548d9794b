"""The package's layers: every import points down (or sideways within a layer), and no modules import each
other in a circle, function-level imports included.

    engine < batch < learning < commands < studio

* **engine**: one question through one model (spectra, losses, capture, analysis, results, models, prompts,
  tasks and answer grading, generation, step checks);
* **batch**: many questions, resumable (the batch runner, labelling, feature extraction, trace analysis);
* **learning**: probes and detectors trained and compared on the batch outputs (studies, benchmark);
* **commands**: ``python -m grade``;
* **studio**: the Streamlit app's package.

A new module must be placed in :data:`LAYERS` (the test says so); a package's submodules take its layer
unless they are listed themselves. Imports are read with ``ast`` from the source, so an import inside a
function or under ``TYPE_CHECKING`` counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("grade", "studio")
ORDER = ("engine", "batch", "learning", "commands", "studio")

LAYERS = {
    # engine
    "grade": "engine",  # the package's __init__ only (version and the lazy public names), not its modules
    "grade.common": "engine",
    "grade.gradients": "engine",
    "grade.models": "engine",
    "grade.tasks": "engine",
    "grade.steps": "engine",
    "grade.common.errors": "engine",
    "grade.models.cancel": "engine",
    "grade.common.io": "engine",
    "grade.models.architectures": "engine",
    "grade.gradients.stable_rank": "engine",
    "grade.gradients.losses": "engine",
    "grade.gradients.capture": "engine",
    "grade.models.models": "engine",
    "grade.gradients.result": "engine",
    "grade.gradients.analysis": "engine",
    "grade.tasks.prompts": "engine",
    "grade.tasks.tasks": "engine",
    "grade.tasks.grading": "engine",
    "grade.tasks.registry": "engine",
    "grade.tasks.question_sets": "engine",
    "grade.tasks.hf_datasets": "engine",
    "grade.models.decoding": "engine",
    "grade.models.generation": "engine",
    "grade.models.backends": "engine",
    "grade.models.sampling": "engine",
    "grade.common.metrics": "engine",
    "grade.gradients.reference": "engine",
    "grade.steps.locate": "engine",
    "grade.steps.step_checks": "engine",
    # batch
    "grade.batch": "batch",
    "grade.batch.features": "batch",
    "grade.batch.labeling": "batch",
    "grade.traces": "batch",
    # learning
    "grade.verdict": "learning",
    "grade.verdict.artifacts": "learning",
    "grade.verdict.probe": "learning",  # inputs < network < files < estimator < training
    "grade.verdict.probe.inputs": "learning",
    "grade.verdict.probe.network": "learning",
    "grade.verdict.probe.files": "learning",
    "grade.verdict.probe.estimator": "learning",
    "grade.verdict.probe.training": "learning",
    "grade.verdict.detectors": "learning",  # specs < estimators, routing < files < training
    "grade.verdict.detectors.specs": "learning",
    "grade.verdict.detectors.estimators": "learning",
    "grade.verdict.detectors.routing": "learning",
    "grade.verdict.detectors.files": "learning",
    "grade.verdict.detectors.training": "learning",
    "grade.verdict.probe_reading": "learning",  # a probe's inputs against its classes (Home's chart)
    "grade.verdict.verdict": "learning",  # the probe's verdict on one question (grade analyze --probe, the app's Home)
    "grade.verdict.detectors.model_statistics": "learning",
    "grade.verdict.detectors.baselines": "learning",
    "grade.studies": "learning",
    "grade.studies.report": "learning",
    "grade.studies.benchmark": "learning",
    "grade.studies.benchmark_runs": "learning",
    "grade.verdict.training_sets": "learning",
    "grade.steps.step_errors": "learning",
    # commands
    "grade.commands": "commands",
    "grade.commands.cli": "commands",
    "grade.__main__": "commands",
    # studio
    "studio": "studio",
}


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def layer_of(module: str) -> str | None:
    """The layer of ``module`` or of its nearest listed package; ``grade`` itself places only ``grade``."""
    name = module
    while True:
        if name in LAYERS and (name != "grade" or module == "grade"):
            return LAYERS[name]
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]


def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules that ``module`` imports, anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module or ""
            # ``from pkg import sub`` imports the module pkg.sub, else names of pkg
            names = [f"{base_name}.{a.name}" if f"{base_name}.{a.name}" in known else base_name for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in known and name != module:
                targets.add(name)
    return targets


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def is_package_edge(source: str, target: str) -> bool:
    """A package's ``__init__`` importing its own submodules (re-exports), or a submodule importing a name
    of an ancestor package: the package and its modules are one unit, not a cycle."""
    return target.startswith(source + ".") or source.startswith(target + ".")


def test_every_module_has_a_layer():
    unplaced = sorted(name for name in modules() if layer_of(name) is None)
    assert not unplaced, f"place these modules in tests/test_layers.py LAYERS: {unplaced}"


def test_imports_point_down_the_layers():
    upward = []
    for source, targets in graph().items():
        for target in sorted(targets):
            if layer_of(source) is None or layer_of(target) is None:  # test_every_module_has_a_layer says so
                continue
            if ORDER.index(layer_of(target)) > ORDER.index(layer_of(source)):
                upward.append(f"{source} ({layer_of(source)}) imports {target} ({layer_of(target)})")
    assert not upward, "imports against the layer order " + " < ".join(ORDER) + ":\n" + "\n".join(upward)


def test_no_import_cycles():
    edges = {source: {t for t in targets if not is_package_edge(source, t)} for source, targets in graph().items()}
    found = cycles(edges)
    assert not found, "modules that import each other in a circle: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_checks_see_upward_imports_and_cycles(tmp_path):
    """The checks themselves: an upward, function-level import and a hidden cycle are both caught."""
    known = {"grade.low": tmp_path / "low.py", "grade.high": tmp_path / "high.py", "grade.commands.x": tmp_path / "x.py"}
    known["grade.low"].write_text("def f():\n    from .high import g\n    from .commands.x import h\n")
    known["grade.high"].write_text("from .low import f\n")
    known["grade.commands.x"].write_text("")
    edges = {name: imports_of(name, path, known) for name, path in known.items()}
    assert edges["grade.low"] == {"grade.high", "grade.commands.x"}
    assert cycles(edges) == [["grade.high", "grade.low"]]
    assert ORDER.index(layer_of("grade.commands.x")) > ORDER.index("engine")
