"""Figures the report cannot draw, from finished CEGAN runs (``train.py -m`` sweep directories):

- 2-D runs: energy surfaces on the evaluation grid (p_data, p_disc = softmax(−c), p_gen; Figs. B.1-B.3) as
  ``energy_<experiment>_s<seed>.png``, and the energy gap between the lightest and heaviest mode (``modes.md``);
- one-digit runs: the 10 lowest- and highest-energy held-out images (Figs. B.4/B.5) as
  ``ranking_<variant>_s<seed>.png``.

    python experiments/cegan/figures.py outputs/cegan_table_b2/multirun_* --out experiments/cegan
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from hydra.utils import instantiate

from genlab.report.collect import find_run_dirs
from genlab.runs import load_run


def plot_energy(task, path: Path, title: str) -> None:
    import matplotlib.pyplot as plt

    _, axes, p = task._last_grid
    n = axes.shape[1]
    fig, ax = plt.subplots(1, 3, figsize=(9, 3))
    for a, key, name in zip(ax, ("data", "disc", "gen"), ("p_data", "p_disc = softmax(-c)", "p_gen")):
        a.imshow(p[key].reshape(n, n).T, origin="lower", extent=[axes[0, 0], axes[0, -1], axes[1, 0], axes[1, -1]],
                 cmap="viridis")
        a.set_title(name, fontsize=9)
        a.set_xticks([])
        a.set_yticks([])
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=45)
    plt.close(fig)


def plot_ranking(task, dm, path: Path, title: str) -> None:
    import matplotlib.pyplot as plt

    real = dm.x_test
    order = np.argsort(task.energy_on(real).cpu().numpy())
    side = round(real.shape[1] ** 0.5)
    fig, ax = plt.subplots(2, 10, figsize=(10, 2.4))
    for j in range(10):
        for row, idx in ((0, order[j]), (1, order[-1 - j])):
            ax[row, j].imshow(real[idx].view(side, side), cmap="gray")
            ax[row, j].axis("off")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=45)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="run or sweep directories")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    modes = ["# Energy at the lightest minus the heaviest mode centre (biased 2-GMM: calibrated value log 9 = 2.20)",
             "", "| experiment | seed | E(light) - E(heavy) |", "|---|---|---|"]
    for d in find_run_dirs(args.paths):
        run = load_run(d)
        if run.status != "finished" or run.best_checkpoint is None:
            continue
        task, seed = run.load_task(), run.config.seed
        dm = instantiate(run.config.data)
        dm.setup("fit")
        torch.manual_seed(seed)
        if hasattr(dm, "truth"):
            task.grid_report(dm.x.numpy(), dm.truth)
            plot_energy(task, out / f"energy_{run.experiment}_s{seed}.png", f"{run.experiment} seed {seed}")
            gap = task.mode_energy_gap(dm.truth)
            if gap is not None:
                modes.append(f"| {run.experiment} | {seed} | {gap:.3f} |")
        elif hasattr(dm, "x_test"):
            variant = task.hparams.variant
            plot_ranking(task, dm, out / f"ranking_{variant}_s{seed}.png",
                         f"{variant}: lowest-energy (top) / highest-energy (bottom) held-out digits")
        print(f"figures for {d}", flush=True)
    if len(modes) > 4:
        (out / "modes.md").write_text("\n".join(modes) + "\n")


if __name__ == "__main__":
    main()
