"""One Planetoid run without Hydra, with the reference-preset values of conf/experiment/planetoid_{t,i}_<name>.yaml
(the numbers in table.md were produced with this while the CLI was landing). Prints validation-selected test acc.
    OMP_NUM_THREADS=1 python experiments/planetoid/run_direct.py cora T 1 --path /work/shared/data/planetoid
"""

from __future__ import annotations

import argparse
import functools
import time

import pytorch_lightning as pl
import torch

from genlab.data.planetoid import PlanetoidDataModule
from genlab.models.planetoid import PlanetoidI, PlanetoidT
from genlab.tasks.planetoid import PlanetoidTask

PRESETS = {
    "T": dict(g_batch_size=200, g_sample_size=100, warmup_label_iters=2000, warmup_graph_iters=70, iter_graph=0),
    "I": dict(inductive=True, g_batch_size=20, g_sample_size=20, warmup_label_iters=10000, warmup_graph_iters=400,
              iter_graph=0.1),
}
CONTEXT_LR = {"T": 0.01, "I": 0.001}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("variant", choices=["T", "I"])
    ap.add_argument("seed", type=int)
    ap.add_argument("--path", default="/work/shared/data/planetoid")
    ap.add_argument("--steps", type=int, default=2000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    pl.seed_everything(args.seed, verbose=False)
    dm = PlanetoidDataModule(name=args.name, source="path", path=args.path, steps=args.steps, seed=args.seed,
                             iter_inst=1, iter_label=0, **PRESETS[args.variant])
    dm.prepare_data()
    dm.setup("fit")
    model = (PlanetoidT if args.variant == "T" else PlanetoidI)(**dm.model_overrides())
    sgd = functools.partial(torch.optim.SGD)
    task = PlanetoidTask(model, functools.partial(sgd, lr=0.1), functools.partial(sgd, lr=CONTEXT_LR[args.variant]))
    trainer = pl.Trainer(max_epochs=1, val_check_interval=1, check_val_every_n_epoch=None, logger=False,
                         enable_checkpointing=False, accelerator="cpu", num_sanity_val_steps=0,
                         enable_progress_bar=False, enable_model_summary=False)
    t = time.time()
    trainer.fit(task, datamodule=dm)
    fit_s = time.time() - t
    test = trainer.test(task, datamodule=dm, verbose=False)[0]["test/acc"]
    print(f"{args.name} Planetoid-{args.variant} seed {args.seed}: best valid {task.best_acc:.3f} "
          f"test {test:.3f} fit {fit_s:.0f}s")


if __name__ == "__main__":
    main()
