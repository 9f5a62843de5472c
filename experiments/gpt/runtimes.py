"""Wall-clock time of finished runs under sweep directories, per experiment and setting (mean ± std over seeds):
from ``run.json``'s start (written once the data is set up and the model built) to ``metrics.json``'s end, so it
covers training, validation and the final test, not data preparation or tokenizer training.

    python experiments/gpt/runtimes.py outputs/gpt_minis
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

SKIP = ("experiment=", "seed=", "paths.", "logger", "trainer.enable_progress_bar", "task.init_from=", "hydra.")


def runtimes(root: Path) -> dict[tuple[str, ...], list[float]]:
    out: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for metrics in sorted(root.rglob("metrics.json")):
        m, info_file = json.loads(metrics.read_text()), metrics.parent / "run.json"
        if m.get("status") != "finished" or not info_file.is_file():
            continue
        info = json.loads(info_file.read_text())
        seconds = (datetime.fromisoformat(m["end_time"]) - datetime.fromisoformat(info["start_time"])).total_seconds()
        key = (info.get("experiment") or "?", *(o for o in info.get("overrides", []) if not o.startswith(SKIP)))
        out[key].append(seconds)
    return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="sweep or run directories (searched recursively)")
    rows = defaultdict(list)
    for p in parser.parse_args(argv).paths:
        for key, values in runtimes(Path(p)).items():
            rows[key] += values
    print("| setting | runs | wall s (mean ± std) |\n|---|---|---|")
    for key, v in sorted(rows.items()):
        std = statistics.stdev(v) if len(v) > 1 else 0.0
        print(f"| {' '.join(key)} | {len(v)} | {statistics.fmean(v):.0f} ± {std:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
