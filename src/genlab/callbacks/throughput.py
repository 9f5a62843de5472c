"""Throughput (tokens/s, samples/s), step time and model FLOPs utilisation, logged without per-step syncs.

MFU = achieved model FLOP/s / peak FLOP/s of the dtype that actually computes the matmuls: bf16 under
``bf16-mixed``/``bf16-true``, fp16 under ``16-*``, fp32 otherwise. The peak comes from a table of known
accelerators (dense bf16/fp32 tensor throughput from vendor data sheets) or, on CPUs and unknown devices, from a
GEMM of that dtype measured once on this machine with the threads training uses; never from one hard-coded GPU.
A CPU run under bf16 autocast measured against the fp32 GEMM rate is how MFU reached 1.7 (bf16 GEMMs run 3-4x
fp32 on AVX-512 BF16 cores); models without an analytic count used 6 x parameters per token, which counts the
whole output softmax on every token even where a task computes logits at a few positions (MLM, PLM, DAE).
The numerator is now each model's ``flops_per_token`` or, without one, the matmul FLOPs counted over the first
training step; and an achieved rate above the peak raises the peak (with a warning): MFU never exceeds 1.
"""

from __future__ import annotations

import inspect
import resource
import sys
import time
import warnings
from functools import cache

import pytorch_lightning as pl
import torch

# Dense peak FLOP/s per device (no sparsity), by substring of torch.cuda.get_device_name().
GPU_PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H100 PCIe": {"bf16": 756e12, "fp32": 51e12},  # before "H100": the first matching name wins
    "H100": {"bf16": 989e12, "fp32": 67e12},
    "H200": {"bf16": 989e12, "fp32": 67e12},  # H100's compute, more memory
    "A100": {"bf16": 312e12, "fp32": 19.5e12},
    "A10G": {"bf16": 70e12, "fp32": 31.2e12},
    "L4": {"bf16": 121e12, "fp32": 30.3e12},
    "V100": {"bf16": 125e12, "fp32": 15.7e12},  # fp16 tensor cores; V100 has no bf16
    "T4": {"bf16": 65e12, "fp32": 8.1e12},
    "RTX 4090": {"bf16": 165e12, "fp32": 82.6e12},
    "RTX 3090": {"bf16": 71e12, "fp32": 35.6e12},
}
_GEMM_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}


def compute_dtype(precision: str) -> str:
    """The dtype the matmuls run in under Lightning's ``trainer.precision`` (short spellings included)."""
    precision = str(precision)
    if precision.startswith("bf16"):
        return "bf16"
    if precision.startswith("16") or precision.startswith("transformer-engine"):
        return "fp16"
    if precision.startswith("64"):
        return "fp64"
    return "fp32"


@cache
def measured_gemm_flops(device: str = "cpu", n: int = 1024, seconds: float = 0.3, dtype: str = "fp32",
                        threads: int | None = None) -> float:
    """Best FLOP/s of an n x n ``dtype`` matmul on ``device`` over about ``seconds`` (the fastest of short bursts:
    a peak, so other load on the machine lowers it less than an average would). ``threads`` only keys the cache:
    the rate is measured with the threads torch uses now, those training uses."""
    g = torch.Generator(device=device).manual_seed(0)  # never touch the global RNG: runs must stay reproducible
    a = torch.randn(n, n, device=device, generator=g).to(_GEMM_DTYPES[dtype])
    b = torch.randn(n, n, device=device, generator=g).to(_GEMM_DTYPES[dtype])
    a @ b  # warm-up
    best, deadline = 0.0, time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        for _ in range(2):
            a @ b
        if device != "cpu":
            torch.cuda.synchronize()
        now = time.perf_counter()
        best = max(best, 2 * 2 * n**3 / (now - start))
        if now > deadline:
            return best


