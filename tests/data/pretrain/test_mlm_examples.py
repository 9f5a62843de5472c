"""BERT / DAE corruption (BERT, Devlin et al., 2019, and XLNet v1 §3.7's DAE baseline): 15% budget, 80/10/10, whole
words, NSP layout."""

import numpy as np
import pytest

from genlab.data.pretrain.mlm_examples import (
    MaskingConfig,
    bert_steps_per_pass,
    build_bert_example,
    choose_positions,
    corrupt,
    mlm_labels,
)
from genlab.data.pretrain.xlnet_examples import CLS_ID, MASK_ID, SEP_ID
from genlab.data.tokenizers.xlnet_pieces import word_start_table
from genlab.errors import ConfigError

PIECES = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"] + [
    ("▁w%d" if i % 3 == 0 else "c%d") % i for i in range(9, 200)
]
WS = word_start_table(PIECES)


def _example(n=128, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(9, 200, n)
    ids[0], ids[60], ids[-1] = CLS_ID, SEP_ID, SEP_ID
    return ids


def test_budget_is_15_percent_of_length_capped_and_never_special():
    ids = _example(512)
    pos = choose_positions(ids, WS, MaskingConfig(), np.random.default_rng(0))
    assert len(pos) == 77 and len(set(pos.tolist())) == 77
    assert not np.isin(ids[pos], [CLS_ID, SEP_ID]).any()
    pos = choose_positions(ids[:100], WS, MaskingConfig(max_predictions=10), np.random.default_rng(0))
    assert len(pos) == 10


def test_80_10_10_replacement_rates():
    ids = _example(512)
    cfg = MaskingConfig(max_predictions=1000, prob=0.5)
    masked = kept = rand = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        pos = choose_positions(ids, WS, cfg, rng)
        out = corrupt(ids, pos, cfg, 200, rng)
        masked += (out[pos] == MASK_ID).sum()
        kept += (out[pos] == ids[pos]).sum()
        rand += ((out[pos] != ids[pos]) & (out[pos] != MASK_ID)).sum()
        unchanged = np.setdiff1d(np.arange(len(ids)), pos)
        assert (out[unchanged] == ids[unchanged]).all()
    total = masked + kept + rand
    assert abs(masked / total - 0.8) < 0.02
    assert abs(rand / total - 0.1) < 0.02  # a random draw equal to the original counts as kept (rare)
    assert abs(kept / total - 0.1) < 0.02


def test_whole_word_masking_takes_complete_words():
    ids = _example(256, 3)
    cfg = MaskingConfig(selection="whole_word")
    for seed in range(10):
        pos = set(choose_positions(ids, WS, cfg, np.random.default_rng(seed)).tolist())
        for p in pos:  # a chosen continuation piece has its word start chosen too, and vice versa
            if not WS[ids[p]] and ids[p - 1] not in (CLS_ID, SEP_ID):
                assert p - 1 in pos
            if p + 1 < len(ids) and not WS[ids[p + 1]]:
                assert p + 1 in pos
        assert len(pos) <= 38


def test_labels_only_at_chosen_positions():
    ids = _example()
    pos = np.array([3, 7, 9])
    labels = mlm_labels(ids, pos)
    assert (labels[pos] == ids[pos]).all() and (np.delete(labels, pos) == -100).all()


def test_bert_layout_cls_first_and_token_types():
    rng = np.random.default_rng(0)
    tok = rng.integers(9, 200, 4000).astype(np.int32)
    sid = ((np.arange(4000) // 9) % 2).astype(np.uint8)
    labels = set()
    for step in range(bert_steps_per_pass(4000, 64)):
        ids, types, label = build_bert_example(tok, sid, step, 64, 0.5, np.random.default_rng(step))
        labels.add(label)
        assert len(ids) == 64 and ids[0] == CLS_ID and ids[-1] == SEP_ID and (ids == SEP_ID).sum() == 2
        sep = int(np.flatnonzero(ids == SEP_ID)[0])
        assert (types[: sep + 1] == 0).all() and (types[sep + 1 :] == 1).all()
    assert labels == {0, 1}


def test_bad_masking_config_is_a_config_error():
    with pytest.raises(ConfigError, match="selection"):
        MaskingConfig(selection="spans")
    with pytest.raises(ConfigError):
        MaskingConfig(mask_frac=0.95, random_frac=0.1)
