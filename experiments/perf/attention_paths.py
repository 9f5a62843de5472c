"""Transformer-XL relative attention: naive (explicit softmax) vs fused SDPA vs FlexAttention, same weights.

Times one attention layer over [memory; segment] (forward in no_grad, and forward+backward where the path has a
backward on this device; the paths take turns, so they see the same machine load) and prints each path's time
relative to the naive reference and the max |difference| of its outputs and parameter gradients from the
reference. FlexAttention on CPU runs eagerly (unfused) unless --compile is given
(compiling takes about a minute here); it has no backward on CPU.

    python experiments/perf/attention_paths.py                      # B=4, L=128, M=128, d=512, H=8
    python experiments/perf/attention_paths.py --compile --reps 5
    python experiments/perf/attention_paths.py --batch 2 --qlen 512 --mlen 512   # enwik8-base layer shape
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from genlab.nn.positional import relative_positions, sinusoid_table
from genlab.nn.relative_attention import RelPartialLearnableAttention, attention_mask, flex_block_mask


def timed(fn, reps: int) -> float:
    """Median seconds of ``reps`` calls after a warm-up call; ``reps=0``: one call, no warm-up."""
    if reps == 0:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    fn()  # warm-up (and compilation)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--qlen", type=int, default=128)
    p.add_argument("--mlen", type=int, default=128)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--n-head", type=int, default=8)
    p.add_argument("--same-length", action="store_true")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--compile", action="store_true", help="also time torch.compile'd FlexAttention")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    d, nh = args.d_model, args.n_head
    layers = {}
    for impl in ("naive", "sdpa", "flex"):
        torch.manual_seed(0)
        layers[impl] = RelPartialLearnableAttention(d, nh, d // nh, own_biases=True, attn_impl=impl).to(device)
    g = torch.Generator().manual_seed(1)
    h = torch.randn(args.batch, args.qlen, d, generator=g).to(device)
    mem = torch.randn(args.batch, args.mlen, d, generator=g).to(device)
    klen = args.qlen + args.mlen
    r = sinusoid_table(relative_positions(klen, device=device), d)
    mask = attention_mask(args.qlen, args.mlen, same_length=args.same_length, mem_len=args.mlen, device=device)

    def forward(impl: str, m=None):
        layer = m or layers[impl]
        block = flex_block_mask(mask) if impl == "flex" else mask  # the model builds it once per forward
        with torch.no_grad():
            return layer(h, r, block, mem)

    def train_step(impl: str):
        layers[impl].zero_grad(set_to_none=True)
        layers[impl](h.requires_grad_(), r, mask, mem).sum().backward()

    def grads(impl: str) -> torch.Tensor:
        train_step(impl)
        return torch.cat([p.grad.flatten() for p in layers[impl].parameters()])

    ref, ref_grads = forward("naive"), grads("naive")
    impls = ("naive", "sdpa", "flex")
    trainable = [i for i in impls if not (i == "flex" and device.type == "cpu")]  # flex: no CPU backward
    for impl in impls:  # warm-up
        forward(impl)
    fwd_t = {i: [] for i in impls}
    bwd_t = {i: [] for i in trainable}
    for _ in range(args.reps):  # round-robin, so every path sees the same machine load
        for impl in impls:
            fwd_t[impl].append(timed(lambda i=impl: forward(i), 0))
            if impl in trainable:
                bwd_t[impl].append(timed(lambda i=impl: train_step(i), 0))
    rows = []
    for impl in impls:
        diff = (forward(impl) - ref).abs().max().item()
        gdiff = (grads(impl) - ref_grads).abs().max().item() if impl in trainable else None
        rows.append((impl, statistics.median(fwd_t[impl]),
                     statistics.median(bwd_t[impl]) if impl in trainable else None, diff, gdiff))
    if args.compile:
        import genlab.nn.relative_attention as ra

        compiled = torch.compile(ra.flex_attention, dynamic=False)
        eager, ra.flex_attention = ra.flex_attention, compiled
        try:
            fwd = timed(lambda: forward("flex"), args.reps)
            rows.append(("flex (compiled)", fwd, None, (forward("flex") - ref).abs().max().item(), None))
        finally:
            ra.flex_attention = eager

    base_fwd, base_bwd = rows[0][1], rows[0][2]
    print(f"device={device} threads={args.threads} B={args.batch} L={args.qlen} M={args.mlen} d={d} H={nh} "
          f"same_length={args.same_length} torch={torch.__version__}")
    print(f"{'path':18s} {'fwd ms':>9s} {'vs naive':>9s} {'fwd+bwd ms':>11s} {'vs naive':>9s} {'max|diff|':>10s} "
          f"{'grad max|diff|':>14s}")
    for impl, fwd, bwd, diff, gdiff in rows:
        bwd_s = f"{bwd * 1e3:11.2f} {base_bwd / bwd:8.2f}x" if bwd else f"{'n/a':>11s} {'':>9s}"
        gdiff_s = f"{gdiff:14.2e}" if gdiff is not None else f"{'n/a':>14s}"
        print(f"{impl:18s} {fwd * 1e3:9.2f} {base_fwd / fwd:8.2f}x {bwd_s} {diff:10.2e} {gdiff_s}")


if __name__ == "__main__":
    main()
