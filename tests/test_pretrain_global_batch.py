"""``data.global_batch`` on XLNet pretraining with memory (issue 9): the PretrainDataModule splits the streams into
``world * A`` chunks, the PLM task keeps one memory per chunk, so

* one process accumulating 2 micro-batches follows the loss trajectory and ends at the weights of 2 DDP (gloo)
  processes without accumulation (XLNet-tiny PLM with memory on pretrain_mini, fp64, SGD, no dropout);
* a run stopped between the two micro-batches of a step and resumed is bit-exact (the gradients of the unfinished
  cycle are in the checkpoint, as for the LM task);
* chunk j of rank r holds exactly the batches rank ``r*A + j`` of ``world*A`` processes would build (all objectives).

The worker processes re-run this file (``python tests/test_pretrain_global_batch.py worker ...``).
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

from genlab import assemble
from genlab.cli import build
from helpers import PreemptAfterBatches

MICRO, STEPS = 2, 3  # streams per micro-batch (1 forward + 1 backward with bi_data), optimiser steps
TINY = ["model.n_layer=1", "model.d_model=32", "model.n_head=2", "model.d_head=16",
            "model.d_inner=64", "model.mem_len=16", "model.dropout=0.0", "model.dropatt=0.0",
            f"data.batch_size={MICRO}", f"data.eval_batch_size={MICRO}", f"+data.global_batch={2 * MICRO}",
            "trainer.accelerator=cpu", "trainer.enable_progress_bar=false", "+trainer.enable_model_summary=false"]
TINY_PLM = ["experiment=xlnet_base_mini", *TINY]
EXACT = ["task.scheduler=null", "task.optimizer._target_=torch.optim.SGD", "~task.optimizer.betas",
         "~task.optimizer.eps", "task.optimizer.lr=0.5", "trainer.precision=64-true", f"trainer.max_steps={STEPS}",
         "trainer.limit_val_batches=0", "+trainer.enable_checkpointing=false"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One pretrain_mini cache (corpus memmaps + SentencePiece model) for the whole file."""
    pytest.importorskip("gensim", reason="pretrain_mini reads the Wikipedia excerpt inside the gensim wheel")
    return tmp_path_factory.mktemp("pretrain_mini_cache")


