"""Bad-GAN 2-D case study (Yang's thesis §3.1.4, Figs. 3.3-3.4): complement generator on four spins, feature matching
with a 2-D feature space on two circles, each trained by train.py from its preset (bad_gan_toy2d_*) and scored from
the run directory by genlab.analysis.complement_gan_2d."""

import statistics

import numpy as np
import pytest
import torch

from genlab.analysis.complement_gan_2d import (
    CIRCLES,
    SPINS,
    boundary_in_fake_region,
    features_between,
    train_and_evaluate,
)
from genlab.data.synthetic.ssl_toy2d import complement_sample
from genlab.data.synthetic.toy2d import four_spins, two_circles


def test_toy_generators_shapes_and_classes():
    x, y = four_spins(2000, seed=0)
    assert x.shape == (2000, 2) and np.bincount(y).tolist() == [500] * 4
    r = np.linalg.norm(x, axis=1)  # u1 = 1 + 0.22 eps: the radius stays near 1
    assert 0.9 < np.median(r) < 1.1
    x, y = two_circles(2000, seed=0)
    r = np.linalg.norm(x, axis=1)
    assert abs(np.median(r[y == 0]) - 1.0) < 0.02 and abs(np.median(r[y == 1]) - 0.5) < 0.02


def test_complement_sample_is_in_the_box_and_off_the_data():
    x = torch.from_numpy(four_spins(2000, seed=1)[0])
    g = complement_sample(x, 5000, torch.Generator().manual_seed(0), box_margin=0.2, delta=0.3)
    assert g.shape == (5000, 2)
    assert torch.cdist(g, x).min() >= 0.3
    assert (g >= x.min(0).values - 0.2).all() and (g <= x.max(0).values + 0.2).all()
    # uniform over what is left: both halves of the box are populated
    assert (g[:, 0] < 0).float().mean().item() == pytest.approx(0.5, abs=0.1)


def test_boundary_statistic_on_constructed_logits():
    n = 4
    # class 0 on the left half, class 1 on the right; the two middle columns are "fake" (all logits < 0)
    logits = torch.zeros(n, n, 2)
    logits[:2, :, 0], logits[2:, :, 1] = 1.0, 1.0
    logits[1, :, :] -= 5.0
    logits[2, :, :] -= 5.0
    assert boundary_in_fake_region(logits.view(-1, 2), n) == 1.0
    logits[1, :, :] += 10.0  # the left boundary column is now confidently real
    assert boundary_in_fake_region(logits.view(-1, 2), n) == 0.5


def test_features_between_counts_projection_inside_segment():
    f_real = torch.tensor([[0.0, 0.0], [0.0, 0.0], [2.0, 0.0], [2.0, 0.0]])
    y = torch.tensor([0, 0, 1, 1])
    f_gen = torch.tensor([[1.0, 5.0], [0.5, -1.0], [3.0, 0.0], [-1.0, 0.0]])
    assert features_between(f_real, y, f_gen) == 0.5


def test_complement_generator_one_seed(tmp_path):
    """CI-sized four-spins claim: one seed, full budget; the boundary statistic is the discriminating one."""
    comp = train_and_evaluate(SPINS, 0, tmp_path)
    sup = train_and_evaluate(SPINS, 0, tmp_path, supervised=True)
    assert comp.accuracy >= 0.97
    assert comp.boundary_fake >= 0.70
    assert sup.boundary_fake <= 0.10


@pytest.mark.slow
def test_complement_generator_four_spins_five_seeds(tmp_path):
    """The Fig. 3.3 claim in full: 5 seeds, median accuracy >= 0.97, every seed >= 0.90, beats supervised-only in
    >= 3 of 5, >= 70 % of class-change grid points in the fake region (supervised-only ~0 %)."""
    comp = [train_and_evaluate(SPINS, s, tmp_path) for s in range(5)]
    sup = [train_and_evaluate(SPINS, s, tmp_path, supervised=True) for s in range(5)]
    accs = [r.accuracy for r in comp]
    assert statistics.median(accs) >= 0.97
    assert min(accs) >= 0.90
    assert sum(c.accuracy > s.accuracy for c, s in zip(comp, sup)) >= 3
    # a pilot run measured 79-91 % per seed; one seed may fall below, so the 70 % bar is on the median, with a floor
    assert statistics.median(r.boundary_fake for r in comp) >= 0.70
    assert min(r.boundary_fake for r in comp) >= 0.60
    assert all(r.boundary_fake <= 0.10 for r in sup)


def test_two_circles_feature_matching_with_2d_features(tmp_path):
    """Fig. 3.4: with a 2-D feature layer, FM-generated features lie mostly between the two classes'
    features, D separates true from fake well, and the class boundary is (near) perfect and lies in the fake
    region."""
    fm = train_and_evaluate(CIRCLES, 0, tmp_path)
    assert fm.accuracy >= 0.97
    assert fm.boundary_fake >= 0.70
    assert fm.extra["true_fake_acc"] >= 0.75
    assert fm.extra["gen_between"] >= 0.70
