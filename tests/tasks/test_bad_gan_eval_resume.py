"""Bad GAN: Polyak-averaged evaluation (optional, as improved-GAN's code evaluates; the bad-GAN code evaluates raw
weights) and bit-exact resume across a stop (stream position, RNG, optimisers and the average all restored)."""

from functools import partial

import pytest
import pytorch_lightning as pl
import torch

from genlab.callbacks.rng import RNGStateCallback
from genlab.data.images.datamodule import SSLImageDataModule, SSLStream
from genlab.errors import ConfigError
from genlab.models.bad_gan import BadGAN, MLPDiscriminator, MLPGenerator
from genlab.tasks.bad_gan import BadGANTask


def make_task(model, **kw):
    return BadGANTask(model, optimizer=partial(torch.optim.Adam, lr=3e-3, betas=(0.5, 0.9999)),
                      g_optimizer=partial(torch.optim.Adam, lr=1e-3, betas=(0.0, 0.9999)), **kw)


def tiny_model():
    return BadGAN(MLPDiscriminator(in_dim=16, hidden=(8, 8)), MLPGenerator(z_dim=4, hidden=(8,), out_dim=16))


@pytest.mark.parametrize("init", ["zeros", "weights"])
def test_polyak_average_equals_hand_computed_average_over_3_steps(init):
    torch.manual_seed(0)
    decay = 0.9
    task = make_task(tiny_model(), polyak_decay=decay, polyak_init=init)
    task.manual_backward = lambda loss: loss.backward()
    opt_d, _ = task.configure_optimizers()
    d = task.model.discriminator
    task._data_init([torch.rand(20, 16)])
    # improved-GAN: avg starts at 0 ('zeros') or at the initialised weights, then avg += (1 - decay)(p - avg)
    avg = {n: torch.zeros_like(p) if init == "zeros" else p.detach().clone() for n, p in d.named_parameters()}
    for _step in range(3):
        batch = {"x_lab": torch.rand(10, 16), "y_lab": torch.arange(10), "x_unl": torch.rand(12, 16)}
        task.d_step(batch, opt_d)
        for n, p in d.named_parameters():
            avg[n] = avg[n] + (1 - decay) * (p.detach() - avg[n])
    ema = dict(task.d_ema.module.named_parameters())
    for n, p in d.named_parameters():
        assert torch.allclose(ema[n], avg[n], atol=1e-6, rtol=0), n
        assert not torch.allclose(ema[n], p)  # really an average, not a copy
    for (n, b_ema), (_, b) in zip(task.d_ema.module.named_buffers(), d.named_buffers()):
        assert torch.equal(b_ema, b), n  # fixed WN scales follow D
    assert not any(p.requires_grad for p in task.d_ema.parameters())
    assert all(id(p) not in {id(q) for g in opt_d.param_groups for q in g["params"]} for p in task.d_ema.parameters())


def test_evaluation_uses_the_polyak_average(tmp_path):
    torch.manual_seed(0)
    task = make_task(tiny_model(), polyak_decay=0.5, polyak_init="weights", n_eval_generated=20)
    task._data_init([torch.rand(20, 16)])
    with torch.no_grad():
        for p in task.d_ema.module.parameters():
            p.add_(torch.randn_like(p))  # make the averaged D clearly different from the raw one
    assert task.eval_discriminator is task.d_ema.module
    x, y = torch.rand(50, 16), torch.randint(0, 10, (50,))
    task.eval()
    task.on_validation_epoch_start()
    task._eval_step({"x": x, "y": y})
    with torch.no_grad():
        want = int((task.d_ema.module(x)[0].argmax(1) != y).sum())
        raw = int((task.model.discriminator(x)[0].argmax(1) != y).sum())
    assert task._eval["n_err"] == want and want != raw
    assert make_task(tiny_model()).eval_discriminator is not None  # off by default: raw D
    with pytest.raises(ConfigError, match="polyak_decay"):
        make_task(tiny_model(), polyak_decay=1.0)


# ------------------------------------------------------------------------------------------------ resume
def test_stream_from_a_position_equals_the_uninterrupted_stream():
    x_lab, y_lab, x_unl = torch.arange(7.0)[:, None], torch.arange(7), torch.arange(23.0)[:, None]
    full = iter(SSLStream(x_lab, y_lab, x_unl, 3, 5, True, seed=4))
    batches = [next(full) for _ in range(17)]  # crosses several passes of both streams
    for start in (0, 4, 5, 11):
        resumed = iter(SSLStream(x_lab, y_lab, x_unl, 3, 5, True, seed=4, start=start))
        for want in batches[start:]:
            got = next(resumed)
            assert got["position"] == want["position"]
            for k in ("x_lab", "y_lab", "x_unl", "x_unl2"):
                assert torch.equal(got[k], want[k]), (start, k)


class LossLog(pl.Callback):
    def __init__(self):
        self.losses = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append((trainer.global_step, float(trainer.callback_metrics["train/loss"]),
                            float(trainer.callback_metrics["train/g_loss"])))


def run(tmp_path, name, steps, ckpt_path=None, save_every=None):
    torch.manual_seed(0)
    dm = SSLImageDataModule(dataset="digits", source="mini", cache_dir=str(tmp_path / "cache"), n_labeled=100,
                            seed=3, batch_size=100, labeled_batch_size=100)
    model = BadGAN(MLPDiscriminator(in_dim=64, hidden=(32, 16)), MLPGenerator(z_dim=8, hidden=(32,), out_dim=64))
    task = make_task(model, polyak_decay=0.9, n_eval_generated=50, init_batches=2)
    log = LossLog()
    callbacks = [log, RNGStateCallback()]
    if save_every:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=tmp_path / name, every_n_train_steps=save_every,
                                                      save_top_k=-1, filename="{step}"))
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False, val_check_interval=4, check_val_every_n_epoch=None,
                         num_sanity_val_steps=0, default_root_dir=str(tmp_path / name), callbacks=callbacks,
                         enable_checkpointing=bool(save_every))
    trainer.fit(task, datamodule=dm, ckpt_path=ckpt_path)
    return task, dm, log.losses


def test_resume_across_a_stop_is_bit_exact(tmp_path):
    """10 iterations uninterrupted == 6, stop, resume to 10: same losses, weights, Polyak average and stream
    position (evaluations at 4 and 8 in both, so they must not move the training RNG either)."""
    full, full_dm, full_losses = run(tmp_path, "full", 10)
    _, part_dm, _ = run(tmp_path, "part", 6, save_every=6)
    assert part_dm.next_position == 6
    ckpt = tmp_path / "part" / "step=6.ckpt"
    torch.load(ckpt, weights_only=True)  # plain tensors and values: loads without unpickling code
    resumed, resumed_dm, resumed_losses = run(tmp_path, "resumed", 10, ckpt_path=str(ckpt))
    assert resumed_losses == full_losses[6:]
    assert resumed_dm.next_position == full_dm.next_position == 10
    for (name, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b) or (a.isnan().all() and b.isnan().all()), name  # ld_threshold is NaN (no LD)
    assert any(k.startswith("d_ema.") for k in resumed.state_dict())
