"""The package's shape, kept by tests: small modules, no import loop, layers that only look down, one
error path. Read from the source with ast (nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "arc_pipeline"
MAX_LINES = 400
# The BARC runtime is an API generated programs import as one module (`from common import *`).
LONG_BY_DESIGN = {"arc_pipeline.runtime.common"}
# Lower layers never import higher ones (docs/runtime.md and the package docstrings name the layers).
LOWER_LAYERS = {
    "arc_pipeline.domain": {"arc_pipeline.domain", "arc_pipeline.errors"},
    "arc_pipeline.runtime": {"arc_pipeline.runtime"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str) -> set[str]:
    """Modules of the package that ``name`` imports anywhere in its file (function-level imports too)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
            # `from package import module` imports the module; `from module import name` the module
            targets = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES] or [base]
        else:
            continue
        for target in targets:
            module = target
            while module and module not in MODULES:
                module = module.rpartition(".")[0]
            if module and module not in (name, "arc_pipeline"):
                found.add(module)
    return found


def test_no_module_is_longer_than_a_few_screens() -> None:
    long = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert {name: n for name, n in long.items() if n > MAX_LINES and name not in LONG_BY_DESIGN} == {}


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every loop of the import graph found by a depth-first walk (each as the modules around it)."""
    loops = []

    def visit(name: str, trail: list[str], done: set[str]) -> None:
        if name in trail:
            loops.append(trail[trail.index(name) :] + [name])
            return
        if name in done:
            return
        for target in sorted(graph.get(name, ())):
            visit(target, [*trail, name], done)
        done.add(name)

    done: set[str] = set()
    for name in sorted(graph):
        visit(name, [], done)
    return loops


def test_no_import_loop() -> None:
    assert import_loops({name: imports(name) for name in MODULES}) == []


@pytest.mark.parametrize("layer", sorted(LOWER_LAYERS))
def test_lower_layers_never_import_upwards(layer: str) -> None:
    allowed = LOWER_LAYERS[layer]
    upward = {
        name: sorted(t for t in imports(name) if not any(t == a or t.startswith(a + ".") for a in allowed))
        for name in MODULES
        if name == layer or name.startswith(layer + ".")
    }
    assert {name: targets for name, targets in upward.items() if targets} == {}


def test_only_the_cli_ends_the_process() -> None:
    """User-fixable errors are PipelineErrors (arc_pipeline/errors.py); only cli.py turns them into an exit."""
    raising = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                called = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(called, ast.Name) and called.id == "SystemExit" and name != "arc_pipeline.cli":
                    raising.append(f"{name}:{node.lineno}")
    assert raising == []


# arc_pipeline/training's groups (its package docstring): the GRPO stage at the top imports the step-speed machinery
# and the train job's processes; those two import neither the stage, nor sft, nor each other.
TRAINING = "arc_pipeline.training"
TRAINING_GROUPS_MAY_IMPORT = {
    "stage": {"stage", "speed", "processes"},
    "speed": {"speed"},
    "processes": {"processes"},
    "sft": {"sft", "stage", "processes"},
}


def training_group(module: str) -> str | None:
    """The group of a module of arc_pipeline.training ("stage" for the top level), None outside it."""
    if module == TRAINING or not module.startswith(TRAINING + "."):
        return None
    head = module.removeprefix(TRAINING + ".").split(".")[0]
    return head if head in TRAINING_GROUPS_MAY_IMPORT and head != "stage" else "stage"


def cross_group_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Per training module, the training modules it imports against TRAINING_GROUPS_MAY_IMPORT."""
    wrong = {}
    for name, targets in graph.items():
        group = training_group(name)
        if group is None:
            continue
        bad = sorted(t for t in targets if training_group(t) not in (None, *TRAINING_GROUPS_MAY_IMPORT[group]))
        if bad:
            wrong[name] = bad
    return wrong


def test_training_groups_import_in_one_direction() -> None:
    graph = {name: imports(name) for name in MODULES if training_group(name)}
    assert {training_group(name) for name in graph} == set(TRAINING_GROUPS_MAY_IMPORT)
    assert cross_group_imports(graph) == {}


def test_the_direction_check_catches_a_stage_import_from_the_speed_machinery() -> None:
    graph = {
        f"{TRAINING}.speed.shared_prompt": {f"{TRAINING}.grpo", f"{TRAINING}.speed.prompt_attention"},
        f"{TRAINING}.processes.ports": {f"{TRAINING}.speed.correction"},
        f"{TRAINING}.grpo": {f"{TRAINING}.sft.trainer", f"{TRAINING}.processes.ports"},
    }
    assert cross_group_imports(graph) == {
        f"{TRAINING}.speed.shared_prompt": [f"{TRAINING}.grpo"],
        f"{TRAINING}.processes.ports": [f"{TRAINING}.speed.correction"],
        f"{TRAINING}.grpo": [f"{TRAINING}.sft.trainer"],
    }


BENCHMARKS = PACKAGE.parent / "benchmarks"


def benchmark_imports(path: Path) -> set[str]:
    """The sibling scripts a benchmark imports (``from gpu_bench_inputs import ...``: its folder is on sys.path)."""
    siblings = {script.stem for script in BENCHMARKS.glob("*.py")}
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        found |= {name.split(".")[0] for name in names} & siblings
    return found - {path.stem}


def test_no_import_loop_among_the_benchmarks() -> None:
    graph = {script.stem: benchmark_imports(script) for script in BENCHMARKS.glob("*.py")}
    assert graph["gpu_grpo"] == {"engine_stacks", "gpu_bench_inputs", "gpu_peaks"}
    assert graph["gpu_server"] == {"gpu_bench_inputs"}
    assert import_loops(graph) == []
    assert import_loops({**graph, "gpu_bench_inputs": {"gpu_grpo"}}) != []  # the check sees a loop
