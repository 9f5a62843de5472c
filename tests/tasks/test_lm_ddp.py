"""DDP with 2 CPU processes (gloo) equals one process on the combined batch of streams."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch

from genlab import assemble
from helpers import TINY_TXL as TINY

pytestmark = pytest.mark.distributed


def fit_weights(cfg, devices: int, strategy) -> dict[str, torch.Tensor]:
    pl.seed_everything(0, verbose=False)
    datamodule = assemble.build_data(cfg.data)
    task = assemble.build_task(cfg, datamodule)
    trainer = pl.Trainer(accelerator="cpu", devices=devices, strategy=strategy, max_steps=3, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, use_distributed_sampler=False,
                         limit_val_batches=0, num_sanity_val_steps=0, enable_model_summary=False)
    initial = {k: v.detach().clone() for k, v in task.model.state_dict().items()}
    trainer.fit(task, datamodule=datamodule)
    final = {k: v.detach().clone() for k, v in task.model.state_dict().items()}
    assert any(not torch.equal(initial[k], final[k]) for k in final), "training did not change the weights"
    return final


def test_ddp_two_processes_equal_one_process_with_the_global_batch(compose_cfg):
    common = TINY + ["model.dropout=0.0", "task.scheduler=null", "task.optimizer._target_=torch.optim.SGD",
                     "~task.optimizer.betas", "~task.optimizer.eps", "task.optimizer.lr=0.5"]
    single = fit_weights(compose_cfg(common + ["data.batch_size=8"]), 1, "auto")
    ddp = fit_weights(compose_cfg(common + ["data.batch_size=4"]), 2, "ddp_spawn")
    for name, weight in single.items():
        torch.testing.assert_close(ddp[name], weight, rtol=1e-5, atol=1e-6, msg=name)
