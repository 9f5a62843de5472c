"""reuse_host_memory: a freed large tensor's pages serve the next one (no page faults re-touching them)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

PROBE = """
import resource, sys, torch
from genlab.cli.host_memory import reuse_freed_host_memory
if sys.argv[1] == "reuse":
    assert reuse_freed_host_memory()
def touched():  # 96 MiB, above glibc's largest adaptive mmap threshold (32 MiB)
    t = torch.empty(24 * 2**20)
    t.fill_(1.0)
    return t
x = touched(); del x
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
y = touched()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc malloc only")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    default, reuse = faults("default"), faults("reuse")
    assert default >= 48  # 96 MiB faulted in again: 24,576 pages of 4 KiB (48 with transparent huge pages always on)
    assert reuse * 20 < default
