"""The package layout CONTRIBUTING.md promises: layers depend one way, no import cycles (function-local imports
included, since they only hide a cycle), data split by concept, and files a reviewer can read in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "genlab"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path) -> set[str]:
    """Every genlab module that ``path`` imports anywhere in its body (top level or inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("genlab"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("genlab"))
    return {m for m in found if m in MODULES}


GRAPH = {name: _imports(path) - {name} for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_in_the_package():
    assert _cycles(GRAPH) == []


def test_data_has_no_module_at_its_top_level():
    top = sorted(p.name for p in (PACKAGE / "data").glob("*.py") if p.name != "__init__.py")
    assert top == [], f"put these in a concept folder under src/genlab/data/: {top}"


@pytest.mark.parametrize("layer", ["models", "nn"])
def test_models_and_layers_import_no_framework(layer):
    """Models are plain nn.Modules: no Lightning, Hydra, OmegaConf or data code."""
    banned = ("lightning", "pytorch_lightning", "hydra", "omegaconf")
    offenders = []
    for path in (PACKAGE / layer).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names
                          if n.split(".")[0] in banned or n.startswith(("genlab.data", "genlab.tasks", "genlab.cli"))]
    assert offenders == []


def test_no_file_past_what_one_reviewer_reads_in_a_sitting():
    long = {str(p.relative_to(SRC)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}


ENTRY_POINTS = ("genlab.cli", "genlab.sweep_callback")  # train.py/eval.py's package and Hydra's sweep hook
RUN_LEVEL = ("genlab.callbacks", "genlab.report", "genlab.analysis", "genlab.runs")  # what runs around a task


def _upward(importers: tuple[str, ...] | None, imported: tuple[str, ...]) -> list[str]:
    """Edges into ``imported`` from modules outside it (or, with ``importers``, only from those)."""
    return sorted(f"{a} -> {b}" for a, deps in GRAPH.items() for b in deps
                  if b.startswith(imported) and not a.startswith(imported)
                  and (importers is None or a.startswith(importers)))


def test_imports_never_run_up_the_layers():
    """Entry points -> run-level code (runs, callbacks, report, analysis) -> tasks -> models -> nn: the library under
    the entry points never imports genlab.cli (``genlab.assemble`` builds a run's parts for both), and tasks, models,
    layers, data, metrics and interop never import run-level code (pictures are callbacks the presets add)."""
    assert _upward(None, ENTRY_POINTS) == []
    below = ("genlab.tasks", "genlab.models", "genlab.nn", "genlab.data", "genlab.metrics", "genlab.interop")
    assert _upward(below, RUN_LEVEL + ENTRY_POINTS) == []


def test_no_import_cycle_among_the_experiment_scripts():
    """Scripts of one experiments/ folder import shared pieces from a sibling module (gemm_rate.py, xlnet_step.py),
    never from each other in a circle."""
    graph = {}
    for folder in sorted(p for p in (SRC.parent / "experiments").iterdir() if p.is_dir()):
        local = {p.stem for p in folder.glob("*.py")}
        for path in folder.glob("*.py"):
            names = set()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names.add(node.module)
                elif isinstance(node, ast.Import):
                    names.update(a.name for a in node.names)
            graph[f"{folder.name}/{path.stem}"] = {f"{folder.name}/{n}" for n in names & local - {path.stem}}
    assert _cycles(graph) == []
