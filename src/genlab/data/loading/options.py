"""DataLoader settings a data config exposes (``num_workers``, ``pin_memory``, ``persistent_workers``)."""

from __future__ import annotations

from typing import Any

import torch

from genlab.errors import ConfigError


def loader_options(num_workers: int, pin_memory: bool, persistent_workers: bool) -> dict[str, Any]:
    """Keyword arguments for ``DataLoader``: host memory pinned only where a CUDA device will read it (a CPU run
    ignores ``pin_memory``), workers kept alive across epochs only when there are workers."""
    if num_workers < 0:
        raise ConfigError(f"data.num_workers={num_workers} must be >= 0 (0 = load in the training process).")
    return {"num_workers": num_workers, "pin_memory": bool(pin_memory) and torch.cuda.is_available(),
            "persistent_workers": bool(persistent_workers) and num_workers > 0}
