"""The memory guard's estimate (genlab.cli.memory) against the peak RSS of real optimiser steps, per preset.

Each preset is measured in its own subprocess: its model (at ``model.n_layer=1`` by default) and task as train.py
builds them, with the vocabulary the config gives (minis: their data's), two optimiser steps through a Lightning
Trainer at the preset's precision and with train.py's host-memory setting, on synthetic batches of the preset's
shape (genlab.cli.memory_probe: Zipf-law word ids, as text has; the second step a later segment of the same streams,
attending over the memory the first left, as every step after a pass's first does); the peak RSS
(``resource.getrusage``) is compared with the estimate for the same config, made in another subprocess (a process's
heap never shrinks back). No data is read.

    flock /tmp/genlab-heavy.lock python experiments/perf/memory_estimate.py --presets txl_wt103_base xlnet_base_mini
    python experiments/perf/memory_estimate.py --presets xlnet_large --estimate-only     # check this machine
    python experiments/perf/memory_estimate.py --presets txl_lm1b_base:56 gpt_books:16   # batches shrunk
    python experiments/perf/memory_estimate.py --presets bad_gan_cifar10_fm planetoid_t_pubmed  # manual optimisation

``--estimate-only`` (with the real depth unless --n-layer is given) prints the estimate and the memory this machine
has free, and exits 2 when the run would not fit: the check to make before a long run. ``--table`` prints README's
per-preset table (every paper preset unless --presets).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from genlab import assemble
from genlab.cli import memory, memory_manual, memory_probe
from genlab.cli.host_memory import apply_host_memory_setting

CONF = Path(__file__).resolve().parents[2] / "conf"
# the paper presets (full_size.py's, and MoS on text8 and LM1B), in README's order
PAPER_PRESETS = ("txl_ptb", "txl_wt103_base", "txl_wt103_large", "txl_enwik8_base", "txl_enwik8_large",
                 "txl_text8_large", "txl_lm1b_base", "txl_lm1b_large", "xlnet_base", "xlnet_large", "bert_base",
                 "bert_large", "gpt_books", "funnel_b6_6_6_mlm", "funnel_large_b8_8_8_electra",
                 "funnel_large_b10_10_10_electra", "mos_ptb", "mos_wt2", "mos_text8_mos", "mos_lm1b_mos")


def compose_preset(name: str, overrides: list[str], out: Path) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"experiment={name}", f"paths.output_dir={out}",
                                                      f"paths.log_dir={out}", *overrides])
    with open_dict(cfg):
        cfg.pop("hydra", None)
    return cfg


def model_sizes(cfg: DictConfig) -> dict:
    """What train.py builds the model with: the config's sizes, or the (mini) data's when only it knows them."""
    sizes = memory.sizes_before_data(cfg)
    return sizes if sizes is not None else assemble.data_sizes(assemble.build_data(cfg.data))


def build_task(cfg: DictConfig):
    torch.manual_seed(0)
    return assemble.build_task(cfg, sizes=model_sizes(cfg))


def measure(cfg: DictConfig, steps: int) -> int:
    """Peak RSS (bytes) of ``steps`` optimiser steps on synthetic batches (run in a fresh subprocess)."""
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader

    apply_host_memory_setting(cfg)  # as train.py runs: freed host memory stays in the process
    task = build_task(cfg)
    batch = memory_probe.synthetic_batch(cfg, task, int(cfg.data.batch_size))
    if batch is None:
        raise SystemExit(f"no synthetic batch for {type(task).__name__}")
    if memory_manual.covers(task):  # GANs, Planetoid, GDAN: the iterations the probe takes, without data
        steps *= memory_manual.heaviest(task)
    later = {**batch, "segment": 1} if "segment" in batch else batch  # later segments carry the memory
    loader = DataLoader([batch] + [later] * (steps - 1), batch_size=None)
    trainer = pl.Trainer(accelerator="cpu", devices=1, precision=cfg.trainer.precision, max_steps=steps,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, gradient_clip_val=cfg.trainer.get("gradient_clip_val"))
    trainer.fit(task, train_dataloaders=loader)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


TABLE_HEAD = ("| preset | parameters | micro-batch | precision | estimated peak, CPU | on a GPU |\n"
              "|---|---:|---|---|---:|---:|")


def table_row(cfg: DictConfig, name: str, overrides: list[str], tmp: Path) -> str:
    """README row: parameters and estimate at the preset's full depth and batch, without building the full model:
    parameters counted on the meta device, activations extrapolated from 1 and 2 layers (layers are identical;
    Funnel: layers per block, when the blocks are equal; AWD-LSTM whole). GPU: the live bytes (a caching allocator
    reuses its blocks), no baseline; CPU: the host heap (genlab.cli.memory_heap) and the process's baseline."""
    with torch.device("meta"):
        params = sum(p.numel() for p in assemble.build_task(cfg, sizes=model_sizes(cfg)).parameters())
    depth, key = cfg.model.get("n_layer"), "model.n_layer={}"
    blocks = cfg.model.get("block_sizes")
    if blocks is not None and len(set(blocks)) == 1:  # Funnel with equal blocks: extrapolate layers per block
        depth, key = blocks[0], "model.block_sizes=[" + ",".join(["{}"] * len(blocks)) + "]"
    configs = [cfg] if depth is None else [compose_preset(name, [*overrides, key.format(*[n] * key.count("{}"))], tmp)
                                          for n in (1, 2)]
    tasks = [build_task(c) for c in configs]
    probes = [memory_probe.live_and_heap_bytes(c, t, memory.heap_mmap_threshold(c)) or (0, 0)
              for c, t in zip(configs, tasks)]  # (live, heap) at 1 (and 2) layers
    gpu_acts, cpu_acts = (probes[0][k] + (0 if depth is None else (depth - 1) * (probes[1][k] - probes[0][k]))
                          for k in (0, 1))
    if depth is not None:  # the heap's high-water mark is not linear in depth: its overhead over the live bytes is
        cpu_acts = gpu_acts * max(1.0, probes[1][1] / max(probes[1][0], 1))  # taken from the deeper probe
    data_bytes = memory_probe.batch_bytes(cfg, tasks[0])
    static = (memory.WEIGHT_BYTES + memory.GRADIENT_BYTES + memory.optimizer_bytes_per_param(cfg)) * params + data_bytes
    cpu, gpu = static + cpu_acts + memory.BASELINE_BYTES, static + gpu_acts
    length = cfg.data.get("tgt_len") or cfg.data.get("bptt") or cfg.data.get("seq_len")
    return (f"| `{name}` | {params / 1e6:.0f}M | {cfg.data.batch_size} x {length} | {cfg.trainer.precision} "
            f"| {cpu / memory.GB:.1f} GB | {gpu / memory.GB:.1f} GB |")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", default=list(PAPER_PRESETS),
                   help="NAME, or NAME:BATCH to shrink one preset's batch (default: every paper preset)")
    p.add_argument("--n-layer", type=int, default=None,
                   help="model.n_layer (default 1; minis and --estimate-only: the preset's)")
    p.add_argument("--batch", type=int, default=None, help="data.batch_size (default: the preset's)")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--estimate-only", action="store_true", help="no measurement: estimate vs this machine's memory")
    p.add_argument("--override", nargs="*", default=[], help="more Hydra overrides, e.g. trainer.precision=32-true")
    p.add_argument("--max-gb", type=float, default=None,
                   help="measure only presets estimated below this (a shared machine: no run the kernel must kill)")
    p.add_argument("--table", action="store_true", help="README's Markdown table at full depth and batch")
    p.add_argument("--measured", type=Path, default=None,
                   help="JSON of peaks measured before (preset and overrides -> bytes): reused, new ones added; the "
                        "peak RSS does not depend on the estimate, so a change to it is rechecked without re-running")
    p.add_argument("--worker", choices=["measure", "estimate", "table"], help=argparse.SUPPRESS)
    return p.parse_args(argv)


