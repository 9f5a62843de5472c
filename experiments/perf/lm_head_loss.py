"""The LM head's loss, unfused vs fused (``genlab.nn.linear_cross_entropy``), at GPT-1's shape.

One step is ``loss = CE(h @ Wᵀ).mean()`` and its backward for ``N`` rows, width ``d`` and vocabulary ``V`` (default
GPT-1 at 4 x 512: 2,044 predicted tokens, 768, 40,478): unfused as the GPT task computed it before
(``F.cross_entropy(F.linear(h, W).float(), t, reduction="none")``), fused as it does now. Both take turns step by
step in this process (order flipped every step), in fp32 and under bf16 autocast. Printed per precision: each
side's step time, ``fused/unfused speed: X`` (> 1 = fused faster), the largest |difference| of the loss and of
both gradients, and each side's peak extra resident memory of one step (measured in a fresh child process each,
the high-water mark of the step minus the resident size before it).

    python experiments/perf/lm_head_loss.py --threads 1 --steps 5
    python experiments/perf/lm_head_loss.py --rows 32704 --steps 1   # gpt_books' real batch, 64 x 511 targets
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from genlab.nn.linear_cross_entropy import BLOCK_ELEMENTS, linear_cross_entropy

LOSSES = {
    "unfused": lambda h, w, t, block: F.cross_entropy(F.linear(h, w).float(), t, reduction="none"),
    "fused": lambda h, w, t, block: linear_cross_entropy(h, w, t, block_elements=block),
}


def leaves(rows: int, dim: int, vocab: int):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(rows, dim, generator=g).requires_grad_()
    w = (0.02 * torch.randn(vocab, dim, generator=g)).requires_grad_()  # GPT-1's N(0, 0.02) init
    return h, w, torch.randint(0, vocab, (rows,), generator=g)


def step(name: str, h, w, t, bf16: bool, block: int = BLOCK_ELEMENTS):
    h.grad = w.grad = None
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = LOSSES[name](h, w, t, block).mean()
    loss.backward()
    return time.perf_counter() - t0, loss.detach(), h.grad, w.grad


def rss_kb(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split(f"{field}:")[1].split()[0])


def peak_child(args: argparse.Namespace) -> None:
    """In a fresh process: one step of one side; prints its peak resident memory above the inputs', in GB (Linux:
    the high-water mark is reset before the step through /proc/self/clear_refs)."""
    h, w, t = leaves(args.rows, args.dim, args.vocab)
    before = rss_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    step(args.peak, h, w, t, args.peak_bf16, args.block_elements)
    print(json.dumps((rss_kb("VmHWM") - before) / 2**20))


def peak_gb(args: argparse.Namespace, name: str, bf16: bool) -> float:
    cmd = [sys.executable, __file__, "--peak", name, "--rows", str(args.rows), "--dim", str(args.dim), "--vocab",
           str(args.vocab), "--block-elements", str(args.block_elements)] + (["--peak-bf16"] if bf16 else []) + (["--threads", str(args.threads)] if args.threads
                                                                    else [])
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4 * 511, help="predicted tokens per step")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=40_478)
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16-mixed"], default=["fp32", "bf16-mixed"])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per side")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--block-elements", type=int, default=BLOCK_ELEMENTS, help="fused: logits per block")
    parser.add_argument("--no-memory", action="store_true", help="skip the child processes measuring peak memory")
    parser.add_argument("--peak", choices=list(LOSSES), help=argparse.SUPPRESS)
    parser.add_argument("--peak-bf16", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.peak:
        peak_child(args)
        return 0
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.rows} rows x {args.dim} -> "
          f"{args.vocab} words, fused blocks of {max(1, args.block_elements // args.vocab)} rows")
    h, w, t = leaves(args.rows, args.dim, args.vocab)
    for precision in args.precisions:
        bf16 = precision == "bf16-mixed"
        times: dict[str, list[float]] = {name: [] for name in LOSSES}
        last = {}
        for i in range(args.warmup + args.steps):
            for name in (list(LOSSES) if i % 2 == 0 else list(reversed(LOSSES))):
                dt, loss, gh, gw = step(name, h, w, t, bf16, args.block_elements)
                last[name] = (loss, gh.clone(), gw.clone())
                if i >= args.warmup:
                    times[name].append(dt)
        med = {name: statistics.median(v) for name, v in times.items()}
        diffs = [float((a - b).abs().max()) for a, b in zip(last["fused"], last["unfused"])]
        memory = {} if args.no_memory else {name: peak_gb(args, name, bf16) for name in LOSSES}
        for name in LOSSES:
            extra = f", peak extra memory {memory[name]:.2f} GB" if memory else ""
            print(f"  {precision:10s} {name:8s}: step {med[name]:.3f} s (range {min(times[name]):.3f}-"
                  f"{max(times[name]):.3f}){extra}", flush=True)
        print(f"fused/unfused speed: {med['unfused'] / med['fused']:.2f} ({precision}); max |difference| loss "
              f"{diffs[0]:.1e}, dh {diffs[1]:.1e}, dW {diffs[2]:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
