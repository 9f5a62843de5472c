"""Keep freed host memory in the process, so a training step's large buffers reuse pages already mapped.

glibc's malloc hands any block above its mmap threshold (adaptive, never above 32 MiB) straight back to the kernel
when it is freed. A CPU training step frees and re-allocates the same large tensors every step (XLNet's
[B, H, L, K] score tables, a 32k x 768 embedding's gradient and its bf16 copy), so every step page-faults through
them again on first touch: XLNet base dims train 14-20 % faster in fp32 and 3-13 % in bf16 without it on the
development box (``experiments/perf/README.md``).
Raising the mmap and trim thresholds keeps them in the heap, as PyTorch's CUDA caching allocator keeps device
memory: resident memory stays at the run's peak. The first few steps may still fault: the small tail glibc trims off a
64-byte aligned block can sit in its per-thread cache between the freed block and the heap top, until that cache fills
(``tests/cli/test_host_memory.py``). Linux with glibc only; elsewhere nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

from omegaconf import DictConfig

log = logging.getLogger("genlab")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
LARGEST = 2**31 - 1  # mallopt takes an int: blocks of 2 GiB and more are still mapped and returned on free


def reuse_freed_host_memory() -> bool:
    """Set both thresholds to the largest value; True when the C library took them."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    taken = bool(libc.mallopt(M_MMAP_THRESHOLD, LARGEST)) and bool(libc.mallopt(M_TRIM_THRESHOLD, LARGEST))
    if not taken:
        log.warning("glibc refused the malloc thresholds; host memory is returned on free as by default")
    return taken


def apply_host_memory_setting(cfg: DictConfig) -> None:
    """What the entry points call: ``reuse_host_memory`` (default true) of their config."""
    if cfg.get("reuse_host_memory", True):
        reuse_freed_host_memory()
