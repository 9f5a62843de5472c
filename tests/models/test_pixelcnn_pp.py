"""PixelCNN++: causality (a pixel's log-likelihood ignores later pixels), normalisation of the discretised
logistic mixture on tiny images (grey and RGB), shapes of the MNIST configuration."""

import itertools

import pytest
import torch

from genlab.models.pixelcnn_pp import PixelCNNPP


def tiny(**kw):
    torch.manual_seed(0)
    cfg = dict(in_channels=1, n_filters=4, n_resnet=1, n_mix=3, n_stages=2)
    cfg.update(kw)
    return PixelCNNPP(**cfg).double()


@pytest.mark.parametrize("channels", [1, 3])
def test_pixel_loglik_does_not_depend_on_later_pixels(channels):
    model = tiny(in_channels=channels)
    h = w = 6
    x = (torch.rand(1, channels, h, w, dtype=torch.float64) * 2 - 1).requires_grad_(True)
    per_pixel = model.log_prob_pixels(x)[0]
    for i, j in [(0, 0), (2, 3), (4, 0), (3, 5)]:
        (grad,) = torch.autograd.grad(per_pixel[i, j], x, retain_graph=True)
        g = grad[0].abs().sum(0)  # [H, W]
        order = torch.arange(h * w).view(h, w)
        later = order > i * w + j
        assert g[later].sum() == 0, (i, j)
        earlier = order < i * w + j
        if earlier.any():
            assert g[earlier].sum() > 0  # it does use the context


def _all_images(channels, h, w, levels):
    values = torch.linspace(-1, 1, levels, dtype=torch.float64)
    n = channels * h * w
    grid = torch.tensor(list(itertools.product(range(levels), repeat=n)))
    return values[grid].view(-1, channels, h, w)


@pytest.mark.parametrize("channels,h,w,levels", [(1, 2, 2, 6), (3, 1, 1, 8), (3, 1, 2, 4)])
def test_likelihood_normalises_over_all_images(channels, h, w, levels):
    model = tiny(in_channels=channels, n_levels=levels, n_stages=1)
    with torch.no_grad():
        x = _all_images(channels, h, w, levels)
        total = torch.logsumexp(model.log_prob(x), dim=0)
    assert abs(float(total)) < 1e-9


def test_mnist_configuration_shapes_and_bits_per_dim():
    model = PixelCNNPP(in_channels=1, n_filters=8, n_resnet=1, n_mix=10, n_stages=2)
    x = torch.rand(2, 1, 28, 28) * 2 - 1
    assert model(x).shape == (2, 30, 28, 28)
    lp = model.log_prob(x)
    assert lp.shape == (2,) and torch.isfinite(lp).all()
    assert torch.allclose(model.bits_per_dim(x), -lp / (784 * torch.log(torch.tensor(2.0))))
    rgb = PixelCNNPP(in_channels=3, n_filters=4, n_resnet=1, n_mix=10, n_stages=3)
    assert rgb(torch.rand(1, 3, 32, 32) * 2 - 1).shape == (1, 100, 32, 32)


def test_pretrain_on_digits_then_use_as_frozen_ld_density(tmp_path):
    """The PixelCNN preset's path end to end: pretrain (bits/dim falls), checkpoint, load into the bad GAN,
    LD threshold from the test images and the LD term firing in the generator step."""
    from functools import partial

    import pytorch_lightning as pl

    from genlab.data.images.datamodule import ImageDensityDataModule, SSLImageDataModule
    from genlab.models.bad_gan import BadGAN, MLPDiscriminator, MLPGenerator
    from genlab.tasks.bad_gan import BadGANTask
    from genlab.tasks.pixelcnn import PixelCNNTask

    cache = str(tmp_path / "cache")
    dm = ImageDensityDataModule(dataset="digits", cache_dir=cache, batch_size=32)
    dm.prepare_data()
    dm.setup("fit")
    torch.manual_seed(0)
    model = PixelCNNPP(in_channels=1, n_filters=8, n_resnet=1, n_mix=3, n_stages=2, n_levels=dm.n_levels)
    task = PixelCNNTask(model, partial(torch.optim.Adam, lr=2e-3), image_shape=[1, 8, 8])
    x = dm.x_test[:200]
    before = float(model.bits_per_dim(x).mean().detach())
    trainer = pl.Trainer(max_steps=40, accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=str(tmp_path), limit_val_batches=1,
                         num_sanity_val_steps=0)
    trainer.fit(task, datamodule=dm)
    after = float(model.bits_per_dim(x).mean().detach())
    assert after < before - 0.2, (before, after)
    ckpt = tmp_path / "pixelcnn.ckpt"
    trainer.save_checkpoint(ckpt)

    gan = BadGANTask(BadGAN(MLPDiscriminator(in_dim=64, hidden=(32,)), MLPGenerator(z_dim=8, hidden=(32,), out_dim=64)),
                     optimizer=partial(torch.optim.Adam, lr=3e-3, betas=(0.5, 0.9999)),
                     g_optimizer=partial(torch.optim.Adam, lr=1e-3, betas=(0.0, 0.9999)),
                     ld_weight=1e-2, ld_start_iter=1, ld_prob=1.0, ld_n_samples=8, density_ckpt=str(ckpt),
                     image_shape=[1, 8, 8], init_batches=1)
    ssl = SSLImageDataModule(dataset="digits", cache_dir=cache, n_labeled=50, batch_size=32, labeled_batch_size=50)
    pl.Trainer(max_steps=4, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
               enable_checkpointing=False, val_check_interval=4, check_val_every_n_epoch=None,
               limit_val_batches=1, num_sanity_val_steps=0).fit(gan, datamodule=ssl)
    assert torch.isfinite(gan.ld_threshold)
    ref = model.eval().log_prob(ssl.x_test.view(-1, 1, 8, 8) * 2 - 1)
    assert torch.allclose(gan.ld_threshold, ref.sort().values[int(0.1 * len(ref))], atol=1e-3)
    assert all(not p.requires_grad for p in gan.density.parameters())
