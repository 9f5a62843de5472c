"""CEGAN (Dai's thesis §6.2, App. B): the tabular calibration theory (Eq. B.1, B.5, B.6, B.20), the nearest-neighbour
entropy surrogate, loss signs, the VI NLL, energy forms, margin, the released code's gap scheduler, shapes and a small
2-D behaviour on the biased mixture (App. B.5.1); the grid evaluation of Table B.2 is in
tests/metrics/test_cegan_metrics.py."""

from functools import partial

import numpy as np
import pytest
import torch

from genlab.data.synthetic.toy2d import biased_gmm2, gmm4, two_spirals
from genlab.models.cegan import (
    CEGAN,
    ConvEnergy28,
    ConvEnergy32,
    ConvGenerator28,
    ConvGenerator32,
    MLPEnergy,
    MLPGenerator,
    MLPInference,
)
from genlab.tasks import gan_losses as L
from genlab.tasks.cegan import CEGANTask, choose_update


def softmax(a):
    e = np.exp(a - a.max())
    return e / e.sum()


def tabular_gda(p_data, lr_theta, lr_c, steps, entropy=True):
    """Simultaneous descent on θ (p_gen = softmax θ) and ascent on c of Σp c − Σp_data c + K(p)."""
    theta, c = np.zeros_like(p_data), np.zeros_like(p_data)
    for _ in range(steps):
        p = softmax(theta)
        g = c + (np.log(p) + 1.0 if entropy else 0.0)  # ∂L/∂p
        grad_theta = p * (g - p @ g)  # softmax Jacobian
        grad_c = p - p_data
        theta, c = theta - lr_theta * grad_theta, c + lr_c * grad_c
        if not np.isfinite(theta).all():
            break
    return softmax(theta), c


def test_tabular_cegan_converges_to_negative_log_density():
    p_data = np.random.RandomState(0).dirichlet(np.ones(6))
    p, c = tabular_gda(p_data, 2.0, 0.5, 20_000)
    assert np.sum(p_data * np.log(p_data / p)) < 1e-6
    spread = c + np.log(p_data)
    assert spread.max() - spread.min() < 1e-3


@pytest.mark.parametrize("lr_c,lr_theta", [(0.5, 2.0), (0.05, 0.5)])
def test_tabular_without_entropy_does_not_calibrate(lr_c, lr_theta):
    p_data = np.random.RandomState(0).dirichlet(np.ones(6))
    p, c = tabular_gda(p_data, lr_theta, lr_c, 20_000, entropy=False)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_value = np.sum(p_data * np.log(p_data / p))
    assert not kl_value < 1e-2
    corr = np.corrcoef(c, -np.log(p_data))[0, 1] if np.isfinite(c).all() and c.std() > 0 else 0.0
    assert corr < 0.9


def test_best_response_is_boltzmann():
    rng = np.random.RandomState(1)
    c = rng.randn(7)
    best = softmax(-c)
    value = lambda p: p @ c + p @ np.log(p)  # noqa: E731
    assert value(best) == pytest.approx(-np.log(np.exp(-c).sum()), abs=1e-12)
    for _ in range(200):
        assert value(rng.dirichlet(np.ones(7))) >= value(best) - 1e-12


def project_simplex(v):
    u = np.sort(v)[::-1]
    css = np.cumsum(u)
    rho = np.nonzero(u * np.arange(1, len(v) + 1) > (css - 1))[0][-1]
    return np.maximum(v - (css[rho] - 1) / (rho + 1.0), 0)


def test_l2_calibrator_gives_negative_density():
    p_data = np.random.RandomState(0).dirichlet(np.ones(6))
    p, c = np.full(6, 1 / 6), np.zeros(6)
    for _ in range(50_000):
        p, c = project_simplex(p - 0.5 * (c + p)), c + 0.5 * (p - p_data)
    d = c + p_data
    assert d.max() - d.min() < 1e-6


def test_ebgan_pointwise_optimum():
    m = 10.0
    cs = np.linspace(0, 20, 2001)
    for p_gen, p_data, expected in [(0.2, 0.5, 0.0), (0.6, 0.3, m)]:
        obj = p_gen * np.minimum(0, cs - m) - p_data * cs
        assert cs[obj.argmax()] == pytest.approx(expected)


