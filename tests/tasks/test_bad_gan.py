"""The bad GAN's task (Yang's thesis §3.1.5: the K-logit discriminator losses, FM, PT, VI, LD and Ent terms; the
monitored assumptions (A2)/(A3) of §3.1.3): loss algebra, update isolation, LR schedule, monitoring metrics, bad input (NaN loss, wrong
density checkpoint) and small end-to-end runs."""

import math
from functools import partial

import pytest
import pytorch_lightning as pl
import torch

from genlab.data.images.datamodule import SSLImageDataModule
from genlab.errors import CheckpointError, ConfigError
from genlab.models.bad_gan import BadGAN, MLPDiscriminator, MLPEncoder, MLPGenerator
from genlab.tasks import gan_losses as L
from genlab.tasks.bad_gan import BadGANTask, epoch_lr_factor


def k_plus_1(logits):
    return torch.cat([logits, torch.zeros(len(logits), 1, dtype=logits.dtype)], dim=1)


# ------------------------------------------------------------------------------------------------ 1-5: D loss
def test_k_logit_reparameterisation_gives_identical_probabilities():
    torch.manual_seed(0)
    for scale in (1.0, 80.0):
        l = (torch.randn(64, 10, dtype=torch.float64) * scale).clamp(-80, 80)
        y = torch.randint(0, 10, (64,))
        logp = torch.log_softmax(k_plus_1(l), dim=1)
        # supervised: CE on the K logits == -log P(y | x, y<=K) from the K+1-way model
        cond = logp[:, :10] - torch.logsumexp(logp[:, :10], dim=1, keepdim=True)
        assert torch.allclose(L.supervised_loss(l, y), -cond.gather(1, y[:, None]).mean(), atol=1e-5)
        assert torch.allclose(L.generated_fake_loss(l), -logp[:, 10].mean(), atol=1e-5)
        assert torch.allclose(L.unlabeled_real_loss(l), -torch.logsumexp(logp[:, :10], dim=1).mean(), atol=1e-5)
        for v in (L.generated_fake_loss(l.float()), L.unlabeled_real_loss(l.float())):
            assert torch.isfinite(v)


def test_fake_logit_pinned_at_zero():
    l = torch.randn(8, 10, requires_grad=True)
    y = torch.randint(0, 10, (8,))
    c = torch.zeros((), requires_grad=True)
    for fn, zero in ((lambda t: L.supervised_loss(t, y), True), (L.unlabeled_real_loss, False),
                     (L.generated_fake_loss, False)):
        (g,) = torch.autograd.grad(fn(l + c), c)
        assert (abs(float(g)) < 1e-6) == zero


def test_proposition1_construction_gives_half():
    l = torch.randn(16, 10, dtype=torch.float64) * 5
    l_star = torch.log_softmax(l, dim=1)
    p_fake = torch.softmax(k_plus_1(l_star), dim=1)[:, 10]
    assert torch.allclose(p_fake, torch.full_like(p_fake, 0.5), atol=1e-12)
    assert torch.allclose(torch.softmax(l_star, 1), torch.softmax(l, 1))


def test_a3_violation_band():
    l = torch.randn(10000, 10) * 3
    keep = torch.logsumexp(l, 1) >= 0
    assert (l[keep].max(1).values >= -math.log(10) - 1e-6).all()


def test_conditional_entropy_bounds_and_gradient():
    assert float(L.conditional_entropy(torch.zeros(3, 10))) == pytest.approx(math.log(10), abs=1e-6)
    one_hot = torch.full((3, 10), -50.0)
    one_hot[:, 2] = 50.0
    assert float(L.conditional_entropy(one_hot)) < 1e-6
    h = L.conditional_entropy(torch.randn(100, 10) * 3)
    assert 0 <= float(h) <= math.log(10)
    d = MLPDiscriminator(in_dim=16, hidden=(8,), n_classes=4)
    g = MLPGenerator(z_dim=4, hidden=(8,), out_dim=16)
    L.conditional_entropy(d(g(torch.rand(5, 4)).detach())[0]).backward()
    assert all(p.grad is None for p in g.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in d.parameters())


# --------------------------------------------------------------------------------------------- 6-9: G terms
def test_feature_matching_forms():
    a, b = torch.randn(20, 7), torch.randn(30, 7)
    assert float(L.feature_matching(a, a[torch.randperm(20)])) == pytest.approx(0.0, abs=1e-12)
    assert torch.allclose(L.feature_matching(a, b), L.feature_matching(a[torch.randperm(20)], b[torch.randperm(30)]))
    assert torch.allclose(L.feature_matching(a, b, "sq_mean"), L.feature_matching(a, b, "sq_sum") / 7)
    diff = a.mean(0) - b.mean(0)
    assert torch.allclose(L.feature_matching(a, b, "abs_mean"), diff.abs().mean())


