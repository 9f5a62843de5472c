"""Semi-supervised learning with a complement ("bad") GAN (Yang thesis §3.1.5, Eq. (3.5)-(3.6)).

One iteration = one discriminator step (labelled CE + 0.5·(unlabelled-real + generated-fake), plus Ent when on)
followed by one generator (+ encoder) step (feature matching, plus PT, VI and LD when on), with manual optimisation. The
D optimiser is stepped through Lightning (so ``trainer.global_step`` counts iterations); G and the encoder are
stepped directly. Learning rates follow the reference code's per-"epoch" schedule, an epoch being one pass
over the unlabelled stream. A non-finite loss stops training before any parameter is touched, so the last
checkpoint holds the last good weights. Sample grids and log p histograms are drawn by the callback
``genlab.callbacks.gan_images.GANSampleImages`` from ``eval_samples``; the image presets add it
(``conf/callbacks/gan_images.yaml``), so the task never imports a layer above it.

``fake_source=data`` trains D against a known fake distribution instead of a generator (the 2-D complement
generator of the case study, Yang thesis §3.1.4): the fake batch is the DataModule's ``x_fake``, the model has no
generator and there is no generator step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from genlab import checkpoints
from genlab.errors import CheckpointError, ConfigError, DataError
from genlab.models.bad_gan import BadGAN, sample_noise
from genlab.nn.gan_layers import data_dependent_init
from genlab.tasks import gan_losses as L
from genlab.tasks.data_interface import SSLImageData, datamodule_of


def epoch_lr_factor(epoch: int, horizon: int | None) -> float:
    """clip(3·(1 − e/E), 0, 1): constant for two thirds of the horizon, then linear to 0 at E."""
    if horizon is None:
        return 1.0
    return min(max(3.0 * (1.0 - epoch / horizon), 0.0), 1.0)


def load_density_model(path: str, image_shape: list[int] | tuple[int, ...]) -> nn.Module:
    """Frozen density model from a PixelCNN++ checkpoint written by ``genlab.tasks.pixelcnn``."""
    from genlab.models.pixelcnn_pp import PixelCNNPP

    ckpt = checkpoints.load(path, key="task.density_ckpt",
                            fix="Train one with experiment=pixelcnn_<dataset> and pass its checkpoint.")
    meta = ckpt.get("density_model")
    if meta is None:
        raise CheckpointError(f"task.density_ckpt={path} is not a PixelCNN++ checkpoint of genlab.tasks.pixelcnn.")
    if list(meta["image_shape"]) != list(image_shape):
        raise CheckpointError(f"task.density_ckpt={path} models images of shape {list(meta['image_shape'])} but "
                              f"this run generates {list(image_shape)}; pretrain the density on this dataset.")
    model = PixelCNNPP(**meta["config"])
    model.load_state_dict(meta["state_dict"])
    return model


class BadGANTask(pl.LightningModule):
    def __init__(self, model: BadGAN, optimizer: Callable, g_optimizer: Callable,
                 enc_optimizer: Callable | None = None, scheduler: Any = None, monitor: str = "valid/err",
                 monitor_mode: str = "min", unl_weight: float = 0.5, ent_weight: float = 0.0,
                 ent_normalize_over: str = "K", fm_type: str = "sq_mean", pt_weight: float = 0.0,
                 vi_weight: float = 0.0, vi_sigma_max: float | None = None, ld_weight: float = 0.0,
                 ld_start_iter: int = 9000, ld_prob: float = 0.1, ld_n_samples: int = 30, ld_quantile: float = 10.0,
                 ld_threshold_set: str = "test", ld_threshold_images: int | None = None,
                 density_input_map: str = "unit_to_symmetric",
                 density_ckpt: str | None = None,
                 density_model: nn.Module | None = None, image_shape: list[int] | None = None,
                 lr_horizon_epochs: int | None = None, lr_floor: float = 0.0, init_batches: int = 5,
                 init_source: str = "unlabeled", init_generator: bool = False, n_eval_generated: int = 2000,
                 sample_grid: int = 100, supervised_only: bool = False, density_pretrain_steps: int = 0,
                 density_pretrain_lr: float = 2e-3, density_pretrain_batch: int = 40,
                 polyak_decay: float | None = None, polyak_init: str = "zeros", eval_noise_seed: int = 0,
                 fake_source: str = "generator") -> None:
        super().__init__()
        if fake_source not in ("generator", "data"):
            raise ConfigError(f"task.fake_source={fake_source!r}: use 'generator' (G is trained) or 'data' (the "
                              "DataModule's x_fake, a known fake distribution such as data.fake=complement).")
        if (fake_source == "generator") != (model.generator is not None):
            raise ConfigError(f"task.fake_source={fake_source} needs " + (
                "model.generator (a generator network)" if fake_source == "generator" else
                "model.generator=null: the fake points come from the data, so no generator is trained") + ".")
        if scheduler is not None:
            raise ConfigError("task.scheduler must be null for the bad GAN: its per-epoch schedule is set by "
                              "task.lr_horizon_epochs and task.lr_floor.")
        if vi_weight and (model.encoder is None or enc_optimizer is None):
            raise ConfigError("task.vi_weight > 0 needs model.encoder and task.enc_optimizer.")
        if density_input_map not in ("unit_to_symmetric", "identity"):
            raise ConfigError(f"task.density_input_map={density_input_map!r}: use 'unit_to_symmetric' or 'identity'.")
        if ld_threshold_images is not None and ld_threshold_images < 1:
            raise ConfigError(f"task.ld_threshold_images={ld_threshold_images}: use a positive count or null (all).")
        if polyak_decay is not None and not 0.0 < polyak_decay < 1.0:
            raise ConfigError(f"task.polyak_decay={polyak_decay} must lie in (0, 1) (improved-GAN: 0.9999) or be null.")
        if polyak_init not in ("zeros", "weights"):
            raise ConfigError(f"task.polyak_init={polyak_init!r}: use 'zeros' (improved-GAN) or 'weights'.")
        if init_source not in ("unlabeled", "labeled"):
            raise ConfigError(f"task.init_source={init_source!r}: use 'unlabeled' (MNIST) or 'labeled'.")
        # Optimiser factories stay out of the hparams: checkpoints must load with torch.load(weights_only=True).
        self.save_hyperparameters(ignore=["model", "density_model", "optimizer", "g_optimizer", "enc_optimizer",
                                          "scheduler"])
        self.automatic_optimization = False
        self.model = model
        self.make_opt_d, self.make_opt_g, self.make_opt_enc = optimizer, g_optimizer, enc_optimizer
        self.density = density_model
        self.monitor = monitor
        if density_pretrain_steps and density_model is None:
            raise ConfigError("task.density_pretrain_steps > 0 needs task.density_model (the PixelCNN++ to fit).")
        if ld_weight and density_model is None:
            if density_ckpt is None:
                raise ConfigError("task.ld_weight > 0 needs task.density_ckpt (a pretrained PixelCNN++).")
            self.density = load_density_model(density_ckpt, image_shape or [])
        if self.density is not None and not density_pretrain_steps:
            self.density.requires_grad_(False).eval()
        # Polyak average of D's trainable weights for evaluation (the authors' code, improved-GAN's avg = avg +
        # (1-decay) (p - avg)); a submodule, so checkpoints hold it and resume continues the same average.
        self.d_ema = None
        if polyak_decay is not None:
            self.d_ema = AveragedModel(model.discriminator, multi_avg_fn=get_ema_multi_avg_fn(polyak_decay),
                                       use_buffers=False).requires_grad_(False)
        self.register_buffer("initialised", torch.tensor(False))
        self.register_buffer("ld_threshold", torch.tensor(float("nan")))
        self.best_err = math.inf
        self.stopped_on_nan = False
        self.eval_samples: dict[str, Tensor | None] = {}  # drawn by the last evaluation, for GANSampleImages

    # ----------------------------------------------------------------------------------------------- setup
    def configure_optimizers(self):
        opts = [self.make_opt_d(self.model.discriminator.parameters())]
        if self.model.generator is not None:
            opts.append(self.make_opt_g(self.model.generator.parameters()))
        if self.make_opt_enc is not None and self.model.encoder is not None:
            opts.append(self.make_opt_enc(self.model.encoder.parameters()))
        for opt in opts:
            for group in opt.param_groups:
                group.setdefault("base_lr", group["lr"])
        return opts

    def _noise(self, n: int) -> Tensor:
        return sample_noise(n, self.model.generator.z_dim, self.device)

    def _data_init(self, batches: list[Tensor]) -> None:
        """One train-mode pass of the init batch through D (and G / encoder on generated images)."""
        x = torch.cat(batches).to(self.device)
        with data_dependent_init(self.model.discriminator):
            self.model.discriminator(x)
        if self.hparams.init_generator and self.model.generator is not None:
            with data_dependent_init(self.model.generator):
                self.model.generator(self._noise(len(x)))
        if self.model.encoder is not None:  # the encoder head is initialised on generated images (authors' code)
            with torch.no_grad():
                gen = self.model.generator(self._noise(len(x)))
            with data_dependent_init(self.model.encoder):
                self.model.encoder(gen)
        self._start_polyak()
        if not all(torch.isfinite(p).all() for p in self.model.parameters()):
            raise DataError("the data-dependent init batch produced non-finite weights; the training images "
                            "contain NaN/inf values. Check the dataset files (data.path).")
        self.initialised.fill_(True)

    @torch.no_grad()
    def _start_polyak(self) -> None:
        """Start the average from the initialised D: its buffers (fixed WN scales) always, its weights per
        ``polyak_init`` - 'zeros' as improved-GAN (whose average starts at 0), 'weights' = the init weights."""
        if self.d_ema is None:
            return
        d = self.model.discriminator
        for mine, theirs in zip(self.d_ema.module.buffers(), d.buffers(), strict=True):
            mine.copy_(theirs)
        if self.hparams.polyak_init == "zeros":
            for p in self.d_ema.module.parameters():
                p.zero_()
            self.d_ema.n_averaged.fill_(1)  # >0: the next update averages instead of copying
        else:
            self.d_ema.n_averaged.zero_()
            self.d_ema.update_parameters(d)

    @property
    def eval_discriminator(self) -> nn.Module:
        """D used for valid/test: the Polyak average when task.polyak_decay is set, else the raw weights."""
        return self.model.discriminator if self.d_ema is None else self.d_ema.module

    def on_train_start(self) -> None:
        dm: SSLImageData | None = datamodule_of(self)
        self.model.train()
        if not bool(self.initialised):
            if dm is None:
                raise ConfigError("the bad GAN's data-dependent init needs the SSLImageDataModule.")
            key = "x_unl" if self.hparams.init_source == "unlabeled" else "x_lab"
            stream = iter(dm.train_dataloader())
            self._data_init([next(stream)[key] for _ in range(self.hparams.init_batches)])
        if self.hparams.density_pretrain_steps and torch.isnan(self.ld_threshold):
            self._pretrain_density(dm.x_unl)
        # With a density model the threshold and log-p statistics are computed even at ld_weight=0, so the LD
        # preset with task.ld_weight=0 is the FM baseline of Yang thesis Table 3.2 under the same density.
        if self.density is not None and torch.isnan(self.ld_threshold):
            self.ld_threshold.fill_(self.density_threshold_of(dm.reference_images(self.hparams.ld_threshold_set)))
        self.iters_per_epoch = dm.iters_per_epoch if dm is not None else 1

    def _pretrain_density(self, images: Tensor) -> None:
        """Explicitly requested (offline minis): fit the given density model on the unlabelled images by maximum
        likelihood before the GAN starts, then freeze it. Full presets load a pretrained checkpoint instead."""
        hp = self.hparams
        self.density.train().requires_grad_(True)
        opt = torch.optim.Adam(self.density.parameters(), lr=hp.density_pretrain_lr)
        gen = torch.Generator().manual_seed(0)
        for _ in range(hp.density_pretrain_steps):
            idx = torch.randint(0, len(images), (hp.density_pretrain_batch,), generator=gen)
            loss = -self._log_density(images[idx].to(self.device)).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        self.density.requires_grad_(False).eval()

    @torch.no_grad()
    def density_threshold_of(self, reference: Tensor) -> Tensor:
        """The LD threshold: the ``ld_quantile`` percentile of the reference images' log-density, over the first
        ``ld_threshold_images`` of them when set (a sampled estimate of the same percentile, for
        runs where scoring every image, one PixelCNN++ forward pass each, costs too much)."""
        n = self.hparams.ld_threshold_images
        return L.density_threshold(self.log_density_batched(reference[:n]), self.hparams.ld_quantile)

    @torch.no_grad()
    def log_density_batched(self, x: Tensor, batch: int = 200) -> Tensor:
        return torch.cat([self._log_density(x[i:i + batch].to(self.device)) for i in range(0, len(x), batch)])

    def _log_density(self, x: Tensor) -> Tensor:
        """Density model input: reshaped to the image shape and (MNIST) mapped from [0,1] to the PixelCNN's [-1,1]."""
        shape = self.hparams.image_shape or list(x.shape[1:])
        x = x.reshape(len(x), *shape)
        if self.hparams.density_input_map == "unit_to_symmetric":
            x = x * 2.0 - 1.0
        return self.density.log_prob(x)

    # ------------------------------------------------------------------------------------------- training
    def _set_lrs(self, opts) -> None:
        epoch = self.global_step // max(1, self.iters_per_epoch)
        factor = epoch_lr_factor(epoch, self.hparams.lr_horizon_epochs)
        for opt in opts:
            for group in opt.param_groups:
                group["lr"] = max(self.hparams.lr_floor, group["base_lr"] * factor)

    def _finite_or_stop(self, name: str, value: Tensor) -> bool:
        if torch.isfinite(value):
            return True
        self.stopped_on_nan = True
        self.trainer.should_stop = True
        pl.utilities.rank_zero_warn(
            f"bad GAN: {name} became {value.item()} at iteration {self.global_step}; training stopped before the "
            "update, the last checkpoint holds the last finite weights. Lower the learning rates or the loss weights.")
        return False

    def d_step(self, batch: dict[str, Tensor], opt_d) -> dict[str, Tensor] | None:
        d, g = self.model.discriminator, self.model.generator
        if self.hparams.fake_source == "data":
            x_gen = batch["x_fake"]
        else:
            with torch.no_grad():
                x_gen = g(self._noise(len(batch["x_unl"])))
        logits_lab, _ = d(batch["x_lab"])
        logits_unl, _ = d(batch["x_unl"])
        logits_gen, _ = d(x_gen.detach())
        unl_weight = 0.0 if self.hparams.supervised_only else self.hparams.unl_weight
        ent_weight = 0.0 if self.hparams.supervised_only else self.hparams.ent_weight
        parts = L.discriminator_loss(logits_lab, batch["y_lab"], logits_unl, logits_gen, unl_weight, ent_weight,
                                     self.hparams.ent_normalize_over)
        if not self._finite_or_stop("the discriminator loss", parts["loss"]):
            return None
        opt_d.zero_grad(set_to_none=True)
        self.manual_backward(parts["loss"])
        opt_d.step()
        if self.d_ema is not None:
            self.d_ema.update_parameters(d)
        parts.update(L.true_fake_stats(logits_unl.detach(), logits_gen.detach()))
        parts["train_err"] = (logits_lab.argmax(1) != batch["y_lab"]).float().mean()
        return parts

    def g_loss(self, x_unl: Tensor) -> dict[str, Tensor]:
        d, g, hp = self.model.discriminator, self.model.generator, self.hparams
        z = self._noise(len(x_unl))
        x_gen = g(z)
        with torch.no_grad():
            _, f_unl = d(x_unl)
        d.requires_grad_(False)  # G's loss flows through D's layers without touching D's parameters
        try:
            _, f_gen = d(x_gen)
        finally:
            d.requires_grad_(True)
        out = {"fm": L.feature_matching(f_gen, f_unl, hp.fm_type)}
        loss = out["fm"]
        if hp.pt_weight:
            out["pt"] = L.pull_away_term(f_gen)
            loss = loss + hp.pt_weight * out["pt"]
        else:
            with torch.no_grad():
                out["pt"] = L.pull_away_term(f_gen)  # monitored: mean pairwise cos² of generated features
        if hp.vi_weight:
            mu, log_sigma = self.model.encoder(x_gen)
            out["vi"] = L.gaussian_nll(z, mu, log_sigma, 1.0, 1e-8, hp.vi_sigma_max)
            loss = loss + hp.vi_weight * out["vi"]
        if hp.ld_weight and self.global_step > hp.ld_start_iter and torch.rand(()).item() < hp.ld_prob:
            logp = self._log_density(g(self._noise(hp.ld_n_samples)))
            out["ld"] = L.low_density_penalty(logp, self.ld_threshold, hp.ld_weight)
            out["ld_active"] = (logp.detach() > self.ld_threshold).float().mean()
            loss = loss + out["ld"]
        out["loss"] = loss
        return out

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        opts = self.optimizers()
        opts = opts if isinstance(opts, list) else [opts]
        self._set_lrs([o.optimizer for o in opts])
        self.model.train()
        parts = self.d_step(batch, opts[0])
        if parts is None:
            return
        if self.hparams.supervised_only:  # the baseline: same D, noise, optimiser and iterations, labels only
            self.log_dict({"train/loss": parts["loss"].detach(), "train/d_loss": parts["loss"].detach(),
                           "train/train_err": parts["train_err"]})
            return
        if self.model.generator is None:  # fake points from the data: no generator step
            self.log_dict(self._d_logs(parts, opts[0]))
            return
        x_unl2 = batch.get("x_unl2", batch["x_unl"])
        g_parts = self.g_loss(x_unl2)
        if not self._finite_or_stop("the generator loss", g_parts["loss"]):
            return
        raw = [o.optimizer for o in opts[1:]]  # stepped directly so global_step counts iterations
        for o in raw:
            o.zero_grad(set_to_none=True)
        self.manual_backward(g_parts["loss"])
        for o in raw:
            o.step()
        self.model.discriminator.zero_grad(set_to_none=True)
        logs = self._d_logs(parts, opts[0])
        logs.update({f"train/g_{k}": v.detach() for k, v in g_parts.items()})
        self.log_dict(logs, prog_bar=False)

    @staticmethod
    def _d_logs(parts: dict[str, Tensor], opt_d) -> dict[str, Any]:
        logs: dict[str, Any] = {"train/loss": parts["loss"]}
        logs.update({f"train/d_{k}": v for k, v in parts.items() if k in ("loss", "sup", "unl", "gen", "ent")})
        logs.update({f"train/{k}": v for k, v in parts.items() if k.endswith("acc") or k == "train_err"})
        logs = {k: v.detach() for k, v in logs.items()}
        logs["train/lr_d"] = opt_d.optimizer.param_groups[0]["lr"]
        return logs

    # ------------------------------------------------------------------------------------------ evaluation
    def on_validation_epoch_start(self) -> None:
        self._eval = {"n_err": 0, "n": 0, "logits": []}
        self.eval_samples = {}

    def _eval_step(self, batch: dict[str, Tensor]) -> None:
        logits, _ = self.eval_discriminator(batch["x"])
        self._eval["n_err"] += int((logits.argmax(1) != batch["y"]).sum())
        self._eval["n"] += len(batch["y"])
        self._eval["logits"].append(logits)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def on_test_epoch_start(self) -> None:
        self.on_validation_epoch_start()

    @torch.no_grad()
    def _eval_end(self, stage: str) -> None:
        ev = self._eval
        if ev["n"] == 0:
            return
        err = 100.0 * ev["n_err"] / ev["n"]
        logs = {f"{stage}/err": err, f"{stage}/n_err": float(ev["n_err"]),
                f"{stage}/ent": float(L.conditional_entropy(torch.cat(ev["logits"])))}
        if stage == "valid":
            self.best_err = min(self.best_err, err)
            logs["valid/err_best"] = self.best_err
        g, d = self.model.generator, self.eval_discriminator
        if g is None:  # fake points from the data: nothing generated to score
            self.log_dict(logs, sync_dist=True)
            return
        n_gen = min(self.hparams.n_eval_generated, ev["n"])
        # A private generator: evaluation never moves the training RNG (bit-exact resume across evaluations) and
        # every evaluation shows the same z, so sample grids are comparable over time.
        rng = torch.Generator(self.device).manual_seed(self.hparams.eval_noise_seed)
        z_dim = g.z_dim
        gen = torch.cat([g(sample_noise(min(500, n_gen - i), z_dim, self.device, rng)) for i in range(0, n_gen, 500)])
        logits_gen = torch.cat([d(gen[i:i + 500])[0] for i in range(0, n_gen, 500)])
        stats = L.true_fake_stats(torch.cat(ev["logits"]), logits_gen)
        logs.update({f"{stage}/{k}": float(v) for k, v in stats.items()})
        logp = None
        if self.density is not None and not torch.isnan(self.ld_threshold):
            logp = self.log_density_batched(gen[:400])
            logs.update({f"{stage}/gen_logp_max": float(logp.max()), f"{stage}/gen_logp_mean": float(logp.mean()),
                         f"{stage}/ld_threshold": float(self.ld_threshold)})
        self.log_dict(logs, sync_dist=True)
        # what the pictures of this evaluation show (genlab.callbacks.gan_images.GANSampleImages draws them)
        self.eval_samples = {"samples": gen[: self.hparams.sample_grid], "logp": logp}

    def on_validation_epoch_end(self) -> None:
        self._eval_end("valid")

    def on_test_epoch_end(self) -> None:
        self._eval_end("test")
