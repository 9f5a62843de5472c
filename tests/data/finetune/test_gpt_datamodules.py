"""GPT finetuning DataModules: the suite's readers and splits with GPT's input transformations (Radford et al., 2018,
§3.3: ``<s> x <e>``, ``<s> p $ h <e>``, both orders for similarity, one sequence per choice, Story Cloze's per-part
cut), right padding per batch, and a training order that resumes mid-epoch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from genlab.data.finetune import glue
from genlab.data.finetune.gpt_datamodules import (
    GPTClassificationDataModule,
    GPTRaceDataModule,
    GPTStoryClozeDataModule,
)
from genlab.data.finetune.gpt_transforms import SpecialTokens, multiple_choice, story_cloze
from genlab.data.finetune.race import read_race
from genlab.data.finetune.story_cloze import TEST_FILE, VAL_FILE, read_stories, release_split
from genlab.data.loading.resumable import EpochShuffle
from genlab.data.sources.tiers import locate
from genlab.errors import DataError


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("gpt_dm_cache"))


def setup(dm):
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_single_sentences_become_start_text_extract(cache):
    dm = setup(GPTClassificationDataModule("sst2", source="mini", cache_dir=cache, vocab_size=300, max_seq_len=48))
    sp = SpecialTokens.after_vocab(dm.tokenizer.vocab_size)
    first = glue.read_split(dm.glue_task, dm.root, dm.glue_task.train)[0]
    assert dm.splits["train"][0]["tokens"] == [sp.start, *dm.tokenizer.encode(first.text_a)[:46], sp.extract]
    batch = next(iter(dm.val_dataloader()[0]))
    ends = batch["lm_mask"].sum(-1) - 1
    assert torch.equal(batch["input_ids"].gather(1, ends[:, None])[:, 0], torch.full_like(ends, sp.extract))
    assert batch["input_ids"].shape[1] == int(batch["lm_mask"].sum(-1).max())  # padded to the longest row only
    assert set(dm.test_split_names()) == {"dev", "SST-2"}
    unlabelled = next(iter(dm.test_dataloader()[1]))
    assert "labels" not in unlabelled


def test_pairs_are_entailment_or_both_orders(cache):
    one = setup(GPTClassificationDataModule("mrpc", source="mini", cache_dir=cache, vocab_size=500, max_seq_len=256))
    both = setup(GPTClassificationDataModule("mrpc", source="mini", cache_dir=cache, vocab_size=500, max_seq_len=256,
                                             layout="gpt_both_orders"))
    sp = SpecialTokens.after_vocab(one.tokenizer.vocab_size)
    ex = glue.read_split(one.glue_task, one.root, one.glue_task.train)[0]
    a, b = one.tokenizer.encode(ex.text_a), one.tokenizer.encode(ex.text_b)
    assert one.splits["train"][0]["tokens"] == [sp.start, *a, sp.delimiter, *b, sp.extract]
    assert both.splits["train"][0]["tokens"] == [[sp.start, *a, sp.delimiter, *b, sp.extract],
                                              [sp.start, *b, sp.delimiter, *a, sp.extract]]
    batch = next(iter(both.train_dataloader()))
    assert batch["input_ids"].shape[:2] == (both.batch_size, 2) and batch["lm_mask"].shape == batch["input_ids"].shape
    with pytest.raises(DataError, match="needs sentence pairs"):
        setup(GPTClassificationDataModule("sst2", source="mini", cache_dir=cache, vocab_size=300,
                                          layout="gpt_both_orders"))


def test_race_gives_one_sequence_per_option_with_the_same_document_prefix(cache):
    dm = setup(GPTRaceDataModule(source="mini", cache_dir=cache, vocab_size=800, max_seq_len=64, batch_size=3))
    sp = SpecialTokens.after_vocab(dm.tokenizer.vocab_size)
    choices = dm.data["train"][0]["tokens"]
    assert len(choices) == 4 and all(len(c) <= 64 and c[0] == sp.start and c[-1] == sp.extract for c in choices)
    prefixes = {tuple(c[: c.index(sp.delimiter)]) for c in choices}
    assert len({p[:10] for p in prefixes}) == 1  # every option reads the same document first
    questions, ids = read_race(locate(dm._spec(), "mini", None, cache), "train"), dm.tokenizer.encode
    for i in (0, 7, len(questions) - 1):  # the cached row laid out = the question straight from its file
        q = questions[i]
        assert dm.data["train"][i]["tokens"] == multiple_choice(ids(q.article), ids(q.question),
                                                               [ids(o) for o in q.options], sp, 64)
        assert (dm.data["train"][i]["labels"], dm.data["train"][i]["qid"]) == (q.label, q.qid)
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape[:2] == (3, 4) and set(batch) >= {"labels", "level", "qid", "lm_mask"}


def test_story_cloze_cuts_story_and_ending_to_half_the_context(cache):
    dm = setup(GPTStoryClozeDataModule(source="mini", cache_dir=cache, vocab_size=800, max_seq_len=24, n_dev=100))
    sp, part = SpecialTokens.after_vocab(dm.tokenizer.vocab_size), 24 // 2 - 2
    for pair in (dm.data["train"][i]["tokens"] for i in range(50)):
        for seq in pair:
            d = seq.index(sp.delimiter)
            assert seq[0] == sp.start and seq[-1] == sp.extract and d - 1 <= part and len(seq) - d - 2 <= part
    root, ids = locate(dm._spec(), "mini", None, cache), dm.tokenizer.encode
    train, dev = release_split(read_stories(root / VAL_FILE), 100)  # the release's split of the file's stories
    for name, stories in (("train", train), ("dev", dev), ("test", read_stories(root / TEST_FILE))):
        assert [dm.data[name][i]["qid"] for i in range(len(dm.data[name]))] == [s.story_id for s in stories]
        for i in (0, len(stories) - 1):
            s = stories[i]
            assert dm.data[name][i]["tokens"] == story_cloze(ids(s.context), [ids(e) for e in s.endings], sp, part)
            assert dm.data[name][i]["labels"] == s.label
    assert len(dm.data["dev"]) == 100
    assert next(iter(dm.test_dataloader()))["input_ids"].shape[1] == 2


def test_training_order_resumes_mid_epoch_from_the_checkpointed_position(cache, monkeypatch):
    """The shared resumable order (``genlab.data.loading.resumable``), keyed on data.seed, not the process seed."""
    monkeypatch.setenv("PL_GLOBAL_SEED", "11")
    dm = setup(GPTClassificationDataModule("sst2", source="mini", cache_dir=cache, vocab_size=300, batch_size=8,
                                           seed=5))
    dm.trainer = SimpleNamespace(training=True, current_epoch=0)
    loader = dm.train_dataloader()
    for batch in loader:  # one epoch and three batches of the next (Lightning calls set_epoch between them)
        dm.on_before_batch_transfer(batch, 0)
    loader.sampler.set_epoch(1)
    for _, batch in zip(range(3), loader):
        dm.on_before_batch_transfer(batch, 0)
    state = dm.state_dict()
    assert state == {"train_epoch": 1, "train_consumed": 24}
    fresh = setup(GPTClassificationDataModule("sst2", source="mini", cache_dir=cache, vocab_size=300, batch_size=8,
                                              seed=5))
    fresh.trainer = SimpleNamespace(training=True, current_epoch=1)
    fresh.load_state_dict(state)
    resumed = next(iter(fresh.train_dataloader()))["index"]
    expected = EpochShuffle(len(dm.splits["train"]), 5)
    expected.set_epoch(1)
    assert torch.equal(resumed, torch.tensor(list(expected)[24:32]))
