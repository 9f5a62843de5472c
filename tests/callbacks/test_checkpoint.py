"""last.ckpt follows training even when the monitored metric stops improving (Lightning 2.6 froze it at the best
step), and the callback keeps ModelCheckpoint's state key."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from genlab.callbacks.checkpoint import make_checkpoint_callback


class ConstantScore(pl.LightningModule):
    """Trains a linear layer; its validation score never improves after the first validation."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("valid/score", 1.0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader():
    return DataLoader(TensorDataset(torch.randn(12, 4)), batch_size=4)


def fit(tmp_path, **trainer_kw):
    callback = make_checkpoint_callback(str(tmp_path / "ckpt"), monitor="valid/score", mode="max")
    trainer = pl.Trainer(default_root_dir=tmp_path, callbacks=[callback], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, accelerator="cpu", **trainer_kw)
    module = ConstantScore()
    trainer.fit(module, loader(), loader())
    return module, callback


def test_last_checkpoint_follows_every_validation_when_the_best_stays(tmp_path):
    module, callback = fit(tmp_path, max_steps=9, check_val_every_n_epoch=1)  # 3 steps per epoch
    best = torch.load(callback.best_model_path, weights_only=False)
    last = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert best["global_step"] == 3 and last["global_step"] == 9
    assert torch.equal(last["state_dict"]["layer.weight"], module.layer.weight.detach())
    assert "ModelCheckpoint{" in next(k for k in last["callbacks"] if "Checkpoint" in k)


def test_mid_epoch_validation_refreshes_last_too(tmp_path):
    module, callback = fit(tmp_path, max_steps=8, val_check_interval=2, max_epochs=-1)
    last = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert torch.load(callback.best_model_path, weights_only=False)["global_step"] == 2
    assert last["global_step"] == 8