def test_feature_matching_uses_last_hidden_layer_h():
    """FM of the task = FM between outputs of D's last hidden layer (250-d for MNIST, §2.5.1 row 5)."""
    torch.manual_seed(0)
    model = BadGAN(MLPDiscriminator(), MLPGenerator())
    task = make_task(model)
    x_unl = torch.rand(50, 784)
    feats = []
    hook = model.discriminator.trunk.register_forward_hook(lambda _m, _i, o: feats.append(o))
    torch.manual_seed(1)
    fm = task.g_loss(x_unl)["fm"]
    hook.remove()
    f_unl, f_gen = feats
    assert f_gen.shape == (50, 250) and isinstance(model.discriminator.trunk[-1], torch.nn.ReLU)
    assert torch.allclose(fm, L.feature_matching(f_gen, f_unl, "sq_mean"))


def test_pull_away_term_hand_computed():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # cos² pairs: (1,2)=0, (1,3)=1/2, (2,3)=1/2; ordered pairs sum = 2; / N(N-1) = 6
    assert float(L.pull_away_term(x)) == pytest.approx(1 / 3, abs=1e-6)
    assert float(L.pull_away_term(torch.ones(5, 3) * torch.arange(1.0, 6.0)[:, None])) == pytest.approx(1, abs=1e-6)
    assert float(L.pull_away_term(torch.eye(4))) == pytest.approx(0, abs=1e-7)
    r = torch.randn(6, 4)
    assert torch.allclose(L.pull_away_term(r), L.pull_away_term(r * torch.rand(6, 1) * 10 + 0.0), atol=1e-6)
    assert 0 <= float(L.pull_away_term(r)) <= 1


def test_vi_nll_closed_form_gradients_and_clamp():
    z = torch.tensor([[0.5, 1.0]])
    mu = torch.tensor([[0.0, 0.0]])
    ls = torch.tensor([[0.0, math.log(2.0)]])
    expected = math.log(2.0) + 0.5 * (0.25 + (1.0 / 2.0) ** 2)
    assert float(L.gaussian_nll(z, mu, ls)) == pytest.approx(expected, rel=1e-6)
    # with coefficient 1 it is -log N(z; mu, sigma²) minus D/2 log 2pi
    normal = torch.distributions.Normal(mu, ls.exp())
    assert float(L.gaussian_nll(z, mu, ls, eps=0.0)) == pytest.approx(
        float(-normal.log_prob(z).sum() - math.log(2 * math.pi)), rel=1e-6)
    clamped = L.gaussian_nll(z, mu, torch.tensor([[5.0, 5.0]]), sigma_max=1.0)
    assert float(clamped) == pytest.approx(0.5 * (0.25 + 1.0), rel=1e-5)
    g, enc = MLPGenerator(z_dim=4, hidden=(8,), out_dim=16), MLPEncoder(in_dim=16, hidden=(8,), z_dim=4)
    zz = torch.rand(6, 4)
    L.gaussian_nll(zz, *enc(g(zz))).backward()
    for net in (g, enc):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())


def test_low_density_threshold_and_gradient():
    ref = torch.randn(1000)
    t = L.density_threshold(ref, 10)
    assert float(t) == float(ref.sort().values[100])
    x = torch.tensor([1.0, -2.0, 3.0, 2.5], requires_grad=True)
    logp = -(x - 3.0) ** 2  # a toy differentiable log-density
    pen = L.low_density_penalty(logp, -2.0, weight=0.1)
    (grad,) = torch.autograd.grad(pen, x)
    active = (logp > -2.0).detach()
    assert active.tolist() == [False, False, True, True]
    expected = 0.1 / 2 * (-2 * (x.detach() - 3.0))
    assert torch.allclose(grad[active], expected[active]) and (grad[~active] == 0).all()
    assert float(L.low_density_penalty(torch.full((3,), -9.0), -2.0, 0.1)) == 0.0


class GaussianDensity(torch.nn.Module):
    """Stand-in density with a parameter, to check that LD never updates the density model."""

    def __init__(self):
        super().__init__()
        self.mean = torch.nn.Parameter(torch.zeros(1))

    def log_prob(self, x):
        return -0.5 * ((x - self.mean) ** 2).flatten(1).sum(1)


def test_ld_fires_only_after_start_and_with_probability_and_freezes_density(step_override):
    torch.manual_seed(0)
    density = GaussianDensity()
    model = BadGAN(MLPDiscriminator(in_dim=16, hidden=(8,)), MLPGenerator(z_dim=4, hidden=(8,), out_dim=16))
    task = make_task(model, ld_weight=1.0, ld_start_iter=5, ld_prob=0.25, ld_n_samples=6, density_model=density,
                     image_shape=[1, 4, 4])
    task.ld_threshold.fill_(-1e9)  # every sample active
    assert all(not p.requires_grad for p in density.parameters())
    fired = []
    for step in range(200):
        task._step_override = step
        fired.append("ld" in task.g_loss(torch.rand(8, 16)))
    assert not any(fired[:6])
    assert 0.15 < sum(fired[6:]) / len(fired[6:]) < 0.35
    opts = task.configure_optimizers()
    ids = {id(p) for o in opts for g in o.param_groups for p in g["params"]}
    assert not ids & {id(p) for p in density.parameters()}


