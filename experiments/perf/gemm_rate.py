"""Measured fp32 GEMM rate of this machine, the denominator of the "% of GEMM floor" and MFU figures.

``gemm_rate`` times n x n matmuls (best of a few, or the mean over a time window); benchmarks call it between
model steps (interleaved), so the rate and the steps see the same machine load, and take the median.
Also a self-contained top-ops table for torch.profiler output (both the genlab venv and the HF 4.35 venv
import this file, so it depends on torch alone).

    python experiments/perf/gemm_rate.py --threads 1
"""

from __future__ import annotations

import argparse
import time

import torch


def gemm_rate(threads: int, n: int = 1024, reps: int = 3, seconds: float | None = None) -> float:
    """FLOP/s of fp32 [n, n] @ [n, n] matmuls on ``threads`` intra-op threads: the best of ``reps`` (the most
    optimistic rate: what a GEMM floor should use) or, with ``seconds``, the mean over that long a window (on a
    loaded machine a fairer denominator for a step that itself lasts seconds)."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    a @ b  # warm-up: first touch of the output pages
    if seconds:
        count, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            a @ b
            count += 1
        return 2 * n**3 * count / elapsed
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::matmul")


def top_ops(prof, limit: int = 12) -> str:
    """Self-CPU time per op of a finished ``torch.profiler.profile``, largest first, with the GEMM share."""
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in rows) or 1.0
    gemm = sum(e.self_cpu_time_total for e in rows if e.key in GEMM_OPS)
    lines = [f"  {'op':34s} {'self ms':>9s} {'share':>6s} {'calls':>6s}"]
    for e in rows[:limit]:
        lines.append(f"  {e.key[:34]:34s} {e.self_cpu_time_total / 1e3:9.1f} {e.self_cpu_time_total / total:6.1%} "
                     f"{e.count:6d}")
    lines.append(f"  total {total / 1e3:.1f} ms self CPU, of which GEMM ops {gemm / total:.1%}")
    return "\n".join(lines)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--n", type=int, default=1024)
    args = p.parse_args()
    print(f"fp32 GEMM {args.n}^3 on {args.threads} thread(s): {gemm_rate(args.threads, args.n) / 1e9:.1f} GFLOP/s")
