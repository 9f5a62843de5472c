"""Golden loss curves: the per-step training loss of the first steps of one mini preset per model family, run
through the real training entry (``genlab.cli.train.train``, as ``python train.py``) with a fixed seed on one thread.

    OMP_NUM_THREADS=1 python tests/golden/make_golden.py            # rewrite every tests/golden/<family>.json
    OMP_NUM_THREADS=1 python tests/golden/make_golden.py txl mos    # only these families

Rewrite a file only for a change that is meant to move the numbers (a new initialisation, a fixed bug), and say so
in the commit; ``tests/golden/test_golden_curves.py`` fails on anything else that moves them.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = 20


@dataclass(frozen=True)
class Family:
    preset: str
    keys: tuple[str, ...] = ("train/loss",)  # the CSV columns compared (Planetoid logs its two losses apart)
    stop: str = "trainer.max_steps"  # the key that ends training after STEPS steps
    # Relative tolerance of the test, per value. Measured on one core (2026-11-27): a rerun is bit-identical; two
    # torch threads instead of one move a value by at most 1.2e-7 (txl, XLNet, SST-2; MoS and Planetoid not at all);
    # the task's learning rate x 1.01 moves one by at least 1.2e-4 (SST-2; txl 3.2e-4, Planetoid 3.5e-3, XLNet
    # 1.6e-3, MoS 0.09). 1e-5 sits ~80x above the first and ~12x below the second.
    rtol: float = 1e-5


# One mini per family, the cheapest that still runs the family's own objective (about 5-20 s each on one core).
FAMILIES = {
    "txl": Family("txl_mini"),
    "xlnet_pretrain": Family("xlnet_base_mini"),
    "finetune_sst2": Family("xlnet_sst2_mini"),
    "mos": Family("mos_ptb_mini"),
    # GAN training amplifies round-off: two threads move a value by up to 5.8e-5, lr x 1.01 by 2.4 (relative).
    "bad_gan": Family("bad_gan_mnist_mini", rtol=1e-3),
    # The Planetoid data module yields one warm-up batch (all warm-up iterations), then data.steps batches.
    "planetoid": Family("planetoid_t_cora_mini", ("train/sup_loss", "train/ctx_loss"), stop="data.steps"),
}

# Same for every family: seed 0, per-step CSV logging, no validation or test, so only training runs.
COMMON = ("seed=0", "logger=csv", "trainer.log_every_n_steps=1", "trainer.limit_val_batches=0",
          "test_after_fit=false", "trainer.enable_progress_bar=false", "trainer.accelerator=cpu", "trainer.devices=1")


def overrides(family: str, run_dir: Path) -> list[str]:
    """The preset's own recipe, stopped after STEPS steps. A schedule whose length follows trainer.max_steps keeps
    the preset's length, so the first steps are exactly those of a full run of the preset."""
    from omegaconf import OmegaConf

    from helpers import compose_config

    fam = FAMILIES[family]
    base = [f"experiment={fam.preset}", *COMMON]
    extra = [f"{fam.stop}={STEPS}"]
    if fam.stop == "trainer.max_steps":
        cfg = compose_config(base, run_dir)
        if OmegaConf.select(cfg, "task.scheduler.max_steps") is not None:
            extra.append(f"task.scheduler.max_steps={cfg.trainer.max_steps}")
    return base + extra


def read_curves(metrics_csv: Path, keys: tuple[str, ...]) -> dict[str, list[list[float]]]:
    """{key: [[step, value], ...]} from a Lightning CSVLogger file (one row per logged step and key group)."""
    curves: dict[str, list[list[float]]] = {k: [] for k in keys}
    with open(metrics_csv, newline="") as f:
        for row in csv.DictReader(f):
            for k in keys:
                if row.get(k):
                    curves[k].append([int(row["step"]), float(row[k])])
    return curves


def run_curves(family: str, run_dir: Path, extra: tuple[str, ...] = (), threads: int = 1
               ) -> dict[str, list[list[float]]]:
    """Train ``family``'s preset for the golden steps through ``genlab.cli.train.train`` (``extra`` overrides on
    top) on ``threads`` torch threads and read its CSV log."""
    import torch

    from genlab.cli.train import train
    from helpers import compose_config

    torch.set_num_threads(threads)
    fam = FAMILIES[family]
    train(compose_config([*overrides(family, run_dir), *extra], run_dir))
    curves = read_curves(run_dir / "csv" / "metrics.csv", fam.keys)
    if not all(len(v) == STEPS for v in curves.values()):
        raise RuntimeError(f"{fam.preset}: expected {STEPS} values of each of {fam.keys} in {run_dir}/csv, got "
                           f"{ {k: len(v) for k, v in curves.items()} }")
    return curves


def golden_path(family: str) -> Path:
    return HERE / f"{family}.json"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("families", nargs="*", help=f"default: all of {', '.join(FAMILIES)}")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.families) - set(FAMILIES))
    if unknown:
        ap.error(f"unknown families {unknown}; choose from {sorted(FAMILIES)}")
    sys.path.insert(0, str(HERE.parent))  # tests/helpers.py (pytest adds it itself)
    import torch

    for family in args.families or FAMILIES:
        with tempfile.TemporaryDirectory() as tmp:
            curves = run_curves(family, Path(tmp))
        with tempfile.TemporaryDirectory() as tmp:
            used = overrides(family, Path(tmp))
        body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in curves.items())
        head = json.dumps({"overrides": used, "torch": torch.__version__})[:-1]
        golden_path(family).write_text(f'{head}, "curves": {{\n{body}\n}}}}\n')
        print(family, {k: len(v) for k, v in curves.items()}, flush=True)


if __name__ == "__main__":
    main()
