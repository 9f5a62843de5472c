"""The bad-GAN 2-D case study (bad-GAN spec §5.3, §7 check 17): a complement generator on four spins and a
feature-matching generator with a 2-D feature space on two circles, against supervised-only training.

The discriminator is a K-logit classifier whose fake logit is pinned at 0 (spec §2.2); its losses come from
``genlab.tasks.gan_losses``. Everything is small enough to train on one CPU thread in seconds.

    python -m genlab.analysis.complement_gan_2d --out experiments/bad_gan_toy2d --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from genlab.data.synthetic.toy2d import four_spins, two_circles
from genlab.nn.mlp import mlp_layers
from genlab.tasks import gan_losses as L


class MLPClassifier(nn.Module):
    """2 -> hidden (ReLU) -> K logits; ``features`` is the last hidden layer h(x) (spec §2.1). With
    ``linear_features`` the last hidden layer has no ReLU, so a 2-D feature space is not folded into a quadrant."""

    def __init__(self, hidden: tuple[int, ...] = (128, 128), n_classes: int = 4, in_dim: int = 2,
                 linear_features: bool = False) -> None:
        super().__init__()
        layers, prev = mlp_layers(in_dim, hidden)
        if linear_features:
            layers.pop()
        self.trunk = nn.Sequential(*layers)
        self.out = nn.Linear(prev, n_classes)

    def features(self, x: Tensor) -> Tensor:
        return self.trunk(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.trunk(x))


class MLPGenerator2D(nn.Module):
    """U(0,1)^z_dim -> [Linear, BN, ReLU] x2 -> 2-D point (the FM generator of the two-circles study)."""

    def __init__(self, z_dim: int = 8, hidden: int = 64) -> None:
        super().__init__()
        self.z_dim = z_dim
        self.net = nn.Sequential(nn.Linear(z_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z)


def complement_sample(x_unl: Tensor, n: int, gen: torch.Generator, box_margin: float = 0.2, delta: float = 0.3
                      ) -> Tensor:
    """n points uniform in the bounding box of ``x_unl`` (± box_margin) with every point closer than ``delta`` to
    an unlabelled point rejected: the complement generator of spec §5.3 item 1."""
    lo, hi = x_unl.min(0).values - box_margin, x_unl.max(0).values + box_margin
    kept: list[Tensor] = []
    have = 0
    while have < n:
        cand = lo + (hi - lo) * torch.rand(min(4 * n, 20_000), 2, generator=gen)
        ok = torch.cdist(cand, x_unl).min(1).values >= delta
        kept.append(cand[ok])
        have += int(ok.sum())
    return torch.cat(kept)[:n]


def pick_labels(y: np.ndarray, per_class: int, rng: np.random.RandomState) -> np.ndarray:
    """Indices of ``per_class`` random points of each class."""
    return np.concatenate([rng.choice(np.flatnonzero(y == k), per_class, replace=False) for k in np.unique(y)])


def grid_points(lim: float = 2.0, n: int = 200) -> Tensor:
    ax = torch.linspace(-lim, lim, n)
    gx, gy = torch.meshgrid(ax, ax, indexing="ij")
    return torch.stack([gx.ravel(), gy.ravel()], 1)


def boundary_in_fake_region(logits: Tensor, n: int) -> float:
    """Among grid points where the predicted class differs from a 4-neighbour (both sides of each change), the
    fraction with max_k l_k < 0, i.e. inside the region D calls fake (spec §7 check 17)."""
    pred = logits.argmax(1).view(n, n)
    change = torch.zeros(n, n, dtype=torch.bool)
    rows, cols = pred[:-1] != pred[1:], pred[:, :-1] != pred[:, 1:]
    change[:-1] |= rows
    change[1:] |= rows
    change[:, :-1] |= cols
    change[:, 1:] |= cols
    fake = (logits.max(1).values < 0).view(n, n)
    return float(fake[change].float().mean()) if change.any() else float("nan")


@dataclass
class Result:
    accuracy: float  # transductive, on every data point
    boundary_fake: float  # fraction of class-change grid points in the fake region
    model: nn.Module
    extra: dict


def train_complement(seed: int, method: str = "complement", n: int = 2000, steps: int = 3000, batch: int = 128,
                     lr: float = 1e-3, delta: float = 0.3, box_margin: float = 0.2, grid: int = 200,
                     pool_size: int = 50_000) -> Result:
    """Four spins, one label per class; ``method`` = complement (bad-GAN D loss with the complement generator)
    or supervised (CE on the four labels only). Same net, labels and optimiser for both."""
    if method not in ("complement", "supervised"):
        raise ValueError(f"method must be 'complement' or 'supervised', got {method!r}")
    x_np, y_np = four_spins(n, seed=seed)
    lab = pick_labels(y_np, 1, np.random.RandomState(seed))
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np).long()
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    d = MLPClassifier((128, 128), 4)
    opt = torch.optim.Adam(d.parameters(), lr=lr)
    x_lab, y_lab = x[lab], y[lab]
    # one large pool drawn up front: batches from it follow the same (uniform minus data) distribution, without
    # a distance computation per step
    pool = complement_sample(x, pool_size, gen, box_margin, delta) if method == "complement" else None
    for _ in range(steps):
        if method == "supervised":
            loss = L.supervised_loss(d(x_lab), y_lab)
        else:
            x_u = x[torch.randint(len(x), (batch,), generator=gen)]
            x_g = pool[torch.randint(len(pool), (batch,), generator=gen)]
            logits = d(torch.cat([x_lab, x_u, x_g]))
            nl = len(x_lab)
            loss = L.discriminator_loss(logits[:nl], y_lab, logits[nl:nl + batch], logits[nl + batch:])["loss"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = float((d(x).argmax(1) == y).float().mean())
        frac = boundary_in_fake_region(d(grid_points(2.0, grid)), grid)
    return Result(acc, frac, d, {"x": x_np, "y": y_np, "labelled": lab})


def train_feature_matching(seed: int, method: str = "fm", n: int = 2000, steps: int = 3000, batch: int = 128,
                           per_class: int = 10, d_lr: float = 1e-3, g_lr: float = 1e-3, z_dim: int = 8) -> Result:
    """Two circles, D with a linear 2-D feature layer (2 -> 64 -> 64 -> h in R^2 -> 2 logits). ``fm``: alternating D step
    (spec §2.3 loss) and G step (feature matching on h, D frozen); ``supervised``: CE on the labels only."""
    if method not in ("fm", "supervised"):
        raise ValueError(f"method must be 'fm' or 'supervised', got {method!r}")
    x_np, y_np = two_circles(n, seed=seed)
    lab = pick_labels(y_np, per_class, np.random.RandomState(seed))
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np).long()
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    d, g = MLPClassifier((64, 64, 2), 2, linear_features=True), MLPGenerator2D(z_dim)
    opt_d = torch.optim.Adam(d.parameters(), lr=d_lr, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(g.parameters(), lr=g_lr, betas=(0.0, 0.999))
    x_lab, y_lab = x[lab], y[lab]
    for _ in range(steps):
        if method == "supervised":
            loss = L.supervised_loss(d(x_lab), y_lab)
            opt_d.zero_grad(set_to_none=True)
            loss.backward()
            opt_d.step()
            continue
        x_u = x[torch.randint(len(x), (batch,), generator=gen)]
        with torch.no_grad():
            x_g = g(torch.rand(batch, z_dim, generator=gen))
        loss_d = L.discriminator_loss(d(x_lab), y_lab, d(x_u), d(x_g))["loss"]
        opt_d.zero_grad(set_to_none=True)
        loss_d.backward()
        opt_d.step()
        # G step: only G's optimiser steps; D's grads from this pass are discarded before the next D step
        x_u2 = x[torch.randint(len(x), (batch,), generator=gen)]
        with torch.no_grad():
            f_unl = d.features(x_u2)
        loss_g = L.feature_matching(d.features(g(torch.rand(batch, z_dim, generator=gen))), f_unl, "sq_mean")
        opt_g.zero_grad(set_to_none=True)
        loss_g.backward()
        opt_g.step()
    d.eval()
    g.eval()
    with torch.no_grad():
        logits = d(x)
        acc = float((logits.argmax(1) == y).float().mean())
        frac = boundary_in_fake_region(d(grid_points(1.5, 200)), 200)
        extra = {"x": x_np, "y": y_np, "labelled": lab, "generator": g}
        if method == "fm":
            x_gen = g(torch.rand(n, z_dim, generator=gen))
            s_real, s_gen = L.real_logsumexp(logits), L.real_logsumexp(d(x_gen))
            f_real, f_gen = d.features(x), d.features(x_gen)
            extra.update(true_fake_acc=0.5 * float((s_real > 0).float().mean() + (s_gen < 0).float().mean()),
                         gen_between=features_between(f_real, y, f_gen), x_gen=x_gen.numpy(),
                         f_real=f_real.numpy(), f_gen=f_gen.numpy())
    return Result(acc, frac, d, extra)


def features_between(f_real: Tensor, y: Tensor, f_gen: Tensor) -> float:
    """Fraction of generated features whose projection on the segment joining the two class feature means falls
    strictly inside it (spec §5.3 item 2: FM features lie between the two classes' features)."""
    m0, m1 = f_real[y == 0].mean(0), f_real[y == 1].mean(0)
    t = ((f_gen - m0) @ (m1 - m0)) / (m1 - m0).pow(2).sum()
    return float(((t > 0) & (t < 1)).float().mean())


# ------------------------------------------------------------------------------------------------- figures
def _plot_regions(ax, d: nn.Module, lim: float, res: Result, title: str, x_gen: np.ndarray | None = None) -> None:
    n = 200
    pts = grid_points(lim, n)
    with torch.no_grad():
        logits = d(pts)
    pred = logits.argmax(1).view(n, n).T.numpy()
    fake = (logits.max(1).values < 0).view(n, n).T.numpy()
    ext = [-lim, lim, -lim, lim]
    ax.imshow(pred, origin="lower", extent=ext, cmap="Pastel1", alpha=0.9, interpolation="nearest")
    ax.contourf(np.linspace(-lim, lim, n), np.linspace(-lim, lim, n), fake, levels=[0.5, 1.5], colors="none",
                hatches=["..."])
    x, y, lab = res.extra["x"], res.extra["y"], res.extra["labelled"]
    ax.scatter(x[:, 0], x[:, 1], c=y, s=2, cmap="Set1")
    if x_gen is not None:
        ax.scatter(x_gen[:, 0], x_gen[:, 1], c="k", s=1, alpha=0.3)
    ax.scatter(x[lab, 0], x[lab, 1], c="k", marker="x", s=60)
    ax.set_title(title, fontsize=9)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="experiments/bad_gan_toy2d")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--circles-seeds", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=3000)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in args.seeds:
        comp = train_complement(seed, "complement", steps=args.steps)
        sup = train_complement(seed, "supervised", steps=args.steps)
        row = {"seed": seed, "spins_complement_acc": comp.accuracy, "spins_supervised_acc": sup.accuracy,
               "spins_complement_boundary_fake": comp.boundary_fake,
               "spins_supervised_boundary_fake": sup.boundary_fake}
        if seed in args.circles_seeds:
            fm = train_feature_matching(seed, "fm", steps=args.steps)
            fsup = train_feature_matching(seed, "supervised", steps=args.steps)
            row.update(circles_fm_acc=fm.accuracy, circles_supervised_acc=fsup.accuracy,
                       circles_fm_boundary_fake=fm.boundary_fake, circles_fm_true_fake_acc=fm.extra["true_fake_acc"],
                       circles_fm_gen_between=fm.extra["gen_between"])
        rows.append(row)
        print(json.dumps(rows[-1]), flush=True)
        if seed == args.seeds[0] and seed in args.circles_seeds:
            fig, ax = plt.subplots(1, 2, figsize=(9, 4.5))
            _plot_regions(ax[0], comp.model, 2.0, comp, f"complement G: acc {comp.accuracy:.3f}, "
                          f"boundary in fake {comp.boundary_fake:.0%}")
            _plot_regions(ax[1], sup.model, 2.0, sup, f"supervised only: acc {sup.accuracy:.3f}, "
                          f"boundary in fake {sup.boundary_fake:.0%}")
            fig.suptitle("four spins (hatched: max_k l_k < 0, the fake region; x: the 4 labels)")
            fig.tight_layout()
            fig.savefig(out / "four_spins.png", dpi=70)
            plt.close(fig)
            fig, ax = plt.subplots(1, 2, figsize=(9, 4.5))
            _plot_regions(ax[0], fm.model, 1.5, fm, f"FM: acc {fm.accuracy:.3f} (black: generated)",
                          fm.extra["x_gen"][:500])
            fr, fg, yy = fm.extra["f_real"], fm.extra["f_gen"][:500], fm.extra["y"]
            ax[1].scatter(fr[:, 0], fr[:, 1], c=yy, s=2, cmap="Set1")
            ax[1].scatter(fg[:, 0], fg[:, 1], c="k", s=2, alpha=0.4)
            ax[1].set_title(f"feature space h(x) in R^2: {fm.extra['gen_between']:.0%} of generated between classes",
                            fontsize=9)
            fig.suptitle("two circles, feature matching with a 2-D feature layer")
            fig.tight_layout()
            fig.savefig(out / "two_circles_fm.png", dpi=70)
            plt.close(fig)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    keys = list(dict.fromkeys(k for r in rows for k in r if k != "seed"))
    fmt = lambda r, k: f"{r[k]:.3f}" if k in r else ""
    lines = ["| seed | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    lines += [f"| {r['seed']} | " + " | ".join(fmt(r, k) for k in keys) + " |" for r in rows]
    lines.append("| median | " + " | ".join(f"{np.median([r[k] for r in rows if k in r]):.3f}" for k in keys) + " |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