def overrides_of(args: argparse.Namespace, name: str, tmp: Path) -> list[str]:
    """--override, then the depth (n_layer; Funnel: layers per block; AWD-LSTM keeps its 3 layers) and batch."""
    out = list(args.override)
    full_depth = args.estimate_only or name.endswith("_mini")  # a mini is measured whole: it is small
    n_layer = args.n_layer if args.n_layer is not None or full_depth else 1
    model = compose_preset(name, out, tmp).model
    if n_layer is not None and "n_layer" in model:
        out.append(f"model.n_layer={n_layer}")
    elif n_layer is not None and "block_sizes" in model:
        out.append(f"model.block_sizes=[{','.join([str(n_layer)] * len(model.block_sizes))}]")
    if args.batch is not None:
        out.append(f"data.batch_size={args.batch}")
    return out


def estimate_of(cfg: DictConfig) -> dict:
    """The guard's estimate for ``cfg`` and the model's parameter count (run in a fresh subprocess when measuring)."""
    task = build_task(cfg)
    est = memory.estimate(cfg, task)
    return {"total": est.total_bytes, "describe": est.describe(), "params": sum(p.numel() for p in task.parameters()),
            "dataset": est.dataset_bytes}


def worker(kind: str, name: str, overrides: list[str], steps: int) -> dict:
    """``kind`` (measure or estimate) of one preset in its own process, so neither sees the other's heap."""
    cmd = [sys.executable, __file__, "--worker", kind, "--presets", name, "--steps", str(steps), "--override",
           *overrides]
    run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "disabled"})
    if run.returncode:
        raise RuntimeError((run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1])
    return json.loads(run.stdout.strip().splitlines()[-1])


