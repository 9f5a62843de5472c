"""Bad-GAN networks (the MNIST, SVHN and CIFAR-10 D/G/encoders of the authors' released code): weight norm +
data-dependent init, parameter counts, shapes, eval mode."""

import pytest
import torch

from genlab.models.bad_gan import (
    ConvDiscriminator,
    ConvEncoder,
    ConvGenerator,
    MLPDiscriminator,
    MLPEncoder,
    MLPGenerator,
)
from genlab.nn.gan_layers import WN_TYPES, GaussianNoise, WNConv2d, WNLinear, data_dependent_init


def counts(module):
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    g_buffers = sum(b.numel() for n, b in module.named_buffers() if n.endswith("weight_g"))
    return trainable, g_buffers


def test_weight_norm_rows_have_norm_g():
    layer = WNLinear(7, 5, train_scale=True)
    with torch.no_grad():
        layer.weight_g.copy_(torch.arange(1.0, 6.0))
    norms = layer.weight().norm(dim=1)
    assert torch.allclose(norms, torch.arange(1.0, 6.0), rtol=1e-3)  # 1e-6 inside the norm
    conv = WNConv2d(3, 4, 3)
    assert torch.allclose(conv.weight().flatten(1).norm(dim=1), torch.ones(4), rtol=1e-3)


def test_hidden_scale_is_buffer_output_scale_is_parameter():
    d = MLPDiscriminator()
    names = {n for n, _ in d.named_parameters()}
    assert "trunk.1.weight_g" not in names and "head.1.weight_g" in names
    assert "trunk.1.weight_g" in dict(d.named_buffers())


@pytest.mark.parametrize("factory,expected", [
    (lambda: MLPDiscriminator(), (1_538_770, 2_250)),
    (lambda: MLPGenerator(), (695_568, 0)),
    (lambda: MLPEncoder(), (744_400, 0)),
    (lambda: ConvDiscriminator(64, 128), (626_580, 960)),
    (lambda: ConvDiscriminator(96, 192, input_dropout=0.2, spatial_dropout=False), (1_406_804, 1_440)),
    (lambda: ConvGenerator(), (4_941_958, 0)),
    (lambda: ConvEncoder(), (5_746_192, 0)),
])
def test_parameter_counts(factory, expected):
    assert counts(factory()) == expected


def _preacts(model, x):
    """Outputs (pre-activation) of every weight-norm layer, captured with hooks."""
    outs = []
    hooks = [m.register_forward_hook(lambda _m, _i, o: outs.append(o)) for m in model.modules()
             if isinstance(m, WN_TYPES)]
    model(x)
    for h in hooks:
        h.remove()
    return outs


@pytest.mark.parametrize("make,x", [
    (lambda: MLPDiscriminator(), torch.rand(500, 784)),
    (lambda: ConvDiscriminator(16, 32), torch.rand(64, 3, 32, 32) * 2 - 1),
])
def test_data_dependent_init_normalises_units_with_same_noise(make, x):
    torch.manual_seed(0)
    model = make().train()
    torch.manual_seed(1)
    with data_dependent_init(model):
        model(x)
    torch.manual_seed(1)  # identical noise / dropout draws
    with torch.no_grad():
        outs = _preacts(model, x)
    for layer, a in zip([m for m in model.modules() if isinstance(m, WN_TYPES)], outs):
        dims = [0] + list(range(2, a.ndim))
        assert (a.mean(dim=dims)).abs().max() < 1e-3
        assert (a.std(dim=dims, unbiased=False) - layer.init_stdv).abs().max() < 1e-3


def test_shapes_and_ranges():
    torch.manual_seed(0)
    logits, h = MLPDiscriminator()(torch.rand(4, 784))
    assert logits.shape == (4, 10) and h.shape == (4, 250)
    g = MLPGenerator()(torch.rand(4, 100))
    assert g.shape == (4, 784) and (g > 0).all() and (g < 1).all()
    for n1, n2 in [(64, 128), (96, 192)]:
        d = ConvDiscriminator(n1, n2)
        sizes = []
        hooks = [m.register_forward_hook(lambda _m, _i, o, sizes=sizes: sizes.append(o.shape[-1])) for m in d.trunk
                 if isinstance(m, WNConv2d)]
        logits, h = d(torch.rand(2, 3, 32, 32))
        assert logits.shape == (2, 10) and h.shape == (2, n2)
        assert sizes == [32, 32, 16, 16, 16, 8, 6, 6, 6]
        [hk.remove() for hk in hooks]
    x = ConvGenerator()(torch.rand(3, 100))
    assert x.shape == (3, 3, 32, 32) and x.abs().max() < 1
    mu, ls = ConvEncoder()(x)
    assert mu.shape == ls.shape == (3, 100)


def test_eval_mode_is_deterministic():
    d = MLPDiscriminator().eval()
    x = torch.rand(5, 784)
    assert torch.equal(d(x)[0], d(x)[0])
    assert not any(isinstance(m, GaussianNoise) and m.training for m in d.modules())
    g = MLPGenerator().eval()
    z = torch.rand(5, 100)
    assert torch.equal(g(z), g(z))
    assert torch.allclose(g(z[:1]), g(z)[:1], atol=1e-6)  # BN uses running statistics, no batch dependence
