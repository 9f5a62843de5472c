"""Estimate a run's memory before training and refuse one that cannot fit, instead of being killed by the kernel.

The estimate is deliberately simple (an order of magnitude, not an allocator trace), in bytes:

- parameters + gradients: 4 + 4 per parameter (fp32 master weights, whatever the compute precision);
- optimiser state: 8 per trainable parameter (Adam's two moments; SGD/ASGD need less, so this errs high);
- activations of one training step, for transformer-shaped models only (``model.d_model``, ``model.n_layer``,
  ``model.n_head``), at the configured micro-batch ``data.batch_size`` of ``data.tgt_len`` / ``data.seq_len``
  tokens attending over tokens + ``model.mem_len``: per layer ``2 x b x s x (34 h + 5 a (s + m))`` bytes, i.e.
  Korthikanti et al.'s 16-bit count per layer (sbh(34 + 5as/h)) doubled for fp32. Other models (LSTMs, GANs,
  graph networks) count parameters and optimiser only.

A run whose estimate exceeds the memory available to it (free GPU memory on a CUDA run, else the system's
MemAvailable) stops with exit code 2, the estimate and the keys that shrink it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig

from genlab.errors import ConfigError

log = logging.getLogger("genlab")
GB = 1024**3
WEIGHT_AND_GRAD_BYTES = 8
OPTIMIZER_BYTES = 8


@dataclass
class MemoryEstimate:
    params: int
    weights_bytes: int
    optimizer_bytes: int
    activation_bytes: int | None  # None: not a transformer-shaped model, activations not estimated

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.optimizer_bytes + (self.activation_bytes or 0)

    def describe(self) -> str:
        acts = "not estimated" if self.activation_bytes is None else f"{self.activation_bytes / GB:.2f}"
        return (f"{self.total_bytes / GB:.2f} GB (parameters+gradients {self.weights_bytes / GB:.2f}, optimiser "
                f"{self.optimizer_bytes / GB:.2f}, activations {acts})")


def _first(node: DictConfig | None, *keys: str) -> int | None:
    for key in keys:
        value = node.get(key) if node is not None else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def activation_bytes(cfg: DictConfig) -> int | None:
    model, data = cfg.get("model"), cfg.get("data")
    h, layers, heads = _first(model, "d_model"), _first(model, "n_layer"), _first(model, "n_head")
    batch, seq = _first(data, "batch_size"), _first(data, "tgt_len", "seq_len", "max_seq_length")
    if None in (h, layers, heads, batch, seq):
        return None
    mem = _first(model, "mem_len") or 0
    return 2 * layers * batch * seq * (34 * h + 5 * heads * (seq + mem))


def estimate(cfg: DictConfig, task: torch.nn.Module) -> MemoryEstimate:
    params = sum(p.numel() for p in task.parameters())
    trainable = sum(p.numel() for p in task.parameters() if p.requires_grad)
    return MemoryEstimate(params, WEIGHT_AND_GRAD_BYTES * params, OPTIMIZER_BYTES * trainable, activation_bytes(cfg))


def available_bytes(accelerator: str) -> int | None:
    """Free memory of the device the run uses: CUDA free memory, else the system's MemAvailable (Linux)."""
    if accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info()[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None  # unknown: do not guess


def check_memory(cfg: DictConfig, task: torch.nn.Module, available: int | None = None) -> MemoryEstimate:
    """Log the estimate; raise ConfigError (exit 2) when it exceeds ``available`` (default: measured)."""
    est = estimate(cfg, task)
    if available is None:
        available = available_bytes(str(cfg.trainer.get("accelerator", "auto")))
    model_name = type(getattr(task, "model", task)).__name__
    room = f" of {available / GB:.1f} GB available" if available else ""
    log.info("model %s: %.1fM parameters; estimated memory %s%s", model_name, est.params / 1e6, est.describe(), room)
    if available and est.total_bytes > available:
        shrink = ("data.batch_size (the micro-batch; keep the global batch with +data.global_batch=N), "
                  "data.tgt_len / data.seq_len, model.mem_len, model.n_layer / model.d_model"
                  if est.activation_bytes else "the model's size (model.*) or data.batch_size")
        raise ConfigError(
            f"this run needs about {est.describe()} but only {available / GB:.1f} GB is available, so it would be "
            f"killed mid-run. Reduce {shrink}, or run the preset's _mini twin (experiment=<preset>_mini). "
            "The estimate is explained in genlab.cli.memory.")
    return est
