"""Networks of the complement ("bad") GAN for semi-supervised learning: the architectures of
the authors' code (kimiyoung/ssl_bad_gan), which follow Salimans et al. 2016 (Dai thesis App. C.6).

Discriminators return ``(logits [B, K], features h(x) [B, d])``: the K real-class logits (the fake logit is the
constant 0, applied by the losses) and the penultimate layer used by feature matching and the pull-away term.
Generators map z ~ U(0,1)^{z_dim} to images; encoders map images to (mu, log_sigma) of q(z|x) for the VI term.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from genlab.nn.gan_layers import (
    GaussianNoise,
    WNConv2d,
    WNConvTranspose2d,
    WNLinear,
    init_batchnorm_gamma,
)
from genlab.nn.mlp import mlp_layers


class MLPDiscriminator(nn.Module):
    """MNIST D: noise -> [WN-Linear, ReLU] per hidden size, noise before every later layer."""

    def __init__(self, in_dim: int = 784, hidden: Sequence[int] = (1000, 500, 250, 250, 250), n_classes: int = 10,
                 input_noise: float = 0.3, hidden_noise: float = 0.5, weight_std: float = 0.1) -> None:
        super().__init__()
        layers: list[nn.Module] = [GaussianNoise(input_noise)]
        prev = in_dim
        for i, width in enumerate(hidden):
            if i > 0:
                layers.append(GaussianNoise(hidden_noise))
            layers += [WNLinear(prev, width, weight_std=weight_std), nn.ReLU()]
            prev = width
        self.trunk = nn.Sequential(*layers)
        self.head = nn.Sequential(GaussianNoise(hidden_noise),
                                  WNLinear(prev, n_classes, train_scale=True, weight_std=weight_std))
        self.feature_dim = prev

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.trunk(x.flatten(1))
        return self.head(h), h


class MLPGenerator(nn.Module):
    """MNIST G: [Linear(no bias), BN, Softplus] per hidden size, WN-Linear (trainable g), Sigmoid."""

    def __init__(self, z_dim: int = 100, hidden: Sequence[int] = (500, 500), out_dim: int = 784,
                 bn_gamma: str = "uniform01", weight_std: float = 0.1) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        prev = z_dim
        for width in hidden:
            layers += [nn.Linear(prev, width, bias=False), nn.BatchNorm1d(width), nn.Softplus()]
            prev = width
        layers += [WNLinear(prev, out_dim, train_scale=True, weight_std=weight_std), nn.Sigmoid()]
        self.net = nn.Sequential(*layers)
        self.z_dim = z_dim
        init_batchnorm_gamma(self, bn_gamma)

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z)


class MLPEncoder(nn.Module):
    """MNIST q(z|x) for the FM+VI row: returns (mu, log_sigma), each [B, z_dim]."""

    def __init__(self, in_dim: int = 784, hidden: Sequence[int] = (500, 500), z_dim: int = 100,
                 bn_gamma: str = "uniform01", weight_std: float = 0.1) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        prev = in_dim
        for width in hidden:
            layers += [nn.Linear(prev, width, bias=False), nn.BatchNorm1d(width), nn.Softplus()]
            prev = width
        layers.append(WNLinear(prev, 2 * z_dim, train_scale=True, weight_std=weight_std))
        self.net = nn.Sequential(*layers)
        init_batchnorm_gamma(self, bn_gamma)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        mu, log_sigma = self.net(x.flatten(1)).chunk(2, dim=1)
        return mu, log_sigma


class ConvDiscriminator(nn.Module):
    """SVHN / CIFAR-10 D. ``spatial_dropout`` picks Dropout2d (SVHN) or Dropout (CIFAR) inside."""

    def __init__(self, n1: int = 64, n2: int = 128, n_classes: int = 10, in_channels: int = 3,
                 input_noise: float = 0.05, input_dropout: float = 0.15, inner_dropout: float = 0.5,
                 spatial_dropout: bool = True, weight_std: float = 0.05) -> None:
        super().__init__()

        def conv(cin: int, cout: int, k: int, s: int, p: int) -> list[nn.Module]:
            return [WNConv2d(cin, cout, k, s, p, weight_std=weight_std), nn.LeakyReLU(0.2)]

        inner = nn.Dropout2d if spatial_dropout else nn.Dropout
        self.trunk = nn.Sequential(
            GaussianNoise(input_noise), nn.Dropout2d(input_dropout),  # drops whole input colour channels
            *conv(in_channels, n1, 3, 1, 1), *conv(n1, n1, 3, 1, 1), *conv(n1, n1, 3, 2, 1), inner(inner_dropout),
            *conv(n1, n2, 3, 1, 1), *conv(n2, n2, 3, 1, 1), *conv(n2, n2, 3, 2, 1), inner(inner_dropout),
            *conv(n2, n2, 3, 1, 0), *conv(n2, n2, 1, 1, 0), *conv(n2, n2, 1, 1, 0),
        )
        self.head = WNLinear(n2, n_classes, train_scale=True, init_stdv=0.1, weight_std=weight_std)
        self.feature_dim = n2

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.trunk(x).mean(dim=(2, 3))  # global average pool
        return self.head(h), h


class ConvGenerator(nn.Module):
    """SVHN / CIFAR-10 G: z -> 512x4x4 -> 256x8x8 -> 128x16x16 -> 3x32x32 in (-1, 1)."""

    def __init__(self, z_dim: int = 100, out_channels: int = 3, bn_gamma: str = "uniform01",
                 init: str = "torch_default", weight_std: float = 0.05) -> None:
        super().__init__()
        self.z_dim = z_dim
        self.fc = nn.Sequential(nn.Linear(z_dim, 4 * 4 * 512, bias=False), nn.BatchNorm1d(4 * 4 * 512), nn.ReLU())

        def up(cin: int, cout: int) -> list[nn.Module]:
            return [nn.ConvTranspose2d(cin, cout, 5, 2, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

        self.deconv = nn.Sequential(
            *up(512, 256), *up(256, 128),
            WNConvTranspose2d(128, out_channels, 5, 2, 2, 1, train_scale=True, init_stdv=0.1, weight_std=weight_std),
            nn.Tanh(),
        )
        if init == "normal_0.05":
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.ConvTranspose2d)):
                    nn.init.normal_(m.weight, 0.0, 0.05)
        elif init != "torch_default":
            raise ValueError(f"init must be 'torch_default' or 'normal_0.05', got {init!r}")
        init_batchnorm_gamma(self, bn_gamma)

    def forward(self, z: Tensor) -> Tensor:
        return self.deconv(self.fc(z).view(-1, 512, 4, 4))


class ConvEncoder(nn.Module):
    """CIFAR-10 q(z|x): three stride-2 convs with BN/ReLU, then a WN-Linear head to (mu, log_sigma)."""

    def __init__(self, in_channels: int = 3, z_dim: int = 100, bn_gamma: str = "uniform01",
                 weight_std: float = 0.05) -> None:
        super().__init__()

        def down(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 5, 2, 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

        self.trunk = nn.Sequential(*down(in_channels, 128), *down(128, 256), *down(256, 512))
        self.head = WNLinear(512 * 4 * 4, 2 * z_dim, train_scale=True, init_stdv=0.1, weight_std=weight_std)
        init_batchnorm_gamma(self, bn_gamma)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        mu, log_sigma = self.head(self.trunk(x).flatten(1)).chunk(2, dim=1)
        return mu, log_sigma


class ToyDiscriminator(nn.Module):
    """2-D toy D (the case study of Yang thesis §3.1.4): [Linear, ReLU] per hidden size, then K logits; h(x) is the last
    hidden layer. ``linear_features`` drops that layer's ReLU, so a 2-D feature space is not folded into a quadrant (the
    two-circles feature plot)."""

    def __init__(self, in_dim: int = 2, hidden: Sequence[int] = (128, 128), n_classes: int = 4,
                 linear_features: bool = False) -> None:
        super().__init__()
        layers, prev = mlp_layers(in_dim, hidden)
        if linear_features:
            layers.pop()
        self.trunk = nn.Sequential(*layers)
        self.head = nn.Linear(prev, n_classes)
        self.feature_dim = prev

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.trunk(x)
        return self.head(h), h


def sample_noise(n: int, z_dim: int, device: torch.device | str = "cpu",
                 generator: torch.Generator | None = None) -> Tensor:
    """The bad-GAN prior: z_j ~ U(0, 1) i.i.d. (as the authors' code draws it)."""
    return torch.rand(n, z_dim, device=device, generator=generator)


class BadGAN(nn.Module):
    """Holds D, G and the optional encoder so one ``model:`` config builds the whole system. ``generator`` is None
    when the fake points come from a known distribution served by the data (``task.fake_source=data``)."""

    def __init__(self, discriminator: nn.Module, generator: nn.Module | None = None,
                 encoder: nn.Module | None = None) -> None:
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.encoder = encoder
