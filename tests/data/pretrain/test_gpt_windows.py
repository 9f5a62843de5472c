"""GPT pretraining batches (Radford et al., 2018, §4.1): random contiguous windows keyed on (seed, pass, step, rank),
held-out windows that score every token once, the corpus tiers and the resume position."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from genlab.data.pretrain.gpt_windows import (
    GPTPretrainDataModule,
    HeldOutWindows,
    RandomWindows,
)
from genlab.errors import DataError

STREAM = np.arange(1000, dtype=np.int32)  # token i has id i: a window's content reveals where it starts


def test_training_windows_are_contiguous_slices_drawn_by_seed_pass_step_and_rank():
    data = RandomWindows(STREAM, batch_size=4, seq_len=16, seed=7, rank=0, world=2)
    assert len(data) == 1000 // (4 * 2 * 16)
    batch = data[(1, 3)]["input_ids"]
    assert batch.shape == (4, 16) and batch.dtype == torch.long
    assert torch.equal(batch[:, 1:] - batch[:, :-1], torch.ones(4, 15, dtype=torch.long))  # contiguous
    assert torch.equal(batch, data[(1, 3)]["input_ids"])  # a rebuilt step is the same batch
    assert not torch.equal(batch, data[(1, 4)]["input_ids"]) and not torch.equal(batch, data[(2, 3)]["input_ids"])
    other_rank = RandomWindows(STREAM, 4, 16, seed=7, rank=1, world=2)
    assert not torch.equal(batch, other_rank[(1, 3)]["input_ids"])
    starts = np.concatenate([data.starts(0, s) for s in range(200)])
    assert starts.min() >= 0 and starts.max() <= 1000 - 16 and starts.max() > 900  # the whole stream is reachable


def test_held_out_windows_score_every_token_once_across_ranks():
    seen, lengths = [], {}
    for rank in range(3):
        data = HeldOutWindows(STREAM[:100], seq_len=16, rank=rank, world=3)
        for k in range(len(data)):
            item = data[k]
            real = item["input_ids"][item["lm_mask"].bool()]
            seen += real.tolist()
            lengths[int(real[0])] = len(real)
    assert sorted(seen) == list(range(100))
    assert sorted(lengths) == list(range(0, 100, 16)) and [lengths[s] for s in sorted(lengths)][-1] == 4
    assert all(n == 16 for s, n in lengths.items() if s < 96)  # only the last window is short (and masked)


def write_corpus(root):
    rng = np.random.default_rng(0)
    words = ["the", "a", "river", "town", "old", "new", "road", "bank", "boat", "house"]
    for split, n in (("train", 120), ("valid", 10)):
        (root / split).mkdir(parents=True)
        docs = ["\n".join(" ".join(rng.choice(words, 7)) + "." for _ in range(4)) for _ in range(n)]
        (root / split / "shard.txt").write_text("\n\n".join(docs), encoding="utf-8")


def test_datamodule_reads_the_corpus_trains_its_bpe_and_resumes_at_the_saved_step(tmp_path):
    write_corpus(tmp_path / "corpus")
    dm = GPTPretrainDataModule(path=str(tmp_path / "corpus"), cache_dir=str(tmp_path / "cache"), vocab_size=40,
                               seq_len=8, batch_size=2, seed=1)
    dm.prepare_data()
    dm.setup("fit")
    assert dm.model_overrides() == {"vocab_size": dm.tokenizer.vocab_size}
    assert dm.sentencepiece_model().is_file() and dm.identity()["tokenizer"] == dm.tokenizer.identity
    first = [b["input_ids"] for _, b in zip(range(6), dm.train_dataloader())]
    assert all(b.shape == (2, 8) for b in first)
    assert next(iter(dm.val_dataloader()))["lm_mask"].shape == (dm.eval_batch_size, 8)

    dm.load_state_dict({"pass": 0, "step": 4})  # what a checkpoint taken after 4 batches holds
    resumed = next(iter(dm.train_dataloader()))
    assert (resumed["pass"], resumed["step"]) == (0, 4) and torch.equal(resumed["input_ids"], first[4])


def test_a_corpus_shorter_than_one_window_is_a_clear_error():
    with pytest.raises(DataError, match="not enough for one window"):
        RandomWindows(STREAM[:10], batch_size=2, seq_len=16, seed=0)
