"""The Funnel presets carry the thesis' recipe (Dai's thesis §5.3 and the released code's settings): every pretraining
preset rewrites exactly its pooling stride of tail tokens, uses token type 2 for [CLS] and the exact-count /
whole-vocabulary masking; ELECTRA presets build the generator pair; finetuning presets read the funnel layout with the
original optimiser; each mini keeps its paper preset's layout."""

from __future__ import annotations

from pathlib import Path

import pytest

CONF = Path(__file__).resolve().parents[1] / "conf" / "experiment"
PRETRAIN = sorted(p.stem for p in CONF.glob("funnel_*.yaml")
                  if p.stem.removesuffix("_mini").endswith(("_mlm", "_electra")) or "_ablation_" in p.stem)
FINETUNE = sorted(p.stem for p in CONF.glob("funnel_*.yaml") if p.stem not in PRETRAIN)


def _stride(model) -> int:
    blocks = len(model.block_sizes)
    return 2 ** (blocks - 1) if blocks > 1 and model.truncate_seq else 0


@pytest.mark.parametrize("name", PRETRAIN)
def test_pretraining_presets_follow_the_funnel_example_recipe(name, compose_cfg):
    cfg = compose_cfg([f"experiment={name}"])
    data, model = cfg.data, cfg.model
    assert data.objective == "mlm" and data.cls_token_type == 2 and data.nsp and not data.bi_data
    assert data.tail_pad == _stride(model), (data.tail_pad, list(model.block_sizes))
    assert data.masking.random_ids == "any" and data.masking.num_targets == round(data.seq_len * 85 / 512)
    assert model.use_decoder == (len(model.block_sizes) > 1)
    electra = name.removesuffix("_mini").endswith("_electra")
    assert model._target_.endswith("FunnelElectra" if electra else "FunnelForMaskedLM")
    assert cfg.task._target_.endswith("FunnelElectraTask" if electra else "FunnelMLMTask")
    if electra:
        assert model.d_model * model.width_shrink == int(model.d_model * model.width_shrink)
        assert model.n_head * model.width_shrink >= 1
    if name.removesuffix("_mini") in PRETRAIN:  # a twin keeps its paper preset's layout (the funnel_wiki_* set theirs)
        paper = compose_cfg([f"experiment={name.removesuffix('_mini')}"]).model
        assert list(model.block_sizes) == list(paper.block_sizes) and model.pooling_type == paper.pooling_type
    if not name.endswith("_mini"):
        assert data.seq_len == 512 and cfg.task.optimizer.betas == [0.9, 0.99] and cfg.trainer.gradient_clip_val == 1.0


@pytest.mark.parametrize("name", [n for n in FINETUNE if not n.startswith("funnel_wiki_")])
def test_finetuning_presets_use_the_funnel_layout_and_optimiser(name, compose_cfg):
    cfg = compose_cfg([f"experiment={name}"])
    assert cfg.data.layout == "funnel" and cfg.task.weight_decay == 0.0
    assert cfg.task.optimizer._target_ == "torch.optim.AdamW" and list(cfg.task.optimizer.betas) == [0.9, 0.99]
    assert cfg.task.optimizer.eps == 1e-6 and cfg.trainer.gradient_clip_val == 1.0
    if not name.endswith("_mini"):
        assert cfg.task.require_pretrained
        warmup, steps = cfg.task.scheduler.warmup_steps, cfg.trainer.max_steps
        assert abs(warmup - steps / 10) <= 1 or (name, warmup) == ("funnel_squad1", 1000) or name == "funnel_squad2"
