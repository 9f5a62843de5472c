"""The ablation directions of Yang's thesis Table 3.2 on the MNIST-5k minis: each regulariser moves its own
diagnostic, read from the runs' CSV logs (same seed, means over the evaluations at iterations 600-1,400).

    python experiments/bad_gan/ablation_directions.py --fm <FM run dir> --pt <FM+PT run dir> --ent <FM+Ent run dir> \
        [--ld <FM+LD run dir> --ld-baseline <same preset with task.ld_weight=0>] [--out experiments/bad_gan]

* PT  -> lower mean pairwise cos^2 of generated features (train/g_pt, train-mode batch value): >= 0.02 below FM.
* Ent -> conditional entropy of D on the test images (valid/ent) at most 0.7x FM.
* LD  -> lower max density-model log p of generated samples (valid/gen_logp_max). The FM baseline must carry the
         same density model, i.e. the LD preset with task.ld_weight=0 (an FM-only preset logs no log p).
Writes ``ablation_directions.md``; exits 1 when a measured direction contradicts its bar (bars
and pilot figures: experiments/bad_gan/README.md).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

WINDOW = (590, 1410)  # evaluations at 600 ... 1,400 (Lightning logs them at step 599, 799, ...)


def series(run: Path, key: str, window: tuple[int, int] = WINDOW) -> list[float]:
    """Values of ``key`` logged in the window, from <run>/csv/metrics.csv (CSVLogger, one row per log call)."""
    files = sorted(Path(run).glob("csv/**/metrics.csv"))
    if not files:
        sys.exit(f"error: {run} has no csv/metrics.csv; pass a run directory of train.py (logger with csv)")
    out = []
    with open(files[-1]) as f:
        for row in csv.DictReader(f):
            if row.get(key) and window[0] <= int(row["step"]) <= window[1]:
                out.append(float(row[key]))
    if not out:
        sys.exit(f"error: {run} logged no {key} between iterations {window[0]} and {window[1]}")
    return out


def mean(run: Path, key: str, window: tuple[int, int] = WINDOW) -> float:
    values = series(run, key, window)
    return sum(values) / len(values)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fm", type=Path, required=True)
    ap.add_argument("--pt", type=Path)
    ap.add_argument("--ent", type=Path)
    ap.add_argument("--ld", type=Path)
    ap.add_argument("--ld-baseline", type=Path)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent)
    ap.add_argument("--window", type=int, nargs=2, default=list(WINDOW), metavar=("FIRST", "LAST"),
                    help="logged steps averaged over (default: the evaluations at iterations 600-1,400)")
    args = ap.parse_args()
    window = tuple(args.window)
    rows = []  # (diagnostic, regularised, baseline, bar, holds)
    if args.pt:
        pt, fm = mean(args.pt, "train/g_pt", window), mean(args.fm, "train/g_pt", window)
        rows.append(("PT: generated-feature cos² (train/g_pt)", pt, fm, "≤ FM − 0.02 (pilot: 0.57 vs 0.65)",
                     pt <= fm - 0.02))
    if args.ent:
        # valid/ent only: the training loss logs train/d_ent as 0 when the Ent term is off, so FM has no train value
        ent, fm = mean(args.ent, "valid/ent", window), mean(args.fm, "valid/ent", window)
        rows.append(("Ent: conditional entropy on the test images (valid/ent)", ent, fm,
                     "≤ 0.7 × FM (pilot: 0.14 vs 0.33)", ent <= 0.7 * fm))
    if args.ld:
        if not args.ld_baseline:
            sys.exit("error: --ld needs --ld-baseline (the LD preset with task.ld_weight=0, same density model)")
        ld, fm = mean(args.ld, "valid/gen_logp_max", window), mean(args.ld_baseline, "valid/gen_logp_max", window)
        rows.append(("LD: max log p of generated samples (valid/gen_logp_max)", ld, fm, "< baseline", ld < fm))
    if not rows:
        sys.exit("error: pass at least one of --pt, --ent, --ld")
    span = "evaluations 600-1,400" if window == WINDOW else f"logged steps {window[0]}-{window[1]}"
    lines = [f"# Ablation directions (Yang's thesis Table 3.2) on MNIST-5k (same seed, mean over {span})", "",
             "| diagnostic | regularised | FM baseline | bar | holds |", "|---|---|---|---|---|"]
    lines += [f"| {d} | {a:.4f} | {b:.4f} | {rule} | {'yes' if ok else 'NO'} |" for d, a, b, rule, ok in rows]
    runs = {k: v for k, v in vars(args).items() if v is not None and k not in ("out", "window")}
    lines += ["", "Runs: " + ", ".join(f"{k}={v}" for k, v in runs.items())]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ablation_directions.md").write_text(text)
    print(text)
    return 0 if all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
