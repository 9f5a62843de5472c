"""The bad-GAN 2-D case study (Yang thesis §3.1.4, Figs. 3.2-3.5): a complement generator on four spins and a
feature-matching generator with a 2-D feature space on two circles, against supervised-only training.

Every model is trained by ``train.py`` with the presets ``bad_gan_toy2d_spins`` and ``bad_gan_toy2d_circles`` (the
bad-GAN task on ``genlab.data.synthetic.ssl_toy2d``), each also with ``task.supervised_only=true`` for the
supervised-only baseline; this script runs them (a finished run directory is reused) and reads each run's final
weights (``checkpoints/last.ckpt``) for the statistics and figures.

    python -m genlab.analysis.complement_gan_2d --out experiments/bad_gan_toy2d --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from genlab.models.bad_gan import sample_noise
from genlab.tasks import gan_losses as L

ROOT = Path(__file__).resolve().parents[3]  # the repository: train.py and conf/
SPINS, CIRCLES = "bad_gan_toy2d_spins", "bad_gan_toy2d_circles"
SUPERVISED = ("task.supervised_only=true",)  # the baseline: same net, labels, optimiser and steps, CE only
GRID_LIM = {"four_spins": 2.0, "two_circles": 1.5}  # half-width of the square the boundary statistic scans


def grid_points(lim: float = 2.0, n: int = 200) -> Tensor:
    ax = torch.linspace(-lim, lim, n)
    gx, gy = torch.meshgrid(ax, ax, indexing="ij")
    return torch.stack([gx.ravel(), gy.ravel()], 1)


def boundary_in_fake_region(logits: Tensor, n: int) -> float:
    """Among grid points where the predicted class differs from a 4-neighbour (both sides of each change), the
    fraction with max_k l_k < 0, i.e. inside the region D calls fake (Yang thesis §3.1.4: the
    decision boundary lies in the complement)."""
    pred = logits.argmax(1).view(n, n)
    change = torch.zeros(n, n, dtype=torch.bool)
    rows, cols = pred[:-1] != pred[1:], pred[:, :-1] != pred[:, 1:]
    change[:-1] |= rows
    change[1:] |= rows
    change[:, :-1] |= cols
    change[:, 1:] |= cols
    fake = (logits.max(1).values < 0).view(n, n)
    return float(fake[change].float().mean()) if change.any() else float("nan")


def features_between(f_real: Tensor, y: Tensor, f_gen: Tensor) -> float:
    """Fraction of generated features whose projection on the segment joining the two class feature means falls
    strictly inside it (Yang thesis §3.1.4: FM features lie between the two classes' features)."""
    m0, m1 = f_real[y == 0].mean(0), f_real[y == 1].mean(0)
    t = ((f_gen - m0) @ (m1 - m0)) / (m1 - m0).pow(2).sum()
    return float(((t > 0) & (t < 1)).float().mean())


# ------------------------------------------------------------------------------------------------- runs
def train_run(preset: str, seed: int, run_dir: Path, *overrides: str) -> Path:
    """``python train.py experiment=<preset> seed=<seed>`` into ``run_dir``, unless it already finished there."""
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.json"
    if metrics.is_file() and json.loads(metrics.read_text()).get("status") == "finished" and \
            (run_dir / "checkpoints" / "last.ckpt").is_file():
        return run_dir
    if not (ROOT / "train.py").is_file():
        raise FileNotFoundError(f"{ROOT / 'train.py'} not found: run this script from a genlab checkout.")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    cmd = [sys.executable, str(ROOT / "train.py"), f"experiment={preset}", f"seed={seed}", "logger=csv",
           "trainer.enable_progress_bar=false", f"hydra.run.dir={run_dir}", *overrides]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:])} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return run_dir


@dataclass
class Result:
    accuracy: float  # transductive, on every data point
    boundary_fake: float  # fraction of class-change grid points in the fake region
    model: nn.Module  # the discriminator, in eval mode
    extra: dict


@torch.no_grad()
def evaluate_run(run_dir: Path, grid: int = 200) -> Result:
    """The final weights of a toy run: accuracy on all N points, the boundary statistic on a grid x grid square and,
    for a trained generator, true/fake accuracy and where its samples' features lie (N samples, seeded)."""
    from genlab.assemble import build_data
    from genlab.runs import load_run

    run = load_run(run_dir)
    task = run.load_task(Path(run_dir) / "checkpoints" / "last.ckpt")
    dm = build_data(run.config.data)
    d, g = task.model.discriminator, task.model.generator
    x, y = dm.x, dm.y
    logits, f_real = d(x)
    acc = float((logits.argmax(1) == y).float().mean())
    frac = boundary_in_fake_region(d(grid_points(GRID_LIM[dm.hparams.dataset], grid))[0], grid)
    extra = {"x": x.numpy(), "y": y.numpy(), "labelled": dm.labeled_indices, "lim": GRID_LIM[dm.hparams.dataset]}
    if g is not None and not task.hparams.supervised_only:
        x_gen = g(sample_noise(len(x), g.z_dim, generator=torch.Generator().manual_seed(dm.hparams.seed)))
        logits_gen, f_gen = d(x_gen)
        s_real, s_gen = L.real_logsumexp(logits), L.real_logsumexp(logits_gen)
        extra.update(true_fake_acc=0.5 * float((s_real > 0).float().mean() + (s_gen < 0).float().mean()),
                     gen_between=features_between(f_real, y, f_gen), x_gen=x_gen.numpy(), f_real=f_real.numpy(),
                     f_gen=f_gen.numpy())
    return Result(acc, frac, d, extra)


