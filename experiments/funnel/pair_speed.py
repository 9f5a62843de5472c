"""Training-step time of two pretraining presets, measured interleaved in one process so both see the same machine
load (a shared CPU's load moves by 2x within minutes, which makes runs measured one after the other incomparable).

Each preset is built exactly as ``train.py`` builds it (model, objective, optimiser, its own data pipeline and
batches); then rounds alternate the order A B / B A, timing one full step each (forward, MLM loss, backward,
optimiser step). Prints the median step time and tokens/s of each, the median of the per-round time ratios (with
its interquartile range) and /proc/loadavg before and after.

    python experiments/funnel/pair_speed.py funnel_wiki_b3_3_3_mlm_mini funnel_wiki_l7_mlm_mini --rounds 60
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

import genlab.cli  # noqa: F401  (registers the config resolvers)

CONF = Path(__file__).resolve().parents[2] / "conf"


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


class Stepper:
    """One preset's model, objective, optimiser and training batches."""

    def __init__(self, preset: str, seed: int):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name="train", overrides=[f"experiment={preset}"])
        self.data = instantiate(cfg.data)
        self.data.prepare_data()
        self.data.setup("fit")
        torch.manual_seed(seed)
        model = instantiate(cfg.model, vocab_size=self.data.model_overrides()["vocab_size"])
        self.task = instantiate(cfg.task, model=model)
        self.optimizer = self.task.configure_optimizers()["optimizer"]
        self.batches = self.data.batches("train")
        self.name, self.step_idx, self.times = preset, 0, []
        self.params = sum(p.numel() for p in model.parameters())

    def step(self, timed: bool) -> None:
        batch = self.batches[(0, self.step_idx % len(self.batches))]
        self.step_idx += 1
        start = time.perf_counter()
        loss, _ = self.task._objective(batch, train=True)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if timed:
            self.times.append(time.perf_counter() - start)
        self.tokens = batch["input_ids"].numel()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("presets", nargs=2)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    a, b = (Stepper(name, args.seed) for name in args.presets)
    for _ in range(args.warmup):
        a.step(False)
        b.step(False)
    before = loadavg()
    ratios = []
    for r in range(args.rounds):
        first, second = (a, b) if r % 2 == 0 else (b, a)
        first.step(True)
        second.step(True)
        ratios.append(a.times[-1] / b.times[-1])
    after = loadavg()
    q = statistics.quantiles(ratios, n=4)
    print(f"torch {torch.__version__}, 1 thread, {args.rounds} rounds; loadavg before {before}, after {after}")
    print("| preset | parameters | median step s | tokens/s (median step) |")
    print("|---|---:|---:|---:|")
    for s in (a, b):
        med = statistics.median(s.times)
        print(f"| {s.name} | {s.params:,} | {med:.4f} | {s.tokens / med:.0f} |")
    print(f"\nstep time {a.name} / {b.name}: median of per-round ratios {statistics.median(ratios):.3f} "
          f"(IQR {q[0]:.3f}-{q[2]:.3f}); ratio of medians {statistics.median(a.times) / statistics.median(b.times):.3f}")


if __name__ == "__main__":
    main()
