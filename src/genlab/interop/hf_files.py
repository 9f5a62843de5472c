"""What every Hugging Face importer/exporter shares: reading weight files (single, sharded, safetensors or
pickle), the strict shape/name check against our model, the architecture check (every config key that changes
the outputs, with the Hydra override that fixes it), the import report, and writing an HF folder atomically."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from genlab.errors import CheckpointError
from genlab.utils import atomic_write


@dataclass
class HFImport:
    """What an import did: our tensors it filled (``loaded``, our names), ours it left initialised (``kept_init``)
    and the checkpoint keys it had no place for (``unused``: e.g. the heads of an HF task model, which a finetuning
    task may take, genlab.tasks.pretrained_heads)."""

    unused: list[str] = field(default_factory=list)
    kept_init: list[str] = field(default_factory=list)
    loaded: list[str] = field(default_factory=list)
    file_names: dict[str, str] = field(default_factory=dict)  # our name of a loaded tensor -> the checkpoint's
    notes: list[str] = field(default_factory=list)  # what the user should know besides tensors


def read_state_dict(path: str | Path) -> dict[str, Tensor]:
    """Tensors of a ``.safetensors`` / ``.bin`` file, or of a folder with ``model.safetensors`` (possibly
    sharded with ``model.safetensors.index.json``) or ``pytorch_model.bin``."""
    path = Path(path)
    if path.is_dir():
        for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                     "pytorch_model.bin.index.json"):
            if (path / name).exists():
                return read_state_dict(path / name)
        raise CheckpointError(f"{path}: no model.safetensors or pytorch_model.bin in this folder")
    if not path.exists():
        raise CheckpointError(f"{path}: checkpoint file not found")
    try:
        if path.name.endswith(".index.json"):
            shards = sorted(set(json.loads(path.read_text())["weight_map"].values()))
            state: dict[str, Tensor] = {}
            for shard in shards:
                state.update(read_state_dict(path.parent / shard))
            return state
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        return torch.load(path, map_location="cpu", weights_only=True)
    except CheckpointError:
        raise
    except Exception as exc:  # corrupt or foreign file: one clear message
        raise CheckpointError(f"{path}: cannot read checkpoint ({type(exc).__name__}: {exc})") from exc


def fit_problems(ours: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> list[str]:
    """Why ``state`` does not fit ``ours`` by names and shapes (empty when it fits), one phrase per kind."""
    missing = sorted(set(ours) - set(state))
    extra = sorted(set(state) - set(ours))
    wrong = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(ours[k].shape)}"
             for k in sorted(set(ours) & set(state)) if state[k].shape != ours[k].shape]
    problems = []
    if wrong:
        problems.append("shape mismatch in " + "; ".join(wrong))
    if missing:
        problems.append("missing tensors: " + ", ".join(missing))
    if extra:
        problems.append("tensors the model does not have: " + ", ".join(extra))
    return problems


def hydra_value(value: Any) -> str:
    """``value`` as a Hydra command-line literal (``relu``, ``0.01``, ``[1,1,1]``, ``true``, ``null``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    return str(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9)
    return a == b


def architecture_overrides(theirs: Mapping[str, Any], ours: Mapping[str, Any], keys: Iterable[str]) -> list[str]:
    """``model.<key>=<checkpoint's value>`` for every key in ``keys`` whose value differs between the checkpoint's
    model kwargs (``theirs``) and the configured model's (``ours``); keys either side lacks are skipped."""
    return [f"model.{k}={hydra_value(theirs[k])}" for k in keys
            if k in theirs and k in ours and not _same(theirs[k], ours[k])]


def check_architecture(source: str, theirs: Mapping[str, Any], ours: Mapping[str, Any], keys: Iterable[str],
                       more_fixes: Iterable[str] = ()) -> None:
    """Stop (CheckpointError, exit 2) when the checkpoint was trained with another architecture than the model
    the config builds, listing every differing key and the overrides to add, so that outputs never differ silently
    (shapes alone cannot tell an activation, a LayerNorm epsilon or a head split)."""
    keys = list(keys)
    fixes = architecture_overrides(theirs, ours, keys) + list(more_fixes)
    if not fixes:
        return
    got = "; ".join(f"{k}: checkpoint {theirs[k]!r}, config {ours[k]!r}" for k in keys
                    if k in theirs and k in ours and not _same(theirs[k], ours[k]))
    raise CheckpointError(f"{source} was trained with a different model ({got or 'see below'}); add these "
                          f"overrides to build the checkpoint's model: {' '.join(fixes)}")


def copy_state(module: torch.nn.Module, state: Mapping[str, Tensor]) -> None:
    """Copy checked tensors into ``module``'s parameters and buffers in place (dtype of the module)."""
    with torch.no_grad():
        params = dict(module.state_dict(keep_vars=True))
        for key, value in state.items():
            params[key].copy_(value.to(params[key].dtype))


def write_hf_folder(folder: str | Path, config: dict[str, Any], state: dict[str, Tensor], tied: tuple[str, ...],
                    safe_serialization: bool = True) -> Path:
    """``config.json`` + ``model.safetensors`` (``tied`` tensors left out, as HF does: safetensors refuses shared
    storage) or ``pytorch_model.bin``; returns the weights file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_write(folder / "config.json", "w") as f:
        json.dump(config, f, indent=2)
    if safe_serialization:
        from safetensors.torch import save

        for key in tied:
            state.pop(key, None)
        target = folder / "model.safetensors"
        with atomic_write(target) as f:
            f.write(save(state, metadata={"format": "pt"}))
    else:
        target = folder / "pytorch_model.bin"
        with atomic_write(target) as f:
            torch.save(state, f)
    return target
