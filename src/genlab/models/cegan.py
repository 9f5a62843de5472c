"""Networks of the calibrated energy-based GAN (Dai thesis App. B.8.1): the discriminator emits a scalar score per
sample (the energy is score or softplus(−score), chosen by the task); the generator maps z to samples; the
optional inference net q(z|x) emits (mu, log_sigma) for the variational entropy bound."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from genlab.nn.mlp import mlp_layers

_OUT_ACTS = {"none": nn.Identity, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}


def _act(name: str) -> nn.Module:
    if name == "relu":
        return nn.ReLU()
    if name == "lrelu":
        return nn.LeakyReLU(0.2)
    raise ValueError(f"activation must be 'relu' or 'lrelu', got {name!r}")


def _normal_init(module: nn.Module, std: float | None) -> None:
    if std is None:
        return
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class MLPGenerator(nn.Module):
    """[FC, BN, ReLU] per hidden width, then FC to ``out_dim`` and the output activation.
    2-D: FC(4,128)-BN-ReLU-FC(128,128)-BN-ReLU-FC(128,2); digits 8x8: z 10, out 64, sigmoid."""

    def __init__(self, z_dim: int = 4, hidden: Sequence[int] = (128, 128), out_dim: int = 2, out_act: str = "none",
                 init_std: float | None = None) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        prev = z_dim
        for w in hidden:
            layers += [nn.Linear(prev, w), nn.BatchNorm1d(w), nn.ReLU()]
            prev = w
        layers += [nn.Linear(prev, out_dim), _OUT_ACTS[out_act]()]
        self.net = nn.Sequential(*layers)
        self.z_dim = z_dim
        _normal_init(self, init_std)

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z)


class MLPEnergy(nn.Module):
    """[FC, act] per hidden width, then FC to a scalar score. ``features`` = the last hidden layer."""

    def __init__(self, in_dim: int = 2, hidden: Sequence[int] = (128, 128), act: str = "relu",
                 init_std: float | None = None) -> None:
        super().__init__()
        layers, prev = mlp_layers(in_dim, hidden, lambda: _act(act))
        self.trunk = nn.Sequential(*layers)
        self.out = nn.Linear(prev, 1)
        _normal_init(self, init_std)

    def features(self, x: Tensor) -> Tensor:
        return self.trunk(x.flatten(1))

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.features(x)).squeeze(1)


class MLPInference(nn.Module):
    """q(z|x): FC(in,128)-ReLU-FC(128,128)-ReLU-FC(128, 2·z_dim) -> (mu, log_sigma)."""

    def __init__(self, in_dim: int = 2, hidden: Sequence[int] = (128, 128), z_dim: int = 4) -> None:
        super().__init__()
        layers, prev = mlp_layers(in_dim, hidden)
        layers.append(nn.Linear(prev, 2 * z_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        mu, log_sigma = self.net(x.flatten(1)).chunk(2, dim=1)
        return mu, log_sigma


class ConvGenerator28(nn.Module):
    """NIST G: FC(10, 512·7·7)-BN-ReLU, DC(512,256;4c2s)-BN-ReLU, DC(256,128;4c2s)-BN-ReLU, DC(128,1;3c1s), sigmoid."""

    def __init__(self, z_dim: int = 10) -> None:
        super().__init__()
        self.z_dim = z_dim
        self.fc = nn.Sequential(nn.Linear(z_dim, 512 * 7 * 7, bias=False), nn.BatchNorm1d(512 * 7 * 7), nn.ReLU())
        self.net = nn.Sequential(
            nn.ConvTranspose2d(512, 256, 4, 2, 1, bias=False), nn.BatchNorm2d(256), nn.ReLU(),
            nn.ConvTranspose2d(256, 128, 4, 2, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU(),
            nn.ConvTranspose2d(128, 1, 3, 1, 1), nn.Sigmoid())
        for m in self.modules():
            if isinstance(m, nn.ConvTranspose2d):
                nn.init.normal_(m.weight, 0.0, 0.05)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.005)

    def forward(self, z: Tensor) -> Tensor:
        return self.net(self.fc(z).view(-1, 512, 7, 7))


class ConvEnergy28(nn.Module):
    """NIST D: CV(1,64;3c1s)-BN-LReLU, CV(64,128;4c2s)-BN-LReLU, CV(128,256;4c2s)-BN-LReLU, FC(256·7·7, 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Conv2d(1, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.LeakyReLU(0.2),
            nn.Conv2d(64, 128, 4, 2, 1, bias=False), nn.BatchNorm2d(128), nn.LeakyReLU(0.2),
            nn.Conv2d(128, 256, 4, 2, 1, bias=False), nn.BatchNorm2d(256), nn.LeakyReLU(0.2))
        self.out = nn.Linear(256 * 7 * 7, 1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, 0.0, 0.05)
        nn.init.normal_(self.out.weight, 0.0, 0.005)
        nn.init.zeros_(self.out.bias)

    def features(self, x: Tensor) -> Tensor:
        return self.trunk(x).flatten(1)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.features(x)).squeeze(1)


