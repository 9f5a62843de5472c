"""Dynamic evaluation of a trained (fine-tuned) AWD-LSTM-MoS run (MoS spec §3.4, Table A.9).

    python experiments/mos_ptb_wt2/dynamic_eval.py RUN_DIR [--ckpt best|last|FILE] [--lr 0.002] [--lamb 0.075]
        [--epsilon 0.001] [--bptt 5] [--stat-batch-size 100] [--ms]

RUN_DIR is a train.py output directory (its config.yaml names the model and data). Valid and test are separate
runs from the same weights (the NT-ASGD average when the run had switched). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from genlab.errors import CheckpointError, UserError
from genlab.tasks.awd_lm import check_identity, load_awd_checkpoint
from genlab.tasks.dynamic_eval import dynamic_evaluate, gradient_statistics


def find_checkpoint(run_dir: Path, which: str) -> Path:
    if which not in ("best", "last"):
        return Path(which)
    ckpts = run_dir / "checkpoints"
    found = [ckpts / "last.ckpt"] if which == "last" else sorted(ckpts.glob("best*.ckpt"))
    if not found or not found[-1].is_file():
        raise CheckpointError(f"no {which} checkpoint in {ckpts}; pass --ckpt /path/to/file.ckpt.")
    return found[-1]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--ckpt", default="best")
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--lamb", type=float, default=0.075)
    ap.add_argument("--epsilon", type=float, default=0.001)
    ap.add_argument("--bptt", type=int, default=5)
    ap.add_argument("--stat-batch-size", type=int, default=100)
    ap.add_argument("--ms", action="store_true", help="RMS instead of the root-sum gradient statistic")
    ap.add_argument("--splits", default="valid,test")
    args = ap.parse_args(argv)

    cfg = OmegaConf.load(args.run_dir / "config.yaml")
    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("test")
    model = instantiate(cfg.model, **dm.model_overrides())
    path = find_checkpoint(args.run_dir, args.ckpt)
    weights, identity = load_awd_checkpoint(path)
    check_identity(identity, dm.identity(), path)
    model.load_state_dict(weights)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    split = lambda s: torch.as_tensor(dm.corpus.splits[s].astype("int64"))  # noqa: E731
    stats = gradient_statistics(model, split("train"), args.stat_batch_size, args.bptt, ms=args.ms)
    result = {"checkpoint": str(path), "lr": args.lr, "lamb": args.lamb, "epsilon": args.epsilon}
    for s in args.splits.split(","):
        nll, _ = dynamic_evaluate(model, split(s), stats, args.lr, args.lamb, args.epsilon, args.bptt)
        result[f"{s}/loss"] = nll
        result[f"{s}/ppl"] = math.exp(nll)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    try:
        main()
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
