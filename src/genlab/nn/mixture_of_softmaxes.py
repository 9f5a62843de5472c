"""Output layers of the MoS paper: plain Softmax, Mixture of Softmaxes (MoS) and Mixture of Contexts (MoC).

All three take the (dropped) top-layer output ``g [B, T, H]`` and own a ``decoder`` Linear(d -> vocab) whose
weight the model may tie to its input embedding. Each offers ``nll(g, target) -> [B, T]`` (no [.., M]
log-probability tensor is kept for the mixture) and ``log_prob(g) -> [B, T, M]`` (analysis, rank). Mixtures
are computed in fp32 or wider: tail probabilities underflow in half precision.

MoS (Dai thesis App. A.2.4):  pi = softmax(W_pi g),  h_k = LockedDropout(tanh(W_h g + b_h))[k],
                              p = sum_k pi_k softmax(W_out h_k + b_out)  (mixes probabilities: high rank)
MoC (Dai thesis Eq. (A.2)):   p = softmax(W_out sum_k pi_k h_k + b_out)  (mixes contexts: rank <= d + 1)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genlab.nn.locked_dropout import LockedDropout


def _wide(x: Tensor) -> Tensor:
    """Promote half precision to fp32; keep fp32/fp64 as they are (fp64 for rank analysis)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


class SoftmaxHead(nn.Module):
    """``log p = log_softmax(W_out g + b_out)``; ``g`` must already have the decoder's input size."""

    def __init__(self, in_features: int, vocab_size: int):
        super().__init__()
        self.decoder = nn.Linear(in_features, vocab_size)
        nn.init.zeros_(self.decoder.bias)

    def log_prob(self, g: Tensor) -> Tensor:
        return F.log_softmax(_wide(self.decoder(g)), dim=-1)

    def nll(self, g: Tensor, target: Tensor) -> Tensor:
        logits = _wide(self.decoder(g))
        return F.cross_entropy(logits.flatten(0, -2), target.reshape(-1), reduction="none").view_as(target)


class MixtureHead(nn.Module):
    """MoS (``mix="probs"``) or MoC (``mix="contexts"``) with ``n_experts`` components of dimension ``emsize``.

    ``log_eps > 0`` reproduces the original ``log(p + eps)`` floor (per-token NLL capped at -log eps);
    ``log_eps = 0`` uses the exact ``logsumexp(log pi + log_softmax)``. The latent's K*d features are laid out
    component-major (feature k*d + j is component k, dimension j), as in the reference code.
    """

    def __init__(
        self,
        in_features: int,
        emsize: int,
        vocab_size: int,
        n_experts: int,
        dropoutl: float = 0.0,
        mix: str = "probs",
        log_eps: float = 0.0,
    ):
        super().__init__()
        if mix not in ("probs", "contexts"):
            raise ValueError(f"mix must be 'probs' (MoS) or 'contexts' (MoC), got {mix!r}")
        if n_experts < 1:
            raise ValueError(f"n_experts must be >= 1, got {n_experts}")
        self.emsize, self.n_experts, self.mix, self.log_eps = emsize, n_experts, mix, log_eps
        self.prior = nn.Linear(in_features, n_experts, bias=False)
        self.latent = nn.Linear(in_features, n_experts * emsize)
        self.latent_dropout = LockedDropout(dropoutl)
        self.decoder = nn.Linear(emsize, vocab_size)
        nn.init.zeros_(self.decoder.bias)

    def contexts(self, g: Tensor) -> tuple[Tensor, Tensor]:
        """``(log pi [B, T, K], h [B, T, K, d])``; the locked-dropout mask spans the K*d features."""
        log_prior = F.log_softmax(_wide(self.prior(g)), dim=-1)
        h = self.latent_dropout(torch.tanh(self.latent(g)))
        return log_prior, h.unflatten(-1, (self.n_experts, self.emsize))

    def _mixed_context(self, log_prior: Tensor, h: Tensor) -> Tensor:
        return (log_prior.exp().to(h.dtype).unsqueeze(-1) * h).sum(-2)

    def _floor(self, log_p: Tensor) -> Tensor:
        return torch.log(log_p.exp() + self.log_eps) if self.log_eps > 0 else log_p

    def log_prob(self, g: Tensor) -> Tensor:
        log_prior, h = self.contexts(g)
        if self.mix == "contexts":
            return F.log_softmax(_wide(self.decoder(self._mixed_context(log_prior, h))), dim=-1)
        comp = F.log_softmax(_wide(self.decoder(h)), dim=-1)  # [B, T, K, M]
        return self._floor(torch.logsumexp(log_prior.unsqueeze(-1) + comp, dim=-2))

    def nll(self, g: Tensor, target: Tensor) -> Tensor:
        log_prior, h = self.contexts(g)
        if self.mix == "contexts":
            logits = _wide(self.decoder(self._mixed_context(log_prior, h)))
            return F.cross_entropy(logits.flatten(0, -2), target.reshape(-1), reduction="none").view_as(target)
        logits = _wide(self.decoder(h))  # [B, T, K, M]
        index = target.unsqueeze(-1).unsqueeze(-1).expand(*target.shape, self.n_experts, 1)
        comp = logits.gather(-1, index).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # log p_k(target)
        return -self._floor(torch.logsumexp(log_prior + comp, dim=-1))


def build_head(head: str, in_features: int, emsize: int, vocab_size: int, n_experts: int = 1,
               dropoutl: float = 0.0, log_eps: float = 0.0) -> nn.Module:
    """``head``: ``softmax`` | ``mos`` | ``moc``."""
    if head == "softmax":
        return SoftmaxHead(in_features, vocab_size)
    if head in ("mos", "moc"):
        mix = "probs" if head == "mos" else "contexts"
        return MixtureHead(in_features, emsize, vocab_size, n_experts, dropoutl, mix, log_eps)
    raise ValueError(f"head must be one of softmax, mos, moc; got {head!r}")

