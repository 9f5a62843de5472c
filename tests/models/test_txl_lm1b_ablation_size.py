"""The Table 2.7 (One Billion Word ablation) preset builds the thesis' "about 0.3B" model with the LM1B projection
setting of the released code's adaptive softmax, counted on the meta device at the real vocabulary size."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from presets_snapshot import composed_preset  # noqa: E402

LM1B_VOCAB = 793_471  # lines of 1b_word_vocab.txt (≈793K types, <S>, </S>, <UNK> included)


def paper_model(preset: str):
    cfg = OmegaConf.create(composed_preset(preset))
    with torch.device("meta"):
        return instantiate(cfg.model, vocab_size=LM1B_VOCAB)


def test_lm1b_models_have_the_seed_sizes_and_no_bin0_projection():
    model = paper_model("txl_lm1b_ablation")
    assert model.num_parameters() == 299_108_210
    # every LM1B preset has proj_same_dim=false: bin 0 (d_model wide) has no projection, so base differs from the
    # ablation model by the feed-forward width alone
    base = paper_model("txl_lm1b_base")
    assert base.num_parameters() == 466_962_290  # Yang's thesis Table 2.4: 0.46B
    d_inner_gap = 2 * 1024 * (6144 - 2048) + (6144 - 2048)
    assert base.num_parameters() - model.num_parameters() == 20 * d_inner_gap
    large = paper_model("txl_lm1b_large")
    assert large.num_parameters() == 838_078_062  # Yang's thesis Table 2.4: 0.8B
    for m in (model, base, large):
        assert m.word_emb.proj(0) is None and m.crit.proj(0) is None
