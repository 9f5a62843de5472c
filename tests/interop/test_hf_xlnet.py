"""HF XLNet checkpoint import/export (HF's weight layout): round trips and clear errors."""

from __future__ import annotations

import pytest
import torch

from genlab.errors import CheckpointError
from genlab.interop.hf_xlnet import (
    config_from_hf,
    export_hf_state_dict,
    load_hf_checkpoint,
    load_hf_state_dict,
    read_state_dict,
    save_hf_checkpoint,
)
from genlab.models.xlnet import XLNetLMHeadModel, XLNetModel

transformers = pytest.importorskip("transformers", reason="transformers (test dependency) is not installed")

V = 50
DIMS = dict(n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64)


def ours(**kw) -> XLNetLMHeadModel:
    torch.manual_seed(0)
    model = XLNetLMHeadModel(V, **{**DIMS, "dropout": 0.0, "dropatt": 0.0, **kw}).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


def hf_model(**kw):
    torch.manual_seed(1)
    cfg = transformers.XLNetConfig(vocab_size=V, d_model=32, n_layer=2, n_head=2, d_inner=64,
                                   ff_activation="gelu_new", dropout=0.0, **kw)
    model = transformers.XLNetLMHeadModel(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


def batch():
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, V, (2, 6), generator=g)
    seg = torch.randint(0, 2, (2, 6), generator=g)
    return ids, seg


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "pytorch_model.bin"])
def test_export_then_hf_from_pretrained(tmp_path, safe):
    model = ours()
    path = save_hf_checkpoint(model, tmp_path, safe_serialization=safe)
    assert path.exists()
    hf = transformers.XLNetLMHeadModel.from_pretrained(tmp_path).eval()
    ids, seg = batch()
    assert (model(ids, seg).logits - hf(ids, token_type_ids=seg).logits).abs().max() < 1e-5


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "pytorch_model.bin"])
def test_import_hf_save_pretrained(tmp_path, safe):
    hf = hf_model()
    hf.save_pretrained(tmp_path, safe_serialization=safe)
    model = load_hf_checkpoint(tmp_path, dropout=0.0, dropatt=0.0).eval()
    ids, seg = batch()
    assert (model(ids, seg).logits - hf(ids, token_type_ids=seg).logits).abs().max() < 1e-5
    assert model.lm_loss.weight is model.transformer.word_embedding.weight


def test_round_trip_state_dict_is_identity():
    a, b = ours(), XLNetLMHeadModel(V, **DIMS)
    load_hf_state_dict(b, export_hf_state_dict(a))
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


def test_bare_xlnet_model_checkpoint_and_head_keys():
    torch.manual_seed(3)
    cfg = transformers.XLNetConfig(vocab_size=V, d_model=32, n_layer=2, n_head=2, d_inner=64)
    base = transformers.XLNetForSequenceClassification(cfg).eval()
    state = base.state_dict()  # transformer.* + sequence_summary.* + logits_proj.*
    model = XLNetLMHeadModel(V, **DIMS)
    unused = load_hf_state_dict(model, state).unused
    assert unused and all(k.startswith(("sequence_summary", "logits_proj")) for k in unused)
    bare = transformers.XLNetModel(cfg).state_dict()  # no "transformer." prefix, no lm bias
    backbone = XLNetModel(V, **DIMS)
    load_hf_state_dict(backbone, bare)
    assert torch.equal(backbone.word_embedding.weight, bare["word_embedding.weight"])
    load_hf_state_dict(model, bare)
    assert model.lm_loss.bias.abs().sum() == 0


def test_wrong_size_names_the_tensors(tmp_path):
    hf = hf_model()
    hf.save_pretrained(tmp_path)
    state = read_state_dict(tmp_path)
    small = XLNetLMHeadModel(V, **{**DIMS, "d_inner": 48})
    wrong = r"layer\.0\.ff\.layer_1\.weight: checkpoint \(64, 32\) vs model \(48, 32\)"
    with pytest.raises(CheckpointError, match=wrong):
        load_hf_state_dict(small, state, source="ckpt")
    deeper = XLNetLMHeadModel(V, **{**DIMS, "n_layer": 3})
    with pytest.raises(CheckpointError, match=r"missing tensors: transformer\.layer\.2\."):
        load_hf_state_dict(deeper, state)
    shallower = XLNetLMHeadModel(V, **{**DIMS, "n_layer": 1})
    with pytest.raises(CheckpointError, match=r"does not have: transformer\.layer\.1\."):
        load_hf_state_dict(shallower, state)


