"""Figure 3.8 of Yang's thesis (§3.2.5): D's training loss on generated pairs, −J(U_G, d_gen, D) =
``train/d_loss_gen``, for the MLE generator ("Gen + domain") and the RL generator ("Gen + domain + adv"), against D's
update count (G's updates and the MLE phase are not on the axis), mean over seeds with a band of ± one std.

    python experiments/gdan/figure_3_8.py <sweep or run dirs> [--out experiments/gdan/figure_3_8.png]
        [--methods gen_domain gen_domain_adv] [--smooth 5]

Reads each run's CSV log (csv/**/metrics.csv) and config (task.method, task.mle_steps, task.t_d, task.t_g).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from genlab.report import collect_runs

HERE = Path(__file__).resolve().parent
LABELS = {"gen_domain": "MLE (Gen + domain)", "gen_domain_adv": "RL (Gen + domain + adv)"}


def d_update_curve(run) -> tuple[np.ndarray, np.ndarray]:
    """(D update index, train/d_loss_gen) of one run. A logged step s after the MLE phase is D update
    ``(s + 1 − mle) · t_d / (t_d + t_g)`` when G is updated too (one update per training step)."""
    cfg = run.config
    mle = int(cfg.get("task.mle_steps") or 0)
    t_d, t_g = int(cfg.get("task.t_d") or 1), int(cfg.get("task.t_g") or 1)
    alternating = cfg.get("task.method") in ("gen_domain_adv", "gen_dual", "gen_gan")
    xs, ys = [], []
    for log in sorted(run.dir.glob("csv/**/metrics.csv")):
        with open(log) as f:
            for rec in csv.DictReader(f):
                if rec.get("train/d_loss_gen") and rec.get("step"):
                    done = int(rec["step"]) + 1 - mle
                    xs.append(done * t_d / (t_d + t_g) if alternating else done)
                    ys.append(float(rec["train/d_loss_gen"]))
    order = np.argsort(xs, kind="stable")
    return np.asarray(xs)[order], np.asarray(ys)[order]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--out", default=str(HERE / "figure_3_8.png"))
    ap.add_argument("--methods", nargs="+", default=list(LABELS))
    ap.add_argument("--smooth", type=int, default=5, help="moving average over this many logged points")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in collect_runs(args.paths) if r.status == "finished"]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for method in args.methods:
        curves = [d_update_curve(r) for r in runs if r.config.get("task.method") == method]
        curves = [c for c in curves if len(c[0])]
        if not curves:
            print(f"no finished run of task.method={method} with train/d_loss_gen under {args.paths}")
            continue
        grid = np.unique(np.concatenate([c[0] for c in curves]))
        ys = np.stack([np.interp(grid, x, y) for x, y in curves])
        kernel = np.ones(args.smooth) / args.smooth
        mean = np.convolve(ys.mean(0), kernel, mode="valid")
        std = np.convolve(ys.std(0), kernel, mode="valid")
        x = grid[args.smooth - 1:]
        ax.plot(x, mean, label=f"{LABELS.get(method, method)}, {len(curves)} seeds")
        ax.fill_between(x, mean - std, mean + std, alpha=0.2)
        print(f"{method}: mean d_loss_gen over the last quarter of D updates = "
              f"{ys[:, grid >= 0.75 * grid.max()].mean():.3f}")
    ax.set_xlabel("D updates")
    ax.set_ylabel("−J(U_G, d_gen, D)  (train/d_loss_gen)")
    ax.set_title("D's loss on generated QA pairs (Yang's thesis Fig. 3.8); lower is better", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
