"""1 vs 2 processes on CPU (gloo), DDP and FSDP2, through Lightning: training throughput and memory per process.

Weak scaling: every process trains the same micro-batch of streams (the global batch grows with the world size).
Each configuration starts its processes the way torchrun does (environment variables), runs a Transformer-XL
language model for --steps steps, and reports tokens/s over the steps after --warmup, step time, peak RSS and the
bytes of parameters each process holds (FSDP2 holds 1/world of them). Ratios are against 1 process.

    python experiments/perf/scaling.py                              # 4 layers, d=256, B=4 x T=64 per process
    python experiments/perf/scaling.py --n-layer 8 --d-model 512 --steps 12
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
from genlab.parallel import FSDP2Strategy, ParallelizeMixin
from genlab.tasks.lm import LanguageModelTask


class ShardableLM(ParallelizeMixin, LanguageModelTask):
    pass


class Clock(pl.Callback):
    def __init__(self, warmup: int) -> None:
        self.warmup, self.start, self.steps = warmup, None, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps += 1
        if self.steps == self.warmup:
            self.start = time.perf_counter()
        self.end = time.perf_counter()


def worker(args: argparse.Namespace, strategy_name: str, world: int, rank: int, out: Path) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = TransformerXL(args.vocab, n_layer=args.n_layer, d_model=args.d_model, n_head=args.d_model // 64,
                          d_head=64, d_inner=4 * args.d_model, dropout=0.0, mem_len=args.tgt_len)
    task = ShardableLM(model, functools.partial(torch.optim.AdamW, lr=1e-4), None, monitor="train/loss")
    g = torch.Generator().manual_seed(100 + rank)
    rows = torch.randint(0, args.vocab, (args.batch, args.steps * args.tgt_len + 1), generator=g)
    data = [{"input_ids": rows[:, s * args.tgt_len:(s + 1) * args.tgt_len],
             "target": rows[:, s * args.tgt_len + 1:(s + 1) * args.tgt_len + 1], "segment": s}
            for s in range(args.steps)]
    if strategy_name == "fsdp2":
        strategy = FSDP2Strategy()
    else:
        strategy = pl.strategies.DDPStrategy(process_group_backend="gloo") if world > 1 else "auto"
    clock = Clock(args.warmup)
    trainer = pl.Trainer(accelerator="cpu", devices=world, strategy=strategy, max_epochs=1, logger=False,
                         enable_checkpointing=False, callbacks=[clock], enable_progress_bar=False,
                         enable_model_summary=False, use_distributed_sampler=False, num_sanity_val_steps=0)
    trainer.fit(task, train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None))
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in task.model.parameters())
    timed = clock.steps - clock.warmup
    result = {"tokens_per_s": timed * args.batch * args.tgt_len / (clock.end - clock.start),
              "step_s": (clock.end - clock.start) / timed,
              "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "param_mb": local * 4 / 2**20}
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
    p.add_argument("--strategies", default="ddp,fsdp2")
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
            base = None
            for world in (1, 2):
                res = launch(args, name, world, Path(tmp))
                tokens = sum(r["tokens_per_s"] for r in res)
                base = base or tokens
                print(f"{name:9s} {world:5d} {tokens:10.0f} {tokens / base:8.2f}x "
                      f"{max(r['step_s'] for r in res):7.3f} {max(r['rss_mb'] for r in res):11.0f} "
                      f"{max(r['param_mb'] for r in res):14.2f}")


if __name__ == "__main__":
    main()
