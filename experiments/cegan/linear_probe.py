"""S001 Table B.3 counterpart: linear probe on frozen last-layer discriminator features of EGAN-Ent-NN,
EGAN-Const, GAN and a random-init D, on scikit-learn's 8x8 digits (all ten classes; cegan spec §9).

The GANs are the ``cegan_nist_mini`` preset (digits MLP nets, NIST optimiser settings) with ``task.variant``
overridden, trained on every training digit (the preset's own data module serves one class only, so this
script feeds all classes to the same task). One run = one training seed; the probe is
``genlab.analysis.linear_probe`` (softmax regression on standardised features).

    python experiments/cegan/linear_probe.py --seeds 0 1 2 3 4 --epochs 100
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from torch.utils.data import DataLoader, TensorDataset

from genlab.analysis.linear_probe import probe_discriminators
from genlab.data.images.datamodule import DATASETS
from genlab.data.sources.tiers import locate

HERE = Path(__file__).resolve().parent
CONF = HERE.parents[1] / "conf"
VARIANT_OVERRIDES = {"egan_ent_nn": [], "egan_const": ["task.variant=egan_const"],
                     "gan": ["task.variant=gan", "task.schedule=all"]}


def load_digits_split(cache_dir: str | None = None):
    cache_dir = cache_dir or os.environ.get("GENLAB_CACHE", str(Path.home() / ".cache" / "genlab"))
    spec, reader, scale = DATASETS["digits"]
    root = locate(spec, "mini", None, cache_dir)
    out = []
    for split in ("train", "test"):
        x, y = reader(root, split)
        out += [torch.from_numpy(x.astype(np.float32)).flatten(1) / scale, np.asarray(y)]
    return out


def build(variant: str, seed: int, overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["experiment=cegan_nist_mini", f"seed={seed}",
                                                      *VARIANT_OVERRIDES[variant], *overrides])
    pl.seed_everything(seed, workers=True, verbose=False)
    return instantiate(cfg.task, model=instantiate(cfg.model)), cfg


def train_variant(variant: str, seed: int, x_train: torch.Tensor, epochs: int, overrides: list[str]):
    task, cfg = build(variant, seed, overrides)
    loader = DataLoader(TensorDataset(x_train), batch_size=cfg.data.batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(seed),
                        collate_fn=lambda items: {"x": torch.stack([a for (a,) in items])})
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer.fit(task, train_dataloaders=loader)
    return task.model.discriminator


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--override", nargs="*", default=[],
                    help="extra preset overrides, e.g. 'model.discriminator.hidden=[8,8]'")
    ap.add_argument("--name", default="table_b3", help="output file stem")
    args = ap.parse_args()
    torch.set_num_threads(1)
    x_train, y_train, x_test, y_test = load_digits_split()
    results = {}
    for variant in ("egan_ent_nn", "egan_const", "gan", "random"):
        nets = []
        for seed in args.seeds:
            if variant == "random":
                task, _ = build("egan_ent_nn", seed, args.override)
                nets.append(task.model.discriminator)
            else:
                nets.append(train_variant(variant, seed, x_train, args.epochs, args.override))
        results[variant] = probe_discriminators(nets, x_train, y_train, x_test, y_test)
        print(variant, json.dumps(results[variant].row), flush=True)
    ref = yaml.safe_load((HERE / "reference.yaml").read_text())["table_b3_linear_probe_mnist_err_percent"]
    lines = ["# Linear probe on frozen D features (S001 Table B.3 counterpart, 8x8 digits)", "",
             (f"Test error (%) of softmax regression on the last hidden layer of D; {len(args.seeds)} runs (training "
             f"seeds {args.seeds}), {args.epochs} epochs of `cegan_nist_mini` {' '.join(args.override)} on all 1,437 "
             "training digits, 360 test "
             "digits. The paper's MNIST numbers (10 runs, full MNIST, conv D) in parentheses: not comparable in scale."),
             "", "| | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    for stat in ("min", "mean", "std"):
        lines.append(f"| {stat} | " + " | ".join(f"{results[v].row[stat]:.2f} ({ref[v][stat]:.3f})" for v in results)
                     + " |")
    lines += ["", "Per run: " + "; ".join(f"{v}: " + ", ".join(f"{e:.2f}" for e in r.errors)
                                          for v, r in results.items()), "",
              f"Command: `python experiments/cegan/linear_probe.py --seeds {' '.join(map(str, args.seeds))} "
              f"--epochs {args.epochs}" + "".join(f" --override '{o}'" for o in args.override)
              + (f" --name {args.name}" if args.name != "table_b3" else "") + "`"]
    (HERE / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