def peak_flops(device: torch.device, precision: str) -> float:
    """Peak FLOP/s of one device for the dtype ``precision`` computes in (table, else measured)."""
    kind = compute_dtype(precision)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        table_kind = "bf16" if kind in ("bf16", "fp16") else "fp32"  # the table's "bf16" is the 16-bit tensor rate
        for key, peaks in GPU_PEAK_FLOPS.items():
            if key in name and kind != "fp64":
                return peaks[table_kind]
    where = str(device) if device.type == "cuda" else "cpu"
    return measured_gemm_flops(where, dtype=kind, threads=torch.get_num_threads())


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
    ``perf/peak_mem_mb`` and ``perf/mfu``. Training FLOPs per token come from the model's ``flops_per_token()``
    (or ``flops_per_token(seq_len=...)`` when attention makes it depend on the length); without one, the matmul
    FLOPs of the first training step (forward + backward, what really ran: logits only where the task computes
    them) are counted once by PyTorch's FLOP counter, and that step is left out of the timing."""

    def __init__(self, window: int = 20):
        self.window = window
        self._start: float | None = None
        self._tokens = self._samples = self._steps = 0
        self._flops_per_token = self._flops = 0.0
        self._flops_fn, self._seq_aware = None, False
        self._peak = 0.0
        self._counter = None  # FlopCounterMode active over the first step when the model has no analytic count
        self._count_first_step = False
        self._warned = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        model = getattr(pl_module, "model", pl_module)
        self._flops_fn = getattr(model, "flops_per_token", None)
        # Models whose cost per token depends on the sequence (attention) take it as ``seq_len``.
        self._seq_aware = self._flops_fn is not None and "seq_len" in inspect.signature(self._flops_fn).parameters
        if self._flops_fn is not None and not self._seq_aware:
            self._flops_per_token = float(self._flops_fn())
        elif self._flops_fn is None:
            unique = {id(p): p.numel() for p in pl_module.parameters() if p.requires_grad}
            self._flops_per_token = 6.0 * sum(unique.values())  # fallback if counting fails
            self._count_first_step = True
        self._peak = peak_flops(pl_module.device, str(trainer.precision)) * max(1, trainer.world_size)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._count_first_step:
            self._count_first_step = False
            from torch.utils.flop_counter import FlopCounterMode

            self._counter = FlopCounterMode(display=False)
            self._counter.__enter__()
            return
        if self._start is None:
            self._start = time.perf_counter()

    def _stop_counting(self) -> float:
        counter, self._counter = self._counter, None
        counter.__exit__(None, None, None)
        return float(counter.get_total_flops())

    def on_exception(self, trainer, pl_module, exception) -> None:
        if self._counter is not None:
            self._stop_counting()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        tokens, samples = count_tokens(batch)
        world = max(1, trainer.world_size)
        if self._counter is not None:  # the counted first step: FLOPs per token of this task, not timed
            counted = self._stop_counting()
            if counted > 0 and tokens:
                self._flops_per_token = counted / tokens
            return
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
            metrics["perf/mfu"] = self.mfu(self._flops / elapsed)
        pl_module.log_dict(metrics, on_step=True, on_epoch=False, rank_zero_only=True)
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)
        self._start, self._tokens, self._samples, self._steps = time.perf_counter(), 0, 0, 0
        self._flops = 0.0

    def mfu(self, achieved: float) -> float:
        """``achieved / peak``, at most 1: an achieved rate above the peak proves the peak was underestimated
        (a GEMM measured while the machine was busy, or a device missing from the table), so it becomes the peak."""
        if achieved > self._peak:
            if not self._warned:
                warnings.warn(f"perf/mfu: achieved {achieved:.3g} FLOP/s exceeds the peak {self._peak:.3g} FLOP/s "
                              "(measured under load, or the device is not in GPU_PEAK_FLOPS); using the achieved "
                              "rate as the peak from now on.", stacklevel=2)
                self._warned = True
            self._peak = achieved
        return achieved / self._peak
