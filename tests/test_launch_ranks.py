"""The test launcher survives losing its rendezvous port to another process (a parallel test can take the port
between ``free_port`` and rank 0's bind)."""

from __future__ import annotations

import socket
import textwrap

import launch_ranks


def test_a_taken_port_is_retried_on_another(tmp_path, monkeypatch):
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent("""
        import os
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=int(os.environ["LOCAL_RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
        print("rank", dist.get_rank(), "of", dist.get_world_size())
        dist.destroy_process_group()
    """))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1], launch_ranks.free_port()])
        monkeypatch.setattr(launch_ranks, "free_port", lambda: next(ports))
        logs = launch_ranks.run_ranks(str(script), [], world=1, timeout=60)
    assert "rank 0 of 1" in logs[0]
