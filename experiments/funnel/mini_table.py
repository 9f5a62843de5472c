"""Table of the CPU mini and midi runs written by experiments/funnel/run_minis.sh: per run and per preset (mean ± sample std
over seeds) the held-out MLM loss and masked-token accuracy at each validation step and after training (test/*,
the best checkpoint by valid/loss), training tokens/s (mean of the logged 20-step windows) and wall time, plus the
paired tokens/s ratio and test-loss gap of the two models of each seed and size (run back to back, so they saw about the same machine load,
logged as /proc/loadavg in runs.log).

    python experiments/funnel/mini_table.py /tmp/funnel_runs > experiments/funnel/mini_table.md
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
from collections import defaultdict
from datetime import datetime
from pathlib import Path

PAIRS = [(f"funnel_wiki_b3_3_3_mlm_{size}", f"funnel_wiki_l7_mlm_{size}") for size in ("mini", "midi")]


def _mean_std(values: list[float | None], digits: int = 3) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def read_run(d: Path) -> dict | None:
    metrics_file = d / "metrics.json"
    if not metrics_file.is_file():
        return None
    m = json.loads(metrics_file.read_text())
    info = json.loads((d / "run.json").read_text())
    seed = next((int(a.split("=")[1]) for a in info["argv"] if a.startswith("seed=")), None)
    with open(d / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    valid = {int(r["step"]): (float(r["valid/loss"]), float(r["valid/mlm_acc"])) for r in rows if r.get("valid/loss")}
    tps = [float(r["perf/tokens_per_s"]) for r in rows if r.get("perf/tokens_per_s")]
    start = datetime.fromisoformat(info["start_time"])
    end = datetime.fromisoformat(m["end_time"]) if m.get("end_time") else None
    return {"experiment": info["experiment"], "seed": seed, "status": m["status"], "valid": valid,
            "test_loss": m["metrics"].get("test/loss"), "test_acc": m["metrics"].get("test/mlm_acc"),
            "tokens_per_s": statistics.fmean(tps) if tps else None,
            "wall_s": (end - start).total_seconds() if end else None, "dir": d.name}


def loads(root: Path) -> dict[str, tuple[str, str]]:
    """run dir name -> (loadavg at start, at end) from runs.log."""
    out: dict[str, list[str]] = defaultdict(lambda: ["", ""])
    log = root / "runs.log"
    for line in log.read_text().splitlines() if log.is_file() else []:
        m = re.match(r"\S+ (start|end) (\S+) seed=(\d+).*loadavg=([\d.]+ [\d.]+ [\d.]+)", line)
        if m:
            out[f"{m.group(2)}_s{m.group(3)}"][0 if m.group(1) == "start" else 1] = m.group(4)
    return {k: (v[0], v[1]) for k, v in out.items()}


def main(root: Path) -> None:
    runs = [r for d in sorted(root.iterdir()) if d.is_dir() and (r := read_run(d))]
    load = loads(root)
    steps = sorted({s for r in runs for s in r["valid"]})
    print("| run | status | " + " | ".join(f"valid loss / acc @{s}" for s in steps)
          + " | test loss | test acc | tokens/s | wall s | loadavg start -> end |")
    print("|---" * (len(steps) + 7) + "|")
    for r in runs:
        cells = [f"{r['valid'][s][0]:.3f} / {r['valid'][s][1]:.3f}" if s in r["valid"] else "-" for s in steps]
        la = load.get(r["dir"], ("", ""))
        print(f"| {r['dir']} | {r['status']} | " + " | ".join(cells)
              + f" | {_num(r['test_loss'], 3)} | {_num(r['test_acc'], 3)} | {_num(r['tokens_per_s'], 0)} | "
              f"{_num(r['wall_s'], 0)} | {la[0]} -> {la[1]} |")
    print()
    by_exp: dict[str, list[dict]] = defaultdict(list)
    for r in runs:
        if r["status"] == "finished":
            by_exp[r["experiment"]].append(r)
    print("| preset | seeds | " + " | ".join(f"valid loss @{s}" for s in steps)
          + " | test loss | test acc | tokens/s | wall s |")
    print("|---" * (len(steps) + 6) + "|")
    for exp, rs in sorted(by_exp.items()):
        cells = [_mean_std([r["valid"][s][0] for r in rs if s in r["valid"]]) for s in steps]
        print(f"| {exp} | {sorted(r['seed'] for r in rs)} | " + " | ".join(cells)
              + f" | {_mean_std([r['test_loss'] for r in rs])} | {_mean_std([r['test_acc'] for r in rs])} | "
              f"{_mean_std([r['tokens_per_s'] for r in rs], 0)} | {_mean_std([r['wall_s'] for r in rs], 0)} |")
    for pair in PAIRS:
        funnel = {r["seed"]: r for r in by_exp.get(pair[0], [])}
        base = {r["seed"]: r for r in by_exp.get(pair[1], [])}
        paired = sorted(set(funnel) & set(base))
        if paired:
            ratios = [funnel[s]["tokens_per_s"] / base[s]["tokens_per_s"] for s in paired]
            gaps = [funnel[s]["test_loss"] - base[s]["test_loss"] for s in paired
                    if funnel[s]["test_loss"] is not None and base[s]["test_loss"] is not None]
            print(f"\npaired over seeds {paired}: tokens/s {pair[0]} / {pair[1]} = {_mean_std(ratios)}; "
                  f"test loss difference (funnel - baseline) = {_mean_std(gaps)}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path, nargs="?", default=Path("outputs/funnel_minis"),
                    help="the folder run_minis.sh wrote (one run directory per preset and seed, and runs.log)")
    main(ap.parse_args().root)
