"""The 2-D semi-supervised toys as a bad-GAN DataModule (Yang's thesis §3.1.4), and the bad-GAN task trained against the
known fake distribution it serves (task.fake_source=data: no generator, no generator step)."""

from functools import partial

import pytest
import pytorch_lightning as pl
import torch

from genlab.data.synthetic.ssl_toy2d import Toy2DSSLDataModule
from genlab.errors import ConfigError
from genlab.models.bad_gan import BadGAN, ToyDiscriminator
from genlab.models.cegan import MLPGenerator
from genlab.tasks.bad_gan import BadGANTask


def dm_of(**kw):
    dm = Toy2DSSLDataModule(**kw)
    dm.setup("fit")
    return dm


def test_batches_carry_every_label_and_complement_points_off_the_data():
    dm = dm_of(dataset="four_spins", fake="complement", fake_pool=3000, seed=1)
    assert sorted(dm.y_lab.tolist()) == [0, 1, 2, 3] and len(dm.x_unl) == 2000
    batch = next(iter(dm.train_dataloader()))
    assert batch["x_lab"].shape == (4, 2) and batch["x_unl"].shape == (128, 2) and batch["x_unl2"].shape == (128, 2)
    assert batch["x_fake"].shape == (128, 2) and torch.cdist(batch["x_fake"], dm.x).min() >= 0.3
    assert "x_fake" not in next(iter(dm_of(dataset="two_circles", labels_per_class=10).train_dataloader()))
    evals = list(dm.val_dataloader())  # transductive: every point, with its label
    assert torch.equal(torch.cat([b["x"] for b in evals]), dm.x)


def test_stream_resumes_at_the_checkpointed_position():
    dm = dm_of(fake="complement", fake_pool=3000)
    full = [b for _, b in zip(range(5), dm.train_dataloader())]
    resumed = dm_of(fake="complement", fake_pool=3000)
    resumed.load_state_dict({"next_position": 3})
    again = next(iter(resumed.train_dataloader()))
    assert all(torch.equal(again[k], full[3][k]) for k in ("x_lab", "x_unl", "x_unl2", "x_fake"))


def test_bad_names_are_config_errors():
    with pytest.raises(ConfigError, match="data.dataset"):
        Toy2DSSLDataModule(dataset="three_moons")
    with pytest.raises(ConfigError, match="data.fake"):
        Toy2DSSLDataModule(fake="uniform")


def make_task(model, **kw):
    return BadGANTask(model, optimizer=partial(torch.optim.Adam, lr=1e-3),
                      g_optimizer=partial(torch.optim.Adam, lr=1e-3), sample_grid=0, **kw)


def test_fake_source_data_needs_no_generator_and_refuses_one():
    with pytest.raises(ConfigError, match="model.generator=null"):
        make_task(BadGAN(ToyDiscriminator(), MLPGenerator(z_dim=8)), fake_source="data")
    with pytest.raises(ConfigError, match="needs model.generator"):
        make_task(BadGAN(ToyDiscriminator()))


def test_fake_source_data_trains_d_against_the_data_fakes(tmp_path):
    torch.manual_seed(0)
    task = make_task(BadGAN(ToyDiscriminator(hidden=(32,))), fake_source="data")
    assert len(task.configure_optimizers()) == 1
    dm = dm_of(fake="complement", fake_pool=3000)
    before = [p.detach().clone() for p in task.model.parameters()]
    pl.Trainer(max_steps=20, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
               enable_checkpointing=False, val_check_interval=20, check_val_every_n_epoch=None,
               default_root_dir=str(tmp_path)).fit(task, datamodule=dm)
    assert task.global_step == 20 and dm.next_position == 20
    assert all(not torch.equal(a, b) for a, b in zip(before, task.model.parameters()))
    with torch.no_grad():  # D has learnt that complement points are fake and data points real
        fake_real = [torch.logsumexp(task.model.discriminator(x)[0], 1).mean() for x in (dm.x_fake, dm.x)]
    assert fake_real[0] < fake_real[1]