def test_ld_threshold_scores_the_first_reference_images_when_bounded():
    model = BadGAN(MLPDiscriminator(in_dim=16, hidden=(8,)), MLPGenerator(z_dim=4, hidden=(8,), out_dim=16))
    density, reference = GaussianDensity(), torch.randn(50, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full, first = (L.density_threshold(density.log_prob(x * 2 - 1), 10) for x in (reference, reference[:20]))
    assert full != first
    for n, expected in ((None, full), (20, first)):
        task = make_task(model, ld_weight=1.0, density_model=density, image_shape=[1, 4, 4], ld_threshold_images=n)
        assert torch.allclose(task.density_threshold_of(reference), expected)
    with pytest.raises(ConfigError, match="ld_threshold_images=0"):
        make_task(model, ld_threshold_images=0)


# ------------------------------------------------------------------------------------------ helpers + 10, 15, 16
def make_task(model, **kw):
    task = BadGANTask(model, optimizer=partial(torch.optim.Adam, lr=3e-3, betas=(0.5, 0.9999)),
                      g_optimizer=partial(torch.optim.Adam, lr=1e-3, betas=(0.0, 0.9999)), **kw)
    return task


@pytest.fixture
def step_override(monkeypatch):
    """Outside a Trainer, let tests choose the iteration the task sees."""
    monkeypatch.setattr(BadGANTask, "global_step", property(lambda self: getattr(self, "_step_override", 0)))


def test_update_isolation():
    torch.manual_seed(0)
    model = BadGAN(MLPDiscriminator(in_dim=16, hidden=(8,)), MLPGenerator(z_dim=4, hidden=(8,), out_dim=16))
    task = make_task(model)
    opt_d, opt_g = task.configure_optimizers()
    task.manual_backward = lambda loss: loss.backward()
    batch = {"x_lab": torch.rand(10, 16), "y_lab": torch.arange(10), "x_unl": torch.rand(12, 16)}
    g_before = {k: v.clone() for k, v in model.generator.state_dict().items() if "running" not in k
                and "num_batches" not in k}
    task.d_step(batch, opt_d)
    for k, v in model.generator.state_dict().items():
        if k in g_before:
            assert torch.equal(v, g_before[k]), k
    d_before = {k: v.clone() for k, v in model.discriminator.state_dict().items()}
    model.discriminator.zero_grad(set_to_none=True)
    loss = task.g_loss(batch["x_unl"])["loss"]
    opt_g.zero_grad()
    loss.backward()
    opt_g.step()
    for k, v in model.discriminator.state_dict().items():
        assert torch.equal(v, d_before[k]), k
    assert all(p.grad is None for p in model.discriminator.parameters())  # D was frozen during the G loss


def test_lr_schedule_factors():
    E = 1200
    assert all(epoch_lr_factor(e, E) == 1.0 for e in (0, 400, 800))
    assert epoch_lr_factor(1000, E) == pytest.approx(0.5)
    assert epoch_lr_factor(1200, E) == 0.0 and epoch_lr_factor(1500, E) == 0.0
    assert max(1e-4, 1e-3 * epoch_lr_factor(899, 900)) == 1e-4  # SVHN floor


def test_monitoring_metrics_differ_as_in_a3_discussion():
    logits = torch.full((5, 10), -1.0)
    stats = L.true_fake_stats(logits, logits)
    assert float(stats["unl_acc"]) == 1.0 and float(stats["max_unl_acc"]) == 0.0


# ------------------------------------------------------------------------------------------- Trainer runs
def digits_model():
    return BadGAN(MLPDiscriminator(in_dim=64, hidden=(256, 128, 64)),
                  MLPGenerator(z_dim=32, hidden=(128, 128), out_dim=64))


def digits_dm(tmp_path, **kw):
    return SSLImageDataModule(dataset="digits", source="mini", cache_dir=str(tmp_path / "cache"), n_labeled=100,
                              seed=kw.pop("seed", 0), batch_size=100, labeled_batch_size=100, **kw)


def trainer(tmp_path, steps, **kw):
    return pl.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_progress_bar=False,
                      enable_model_summary=False, val_check_interval=kw.pop("val_check_interval", steps),
                      check_val_every_n_epoch=None, default_root_dir=str(tmp_path), **kw)


