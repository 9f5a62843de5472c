"""PixelCNN++: causality (a pixel's log-likelihood ignores later pixels), normalisation of the discretised
logistic mixture on tiny images (grey and RGB), shapes of the MNIST configuration."""

import itertools

import pytest
import torch

from genlab.models.pixelcnn_pp import PixelCNNPP


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny convs: threads only add contention on the shared machine
    yield
    torch.set_num_threads(n)


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
