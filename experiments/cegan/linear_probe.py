"""Dai's thesis Table B.3 counterpart: linear probe on frozen last-layer discriminator features of EGAN-Ent-NN,
EGAN-Const, GAN and a random-init D, on scikit-learn's 8x8 digits (all ten classes; an
offline stand-in for MNIST).

Each GAN is a ``python train.py -m experiment=cegan_nist_mini`` sweep over the seeds (digits MLP nets, NIST optimiser
settings, ``task.variant`` per column), trained on every training digit: the preset's own data module serves one
class only, so the runs use the digits density data (all 1,437 training digits, in [-1, 1]) and a tanh generator to
match that range. The probe (``genlab.analysis.linear_probe``: softmax regression on standardised features) reads
each finished run's final weights (``checkpoints/last.ckpt``) through ``genlab.runs``. Random-init D: the same
network built from the run's config with the run's seed, untrained.

    python experiments/cegan/linear_probe.py --seeds 0 1 2 3 4 --epochs 30
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VARIANT_OVERRIDES = {"egan_ent_nn": [], "egan_const": ["task.variant=egan_const"],
                     "gan": ["task.variant=gan", "task.schedule=all"]}
ALL_DIGITS = ["data=density_digits", "data.batch_size=128", "model.generator.out_act=tanh"]


def train_sweep(variant: str, seeds: list[int], epochs: int, overrides: list[str], sweep_dir: Path) -> None:
    """One ``train.py -m`` sweep over the seeds, each trial in ``sweep_dir/<job number>``."""
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "experiment=cegan_nist_mini", *ALL_DIGITS,
           *VARIANT_OVERRIDES[variant], f"seed={','.join(map(str, seeds))}", f"trainer.max_epochs={epochs}",
           "logger=csv", "trainer.enable_progress_bar=false", *overrides, f"hydra.sweep.dir={sweep_dir}",
           "hydra.sweep.subdir=${hydra.job.num}"]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)


def probe_split(run):
    """(x_train, y_train, x_test, y_test) of the run's own data, in the range its D was trained on. The data module
    keeps the training images (``x_unl``: every training digit, in file order) but not their labels, which come
    from the dataset reader."""
    import numpy as np
    from hydra.utils import instantiate

    from genlab.data.images.datamodule import DATASETS
    from genlab.data.sources.tiers import locate

    dm = instantiate(run.config.data)
    dm.prepare_data()
    dm.setup("fit")
    spec, reader, _ = DATASETS[dm.hparams.dataset]
    _, y_train = reader(locate(spec, dm.hparams.source, dm.hparams.path, dm.hparams.cache_dir), "train")
    if len(y_train) != len(dm.x_unl):
        raise RuntimeError(f"{run.dir}: {len(dm.x_unl)} training images but {len(y_train)} labels")
    return dm.x_unl, np.asarray(y_train), dm.x_test, dm.y_test.numpy()


def discriminators(sweep_dir: Path, random_init: bool = False) -> tuple[list, object]:
    """The trained (or, with ``random_init``, freshly initialised) D of every finished run of a sweep, by seed, and
    one of the runs (for its data)."""
    import pytorch_lightning as pl
    from hydra.utils import instantiate

    from genlab.report.collect import find_run_dirs
    from genlab.runs import load_run

    runs = sorted((load_run(d) for d in find_run_dirs([sweep_dir])), key=lambda r: r.config.seed)
    failed = [str(r.dir) for r in runs if r.status != "finished"]
    if failed or not runs:
        raise RuntimeError(f"unfinished runs in {sweep_dir}: {failed or 'none found'}")
    nets = []
    for run in runs:
        if random_init:  # as train.py builds it: seeded, then instantiated
            pl.seed_everything(run.config.seed, verbose=False)
            nets.append(instantiate(run.config.model).discriminator)
        else:
            nets.append(run.load_task(run.dir / "checkpoints" / "last.ckpt").model.discriminator)
    return nets, runs[0]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--override", nargs="*", default=[],
                    help="extra preset overrides, e.g. 'model.discriminator.hidden=[8,8]'")
    ap.add_argument("--variants", nargs="+", default=list(VARIANT_OVERRIDES), choices=list(VARIANT_OVERRIDES))
    ap.add_argument("--name", default="table_b3", help="output file stem")
    ap.add_argument("--out", type=Path, default=HERE, help="folder of <name>.md")
    ap.add_argument("--runs", type=Path, default=ROOT / "outputs" / "cegan_linear_probe",
                    help="the training sweeps go to <runs>/<name>/<variant>")
    args = ap.parse_args(argv)

    import torch

    from genlab.analysis.linear_probe import probe_discriminators

    torch.set_num_threads(1)
    results, split = {}, None
    sweeps = {v: args.runs / args.name / v for v in args.variants}
    for variant, sweep in sweeps.items():
        train_sweep(variant, args.seeds, args.epochs, args.override, sweep)
        nets, run = discriminators(sweep)
        split = split or probe_split(run)
        results[variant] = probe_discriminators(nets, *split)
        print(variant, json.dumps(results[variant].row), flush=True)
    results["random"] = probe_discriminators(discriminators(sweeps[args.variants[0]], random_init=True)[0], *split)
    print("random", json.dumps(results["random"].row), flush=True)

    ref = yaml.safe_load((HERE / "reference.yaml").read_text())["table_b3_linear_probe_mnist_err_percent"]
    lines = ["# Linear probe on frozen D features (Dai's thesis Table B.3 counterpart, 8x8 digits)", "",
             (f"Test error (%) of softmax regression on the last hidden layer of D; {len(args.seeds)} runs (training "
              f"seeds {args.seeds}), {args.epochs} epochs of `cegan_nist_mini {' '.join(ALL_DIGITS + args.override)}`"
              f" on all {len(split[0]):,} training digits, {len(split[2])} test digits, final weights. The paper's "
              "MNIST numbers (10 runs, full MNIST, conv D) in parentheses: not comparable in scale."),
             "", "| | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    for stat in ("min", "mean", "std"):
        lines.append(f"| {stat} | " + " | ".join(f"{results[v].row[stat]:.2f} ({ref[v][stat]:.3f})" for v in results)
                     + " |")
    lines += ["", "Per run: " + "; ".join(f"{v}: " + ", ".join(f"{e:.2f}" for e in r.errors)
                                          for v, r in results.items()), "",
              f"Command: `python experiments/cegan/linear_probe.py --seeds {' '.join(map(str, args.seeds))} "
              f"--epochs {args.epochs}" + "".join(f" --override '{o}'" for o in args.override)
              + (f" --variants {' '.join(args.variants)}" if args.variants != list(VARIANT_OVERRIDES) else "")
              + (f" --name {args.name}" if args.name != "table_b3" else "") + "`"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
