"""Figures the report cannot draw, from finished CEGAN runs (``train.py -m`` sweep directories):

- 2-D runs: energy surfaces on the evaluation grid (p_data, p_disc = softmax(−c), p_emp, p_gen; Figs. B.1-B.3) as
  ``energy_<experiment>_s<seed>.png``, and the energy gap between the lightest and heaviest mode (``modes.md``);
- one-digit runs: the 10 lowest- and highest-energy held-out images (Figs. B.4/B.5) as
  ``ranking_<variant>_s<seed>.png``.

The figures go beside the runs read (``figures/`` in the folder holding all the given paths) or into ``--out``;
each file written is printed.

    python experiments/cegan/figures.py outputs/cegan_table_b2          # -> outputs/cegan_table_b2/figures/
    python experiments/cegan/figures.py outputs/cegan_table_b2 --out experiments/cegan
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import torch
from hydra.utils import instantiate

from genlab.metrics.cegan_metrics import kl
from genlab.report.collect import find_run_dirs
from genlab.runs import load_run

DPI = 100  # 2-D runs: a 2x2 grid of 8.5-inch panels, each about 850 px wide; digits about 120 px
PANELS = (("data", "p_data (true density)"), ("disc", "p_disc = softmax(-c) (discriminator)"),
          ("emp", "p_emp (training points)"), ("gen", "p_gen (generator samples)"))


def plot_energy(task, path: Path, title: str) -> None:
    """The true density beside the discriminator's p_disc (top) and the training data beside the generator's
    samples (bottom), all on the evaluation grid, each with its colorbar and its KL to p_data in the title."""
    import matplotlib.pyplot as plt

    _, axes, p = task._last_grid
    n = axes.shape[1]
    fig, ax = plt.subplots(2, 2, figsize=(19, 17))
    for a, (key, name) in zip(ax.flat, PANELS):
        im = a.imshow(p[key].reshape(n, n).T, origin="lower", cmap="viridis", aspect="auto",
                      extent=[axes[0, 0], axes[0, -1], axes[1, 0], axes[1, -1]])
        gap = "" if key == "data" else f"\nKL(p_{key} || p_data) = {kl(p[key], p['data'], task.hparams.kl_floor):.3f}"
        a.set_title(name + gap, fontsize=18)
        a.tick_params(labelsize=13)
        fig.colorbar(im, ax=a, fraction=0.046, pad=0.03).ax.tick_params(labelsize=12)
    fig.suptitle(title, fontsize=22)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_ranking(task, dm, path: Path, title: str) -> None:
    import matplotlib.pyplot as plt

    real = dm.x_test
    order = np.argsort(task.energy_on(real).cpu().numpy())
    side = round(real.shape[1] ** 0.5)
    fig, ax = plt.subplots(2, 10, figsize=(12, 3.2))
    for j in range(10):
        for row, idx in ((0, order[j]), (1, order[-1 - j])):
            ax[row, j].imshow(real[idx].view(side, side), cmap="gray")
            ax[row, j].axis("off")
    fig.suptitle(title, fontsize=13)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="run or sweep directories")
    ap.add_argument("--out", help="folder for the figures (default: figures/ beside the runs read)")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else beside(args.paths)
    torch.set_num_threads(1)
    modes = ["# Energy at the lightest minus the heaviest mode centre (biased 2-GMM: calibrated value log 9 = 2.20)",
             "", "| experiment | seed | E(light) - E(heavy) |", "|---|---|---|"]
    written: list[Path] = []
    for d in find_run_dirs(args.paths):
        run = load_run(d)
        if run.status != "finished" or run.best_checkpoint is None:
            continue
        task, seed = run.load_task(), run.config.seed
        dm = instantiate(run.config.data)
        dm.setup("fit")
        torch.manual_seed(seed)
        out.mkdir(parents=True, exist_ok=True)
        if hasattr(dm, "truth"):
            task.grid_report(dm.x.numpy(), dm.truth)
            figure = out / f"energy_{run.experiment}_s{seed}.png"
            plot_energy(task, figure, f"{run.experiment}, seed {seed} ({run.best_checkpoint.name})")
            gap = task.mode_energy_gap(dm.truth)
            if gap is not None:
                modes.append(f"| {run.experiment} | {seed} | {gap:.3f} |")
        elif hasattr(dm, "x_test"):
            variant = task.hparams.variant
            figure = out / f"ranking_{variant}_s{seed}.png"
            plot_ranking(task, dm, figure, f"{variant}: lowest-energy (top) / highest-energy (bottom) held-out digits")
        else:
            print(f"no figure for {d}: neither a 2-D nor a one-digit run", flush=True)
            continue
        written.append(figure)
        print(f"wrote {figure} (from {d})", flush=True)
    if len(modes) > 4:
        written.append(out / "modes.md")
        written[-1].write_text("\n".join(modes) + "\n")
        print(f"wrote {written[-1]}", flush=True)
    print(f"{len(written)} files in {out}" if written else "no finished CEGAN run with a checkpoint under "
          f"{', '.join(args.paths)}: nothing written", flush=True)


def beside(paths: list[str]) -> Path:
    """``figures/`` in the folder that holds every given run or sweep directory."""
    return Path(os.path.commonpath([str(Path(p).resolve()) for p in paths])) / "figures"


if __name__ == "__main__":
    main()
