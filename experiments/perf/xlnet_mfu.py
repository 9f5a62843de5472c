"""Achieved FLOP/s of a genlab XLNet training step as a fraction of the GEMM rate measured in the same run.

The pretraining step of ``xlnet_throughput.py`` (two streams, perm_mask, target_mapping, memory, PLM loss,
backward, AdamW) at base dimensions (d=768, 12 heads, d_inner=3072, T=512, M=384, P=85 prediction slots, B=2),
fp32 on CPU. FLOPs are counted analytically (``xlnet_step.analytic_flops``, which lists what it counts) and
cross-checked against torch's FlopCounterMode on one step, which counts what really ran (the positional term
against all K + T distances, the segment term). Between the timed steps this process runs 1024^3 fp32 GEMMs
on the same thread count for a few seconds (interleaved, so both see the same machine load; the mean rate over
that window, since the step itself averages over tens of seconds of a fluctuating load); MFU = analytic FLOPs /
step time / median GEMM rate.

    python experiments/perf/xlnet_mfu.py --threads 1 --steps 3              # 12 layers, about 3 minutes
    python experiments/perf/xlnet_mfu.py --threads 1 --n-layer 2 --profile  # quicker, with the top ops
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from gemm_rate import GEMM_OPS, gemm_rate, top_ops
from xlnet_step import SIZES, analytic_flops, make_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--n-layer", type=int, default=None, help="override the 12 layers (quicker runs)")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--gemm-seconds", type=float, default=3.0,
                        help="each GEMM-rate sample is the mean rate over this many seconds of 1024^3 matmuls")
    parser.add_argument("--optimizer", choices=["fused", "adamw", "genlab"], default="fused",
                        help="torch AdamW fused (one kernel, no temporaries) or per-tensor, or genlab's "
                             "AdamWeightDecay (the PLM task's)")
    parser.add_argument("--profile", action="store_true", help="print the top ops of one extra step")
    args = parser.parse_args()
    cfg = dict(SIZES["base"])
    cfg["n_layer"] = args.n_layer or cfg["n_layer"]
    cfg["batch"] = args.batch or cfg["batch"]
    torch.set_num_threads(args.threads)

    from torch.utils.flop_counter import FlopCounterMode

    from genlab.models.xlnet import XLNetLMHeadModel, plm_loss

    torch.manual_seed(0)
    dims = {k: cfg[k] for k in ("n_layer", "d_model", "n_head", "d_head", "d_inner")}
    model = XLNetLMHeadModel(cfg["vocab"], **dims, dropout=0.0, dropatt=0.0, mem_len=cfg["mem"]).train()
    if args.optimizer == "genlab":  # what conf/task/plm.yaml trains with
        from genlab.tasks.layerwise_lr import AdamWeightDecay

        opt = AdamWeightDecay(model.parameters(), lr=1e-4)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=args.optimizer == "fused")
    memory = [torch.zeros(cfg["batch"], cfg["mem"], cfg["d_model"]) for _ in range(cfg["n_layer"])]

    def step(i: int) -> float:
        nonlocal memory
        batch = make_batch(cfg, i)
        t0 = time.perf_counter()
        out = model(batch["input_ids"], batch["token_type_ids"], perm_mask=batch["perm_mask"],
                    target_mapping=batch["target_mapping"], memory=memory, reuse_len=cfg["reuse"])
        loss = plm_loss(out.logits, batch["target"], batch["target_mask"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        memory = out.memory
        return time.perf_counter() - t0

    with FlopCounterMode(display=False) as counter:  # untimed first step
        step(0)
    counted = counter.get_total_flops()
    times, rates = [], [gemm_rate(args.threads, seconds=args.gemm_seconds)]
    for i in range(1, 1 + args.steps):
        times.append(step(i))
        rates.append(gemm_rate(args.threads, seconds=args.gemm_seconds))
    flops, step_s, rate = analytic_flops(cfg), statistics.median(times), statistics.median(rates)
    # each step against the mean of the rates measured just before and just after it (load drifts slowly)
    per_step = [flops / t / ((a + b) / 2) for t, a, b in zip(times, rates, rates[1:])]
    print(f"XLNet base dims: n_layer={cfg['n_layer']} d={cfg['d_model']} H={cfg['n_head']} d_inner={cfg['d_inner']} "
          f"vocab={cfg['vocab']} B={cfg['batch']} T={cfg['seq']} M={cfg['mem']} P={cfg['num_predict']}, fp32 CPU, "
          f"{args.threads} thread(s), torch {torch.__version__}, {args.steps} timed steps, optimizer {args.optimizer}")
    print(f"matmul FLOPs per step: analytic (needed) {flops / 1e9:.1f} G, FlopCounterMode (ran) {counted / 1e9:.1f} G "
          f"({counted / flops:.2f}x)")
    print(f"GEMM rate {rate / 1e9:.1f} GFLOP/s (median of {len(rates)}: {min(rates) / 1e9:.1f}-{max(rates) / 1e9:.1f}, "
          f"interleaved with the steps)")
    print(f"step {step_s:.3f} s ({min(times):.3f}-{max(times):.3f}), {cfg['batch'] * cfg['seq'] / step_s:.1f} tok/s, "
          f"achieved {flops / step_s / 1e9:.1f} GFLOP/s = {flops / step_s / rate:.1%} of the median GEMM rate "
          f"(GEMM floor {flops / rate:.3f} s)")
    print(f"MFU per step against the GEMM rates measured just before and after it: median "
          f"{statistics.median(per_step):.1%} ({min(per_step):.1%}-{max(per_step):.1%})")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step(1 + args.steps)
        print("top ops (one step, torch.profiler):\n" + top_ops(prof, limit=16))
        events = prof.key_averages()
        share = sum(e.self_cpu_time_total for e in events if e.key in GEMM_OPS) / sum(
            e.self_cpu_time_total for e in events)
        print(f"load-independent cross-check: GEMM ops take {share:.1%} of the step's CPU time and {flops / counted:.1%} "
              f"of the FLOPs they run are needed, so the step reaches {share * flops / counted:.1%} of the rate its own "
              f"GEMMs ran at")


if __name__ == "__main__":
    main()
