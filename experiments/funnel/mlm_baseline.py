"""The most-frequent-target baseline of the Funnel real-data mini's acceptance run (M1) for a pretraining preset.

Builds the preset's data exactly as ``train.py`` does and counts the MLM targets: the token most often masked in
``--train-batches`` training batches is the constant prediction; its accuracy on the held-out targets (the split
``train.py`` tests on, first pass) is the baseline the masked-token accuracy ``test/mlm_acc`` must beat 1.7x.
Also prints the held-out split's own most frequent target share (an upper bound for any constant prediction) and
the held-out loss of the training targets' unigram distribution (add-one smoothed over the vocabulary): the loss of
a model that has learnt target frequencies but no context, the plateau an MLM run first settles on.

    python experiments/funnel/mlm_baseline.py experiment=funnel_wiki_b1_1_1_mlm_mini
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

import genlab.cli  # noqa: F401  (registers the config resolvers)

CONF = Path(__file__).resolve().parents[2] / "conf"


def target_counts(batches, limit: int | None = None) -> Counter:
    counts: Counter = Counter()
    for k, batch in enumerate(batches):
        if limit is not None and k >= limit:
            break
        labels = batch["labels"]
        counts.update(labels[labels != -100].tolist())
    return counts


def unigram_loss(train_counts: Counter, held_out: Counter, vocab_size: int) -> float:
    """Mean held-out cross-entropy (nats) of the add-one smoothed training unigram distribution."""
    denominator = sum(train_counts.values()) + vocab_size
    total = sum(held_out.values())
    return -sum(n * math.log((train_counts[t] + 1) / denominator) for t, n in held_out.items()) / total


def main(overrides: list[str], train_batches: int = 300) -> dict[str, float]:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("fit")
    train = dm.batches("train")
    train_counts = target_counts((train[(0, s)] for s in range(len(train))), train_batches)
    held_out = target_counts(dm.test_dataloader())
    constant, _ = train_counts.most_common(1)[0]
    total = sum(held_out.values())
    out = {
        "held_out_targets": total,
        "constant_token": constant,
        "constant_accuracy": held_out[constant] / total,
        "held_out_majority_share": held_out.most_common(1)[0][1] / total,
        "unigram_loss": unigram_loss(train_counts, held_out, cfg.data.vocab_size),
    }
    tok = dm.corpus.tokenizer
    piece = tok.pieces[constant] if hasattr(tok, "pieces") else str(constant)
    print(f"most frequent training target: id {constant} ({piece!r}) over {sum(train_counts.values())} targets")
    print(f"held-out targets: {total}; its accuracy there: {out['constant_accuracy']:.4f}; "
          f"held-out majority share: {out['held_out_majority_share']:.4f}")
    print(f"unigram held-out loss (training target frequencies, add-one): {out['unigram_loss']:.3f} nats")
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", default=["experiment=funnel_wiki_b1_1_1_mlm_mini"],
                    help="Hydra overrides naming the pretraining preset, as for train.py")
    ap.add_argument("--train-batches", type=int, default=300, help="training batches counted for the constant")
    args = ap.parse_args()
    torch.set_num_threads(1)
    main(args.overrides, args.train_batches)