# ------------------------------------------------------------------------------------------- k-NN entropy
def test_knn_neighbours_exclude_self_and_count_k():
    torch.manual_seed(0)
    x = torch.randn(30, 2)
    x[1] = x[0]  # a duplicate: another index at distance 0
    k = 5
    d = L.knn_entropy_direction(x, k=k, normalize="unit")
    dist = torch.cdist(x, x)
    dist.fill_diagonal_(float("inf"))
    idx = dist.topk(k, largest=False).indices
    assert (idx != torch.arange(30)[:, None]).all()
    mu = x[idx].mean(1)
    expected = (mu - x) / (mu - x).norm(dim=1, keepdim=True)
    assert torch.allclose(d, expected, atol=1e-5)
    assert torch.allclose(d.norm(dim=1), torch.ones(30), atol=1e-5)


def test_knn_surrogate_gradient_is_alpha_d_and_a_sum():
    torch.manual_seed(0)
    x = torch.randn(40, 3, requires_grad=True)
    alpha = 0.3
    loss = L.knn_entropy_surrogate(x, k=6, alpha=alpha, normalize="unit")
    (grad,) = torch.autograd.grad(loss, x)
    d = L.knn_entropy_direction(x, k=6, normalize="unit")
    assert torch.allclose(grad, alpha * d)
    assert torch.allclose(loss, (alpha * d * x.detach()).sum())  # sum over the batch, not a mean


def test_knn_step_spreads_the_batch():
    torch.manual_seed(0)
    x = torch.randn(200, 2, requires_grad=True)
    det0 = torch.det(torch.cov(x.detach().t()))
    for normalize in ("unit", "var"):
        (grad,) = torch.autograd.grad(L.knn_entropy_surrogate(x, 20, 0.05, normalize), x)
        x1 = x.detach() - grad
        assert torch.det(torch.cov(x1.t())) > det0


# ---------------------------------------------------------------------------------------- task pieces
def toy_task(variant="egan_const", **kw):
    torch.manual_seed(0)
    inf = MLPInference(2, (32,), 4) if variant in ("egan_ent_vi", "egan_ent_mix") else None
    model = CEGAN(MLPGenerator(4, (32, 32), 2), MLPEnergy(2, (32, 32)), inf)
    return CEGANTask(model, partial(torch.optim.Adam, lr=1e-3, betas=(0.0, 0.999)), variant=variant, **kw)


def test_d_step_lowers_gap_and_g_step_lowers_fake_energy():
    task = toy_task("egan_const", nn_k=5)
    x = torch.randn(64, 2) + 3
    d, g = task.model.discriminator, task.model.generator
    opt_d = torch.optim.SGD(d.parameters(), lr=1e-2)
    opt_g = torch.optim.SGD(g.parameters(), lr=1e-2)
    torch.manual_seed(1)
    before = task.losses(x)
    opt_d.zero_grad()
    before["loss_d"].backward()
    opt_d.step()
    torch.manual_seed(1)
    after = task.losses(x)
    assert float((after["e_t"] - after["e_f"]).detach()) < float((before["e_t"] - before["e_f"]).detach())
    torch.manual_seed(2)
    b = task.losses(x)
    opt_g.zero_grad()
    b["loss_g"].backward()
    opt_g.step()
    torch.manual_seed(2)
    assert float(task.losses(x)["e_f"]) < float(b["e_f"])


def test_vi_nll_code_formula_and_isolation():
    z, mu, ls = torch.randn(5, 4), torch.randn(5, 4), torch.randn(5, 4) * 0.3
    code = (0.5 * ls.sum(1) + 0.5 * ((z - mu) / (1e-6 + ls.exp())).pow(2).sum(1)).mean()
    assert torch.allclose(L.gaussian_nll(z, mu, ls, 0.5, 1e-6), code)
    exact = -torch.distributions.Normal(mu, ls.exp()).log_prob(z).sum(1).mean() - 2 * np.log(2 * np.pi)
    assert torch.allclose(L.gaussian_nll(z, mu, ls, 1.0, 0.0), exact, atol=1e-5)
    task = toy_task("egan_ent_vi")
    out = task.losses(torch.randn(32, 2))
    q = list(task.model.inference.parameters())
    g_q_energy = torch.autograd.grad(out["e_f"], q, allow_unused=True, retain_graph=True)
    assert all(g is None for g in g_q_energy)  # energy terms never reach q
    grads = torch.autograd.grad(out["vi"], q + list(task.model.generator.parameters()), allow_unused=True)
    assert all(g is not None for g in grads[: len(q)]) and any(g is not None for g in grads[len(q):])


def test_energy_forms():
    s = torch.linspace(-5, 5, 11)
    soft = L.energy(s, "softplus")
    assert (soft >= 0).all() and (soft[1:] < soft[:-1]).all()
    assert torch.equal(L.energy(s, "identity"), s)


