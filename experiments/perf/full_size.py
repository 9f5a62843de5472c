"""Every paper preset's model at its real size: optimiser steps on the CPU, a real-size checkpoint, a bit-exact resume.

Per preset, in its own process (so each peak RSS is that preset's alone), the model and task are composed from
``conf/experiment/<preset>.yaml`` as train.py builds them, at the paper's vocabulary (what the data would give), and
only the batch is shrunk to fit: ``--batch`` sequences (1) of the preset's length (capped by ``--max-len``). Then:

- parameters (unique tensors, tied ones once) beside the paper's count;
- ``--steps`` optimiser steps on synthetic batches of the preset's layout, with the task's own optimiser
  (``configure_optimizers``: Adam, AdamW, the XLNet/BERT AdamWeightDecay, GPT's OpenAIAdam, MoS's SGD) at the preset's
  precision (bf16 autocast for ``bf16-mixed``): the median step time and the peak RSS after them, against
  ``genlab.cli.memory.estimate`` for the same config (shrunk batch), taken after the peak is read so the estimator's
  probe cannot raise it;
- a checkpoint of weights, optimiser state, RNG and the carried memory, written atomically with ``torch.save``
  (size, write time), one more step (the continuation), then the checkpoint loaded back (``weights_only``, memory
  mapped, copied in place so the resume needs no second copy of the state) and the same step again: every weight
  and optimiser tensor must equal the continuation's (``torch.equal`` on kept copies; where copies would not fit,
  ``--keep-gb``, SHA-256 of the raw bytes, which is stricter);
- the image, graph and QA systems (bad GAN, PixelCNN++, CEGAN, Planetoid, GDAN: manual optimisation, models sized
  by their data) step through ``train.py`` itself on data of the real format and size (``full_size_data``), at their real
  batch: a run of ``--steps`` + 1 steps with a checkpoint after ``--steps``, and a second run resumed from that
  checkpoint with ``ckpt_path=``, which must end in the same checkpoint bit for bit (weights, optimiser and
  scheduler states, step); a callback injected into the first run times its steps and checkpoint writes, and the
  estimate is the one train.py's memory guard logs;
- the low-density presets load the PixelCNN++ their density preset's run above wrote (kept in ``--folder``; run
  first when absent) and take the penalty at every step;
- ``--fsdp2 PRESET ...``: the preset also through Lightning's 2-process FSDP2 (``genlab.parallel.FSDP2Strategy``,
  gloo) with the task's own optimiser for ``--steps`` steps: step time, per-process peak RSS and parameter share.

Run it alone, under the machine-wide lock: the largest presets need over 12 GB.

    flock /tmp/genlab-heavy.lock taskset -c 0 python experiments/perf/full_size.py
    python experiments/perf/full_size.py --presets txl_enwik8_base bert_base --fsdp2 txl_enwik8_base bert_base
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import open_dict

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from full_size_data import dataset_dir  # noqa: E402
from gpu_check import FAMILIES, Stepper, compose_preset, make_batches  # noqa: E402

from genlab.assemble import build_task  # noqa: E402

# preset -> (family in gpu_check, vocabulary the data gives, the paper's parameter count as printed there)
PRESETS = {
    "txl_ptb": ("txl", 10_000, "24M (TXL Table 5)"),
    "txl_enwik8_base": ("txl", 204, "41M (TXL Table 2)"),
    "txl_wt103_base": ("txl", 267_735, "151M (TXL Table 1)"),
    "txl_wt103_large": ("txl", 267_735, "257M (TXL Table 1; 18 layers as released)"),
    "txl_enwik8_large": ("txl", 204, "277M (TXL Table 2)"),
    "txl_text8_large": ("txl", 204, "277M (TXL Table 3)"),
    "txl_lm1b_base": ("txl", 793_471, "0.46B (TXL Table 4)"),
    "txl_lm1b_large": ("txl", 793_471, "0.8B (TXL Table 4)"),
    "xlnet_base": ("xlnet", 32_000, "= BERT-Base (XLNet §3.1)"),
    "xlnet_large": ("xlnet", 32_000, "= BERT-Large (XLNet §3.1)"),
    "bert_base": ("bert", 30_522, "110M (BERT §3)"),
    "bert_large": ("bert", 30_522, "340M (BERT §3)"),
    "gpt_books": ("gpt", 40_478, "not stated (GPT-1 §4.1: 12 x 768)"),
    "funnel_b6_6_6_mlm": ("funnel", 30_522, "1.39x L12 (Funnel Table 5.1)"),
    "funnel_large_b8_8_8_electra": ("funnel", 30_522, "large scale (Funnel §5.3)"),
    "funnel_large_b10_10_10_electra": ("funnel", 30_522, "large scale (Funnel §5.3)"),
    "mos_ptb": ("awd_mos", 10_000, "22M (Dai thesis Table A.1)"),
    "mos_wt2": ("awd_mos", 33_278, "35M (Dai thesis Table A.2)"),
    "mos_text8_mos": ("awd_mos", 27, "8.45M (Dai thesis Table A.12)"),
    "mos_lm1b_mos": ("awd_mos", 100_000, "113M (Dai thesis Table A.3)"),
}
# Presets whose tasks step through train.py itself (manual optimisation, models sized by their data), each on data of
# the real format and size (``full_size_data``; None: generated in code) -> (dataset, the paper's count).
TRAINED = {
    "bad_gan_mnist_fm": ("mnist", "not stated (Yang thesis Table 3.2, MNIST FM)"),
    "bad_gan_mnist_fm_vi": ("mnist", "not stated (Yang thesis Table 3.2, MNIST FM+VI)"),
    "bad_gan_svhn": ("svhn", "not stated (Yang thesis Table 3.1, SVHN)"),
    "bad_gan_svhn_fm_vi": ("svhn", "not stated (Yang thesis Table 3.2, SVHN FM+VI)"),
    "bad_gan_cifar10_fm": ("cifar10", "not stated (Yang thesis Table 3.2, CIFAR-10 FM)"),
    "bad_gan_cifar10": ("cifar10", "not stated (Yang thesis Table 3.1, CIFAR-10)"),
    "bad_gan_toy2d_circles": (None, "not stated (Yang thesis Fig. 3.4)"),
    "bad_gan_toy2d_spins": (None, "not stated (Yang thesis Fig. 3.3)"),
    "pixelcnn_mnist": ("mnist", "not stated (PixelCNN++ for Yang thesis Table 3.2's LD)"),
    "pixelcnn_svhn": ("svhn", "not stated (PixelCNN++ for Yang thesis Table 3.2's LD)"),
    # after their PixelCNN++ (DENSITY)
    "bad_gan_mnist": ("mnist", "not stated (Yang thesis Table 3.2, MNIST FM+LD)"),
    "bad_gan_mnist_fm_ld_ent": ("mnist", "not stated (Yang thesis Table 3.2, MNIST FM+LD+Ent)"),
    "bad_gan_svhn_fm_pt_ld_ent": ("svhn", "not stated (Yang thesis Table 3.2, SVHN FM+PT+LD+Ent)"),
    "cegan_gmm4": (None, "not stated (Dai thesis Table B.2)"),
    "cegan_gmm4_vi": (None, "not stated (Dai thesis Table B.2, VI)"),
    "cegan_nist": ("mnist", "not stated (Dai thesis App. B.5.2)"),
    **{f"planetoid_{mode}_{graph}": (f"planetoid-{graph}", f"not stated (Yang thesis Table 3.6, Planetoid-{mode.upper()})")
       for mode in "ti" for graph in ("citeseer", "cora", "pubmed")},
    **{f"gdan_squad_{method}": ("squad-gdan", f"not stated (Yang thesis Table 3.4, {row}; vocabularies at the caps)")
       for method, row in (("sl", "SL"), ("context", "Context"), ("context_domain", "Context + domain"),
                           ("gen", "Gen"), ("gen_gan", "Gen + GAN"), ("gen_dual", "Gen + dual"),
                           ("gen_domain", "Gen + domain"), ("gen_domain_adv", "Gen + domain + adv"),
                           ("r0.1", "Gen + domain + adv at labelling rate 0.1"))},
}
# The low-density presets' PixelCNN++ (``task.density_ckpt``): the density preset's own full-size run writes it. Their
# runs take the penalty at every step (it starts at iteration 9,000 in the presets), the heaviest iteration. The
# threshold is scored on the first 40 test images (one density batch), not all 10,000 / 26,032: what is measured
# here is the step, its memory and the resume, and the threshold's value does not change their cost.
DENSITY = {"bad_gan_mnist": "pixelcnn_mnist", "bad_gan_mnist_fm_ld_ent": "pixelcnn_mnist",
           "bad_gan_svhn_fm_pt_ld_ent": "pixelcnn_svhn"}
LD_EVERY_STEP = ["task.ld_start_iter=0", "task.ld_prob=1.0", "task.ld_threshold_images=40"]
# Every train.py run: checkpoints every 2 steps (the first one kept), no sanity/test passes, CSV logs. Planetoid's
# first batch is its whole warm-up (one step per sub-batch): shrunk to 2 + 1 sub-batches, checkpoint at step 4.
RUN = ["trainer.max_epochs=null", "trainer.num_sanity_val_steps=0", "trainer.limit_val_batches=2",
       "trainer.enable_progress_bar=false", "test_after_fit=false", "logger=csv", "callbacks.checkpoint.monitor=null"]
STEPS = {"planetoid": ["data.warmup_label_iters=2", "data.warmup_graph_iters=1", "trainer.max_steps=5",
                       "callbacks.checkpoint.every_n_train_steps=4"]}
# GDAN: one MLE update of G (4,000 in the presets), so the run also steps the D and G updates that alternate after it.
PHASES = {"gdan": ["task.mle_steps=1"]}
GB = 1024**3


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def setup(preset: str, args: argparse.Namespace):
    """(composed config with the shrunk batch, its task, the family with the shrunk shape, synthetic batches)."""
    family, vocab, _ = PRESETS[preset]
    fam = FAMILIES[family]
    cfg = compose_preset(preset)
    length = min(args.max_len, next(int(cfg.data[k]) for k in ("tgt_len", "seq_len", "bptt") if cfg.data.get(k)))
    batch = args.batch + args.batch % 2 if cfg.data.get("bi_data") else args.batch  # XLNet bi_data: pairs
    with open_dict(cfg):
        cfg.data.batch_size = batch
        for key in ("tgt_len", "seq_len", "bptt"):
            if cfg.data.get(key):
                cfg.data[key] = length
    real = type(fam)(preset, preset, vocab, (batch, length), fam.kind)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        task = build_task(cfg, sizes={"vocab_size": vocab})
    batches = make_batches(real, (batch, length), vocab, args.steps + 1)
    return cfg, real, task, batches


def task_optimizer(task) -> torch.optim.Optimizer:
    """The optimiser train.py would step (the task's ``configure_optimizers``, its scheduler left out)."""
    out = task.configure_optimizers()
    out = out["optimizer"] if isinstance(out, dict) else out
    return out[0] if isinstance(out, (list, tuple)) else out


def state_tensors(task: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    out = {f"model.{k}": v for k, v in task.state_dict().items()}
    params = [p for group in opt.param_groups for p in group["params"]]
    for i, p in enumerate(params):
        for k, v in opt.state[p].items():
            if isinstance(v, torch.Tensor):
                out[f"optim.{i}.{k}"] = v
    return out


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(raw_bytes(t).numpy().data).hexdigest()


def carried(task, stepper) -> dict:
    """The memory a step hands to the next (Transformer-XL/XLNet tasks, the AWD-LSTM's hidden state)."""
    return {"task": getattr(task, "_train_memory", None), "stepper": stepper.memory}


def quiet_step(stepper: Stepper, batch: dict, i: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stepper.step(batch, i)


def one_preset(preset: str, args: argparse.Namespace) -> dict:
    cfg, fam, task, batches = setup(preset, args)
    from genlab.cli.memory import estimate

    params = sum({id(p): p.numel() for p in task.parameters()}.values())
    bf16 = str(cfg.trainer.precision).startswith("bf16")
    # AWD-LSTM: its task steps the model with carried hidden state (Stepper's "awd" kind)
    stepper = Stepper(task.model if fam.kind == "awd" else task, fam.kind, torch.device("cpu"), bf16=bf16)
    stepper.opt = task_optimizer(task)
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        quiet_step(stepper, batches[i], i)
        times.append(time.perf_counter() - t0)
    rss = peak_rss_gb()

    folder = Path(args.folder)
    path, tmp = folder / f"{preset}.ckpt", folder / f"{preset}.ckpt.tmp"
    t0 = time.perf_counter()
    torch.save({"state": state_tensors(task, stepper.opt), "rng": torch.get_rng_state(),
                "carried": carried(task, stepper)}, tmp)
    os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one
    write_s, size = time.perf_counter() - t0, path.stat().st_size

    last = batches[args.steps]
    quiet_step(stepper, last, args.steps)  # the continuation
    live = state_tensors(task, stepper.opt)
    state_gb = sum(t.numel() * t.element_size() for t in live.values()) / GB
    exact = state_gb <= args.keep_gb
    continued = {k: (v.clone() if exact else digest(v)) for k, v in live.items()}
    stepper.opt.zero_grad(set_to_none=True)  # the resumed step makes its own; the load must not sit beside them

    saved = torch.load(path, weights_only=True, mmap=True)
    with torch.no_grad():  # in place: the resumed state lands in the same tensors, no second copy in memory
        for key, value in state_tensors(task, stepper.opt).items():
            value.copy_(saved["state"][key])
    torch.set_rng_state(saved["rng"])
    if saved["carried"]["task"] is not None:
        task._train_memory = saved["carried"]["task"]
    stepper.memory = saved["carried"]["stepper"]
    del saved
    quiet_step(stepper, last, args.steps)  # the resumed step
    resumed = state_tensors(task, stepper.opt)
    same = [k for k, v in resumed.items() if (torch.equal(v, continued[k]) if exact else digest(v) == continued[k])]
    path.unlink()
    n_tensors = len(resumed)
    del continued, live, resumed
    stepper.opt.zero_grad(set_to_none=True)
    est = estimate(cfg, task).total_bytes / GB  # last: the estimator's probe runs the model too
    return {"preset": preset, "params": params, "paper": PRESETS[preset][2], "batch": list(fam.batch),
            "precision": str(cfg.trainer.precision), "optimizer": type(stepper.opt).__name__,
            "step_s": statistics.median(times), "peak_rss_gb": rss, "estimate_gb": est, "ckpt_gb": size / GB,
            "write_s": write_s, "resume_exact": len(same) == n_tensors, "tensors": n_tensors,
            "compared_by": "torch.equal" if exact else "sha256"}


def count_only(preset: str) -> int:
    """Unique parameters of the preset's task built on the meta device (no memory, no steps)."""
    cfg = compose_preset(preset)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        task = build_task(cfg, sizes={"vocab_size": PRESETS[preset][1]})
    return sum({id(p): p.numel() for p in task.parameters()}.values())


# ------------------------------------------------------------------------------------------------ through train.py
class StepClock(pl.Callback):
    """Injected into a train.py run (``+callbacks.clock``): times each training batch and each checkpoint write
    (train.py's own atomic checkpoint IO), keeps the first checkpoint as ``first.ckpt`` (a hard link: later saves
    replace ``last.ckpt`` by rename) and prints one ``CLOCK`` line with the process's peak RSS at teardown."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.writes: list[tuple[float, int]] = []

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        io = trainer.strategy.checkpoint_io
        save = io.save_checkpoint

        def timed_save(checkpoint: dict, path, storage_options=None) -> None:
            t0 = time.perf_counter()
            save(checkpoint, path, storage_options)
            self.writes.append((time.perf_counter() - t0, os.path.getsize(path)))
            first = Path(path).with_name("first.ckpt")
            if len(self.writes) == 1 and not first.exists():
                os.link(path, first)

        io.save_checkpoint = timed_save
        model = getattr(pl_module, "model", pl_module)
        self.params = sum({id(p): p.numel() for p in model.parameters()}.values())
        self.optimizers = ""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        names = [type(o).__name__ for o in trainer.optimizers]
        self.optimizers = " + ".join(dict.fromkeys(f"{n} x{names.count(n)}" if names.count(n) > 1 else n
                                                   for n in names))

    def on_train_batch_start(self, *args) -> None:
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, *args) -> None:
        self.times.append(time.perf_counter() - self.t0)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        print("CLOCK " + json.dumps({"times": self.times, "writes": self.writes, "params": self.params,
                                     "peak_rss_gb": peak_rss_gb(), "global_step": trainer.global_step,
                                     "optimizers": self.optimizers}), flush=True)


def flat(x, at: str = "") -> dict[str, object]:
    """Every leaf of nested dicts/lists (tensors and plain values) by its path."""
    if isinstance(x, dict):
        return {k: v for key, value in x.items() for k, v in flat(value, f"{at}.{key}").items()}
    if isinstance(x, (list, tuple)):
        return {k: v for i, value in enumerate(x) for k, v in flat(value, f"{at}[{i}]").items()}
    return {at: x}


def same_bits(a: object, b: object) -> bool:
    """Bit for bit (so a NaN buffer equals itself); plain values by ``==``."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(raw_bytes(a), raw_bytes(b)))
    return a == b or (a != a and b != b)


def raw_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).contiguous().view(torch.uint8)


def train_py(run: Path, preset: str, args: argparse.Namespace, *extra: str) -> tuple[dict, str]:
    """One train.py run of ``preset`` on its full-size data with the StepClock; (its CLOCK record, its log)."""
    dataset, _ = TRAINED[preset]
    data = []
    if dataset is not None:
        root = dataset_dir(dataset, Path(args.folder) / "full_size_data")
        data = ["data.source=path", f"data.path={root}", *(["data.name=synth"] if dataset.startswith("planetoid") else [])]
    family = preset.split("_")[0]
    steps = STEPS.get(family, [f"trainer.max_steps={args.steps + 1}",
                               f"callbacks.checkpoint.every_n_train_steps={args.steps}", *PHASES.get(family, [])])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, str(ROOT / "train.py"), f"experiment={preset}", f"hydra.run.dir={run}", *RUN, *data,
           *steps, "+callbacks.clock._target_=full_size.StepClock", *args.override, *extra]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    clock = [ln for ln in proc.stdout.splitlines() if ln.startswith("CLOCK ")]
    if proc.returncode or not clock:
        raise RuntimeError(f"train.py experiment={preset} exit {proc.returncode}: {log[-1500:]}")
    return json.loads(clock[-1].removeprefix("CLOCK ")), log


def trained_preset(preset: str, args: argparse.Namespace) -> dict:
    """Run, then resume its first checkpoint in a second run: both must end in the same checkpoint (torch.equal on
    weights, optimiser and scheduler states, loop counters)."""
    from genlab.checkpoints import load

    folder = Path(tempfile.mkdtemp(prefix=f"full_size_{preset}_", dir=args.folder))
    extra = [f"task.density_ckpt={density_checkpoint(DENSITY[preset], args)}", *LD_EVERY_STEP] if preset in DENSITY else []
    try:
        a, log = train_py(folder / "straight", preset, args, *extra)
        b, _ = train_py(folder / "resumed", preset, args, *extra,
                        f"ckpt_path={folder / 'straight/checkpoints/first.ckpt'}")
        end_a, end_b = (load(folder / run / "checkpoints/last.ckpt", key="ckpt_path") for run in ("straight", "resumed"))
        keys = ("state_dict", "optimizer_states", "lr_schedulers", "global_step")
        leaves_a, leaves_b = (flat({k: end.get(k) for k in keys}) for end in (end_a, end_b))
        exact = leaves_a.keys() == leaves_b.keys() and all(same_bits(v, leaves_b[k]) for k, v in leaves_a.items())
        n_tensors = sum(isinstance(v, torch.Tensor) for v in leaves_a.values())
        del end_a, end_b, leaves_a, leaves_b
        if preset in DENSITY.values():  # the real-size PixelCNN++ the low-density presets load
            os.replace(folder / "straight/checkpoints/last.ckpt", density_path(preset, args))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    est = [m for m in re.finditer(r"parameters; estimated memory ([0-9.]+) GB \(([^)]*)\)", log)]
    write_s, size = a["writes"][0]
    cfg = compose_preset(preset)
    batch = next((int(o.split("=", 1)[1]) for o in args.override if o.startswith("data.batch_size=")),
                 cfg.data.batch_size)
    return {"preset": preset, "params": a["params"], "paper": TRAINED[preset][1], "batch": [batch],
            "precision": str(cfg.trainer.precision), "optimizer": a["optimizers"], "step_s": statistics.median(a["times"]),
            "peak_rss_gb": a["peak_rss_gb"], "estimate_gb": float(est[-1].group(1)) if est else float("nan"),
            "estimate_note": "" if not est or "activations not estimated" not in est[-1].group(2) else "no activations",
            "ckpt_gb": size / GB, "write_s": write_s, "resume_exact": exact, "tensors": n_tensors,
            "compared_by": f"bit for bit, train.py resumed to step {b['global_step']}"}


def density_path(preset: str, args: argparse.Namespace) -> Path:
    return Path(args.folder) / f"{preset}.density.ckpt"


def density_checkpoint(preset: str, args: argparse.Namespace) -> Path:
    """The checkpoint of the density preset's full-size run (made by running it when this folder has none)."""
    path = density_path(preset, args)
    if not path.is_file():
        trained_preset(preset, args)
    return path


# ------------------------------------------------------------------------------------------------ FSDP2
def fsdp2_worker(preset: str, args: argparse.Namespace) -> dict:
    """One rank of the 2-process run (started by tests/launch_ranks.run_ranks' environment protocol)."""
    import pytorch_lightning as pl

    from genlab.parallel import FSDP2Strategy

    _, fam, task, batches = setup(preset, args)
    times: list[float] = []

    class Clock(pl.Callback):
        def on_train_batch_start(self, *a) -> None:
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, *a) -> None:
            times.append(time.perf_counter() - self.t0)

    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=FSDP2Strategy(), max_steps=args.steps, logger=False,
                         enable_checkpointing=False, callbacks=[Clock()], enable_progress_bar=False,
                         enable_model_summary=False, use_distributed_sampler=False, num_sanity_val_steps=0,
                         limit_val_batches=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(task, train_dataloaders=torch.utils.data.DataLoader(batches[:args.steps], batch_size=None))
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in task.parameters())
    return {"preset": preset, "rank": trainer.global_rank, "step_s": statistics.median(times[1:] or times),
            "peak_rss_gb": peak_rss_gb(), "local_params": local, "loss": float(trainer.callback_metrics.get(
                "train/loss", float("nan")))}


