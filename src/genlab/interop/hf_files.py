"""What every Hugging Face importer/exporter shares: reading weight files (single, sharded, safetensors or
pickle), the strict shape/name check against our model, the import report, and writing an HF folder atomically."""

from __future__ import annotations

import json
from collections.abc import Mapping
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
