"""The fair comparison's pretraining presets (XLNet v2 §3.2, Table 1): XLNet-Large-wikibooks and
BERT-Large share data and hyper-parameters, XLNet's model has its exact parameter count, and the reference keys
presets that exist."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from genlab.report import load_reference
from helpers import compose_config

ROOT = Path(__file__).resolve().parents[1]
SHARED = ["data.path", "data.corpus", "data.seq_len", "data.batch_size", "data.vocab_size", "task.optimizer.lr",
          "task.optimizer.betas", "task.optimizer.eps", "task.weight_decay", "task.scheduler.warmup_steps",
          "task.scheduler.min_lr_ratio", "trainer.max_steps", "trainer.gradient_clip_val", "model.dropout",
          "model.dropatt"]


def composed(preset: str, tmp_path: Path):
    return compose_config([f"experiment={preset}"], tmp_path)


@pytest.mark.parametrize("mini", ["", "_mini"])
def test_xlnet_large_wikibooks_and_bert_large_share_data_and_recipe(mini, tmp_path):
    xlnet, bert = composed(f"xlnet_large_wikibooks{mini}", tmp_path), composed(f"bert_large{mini}", tmp_path)
    for key in SHARED:
        assert OmegaConf.select(xlnet, key) == OmegaConf.select(bert, key), key
    if not mini:  # BERT's pretraining recipe, T=512 always
        assert (xlnet.data.batch_size, xlnet.data.seq_len, xlnet.task.optimizer.lr) == (256, 512, 1e-4)
        assert (xlnet.task.scheduler.warmup_steps, xlnet.trainer.max_steps) == (10_000, 1_000_000)
    assert (xlnet.data.objective, xlnet.task.nsp_weight, xlnet.data.bi_data) == ("plm", 0.0, True)
    assert (bert.data.objective, bert.data.nsp) == ("mlm", True)
    assert xlnet.model.ff_inner_dropout == 0.0


def test_large_models_have_the_spec_sizes(tmp_path):
    with torch.device("meta"):
        xlnet = instantiate(composed("xlnet_large_wikibooks", tmp_path).model, vocab_size=32000)
        bert = instantiate(composed("bert_large", tmp_path).model, vocab_size=32000)
    assert sum(p.numel() for p in xlnet.parameters()) == 360_300_800  # XLNet-Large, vocabulary 32,000
    layers = bert.bert.encoder.layer
    assert len(layers) == 24 and layers[0].intermediate.dense.weight.shape == (4096, 1024)
    assert bert.bert.embeddings.position_embeddings.weight.shape == (512, 1024)


def test_reference_keys_existing_presets():
    ref = load_reference(ROOT / "experiments" / "xlnet_finetune" / "reference_fair.yaml")
    presets = {p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml")}
    assert {v["experiment"] for v in ref["values"]} <= presets
    paper = ref["paper"]
    assert {"bert_large", "xlnet_large_wikibooks"} <= presets and set(paper) == {"columns", "bert_large",
                                                                                 "xlnet_large_wikibooks"}
    race = paper["columns"].index("race")
    assert (paper["xlnet_large_wikibooks"][race], paper["bert_large"][race]) == (77.4, 75.1)