def test_margin_stops_far_fakes():
    task = toy_task("egan_const", margin=10.0)
    x = torch.randn(16, 2)
    out_d = task.model.discriminator
    with torch.no_grad():
        out_d.out.bias.fill_(0.0)
    # push fake energies far above the real mean: constant offset via a hook on fake inputs
    real_mean = float(out_d(x).mean())
    fakes = torch.randn(8, 2, requires_grad=True)
    e_f = out_d(fakes) + torch.tensor([20.0] * 4 + [0.0] * 4)
    loss = torch.clamp(real_mean - e_f, min=-10.0).mean()
    (grad,) = torch.autograd.grad(loss, fakes)
    far = (real_mean - e_f.detach()) < -10
    assert far[:4].all() and (grad[far] == 0).all() and (grad[~far].abs().sum() > 0)


def test_gap_scheduler():
    gaps = [-20, -1, 0.05, 0.2]
    assert [choose_update(g, -10, 0.1) for g in gaps] == ["g_only", "all", "all", "d_only"]
    assert [choose_update(g, -0.2, 0.1) for g in gaps] == ["g_only", "g_only", "all", "d_only"]


def test_data_generators_match_spec():
    x, truth = biased_gmm2(10_000)
    heavy = (x.sum(1) < 0).mean()
    assert 0.88 < heavy < 0.92 and truth.means[1, 0] < 0
    xs, tr = two_spirals(20_000, n_components=100)
    assert xs.shape == (20_000, 2) and len(tr.means) == 100


@pytest.mark.parametrize("dataset", ["gmm4", "biased_gmm2", "two_spirals"])
def test_fewer_points_keep_the_papers_mixture(dataset):
    """A mini's n_train points are a subset of the paper's 100,000, so its mixture is the paper's: drawing 20,000
    points directly gives the 4-GMM other covariances (the code draws them between the components' samples)."""
    from genlab.data.synthetic.toy2d import Toy2DDataModule

    full, mini = Toy2DDataModule(dataset), Toy2DDataModule(dataset, n_train=20_000)
    full.setup(), mini.setup()
    assert len(mini.x) == 20_000 and len(full.x) == 100_000
    for a, b in [(full.truth.means, mini.truth.means), (full.truth.variances, mini.truth.variances)]:
        np.testing.assert_array_equal(a, b)
    assert np.isin(mini.x[:, 0].numpy(), full.x[:, 0].numpy()).all()
    if dataset == "gmm4":
        assert not np.allclose(gmm4(20_000)[1].variances, full.truth.variances)

def test_shapes():
    g, d = ConvGenerator28(), ConvEnergy28()
    x = g(torch.randn(3, 10))
    assert x.shape == (3, 1, 28, 28) and (x > 0).all() and (x < 1).all()
    assert d(x).shape == (3,)
    g32, d32 = ConvGenerator32(), ConvEnergy32()
    y = g32(torch.rand(2, 100) * 2 - 1)
    assert y.shape == (2, 3, 32, 32) and y.abs().max() < 1
    assert d32.trunk(y).shape == (2, 256, 4, 4) and d32(y).shape == (2,)
    q = ConvEnergy32(out_dim=200)
    assert q(y).shape == (2, 200)


@pytest.mark.slow
def test_biased_gmm_entropy_orders_the_modes():
    """Soft: on the biased 2-GMM (20,000 points, 20 epochs) EGAN-Ent-NN gives the heavy
    (0.9) mode a lower energy than the light (0.1) mode by > 0.5. Several minutes on a shared CPU."""
    import pytorch_lightning as pl

    from genlab.data.synthetic.toy2d import Toy2DDataModule

    pl.seed_everything(0)
    dm = Toy2DDataModule("biased_gmm2", n_train=20_000, batch_size=500)
    dm.setup()
    model = CEGAN(MLPGenerator(4, (128, 128), 2, init_std=0.001), MLPEnergy(2, (128, 128), init_std=0.01))
    task = CEGANTask(model, partial(torch.optim.Adam, lr=2e-4, betas=(0.0, 0.999)), variant="egan_ent_nn",
                     nn_alpha=3e-4, nn_normalize="var", margin=10.0, lbound=-0.2, lr_decay=0.985)
    pl.Trainer(max_epochs=20, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
               limit_val_batches=0).fit(task, datamodule=dm)
    e_light, e_heavy = task.energy_on(torch.from_numpy(dm.truth.means.astype(np.float32))).tolist()
    assert e_light - e_heavy > 0.5


def _fit_toy(epochs, max_steps=-1, **kw):
    import pytorch_lightning as pl

    from genlab.data.synthetic.toy2d import Toy2DDataModule

    dm = Toy2DDataModule("gmm4", n_train=2000, batch_size=200)
    dm.setup()
    task = toy_task(**kw)
    trainer = pl.Trainer(max_epochs=epochs, max_steps=max_steps, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         limit_val_batches=0)
    trainer.fit(task, datamodule=dm)
    task.fitted_steps = trainer.global_step
    return task, dm


