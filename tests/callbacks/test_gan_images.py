"""Bad GAN evaluation images: the sample grid and the low-density statistics (log p histogram of generated vs
real images with the threshold) reach image loggers and are saved as PNGs in the run directory."""

from functools import partial

import pytorch_lightning as pl
import torch

from genlab.callbacks.gan_images import GANSampleImages, logp_histogram
from genlab.data.images.datamodule import SSLImageDataModule
from genlab.models.bad_gan import BadGAN, MLPDiscriminator, MLPGenerator
from genlab.models.pixelcnn_pp import PixelCNNPP
from genlab.tasks.bad_gan import BadGANTask


class ImageSink(pl.loggers.CSVLogger):
    """A logger with W&B's log_image signature that records what it is given."""

    def __init__(self, root):
        super().__init__(root)
        self.images = []

    def log_image(self, key, images, step=None):
        self.images.append((key, images[0].shape, step))


def test_logp_histogram_is_an_rgb_image():
    img = logp_histogram(torch.randn(100) * 5 - 20, torch.randn(100) * 5, -8.0, 42)
    assert img.ndim == 3 and img.shape[0] == 3 and img.shape[1] > 100 and img.shape[2] > 100
    assert 0.0 <= float(img.min()) and float(img.max()) <= 1.0 and float(img.std()) > 0


def test_density_run_logs_sample_grid_and_logp_histogram(tmp_path):
    """ld_weight=0 with a density model: the FM baseline of the LD ablation direction still logs the log-p statistics."""
    torch.manual_seed(0)
    dm = SSLImageDataModule(dataset="digits", source="mini", cache_dir=str(tmp_path / "cache"), n_labeled=100,
                            batch_size=100, labeled_batch_size=100)
    model = BadGAN(MLPDiscriminator(in_dim=64, hidden=(32, 16)), MLPGenerator(z_dim=8, hidden=(32,), out_dim=64))
    density = PixelCNNPP(in_channels=1, n_filters=4, n_resnet=1, n_mix=2, n_stages=1, n_levels=17)
    task = BadGANTask(model, optimizer=partial(torch.optim.Adam, lr=3e-3), g_optimizer=partial(torch.optim.Adam, lr=1e-3),
                      ld_weight=0.0, density_model=density, density_pretrain_steps=2, density_pretrain_batch=8, image_shape=[1, 8, 8], init_batches=1,
                      n_eval_generated=64, sample_grid=20)
    sink = ImageSink(tmp_path / "logs")
    # the callback the image presets add (conf/callbacks/gan_images.yaml)
    trainer = pl.Trainer(max_steps=3, accelerator="cpu", logger=sink, enable_progress_bar=False,
                         enable_model_summary=False, val_check_interval=3, check_val_every_n_epoch=None,
                         num_sanity_val_steps=0, enable_checkpointing=False, default_root_dir=str(tmp_path / "run"),
                         callbacks=[GANSampleImages(image_shape=[1, 8, 8])])
    trainer.fit(task, datamodule=dm)
    m = trainer.callback_metrics
    assert torch.isfinite(m["valid/gen_logp_max"]) and torch.isfinite(m["valid/ld_threshold"])
    assert {k for k, _, _ in sink.images} == {"samples", "ld_logp_hist"}
    assert all(step == 3 for _, _, step in sink.images)
    grid_shape = {k: s for k, s, _ in sink.images}["samples"]
    assert grid_shape == (1, 2 * 9 + 1, 10 * 9 + 1)  # 20 samples of 8x8 in rows of 10, 1-pixel borders
    pngs = sorted(p.name for p in (tmp_path / "run" / "images").iterdir())
    assert pngs == ["ld_logp_hist_step0000003.png", "samples_step0000003.png"]


def test_pngs_go_to_the_run_dir_only(tmp_path, monkeypatch):
    from genlab.callbacks.gan_images import log_images

    img = {"samples": torch.rand(1, 5, 5)}
    monkeypatch.chdir(tmp_path)
    log_images(pl.Trainer(logger=False, enable_progress_bar=False), img, step=1)  # no run dir: nothing in cwd
    assert not (tmp_path / "images").exists()
    log_images(pl.Trainer(logger=False, default_root_dir=str(tmp_path / "run")), img, step=1)
    assert (tmp_path / "run" / "images" / "samples_step0000001.png").is_file()
