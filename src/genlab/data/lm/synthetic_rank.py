"""A synthetic high-rank language: topic-switching unigrams (a test bed for the rank
argument of Dai thesis App. A.2).

Every ``block`` tokens a latent topic z in {0..n_topics-1} is drawn uniformly; tokens are then drawn from that
topic's unigram distribution over ``vocab_size`` words. A model that is unsure of the topic must predict
``log sum_z q(z | context) u_z(x)``, a log of a mixture, whose matrix over contexts is high-rank: a Softmax with
small d cannot represent it, a mixture of ``n_topics`` softmaxes can. Deterministic given ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from genlab.utils import stable_hash


@dataclass
class SyntheticCorpus:
    """Same shape as the shared LM corpora: ``vocab`` (symbols), ``splits`` of int32 ids, ``level``, ``metric``."""

    name: str
    vocab: list[str]
    splits: dict[str, np.ndarray]
    unigrams: np.ndarray  # [n_topics, vocab_size], the generator's true topic distributions
    level: str = "word"
    metric: str = "ppl"
    settings: dict = field(default_factory=dict)

    def fingerprint(self) -> str:
        return stable_hash(self.name, self.settings)


def topic_unigrams(n_topics: int, vocab_size: int, concentration: float, rng: np.random.Generator) -> np.ndarray:
    return rng.dirichlet(np.full(vocab_size, concentration), size=n_topics)


def sample_topic_stream(unigrams: np.ndarray, n_tokens: int, block: int, rng: np.random.Generator) -> np.ndarray:
    n_topics, vocab_size = unigrams.shape
    n_blocks = -(-n_tokens // block)
    topics = rng.integers(n_topics, size=n_blocks)
    cdf = np.cumsum(unigrams, axis=1)
    u = rng.random((n_blocks, block))
    ids = np.stack([np.searchsorted(cdf[z], u[i], side="right") for i, z in enumerate(topics)])
    return np.minimum(ids, vocab_size - 1).reshape(-1)[:n_tokens].astype(np.int32)


def make_topic_corpus(
    vocab_size: int = 500,
    n_topics: int = 8,
    block: int = 50,
    concentration: float = 0.05,
    train_tokens: int = 50_000,
    valid_tokens: int = 5_000,
    test_tokens: int = 5_000,
    seed: int = 0,
) -> SyntheticCorpus:
    rng = np.random.default_rng(seed)
    unigrams = topic_unigrams(n_topics, vocab_size, concentration, rng)
    sizes = {"train": train_tokens, "valid": valid_tokens, "test": test_tokens}
    splits = {name: sample_topic_stream(unigrams, n, block, rng) for name, n in sizes.items()}
    settings = dict(vocab_size=vocab_size, n_topics=n_topics, block=block, concentration=concentration,
                    seed=seed, **{f"{k}_tokens": v for k, v in sizes.items()})
    return SyntheticCorpus("synthetic_topics", [f"w{i}" for i in range(vocab_size)], splits, unigrams,
                           settings=settings)


def true_log_probs(unigrams: np.ndarray, stream: np.ndarray, block: int) -> np.ndarray:
    """Exact ``log P(x_{t+1} | x_{<=t})`` of the generator for every position t of ``stream`` (a split that
    starts at a block boundary): the topic posterior given the tokens of the current block so far, mixed over
    the topic unigrams. Rows are [len(stream) - 1, vocab_size], float64."""
    log_u = np.log(unigrams)  # [Z, V]
    n_topics = unigrams.shape[0]
    out = np.empty((len(stream) - 1, unigrams.shape[1]))
    log_post = np.full(n_topics, -np.log(n_topics))
    for t in range(len(stream) - 1):
        if t % block == 0:
            log_post = np.full(n_topics, -np.log(n_topics))  # a fresh topic at each block start
        log_post = log_post + log_u[:, stream[t]]
        log_post -= np.logaddexp.reduce(log_post)
        nxt = t + 1
        if nxt % block == 0:  # the next token opens a new block: its topic is uniform again
            out[t] = np.logaddexp.reduce(log_u - np.log(n_topics), axis=0)
        else:
            out[t] = np.logaddexp.reduce(log_post[:, None] + log_u, axis=0)
    return out
