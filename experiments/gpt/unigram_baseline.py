"""The GPT mini's acceptance check G1 (experiments/gpt/README.md): the held-out NLL per BPE token of a unigram model
(add-one counts of the training stream), the bar the pretrained LM must beat by 0.5 nats. Reads the same corpus, BPE
and held-out split as the pretraining data.

    python experiments/gpt/unigram_baseline.py data.corpus=pretrain_mini_heldout data.vocab_size=4000
    python experiments/gpt/unigram_baseline.py data.corpus=text data.path=/your/corpus data.vocab_size=40478

Arguments are ``data.<key>=<value>`` of ``GPTPretrainDataModule`` (conf/data/gpt_pretrain_mini.yaml's by default).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from omegaconf import OmegaConf

from genlab.data.pretrain.gpt_windows import GPTPretrainDataModule


def unigram_nll(train: np.ndarray, valid: np.ndarray, vocab_size: int) -> float:
    counts = np.bincount(train, minlength=vocab_size).astype(np.float64) + 1.0
    return float(-np.log(counts[valid] / counts.sum()).mean())


def main(argv: list[str]) -> float:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", help="data.<key>=<value>")
    cfg = OmegaConf.from_dotlist([a.removeprefix("data.") for a in p.parse_args(argv).overrides])
    dm = GPTPretrainDataModule(**{"corpus": "pretrain_mini_heldout", "vocab_size": 4000, **cfg})
    dm.setup()
    nll = unigram_nll(np.asarray(dm.streams["train"]), np.asarray(dm.streams["valid"]), dm.tokenizer.vocab_size)
    print(f"unigram held-out NLL = {nll:.3f} nats per BPE token ({len(dm.streams['valid'])} tokens)")
    return nll


if __name__ == "__main__":
    main(sys.argv[1:])