def measured_peak(args: argparse.Namespace, name: str, overrides: list[str]) -> int:
    """The peak RSS of ``name`` with ``overrides``: from ``--measured`` if it holds it, else measured (and saved)."""
    key = " ".join([name, f"steps={args.steps}", *overrides])
    known = json.loads(args.measured.read_text()) if args.measured and args.measured.exists() else {}
    if key not in known:
        known[key] = worker("measure", name, overrides, args.steps)["peak"]
        if args.measured:
            tmp = args.measured.with_suffix(".tmp")
            tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
            tmp.replace(args.measured)
    return known[key]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.worker:
            cfg = compose_preset(args.presets[0], args.override, Path(tmp))
            if args.worker == "table":
                result = {"row": table_row(cfg, args.presets[0], list(args.override), Path(tmp))}
            else:
                result = {"peak": measure(cfg, args.steps)} if args.worker == "measure" else estimate_of(cfg)
            print(json.dumps(result))
            return 0
        if args.table:
            print(TABLE_HEAD, flush=True)
        status = 0
        for item in args.presets:
            name, _, batch = item.partition(":")
            if args.table:  # each preset in its own process: a process's heap only grows
                print(worker("table", name, [*args.override] + ([f"data.batch_size={batch}"] if batch else []),
                             args.steps)["row"], flush=True)
                continue
            overrides = overrides_of(args, name, Path(tmp)) + ([f"data.batch_size={batch}"] if batch else [])
            cfg = compose_preset(name, overrides, Path(tmp))
            if args.estimate_only:
                accelerator = str(cfg.trainer.get("accelerator", "auto"))
                room = memory.available_bytes(accelerator)
                est = worker("estimate", name, overrides, args.steps)
            else:
                try:  # estimated, then measured, each in a fresh process
                    est = worker("estimate", name, overrides, args.steps)
                    est["total"] -= est["dataset"]  # the measured steps read no data (full_size.py: a real DataModule)
                    if args.max_gb is not None and est["total"] > args.max_gb * memory.GB:
                        print(f"{name}: estimate {est['total'] / memory.GB:.2f} GB > --max-gb {args.max_gb}: not "
                              "measured", flush=True)
                        continue
                    peak = measured_peak(args, name, overrides)
                except RuntimeError as err:
                    print(f"{name}: measured: FAILED ({err})", flush=True)
                    status = 1
                    continue
            depth = cfg.model.get("n_layer", cfg.model.get("block_sizes"))
            head = (f"{name}: n_layer={depth} batch={cfg.data.get('batch_size')} precision={cfg.trainer.precision} "
                    f"params={est['params'] / 1e6:.1f}M estimate={est['total'] / memory.GB:.2f} GB")
            if args.estimate_only:
                fits = room is None or est["total"] <= room
                status = status if fits else 2
                print(f"{head} ({est['describe']}); free {room / memory.GB if room else float('nan'):.1f} GB: "
                      f"{'fits' if fits else 'DOES NOT FIT'}", flush=True)
                continue
            print(f"{head} measured={peak / memory.GB:.2f} GB estimate/measured: {est['total'] / peak:.2f}", flush=True)
        return status


if __name__ == "__main__":
    sys.exit(main())
