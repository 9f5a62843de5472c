"""1 vs 2 processes on CPU (gloo), DDP and FSDP2, through Lightning: training throughput and memory per process.

Weak scaling (ddp, fsdp2): every process trains the same micro-batch of streams (the global batch grows with the
world size). Each configuration starts its processes the way torchrun does (environment variables), runs a
Transformer-XL language model for --steps steps, and reports tokens/s over the steps after --warmup, step time, peak
RSS and the bytes of parameters each process holds (FSDP2 holds 1/world of them). Ratios are against 1 process.

Global batch (gbatch): a fixed global batch of 2 x --batch streams, as ``data.global_batch`` sets it: 1 process
accumulating 2 micro-batches (chunks of streams) vs 2 DDP processes without accumulation. Both must follow the same
optimisation: the table adds the largest difference of the per-step losses and of the final weights between the
two (mem_len=0 here: the LM task keeps one memory, not one per accumulated chunk).

    python experiments/perf/scaling.py                              # 4 layers, d=256, B=4 x T=64 per process
    python experiments/perf/scaling.py --n-layer 8 --d-model 512 --steps 12
    python experiments/perf/scaling.py --strategies gbatch            # the global-batch equivalence only
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

from genlab.models.transformer_xl import TransformerXL
from genlab.parallel import FSDP2Strategy, accumulation_steps
from genlab.tasks.lm import LanguageModelTask


class Clock(pl.Callback):
    """Optimiser steps after the warm-up, timed; the loss of every micro-batch."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.start, self.steps, self.losses = warmup, None, 0, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(trainer.callback_metrics["train/loss"]))
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return
        self.steps += 1
        if self.steps == self.warmup:
            self.start = time.perf_counter()
        self.end = time.perf_counter()


def segments(args: argparse.Namespace, rank: int, world: int, accumulate: int) -> list[dict]:
    """Weak scaling: this rank's own random streams. Global batch: chunk c of 2 fixed chunks of streams is split
    rank*accumulate + j, interleaved per segment, so 1 x 2 and 2 x 1 see the same streams in each step."""
    if accumulate == 0:
        g = torch.Generator().manual_seed(100 + rank)
        chunks = [torch.randint(0, args.vocab, (args.batch, args.steps * args.tgt_len + 1), generator=g)]
    else:
        g = torch.Generator().manual_seed(100)
        rows = torch.randint(0, args.vocab, (2 * args.batch, args.steps * args.tgt_len + 1), generator=g)
        chunks = [rows.chunk(2)[rank * accumulate + j] for j in range(accumulate)]
    t = args.tgt_len
    return [{"input_ids": c[:, s * t:(s + 1) * t], "target": c[:, s * t + 1:(s + 1) * t + 1], "segment": s}
            for s in range(args.steps) for c in chunks]


def worker(args: argparse.Namespace, strategy_name: str, world: int, rank: int, out: Path) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    gbatch = strategy_name == "gbatch"
    model = TransformerXL(args.vocab, n_layer=args.n_layer, d_model=args.d_model, n_head=args.d_model // 64,
                          d_head=64, d_inner=4 * args.d_model, dropout=0.0, mem_len=0 if gbatch else args.tgt_len)
    task = LanguageModelTask(model, functools.partial(torch.optim.AdamW, lr=1e-4), None, monitor="train/loss")
    accumulate = accumulation_steps(2 * args.batch, args.batch, world) if gbatch else 0
    data = segments(args, rank, world, accumulate)
    if strategy_name == "fsdp2":
        strategy = FSDP2Strategy()
    else:
        strategy = pl.strategies.DDPStrategy(process_group_backend="gloo") if world > 1 else "auto"
    clock = Clock(args.warmup)
    trainer = pl.Trainer(accelerator="cpu", devices=world, strategy=strategy, max_epochs=1, logger=False,
                         enable_checkpointing=False, callbacks=[clock], enable_progress_bar=False,
                         enable_model_summary=False, use_distributed_sampler=False, num_sanity_val_steps=0,
                         accumulate_grad_batches=max(accumulate, 1))
    trainer.fit(task, train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None))
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in task.model.parameters())
    timed = clock.steps - clock.warmup
    per_step = args.batch * args.tgt_len * max(accumulate, 1)
    result = {"tokens_per_s": timed * per_step / (clock.end - clock.start),
              "step_s": (clock.end - clock.start) / timed,
              "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "param_mb": local * 4 / 2**20,
              "losses": torch.tensor(clock.losses).view(-1, max(accumulate, 1)).mean(1).tolist()}
    if rank == 0:
        torch.save(task.model.state_dict(), out / f"{strategy_name}_{world}.pt")
    (out / f"{strategy_name}_{world}_{rank}.json").write_text(json.dumps(result))


def launch(args: argparse.Namespace, strategy_name: str, world: int, out: Path) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    passthrough = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("worker", "strategies")]
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank),
                   NODE_RANK="0", WORLD_SIZE=str(world), OMP_NUM_THREADS=str(args.threads))
        cmd = [sys.executable, __file__, *passthrough, f"--worker={strategy_name},{world},{rank},{out}"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for p in procs:
        log = p.communicate()[0]
        if p.returncode:
            raise SystemExit(f"{strategy_name} x{world} failed:\n{log[-3000:]}")
    return [json.loads((out / f"{strategy_name}_{world}_{r}.json").read_text()) for r in range(world)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--batch", type=int, default=4, help="streams per process")
    p.add_argument("--tgt-len", type=int, default=64)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--strategies", default="ddp,fsdp2,gbatch")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        name, world, rank, out = args.worker.split(",", 3)
        worker(args, name, int(world), int(rank), Path(out))
        return
    print(f"TXL n_layer={args.n_layer} d_model={args.d_model} micro-batch {args.batch}x{args.tgt_len} tokens per "
          f"process, {args.threads} thread(s) per process, {os.cpu_count()} CPUs, torch {torch.__version__}")
    print(f"{'strategy':9s} {'procs':>5s} {'tokens/s':>10s} {'vs 1 proc':>9s} {'step s':>7s} "
          f"{'RSS MB/proc':>11s} {'params MB/proc':>14s}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.strategies.split(","):
            base, runs = None, {}
            for world in (1, 2):
                res = runs[world] = launch(args, name, world, Path(tmp))
                tokens = sum(r["tokens_per_s"] for r in res)
                base = base or tokens
                print(f"{name:9s} {world:5d} {tokens:10.0f} {tokens / base:8.2f}x "
                      f"{max(r['step_s'] for r in res):7.3f} {max(r['rss_mb'] for r in res):11.0f} "
                      f"{max(r['param_mb'] for r in res):14.2f}")
            if name == "gbatch":
                equivalence(runs, Path(tmp))


def equivalence(runs: dict[int, list[dict]], tmp: Path) -> None:
    """Largest |difference| between 1 process x 2 accumulated micro-batches and 2 processes, same global batch."""
    one = torch.tensor(runs[1][0]["losses"])
    two = torch.tensor([r["losses"] for r in runs[2]]).mean(0)
    w1, w2 = (torch.load(tmp / f"gbatch_{n}.pt", weights_only=True) for n in (1, 2))
    dw = max(float((w1[k] - w2[k]).abs().max()) for k in w1)
    print(f"gbatch: 1 proc x accumulate 2 vs 2 procs, {len(one)} steps: max |loss diff| "
          f"{float((one - two).abs().max()):.2e} (losses {float(one[0]):.4f} -> {float(one[-1]):.4f}), "
          f"max |weight diff| {dw:.2e}")

if __name__ == "__main__":
    main()