class LossLog(pl.Callback):
    """Every micro-batch's logged loss and its (pass, step, chunk)."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.items: list[tuple[int, int, int]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(trainer.callback_metrics["train/loss"]))
        self.items.append((int(batch["pass"]), int(batch["step"]), int(batch["chunk"])))


def run(cfg, devices: int) -> tuple[list[float], dict]:
    """Data, task and Trainer as train.py builds them (accumulation from data.global_batch), then fit."""
    cfg = OmegaConf.create(OmegaConf.to_container(cfg))
    cfg.trainer.devices = devices
    pl.seed_everything(0, verbose=False)
    datamodule = assemble.build_data(cfg.data)
    task = assemble.build_task(cfg, datamodule)
    log = LossLog()
    trainer = build.build_trainer(cfg, [log], [])
    accumulate = trainer.accumulate_grad_batches
    assert accumulate == 2 // devices
    trainer.fit(task, datamodule=datamodule)
    assert log.items == [(0, k, j) for k in range(STEPS) for j in range(accumulate)]
    assert len(task._train_memory) == accumulate and all(m is not None for m in task._train_memory)
    return log.losses, {k: v.detach().clone() for k, v in task.model.state_dict().items()}


def worker(out: Path, cfg_file: Path, rank: int) -> None:
    torch.set_num_threads(1)
    cfg = OmegaConf.load(cfg_file)
    cfg.trainer.strategy = {"_target_": "pytorch_lightning.strategies.DDPStrategy"}
    losses, weights = run(cfg, 2)
    if rank == 0:
        torch.save(weights, out / "ddp_weights.pt")
    (out / f"rank{rank}.json").write_text(json.dumps(losses))
    exit_rank()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache):
    from helpers import compose_config

    root = tmp_path_factory.mktemp("pretrain_scaling")
    cfg = compose_config(TINY_PLM + EXACT + [f"data.cache_dir={cache}"], root)
    cfg = OmegaConf.create(build.config_to_dict(cfg))  # resolved: the workers need no Hydra
    assemble.build_data(cfg.data).prepare_data()  # corpus and tokenizer once, before the ranks read them
    cfg_file = root / "cfg.yaml"
    OmegaConf.save(cfg, cfg_file)
    run_ranks(__file__, ["worker", str(root), str(cfg_file), "{rank}"], 2)
    two = [json.loads((root / f"rank{r}.json").read_text()) for r in range(2)]
    single, weights = run(cfg, 1)
    return {"two": two, "single": single, "single_weights": weights, "ddp_weights": torch.load(root / "ddp_weights.pt")}


@pytest.mark.distributed
def test_plm_with_memory_one_process_accumulating_2_equals_2_processes(runs):
    ddp = (torch.tensor(runs["two"][0]) + torch.tensor(runs["two"][1])) / 2
    single = torch.tensor(runs["single"]).view(STEPS, 2).mean(1)
    assert single[0] != single[-1]
    torch.testing.assert_close(single, ddp, rtol=1e-5, atol=1e-7)
    for name, weight in runs["single_weights"].items():
        torch.testing.assert_close(runs["ddp_weights"][name], weight, rtol=1e-5, atol=1e-7, msg=name)


# -------------------------------------------------------------------------------------------- mid-cycle resume
def _fit(cfg, callbacks, ckpt_path=None):
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = assemble.build_data(cfg.data)
    task = assemble.build_task(cfg, datamodule)
    log = LossLog()  # train.py's callbacks: RNGStateCallback restores dropout's generator on resume
    trainer = build.build_trainer(cfg, [*build.build_callbacks(cfg), log, *callbacks], [])
    trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt_path)
    return task, log


@pytest.mark.parametrize("experiment", ["xlnet_base_mini", "xlnet_ablation_dae_mini"])
def test_resume_mid_accumulation_cycle_is_bit_exact(experiment, compose_cfg, tmp_path, cache):
    """PLM and DAE, A = 2 chunks with dropout on: stopped after 3 micro-batches (1.5 steps), resumed to 3 steps:
    the same micro-batches, losses, weights and per-chunk memories as an uninterrupted run."""
    common = [f"experiment={experiment}", *TINY, "model.dropout=0.1", "trainer.max_steps=3", "trainer.limit_val_batches=0",
                         "callbacks.checkpoint.monitor=null", f"data.cache_dir={cache}"]
    assert compose_cfg(common).task._target_.endswith("DAETask" if "dae" in experiment else "PermutationLMTask")
    full, full_log = _fit(compose_cfg(common + [f"paths.output_dir={tmp_path}/full"]), [])
    assert full_log.items == [(0, k, j) for k in range(3) for j in range(2)]

    ckpt = tmp_path / "preempted.ckpt"
    _, first = _fit(compose_cfg(common + [f"paths.output_dir={tmp_path}/part"]), [PreemptAfterBatches(3, ckpt)])
    saved = torch.load(ckpt, weights_only=True)
    assert saved["lm_pending_grads"] is not None and len(saved["lm_memory"]["chunks"]) == 2  # mid-cycle
    resumed, second = _fit(compose_cfg(common + [f"paths.output_dir={tmp_path}/part"]), [], str(ckpt))

    assert first.items + second.items == full_log.items
    assert first.losses + second.losses == full_log.losses
    for (name, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    for chunk_a, chunk_b in zip(full._train_memory, resumed._train_memory, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(chunk_a, chunk_b, strict=True))


# ------------------------------------------------------------------------------------------------- the chunks
@pytest.mark.parametrize("objective", ["plm", "dae", "mlm"])
def test_chunk_j_of_rank_r_is_rank_r_times_a_plus_j_of_world_times_a(objective, cache):
    from genlab.data.pretrain.datamodule import (
        ChunkedPretrainBatches,
        PretrainDataModule,
    )

    dm = PretrainDataModule(objective=objective, corpus="pretrain_mini", cache_dir=str(cache), vocab_size=4000,
                            batch_size=2, seq_len=64, reuse_len=32, perm_size=32, num_predict=10,
                            bi_data=objective != "mlm", masking={"max_predictions": 10})
    dm.prepare_data()
    dm.setup("fit")
    make = lambda r, w: dm.batches("train", rank=r, world=w)
    chunked = ChunkedPretrainBatches(make, rank=1, world=2, chunks=2)  # rank 1 of 2, accumulating 2
    assert len(chunked) == 2 * make(3, 4).n_steps
    for step in (0, 1):
        for j in (0, 1):
            got, want = chunked[(1, 2 * step + j)], make(2 + j, 4)[(1, step)]
            assert got["chunk"] == j and (got["pass"], got["step"]) == (1, step)
            for key, value in want.items():
                assert torch.equal(torch.as_tensor(got[key]), torch.as_tensor(value)), key
    other = make(0, 4)[(1, 0)]  # another rank's chunk: other streams
    assert not torch.equal(other["input_ids"], chunked[(1, 0)]["input_ids"])



@pytest.mark.parametrize(("state", "accumulate", "first"), [
    ({"pass": 1, "step": 3}, 2, (1, 6)),  # a checkpoint from before chunks: step 3 = item 3 * 2
    ({"pass": 1, "item": 5, "chunks": 2}, 2, (1, 5)),  # same accumulation: the next chunk of the same step
    ({"pass": 1, "item": 5, "chunks": 2}, 1, (1, 2)),  # another accumulation: the interrupted step restarts
])
def test_resume_position_follows_the_accumulation(state, accumulate, first, cache):
    from types import SimpleNamespace

    from genlab.data.pretrain.datamodule import PretrainDataModule

    dm = PretrainDataModule(objective="plm", corpus="pretrain_mini", cache_dir=str(cache), vocab_size=4000,
                            batch_size=2, seq_len=64, reuse_len=32, perm_size=32, num_predict=10)
    dm.setup("fit")
    dm.trainer = SimpleNamespace(accumulate_grad_batches=accumulate, global_rank=0, world_size=1)
    dm.load_state_dict(state)
    assert next(iter(dm.train_dataloader().sampler)) == first
    assert dm.state_dict() == {}  # nothing consumed yet in this run

if __name__ == "__main__" and sys.argv[1] == "worker":
    worker(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
