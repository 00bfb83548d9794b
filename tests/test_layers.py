"""The package's layers: every import points down (or sideways within a layer), and no modules import each
other in a circle, function-level imports included.

    engine < batch < learning < commands < studio

The layer is read from the folder a module is in (:data:`LAYERS` names folders; a module is listed on its own
only where it is an exception to its folder's layer, and none is now):

* **engine**, one question through one model: ``common/`` (errors, files, metrics), ``gradients/`` (capture,
  losses, stable rank, analysis, result, reference), ``models/`` (loading, generation), ``tasks/`` (registry,
  prompts, grading, question sets), ``steps/`` (step checks, the suspect step, step errors);
* **batch**, many questions, resumable: ``batch/`` (the runner, labelling, feature extraction), ``traces/``;
* **learning**, trained and compared on the batch outputs: ``verdict/`` (probe, detectors, the verdict),
  ``studies/`` (the studies, the benchmark, its report);
* **commands**: ``commands/`` (``python -m grade``) and ``grade/__main__``;
* **studio**: the Streamlit app's package.

A new module takes the layer of the folder it is put in; one put in ``grade/`` itself has none (the test says
so): it belongs in a folder. Each folder's ``__init__`` docstring names its layer in its first two lines.
Imports are read with ``ast`` from the source, so an import inside a function or under ``TYPE_CHECKING``
counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("grade", "studio")
ORDER = ("engine", "batch", "learning", "commands", "studio")

LAYERS = {
    "grade": "engine",  # the package's __init__ only (version and the lazy public names), not its modules
    # engine
    "grade.common": "engine",
    "grade.gradients": "engine",
    "grade.models": "engine",
    "grade.tasks": "engine",
    "grade.steps": "engine",
    # batch
    "grade.batch": "batch",
    "grade.traces": "batch",
    # learning
    "grade.verdict": "learning",  # probe/: inputs < network < files < estimator < training; detectors/ beside it
    "grade.studies": "learning",
    # commands
    "grade.commands": "commands",
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


def test_every_folder_names_its_layer():
    """Each folder of ``grade/`` is placed in :data:`LAYERS`, and its ``__init__`` says which layer it is in."""
    folders = sorted(p for p in (ROOT / "grade").iterdir() if (p / "__init__.py").is_file())
    unplaced = [f.name for f in folders if f"grade.{f.name}" not in LAYERS]
    assert not unplaced, f"place these folders in tests/test_layers.py LAYERS: {unplaced}"
    for folder in folders:
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))) or ""
        head = " ".join(doc.splitlines()[:2])
        assert f"Layer: {LAYERS[f'grade.{folder.name}']}" in head, (folder.name, head)


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
