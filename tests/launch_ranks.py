"""Start a test's worker processes the way torchrun/srun would (environment variables only), so Lightning treats
them as externally launched; each rank runs ``python <script> <args...>`` and must exit 0."""

from __future__ import annotations

import os
import socket
import subprocess
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(script: str, args: list[str], world: int, timeout: float = 300) -> list[str]:
    """Run ``world`` ranks of ``script`` on this machine (gloo, one thread each); ``{rank}`` in ``args`` becomes
    the rank. Returns their output."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank),
                   NODE_RANK="0", WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
        cmd = [sys.executable, script, *(a.replace("{rank}", str(rank)) for a in args)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = [p.communicate(timeout=timeout)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-4000:]
    return logs
