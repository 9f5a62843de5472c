"""Throughput (tokens/s, samples/s), step time and model FLOPs utilisation, logged without per-step syncs.

MFU = achieved model FLOP/s / peak FLOP/s of the device. The peak comes from a table of known accelerators
(dense bf16/fp32 tensor throughput from vendor data sheets) or, on CPUs and unknown devices, from a GEMM
measured once on this machine; never from one hard-coded GPU.
"""

from __future__ import annotations

import inspect
import resource
import sys
import time
from functools import lru_cache

import pytorch_lightning as pl
import torch

# Dense peak FLOP/s per device (no sparsity), by substring of torch.cuda.get_device_name().
GPU_PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H100": {"bf16": 989e12, "fp32": 67e12},
    "A100": {"bf16": 312e12, "fp32": 19.5e12},
    "A10G": {"bf16": 70e12, "fp32": 31.2e12},
    "L4": {"bf16": 121e12, "fp32": 30.3e12},
    "V100": {"bf16": 125e12, "fp32": 15.7e12},  # fp16 tensor cores; V100 has no bf16
    "T4": {"bf16": 65e12, "fp32": 8.1e12},
    "RTX 4090": {"bf16": 165e12, "fp32": 82.6e12},
    "RTX 3090": {"bf16": 71e12, "fp32": 35.6e12},
}


@lru_cache(maxsize=None)
def measured_gemm_flops(device: str = "cpu", n: int = 1024, seconds: float = 0.3) -> float:
    """FLOP/s of an n x n fp32 matmul on ``device``, measured for about ``seconds``."""
    g = torch.Generator(device=device).manual_seed(0)  # never touch the global RNG: runs must stay reproducible
    a = torch.randn(n, n, device=device, generator=g)
    b = torch.randn(n, n, device=device, generator=g)
    a @ b  # warm-up
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        reps += 1
    if device != "cpu":
        torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - start)


def peak_flops(device: torch.device, precision: str) -> float:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        kind = "bf16" if ("16" in precision) else "fp32"
        for key, peaks in GPU_PEAK_FLOPS.items():
            if key in name:
                return peaks[kind]
    return measured_gemm_flops(str(device) if device.type == "cuda" else "cpu")


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory of this process in MiB: allocated tensors on a GPU (since the last reset), resident set on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10  # bytes on macOS, KiB on Linux


def count_tokens(batch) -> tuple[int, int]:
    """(tokens, samples) of a batch from tensor shapes only (no device sync)."""
    if isinstance(batch, dict):
        tensor = batch.get("input_ids", next((v for v in batch.values() if isinstance(v, torch.Tensor)), None))
    elif isinstance(batch, (list, tuple)):
        tensor = batch[0]
    else:
        tensor = batch
    if not isinstance(tensor, torch.Tensor) or tensor.ndim == 0:
        return 0, 0
    samples = tensor.shape[0]
    tokens = tensor.numel() if tensor.dtype in (torch.int32, torch.int64) else samples
    return tokens, samples


class ThroughputMonitor(pl.Callback):
    """Every ``window`` steps logs ``perf/tokens_per_s``, ``perf/samples_per_s``, ``perf/step_time_s``,
    ``perf/peak_mem_mb`` and ``perf/mfu`` (training FLOPs ~ 6 x parameters per token unless the model defines
    ``flops_per_token()``, or ``flops_per_token(seq_len=...)`` when attention makes it depend on the length)."""

    def __init__(self, window: int = 20):
        self.window = window
        self._start: float | None = None
        self._tokens = self._samples = self._steps = 0
        self._flops_per_token = self._flops = 0.0
        self._flops_fn, self._seq_aware = None, False
        self._peak = 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        model = getattr(pl_module, "model", pl_module)
        self._flops_fn = getattr(model, "flops_per_token", None)
        # Models whose cost per token depends on the sequence (attention) take it as ``seq_len``.
        self._seq_aware = self._flops_fn is not None and "seq_len" in inspect.signature(self._flops_fn).parameters
        if self._flops_fn is not None and not self._seq_aware:
            self._flops_per_token = float(self._flops_fn())
        elif self._flops_fn is None:
            unique = {id(p): p.numel() for p in model.parameters() if p.requires_grad}
            self._flops_per_token = 6.0 * sum(unique.values())
        self._peak = peak_flops(pl_module.device, str(trainer.precision)) * max(1, trainer.world_size)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._start is None:
            self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        tokens, samples = count_tokens(batch)
        world = max(1, trainer.world_size)
        if self._seq_aware and samples:
            per_token = float(self._flops_fn(seq_len=tokens // samples))
        else:
            per_token = self._flops_per_token
        self._flops += tokens * world * per_token
        self._tokens += tokens * world
        self._samples += samples * world
        self._steps += 1
        if self._steps < self.window:
            return
        elapsed = time.perf_counter() - self._start
        tokens_per_s = self._tokens / elapsed
        metrics = {
            "perf/tokens_per_s": tokens_per_s,
            "perf/samples_per_s": self._samples / elapsed,
            "perf/step_time_s": elapsed / self._steps,
            "perf/peak_mem_mb": peak_memory_mb(pl_module.device),
        }
        if self._peak > 0 and self._flops > 0:
            metrics["perf/mfu"] = self._flops / elapsed / self._peak
        pl_module.log_dict(metrics, on_step=True, on_epoch=False, rank_zero_only=True)
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)
        self._start, self._tokens, self._samples, self._steps = time.perf_counter(), 0, 0, 0
        self._flops = 0.0
