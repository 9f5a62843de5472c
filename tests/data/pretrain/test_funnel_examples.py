"""Funnel-Transformer pretraining examples on the BERT pipeline (Dai's thesis §5.3 and the released code's pretraining
data): exactly ``num_targets`` targets, 80/10/10 with random ids over the whole vocabulary, [CLS] token type 2, the
``[SEP] <pad>..`` tail rewrite, and the held-out split of the real-data mini."""

from __future__ import annotations

import numpy as np
import pytest

from genlab.data.pretrain.datamodule import PretrainDataModule
from genlab.data.pretrain.mlm_examples import (
    MaskingConfig,
    build_bert_example,
    choose_positions,
    corrupt,
    mlm_labels,
    rewrite_tail,
)
from genlab.data.pretrain.xlnet_examples import (
    CLS_ID,
    MASK_ID,
    PAD_ID,
    SEP_ID,
    SPECIAL_IDS,
)
from genlab.errors import ConfigError

FUNNEL = MaskingConfig(num_targets=85, random_ids="any")
V = 30522


def _example(seed: int, n: int = 512) -> np.ndarray:
    """A 512-token ``[CLS] A [SEP] B [SEP]`` after the tail rewrite: three pads and a third-from-last [SEP]."""
    ids = np.random.default_rng(seed).integers(9, V, n)
    ids[0], ids[n // 3], ids[-1] = CLS_ID, SEP_ID, SEP_ID
    return rewrite_tail(ids, 4)


def test_check18_exactly_85_sorted_targets_never_special():
    for seed in range(20):
        ids = _example(seed)
        pos = choose_positions(ids, np.ones(V, bool), FUNNEL, np.random.default_rng(seed))
        assert len(pos) == 85 and np.all(np.diff(pos) > 0)  # sorted, no repeats
        assert not np.isin(ids[pos], [CLS_ID, SEP_ID, PAD_ID]).any()
        mapping = np.zeros((len(pos), len(ids)))  # the original code's target_mapping [num_predict, T]
        mapping[np.arange(len(pos)), pos] = 1
        assert (mapping.sum(1) == 1).all() and np.all(np.diff(mapping.argmax(1)) > 0)
        labels = mlm_labels(ids, pos)
        assert (labels != -100).sum() == 85
    short = _example(0, 40)  # 34 ordinary positions: every one of them, no more
    assert len(choose_positions(short, np.ones(V, bool), FUNNEL, np.random.default_rng(0))) == 34


def test_check18_mask_random_keep_split_over_10k_targets_with_random_ids_over_the_whole_vocabulary():
    masked = kept = rand = special = 0
    for seed in range(120):  # 120 x 85 = 10,200 targets
        ids = _example(seed)
        rng = np.random.default_rng(1000 + seed)
        pos = choose_positions(ids, np.ones(V, bool), FUNNEL, rng)
        out = corrupt(ids, pos, FUNNEL, V, rng)
        masked += (out[pos] == MASK_ID).sum()
        kept += (out[pos] == ids[pos]).sum()
        rand += ((out[pos] != ids[pos]) & (out[pos] != MASK_ID)).sum()
        others = np.setdiff1d(np.arange(len(ids)), pos)
        assert (out[others] == ids[others]).all()
    total = masked + kept + rand
    assert total == 120 * 85
    assert abs(masked / total - 0.8) < 0.01 and abs(rand / total - 0.1) < 0.01 and abs(kept / total - 0.1) < 0.01
    # random ids come from all ids, special ones included (BERT's ordinary-only rule never draws them)
    small = MaskingConfig(num_targets=40, random_ids="any", mask_frac=0.0, random_frac=1.0)
    ordinary = MaskingConfig(num_targets=40, mask_frac=0.0, random_frac=1.0)
    ids = np.full(64, 20)
    ids[0] = CLS_ID
    draws = {name: np.concatenate([corrupt(ids, np.arange(1, 41), cfg, 12, np.random.default_rng(s))[1:41]
                                   for s in range(50)]) for name, cfg in (("any", small), ("ordinary", ordinary))}
    special = np.isin(draws["any"], SPECIAL_IDS).mean()
    assert 0.6 < special < 0.9  # 9 of 12 ids are special
    assert not np.isin(draws["ordinary"], SPECIAL_IDS).any()


def test_funnel_masking_options_are_validated():
    with pytest.raises(ConfigError, match="random_ids"):
        MaskingConfig(random_ids="all")
    with pytest.raises(ConfigError, match="num_targets"):
        MaskingConfig(num_targets=10, selection="whole_word")
    with pytest.raises(ConfigError, match="tail_pad"):
        rewrite_tail(np.arange(4), 4)


def test_check22_example_layout_cls_type_2_and_the_tail_rewrite():
    rng = np.random.default_rng(0)
    tok = rng.integers(9, 200, 6000).astype(np.int32)
    sid = ((np.arange(6000) // 11) % 2).astype(np.uint8)
    for step in range(40):
        ids, types, _ = build_bert_example(tok, sid, step, 128, 0.5, np.random.default_rng(step), cls_type=2)
        assert len(ids) == 128 and ids[0] == CLS_ID and ids[-1] == SEP_ID and (ids == SEP_ID).sum() == 2
        sep = int(np.flatnonzero(ids == SEP_ID)[0])
        assert types[0] == 2 and (types[1:sep + 1] == 0).all() and (types[sep + 1:] == 1).all()
        out = rewrite_tail(ids, 4)
        assert out[-4:].tolist() == [SEP_ID, PAD_ID, PAD_ID, PAD_ID] and (out[:-4] == ids[:-4]).all()
        if len(ids) - 1 - sep > 3:  # B longer than the 3 tokens it loses: still two [SEP]s
            assert (out == SEP_ID).sum() == 2


def _corpus(root):
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu", "nu", "xi"]
    (root / "train").mkdir(parents=True)
    text = "\n\n".join("\n".join(" ".join(rng.choice(words, 7)) + "." for _ in range(5)) for _ in range(120))
    (root / "train" / "a.txt").write_text(text)


def test_check22_datamodule_batches_follow_the_funnel_recipe(tmp_path):
    _corpus(tmp_path / "corpus")
    dm = PretrainDataModule(objective="mlm", corpus="text", path=str(tmp_path / "corpus"),
                            cache_dir=str(tmp_path / "cache"), train_glob="train/*.txt", valid_glob=None, vocab_size=60,
                            batch_size=4, seq_len=32, reuse_len=16, perm_size=16, num_predict=5, bi_data=False, nsp=True,
                            masking={"num_targets": 5, "random_ids": "any"}, cls_token_type=2, tail_pad=4)
    dm.prepare_data()
    dm.setup("fit")
    for step in range(3):
        b = dm.batches("train")[(0, step)]
        ids, types, mask, labels = b["input_ids"], b["token_type_ids"], b["attention_mask"], b["labels"]
        assert ids.shape == (4, 32) and (types[:, 0] == 2).all() and set(types[:, 1:].unique().tolist()) <= {0, 1}
        assert (ids[:, -3:] == PAD_ID).all() and (mask[:, -3:] == 0).all() and (mask[:, :-3] == 1).all()
        assert ((labels != -100).sum(1) == 5).all()
        original = labels.where(labels != -100, ids)
        assert not np.isin(original[labels != -100].numpy(), [CLS_ID, SEP_ID, PAD_ID]).any()
        assert (original[:, -4] == SEP_ID).all() and (labels[:, -4:] == -100).all()
    bert = PretrainDataModule(objective="mlm", corpus="text", path=str(tmp_path / "corpus"),
                              cache_dir=str(tmp_path / "cache"), train_glob="train/*.txt", valid_glob=None,
                              vocab_size=60, batch_size=4, seq_len=32, reuse_len=16, perm_size=16, num_predict=5, bi_data=False)
    bert.setup("fit")
    b = bert.batches("train")[(0, 0)]
    assert (b["token_type_ids"][:, 0] == 0).all() and (b["attention_mask"] == 1).all()
    with pytest.raises(ConfigError, match="objective=mlm"):
        PretrainDataModule(objective="plm", tail_pad=4)


def test_funnel_wiki_mini_holds_out_the_last_ten_articles(tmp_path):
    pytest.importorskip("gensim", reason="the mini reads the Wikipedia excerpt inside the gensim wheel")
    from genlab.data.pretrain.minis import FUNNEL_WIKI_MINI
    from genlab.data.sources.tiers import locate
    from genlab.data.text.wiki_excerpt import excerpt_articles

    root = locate(FUNNEL_WIKI_MINI, "mini", None, tmp_path)
    valid = (root / "valid/wiki_00.txt").read_text()
    train = "".join((root / f"train/wiki_{k:02d}.txt").read_text() for k in range(8))
    articles = excerpt_articles()
    held = [p for a in articles[-10:] for p in a.paragraphs() if len(p.split()) >= 20]
    assert len(valid.split("\n\n")) == 10 and held[0].split(". ")[0] in valid and held[0].split(". ")[0] not in train
    lines = [line for line in (train + valid).splitlines() if line]
    assert all(len(line.split()) < 400 for line in lines)
    short = [p for a in articles for p in a.paragraphs() if len(p.split()) < 20 and p.count(".") <= 1]
    assert not any(p in lines for p in short[:50])  # paragraphs under 20 words are left out