def train_and_evaluate(preset: str, seed: int, runs: Path, *overrides: str, supervised: bool = False) -> Result:
    """Train (or reuse) ``<runs>/<preset>[_supervised]/seed<seed>`` and score its final weights."""
    name = f"{preset}_supervised" if supervised else preset
    extra = SUPERVISED if supervised else ()
    return evaluate_run(train_run(preset, seed, Path(runs) / name / f"seed{seed}", *overrides, *extra))


# ------------------------------------------------------------------------------------------------- figures
def _plot_regions(ax, res: Result, title: str, x_gen: np.ndarray | None = None) -> None:
    n, lim = 200, res.extra["lim"]
    with torch.no_grad():
        logits = res.model(grid_points(lim, n))[0]
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


def _figures(out: Path, comp: Result, sup: Result, fm: Result | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(9, 4.5))
    _plot_regions(ax[0], comp, f"complement G: acc {comp.accuracy:.3f}, boundary in fake {comp.boundary_fake:.0%}")
    _plot_regions(ax[1], sup, f"supervised only: acc {sup.accuracy:.3f}, boundary in fake {sup.boundary_fake:.0%}")
    fig.suptitle("four spins (hatched: max_k l_k < 0, the fake region; x: the 4 labels)")
    fig.tight_layout()
    fig.savefig(out / "four_spins.png", dpi=70)
    plt.close(fig)
    if fm is None:
        return
    fig, ax = plt.subplots(1, 2, figsize=(9, 4.5))
    _plot_regions(ax[0], fm, f"FM: acc {fm.accuracy:.3f} (black: generated)", fm.extra["x_gen"][:500])
    fr, fg, yy = fm.extra["f_real"], fm.extra["f_gen"][:500], fm.extra["y"]
    ax[1].scatter(fr[:, 0], fr[:, 1], c=yy, s=2, cmap="Set1")
    ax[1].scatter(fg[:, 0], fg[:, 1], c="k", s=2, alpha=0.4)
    ax[1].set_title(f"feature space h(x) in R^2: {fm.extra['gen_between']:.0%} of generated between classes",
                    fontsize=9)
    fig.suptitle("two circles, feature matching with a 2-D feature layer")
    fig.tight_layout()
    fig.savefig(out / "two_circles_fm.png", dpi=70)
    plt.close(fig)


def _table(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r if k != "seed"))
    fmt = lambda r, k: f"{r[k]:.3f}" if k in r else ""
    lines = ["| seed | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    lines += [f"| {r['seed']} | " + " | ".join(fmt(r, k) for k in keys) + " |" for r in rows]
    lines.append("| median | " + " | ".join(f"{np.median([r[k] for r in rows if k in r]):.3f}" for k in keys) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="experiments/bad_gan_toy2d", help="where results.md/json and figures go")
    ap.add_argument("--runs", default="outputs/bad_gan_toy2d", help="run directories: <runs>/<preset>/seed<k>")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--circles-seeds", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for every run (e.g. trainer.max_steps=300); "
                    "give them a --runs of their own, finished runs are reused")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in args.seeds:
        comp, sup = (train_and_evaluate(SPINS, seed, args.runs, *args.overrides, supervised=s) for s in (False, True))
        row = {"seed": seed, "spins_complement_acc": comp.accuracy, "spins_supervised_acc": sup.accuracy,
               "spins_complement_boundary_fake": comp.boundary_fake,
               "spins_supervised_boundary_fake": sup.boundary_fake}
        fm = None
        if seed in args.circles_seeds:
            fm, fsup = (train_and_evaluate(CIRCLES, seed, args.runs, *args.overrides, supervised=s)
                        for s in (False, True))
            row.update(circles_fm_acc=fm.accuracy, circles_supervised_acc=fsup.accuracy,
                       circles_fm_boundary_fake=fm.boundary_fake, circles_fm_true_fake_acc=fm.extra["true_fake_acc"],
                       circles_fm_gen_between=fm.extra["gen_between"])
        rows.append(row)
        print(json.dumps(row), flush=True)
        if seed == args.seeds[0]:
            _figures(out, comp, sup, fm)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    table = _table(rows)
    (out / "results.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
