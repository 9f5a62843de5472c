"""Finetuning under DDP is the global-batch optimisation: 2 CPU processes (gloo) with data.batch_size=16 end at the
weights of one process stepping on the same 32 sentences per step (each rank's share, as Lightning's
DistributedSampler dealt them, concatenated), on the BERT SST-2 mini, in float64 without dropout.

What is not equal: which 32 sentences make a step. One process shuffles with its own RandomSampler, several with
the DistributedSampler's permutation, so a 1-process run and a 2-process run see different batches.

Workers are started as ``python tests/test_finetune_ddp.py worker OUT CFG RANK`` (torchrun-style env).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from launch_ranks import exit_rank, run_ranks
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, default_collate

from genlab import assemble
from genlab.cli import build

pytestmark = pytest.mark.distributed

STEPS, MICRO = 3, 16
OVERRIDES = ["experiment=bert_sst2_mini", "model.dropout=0.0", "model.dropatt=0.0", "task.summary_dropout=0.0",
             "trainer.accelerator=cpu", "trainer.precision=64-true", f"trainer.max_steps={STEPS}",
             "trainer.limit_val_batches=0", "+trainer.enable_checkpointing=false", "trainer.enable_progress_bar=false",
             f"data.batch_size={MICRO}"]


class Indices(pl.Callback):
    def __init__(self) -> None:
        self.steps: list[list[int]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps.append(batch["index"].tolist())


def fit(cfg, devices: int, batches: list[dict] | None = None) -> tuple[list[list[int]], dict]:
    cfg = OmegaConf.create(OmegaConf.to_container(cfg))
    cfg.trainer.devices = devices
    if devices > 1:
        cfg.trainer.strategy = {"_target_": "pytorch_lightning.strategies.DDPStrategy"}
    pl.seed_everything(0, verbose=False)
    datamodule = assemble.build_data(cfg.data)
    task = assemble.build_task(cfg, datamodule)
    seen = Indices()
    trainer = build.build_trainer(cfg, [seen], [])
    if batches is None:
        trainer.fit(task, datamodule=datamodule)
    else:
        trainer.fit(task, train_dataloaders=DataLoader(batches, batch_size=None))
    return seen.steps, {k: v.detach().clone() for k, v in task.state_dict().items()}


def worker(out: Path, cfg_file: Path, rank: int) -> None:
    torch.set_num_threads(1)
    steps, weights = fit(OmegaConf.load(cfg_file), 2)
    (out / f"rank{rank}.json").write_text(json.dumps(steps))
    if rank == 0:
        torch.save(weights, out / "ddp_weights.pt")
    exit_rank()


def test_finetune_ddp_equals_one_process_on_the_same_global_batches(tmp_path):
    from helpers import compose_config

    cfg = OmegaConf.create(build.config_to_dict(compose_config(OVERRIDES, tmp_path)))
    cfg_file = tmp_path / "cfg.yaml"
    OmegaConf.save(cfg, cfg_file)
    run_ranks(__file__, ["worker", str(tmp_path), str(cfg_file), "{rank}"], 2)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert all(len(r) == STEPS and all(len(s) == MICRO for s in r) for r in ranks)
    assert not set(sum(ranks[0], [])) & set(sum(ranks[1], [])), "the ranks must train on different sentences"

    train = assemble.build_data(cfg.data).splits["train"]
    batches = [default_collate([train[i] for i in a + b]) for a, b in zip(*ranks)]
    steps, single = fit(cfg, 1, batches)
    assert steps == [a + b for a, b in zip(*ranks)]
    ddp = torch.load(tmp_path / "ddp_weights.pt")
    initial = assemble.build_task(cfg, assemble.build_data(cfg.data)).state_dict()
    assert any(not torch.equal(initial[k].double(), single[k]) for k in single if single[k].is_floating_point())
    for name, weight in single.items():
        torch.testing.assert_close(ddp[name], weight, rtol=1e-5, atol=1e-7, msg=name)


if __name__ == "__main__" and sys.argv[1] == "worker":
    worker(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
