"""A machine check before long GPU runs: every model family trains on the device as train.py would run it there.

Per family (Transformer-XL, XLNet, BERT, GPT-1, Funnel-Transformer, AWD-LSTM-MoS), the model of a paper preset
(``--cpu``: its ``_mini`` twin), composed from ``conf/experiment`` as train.py composes it, is built once on the CPU
from one seed and trained on synthetic batches of the preset's shape:

1. reference: ``--check-steps`` optimiser steps in fp32 on the CPU, eager, dropout off (so both sides see the same
   function); the first step's matmul FLOPs are counted (``torch.utils.flop_counter``) for MFU;
2. device: the same weights and batches under bf16 autocast (``trainer.precision=bf16-mixed``), the fused attention
   path (SDPA; FlexAttention for Transformer-XL on CUDA) and regional ``torch.compile`` of each block
   (``genlab.parallel.parallelize``, as ``strategy.compile_blocks=true``) where the family declares blocks;
   every step's loss must agree with the reference: |loss - ref| <= 1% of |ref| + 1e-3 (bf16 rounds to 2^-8
   relative; fp32 islands keep the softmaxes and losses exact enough for 1%: tests/test_precision_families.py);
3. throughput: dropout back on, ``--warmup`` then ``--steps`` timed steps: tokens/s and MFU against the device's
   peak for bf16 (``genlab.callbacks.throughput.peak_flops``: the data-sheet table on known GPUs, else a measured
   GEMM; never one hard-coded GPU).

Then one FSDP2 step on one device (a world of 1: NCCL on CUDA, gloo on CPU) of a GPT-1 task sharded by
``genlab.parallel.parallelize`` with bf16 parameters and fp32 gradient reduction, against the unsharded model's
loss on the same batch. The last line says ``gpu_check: OK`` or lists what failed; the exit status is 1 on any
failure. ``--cpu`` runs the same code on the CPU with the mini presets and small batches (CI runs it).

    experiments/perf/gpu_check.sh            # one CUDA device, < 10 minutes on one H100
    experiments/perf/gpu_check.sh --cpu      # the dry run: seconds
"""

from __future__ import annotations

import argparse
import copy
import os
import socket
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from genlab.assemble import build_task
from genlab.callbacks.throughput import peak_flops
from genlab.parallel import find_blocks, parallelize

CONF = Path(__file__).resolve().parents[2] / "conf"
RTOL, ATOL = 0.01, 1e-3  # per-step loss agreement, bf16-mixed device vs fp32 CPU


@dataclass
class Family:
    preset: str  # the paper preset (real size, device mode)
    mini: str  # its _mini twin (--cpu)
    vocab: int  # the paper's vocabulary (what the data would give)
    batch: tuple[int, int]  # (sequences, tokens) per step on the device
    kind: str  # which synthetic batch and loss: lm, plm, mlm, gpt, awd


FAMILIES = {
    "txl": Family("txl_wt103_base", "txl_mini", 267_735, (8, 150), "lm"),
    "xlnet": Family("xlnet_base", "xlnet_base_mini", 32_000, (2, 512), "plm"),
    "bert": Family("bert_base", "bert_base_mini", 30_522, (4, 512), "mlm"),
    "gpt": Family("gpt_books", "gpt_books_mini", 40_478, (4, 512), "gpt"),
    "funnel": Family("funnel_b6_6_6_mlm", "funnel_b6_6_6_mlm_mini", 30_522, (4, 512), "mlm"),
    "awd_mos": Family("mos_ptb", "mos_ptb_mini", 10_000, (12, 70), "awd"),
}
CPU_VOCAB, CPU_BATCH = 200, (2, 32)


# ------------------------------------------------------------------------------------------------ building
def compose_preset(name: str) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=[f"experiment={name}"])


