"""HF Funnel-Transformer parity and checkpoint round trips (HF's port of the released checkpoints).

Tiny random HF models (d_model 32, 2 heads of 16) are imported into ours and must give the same hidden states in
fp32; exported folders must load with ``from_pretrained`` and give the same outputs. Offline.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from genlab.errors import CheckpointError
from genlab.interop.hf_funnel import (
    config_from_hf,
    export_hf_state_dict,
    load_hf_checkpoint,
    load_hf_sequence_classification,
    load_hf_state_dict,
    save_hf_checkpoint,
)
from genlab.models.backbones import FunnelBackbone
from genlab.models.funnel import FunnelModel
from genlab.models.funnel_pretraining import FunnelElectra, FunnelForMaskedLM
from genlab.models.heads import ClassificationHead, MultipleChoiceHead

transformers = pytest.importorskip("transformers", reason="transformers (test dependency) is not installed")

V, T = 50, 16
ATOL = 1e-5


def hf_config(block_sizes=(1, 1, 1), **kw):
    return transformers.FunnelConfig(vocab_size=V, block_sizes=list(block_sizes), d_model=32, n_head=2, d_head=16,
                                     d_inner=64, hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                                     **kw)


def hf_model(cls_name="FunnelModel", block_sizes=(1, 1, 1), seed=1, **kw):
    torch.manual_seed(seed)
    model = getattr(transformers, cls_name)(hf_config(block_sizes, **kw)).eval()
    with torch.no_grad():  # HF's init leaves r_* in U(0, 0.1): spread everything so every term matters
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return model


def ours_from(hf, cls=FunnelModel, mask_pool="all_real", **kw):
    config = hf.config.to_dict()
    config["architectures"] = [type(hf).__name__]
    model = cls(**{**config_from_hf(config), "mask_pool": mask_pool, **kw}).eval()
    load_hf_state_dict(model, hf.state_dict(), source="test")
    return model


def batch(length=T, pad_from=None, seed=2):
    """[CLS] A.. B.. with token types 2/0/1; row 1 padded from ``pad_from`` on."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (2, length), generator=g)
    types = torch.zeros(2, length, dtype=torch.long)
    types[:, 0], types[:, length // 2:] = 2, 1
    mask = torch.ones(2, length, dtype=torch.long)
    if pad_from is not None:
        mask[1, pad_from:] = 0
    return ids, types, mask


LAYOUTS = {"B1-1-1": dict(block_sizes=(1, 1, 1)), "B2-1": dict(block_sizes=(2, 1))}
VARIANTS = {
    "factorized": dict(attention_type="factorized"),
    "max": dict(pooling_type="max"),
    "no_pool_q_only": dict(pool_q_only=False),
    "no_truncate": dict(truncate_seq=False),
    "repeats": dict(block_sizes=(1, 2, 1), block_repeats=[1, 2, 1]),
    "4_blocks": dict(block_sizes=(1, 1, 1, 1)),
}


def compare(hf, ours, ids, types, mask):
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
        mine = ours(ids, types, mask)
    n_enc = len(mine.hidden_states)
    for i, (a, b) in enumerate(zip(theirs.hidden_states[:n_enc], mine.hidden_states)):
        torch.testing.assert_close(b, a, atol=ATOL, rtol=0, msg=f"encoder hidden state {i}")
    if mine.decoder_input is not None:
        torch.testing.assert_close(mine.decoder_input, theirs.hidden_states[n_enc], atol=ATOL, rtol=0)
    torch.testing.assert_close(mine.hidden, theirs.last_hidden_state, atol=ATOL, rtol=0)


@pytest.mark.parametrize("decoder", [True, False], ids=["FunnelModel", "FunnelBaseModel"])
@pytest.mark.parametrize("separate_cls", [True, False], ids=["sep_cls", "no_sep_cls"])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_hf_model_imports_with_equal_outputs(layout, padded, separate_cls, decoder):
    """Checks 13-15: every hidden state equal to HF, with token types and (under all_real) padding."""
    hf = hf_model("FunnelModel" if decoder else "FunnelBaseModel", separate_cls=separate_cls, **LAYOUTS[layout])
    compare(hf, ours_from(hf), *batch(pad_from=11 if padded else None))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_hf_variants_import_with_equal_outputs(variant):
    """Check 13's other settings: factorized attention, max pooling, pool_q_only=False, no truncation, repeated
    layers (in blocks >= 1, as the paper), 4 blocks; each with padding and the decoder."""
    kw = dict(VARIANTS[variant])
    hf = hf_model("FunnelModel", **{"block_sizes": kw.pop("block_sizes", (1, 1, 1)), **kw})
    compare(hf, ours_from(hf), *batch(pad_from=12))


def test_odd_length_matches_hf():
    hf = hf_model("FunnelModel")
    compare(hf, ours_from(hf), *batch(length=17))


def test_mask_pool_any_real_matches_hf_only_on_block_aligned_padding():
    """Check 15: the original "any real" key-mask pooling equals HF's "all real" exactly when the number of real
    non-[CLS] tokens is a multiple of 2^(n_block-1); otherwise the outputs differ."""
    hf = hf_model("FunnelBaseModel")
    ours = ours_from(hf, mask_pool="any_real")
    compare(hf, ours, *batch(pad_from=13))  # 12 real non-CLS tokens: windows never straddle the boundary
    ids, types, mask = batch(pad_from=12)  # 11: a window straddles it
    with torch.no_grad():
        diff = (hf(ids, attention_mask=mask, token_type_ids=types).last_hidden_state - ours(ids, types, mask).hidden)
    assert diff[1].abs().max() > 1e-3 and diff[0].abs().max() < ATOL


def test_masked_lm_logits_equal_hf():
    hf = hf_model("FunnelForMaskedLM")
    ours = ours_from(hf, FunnelForMaskedLM, mlm_transform=False)
    ids, types, mask = batch(pad_from=13)
    with torch.no_grad():
        logits = ours.mlm_logits(ours(ids, types, mask).hidden)
        torch.testing.assert_close(logits, hf(ids, attention_mask=mask, token_type_ids=types).logits, atol=ATOL,
                                   rtol=0)


def test_electra_discriminator_logits_are_minus_hf_and_bce_polarity():
    """Check 17: after the import HF's logits are minus ours, so ``BCE(l, y_ours) == BCE(-l, 1 - y_ours)`` (HF's
    loss with HF labels); with identical logits the flipped labels give a different loss (negative control)."""
    hf = hf_model("FunnelForPreTraining")
    ours = ours_from(hf, FunnelElectra, width_shrink=0.5)
    ids, types, mask = batch(pad_from=13)
    with torch.no_grad():
        mine = ours.discriminator_logits(ids, types, mask)
        theirs = hf(ids, attention_mask=mask, token_type_ids=types)
    torch.testing.assert_close(mine, -theirs.logits, atol=ATOL, rtol=0)
    y = torch.randint(0, 2, mine.shape, generator=torch.Generator().manual_seed(3)).float()  # 1 = original
    real = mask.bool()
    ours_loss = F.binary_cross_entropy_with_logits(mine[real], y[real])
    with torch.no_grad():
        hf_loss = hf(ids, attention_mask=mask, token_type_ids=types, labels=(1 - y).long()).loss
    torch.testing.assert_close(ours_loss, hf_loss, atol=1e-6, rtol=0)
    assert (F.binary_cross_entropy_with_logits(mine[real], 1 - y[real]) - ours_loss).abs() > 1e-3


@pytest.mark.parametrize("kind", ["FunnelForSequenceClassification", "FunnelForMultipleChoice"])
def test_finetuning_heads_equal_hf(kind):
    """Check 16: FunnelBackbone's [CLS] summary + heads.ClassificationHead / MultipleChoiceHead equal HF's
    classifier (linear_hidden, tanh, dropout, linear_out on row 0 of the encoder output)."""
    extra = {"num_labels": 3} if kind == "FunnelForSequenceClassification" else {}
    hf = hf_model(kind, block_sizes=(2, 1), **extra)
    body = FunnelModel(**{**config_from_hf(hf.config.to_dict()), "use_decoder": False, "mask_pool": "all_real"})
    backbone = FunnelBackbone(body).eval()
    head = (ClassificationHead(32, 3) if extra else MultipleChoiceHead(32)).eval()
    load_hf_sequence_classification(backbone, head, hf.state_dict(), source="test")
    ids, types, mask = batch(pad_from=13)
    with torch.no_grad():
        pooled = backbone.summary(backbone.encode(ids, types, mask))
        if extra:
            torch.testing.assert_close(head(pooled), hf(ids, attention_mask=mask, token_type_ids=types).logits,
                                       atol=ATOL, rtol=0)
        else:
            theirs = hf(ids[None], attention_mask=mask[None], token_type_ids=types[None]).logits
            torch.testing.assert_close(head(pooled, 2), theirs, atol=ATOL, rtol=0)


def tiny(cls=FunnelModel, **kw):
    torch.manual_seed(0)
    model = cls(V, **{"block_sizes": (2, 1, 1), "block_repeats": (1, 2, 1), "d_model": 32, "n_head": 2,
                      "d_head": 16, "d_inner": 64, "dropout": 0.0, "dropatt": 0.0, "mask_pool": "all_real", **kw})
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "pytorch_model.bin"])
@pytest.mark.parametrize("kind", ["FunnelModel", "FunnelBaseModel", "FunnelForMaskedLM", "FunnelForPreTraining"])
def test_export_then_hf_from_pretrained(tmp_path, kind, safe):
    if kind == "FunnelForMaskedLM":
        ours = tiny(FunnelForMaskedLM, mlm_transform=False)
    elif kind == "FunnelForPreTraining":
        ours = tiny(FunnelElectra, width_shrink=0.5)
    else:
        ours = tiny(use_decoder=kind == "FunnelModel")
    save_hf_checkpoint(ours, tmp_path, safe_serialization=safe)
    hf = getattr(transformers, kind).from_pretrained(tmp_path).eval()
    ids, types, mask = batch(pad_from=13)
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask, token_type_ids=types)
        out = ours(ids, types, mask)
        if kind == "FunnelForMaskedLM":
            torch.testing.assert_close(ours.mlm_logits(out.hidden), theirs.logits, atol=ATOL, rtol=0)
        elif kind == "FunnelForPreTraining":
            torch.testing.assert_close(ours.discriminator_logits(ids, types, mask), -theirs.logits, atol=ATOL, rtol=0)
        else:
            torch.testing.assert_close(out.hidden, theirs.last_hidden_state, atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", ["FunnelModel", "FunnelForMaskedLM", "FunnelForPreTraining"])
def test_import_hf_save_pretrained(tmp_path, kind):
    hf = hf_model(kind, block_sizes=(2, 1))
    hf.save_pretrained(tmp_path)
    extra = {"width_shrink": 0.5} if kind == "FunnelForPreTraining" else {}  # 2 heads: a generator of 1
    ours = load_hf_checkpoint(tmp_path, dropout=0.0, dropatt=0.0, mask_pool="all_real", **extra).eval()
    ids, types, mask = batch(pad_from=13)
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask, token_type_ids=types)
        out = ours(ids, types, mask)
    if kind == "FunnelModel":
        torch.testing.assert_close(out.hidden, theirs.last_hidden_state, atol=ATOL, rtol=0)
    elif kind == "FunnelForMaskedLM":
        assert isinstance(ours, FunnelForMaskedLM) and not ours.arch["mlm_transform"]
        torch.testing.assert_close(ours.mlm_logits(out.hidden), theirs.logits, atol=ATOL, rtol=0)
    else:
        assert isinstance(ours, FunnelElectra)
        torch.testing.assert_close(ours.discriminator_logits(ids, types, mask), -theirs.logits, atol=ATOL, rtol=0)


