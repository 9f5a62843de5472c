"""Scale-out checks on 2 CPU processes (gloo): the global batch and gradient clipping.

* ``data.global_batch``: one process accumulating 2 micro-batches (accumulation derived by the CLI build) follows
  the loss trajectory and ends at the weights of 2 DDP processes without accumulation, on Transformer-XL-tiny
  with memory. The LM DataModule learns the accumulation from the trainer and yields chunks of streams at the
  same segment (TXL: ``batch_chunk``), the task keeps one memory per chunk.
* ``trainer.gradient_clip_val`` under FSDP2 (Lightning's ModelParallelStrategy): clipping by norm over the
  sharded DTensor gradients uses the global norm, so 2 sharded processes clip exactly as one process does.

Workers are started as ``python tests/test_scaling.py worker OUT CFG RANK`` with torchrun-style variables.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from launch_ranks import exit_rank, run_ranks
from omegaconf import OmegaConf

from genlab import assemble
from genlab.cli import build
from genlab.data.lm.streams import StreamSegments, split_streams

MICRO, TGT, STEPS, CLIP = 4, 16, 4, 0.02  # TGT: TINY_TXL's data.tgt_len
COMMON = ["model.dropout=0.0", "task.scheduler=null", "task.optimizer._target_=torch.optim.SGD",
          "~task.optimizer.betas", "~task.optimizer.eps", "task.optimizer.lr=0.5", "trainer.accelerator=cpu",
          "trainer.precision=64-true", f"trainer.max_steps={STEPS}", "trainer.limit_val_batches=0",
          "+trainer.enable_checkpointing=false", "trainer.enable_progress_bar=false",
          "trainer.val_check_interval=1.0", "trainer.check_val_every_n_epoch=1",
          f"data.batch_size={MICRO}", f"+data.global_batch={2 * MICRO}"]


class LossLog(pl.Callback):
    """The loss of every micro-batch, as the task logged it (not divided by the accumulation)."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.batches: list[dict] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(trainer.callback_metrics["train/loss"]))
        self.batches.append(batch)


def chunked_segments(tokens, rank: int, world: int, accumulate: int, steps: int) -> list[dict]:
    """This rank's micro-batches: for each segment k, its ``accumulate`` chunks of MICRO streams in turn. Chunk c
    of the ``world x accumulate`` chunks is ``split_streams``' rank c, so every layout sees the same streams."""
    chunks = [StreamSegments(split_streams(tokens, MICRO, rank * accumulate + j, world * accumulate), TGT)
              for j in range(accumulate)]
    return [chunk[k] for k in range(steps) for chunk in chunks]


def run(cfg, devices: int) -> tuple[list[float], dict]:
    """Build the data, task and Trainer as train.py does (accumulation from data.global_batch) and fit."""
    cfg = OmegaConf.create(OmegaConf.to_container(cfg))
    cfg.trainer.devices = devices
    pl.seed_everything(0, verbose=False)
    datamodule = assemble.build_data(cfg.data)
    task = assemble.build_task(cfg, datamodule)
    log = LossLog()
    trainer = build.build_trainer(cfg, [log], [])
    assert trainer.accumulate_grad_batches == cfg.trainer.accumulate_grad_batches == 2 * MICRO // (MICRO * devices)
    trainer.fit(task, datamodule=datamodule)
    accumulate, rank = trainer.accumulate_grad_batches, trainer.global_rank
    expected = chunked_segments(datamodule.corpus.splits["train"], rank, devices, accumulate, STEPS)
    assert [(b["segment"], b["chunk"]) for b in log.batches] == [(k, j) for k in range(STEPS) for j in range(accumulate)]
    for seen, want in zip(log.batches, expected, strict=True):
        assert torch.equal(seen["input_ids"], want["input_ids"]) and torch.equal(seen["target"], want["target"])
    return log.losses, {k: v.detach().clone() for k, v in task.model.state_dict().items()}


