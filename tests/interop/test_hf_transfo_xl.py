"""Parity with HF 4.35 TransfoXLLMHeadModel through the golden fixture, and checkpoint import from its layout.

The fixture (tests/fixtures/transfo_xl/, made by make_fixture.py with transformers 4.35.2) holds HF's
``save_pretrained`` output and HF's full log-prob tables and memories over 3 segments, so these tests run
without transformers installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from genlab.errors import CheckpointError
from genlab.interop.hf_transfo_xl import (
    INV_FREQ_KEY,
    config_from_hf,
    export_hf_state_dict,
    hf_key_map,
    load_hf_checkpoint,
    load_hf_state_dict,
    save_hf_checkpoint,
)
from genlab.models.transformer_xl import TransformerXL

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "transfo_xl"
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.pt").is_file())
SETTINGS = [(sl, cl) for sl in (False, True) for cl in (-1, 3)]


def _load(name: str, **overrides) -> tuple[TransformerXL, dict]:
    model = load_hf_checkpoint(FIXTURES / name, **overrides).eval()
    expected = torch.load(FIXTURES / name / "expected.pt", weights_only=True)
    return model, expected


def _run(model: TransformerXL, ids: torch.Tensor, seg_len: int, empty_mems: bool = False):
    mem = [ids.new_zeros(ids.size(0), 0, model.d_model, dtype=torch.float32)] * model.n_layer if empty_mems else None
    logps, mems = [], []
    with torch.no_grad():
        for s in range(ids.size(1) // seg_len):
            lp, mem = model.log_probs(ids[:, s * seg_len:(s + 1) * seg_len], mem)
            logps.append(lp)
            mems.append(torch.stack(mem))
    return torch.stack(logps), mems


def _max_err(model: TransformerXL, expected: dict, key: str, same_length: bool, clamp_len: int,
             empty_mems: bool = False) -> float:
    model.same_length, model.clamp_len = same_length, clamp_len
    logps, _ = _run(model, expected["input_ids"], expected["seg_len"], empty_mems)
    return (logps - expected["outputs"][key]["log_probs"]).abs().max().item()


def test_fixture_present_and_small():
    assert len(NAMES) >= 3, f"golden fixture missing under {FIXTURES}; run make_fixture.py"
    total = sum(f.stat().st_size for f in FIXTURES.rglob("*") if f.is_file())
    assert total < 1_000_000


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("same_length,clamp_len", SETTINGS)
def test_c19_parity_zero_init(name, same_length, clamp_len):
    """HF with mems=None == ours with init_mem=zeros, pytorch same_length variant, ln_eps 1e-5."""
    model, expected = _load(name)
    assert model.init_mem == "zeros" and model.same_length_variant == "pytorch"
    key = f"same_length={same_length},clamp_len={clamp_len},init=zeros"
    assert _max_err(model, expected, key, same_length, clamp_len) <= 1e-4


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("same_length,clamp_len", SETTINGS)
def test_c19_parity_empty_init(name, same_length, clamp_len):
    """HF given explicit empty mems == ours with init_mem=empty (and == ours given explicit empty mems)."""
    model, expected = _load(name, init_mem="empty")
    key = f"same_length={same_length},clamp_len={clamp_len},init=empty"
    assert _max_err(model, expected, key, same_length, clamp_len) <= 1e-4
    assert _max_err(model, expected, key, same_length, clamp_len, empty_mems=True) <= 1e-4


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("init", ["zeros", "empty"])
def test_c19_memories_match(name, init):
    model, expected = _load(name, init_mem=init)
    model.same_length, model.clamp_len = False, -1
    _, mems = _run(model, expected["input_ids"], expected["seg_len"])
    ref = expected["outputs"][f"same_length=False,clamp_len=-1,init={init}"]["mems"]
    assert len(mems) == len(ref)
    for ours, theirs in zip(mems, ref):
        assert ours.shape == theirs.shape  # [N, B, M, d]
        assert (ours - theirs).abs().max().item() <= 1e-4


@pytest.mark.parametrize("name", NAMES)
def test_c19_negative_control_reverse_cluster_order(name):
    """Reversing the cluster rows (the official PyTorch order) must break parity by >= 0.5 nats."""
    model, expected = _load(name)
    with torch.no_grad():
        model.crit.cluster_weight.copy_(model.crit.cluster_weight.flip(0))
        model.crit.cluster_bias.copy_(model.crit.cluster_bias.flip(0))
    worst = max(_max_err(model, expected, f"same_length={sl},clamp_len={cl},init=zeros", sl, cl) for sl, cl in SETTINGS)
    assert worst >= 0.5


def test_reverse_clusters_import_restores_natural_order():
    """Weights stored in the official PyTorch (reverse) cluster order import correctly with reverse_clusters."""
    name = NAMES[0]
    model, expected = _load(name)
    sd = export_hf_state_dict(model)
    sd["crit.cluster_weight"] = sd["crit.cluster_weight"].flip(0)
    sd["crit.cluster_bias"] = sd["crit.cluster_bias"].flip(0)
    fixed = TransformerXL(**config_from_hf(json.loads((FIXTURES / name / "config.json").read_text()))).eval()
    load_hf_state_dict(fixed, sd, reverse_clusters=True)
    assert _max_err(fixed, expected, "same_length=False,clamp_len=-1,init=zeros", False, -1) <= 1e-4


@pytest.mark.parametrize("name", NAMES)
def test_c19_negative_control_tf_same_length(name):
    model, expected = _load(name, same_length_variant="tf")
    worst = max(_max_err(model, expected, f"same_length=True,clamp_len={cl},init=zeros", True, cl) for cl in (-1, 3))
    assert worst >= 0.5


@pytest.mark.parametrize("name", NAMES)
def test_c19_negative_control_mismatched_init_memory(name):
    model, expected = _load(name, init_mem="empty")
    worst = max(_max_err(model, expected, f"same_length={sl},clamp_len={cl},init=zeros", sl, cl)
                for sl, cl in SETTINGS)
    assert worst >= 0.5


@pytest.mark.parametrize("name", NAMES)
def test_c20_importer_completeness(name):
    """Every key of HF's full state dict is known; the safetensors file (tied keys dropped) loads; ties share
    storage."""
    cfg = json.loads((FIXTURES / name / "config.json").read_text())
    model = TransformerXL(**config_from_hf(cfg))
    expected = torch.load(FIXTURES / name / "expected.pt", weights_only=True)
    keys = hf_key_map(model)
    assert set(expected["full_keys"]) == set(keys) | {INV_FREQ_KEY}
    saved = load_file(str(FIXTURES / name / "model.safetensors"))
    assert set(saved) < set(expected["full_keys"])  # save_pretrained dropped the tied keys
    load_hf_state_dict(model, saved)
    for i, table in enumerate(model.word_emb.tables):
        assert model.crit.weights[i].data_ptr() == table.weight.data_ptr()
    for i, tie in enumerate(cfg["tie_projs"]):
        src = model.word_emb.proj(0 if cfg["div_val"] == 1 else i)
        if tie and src is not None:
            assert model.crit.proj(i).data_ptr() == src.data_ptr()
        elif src is not None and model.crit.proj(i) is not None:
            assert model.crit.proj(i).data_ptr() != src.data_ptr()


@pytest.mark.parametrize("name", NAMES)
def test_c20_export_roundtrip(name):
    """Export -> full HF key set (aliases, inv_freq) -> import into a fresh model gives identical outputs."""
    model, expected = _load(name)
    exported = export_hf_state_dict(model)
    assert set(exported) == set(expected["full_keys"])
    fresh = TransformerXL(**config_from_hf(json.loads((FIXTURES / name / "config.json").read_text()))).eval()
    load_hf_state_dict(fresh, exported)
    ids = expected["input_ids"]
    with torch.no_grad():
        a, _ = model.log_probs(ids)
        b, _ = fresh.log_probs(ids)
    assert torch.equal(a, b)


def test_c20_export_without_projections_roundtrip():
    """div_val=1, d_embed=d: no projection keys at all; export/import still round-trips."""
    model = TransformerXL(60, n_layer=2, d_model=32, n_head=4, d_head=8, d_inner=64, cutoffs=[12, 25, 40],
                          mem_len=6, dropout=0.0, untie_r=False)
    sd = export_hf_state_dict(model)
    assert not any("projs" in k for k in sd)
    assert "transformer.r_w_bias" in sd and "transformer.layers.1.dec_attn.r_w_bias" in sd
    fresh = TransformerXL(60, n_layer=2, d_model=32, n_head=4, d_head=8, d_inner=64, cutoffs=[12, 25, 40],
                          mem_len=6, dropout=0.0, untie_r=False, init_std=0.5)
    load_hf_state_dict(fresh, sd)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))


def test_importer_errors_name_the_key():
    model, _ = _load(NAMES[0])
    sd = export_hf_state_dict(model)
    with pytest.raises(CheckpointError, match="unknown"):
        load_hf_state_dict(model, {**sd, "transformer.bogus": torch.zeros(1)})
    broken = dict(sd)
    del broken["transformer.layers.0.dec_attn.qkv_net.weight"]
    with pytest.raises(CheckpointError, match="qkv_net"):
        load_hf_state_dict(model, broken)
    tied = dict(sd)
    tied["crit.out_layers.0.weight"] = tied["crit.out_layers.0.weight"] + 1
    with pytest.raises(CheckpointError, match="tied"):
        load_hf_state_dict(model, tied)
    with pytest.raises(CheckpointError, match="config.json"):
        load_hf_checkpoint(FIXTURES / "does_not_exist")


def test_c20_published_wt103_parameter_count():
    """The HF default TransfoXLConfig (transfo-xl-wt103) has 285,205,322 unique parameters."""
    cfg = dict(vocab_size=267735, cutoffs=[20000, 40000, 200000], d_model=1024, d_embed=1024, n_head=16,
               d_head=64, d_inner=4096, div_val=4, n_layer=18, untie_r=True, tie_projs=[False, True, True, True],
               mem_len=1600, clamp_len=1000, same_length=True)
    with torch.device("meta"):
        model = TransformerXL(**config_from_hf(cfg))
    assert model.num_parameters() == 285_205_322


def test_load_checkpoint_from_pytorch_bin(tmp_path):
    """A folder with config.json + pytorch_model.bin (older HF layout) loads too; an empty folder is a clear error."""
    name = NAMES[0]
    model, expected = _load(name)
    (tmp_path / "config.json").write_text((FIXTURES / name / "config.json").read_text())
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_hf_checkpoint(tmp_path)
    torch.save(export_hf_state_dict(model), tmp_path / "pytorch_model.bin")
    again = load_hf_checkpoint(tmp_path).eval()
    assert _max_err(again, expected, "same_length=False,clamp_len=-1,init=zeros", False, -1) <= 1e-4


@pytest.mark.parametrize("name", NAMES)
def test_save_hf_checkpoint_writes_the_folder_4_35_wrote(name, tmp_path):
    """The exported folder holds what transformers 4.35.2's save_pretrained wrote for the same weights: the same
    safetensors keys and tensors, and a config.json agreeing on every key 4.35 reads; it imports back exactly."""
    model = load_hf_checkpoint(FIXTURES / name).eval()
    save_hf_checkpoint(model, tmp_path)
    theirs, ours = load_file(FIXTURES / name / "model.safetensors"), load_file(tmp_path / "model.safetensors")
    assert sorted(ours) == sorted(theirs) and all(torch.equal(ours[k], theirs[k]) for k in theirs)
    config, written = json.loads((FIXTURES / name / "config.json").read_text()), json.loads(
        (tmp_path / "config.json").read_text())
    assert {k: written.get(k) for k in config if k not in ("transformers_version", "torch_dtype")} == {
        k: v for k, v in config.items() if k not in ("transformers_version", "torch_dtype")}
    again, expected = _load(name)
    ids = expected["input_ids"]
    back = load_hf_checkpoint(tmp_path).eval()
    assert torch.equal(_run(again, ids, expected["seg_len"])[0], _run(back, ids, expected["seg_len"])[0])


def test_save_hf_checkpoint_refuses_what_hf_would_evaluate_differently(tmp_path):
    """Our defaults (empty initial memory, the TF same_length mask) are evaluation settings HF 4.35 lacks: the
    export names each one and the fix, writes nothing, and exports when asked to."""
    model = TransformerXL(60, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, mem_len=4, same_length=True)
    with pytest.raises(CheckpointError) as err:
        save_hf_checkpoint(model, tmp_path / "refused")
    assert "init_mem='empty'" in str(err.value) and "same_length_variant='tf'" in str(err.value)
    assert "init_mem=zeros" in str(err.value) and not (tmp_path / "refused").exists()
    model.init_mem, model.same_length_variant = "zeros", "pytorch"
    save_hf_checkpoint(model, tmp_path / "ok")
    assert load_hf_checkpoint(tmp_path / "ok").state_dict().keys() == model.state_dict().keys()