def test_round_trip_state_dict_is_lossless():
    ours = tiny(FunnelElectra, width_shrink=0.5)
    again = tiny(FunnelElectra, width_shrink=0.5)
    with torch.no_grad():
        for p in again.funnel.parameters():
            p.zero_()
    report = load_hf_state_dict(again, export_hf_state_dict(ours))
    for (name, a), b in zip(ours.funnel.state_dict().items(), again.funnel.state_dict().values()):
        assert torch.equal(a, b), name
    assert report.kept_init and all(k.startswith("generator") for k in report.kept_init)


def test_encoder_only_checkpoint_does_not_fit_a_decoder_model():
    hf = hf_model("FunnelBaseModel")
    ours = FunnelModel(**{**config_from_hf(hf.config.to_dict()), "use_decoder": True})
    with pytest.raises(CheckpointError, match="missing tensors: decoder"):
        load_hf_state_dict(ours, hf.state_dict())


def test_wrong_sizes_name_the_tensors():
    hf = hf_model("FunnelModel")
    ours = FunnelModel(**{**config_from_hf(hf.config.to_dict()), "d_inner": 48})
    with pytest.raises(CheckpointError, match=r"shape mismatch in .*encoder.layer.0.ffn.layer_1.weight: checkpoint \(64, 32\) vs model \(48, 32\)"):
        load_hf_state_dict(ours, hf.state_dict())


