"""Empirical rank of the log-probability matrix of a trained run (Dai's thesis App. A.3, Tables A.6 / A.7, Figure A.1).

    python experiments/mos_rank/rank.py RUN_DIR [--ckpt best|last|FILE] [--split test] [--max-tokens N]
        [--dtype float64|float32]

Runs the model over the split in eval mode (batch 1, bptt 70, state carried) with the whole model in --dtype,
stacks log P(.|context) into a [T, M] matrix and counts singular values above the Numerical-Recipes threshold
with the epsilon of that dtype. Prints one JSON line (rank, bounds d+2 for Softmax/MoC, Figure A.1 CDF points).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from hydra.utils import instantiate

from genlab.analysis.softmax_rank import collect_log_probs, rank_tolerance, singular_value_cdf, singular_values
from genlab.cli.errors import run_script
from genlab.errors import CheckpointError, UserError
from genlab.runs import Run, load_run
from genlab.tasks.awd_lm import check_vocabulary, load_awd_checkpoint


def find_checkpoint(run: Run, which: str) -> Path:
    """``best`` (the run's recorded best checkpoint), ``last`` or a checkpoint file."""
    if which not in ("best", "last"):
        return Path(which)
    path = run.best_checkpoint if which == "best" else run.dir / "checkpoints" / "last.ckpt"
    if path is None or not path.is_file():
        raise CheckpointError(f"no {which} checkpoint in {run.dir / 'checkpoints'}; pass --ckpt /path/to/file.ckpt.")
    return path


def add_log_prob_args(ap: argparse.ArgumentParser, dtype: str) -> None:
    """The options that pick a run's checkpoint, split and precision (shared with pairwise_kl.py)."""
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--ckpt", default="best", help="best | last | a checkpoint file")
    ap.add_argument("--split", default="test")
    ap.add_argument("--max-tokens", type=int, default=None, help="use the first N tokens (memory: N x vocab)")
    ap.add_argument("--dtype", default=dtype, choices=["float64", "float32"])


def run_log_probs(args: argparse.Namespace) -> tuple[Run, Path, torch.Tensor]:
    """The run, its checkpoint and the [T, M] matrix log P(.|c_t) over ``args.split`` (eval mode, batch 1, bptt 70,
    state carried, the model in ``args.dtype``): the input of the rank and pairwise-KL analyses."""
    run = load_run(args.run_dir)
    cfg = run.config
    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("test")
    model = instantiate(cfg.model, **dm.model_overrides())
    path = find_checkpoint(run, args.ckpt)
    weights, identity = load_awd_checkpoint(path)
    check_vocabulary(identity, dm.identity(), path)
    model.load_state_dict(weights)
    if args.split not in dm.corpus.splits:
        raise UserError(f"--split {args.split!r}: choose one of {', '.join(dm.corpus.splits)}")
    tokens = torch.as_tensor(dm.corpus.splits[args.split].astype("int64"))
    if args.max_tokens:
        tokens = tokens[: args.max_tokens + 1]
    return run, path, collect_log_probs(model, tokens, bptt=70, dtype=getattr(torch, args.dtype))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_log_prob_args(ap, dtype="float64")
    args = ap.parse_args(argv)
    run, path, log_p = run_log_probs(args)
    cfg, dtype = run.config, getattr(torch, args.dtype)
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
    run_script(main)
