"""Funnel-Transformer vs the standard Transformer of the same width: FLOPs and measured speed, in one run.

For each FLOPs-matched group of the thesis (Dai's thesis Tables 5.1, 5.8-5.10, §5.3.4) and each
sequence length this prints, relative to the group's baseline (L12H768, L6H768 or L24H1024 = a 1-block funnel):

* analytic forward FLOPs (``genlab.analysis.funnel_cost.forward_flops``: every matrix multiply of our
  implementation, T^2 attention terms included), checked against ``torch.utils.flop_counter.FlopCounterMode`` on a
  batch-1 forward (column ``counted/analytic`` must read 1.0000);
* the thesis' estimator ``sum_b L_b r_b / 2^b (+ decoder) / baseline layers`` and the printed table entry;
* measured inference (forward, no grad) and training (forward + backward + AdamW step on a proxy loss, dropout
  on) tokens/s, as time ratios like the thesis' "running time" columns (< 1 = faster than the baseline), and peak
  training memory on CUDA.

``--decoder`` is the pretraining setting of Table 5.10 (funnels with their 2 decoder layers, baseline without);
the default is the finetuning setting of Tables 5.1/5.8 (encoder only). Heads are excluded throughout.

    python experiments/perf/funnel_flops.py --group base --seq-len 128 256 512 --batch 64 32 16 --device cuda \
        --dtype bf16                                                    # Table 5.8, 1 GPU
    python experiments/perf/funnel_flops.py --group base --seq-len 512 --batch 16 --decoder --device cuda \
        --dtype bf16                                                    # Table 5.10 (pretraining)
    python experiments/perf/funnel_flops.py --tiny                      # CPU smoke test (seconds)

Timings mean something only on an otherwise idle machine; the models run one after another (warmup steps first).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from genlab.analysis.funnel_cost import counting_mode, forward_flops, table_flops_ratio
from genlab.models.funnel import FunnelModel

# name -> (block_sizes, block_repeats, d_model); the first entry of a group is its baseline
GROUPS = {
    "base": [("L12H768", (12,), None, 768), ("B6-6-6H768", (6, 6, 6), None, 768),
             ("B6-3x2-3x2H768", (6, 3, 3), (1, 2, 2), 768), ("B4-4-4H768", (4, 4, 4), None, 768)],
    "small": [("L6H768", (6,), None, 768), ("B3-4-4H768", (3, 4, 4), None, 768)],
    "large": [("L24H1024", (24,), None, 1024), ("B10-10-10H1024", (10, 10, 10), None, 1024),
              ("B8-8-8H1024", (8, 8, 8), None, 1024)],
}
WIDTHS = {768: dict(n_head=12, d_head=64, d_inner=3072), 1024: dict(n_head=16, d_head=64, d_inner=4096)}
TINY = dict(d_model=64, n_head=2, d_head=32, d_inner=256)
# printed FLOPs entries: finetuning (Table 5.1) and pretraining with 2 decoder layers (Table 5.10)
THESIS_FLOPS = {
    False: {"B6-6-6H768": 0.88, "B6-3x2-3x2H768": 0.88, "B4-4-4H768": 0.58, "B3-4-4H768": 1.00,
            "B10-10-10H1024": 0.73, "B8-8-8H1024": 0.58},
    True: {"B6-6-6H768": 1.04, "B6-3x2-3x2H768": 1.04, "B4-4-4H768": 0.75, "B10-10-10H1024": 0.81,
           "B8-8-8H1024": 0.66},
}


def build(name: str, blocks, repeats, width: int, decoder: bool, args) -> FunnelModel:
    dims = TINY if args.tiny else {"d_model": width, **WIDTHS[width]}
    baseline = len(blocks) == 1
    torch.manual_seed(0)
    return FunnelModel(args.vocab, block_sizes=blocks, block_repeats=repeats, use_decoder=decoder and not baseline,
                       **dims).to(args.device)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def autocast(args):
    if args.dtype == "bf16":
        return torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16)
    return contextlib.nullcontext()


def inputs(args, batch: int, seq_len: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, args.vocab, (batch, seq_len), generator=g)
    types = torch.zeros(batch, seq_len, dtype=torch.long)
    types[:, 0], types[:, seq_len // 2:] = 2, 1
    return ids.to(args.device), types.to(args.device)


def counted_flops(model: FunnelModel, args, seq_len: int) -> int:
    ids, types = inputs(args, 1, seq_len)
    model.eval()
    with torch.no_grad(), counting_mode() as counter:
        model(ids, types)
    return counter.get_total_flops()


def tokens_per_second(model: FunnelModel, args, batch: int, seq_len: int, train: bool) -> tuple[float, float]:
    """(tokens/s, peak memory GiB on CUDA else nan) over ``args.steps`` steps after ``args.warmup``."""
    ids, types = inputs(args, batch, seq_len)
    model.train(train)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5) if train else None
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()

    def step():
        if not train:
            with torch.no_grad(), autocast(args):
                model(ids, types)
            return
        with autocast(args):
            loss = model(ids, types).hidden.float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    synchronize(args.device)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    synchronize(args.device)
    elapsed = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device.startswith("cuda") else float("nan")
    return batch * seq_len * args.steps / elapsed, peak


def measure(args) -> list[dict]:
    rows = []
    for group in args.group:
        for seq_len, batch in zip(args.seq_len, args.batch):
            base = None
            for name, blocks, repeats, width in GROUPS[group]:
                model = build(name, blocks, repeats, width, args.decoder, args)
                arch = model.arch
                row = dict(group=group, model=name, seq_len=seq_len, batch=batch,
                           flops=forward_flops(arch, batch, seq_len),
                           counted_ratio=counted_flops(model, args, seq_len) / forward_flops(arch, 1, seq_len),
                           estimator=table_flops_ratio(blocks, repeats, 2 if arch["use_decoder"] else 0,
                                                       GROUPS[group][0][1][0]),
                           thesis=THESIS_FLOPS[args.decoder].get(name))
                if not args.no_timing:
                    row["infer_tps"], _ = tokens_per_second(model, args, batch, seq_len, train=False)
                    row["train_tps"], row["train_peak_gib"] = tokens_per_second(model, args, batch, seq_len, True)
                base = base or row
                row["flops_ratio"] = row["flops"] / base["flops"]
                if not args.no_timing:
                    row["infer_time_ratio"] = base["infer_tps"] / row["infer_tps"]
                    row["train_time_ratio"] = base["train_tps"] / row["train_tps"]
                rows.append(row)
                del model
                if args.device.startswith("cuda"):
                    torch.cuda.empty_cache()
    return rows


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def report(rows: list[dict], args) -> str:
    tiny = " (--tiny: d_model-64 stand-ins with the named layouts)" if args.tiny else ""
    lines = [f"setting: {'pretraining (funnels with 2 decoder layers)' if args.decoder else 'finetuning (encoder)'}"
             f"{tiny}, device {describe_device(args.device)}, {args.dtype}, torch {torch.__version__}, commit {commit()}",
             "", "| group | model | T | batch | GFLOPs/fwd | FLOPs ratio | counted/analytic | estimator | thesis "
             "| infer tok/s | infer time ratio | train tok/s | train time ratio | train peak GiB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['group']} | {r['model']} | {r['seq_len']} | {r['batch']} | {r['flops'] / 1e9:.3f} | "
                     f"{r['flops_ratio']:.3f} | {r['counted_ratio']:.4f} | {r['estimator']:.3f} | "
                     f"{fmt(r['thesis'], '.2f')} | {fmt(r.get('infer_tps'), '.0f')} | "
                     f"{fmt(r.get('infer_time_ratio'), '.3f')} | {fmt(r.get('train_tps'), '.0f')} | "
                     f"{fmt(r.get('train_time_ratio'), '.3f')} | {fmt(r.get('train_peak_gib'), '.2f')} |")
    return "\n".join(lines)


def describe_device(device: str) -> str:
    return torch.cuda.get_device_name(device) if device.startswith("cuda") else f"cpu x{torch.get_num_threads()}"


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=10, check=False).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--group", nargs="+", choices=sorted(GROUPS), default=["base", "small", "large"])
    p.add_argument("--seq-len", nargs="+", type=int, default=[512])
    p.add_argument("--batch", nargs="+", type=int, default=None, help="one per --seq-len (default 8 each)")
    p.add_argument("--decoder", action="store_true", help="pretraining setting: funnels keep their decoder")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="bf16 = autocast")
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (CPU)")
    p.add_argument("--no-timing", action="store_true", help="FLOPs only")
    p.add_argument("--tiny", action="store_true", help="d_model 64 models, T=32, batch 2, 2 steps: a smoke test")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = p.parse_args(argv)
    if args.tiny:
        args.vocab, args.steps, args.warmup = 100, min(args.steps, 2), min(args.warmup, 1)
        if args.seq_len == [512]:
            args.seq_len = [32]
        args.batch = args.batch or [2] * len(args.seq_len)
    args.batch = args.batch or [8] * len(args.seq_len)
    if len(args.batch) != len(args.seq_len):
        p.error("give one --batch per --seq-len")
    return args


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = measure(args)
    print(report(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