@pytest.mark.parametrize("kw,match", [(dict(pooling_type="top_attn"), "pooling_type"),
                                      (dict(attn_type="absolute"), "attn_type"),
                                      (dict(d_embed=64), "input projection"),
                                      (dict(cls_mask="always"), "cls_mask")])
def test_export_refuses_what_hf_cannot_express(tmp_path, kw, match):
    with pytest.raises(CheckpointError, match=match):
        save_hf_checkpoint(tiny(**kw), tmp_path)


def test_mlm_head_with_transform_exports_its_body_only(tmp_path):
    ours = tiny(FunnelForMaskedLM)
    with pytest.raises(CheckpointError, match="mlm_transform"):
        save_hf_checkpoint(ours, tmp_path)
    save_hf_checkpoint(ours.funnel, tmp_path)
    hf = transformers.FunnelModel.from_pretrained(tmp_path).eval()
    ids, types, mask = batch()
    with torch.no_grad():
        torch.testing.assert_close(ours(ids, types, mask).hidden,
                                   hf(ids, attention_mask=mask, token_type_ids=types).last_hidden_state,
                                   atol=ATOL, rtol=0)


def test_base_model_folder_without_architectures_loads(tmp_path):
    """A FunnelBaseModel folder whose config.json has no ``architectures``: the weights say there is no decoder."""
    hf = hf_model("FunnelBaseModel")
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("architectures", None)
    (tmp_path / "config.json").write_text(json.dumps(config))
    ours = load_hf_checkpoint(tmp_path, mask_pool="all_real").eval()
    assert ours.decoder is None
    ids, types, mask = batch(pad_from=7)
    compare(hf, ours, ids, types, mask)
