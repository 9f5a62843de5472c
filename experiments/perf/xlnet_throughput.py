"""Training-step throughput of genlab XLNet vs Hugging Face XLNetLMHeadModel (same weights, same inputs).

One step = forward (two streams, perm_mask, target_mapping, memory) + PLM loss + backward + AdamW step, fp32 CPU.
Each implementation runs in its own process (peak RSS measured separately); the two alternate step by step
so that both see the same machine load. Prints tokens/s, the
ratio, peak memory, achieved FLOP/s against the GEMM rate timed between the steps, and the max |loss
difference| per step.

    python experiments/perf/xlnet_throughput.py --config base --steps 2 --warmup 1 --threads 1
    python experiments/perf/xlnet_throughput.py --config tiny --steps 10 --threads 1

Numbers (machine, commit, load) are in experiments/perf/README.md; the latest: base dims, 4 layers, ours 1.94x HF
tokens/s, peak RSS 0.81x, max |loss difference| 0.0 (the first pass measured 2.00x with 12 layers).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import tempfile
import time
from pathlib import Path

import torch
from gemm_rate import gemm_rate
from xlnet_step import SIZES, analytic_flops, make_batch


def build(impl: str, cfg: dict, weights: Path):
    from genlab.models.xlnet import XLNetLMHeadModel

    dims = {k: cfg[k] for k in ("n_layer", "d_model", "n_head", "d_head", "d_inner")}
    if impl == "ours":
        model = XLNetLMHeadModel(cfg["vocab"], **dims, dropout=0.0, dropatt=0.0, mem_len=cfg["mem"])
    else:
        from transformers import XLNetConfig
        from transformers import XLNetLMHeadModel as HFModel

        hf_cfg = XLNetConfig(vocab_size=cfg["vocab"], d_model=dims["d_model"], n_layer=dims["n_layer"],
                             n_head=dims["n_head"], d_inner=dims["d_inner"], ff_activation="gelu_new",
                             dropout=0.0, mem_len=cfg["mem"], reuse_len=cfg["reuse"], attn_implementation="eager")
        model = HFModel(hf_cfg)
    model.load_state_dict(torch.load(weights, weights_only=True), strict=True)
    return model.train()


def step_fn(impl: str, model, batch: dict, memory, reuse: int):
    from genlab.models.xlnet import plm_loss

    if impl == "ours":
        out = model(batch["input_ids"], batch["token_type_ids"], perm_mask=batch["perm_mask"],
                    target_mapping=batch["target_mapping"], memory=memory, reuse_len=reuse)
        return plm_loss(out.logits, batch["target"], batch["target_mask"]), out.memory
    out = model(batch["input_ids"], token_type_ids=batch["token_type_ids"], perm_mask=batch["perm_mask"],
                target_mapping=batch["target_mapping"], mems=memory, use_mems=True)
    return plm_loss(out.logits, batch["target"], batch["target_mask"]), list(out.mems)


def worker(impl: str, cfg: dict, weights: str, threads: int, conn) -> None:
    """Runs one implementation in its own process; does one training step per "step" message (lock-step with
    the other implementation, so both see the same machine load) and reports its peak RSS at "done"."""
    torch.set_num_threads(threads)
    model = build(impl, cfg, Path(weights))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    b, d = cfg["batch"], cfg["d_model"]
    zeros = [torch.zeros(b, cfg["mem"], d) for _ in range(cfg["n_layer"])]
    memory = zeros if impl == "ours" else [m.transpose(0, 1).contiguous() for m in zeros]  # HF: [M, B, d]
    conn.send(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    while (msg := conn.recv()) != "done":
        batch = make_batch(cfg, msg)
        t0 = time.perf_counter()
        loss, memory = step_fn(impl, model, batch, memory, cfg["reuse"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        conn.send((loss.item(), time.perf_counter() - t0))
    conn.send(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(),
                        help="intra-op threads per process (use 1 on a loaded shared machine)")
    parser.add_argument("--n-layer", type=int, default=None, help="override the number of layers (quick runs)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    cfg = dict(SIZES[args.config])
    if args.n_layer is not None:
        cfg["n_layer"] = args.n_layer

    from genlab.models.xlnet import XLNetLMHeadModel

    torch.manual_seed(0)
    dims = {k: cfg[k] for k in ("n_layer", "d_model", "n_head", "d_head", "d_inner")}
    init = XLNetLMHeadModel(cfg["vocab"], **dims)
    ctx = mp.get_context("spawn")
    results = {impl: dict(losses=[], times=[]) for impl in ("hf", "ours")}
    with tempfile.TemporaryDirectory() as tmp:
        weights = Path(tmp) / "weights.pt"
        torch.save(init.state_dict(), weights)
        del init
        conns, procs = {}, []
        for impl in ("hf", "ours"):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker, args=(impl, cfg, str(weights), args.threads, child))
            proc.start()
            conns[impl], results[impl]["before_mb"] = parent, None
            procs.append(proc)
        for impl in ("hf", "ours"):
            results[impl]["before_mb"] = conns[impl].recv()
        rates = []
        for step in range(args.warmup + args.steps):
            for impl in ("hf", "ours") if step % 2 == 0 else ("ours", "hf"):
                conns[impl].send(step)
                loss, dt = conns[impl].recv()
                results[impl]["losses"].append(loss)
                if step >= args.warmup:
                    results[impl]["times"].append(dt)
            rates.append(gemm_rate(args.threads))  # same machine load as the steps around it
        for impl in ("hf", "ours"):
            conns[impl].send("done")
            results[impl]["peak_mb"] = conns[impl].recv()
        for proc in procs:
            proc.join()

    peak = statistics.median(rates)
    flops = analytic_flops(cfg)
    tokens = cfg["batch"] * cfg["seq"]
    print(f"config={args.config} n_layer={cfg['n_layer']} batch={cfg['batch']} seq={cfg['seq']} mem={cfg['mem']} "
          f"reuse={cfg['reuse']} num_predict={cfg['num_predict']} threads={args.threads} steps={args.steps} (+{args.warmup} warmup)")
    print(f"GEMM rate (median, measured between the steps): {peak / 1e9:.1f} GFLOP/s; needed matmul FLOPs/step "
          f"(xlnet_step.analytic_flops): {flops / 1e9:.1f} G")
    summary = {}
    for impl in ("hf", "ours"):
        r = results[impl]
        step = statistics.median(r["times"])
        summary[impl] = dict(tokens_per_s=tokens / step, step_s=step, peak_rss_mb=r["peak_mb"],
                             flops_per_s=flops / step, mfu=flops / step / peak, losses=r["losses"])
        print(f"{impl:>5}: {tokens / step:9.1f} tokens/s  step {step:7.3f} s  peak RSS {r['peak_mb']:8.1f} MB  "
              f"{flops / step / 1e9:6.1f} GFLOP/s ({100 * flops / step / peak:4.1f}% of the GEMM rate)")
    loss_diff = max(abs(a - b) for a, b in zip(results["ours"]["losses"], results["hf"]["losses"]))
    ratio = summary["ours"]["tokens_per_s"] / summary["hf"]["tokens_per_s"]
    mem_ratio = summary["ours"]["peak_rss_mb"] / summary["hf"]["peak_rss_mb"]
    print(f"speed ratio ours/HF: {ratio:.2f}x   peak memory ratio ours/HF: {mem_ratio:.2f}   "
          f"max |loss difference| over {len(results['ours']['losses'])} steps: {loss_diff:.2e}")
    print(f"losses ours: {[round(x, 5) for x in results['ours']['losses']]}")
    if args.json:
        args.json.write_text(json.dumps(dict(config=args.config, summary=summary, ratio=ratio,
                                             mem_ratio=mem_ratio, loss_diff=loss_diff), indent=2))


if __name__ == "__main__":
    main()