class ConvGenerator32(nn.Module):
    """CIFAR-10 G (code version): FC(100, 512·4·4)-BN-ReLU, three DC(4c2s)-BN-ReLU (512, 256, 128), DC(128,3;3c1s), tanh."""

    def __init__(self, z_dim: int = 100) -> None:
        super().__init__()
        self.z_dim = z_dim
        self.fc = nn.Sequential(nn.Linear(z_dim, 512 * 4 * 4, bias=False), nn.BatchNorm1d(512 * 4 * 4), nn.ReLU())
        blocks: list[nn.Module] = []
        for cin, cout in ((512, 512), (512, 256), (256, 128)):
            blocks += [nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
        self.net = nn.Sequential(*blocks, nn.ConvTranspose2d(128, 3, 3, 1, 1), nn.Tanh())
        _normal_init(self, 0.02)

    def forward(self, z: Tensor) -> Tensor:
        return self.net(self.fc(z).view(-1, 512, 4, 4))


class ConvEnergy32(nn.Module):
    """CIFAR-10 D: CV(3,64;3c1s), CV(64,128;4c2s), CV(128,256;4c2s), CV(256,256;4c2s), each BN-act; FC(4096, 1)."""

    def __init__(self, act: str = "relu", out_dim: int = 1) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for cin, cout, k, s in ((3, 64, 3, 1), (64, 128, 4, 2), (128, 256, 4, 2), (256, 256, 4, 2)):
            layers += [nn.Conv2d(cin, cout, k, s, 1, bias=False), nn.BatchNorm2d(cout), _act(act)]
        self.trunk = nn.Sequential(*layers)
        self.out = nn.Linear(256 * 4 * 4, out_dim)
        _normal_init(self, 0.02)

    def features(self, x: Tensor) -> Tensor:
        return self.trunk(x).flatten(1)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.features(x)).squeeze(-1)


class CEGAN(nn.Module):
    """Generator, energy network and (VI only) inference network; ``z_prior`` is normal or uniform_pm1."""

    def __init__(self, generator: nn.Module, discriminator: nn.Module, inference: nn.Module | None = None,
                 z_prior: str = "normal") -> None:
        super().__init__()
        if z_prior not in ("normal", "uniform_pm1"):
            raise ValueError(f"z_prior must be 'normal' or 'uniform_pm1', got {z_prior!r}")
        self.generator, self.discriminator, self.inference = generator, discriminator, inference
        self.z_prior = z_prior

    def sample_z(self, n: int, device: torch.device | str = "cpu") -> Tensor:
        z_dim = self.generator.z_dim
        if self.z_prior == "normal":
            return torch.randn(n, z_dim, device=device)
        return torch.rand(n, z_dim, device=device) * 2 - 1
