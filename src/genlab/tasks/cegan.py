"""Calibrated energy-based GAN (Dai thesis §6.2, App. B): max_c min_G E_gen[c] − E_data[c] + K(p_gen).

Variants (``variant``): ``gan`` (binary GAN on P(real) = σ(−E)), ``egan_const`` (no K, EBGAN-like),
``egan_ent_nn`` (K = −H through the k-NN entropy-gradient surrogate), ``egan_ent_vi`` (K = −H through the
variational bound with q(z|x)), ``egan_ent_mix`` (reg_cst·VI + (1 − reg_cst)·NN).
Every iteration computes all losses from one forward pass, takes each network's gradient at the current
parameters (``torch.autograd.grad``), then applies the update chosen by the gap scheduler (``all`` /
``d_only`` / ``g_only``). LRs decay per epoch. ``trainer.global_step`` (and so ``trainer.max_steps``) counts
iterations, one per training batch whatever the scheduler updated: the first update of an iteration is stepped
through Lightning, the others (and all of them when training epochs) directly on the torch optimisers.
Evaluation statistics (grid KLs of Table B.2, energy ranking) are computed by ``genlab.metrics.cegan_metrics``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor

from genlab.errors import ConfigError
from genlab.metrics.cegan_metrics import (
    grid_kls,
    grid_softmax,
    histogram_on_grid,
    make_canvas,
    spearman,
)
from genlab.models.cegan import CEGAN
from genlab.tasks import gan_losses as L
from genlab.tasks.data_interface import OneClassImageData, Toy2DData, datamodule_of

VARIANTS = ("gan", "egan_const", "egan_ent_nn", "egan_ent_vi", "egan_ent_mix")


def choose_update(gap: float, lbound: float, rbound: float) -> str:
    """Gap = previous L_D: inside (lbound, rbound) update both; above rbound D is losing; else D is far ahead."""
    if lbound < gap < rbound:
        return "all"
    if gap > rbound:
        return "d_only"
    return "g_only"


class CEGANTask(pl.LightningModule):
    def __init__(self, model: CEGAN, optimizer: Callable, scheduler: Any = None, monitor: str = "valid/kl_disc_data",
                 monitor_mode: str = "min", variant: str = "egan_ent_nn", energy_form: str = "identity",
                 g_lr_multiplier: float = 10.0, d_lr_multiplier: float = 1.0, nn_k: int = 20, nn_alpha: float = 1e-3,
                 nn_normalize: str = "var", vi_weight: float = 0.1, vi_logsigma_coef: float = 0.5,
                 mix_reg_cst: float = 0.0, margin: float | None = None, smooth: float = 0.0, l2: float = 0.0,
                 grad_clip_norm: float | None = None, schedule: str = "gap", lbound: float = -10.0,
                 rbound: float = 0.1, init_gap: float = 1.0, force_all_first_epoch: bool = False,
                 lr_decay: float = 1.0, lr_decay_start_epoch: int = 0, lr_floor: float = 0.0, grid: int = 100,
                 kl_floor: float = 1e-10, n_eval_generated: int = 100_000) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ConfigError(f"task.variant={variant!r} is unknown; choose one of {VARIANTS}.")
        if variant in ("egan_ent_vi", "egan_ent_mix") and model.inference is None:
            raise ConfigError(f"task.variant={variant} needs model.inference (the q(z|x) network).")
        if schedule not in ("gap", "all"):
            raise ConfigError(f"task.schedule={schedule!r}: use 'gap' or 'all'.")
        if scheduler is not None:
            raise ConfigError("task.scheduler must be null: CEGAN decays LRs per epoch (task.lr_decay, lr_floor).")
        self.save_hyperparameters(ignore=["model", "optimizer", "scheduler"])  # factories: not weights_only-loadable
        self.automatic_optimization = False
        self.monitor = monitor
        self.model = model
        self.make_optimizer = optimizer
        self.gap = float(init_gap)
        self.update_counts = {"all": 0, "d_only": 0, "g_only": 0}

    def configure_optimizers(self):
        hp = self.hparams
        groups = [(self.model.discriminator, hp.d_lr_multiplier), (self.model.generator, hp.g_lr_multiplier)]
        if self.model.inference is not None:
            groups.append((self.model.inference, 1.0))
        opts = []
        for net, mult in groups:
            opt = self.make_optimizer(net.parameters())
            for g in opt.param_groups:
                g["lr"] *= mult
                g["base_lr"] = g["lr"]
            opts.append(opt)
        return opts

    def on_train_epoch_start(self) -> None:
        hp = self.hparams
        factor = hp.lr_decay ** max(0, self.current_epoch - hp.lr_decay_start_epoch)
        for opt in self._raw_opts():
            for g in opt.param_groups:
                g["lr"] = max(hp.lr_floor, g["base_lr"] * factor)

    # the gap scheduler's state: a resumed run must choose the same updates as the uninterrupted one
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["cegan"] = {"gap": self.gap, "update_counts": dict(self.update_counts)}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("cegan")
        if state is not None:  # checkpoints written before the state was saved restart from init_gap
            self.gap, self.update_counts = float(state["gap"]), dict(state["update_counts"])

    def _lightning_opts(self) -> list:
        opts = self.optimizers()
        return opts if isinstance(opts, list) else [opts]

    def _raw_opts(self) -> list[torch.optim.Optimizer]:
        return [getattr(o, "optimizer", o) for o in self._lightning_opts()]

    # ------------------------------------------------------------------------------------------- losses
    def losses(self, x: Tensor) -> dict[str, Tensor]:
        hp, m = self.hparams, self.model
        z = m.sample_z(len(x), x.device)
        x_gen = m.generator(z)
        score_t, score_f = m.discriminator(x), m.discriminator(x_gen)
        e_t, e_f = L.energy(score_t, hp.energy_form), L.energy(score_f, hp.energy_form)
        out = {"e_t": e_t.mean(), "e_f": e_f.mean()}
        if hp.variant == "gan":  # P(real|x) = σ(−E)
            loss_d = F.softplus(e_t).mean() + F.softplus(-e_f).mean()
            loss_g = F.softplus(e_f).mean()
        else:
            if hp.margin is None:
                loss_d = e_t.mean() - e_f.mean()
            else:  # a fake sample stops pushing once its cost exceeds the real mean by the margin
                loss_d = torch.clamp(e_t.mean() - e_f, min=-hp.margin).mean()
            loss_g = e_f.mean()
            if hp.variant in ("egan_ent_nn", "egan_ent_mix"):
                w = 1.0 - hp.mix_reg_cst if hp.variant == "egan_ent_mix" else 1.0
                out["nn"] = L.knn_entropy_surrogate(x_gen, hp.nn_k, hp.nn_alpha, hp.nn_normalize)
                loss_g = loss_g + w * out["nn"]
            if hp.variant in ("egan_ent_vi", "egan_ent_mix"):
                w = hp.mix_reg_cst if hp.variant == "egan_ent_mix" else hp.vi_weight
                mu, log_sigma = m.inference(x_gen)
                out["vi"] = L.gaussian_nll(z, mu, log_sigma, hp.vi_logsigma_coef, eps=1e-6)
                loss_g = loss_g + w * out["vi"]
        if hp.smooth:
            loss_d = loss_d + hp.smooth * (score_f.pow(2).mean() + score_t.pow(2).mean())
        if hp.l2:
            loss_d = loss_d + hp.l2 * sum(p.pow(2).sum() for p in m.discriminator.parameters())
            loss_g = loss_g + hp.l2 * sum(p.pow(2).sum() for p in m.generator.parameters())
        out.update(loss_d=loss_d, loss_g=loss_g)
        return out

    def _step_with(self, opt: torch.optim.Optimizer, params: list[Tensor], grads: tuple[Tensor, ...]) -> None:
        if self.hparams.grad_clip_norm is not None:
            total = torch.sqrt(sum(g.pow(2).sum() for g in grads))
            scale = min(1.0, self.hparams.grad_clip_norm / (float(total) + 1e-6))
            grads = tuple(g * scale for g in grads)
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
        opt.zero_grad(set_to_none=True)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        hp = self.hparams
        out = self.losses(batch["x"])
        if not (torch.isfinite(out["loss_d"]) and torch.isfinite(out["loss_g"])):
            self.trainer.should_stop = True
            pl.utilities.rank_zero_warn(f"CEGAN: non-finite loss at epoch {self.current_epoch}, step {batch_idx}; "
                                        "stopped before the update (last checkpoint keeps the last finite weights).")
            return
        if hp.schedule == "all" or (hp.force_all_first_epoch and self.current_epoch == 0):
            mode = "all"
        else:
            mode = choose_update(self.gap, hp.lbound, hp.rbound)
        self.gap = float(out["loss_d"].detach())
        self.update_counts[mode] += 1
        opts = self._raw_opts()
        # the iteration's first update goes through Lightning, which counts it as the one global step of this batch
        first = 0 if mode in ("all", "d_only") else 1
        opts[first] = self._lightning_opts()[first]
        d_params = [p for p in self.model.discriminator.parameters() if p.requires_grad]
        g_nets = [self.model.generator] + ([self.model.inference] if self.model.inference is not None else [])
        g_params = [[p for p in net.parameters() if p.requires_grad] for net in g_nets]
        if mode in ("all", "d_only"):
            grads_d = torch.autograd.grad(out["loss_d"], d_params, retain_graph=mode == "all")
        if mode in ("all", "g_only"):
            flat = [p for ps in g_params for p in ps]
            grads_g = torch.autograd.grad(out["loss_g"], flat, allow_unused=True)
            grads_g = [torch.zeros_like(p) if g is None else g for p, g in zip(flat, grads_g)]
        if mode in ("all", "d_only"):
            self._step_with(opts[0], d_params, grads_d)
        if mode in ("all", "g_only"):
            start = 0
            for opt, ps in zip(opts[1:], g_params):
                self._step_with(opt, ps, tuple(grads_g[start:start + len(ps)]))
                start += len(ps)
        if self._logs_flush_now():
            self.log_dict({**{f"train/{k}": v.detach() for k, v in out.items()}, "train/loss": out["loss_d"].detach(),
                           **{f"train/n_{k}": float(v) for k, v in self.update_counts.items()}})

    def _logs_flush_now(self) -> bool:
        """Whether Lightning writes this step's logged values (every ``trainer.log_every_n_steps``, and on stop).
        Step values logged on other steps are overwritten unread, yet ``self.log`` cost as much as the 2-D
        networks' forward and backward passes together, so they are not logged."""
        trainer = self._trainer
        # Lightning's own decision (a private attribute: if a release drops it, every step logs again)
        connector = getattr(trainer, "_logger_connector", None)
        return trainer is None or getattr(connector, "should_update_logs", True)

    # ------------------------------------------------------------------------------------------- evaluation
    @torch.no_grad()
    def energy_on(self, x: Tensor, batch: int = 10_000) -> Tensor:
        """Eval-mode energies (BN running statistics)."""
        was = self.model.training
        self.model.eval()
        e = torch.cat([L.energy(self.model.discriminator(x[i:i + batch].to(self.device)), self.hparams.energy_form)
                       for i in range(0, len(x), batch)])
        self.model.train(was)
        return e

    @torch.no_grad()
    def generate(self, n: int, batch: int = 10_000) -> Tensor:
        was = self.model.training
        self.model.eval()
        out = torch.cat([self.model.generator(self.model.sample_z(min(batch, n - i), self.device))
                         for i in range(0, n, batch)])
        self.model.train(was)
        return out

    def grid_report(self, data: np.ndarray, truth) -> dict[str, float]:
        """The ten pairwise KLs of Table B.2 on the 100×100 canvas, plus the cell arrays for plotting."""
        hp = self.hparams
        cells, axes = make_canvas(data, hp.grid)
        p = {"emp": histogram_on_grid(data, axes),
             "gen": histogram_on_grid(self.generate(hp.n_eval_generated).cpu().numpy(), axes),
             "data": grid_softmax(truth.log_density(cells)),
             "disc": grid_softmax(-self.energy_on(torch.from_numpy(cells).float()).cpu().double().numpy())}
        report = grid_kls(p, hp.kl_floor)
        self._last_grid = (cells, axes, p)
        return report

    def mode_energy_gap(self, truth) -> float | None:
        """Energy at the lightest mixture component's mean minus at the heaviest's (biased 2-GMM: the
        calibrated value is log(0.9/0.1) = 2.20); None when the weights are equal."""
        w = np.asarray(truth.weights)
        if np.allclose(w, w[0]):
            return None
        e = self.energy_on(torch.from_numpy(truth.means[[w.argmin(), w.argmax()]].astype(np.float32))).cpu()
        return float(e[0] - e[1])

    def ranking_spearman(self, x_train: Tensor, x_test: Tensor) -> float:
        """Spearman correlation between the energy of held-out real images and their distance to the mean
        training image (a stand-in for the NIST ranking of Dai thesis App. B.5.2): positive = typical digits get low
        energy."""
        e = self.energy_on(x_test).cpu().numpy()
        dist = (x_test - x_train.mean(0)).flatten(1).norm(dim=1).cpu().numpy()
        return spearman(e, dist)

    def _log_grid(self, prefix: str) -> None:
        dm: Toy2DData | OneClassImageData | None = datamodule_of(self)
        if dm is None or self.trainer.sanity_checking:
            return
        if hasattr(dm, "x_train") and hasattr(dm, "x_test"):  # one-class images: the energy ranking
            self.log(f"{prefix}/rank_spearman", self.ranking_spearman(dm.x_train, dm.x_test))
        if not hasattr(dm, "truth"):
            return
        report = self.grid_report(dm.x.numpy(), dm.truth)
        gap = self.mode_energy_gap(dm.truth)
        if gap is not None:
            report["mode_energy_gap"] = gap
        self.log_dict({f"{prefix}/{k}": v for k, v in report.items()})

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        pass

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        pass

    def on_validation_epoch_end(self) -> None:
        self._log_grid("valid")

    def on_test_epoch_end(self) -> None:
        self._log_grid("test")
