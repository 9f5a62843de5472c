"""Expected pairwise KL divergence between a trained run's next-word distributions (Dai's thesis App. A.8.1,
Table A.11).

    python experiments/mos_rank/pairwise_kl.py RUN_DIR [--split test] [--pairs 100000] [--seed 0]
        [--ckpt best|last|FILE] [--max-tokens N] [--dtype float32|float64]

Collects log P(.|c) for every context c of the split exactly as rank.py does (eval mode, batch 1, bptt 70, state
carried), then averages KL(P(.|c) || P(.|c')) over ``--pairs`` random context pairs and reports the standard error
(the thesis gives no pair count; 10^5 or more keep the standard error small). The [T, M] matrix is held in
memory: PTB test in float32 is 82k x 10k x 4 bytes = 3.3 GB; ``--max-tokens`` keeps the first N contexts. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json

import torch
from rank import add_log_prob_args, run_log_probs  # one way to load a run and its log-probabilities

from genlab.analysis.softmax_rank import pairwise_kl
from genlab.cli.errors import run_script
from genlab.errors import UserError


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_log_prob_args(ap, dtype="float32")
    ap.add_argument("--pairs", type=int, default=100_000, help="random (c, c') pairs averaged over")
    ap.add_argument("--seed", type=int, default=0, help="seeds the pair draw")
    args = ap.parse_args(argv)
    if args.pairs < 2:
        raise UserError(f"--pairs must be at least 2 for a standard error (got {args.pairs})")
    run, path, log_p = run_log_probs(args)
    mean, stderr = pairwise_kl(log_p, args.pairs, torch.Generator().manual_seed(args.seed))
    result = {"checkpoint": str(path), "split": args.split, "contexts": log_p.shape[0], "vocab": log_p.shape[1],
              "head": run.config.model.head, "pairs": args.pairs, "seed": args.seed, "kl": mean,
              "stderr": stderr}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    run_script(main)
