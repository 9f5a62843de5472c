"""Estimate a run's peak memory before any data is read, and refuse one that cannot fit, instead of being killed by
the kernel mid-run. Measured against peak RSS in ``experiments/perf/memory_estimate.py``.

Bytes, for the run's micro-batch ``data.batch_size`` on one device:

- baseline: the Python, torch and Lightning process itself (CPU runs only);
- weights 4 and gradients 4 per parameter (fp32 master weights, whatever the compute precision);
- optimiser state: 8 per trainable parameter for Adam-type optimisers, 4 for SGD with momentum, else 0;
- activations: the peak of what a forward, loss and backward hold besides the weights (what autograd saves:
  attention maps, the adaptive softmax's per-cluster logits, two-stream attention's both streams, MoS's mixture
  components, autocast's bf16 weight copies; and the backward's temporaries), measured by ``memory_probe`` on
  synthetic batches of the run's shape (no data read; Transformer-XL and XLNet steps over a previous segment's
  memory, as every step after a pass's first); on CPU, the host heap those tensors grow with their
  fragmentation (``memory_heap``; Funnel B6-6-6: 1.8x the live bytes); for models without a probe batch,
  Korthikanti et al.'s count for transformer-shaped configs (per layer ``2 b s (34 h + 5 a (s + m))`` bytes), else nothing;
- the data loader's batches (one real-size batch, plus 2 prefetched per worker);
- the dataset a DataModule decodes into memory (the image benchmarks' float32 images; ``memory_data``).

The model needs the vocabulary size; before any data work it comes from the config (``data.vocab_size``,
``data.options.vocab_size``, or the published size of the benchmark named by ``data.dataset``; Planetoid's graph and
GDAN's vocabulary caps: ``genlab.cli.memory_manual``).
:func:`sizes_before_data` returns None when only the data can tell (minis built from bundled text or graphs):
those runs are checked after data preparation, and every run whose data changes the model is checked again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from genlab.cli import memory_data, memory_heap, memory_manual, memory_probe
from genlab.errors import ConfigError

log = logging.getLogger("genlab")
GB = 1024**3
WEIGHT_BYTES = GRADIENT_BYTES = 4
BASELINE_BYTES = int(0.55 * GB)  # peak RSS of a step on a 1-parameter model (python, torch, Lightning, genlab)
# Vocabulary sizes of the LM benchmarks as their readers build them from the full corpora.
PUBLISHED_VOCAB = {"wikitext103": 267_735, "wikitext2": 33_278, "ptb": 10_000, "lm1b": 793_470, "enwik8": 204,
                   "text8": 27, "ptb_char": 50}


@dataclass
class MemoryEstimate:
    params: int
    weights_bytes: int  # weights + gradients
    optimizer_bytes: int
    activation_bytes: int | None  # None: no probe batch and not transformer-shaped, activations not estimated
    data_bytes: int = 0
    baseline_bytes: int = 0
    dataset_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return (self.weights_bytes + self.optimizer_bytes + (self.activation_bytes or 0) + self.data_bytes
                + self.dataset_bytes + self.baseline_bytes)

    def describe(self) -> str:
        acts = "not estimated" if self.activation_bytes is None else f"{self.activation_bytes / GB:.2f}"
        return (f"{self.total_bytes / GB:.2f} GB (parameters+gradients {self.weights_bytes / GB:.2f}, optimiser "
                f"{self.optimizer_bytes / GB:.2f}, activations {acts}, batches {self.data_bytes / GB:.2f}, "
                f"{f'decoded dataset {self.dataset_bytes / GB:.2f}, ' if self.dataset_bytes else ''}"
                f"process {self.baseline_bytes / GB:.2f})")


def _first(node: DictConfig | None, *keys: str) -> int | None:
    for key in keys:
        value = node.get(key) if node is not None else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def transformer_activation_bytes(cfg: DictConfig) -> int | None:
    """Korthikanti et al.'s activation count (16-bit per layer sbh(34 + 5as/h)) doubled for fp32."""
    model, data = cfg.get("model"), cfg.get("data")
    h, layers, heads = _first(model, "d_model"), _first(model, "n_layer"), _first(model, "n_head")
    batch, seq = _first(data, "batch_size"), _first(data, "tgt_len", "seq_len", "max_seq_length")
    if None in (h, layers, heads, batch, seq):
        return None
    mem = _first(model, "mem_len") or 0
    return 2 * layers * batch * seq * (34 * h + 5 * heads * (seq + mem))