@pytest.mark.parametrize("schedule", [dict(schedule="all"), dict(init_gap=100.0, rbound=0.1),  # all / D first
                                      dict(init_gap=-100.0, lbound=-10.0)])  # G first
def test_max_steps_counts_one_step_per_iteration(schedule):
    """Whatever the gap scheduler updates (both nets, D only, G only), one training batch is one global step, so
    trainer.max_steps stops the run after that many iterations (it used to never stop)."""
    task, _ = _fit_toy(None, max_steps=13, variant="egan_ent_nn", nn_k=5, **schedule)  # 10 batches an epoch
    assert task.fitted_steps == 13 == sum(task.update_counts.values())


def test_first_epoch_forces_all_updates_then_gap_schedule():
    task, _ = _fit_toy(1, variant="egan_ent_nn", nn_k=5, force_all_first_epoch=True, init_gap=100.0)
    assert task.update_counts == {"all": 10, "d_only": 0, "g_only": 0}
    task, _ = _fit_toy(1, variant="egan_ent_nn", nn_k=5, init_gap=100.0, rbound=0.1, lbound=-10.0)
    assert task.update_counts["d_only"] >= 1  # the first step follows the gap (100 > rbound)


def test_training_run_and_grid_report_all_variants():
    for variant in ("gan", "egan_const", "egan_ent_nn", "egan_ent_vi"):
        task, dm = _fit_toy(1, variant=variant, nn_k=5, n_eval_generated=2000, grid=50)
        report = task.grid_report(dm.x.numpy(), dm.truth)
        assert len(report) == 10 and all(np.isfinite(v) and v >= 0 for v in report.values())
        assert all(torch.isfinite(p).all() for p in task.model.parameters())


def test_test_loop_logs_grid_kls_and_mode_gap():
    """train.py runs Trainer.test after fit: the grid KLs (and, with unequal weights, the mode energy gap) are
    logged under test/ so genlab-report can tabulate them."""
    import pytorch_lightning as pl

    from genlab.data.synthetic.toy2d import Toy2DDataModule

    dm = Toy2DDataModule("biased_gmm2", n_train=2000, batch_size=200)
    task = toy_task("egan_ent_nn", nn_k=5, n_eval_generated=2000, grid=40)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer.fit(task, datamodule=dm)
    out = trainer.test(task, datamodule=dm, verbose=False)[0]
    assert {f"test/kl_{a}_{b}" for a, b in [("disc", "data"), ("gen", "emp")]} <= set(out)
    light, heavy = task.energy_on(torch.from_numpy(dm.truth.means.astype(np.float32))).tolist()  # weights 0.1, 0.9
    assert out["test/mode_energy_gap"] == pytest.approx(light - heavy, abs=1e-5)
    assert task.mode_energy_gap(gmm4(200)[1]) is None  # equal weights: no light/heavy mode


def test_ranking_spearman_sign():
    """Check 18's statistic: an energy equal to the distance to the mean training image ranks perfectly (+1);
    its negation gives -1."""
    task = toy_task("egan_const")
    x_train = torch.randn(50, 2)
    x_test = torch.randn(30, 2)
    task.model.discriminator = _DistanceEnergy(x_train.mean(0))  # score = squared distance to the mean
    assert task.ranking_spearman(x_train, x_test) == pytest.approx(1.0)


class _DistanceEnergy(torch.nn.Module):
    def __init__(self, mean):
        super().__init__()
        self.mean = mean

    def forward(self, x):
        return (x - self.mean).pow(2).sum(1)


def test_nist_preset_feeds_its_conv_nets_28x28_images(tmp_path, compose_cfg):
    """cegan_nist's MNIST data and its conv nets agree on the layout (the DataModule flattened the images, which
    ConvEnergy28 cannot take): a batch of the preset's data goes through the preset's losses."""
    from genlab.assemble import build_data, build_task
    from genlab.data.images.readers import write_idx

    rng = np.random.default_rng(0)
    for prefix, n in (("train", 24), ("t10k", 8)):
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", np.ones(n, np.uint8))
    cfg = compose_cfg(["experiment=cegan_nist", "data.source=path", f"data.path={tmp_path}", "data.batch_size=4",
                       "task.nn_k=2"])
    dm = build_data(cfg.data)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape == (4, 1, 28, 28)
    out = build_task(cfg, dm).losses(batch["x"])
    assert torch.isfinite(out["loss_d"]) and torch.isfinite(out["loss_g"])
