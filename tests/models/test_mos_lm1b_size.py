"""The Table A.3 (One Billion Word) presets build the thesis' models: their exact counts at V = 100,000, counted
on the meta device (the full models are 113-119M parameters)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from presets_snapshot import composed_preset  # noqa: E402

MOS_LM1B_VOCAB = 100_000  # top-100K tokens (lower-cased, Dai's thesis App. A.3), <eos> and <unk> included


@pytest.mark.parametrize("preset, expected", [("mos_lm1b_softmax", 119_293_600), ("mos_lm1b_mos", 112_850_364)])
def test_lm1b_presets_have_the_c15_parameter_counts(preset, expected):
    cfg = OmegaConf.create(composed_preset(preset))
    with torch.device("meta"):
        model = instantiate(cfg.model, vocab_size=MOS_LM1B_VOCAB)
    assert sum(p.numel() for p in model.parameters()) == expected
    assert cfg.data.options.vocab_size == MOS_LM1B_VOCAB and cfg.data.dataset == "lm1b_mos"
    assert (cfg.data.batch_size, cfg.data.bptt, cfg.task.optimizer.lr) == (60, 35, 20.0)  # Table A.10
    # no dropout and no other regularisation (the seed: dropout "not helpful to either model")
    assert all(cfg.model[k] == 0 for k in ("dropout", "dropouth", "dropouti", "dropoute", "dropoutl", "wdrop"))
    assert cfg.task.alpha == cfg.task.beta == cfg.task.optimizer.weight_decay == 0
