"""Tasks read a DataModule only through genlab.tasks.data_interface: ``datamodule_of`` and the members of the
protocol each reader declares. The task and callback sources are scanned, so a new read fails here until the
protocol (and CONTRIBUTING.md's Interfaces section) lists it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from genlab.tasks import data_interface

SRC = Path(data_interface.__file__).resolve().parents[1]
SOURCES = sorted((SRC / "tasks").glob("*.py")) + sorted((SRC / "callbacks").glob("*.py"))


def _reads(tree: ast.AST) -> list[tuple[str, str, set[str]]]:
    """(variable, member read, protocols it was declared as) for every DataModule variable of every function."""
    found = []
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        declared: dict[str, set[str]] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call) \
                    and getattr(node.value.func, "id", None) == "datamodule_of":
                names = {n.id for n in ast.walk(node.annotation) if isinstance(n, ast.Name)} - {"None"}
                declared[node.target.id] = names
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                    and getattr(node.value.func, "id", None) == "datamodule_of":
                raise AssertionError(f"line {node.lineno}: annotate the DataModule with its protocol")
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in declared:
                found.append((node.value.id, node.attr, declared[node.value.id]))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr") \
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in declared:
                found.append((node.args[0].id, node.args[1].value, declared[node.args[0].id]))
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_tasks_read_only_the_documented_datamodule_members(path):
    tree = ast.parse(path.read_text())
    if path.name != "data_interface.py":
        direct = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "datamodule"]
        assert not direct, f"{path.name} lines {direct}: get the DataModule with data_interface.datamodule_of"
    for var, member, protocols in _reads(tree):
        allowed = set().union(*(data_interface.members(getattr(data_interface, p)) for p in protocols))
        assert member in allowed, f"{path.name}: {var}.{member} is not in {sorted(protocols)}"


def test_every_reader_is_scanned_and_declares_protocols():
    readers = {p.name for p in SOURCES if "datamodule_of(" in p.read_text() and p.name != "data_interface.py"}
    assert readers == {"awd_lm.py", "finetune_base.py", "finetune_classification.py", "finetune_span.py",
                       "finetune_multiple_choice.py", "bad_gan.py", "cegan.py", "gan_images.py", "gpt.py"}
    assert data_interface.members(data_interface.ClassificationData) >= {"identity", "n_labels", "write_predictions"}


def test_outside_a_trainer_there_is_no_datamodule():
    class Bare:
        _trainer = None

    assert data_interface.datamodule_of(Bare()) is None
