"""Layers of the Salimans-style SSL GAN networks: instance Gaussian noise and weight-normalised layers with
data-dependent initialisation (Salimans & Kingma, 2016), as in the bad-GAN authors' code.

The weight-norm layers are written here rather than with ``torch.nn.utils.parametrizations.weight_norm``
because the bad-GAN code needs three things that parametrisation lacks: a 1e-6 inside the norm, a scale ``g`` that is a
*buffer* (frozen) in hidden layers, and a one-pass init mode that rescales ``g``/``b`` from batch statistics and
passes the normalised activations on, so the next layer is initialised on them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class GaussianNoise(nn.Module):
    """Adds N(0, std²) noise in train mode only (instance noise / hidden-unit noise)."""

    def __init__(self, std: float) -> None:
        super().__init__()
        self.std = float(std)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.std == 0.0:
            return x
        return x + self.std * torch.randn_like(x)


class _WeightNormBase(nn.Module):
    """W_o = g_o · V_o / sqrt(‖V_o‖² + 1e-6); ``out_dim`` is the weight axis holding output units."""

    out_dim = 0

    def __init__(self, weight_shape: tuple[int, ...], n_out: int, train_scale: bool, init_stdv: float,
                 weight_std: float) -> None:
        super().__init__()
        self.weight_v = nn.Parameter(torch.randn(weight_shape) * weight_std)
        self.bias = nn.Parameter(torch.zeros(n_out))
        scale = torch.ones(n_out)
        if train_scale:
            self.weight_g = nn.Parameter(scale)
        else:
            self.register_buffer("weight_g", scale)
        self.init_stdv = float(init_stdv)
        self.init_mode = False

    def weight(self) -> Tensor:
        v = self.weight_v
        dims = [d for d in range(v.ndim) if d != self.out_dim]
        norm = torch.sqrt(v.pow(2).sum(dim=dims, keepdim=True) + 1e-6)
        shape = [1] * v.ndim
        shape[self.out_dim] = -1
        return self.weight_g.view(shape) * v / norm

    def _apply_op(self, x: Tensor, weight: Tensor) -> Tensor:  # pre-bias activation
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        a = self._apply_op(x, self.weight())
        shape = [1, -1] + [1] * (a.ndim - 2)
        if not self.init_mode:
            return a + self.bias.view(shape)
        # data-dependent init: statistics per output unit over batch (and space), then rescale g and set b
        dims = [0] + list(range(2, a.ndim))
        with torch.no_grad():
            m = a.mean(dim=dims)
            s = torch.sqrt((a - m.view(shape)).pow(2).mean(dim=dims) + 1e-6)
            ratio = self.init_stdv / s
            self.weight_g.mul_(ratio)
            self.bias.copy_(-m * ratio)
        return (a - m.view(shape)) * ratio.view(shape)


class WNLinear(_WeightNormBase):
    def __init__(self, in_features: int, out_features: int, train_scale: bool = False, init_stdv: float = 1.0,
                 weight_std: float = 0.05) -> None:
        super().__init__((out_features, in_features), out_features, train_scale, init_stdv, weight_std)

    def _apply_op(self, x: Tensor, weight: Tensor) -> Tensor:
        return F.linear(x, weight)


class WNConv2d(_WeightNormBase):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 train_scale: bool = False, init_stdv: float = 1.0, weight_std: float = 0.05) -> None:
        super().__init__((out_channels, in_channels, kernel_size, kernel_size), out_channels, train_scale,
                         init_stdv, weight_std)
        self.stride, self.padding = stride, padding

    def _apply_op(self, x: Tensor, weight: Tensor) -> Tensor:
        return F.conv2d(x, weight, None, self.stride, self.padding)


class WNConvTranspose2d(_WeightNormBase):
    out_dim = 1  # ConvTranspose weights are [in, out, k, k]

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 output_padding: int = 0, train_scale: bool = False, init_stdv: float = 1.0,
                 weight_std: float = 0.05) -> None:
        super().__init__((in_channels, out_channels, kernel_size, kernel_size), out_channels, train_scale,
                         init_stdv, weight_std)
        self.stride, self.padding, self.output_padding = stride, padding, output_padding

    def _apply_op(self, x: Tensor, weight: Tensor) -> Tensor:
        return F.conv_transpose2d(x, weight, None, self.stride, self.padding, self.output_padding)


WN_TYPES = (WNLinear, WNConv2d, WNConvTranspose2d)


@contextmanager
def data_dependent_init(*modules: nn.Module) -> Iterator[None]:
    """Within the block, one forward pass initialises every weight-norm layer of ``modules`` in order."""
    layers = [m for mod in modules for m in mod.modules() if isinstance(m, WN_TYPES)]
    for layer in layers:
        layer.init_mode = True
    try:
        with torch.no_grad():
            yield
    finally:
        for layer in layers:
            layer.init_mode = False


def init_batchnorm_gamma(module: nn.Module, mode: str) -> None:
    """``uniform01`` reproduces the BN scale init of PyTorch 0.1.12 the authors ran; ``ones`` is modern PyTorch."""
    if mode not in ("uniform01", "ones"):
        raise ValueError(f"bn_gamma must be 'uniform01' or 'ones', got {mode!r}")
    for m in module.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)) and m.affine:
            with torch.no_grad():
                if mode == "uniform01":
                    m.weight.uniform_(0.0, 1.0)
                else:
                    m.weight.fill_(1.0)
