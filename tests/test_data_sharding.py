"""Data parallelism for non-LM data: on 2 CPU processes (gloo, DDP) every rank trains on its own share.

The trainer's ``use_distributed_sampler`` follows the DataModule (``genlab.cli.build.distributed_sampler``): a
finetuning DataModule gets Lightning's DistributedSampler, the bad-GAN image stream (an iterable dataset, which
Lightning cannot shard) splits its batches by rank itself. Each rank fits a probe module that only records the
samples it is given; one pass of the data over both ranks must be the whole pass, each sample on one rank.

Workers are started as ``python tests/test_data_sharding.py worker OUT CFG STEPS RANK`` (torchrun-style env).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from launch_ranks import exit_rank, run_ranks
from omegaconf import OmegaConf

from genlab import assemble
from genlab.cli import build

pytestmark = pytest.mark.distributed


class Probe(pl.LightningModule):
    """Records a fingerprint of every sample of every training batch (rows of ``keys``); trains one scalar."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        super().__init__()
        self.keys, self.seen = keys, {k: [] for k in keys}
        self.w = torch.nn.Parameter(torch.zeros(()))

    def training_step(self, batch, batch_idx):
        for key in self.keys:
            rows = batch[key].cpu()
            self.seen[key] += [row.numpy().tobytes().hex() for row in rows.reshape(len(rows), -1)]
        return (self.w - 1.0) ** 2

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit_probe(cfg, keys: tuple[str, ...], steps: int, devices: int) -> dict[str, list[str]]:
    """Build data and Trainer as train.py does (the sampler decision included), fit the probe for ``steps``."""
    cfg = OmegaConf.create(OmegaConf.to_container(cfg))
    cfg.trainer.devices, cfg.trainer.max_steps, cfg.trainer.max_epochs = devices, steps, None
    cfg.trainer.limit_val_batches, cfg.trainer.enable_progress_bar = 0, False
    if devices > 1:
        cfg.trainer.strategy = {"_target_": "pytorch_lightning.strategies.DDPStrategy"}
    datamodule = assemble.build_data(cfg.data)
    probe = Probe(keys)
    trainer = build.build_trainer(cfg, [], [])
    trainer.fit(probe, datamodule=datamodule)
    return probe.seen


def worker(out: Path, cfg_file: Path, steps: int, rank: int) -> None:
    torch.set_num_threads(1)
    spec = json.loads(cfg_file.read_text())
    seen = fit_probe(OmegaConf.create(spec["cfg"]), tuple(spec["keys"]), steps, 2)
    (out / f"rank{rank}.json").write_text(json.dumps(seen))
    exit_rank()


def launch(root: Path, name: str, overrides: list[str], keys: tuple[str, ...], steps: int) -> tuple[list, dict]:
    """Both ranks' samples under DDP, and what one process sees in ``steps`` steps of twice the batch."""
    from helpers import compose_config

    cfg = compose_config([*overrides, "trainer.accelerator=cpu", "+trainer.enable_checkpointing=false"],
                         root / name)
    cfg = OmegaConf.create(build.config_to_dict(cfg))  # resolved: the workers need no Hydra
    out = root / name
    out.mkdir(exist_ok=True)
    spec = out / "spec.json"
    spec.write_text(json.dumps({"cfg": OmegaConf.to_container(cfg), "keys": list(keys)}))
    run_ranks(__file__, ["worker", str(out), str(spec), str(steps), "{rank}"], 2)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    return ranks, cfg


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("sharding")


def test_finetune_ranks_see_disjoint_samples_whose_union_is_the_epoch(root):
    steps = 5  # 140 training sentences, batch 16 per rank: one epoch is 5 steps on 2 ranks
    ranks, cfg = launch(root, "finetune", ["experiment=bert_sst2_mini", "data.batch_size=16"], ("index",), steps)
    n = len(assemble.build_data(cfg.data).splits["train"])
    a, b = Counter(ranks[0]["index"]), Counter(ranks[1]["index"])
    assert n == 140 and sum(a.values()) == sum(b.values()) == 70
    assert not (set(a) & set(b)), "the two ranks trained on the same sentences"
    epoch = Counter(torch.tensor([i]).numpy().tobytes().hex() for i in range(n))
    assert a + b == epoch  # every sentence exactly once over both ranks


def test_gan_image_ranks_see_disjoint_samples_whose_union_is_a_pass(root):
    # 3,400 unlabelled digits (4,000 minus 100 labelled minus data.n_valid = 500 held out for validation), 100 per
    # rank and step: one pass is 17 global batches.
    steps = 17
    ranks, cfg = launch(root, "gan", ["experiment=bad_gan_mnist_mini"], ("x_unl", "x_lab"), steps)
    datamodule = assemble.build_data(cfg.data)
    assert len(datamodule.x_unl) == 2 * 100 * steps
    fingerprint = lambda x: Counter(row.numpy().tobytes().hex() for row in x.flatten(1))  # noqa: E731
    unl, lab = fingerprint(datamodule.x_unl), fingerprint(datamodule.x_lab)
    a, b = Counter(ranks[0]["x_unl"]), Counter(ranks[1]["x_unl"])
    assert not (set(a) & set(b)), "the two ranks drew the same unlabelled images"
    assert a + b == unl
    # the labelled pool (100) is smaller than the global labelled batch (2 x 100): each step splits it in two
    a_lab, b_lab = Counter(ranks[0]["x_lab"][:50]), Counter(ranks[1]["x_lab"][:50])
    assert a_lab + b_lab == lab


if __name__ == "__main__" and sys.argv[1] == "worker":
    worker(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