def test_unreadable_and_missing_files(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        read_state_dict(tmp_path / "nope.safetensors")
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        read_state_dict(tmp_path)
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot read"):
        read_state_dict(bad)
    with pytest.raises(CheckpointError, match="config.json"):
        load_hf_checkpoint(tmp_path)


def test_activation_mapping():
    assert config_from_hf(dict(vocab_size=5, d_model=4, n_head=2, n_layer=1, d_inner=8,
                               ff_activation="gelu_new"))["ff_activation"] == "gelu_tanh"
    with pytest.raises(CheckpointError, match="ff_activation"):
        config_from_hf(dict(vocab_size=5, d_model=4, n_head=2, n_layer=1, d_inner=8, ff_activation="swish"))


def _segments(n: int = 3, t: int = 5):
    g = torch.Generator().manual_seed(3)
    return [(torch.randint(0, V, (2, t), generator=g), torch.randint(0, 2, (2, t), generator=g)) for _ in range(n)]


@pytest.mark.parametrize("hf_memory", [dict(mem_len=None), dict(mem_len=None, reuse_len=3), dict(mem_len=4),
                                       dict(mem_len=6, reuse_len=2), dict(mem_len=0, use_mems_eval=False)],
                         ids=["unbounded", "unbounded-reuse3", "mem4", "mem6-reuse2", "no-memory"])
def test_imported_model_carries_memory_across_segments_as_hf(tmp_path, hf_memory):
    """config.json's mem_len (null = keep everything), reuse_len (cache the first positions only) and use_mems_eval
    decide what HF remembers between calls; an imported model must give the same logits on every segment."""
    hf = hf_model(**hf_memory)
    hf.save_pretrained(tmp_path)
    model = load_hf_checkpoint(tmp_path, dropout=0.0, dropatt=0.0).eval()
    hf_mems, memory = None, None
    for ids, seg in _segments():
        want = hf(ids, token_type_ids=seg, mems=hf_mems)  # eval: HF remembers iff config.use_mems_eval
        got = model(ids, seg, memory=memory)
        assert (got.logits - want.logits).abs().max() < 1e-4
        hf_mems, memory = want.mems, got.memory
        if hf_memory.get("use_mems_eval", True):
            assert [m.shape for m in memory] == [m.transpose(0, 1).shape for m in hf_mems]
        else:
            assert memory is None
    # and back: our export writes the same memory semantics into config.json
    save_hf_checkpoint(model, tmp_path / "back")
    again = transformers.XLNetLMHeadModel.from_pretrained(tmp_path / "back").eval()
    for key in ("mem_len", "reuse_len", "use_mems_eval"):
        assert getattr(again.config, key) == getattr(hf.config, key) or (key == "mem_len" and not hf.config.mem_len)


def test_a_query_row_with_no_visible_key_attends_uniformly_as_hf(tmp_path):
    """The first target of a factorisation order without memory sees no key: the official code and HF attend
    uniformly; the default model and an imported one do too ("zero" remains as an ablation)."""
    hf = hf_model()
    hf.save_pretrained(tmp_path)
    ids, seg = batch()
    perm = torch.ones(2, 6, 6)  # every query row blocks every key: each target slot is an empty row
    tm = torch.zeros(2, 2, 6)
    tm[:, 0, 1] = tm[:, 1, 4] = 1
    want = hf(ids, token_type_ids=seg, perm_mask=perm, target_mapping=tm).logits
    imported = load_hf_checkpoint(tmp_path, dropout=0.0, dropatt=0.0).eval()
    assert (imported(ids, seg, perm_mask=perm, target_mapping=tm).logits - want).abs().max() < 1e-4
    default = XLNetLMHeadModel(V, **{**DIMS, "dropout": 0.0, "dropatt": 0.0})
    default.load_state_dict(imported.state_dict())
    assert (default.eval()(ids, seg, perm_mask=perm, target_mapping=tm).logits - want).abs().max() < 1e-4
    ablation = XLNetLMHeadModel(V, **{**DIMS, "dropout": 0.0, "dropatt": 0.0, "empty_row_policy": "zero"})
    ablation.load_state_dict(imported.state_dict())
    assert (ablation.eval()(ids, seg, perm_mask=perm, target_mapping=tm).logits - want).abs().max() > 1e-3


def test_load_hf_checkpoint_accepts_every_model_option(tmp_path):
    hf_model().save_pretrained(tmp_path)
    model = load_hf_checkpoint(tmp_path, mem_len=8, reuse_len=2, empty_row_policy="zero", clamp_len=4,
                               same_length=True, dropout=0.0, dropatt=0.0, ff_inner_dropout=0.0)
    backbone = model.transformer
    assert (backbone.mem_len, backbone.reuse_len, backbone.empty_row_policy, backbone.clamp_len) == (8, 2, "zero", 4)
    with pytest.raises(TypeError, match="n_layers"):
        load_hf_checkpoint(tmp_path, n_layers=3)
