"""Dev F1 over training for every run, one panel per Table 3.4 method, with the selected checkpoint marked (the step
whose dev F1 the tested checkpoint had: ``valid/best_step``) and the end of G's MLE phase drawn (no dev F1 is logged
before D's first update, so none of the MLE phase can be selected).

    python experiments/gdan/dev_curves.py <sweep or run dirs> [--out experiments/gdan/dev_curves.png]

Reads each finished run's CSV log (csv/**/metrics.csv: ``valid/f1`` per validation) and ``metrics.json``; prints per
run the selected step, its dev F1 and the last dev F1.
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

from genlab.report import collect_runs
from genlab.tasks.gdan_objectives import METHODS

HERE = Path(__file__).resolve().parent
ORDER = ["sl", "context", "context_domain", "gen", "gen_gan", "gen_dual", "gen_domain", "gen_domain_adv"]


def dev_curve(run) -> list[tuple[int, float]]:
    """(global step, valid/f1) of one run; the logged step is the 0-based index of the last update, so +1."""
    points = {}
    for log in sorted(run.dir.glob("csv/**/metrics.csv")):
        with open(log) as f:
            for rec in csv.DictReader(f):
                if rec.get("valid/f1") and rec.get("step"):
                    points[int(rec["step"]) + 1] = float(rec["valid/f1"])
    return sorted(points.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--out", default=str(HERE / "dev_curves.png"))
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_method: dict[str, list] = {}
    for r in collect_runs(args.paths):
        if r.status == "finished":
            by_method.setdefault(str(r.config.get("task.method")), []).append(r)
    methods = [m for m in ORDER if m in by_method] + sorted(set(by_method) - set(ORDER))
    if not methods:
        raise SystemExit(f"no finished GDAN run under {args.paths}")
    cols = min(4, len(methods))
    rows = math.ceil(len(methods) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, sharey=True)
    for ax, method in zip(axes.flat, methods):
        for run in sorted(by_method[method], key=lambda r: str(r.value_of("seed"))):
            curve = dev_curve(run)
            if not curve:
                continue
            steps, f1 = zip(*curve)
            line, = ax.plot(steps, f1, lw=1, label=f"seed {run.value_of('seed')}")
            best = run.metric("valid/best_step")
            if best is not None and int(best) in dict(curve):
                ax.plot(int(best), dict(curve)[int(best)], "o", color=line.get_color(), ms=5)
            print(f"{method} seed {run.value_of('seed')}: selected step {best and int(best)} "
                  f"(dev F1 {run.metric('valid/best_f1') or math.nan:.3f}), last dev F1 {f1[-1]:.3f} at {steps[-1]}")
        mle = int(by_method[method][0].config.get("task.mle_steps") or 0)
        if mle and method in METHODS and METHODS[method].unlabeled_source == "generator":
            ax.axvline(mle, color="grey", ls="--", lw=0.8)
        ax.set_title(method, fontsize=9)
        ax.set_xlabel("update", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(methods):]:
        ax.axis("off")
    axes[0, 0].set_ylabel("dev F1")
    axes[0, 0].legend(fontsize=6)
    fig.suptitle("GDAN: dev F1 per validation\ndot = selected checkpoint, dashed = end of G's MLE phase", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