def build(fam: Family, cpu: bool, device: torch.device) -> torch.nn.Module:
    """The preset's task (AWD-LSTM: its model; its task steps the optimiser itself) from one seed, on the CPU."""
    cfg = compose_preset(fam.mini if cpu else fam.preset)
    vocab = CPU_VOCAB if cpu else fam.vocab
    with open_dict(cfg):
        cutoffs = list(cfg.model.get("cutoffs") or [])
        if fam.kind == "lm" and any(c >= vocab for c in cutoffs):  # a small vocabulary: cutoffs inside it
            kept = [c for c in cutoffs if c < vocab] or [vocab // 2]
            ties = list(cfg.model.tie_projs)[: len(kept) + 1]
            cfg.model.cutoffs, cfg.model.tie_projs = kept, ties + [False] * (len(kept) + 1 - len(ties))
        if "max_position" in cfg.model:
            cfg.model.max_position = max(512, CPU_BATCH[1])
    torch.manual_seed(0)
    if fam.kind == "awd":
        from hydra.utils import instantiate

        return instantiate(cfg.model, vocab_size=vocab)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_task(cfg, sizes={"vocab_size": vocab})


def set_attention(module: torch.nn.Module, impl: str) -> None:
    """Switch every attention layer (and the model, which builds the mask for it) to ``impl``."""
    for m in module.modules():
        if hasattr(m, "attn_impl"):
            m.attn_impl = impl


def make_batches(fam: Family, shape: tuple[int, int], vocab: int, n: int) -> list[dict]:
    """``n`` synthetic batches in the layout the family's data module produces (seeded: same on every run)."""
    g = torch.Generator().manual_seed(1)
    b, t = shape
    out = []
    for i in range(n):
        ids = torch.randint(5, vocab, (b, t + 1), generator=g)
        if fam.kind in ("lm", "awd"):
            out.append({"input_ids": ids[:, :-1], "target": ids[:, 1:], "segment": i})
            continue
        ids = ids[:, :-1]
        batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
                 "nsp_label": torch.randint(0, 2, (b,), generator=g), "segment": i}
        if fam.kind == "gpt":
            batch = {"input_ids": ids, "lm_mask": torch.ones_like(ids)}
        elif fam.kind == "mlm":  # 15% of positions predicted
            labels = torch.full_like(ids, -100)
            sel = torch.rand(b, t, generator=g) < 0.15
            sel[:, 1] = True
            labels[sel] = ids[sel]
            batch["labels"] = labels
        else:  # plm: the last P positions are the targets, hidden from every position (partial prediction, K=6)
            p = max(1, t // 6)
            perm = torch.zeros(b, t, t)
            perm[:, :, -p:] = 1.0
            batch.update(perm_mask=perm, target_mapping=torch.eye(t)[None, -p:].expand(b, -1, -1).contiguous(),
                         target=ids[:, -p:], target_mask=torch.ones(b, p))
        out.append(batch)
    return out


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


class Stepper:
    """Forward + loss + backward + Adam for a task (its ``training_step``) or the AWD-LSTM model (carried memory)."""

    def __init__(self, module: torch.nn.Module, kind: str, device: torch.device, bf16: bool) -> None:
        self.module, self.kind, self.device, self.bf16 = module, kind, device, bf16
        params = [p for p in module.parameters() if p.requires_grad]
        self.opt = torch.optim.Adam(params, lr=1e-4, fused=device.type == "cuda" or None)
        self.memory = None

    def loss(self, batch: dict, i: int) -> torch.Tensor:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            if self.kind != "awd":
                return self.module.training_step(batch, i)
            out = self.module(batch["input_ids"], batch["target"], self.memory)
            self.memory = [tuple(x.detach() for x in m) if isinstance(m, tuple) else m.detach() for m in out.memory]
            return out.nll.float().mean()

    def step(self, batch: dict, i: int) -> torch.Tensor:
        loss = self.loss(to_device(batch, self.device), i)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_flops(stepper: Stepper, batch: dict) -> float:
    """FLOPs of one forward + backward (no update) counted by PyTorch, on a throwaway copy."""
    from torch.utils.flop_counter import FlopCounterMode

    probe = Stepper(copy.deepcopy(stepper.module), stepper.kind, stepper.device, bf16=False)
    counter = FlopCounterMode(display=False)
    with counter, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe.loss(to_device(batch, probe.device), 0).backward()
    return float(counter.get_total_flops())


# ---------------------------------------------------------------------------------------------- the checks
def check_family(name: str, fam: Family, args: argparse.Namespace, device: torch.device) -> list[str]:
    """Runs the three phases for one family; prints its lines; returns the failures."""
    t0 = time.perf_counter()
    shape = CPU_BATCH if args.cpu else fam.batch
    vocab = CPU_VOCAB if args.cpu else fam.vocab
    task = build(fam, args.cpu, device)
    params = sum(p.numel() for p in task.parameters())
    batches = make_batches(fam, shape, vocab, args.check_steps)
    tokens = shape[0] * shape[1]

    reference = Stepper(copy.deepcopy(task).eval(), fam.kind, torch.device("cpu"), bf16=False)
    flops = matmul_flops(reference, batches[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = [float(reference.step(b, i)) for i, b in enumerate(batches)]
    del reference

    task = task.to(device).eval()
    model = getattr(task, "model", task)
    if device.type == "cuda" and getattr(model, "attn_type", None) == "rel" and not model.arch["dropatt"]:
        set_attention(task, "flex")  # the fused relative-attention kernel (needs dropatt=0, as the preset has)
    compiled = args.compile and fam.kind != "awd"  # the LSTM has no blocks to compile regionally
    if compiled:
        find_blocks(task)
        parallelize(task, None, compile_blocks=True)
    dev = Stepper(task, fam.kind, device, bf16=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [float(dev.step(b, i)) for i, b in enumerate(batches)]
    failures = []
    worst = max(abs(a - b) - RTOL * abs(b) for a, b in zip(got, ref))
    if not all(map(torch.isfinite, torch.tensor(got))) or worst > ATOL:
        failures.append(f"{name}: bf16 losses {got} vs fp32 CPU {ref} (tolerance {RTOL:.0%} + {ATOL})")
    rel = max(abs(a - b) / abs(b) for a, b in zip(got, ref))

    task.train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(args.warmup):
            dev.step(batches[i % len(batches)], i)
        sync(device)
        start = time.perf_counter()
        for i in range(args.steps):
            loss = dev.step(batches[i % len(batches)], i)
        sync(device)
    elapsed = time.perf_counter() - start
    if not torch.isfinite(loss):
        failures.append(f"{name}: loss {float(loss)} after {args.steps} training steps")
    rate = flops * args.steps / elapsed
    peak = peak_flops(device, "bf16-mixed")
    attn = getattr(model, "attn_impl", "sdpa") if fam.kind != "awd" else "-"
    print(f"{name:8s} {fam.mini if args.cpu else fam.preset}: {params / 1e6:.1f}M params, batch {shape[0]}x{shape[1]}, "
          f"attention {attn}, compile {'on' if compiled else 'off'} | loss after {len(got)} steps {got[-1]:.4f} vs "
          f"fp32 CPU {ref[-1]:.4f} (max rel diff {rel:.2e}) | {tokens * args.steps / elapsed:,.0f} tokens/s, "
          f"{flops / 1e9:.1f} GFLOP/step, MFU {rate / peak:.1%} of {peak / 1e12:.1f} TFLOP/s | "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    return failures


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_fsdp2(args: argparse.Namespace, device: torch.device) -> list[str]:
    """One FSDP2 training step on a world of one device against the unsharded model's loss on the same batch."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from genlab.parallel import is_sharded

    fam = FAMILIES["gpt"]
    shape, vocab = (CPU_BATCH, CPU_VOCAB) if args.cpu else (fam.batch, fam.vocab)
    batch = make_batches(fam, shape, vocab, 1)[0]
    plain = build(fam, args.cpu, device).to(device).eval()
    sharded = copy.deepcopy(plain)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = float(Stepper(plain, "gpt", device, bf16=True).loss(to_device(batch, device), 0))
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh(device.type, (1,), mesh_dim_names=("data_parallel",))
        parallelize(sharded, mesh, param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss = float(Stepper(sharded, "gpt", device, bf16=True).step(batch, 0))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    ok = is_sharded(sharded) and abs(loss - expected) <= RTOL * abs(expected) + ATOL
    print(f"fsdp2    1 x {device.type} ({backend}), {fam.mini if args.cpu else fam.preset} bf16 parameters, fp32 "
          f"reduction: loss {loss:.4f} vs unsharded {expected:.4f}", flush=True)
    return [] if ok else [f"fsdp2: loss {loss} vs unsharded {expected} (sharded: {is_sharded(sharded)})"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="dry run on the CPU: mini presets, small batches")
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    parser.add_argument("--check-steps", type=int, default=None, help="steps compared with fp32 CPU (3; --cpu 2)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps (compilation happens here)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (20; --cpu 2)")
    parser.add_argument("--no-compile", dest="compile", action="store_false", default=None,
                        help="eager blocks (default: compiled on CUDA, eager with --cpu)")
    parser.add_argument("--no-fsdp", dest="fsdp", action="store_false")
    args = parser.parse_args(argv)
    args.check_steps = args.check_steps or (2 if args.cpu else 3)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.cpu else 3)
    args.steps = args.steps or (2 if args.cpu else 20)
    if args.cpu:
        device = torch.device("cpu")
        args.compile = bool(args.compile)
        print(f"gpu_check --cpu: dry run on the CPU ({os.cpu_count()} cores, torch {torch.__version__})")
    else:
        if not torch.cuda.is_available():
            print("gpu_check: no CUDA device is visible to torch "
                  f"(torch {torch.__version__}, CUDA build {torch.version.cuda}); run with --cpu for the dry run",
                  file=sys.stderr)
            return 2
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        args.compile = args.compile is not False
        props = torch.cuda.get_device_properties(device)
        print(f"gpu_check: {props.name}, {props.total_memory / 2**30:.0f} GiB, capability {props.major}.{props.minor}, "
              f"torch {torch.__version__}, CUDA {torch.version.cuda}; bf16 peak {peak_flops(device, 'bf16-mixed') / 1e12:.0f} "
              "TFLOP/s")
        if not torch.cuda.is_bf16_supported():
            print("gpu_check: this GPU has no bfloat16 support; the presets' bf16-mixed cannot run", file=sys.stderr)
            return 2
    failures = []
    for name in args.families:
        try:
            failures += check_family(name, FAMILIES[name], args, device)
        except Exception:  # report and go on: one broken family must not hide the others' results
            traceback.print_exc()
            failures.append(f"{name}: raised (traceback above)")
    if args.fsdp:
        try:
            failures += check_fsdp2(args, device)
        except Exception:
            traceback.print_exc()
            failures.append("fsdp2: raised (traceback above)")
    print("gpu_check: OK" if not failures else "gpu_check: FAILED\n  " + "\n  ".join(failures), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
