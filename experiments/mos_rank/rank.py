"""Empirical rank of the log-probability matrix of a trained run (MoS spec §5.2, Table A.6 / A.7, Figure A.1).

    python experiments/mos_rank/rank.py RUN_DIR [--ckpt best|last|FILE] [--split test] [--max-tokens N]
        [--dtype float64|float32]

Runs the model over the split in eval mode (batch 1, bptt 70, state carried) with the whole model in --dtype,
stacks log P(.|context) into a [T, M] matrix and counts singular values above the Numerical-Recipes threshold
with the epsilon of that dtype. Prints one JSON line (rank, bounds d+2 for Softmax/MoC, Figure A.1 CDF points).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from hydra.utils import instantiate

from genlab.analysis.softmax_rank import collect_log_probs, rank_tolerance, singular_value_cdf, singular_values
from genlab.errors import CheckpointError, UserError
from genlab.runs import Run, load_run
from genlab.tasks.awd_lm import check_identity, load_awd_checkpoint


def find_checkpoint(run: Run, which: str) -> Path:
    """``best`` (the run's recorded best checkpoint), ``last`` or a checkpoint file."""
    if which not in ("best", "last"):
        return Path(which)
    path = run.best_checkpoint if which == "best" else run.dir / "checkpoints" / "last.ckpt"
    if path is None or not path.is_file():
        raise CheckpointError(f"no {which} checkpoint in {run.dir / 'checkpoints'}; pass --ckpt /path/to/file.ckpt.")
    return path


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--ckpt", default="best")
    ap.add_argument("--split", default="test")
    ap.add_argument("--max-tokens", type=int, default=None, help="use the first N tokens (memory: N x vocab)")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    args = ap.parse_args(argv)
    run = load_run(args.run_dir)
    cfg = run.config
    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("test")
    model = instantiate(cfg.model, **dm.model_overrides())
    path = find_checkpoint(run, args.ckpt)
    weights, identity = load_awd_checkpoint(path)
    check_identity(identity, dm.identity(), path)
    model.load_state_dict(weights)
    tokens = torch.as_tensor(dm.corpus.splits[args.split].astype("int64"))
    if args.max_tokens:
        tokens = tokens[: args.max_tokens + 1]
    dtype = getattr(torch, args.dtype)
    log_p = collect_log_probs(model, tokens, bptt=70, dtype=dtype)
    sv = singular_values(log_p)
    tol = rank_tolerance(sv, tuple(log_p.shape), torch.finfo(dtype).eps)
    cdf = singular_value_cdf(sv, torch.linspace(0, 1, 11, dtype=torch.float64))
    result = {
        "checkpoint": str(path), "split": args.split, "contexts": log_p.shape[0], "vocab": log_p.shape[1],
        "head": cfg.model.head, "emsize": cfg.model.emsize, "rank": int((sv > tol).sum()),
        "softmax_bound_d_plus_2": cfg.model.emsize + 2, "sv_cdf": [round(x, 4) for x in cdf.tolist()],
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    try:
        main()
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
