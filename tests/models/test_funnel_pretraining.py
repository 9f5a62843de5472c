"""Funnel pretraining models and the finetuning adapter (Dai's thesis §5.2.2-§5.3: MLM and ELECTRA
heads, the ELECTRA generator sizes)."""

from __future__ import annotations

import inspect

import pytest
import torch

from genlab.errors import ConfigError
from genlab.models.backbones import FunnelBackbone, adapt
from genlab.models.funnel import FunnelModel
from genlab.models.funnel_pretraining import FunnelElectra, FunnelForMaskedLM, generator_sizes
from genlab.parallel import find_blocks

V = 40
TINY = dict(block_sizes=(1, 1, 1), d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0, dropatt=0.0)


def test_check21_generator_sizes_for_d768():
    with torch.device("meta"):
        model = FunnelElectra(30522)
    gen = model.generator
    assert generator_sizes(768, 12, 3072, 0.25) == dict(d_model=192, n_head=3, d_inner=768)
    attn = gen.encoder.layer[0].attention
    assert (gen.d_model, attn.n_head, attn.d_head, gen.encoder.layer[0].ffn.layer_1.out_features) == (192, 3, 64, 768)
    assert gen.input_proj.weight.shape == (192, 768)  # input projection 768 -> 192
    assert model.generator_lm_head.dense.weight.shape == (768, 192)  # MLM head 192 -> 768 before the tied softmax
    assert gen.arch["block_sizes"] == model.funnel.arch["block_sizes"] and gen.decoder is not None


def test_generator_sizes_must_come_out_whole():
    with pytest.raises(ConfigError, match="width_shrink"):
        generator_sizes(32, 2, 64, 0.25)


def test_check20_generator_and_discriminator_share_the_embedding_module():
    model = FunnelElectra(V, **TINY, width_shrink=0.5)
    assert model.generator.embeddings is model.funnel.embeddings
    assert model.generator.embeddings.word_embeddings.weight is model.funnel.embeddings.word_embeddings.weight
    assert model.generator.embeddings.layer_norm.weight is model.funnel.embeddings.layer_norm.weight
    shared = {id(p) for p in model.funnel.embeddings.parameters()}
    assert not shared & {id(p) for _, p in model.generator_only_parameters()}
    counted = sum(p.numel() for p in model.parameters())
    assert counted == sum(p.numel() for p in model.funnel.parameters()) + sum(
        p.numel() for _, p in model.generator_only_parameters()) + sum(
        p.numel() for p in model.discriminator_predictions.parameters())


@pytest.mark.parametrize("cls", [FunnelForMaskedLM, FunnelElectra])
def test_wrappers_take_every_body_argument_with_the_same_default(cls):
    body = inspect.signature(FunnelModel).parameters
    theirs = inspect.signature(cls).parameters
    for name, param in body.items():
        assert name in theirs and theirs[name].default == param.default, name


def test_mlm_head_is_tied_and_fp32():
    model = FunnelForMaskedLM(V, **TINY)
    ids = torch.randint(0, V, (2, 16))
    logits = model.mlm_logits(model(ids).hidden)
    assert logits.shape == (2, 16, V) and logits.dtype == torch.float32
    logits.logsumexp(-1).sum().backward()
    assert model.funnel.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert {n for n, _ in model.named_parameters() if n.startswith("lm_head")} == {
        "lm_head.bias", "lm_head.dense.weight", "lm_head.dense.bias", "lm_head.layer_norm.weight",
        "lm_head.layer_norm.bias"}
    with pytest.raises(ConfigError, match="use_decoder"):
        FunnelForMaskedLM(V, **{**TINY, "use_decoder": False})


def test_electra_blocks_include_the_generator_layers():
    model = FunnelElectra(V, **TINY, width_shrink=0.5)
    assert len(find_blocks(model)) == 2 * (3 + 2)


@pytest.mark.parametrize("cls", [FunnelForMaskedLM, FunnelElectra, FunnelModel])
def test_finetuning_adapter_keeps_the_encoder_and_the_cls_summary(cls):
    model = cls(V, **TINY, **({"width_shrink": 0.5} if cls is FunnelElectra else {}))
    backbone = adapt(model)
    assert isinstance(backbone, FunnelBackbone) and backbone.funnel.decoder is None
    assert not any(n.startswith(("generator", "lm_head", "discriminator")) for n, _ in backbone.named_parameters())
    assert backbone.n_layer == 3 and backbone.cls_position == "first"
    ids = torch.randint(0, V, (2, 16))
    hidden = backbone.encode(ids, None, torch.ones_like(ids))
    assert hidden.shape == (2, 4, 32) and backbone.summary(hidden).shape == (2, 32)
    assert any(".encoder.layer.2." in n for n, _ in backbone.named_parameters())  # depth visible to layer decay
    token_level = FunnelBackbone(cls(V, **TINY, **({"width_shrink": 0.5} if cls is FunnelElectra else {})),
                                 use_decoder=True)
    assert token_level.encode(ids).shape == (2, 16, 32)
