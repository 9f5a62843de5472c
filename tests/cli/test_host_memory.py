"""reuse_host_memory: once a training loop settles, a freed large tensor's pages serve the next one (no page faults)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Sixteen "steps" that each allocate, touch and free 96 MiB (above glibc's largest adaptive mmap threshold, 32 MiB),
# printing the page faults of the last four. Not of the first repeat: torch asks for 64-byte aligned blocks, and the
# few bytes glibc trims off the end of one can sit in its per-thread cache (tcache, seven chunks per size) between the
# freed block and the heap top, so the next request, again with alignment slack, misses the hole and extends the heap.
# Once that cache is full the remainders coalesce and every step reuses the same pages: on the development box the
# re-faults stopped after at most four repeats in 100 runs, and after at most one with GLIBC_TUNABLES=glibc.malloc.
# tcache_count=1, none with 0.
PROBE = """
import resource, sys, torch
from genlab.cli.host_memory import reuse_freed_host_memory
if sys.argv[1] == "reuse":
    assert reuse_freed_host_memory()
faults = []
for step in range(16):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.empty(24 * 2**20)
    t.fill_(1.0)
    del t
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(*faults[-4:])
"""


def settled_faults(mode: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return [int(n) for n in out.stdout.split()]


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc malloc only")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    default, reuse = settled_faults("default"), settled_faults("reuse")
    # glibc's default unmaps the block on free: every step faults 96 MiB in again, 24,576 pages of 4 KiB (48 with
    # transparent huge pages always on).
    assert min(default) >= 48, default
    assert max(reuse) * 20 < min(default), (reuse, default)
