"""PixelCNN++ (Salimans et al., 2017) as the frozen density model of the bad GAN's low-density term
(Yang thesis §3.1.5, Eq. (3.4)): down-shifted / down-right-shifted convolutions in two streams, gated resnet blocks with
concat-ELU, stride-2 resolution changes between stages, and a discretised logistic mixture likelihood
(one channel, or RGB with the linear autoregressive channel coefficients).

Inputs are images in [-1, 1] of shape [B, C, H, W] on a grid of ``n_levels`` values (256 for 8-bit images).
``log_prob(x) -> [B]`` is in nats per image (sum over pixels and channels) and differentiable w.r.t. x.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import weight_norm


def concat_elu(x: Tensor) -> Tensor:
    return F.elu(torch.cat([x, -x], dim=1))


def down_shift(x: Tensor) -> Tensor:
    return F.pad(x, (0, 0, 1, 0))[:, :, :-1, :]


def right_shift(x: Tensor) -> Tensor:
    return F.pad(x, (1, 0))[:, :, :, :-1]


class DownShiftedConv(nn.Module):
    """Sees only rows above (and the current row when fh > 1 is cropped by a later down-shift)."""

    def __init__(self, cin: int, cout: int, fsize: tuple[int, int] = (2, 3), stride: int = 1,
                 shift_down: bool = False) -> None:
        super().__init__()
        self.conv = weight_norm(nn.Conv2d(cin, cout, fsize, stride))
        fh, fw = fsize
        self.pad = ((fw - 1) // 2, (fw - 1) // 2, fh - 1, 0)
        self.shift_down = shift_down

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(F.pad(x, self.pad))
        return down_shift(x) if self.shift_down else x


class DownRightShiftedConv(nn.Module):
    """Sees rows above and pixels to the left in the current row."""

    def __init__(self, cin: int, cout: int, fsize: tuple[int, int] = (2, 2), stride: int = 1,
                 shift_right: bool = False) -> None:
        super().__init__()
        self.conv = weight_norm(nn.Conv2d(cin, cout, fsize, stride))
        fh, fw = fsize
        self.pad = (fw - 1, 0, fh - 1, 0)
        self.shift_right = shift_right

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(F.pad(x, self.pad))
        return right_shift(x) if self.shift_right else x


class ShiftedDeconv(nn.Module):
    """Stride-2 transposed conv cropped back to 2H x 2W so the causal shift of its stream is kept: centred
    columns for the down-shifted stream (2x3), left-aligned for the down-right-shifted stream (2x2)."""

    def __init__(self, cin: int, cout: int, right: bool = False) -> None:
        super().__init__()
        self.fsize = (2, 2) if right else (2, 3)
        self.deconv = weight_norm(nn.ConvTranspose2d(cin, cout, self.fsize, 2, output_padding=1))
        self.right = right

    def forward(self, x: Tensor) -> Tensor:
        x = self.deconv(x)
        fh, fw = self.fsize
        left = 0 if self.right else (fw - 1) // 2
        right = fw - 1 - left
        return x[:, :, : x.shape[2] - fh + 1, left: x.shape[3] - right]


class GatedResnet(nn.Module):
    """x + a·sigmoid(b), [a, b] = conv(concat_elu(conv(concat_elu(x)) + nin(concat_elu(skip))))."""

    def __init__(self, n: int, conv: type, n_skip: int = 0, dropout: float = 0.0) -> None:
        super().__init__()
        self.conv_in = conv(2 * n, n)
        self.nin_skip = weight_norm(nn.Linear(2 * n_skip * n, n)) if n_skip else None
        self.dropout = nn.Dropout(dropout)
        self.conv_out = conv(2 * n, 2 * n)

    def forward(self, x: Tensor, skip: Tensor | None = None) -> Tensor:
        h = self.conv_in(concat_elu(x))
        if skip is not None:
            h = h + self.nin_skip(concat_elu(skip).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        a, b = self.conv_out(self.dropout(concat_elu(h))).chunk(2, dim=1)
        return x + a * torch.sigmoid(b)


class PixelCNNPP(nn.Module):
    def __init__(self, in_channels: int = 1, n_filters: int = 160, n_resnet: int = 3, n_mix: int = 10,
                 n_stages: int = 2, dropout: float = 0.0, n_levels: int = 256) -> None:
        super().__init__()
        if in_channels not in (1, 3):
            raise ValueError("PixelCNN++ here models 1 (grey) or 3 (RGB) channels")
        self.in_channels, self.n_mix, self.n_stages, self.n_levels = in_channels, n_mix, n_stages, n_levels
        self.config = dict(in_channels=in_channels, n_filters=n_filters, n_resnet=n_resnet, n_mix=n_mix,
                           n_stages=n_stages, dropout=dropout, n_levels=n_levels)  # to rebuild from a checkpoint
        n = n_filters
        ds = lambda cin, cout: DownShiftedConv(cin, cout)  # noqa: E731
        drs = lambda cin, cout: DownRightShiftedConv(cin, cout)  # noqa: E731
        self.u_init = DownShiftedConv(in_channels + 1, n, (2, 3), shift_down=True)
        self.ul_init_a = DownShiftedConv(in_channels + 1, n, (1, 3), shift_down=True)
        self.ul_init_b = DownRightShiftedConv(in_channels + 1, n, (2, 1), shift_right=True)
        self.up_u = nn.ModuleList(nn.ModuleList(GatedResnet(n, ds, 0, dropout) for _ in range(n_resnet))
                                  for _ in range(n_stages))
        self.up_ul = nn.ModuleList(nn.ModuleList(GatedResnet(n, drs, 1, dropout) for _ in range(n_resnet))
                                   for _ in range(n_stages))
        self.down_u_size = nn.ModuleList(DownShiftedConv(n, n, (2, 3), stride=2) for _ in range(n_stages - 1))
        self.down_ul_size = nn.ModuleList(DownRightShiftedConv(n, n, (2, 2), stride=2) for _ in range(n_stages - 1))
        # the first down stage consumes n_resnet stored activations, later ones also the downsampled one
        counts = [n_resnet] + [n_resnet + 1] * (n_stages - 1)
        self.dn_u = nn.ModuleList(nn.ModuleList(GatedResnet(n, ds, 1, dropout) for _ in range(c)) for c in counts)
        self.dn_ul = nn.ModuleList(nn.ModuleList(GatedResnet(n, drs, 2, dropout) for _ in range(c)) for c in counts)
        self.up_u_size = nn.ModuleList(ShiftedDeconv(n, n) for _ in range(n_stages - 1))
        self.up_ul_size = nn.ModuleList(ShiftedDeconv(n, n, right=True) for _ in range(n_stages - 1))
        per_mix = 3 if in_channels == 1 else 10
        self.nin_out = weight_norm(nn.Linear(n, per_mix * n_mix))

    def forward(self, x: Tensor) -> Tensor:
        """Mixture parameters [B, P, H, W] for every pixel, computed only from earlier pixels."""
        x = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)  # marks the image area against zero padding
        us, uls = [self.u_init(x)], [self.ul_init_a(x) + self.ul_init_b(x)]
        for s in range(self.n_stages):
            for fu, ful in zip(self.up_u[s], self.up_ul[s]):
                us.append(fu(us[-1]))
                uls.append(ful(uls[-1], us[-1]))
            if s < self.n_stages - 1:
                us.append(self.down_u_size[s](us[-1]))
                uls.append(self.down_ul_size[s](uls[-1]))
        u, ul = us.pop(), uls.pop()
        for s in range(self.n_stages):
            for fu, ful in zip(self.dn_u[s], self.dn_ul[s]):
                u = fu(u, us.pop())
                ul = ful(ul, torch.cat([u, uls.pop()], dim=1))
            if s < self.n_stages - 1:
                u, ul = self.up_u_size[s](u), self.up_ul_size[s](ul)
        return self.nin_out(F.elu(ul).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    def log_prob_pixels(self, x: Tensor) -> Tensor:
        """Log-likelihood of each pixel (all its channels) given the earlier pixels: [B, H, W], nats."""
        return discretized_mix_logistic_logprob(x, self(x), self.n_mix, self.n_levels)

    def log_prob(self, x: Tensor) -> Tensor:
        """log p(x) in nats per image, [B]."""
        return self.log_prob_pixels(x).flatten(1).sum(dim=1)

    def bits_per_dim(self, x: Tensor) -> Tensor:
        return -self.log_prob(x) / (x[0].numel() * math.log(2.0))


def _logistic_bin_logprob(x: Tensor, mean: Tensor, log_scale: Tensor, half: float) -> Tensor:
    """log P(bin of x) under a logistic, with open-ended edge bins at -1 and 1."""
    centered = x - mean
    inv = torch.exp(-log_scale)
    plus_in, min_in = inv * (centered + half), inv * (centered - half)
    cdf_delta = torch.sigmoid(plus_in) - torch.sigmoid(min_in)
    log_cdf_plus = plus_in - F.softplus(plus_in)  # log sigmoid, for the lowest bin
    log_one_minus_cdf_min = -F.softplus(min_in)  # for the highest bin
    mid_in = inv * centered
    log_pdf_mid = mid_in - log_scale - 2.0 * F.softplus(mid_in)  # density at the bin centre, when the bin is tiny
    inner = torch.where(cdf_delta > 1e-5, torch.log(cdf_delta.clamp_min(1e-12)), log_pdf_mid + math.log(2 * half))
    return torch.where(x < -0.999, log_cdf_plus, torch.where(x > 0.999, log_one_minus_cdf_min, inner))


def discretized_mix_logistic_logprob(x: Tensor, params: Tensor, n_mix: int, n_levels: int = 256) -> Tensor:
    """Per-pixel log-likelihood [B, H, W] of x in [-1,1] under the mixture given by ``params``.

    1 channel: params = [logits, means, log_scales] (3·M channels). RGB: [logits (M), then for each of R, G, B:
    means (M), log_scales (M), and coefficients (M)], with mean_G += c0·x_R and mean_B += c1·x_R + c2·x_G.
    """
    half = 1.0 / (n_levels - 1)
    logits = params[:, :n_mix]
    c = x.shape[1]
    n_par = 2 if c == 1 else 3  # grey: means, log-scales; RGB adds the channel coefficients
    rest = params[:, n_mix:].reshape(x.shape[0], c, n_par, n_mix, *x.shape[2:])
    means, log_scales = rest[:, :, 0], rest[:, :, 1].clamp_min(-7.0)
    xs = x.unsqueeze(2)  # [B, C, 1, H, W]
    if c == 3:
        coeffs = torch.tanh(rest[:, :, 2])
        m_r = means[:, 0]
        m_g = means[:, 1] + coeffs[:, 0] * xs[:, 0]
        m_b = means[:, 2] + coeffs[:, 1] * xs[:, 0] + coeffs[:, 2] * xs[:, 1]
        means = torch.stack([m_r, m_g, m_b], dim=1)
    per_channel = _logistic_bin_logprob(xs, means, log_scales, half)  # [B, C, M, H, W]
    return torch.logsumexp(per_channel.sum(dim=1) + torch.log_softmax(logits, dim=1), dim=1)
