"""The softmax bottleneck on a synthetic high-rank language (Dai's thesis App. A.2).

    python experiments/mos_rank/synthetic_demo.py [--vocab 100] [--topics 8] [--block 20] [--contexts 400]
        [--steps 3000] [--dims 2,4,8,16]

Builds the topic-switching language of genlab.data.lm.synthetic_rank, takes the generator's exact next-token
log-probabilities over --contexts positions, reports their empirical rank, and fits a Softmax (K=1) and a
mixture of --topics softmaxes at each d (free context/word vectors, Adam on the mean KL). Expected: rank far
above d + 2; Softmax KL stays high for small d, MoS reaches a much lower KL; both near 0 once d >= rank.
"""

from __future__ import annotations

import argparse

import torch

from genlab.analysis.softmax_rank import bottleneck_fit, numerical_rank
from genlab.data.lm.synthetic_rank import make_topic_corpus, true_log_probs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=100)
    ap.add_argument("--topics", type=int, default=8)
    ap.add_argument("--block", type=int, default=20)
    ap.add_argument("--contexts", type=int, default=400)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--dims", default="2,4,8,16")
    args = ap.parse_args()
    corpus = make_topic_corpus(vocab_size=args.vocab, n_topics=args.topics, block=args.block, train_tokens=10,
                               valid_tokens=args.contexts + 1, test_tokens=10, seed=0)
    target = torch.from_numpy(true_log_probs(corpus.unigrams, corpus.splits["valid"], args.block))
    print(f"contexts {target.shape[0]}, vocab {target.shape[1]}, rank of log P = {numerical_rank(target)}")
    print(f"| d | Softmax KL | MoS-{args.topics} KL |\n|---|---|---|")
    for d in map(int, args.dims.split(",")):
        kl_s = bottleneck_fit(target, d=d, k=1, steps=args.steps)
        kl_m = bottleneck_fit(target, d=d, k=args.topics, steps=args.steps)
        print(f"| {d} | {kl_s:.4f} | {kl_m:.4f} |")


if __name__ == "__main__":
    main()
