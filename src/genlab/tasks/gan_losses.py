"""Loss terms of the semi-supervised (K+1)-class GAN and of the calibrated energy GAN, as pure functions.

Bad GAN (Yang thesis §3.1, Eq. (3.1)-(3.6)): the discriminator emits K logits l and the fake-class logit is pinned at 0,
so with s = logsumexp(l): P(fake|x) = sigmoid(-s), P(real|x) = sigmoid(s). Everything is in softplus /
logsumexp form so logits of magnitude 80+ do not overflow.
CEGAN (Dai thesis App. B.4): energy forms, the k-NN entropy-gradient surrogate and the Gaussian q(z|x) NLL.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# --------------------------------------------------------------------------------------------- bad GAN: D side


def real_logsumexp(logits: Tensor) -> Tensor:
    """s(x) = logsumexp_k l_k(x); P(real|x) = sigmoid(s)."""
    return torch.logsumexp(logits, dim=1)


def supervised_loss(logits: Tensor, target: Tensor) -> Tensor:
    """-log P(y | x, y <= K): plain cross-entropy over the K logits (unchanged by a shift of all K logits)."""
    return F.cross_entropy(logits, target)


def unlabeled_real_loss(logits: Tensor) -> Tensor:
    """mean of -log P(y <= K | x) = softplus(s) - s."""
    s = real_logsumexp(logits)
    return (F.softplus(s) - s).mean()


def generated_fake_loss(logits: Tensor) -> Tensor:
    """mean of -log P(K+1 | x) = softplus(s)."""
    return F.softplus(real_logsumexp(logits)).mean()


def conditional_entropy(logits: Tensor, normalize_over: str = "K") -> Tensor:
    """Mean entropy of the K-way softmax (code behaviour) or of the (K+1)-way distribution with the 0 logit."""
    if normalize_over == "K+1":
        logits = torch.cat([logits, logits.new_zeros(logits.shape[0], 1)], dim=1)
    elif normalize_over != "K":
        raise ValueError(f"normalize_over must be 'K' or 'K+1', got {normalize_over!r}")
    logp = torch.log_softmax(logits, dim=1)
    return -(logp.exp() * logp).sum(dim=1).mean()


def discriminator_loss(logits_lab: Tensor, y_lab: Tensor, logits_unl: Tensor, logits_gen: Tensor,
                       unl_weight: float = 0.5, ent_weight: float = 0.0, ent_normalize_over: str = "K"
                       ) -> dict[str, Tensor]:
    """L_D (Yang thesis Eq. (3.6)) and its parts (for logging)."""
    sup = supervised_loss(logits_lab, y_lab)
    unl = unlabeled_real_loss(logits_unl)
    gen = generated_fake_loss(logits_gen)
    loss = sup + unl_weight * (unl + gen)
    ent = conditional_entropy(logits_unl, ent_normalize_over) if ent_weight else logits_unl.new_zeros(())
    if ent_weight:
        loss = loss + ent_weight * ent
    return {"loss": loss, "sup": sup, "unl": unl, "gen": gen, "ent": ent}


# --------------------------------------------------------------------------------------------- bad GAN: G side


def feature_matching(f_gen: Tensor, f_unl: Tensor, kind: str = "sq_mean") -> Tensor:
    """Distance between the batch means of D's features: ``sq_mean`` (MNIST), ``abs_mean`` (SVHN/CIFAR) or
    ``sq_sum`` (the paper's squared norm)."""
    diff = f_gen.mean(dim=0) - f_unl.mean(dim=0)
    if kind == "sq_mean":
        return diff.pow(2).mean()
    if kind == "abs_mean":
        return diff.abs().mean()
    if kind == "sq_sum":
        return diff.pow(2).sum()
    raise ValueError(f"feature-matching type must be sq_mean, abs_mean or sq_sum, got {kind!r}")


def pull_away_term(features: Tensor, eps: float = 1e-8) -> Tensor:
    """Mean squared cosine similarity over ordered pairs i != j, normalised by N(N-1)."""
    n = features.shape[0]
    if n < 2:
        raise ValueError("the pull-away term needs a batch of at least 2 samples")
    unit = features / (features.norm(dim=1, keepdim=True) + eps)
    cos2 = (unit @ unit.t()).pow(2)
    off_diag = cos2.sum() - cos2.diagonal().sum()
    return off_diag / (n * (n - 1))


def gaussian_nll(z: Tensor, mu: Tensor, log_sigma: Tensor, logsigma_coef: float = 1.0, eps: float = 1e-8,
                 sigma_max: float | None = None) -> Tensor:
    """Batch mean of coef·Σ log σ + ½ Σ ((z − μ)/(eps + σ))², no constant. Bad GAN: coef 1, eps 1e-8;
    CEGAN code: coef 0.5, eps 1e-6. ``sigma_max`` clamps σ (the paper's θ bound)."""
    if sigma_max is not None:
        log_sigma = log_sigma.clamp(max=float(torch.log(torch.tensor(sigma_max))))
    sigma = log_sigma.exp()
    per_sample = logsigma_coef * log_sigma.sum(dim=1) + 0.5 * ((z - mu) / (eps + sigma)).pow(2).sum(dim=1)
    return per_sample.mean()


def density_threshold(log_probs: Tensor, quantile_percent: float = 10.0) -> Tensor:
    """Value at index floor(q·N/100) of the ascending reference log-densities (numpy-partition rule)."""
    n = log_probs.numel()
    idx = min(int(quantile_percent * n / 100.0), n - 1)
    return log_probs.flatten().sort().values[idx]


def low_density_penalty(log_probs: Tensor, threshold: Tensor | float, weight: float) -> Tensor:
    """λ · Σ_i max(log p_i − T, 0) / n_active; 0 when no sample is above T."""
    excess = F.relu(log_probs - threshold)
    n_active = (log_probs > threshold).sum()
    if n_active == 0:
        return log_probs.sum() * 0.0
    return weight * excess.sum() / n_active


@torch.no_grad()
def true_fake_stats(logits_real: Tensor, logits_gen: Tensor) -> dict[str, Tensor]:
    """The four monitoring ratios the bad-GAN authors' code prints: unl_acc, gen_acc, max_unl_acc ((A3) ratio),
    max_gen_acc."""
    s_r, s_g = real_logsumexp(logits_real), real_logsumexp(logits_gen)
    return {
        "unl_acc": (s_r > 0).float().mean(),
        "gen_acc": (s_g > 0).float().mean(),
        "max_unl_acc": (logits_real.max(dim=1).values > 0).float().mean(),
        "max_gen_acc": (logits_gen.max(dim=1).values > 0).float().mean(),
    }


# ------------------------------------------------------------------------------------------------------ CEGAN


def energy(score: Tensor, form: str = "identity") -> Tensor:
    """Cost from the discriminator's raw score: the score itself, or softplus(−score) ≥ 0 (CIFAR-10)."""
    if form == "identity":
        return score
    if form == "softplus":
        return F.softplus(-score)
    raise ValueError(f"energy form must be 'identity' or 'softplus', got {form!r}")


def knn_entropy_direction(x: Tensor, k: int = 20, normalize: str = "unit", eps: float = 1e-12) -> Tensor:
    """Per-sample direction d_i (no gradient) pointing from x_i to the mean of its k nearest batch neighbours.

    ``unit``: (μ_i − x_i)/‖μ_i − x_i‖ (paper B.11). ``var``: (μ_i − x_i)/var_i with var_i the per-dimension
    variance of {x_i} ∪ neighbours (the synthetic code). Self is excluded by masking the diagonal.
    """
    with torch.no_grad():
        flat = x.detach().flatten(1)
        n = flat.shape[0]
        if not 1 <= k < n:
            raise ValueError(f"k-NN entropy needs 1 <= k < batch size, got k={k}, batch={n}")
        dist = torch.cdist(flat, flat)  # same neighbours as squared distances, a fraction of the CPU time
        dist.fill_diagonal_(float("inf"))
        idx = dist.topk(k, dim=1, largest=False).indices  # [n, k]
        neigh = flat[idx]  # [n, k, D]
        mu = neigh.mean(dim=1)
        delta = mu - flat
        if normalize == "unit":
            d = delta / (delta.norm(dim=1, keepdim=True) + eps)
        elif normalize == "var":
            pts = torch.cat([flat[:, None, :], neigh], dim=1)
            d = delta / (pts.var(dim=1, unbiased=False) + eps)
        else:
            raise ValueError(f"normalize must be 'unit' or 'var', got {normalize!r}")
    return d.view_as(x)


def knn_entropy_surrogate(x: Tensor, k: int = 20, alpha: float = 2e-2, normalize: str = "unit") -> Tensor:
    """L_NN = Σ_i <α d_i, x_i> (a batch SUM): its gradient w.r.t. x_i is exactly α d_i, so descent moves each
    sample away from its neighbours' mean, i.e. along −∇(−H)."""
    d = alpha * knn_entropy_direction(x, k, normalize)
    return (d * x).sum()
