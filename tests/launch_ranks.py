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


def exit_rank() -> None:
    """End a worker whose results are written: wait for the other ranks, then exit without the process groups'
    teardown. Left to interpreter exit, that teardown races the peer that exits first (rank 0 hosts the rendezvous
    store) and aborted a finished rank in about one of six runs of the FSDP2 worker, and once the DDP sharding worker
    under load (gloo: "terminate called without an active exception", exit code -6). Every multi-rank test worker
    ends with it."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(script: str, args: list[str], world: int, timeout: float = 300) -> list[str]:
    """Run ``world`` ranks of ``script`` on this machine (gloo, one thread each); ``{rank}`` in ``args`` becomes
    the rank. Returns their output. The rendezvous port is free when chosen but released before rank 0 binds it, so
    a parallel test can take it in between: then the ranks run once more on another port."""
    for attempt in range(2):
        procs, logs = _launch(script, args, world, free_port(), timeout)
        lost_port = any(p.returncode != 0 for p in procs) and any("address already in use" in log.lower()
                                                                  for log in logs)
        if not (lost_port and attempt == 0):
            break
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-4000:]
    return logs


def _launch(script: str, args: list[str], world: int, port: int, timeout: float
            ) -> tuple[list[subprocess.Popen], list[str]]:
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank),
                   NODE_RANK="0", WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
        cmd = [sys.executable, script, *(a.replace("{rank}", str(rank)) for a in args)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs, [p.communicate(timeout=timeout)[0] for p in procs]