def launch_fsdp2(preset: str, args: argparse.Namespace) -> list[dict]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    from launch_ranks import run_ranks

    logs = run_ranks(__file__, [*passthrough(args), "--fsdp2-worker", preset], world=2, timeout=3600)
    return [json.loads(line.removeprefix("RESULT ")) for log in logs for line in log.splitlines()
            if line.startswith("RESULT ")]


# ------------------------------------------------------------------------------------------------ driver
def passthrough(args: argparse.Namespace) -> list[str]:
    return [f"--batch={args.batch}", f"--max-len={args.max_len}", f"--steps={args.steps}",
            f"--keep-gb={args.keep_gb}", f"--folder={args.folder}", *(f"--override={o}" for o in args.override)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="*", choices=[*PRESETS, *TRAINED], default=[*PRESETS, *TRAINED])
    parser.add_argument("--fsdp2", nargs="*", choices=list(PRESETS), default=["txl_enwik8_base", "bert_base"])
    parser.add_argument("--batch", type=int, default=1, help="sequences per step (shrunk to fit one CPU box)")
    parser.add_argument("--max-len", type=int, default=512, help="cap on the preset's sequence length")
    parser.add_argument("--steps", type=int, default=2, help="optimiser steps before the checkpoint")
    parser.add_argument("--keep-gb", type=float, default=2.0, help="compare with torch.equal on copies up to this")
    parser.add_argument("--folder", default=tempfile.gettempdir(), help="where the checkpoints are written")
    parser.add_argument("--override", action="append", default=[],
                        help="a Hydra override for the train.py runs (image and graph presets), e.g. data.batch_size=8")
    parser.add_argument("--count-only", action="store_true", help="parameters only (meta device): no memory, seconds")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--fsdp2-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.one or args.fsdp2_worker:
        if args.fsdp2_worker:
            result = fsdp2_worker(args.fsdp2_worker, args)
        else:
            result = trained_preset(args.one, args) if args.one in TRAINED else one_preset(args.one, args)
        print("RESULT " + json.dumps(result), flush=True)
        if args.fsdp2_worker:
            sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
            from launch_ranks import exit_rank

            exit_rank()
        return 0
    if args.count_only:
        print("| preset | parameters | paper |\n|---|---:|---|")
        for preset in args.presets:  # TRAINED presets: counted by their runs (Planetoid's size is its graph's)
            if preset in PRESETS:
                print(f"| {preset} | {count_only(preset):,} | {PRESETS[preset][2]} |", flush=True)
        return 0
    print("| preset | parameters | paper | batch | precision, optimiser | step s | peak RSS GB | estimate GB "
          "| estimate/RSS | checkpoint GB | write s | resume |\n|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|",
          flush=True)
    failed = []
    for preset in args.presets:
        proc = subprocess.run([sys.executable, __file__, *passthrough(args), "--one", preset], capture_output=True,
                              text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode or not lines:
            failed.append(preset)
            print(f"| {preset} | failed (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-600:]!r} |", flush=True)
            continue
        r = json.loads(lines[0].removeprefix("RESULT "))
        resume = f"{'bit-exact' if r['resume_exact'] else 'DIFFERS'} ({r['tensors']} tensors, {r['compared_by']})"
        failed += [] if r["resume_exact"] else [preset]
        note = f" ({r['estimate_note']})" if r.get("estimate_note") else ""
        print(f"| {preset} | {r['params']:,} | {r['paper']} | {'x'.join(map(str, r['batch']))} | {r['precision']}, "
              f"{r['optimizer']} | {r['step_s']:.2f} | "
              f"{r['peak_rss_gb']:.2f} | {r['estimate_gb']:.2f}{note} | {r['estimate_gb'] / r['peak_rss_gb']:.2f} | "
              f"{r['ckpt_gb']:.3g} | {r['write_s']:.3g} | {resume} |", flush=True)
    for preset in args.fsdp2:
        ranks = sorted(launch_fsdp2(preset, args), key=lambda r: r["rank"])
        print(f"fsdp2 x2 {preset}: " + "; ".join(
            f"rank {r['rank']}: step {r['step_s']:.2f} s, peak RSS {r['peak_rss_gb']:.2f} GB, "
            f"{r['local_params']:,} parameters held, loss {r['loss']:.4f}" for r in ranks), flush=True)
    if failed:
        print("failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