# ------------------------------------------------------------------------------------------------ FSDP2 clip
def clip_losses(rank: int, world: int, tokens, clip: float | None) -> list[float]:
    """Transformer-XL-tiny with memory, SGD, ``gradient_clip_val=clip``: FSDP2 on ``world`` > 1 processes."""
    from genlab.models.transformer_xl import TransformerXL
    from genlab.parallel import FSDP2Strategy
    from genlab.tasks.lm import LanguageModelTask

    torch.manual_seed(0)
    model = TransformerXL(int(tokens.max()) + 1, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64,
                          dropout=0.0, mem_len=16).double()
    task = LanguageModelTask(model, functools.partial(torch.optim.SGD, lr=0.5), None, monitor="train/loss")
    data = [StreamSegments(split_streams(tokens, 2 * MICRO // world, rank, world), TGT)[k] for k in range(STEPS)]
    log = LossLog()
    trainer = pl.Trainer(accelerator="cpu", devices=world, strategy=FSDP2Strategy() if world > 1 else "auto",
                         max_steps=STEPS, gradient_clip_val=clip, logger=False, enable_checkpointing=False,
                         callbacks=[log], enable_progress_bar=False, enable_model_summary=False,
                         use_distributed_sampler=False)
    trainer.fit(task, train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None))
    return log.losses


# ------------------------------------------------------------------------------------------------ processes
def worker(out: Path, cfg_file: Path, rank: int) -> None:
    torch.set_num_threads(1)
    cfg = OmegaConf.load(cfg_file)
    tokens = torch.load(out / "tokens.pt").numpy()
    ddp = OmegaConf.create(OmegaConf.to_container(cfg))
    ddp.trainer.strategy = {"_target_": "pytorch_lightning.strategies.DDPStrategy"}
    losses, weights = run(ddp, 2)
    if rank == 0:
        torch.save(weights, out / "ddp_weights.pt")
    result = {"ddp": losses, "fsdp_clip": clip_losses(rank, 2, tokens, CLIP)}
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    exit_rank()


def launch(out: Path, cfg_file: Path, world: int = 2) -> list[dict]:
    run_ranks(__file__, ["worker", str(out), str(cfg_file), "{rank}"], world)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from helpers import TINY_TXL, compose_config

    root = tmp_path_factory.mktemp("scaling")
    cfg = compose_config(TINY_TXL + COMMON, root)
    cfg = OmegaConf.create(build.config_to_dict(cfg))  # resolved: the workers need no Hydra
    cfg_file = root / "cfg.yaml"
    OmegaConf.save(cfg, cfg_file)
    tokens = assemble.build_data(cfg.data).corpus.splits["train"]
    torch.save(torch.from_numpy(tokens.copy()), root / "tokens.pt")
    two = launch(root, cfg_file)
    single, weights = run(cfg, 1)
    return {"two": two, "single": single, "single_weights": weights, "ddp_weights": torch.load(root / "ddp_weights.pt"),
            "clip": clip_losses(0, 1, tokens, CLIP), "noclip": clip_losses(0, 1, tokens, None)}


def per_step(losses: list[float], accumulate: int) -> torch.Tensor:
    return torch.tensor(losses).view(-1, accumulate).mean(1)


@pytest.mark.distributed
def test_global_batch_one_process_accumulating_equals_two_processes(runs):
    ddp = (per_step(runs["two"][0]["ddp"], 1) + per_step(runs["two"][1]["ddp"], 1)) / 2
    single = per_step(runs["single"], 2)
    assert len(single) == STEPS and single[0] != single[-1]
    torch.testing.assert_close(single, ddp, rtol=1e-5, atol=1e-7)
    for name, weight in runs["single_weights"].items():
        torch.testing.assert_close(runs["ddp_weights"][name], weight, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.distributed
def test_gradient_clipping_under_fsdp2_uses_the_global_norm(runs):
    fsdp = (torch.tensor(runs["two"][0]["fsdp_clip"]) + torch.tensor(runs["two"][1]["fsdp_clip"])) / 2
    clip, noclip = torch.tensor(runs["clip"]), torch.tensor(runs["noclip"])
    assert (clip - noclip).abs().max() > 1e-2, "the clip value must bite for this check to mean anything"
    torch.testing.assert_close(fsdp, clip, rtol=1e-5, atol=1e-7)


if __name__ == "__main__" and sys.argv[1] == "worker":
    worker(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
