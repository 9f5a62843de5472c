"""CEGAN evaluation statistics (Dai's thesis App. B: the grid evaluation of Table B.2, B.8.2; the rank correlation
of the digit ranking, B.5.2; the Inception Score formula)."""

import numpy as np
import pytest

from genlab.data.synthetic.toy2d import gmm4
from genlab.metrics.cegan_metrics import (
    KL_PAIRS,
    grid_kls,
    grid_softmax,
    histogram_on_grid,
    inception_score,
    kl,
    make_canvas,
    spearman,
)


def test_grid_evaluation():
    x, truth = gmm4(100_000)
    cells, axes = make_canvas(x, 100)
    assert cells.shape == (10_000, 2)
    for d in range(2):
        lo, hi = x[:, d].min(), x[:, d].max()
        half = (hi - lo) / 2
        assert axes[d, 0] == pytest.approx(lo - half / 2) and axes[d, -1] == pytest.approx(hi + half / 2)
    p_emp = histogram_on_grid(x, axes)
    assert p_emp.sum() == pytest.approx(1.0)
    c = np.random.RandomState(0).randn(10_000)
    assert np.allclose(grid_softmax(-c), grid_softmax(-(c + 7.0)))
    assert kl(p_emp, p_emp) == pytest.approx(0.0, abs=1e-12)
    p_data = grid_softmax(truth.log_density(cells))
    assert 0 < kl(p_data, p_emp) < 0.1  # Table B.2 reports 0.0291 for the 100K-sample 4-GMM


def test_ten_pairwise_kls_of_table_b2():
    rng = np.random.RandomState(0)
    p = {k: rng.dirichlet(np.ones(25)) for k in ("emp", "gen", "data", "disc")}
    report = grid_kls(p, floor=1e-10)
    assert len(KL_PAIRS) == len(set(KL_PAIRS)) == len(report) == 10
    assert report["kl_disc_data"] == pytest.approx(kl(p["disc"], p["data"]))
    assert grid_kls({k: p["emp"] for k in p}) == {k: pytest.approx(0.0, abs=1e-12) for k in report}


def test_spearman_sign():
    assert spearman(np.arange(5.0), np.arange(5.0) ** 3) == pytest.approx(1.0)
    assert spearman(np.arange(5.0), -np.arange(5.0)) == pytest.approx(-1.0)


def test_inception_score_formula_with_stub_classifier():
    confident = np.eye(10)[np.tile(np.arange(10), 50)]  # each class equally often, one-hot predictions
    mean, std = inception_score(confident, splits=10)
    assert mean == pytest.approx(10.0, rel=1e-6) and std == pytest.approx(0.0, abs=1e-6)
    same = np.tile(np.eye(10)[3], (500, 1))
    assert inception_score(same, splits=5)[0] == pytest.approx(1.0, rel=1e-6)