def optimizer_bytes_per_param(cfg: DictConfig) -> int:
    node = (cfg.get("task") or {}).get("optimizer") if cfg.get("task") is not None else None
    target = str((node or {}).get("_target_", "Adam"))
    if target.rsplit(".", 1)[-1] in ("SGD", "ASGD"):
        return 4 if float((node or {}).get("momentum", 0) or 0) > 0 else 0
    return 8  # Adam, AdamW, OpenAIAdam: two moments


def heap_mmap_threshold(cfg: DictConfig) -> int:
    """glibc's mmap threshold as the run leaves it (``reuse_host_memory``, genlab.cli.host_memory)."""
    return memory_heap.MMAP_WITH_SETTING if cfg.get("reuse_host_memory", True) else memory_heap.MMAP_DEFAULT


def estimate(cfg: DictConfig, task: torch.nn.Module, on_cpu: bool = True) -> MemoryEstimate:
    """The estimate for ``task`` built from ``cfg`` (``on_cpu``: count the process's own baseline)."""
    params = sum(p.numel() for p in task.parameters())
    trainable = sum(p.numel() for p in task.parameters() if p.requires_grad)
    probed = memory_probe.activation_bytes(cfg, task, heap_mmap_threshold(cfg) if on_cpu else None)
    activations = probed if probed is not None else transformer_activation_bytes(cfg)
    return MemoryEstimate(params, WEIGHT_BYTES * params + GRADIENT_BYTES * trainable,
                          optimizer_bytes_per_param(cfg) * trainable, activations,
                          memory_probe.batch_bytes(cfg, task), BASELINE_BYTES if on_cpu else 0,
                          memory_data.dataset_bytes(cfg) if on_cpu else 0)  # host memory, not the device's


def sizes_before_data(cfg: DictConfig) -> dict[str, Any] | None:
    """The model sizes the data would give (``genlab.assemble.data_sizes``), from the config alone; None when only the data
    knows them."""
    from genlab.cli.build import data_class

    manual = memory_manual.sizes_before_data(cfg)  # Planetoid's published graphs, GDAN's vocabulary caps
    if manual is not None:
        return manual
    cls = data_class(cfg)
    if cls is None or not hasattr(cls, "model_overrides"):
        return {}
    data = cfg.data
    if data.get("source") == "mini" or data.get("corpus") not in (None, "text"):
        return None  # a mini built from bundled text: its vocabulary is the data's
    vocab = ((data.get("options") or {}).get("vocab_size") or data.get("vocab_size")
             or PUBLISHED_VOCAB.get(str(data.get("dataset"))))
    return {"vocab_size": int(vocab)} if vocab else None


def available_bytes(accelerator: str) -> int | None:
    """Free memory of the device the run uses: CUDA free memory, else the system's MemAvailable (Linux)."""
    if on_gpu(accelerator):
        return int(torch.cuda.mem_get_info()[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None  # unknown: do not guess


def on_gpu(accelerator: str) -> bool:
    return accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available()


def check_memory(cfg: DictConfig, task: torch.nn.Module, available: int | None = None) -> MemoryEstimate:
    """Log the estimate; raise ConfigError (exit 2) when it exceeds ``available`` (default: measured)."""
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    est = estimate(cfg, task, on_cpu=not on_gpu(accelerator))
    if available is None:
        available = available_bytes(accelerator)
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