class NaNAfter(SSLImageDataModule):
    """Unlabelled images turn NaN from iteration 4 on: the loss goes NaN through the data."""

    def train_dataloader(self):
        base = super().train_dataloader()

        def gen():
            for i, batch in enumerate(base):
                if i >= 4:
                    batch = dict(batch, x_unl=torch.full_like(batch["x_unl"], float("nan")))
                yield batch

        return gen()


def test_nan_loss_stops_cleanly_and_keeps_last_good_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = digits_model()
    task = make_task(model, init_batches=2)
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True, every_n_train_steps=1)
    with pytest.warns(UserWarning, match="the discriminator loss became nan"):
        trainer(tmp_path, 50, callbacks=[ckpt], val_check_interval=1000, num_sanity_val_steps=0).fit(
            task, datamodule=NaNAfter(dataset="digits", source="mini", cache_dir=str(tmp_path / "cache"),
                                      n_labeled=100, batch_size=100))
    assert task.stopped_on_nan and task.global_step == 4
    state = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["state_dict"]
    assert all(torch.isfinite(v).all() for k, v in state.items() if k.startswith("model."))
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_short_digits_run_trains_and_reports(tmp_path):
    torch.manual_seed(0)
    task = make_task(digits_model())
    dm = digits_dm(tmp_path)
    trainer(tmp_path, 150, num_sanity_val_steps=0).fit(task, datamodule=dm)
    assert bool(task.initialised)
    assert task.global_step == 150  # one Lightning step per GAN iteration
    assert task.best_err < 40.0  # well below chance (90 %) after 150 iterations with 10 labels per class


def test_wrong_density_checkpoint_image_size(tmp_path):
    from genlab.models.pixelcnn_pp import PixelCNNPP
    from genlab.tasks.bad_gan import load_density_model

    cfg = dict(in_channels=1, n_filters=8, n_resnet=1, n_mix=2, n_stages=2)
    torch.save({"density_model": {"image_shape": [1, 8, 8], "config": cfg,
                                  "state_dict": PixelCNNPP(**cfg).state_dict()}}, tmp_path / "d.ckpt")
    with pytest.raises(CheckpointError, match=r"shape \[1, 8, 8\] but this run generates \[1, 28, 28\]"):
        load_density_model(str(tmp_path / "d.ckpt"), [1, 28, 28])
    assert load_density_model(str(tmp_path / "d.ckpt"), [1, 8, 8]) is not None
    with pytest.raises(ConfigError, match="density_ckpt"):
        make_task(digits_model(), ld_weight=1e-2)


@pytest.mark.slow
def test_mnist5k_bad_gan_beats_supervised_by_5_points(tmp_path):
    """The SSL gain (one seed; experiments/bad_gan/README.md runs 3 through train.py -m): FM bad GAN vs the
    same D trained on the 100 labels only, 1,400 iterations each, on the 5,000 real MNIST digits. ~15-30 min on a
    shared CPU."""
    errs = {}
    for mode in ("fm", "supervised"):
        pl.seed_everything(0)
        dm = SSLImageDataModule(dataset="mnist5k", source="mini", cache_dir=str(tmp_path / "cache"), n_labeled=100,
                                seed=0, batch_size=100, labeled_batch_size=100)
        task = make_task(BadGAN(MLPDiscriminator(), MLPGenerator()), supervised_only=(mode == "supervised"))
        trainer(tmp_path, 1400, val_check_interval=200, num_sanity_val_steps=0,
                enable_checkpointing=False).fit(task, datamodule=dm)
        errs[mode] = float(task.trainer.callback_metrics["valid/err"])  # final, not best-on-test
        if mode == "fm":
            m = task.trainer.callback_metrics
            assert m["valid/unl_acc"] >= 0.65 and m["valid/gen_acc"] <= 0.30
            assert m["valid/max_unl_acc"] >= 0.60 and 1 - m["valid/max_gen_acc"] >= 0.80
    assert errs["supervised"] - errs["fm"] >= 5.0, errs


def test_data_init_covers_encoder_without_generator_init():
    """MNIST FM+VI: D is initialised on unlabelled images, the encoder head on generated images, G is not."""
    torch.manual_seed(0)
    model = BadGAN(MLPDiscriminator(in_dim=16, hidden=(8,)), MLPGenerator(z_dim=4, hidden=(8,), out_dim=16),
                   MLPEncoder(in_dim=16, hidden=(8,), z_dim=4))
    task = make_task(model, enc_optimizer=partial(torch.optim.Adam, lr=1e-3), vi_weight=1e-2)
    g_head = model.generator.net[-2].weight_g.detach().clone()
    e_head = model.encoder.net[-1].weight_g.detach().clone()
    task._data_init([torch.rand(50, 16)])
    assert torch.equal(model.generator.net[-2].weight_g, g_head)
    assert not torch.equal(model.encoder.net[-1].weight_g, e_head)
    assert bool(task.initialised)
