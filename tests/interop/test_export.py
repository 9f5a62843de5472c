"""``python -m genlab.interop.export <ckpt> <out>``: a genlab checkpoint of each family becomes a folder the matching
transformers class loads with ``from_pretrained`` and that gives our outputs; Transformer-XL (absent from
transformers 5) round-trips through our importer and has the layout of the transformers 4.35 golden fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from genlab.interop import hf_transfo_xl
from genlab.interop.export import main

transformers = pytest.importorskip("transformers", reason="transformers (test dependency) is not installed")

V, T = 50, 8
TXL_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "transfo_xl" / "div1_proj_untie"
FAMILIES = {  # our model config (as conf/model/*.yaml, vocab_size from the data) and the HF class it exports to
    "gpt": ({"_target_": "genlab.models.gpt.GPTLMHeadModel", "n_positions": 16, "n_embd": 16, "n_layer": 1,
             "n_head": 2, "afn": "relu", "layer_norm_eps": 1e-3}, "OpenAIGPTLMHeadModel"),
    "bert": ({"_target_": "genlab.models.bert.BertForPretraining", "n_layer": 1, "d_model": 16, "n_head": 2,
              "d_inner": 32, "max_position": 16, "layer_norm_eps": 1e-3}, "BertForPreTraining"),
    "xlnet": ({"_target_": "genlab.models.xlnet.XLNetLMHeadModel", "n_layer": 1, "d_model": 16, "n_head": 2,
               "d_head": 8, "d_inner": 32, "ff_activation": "relu"}, "XLNetLMHeadModel"),
    "funnel": ({"_target_": "genlab.models.funnel_pretraining.FunnelForMaskedLM", "block_sizes": [1, 1],
                "d_model": 16, "n_head": 2, "d_head": 8, "d_inner": 32, "mlm_transform": False,
                "mask_pool": "all_real"}, "FunnelForMaskedLM"),
}


def write_ckpt(tmp_path: Path, model_cfg: dict, tokenizer: str | None = None, vocab_size: int = V
               ) -> tuple[Path, torch.nn.Module]:
    """A checkpoint as train.py writes one (model.* weights, the run's config and data identity), random weights."""
    from hydra.utils import instantiate

    torch.manual_seed(0)
    model = instantiate(model_cfg, vocab_size=vocab_size)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "genlab": {"config": {"model": model_cfg, "data": {"tokenizer": tokenizer}},
                           "data_identity": {"vocab_size": vocab_size}}}, ckpt)
    return ckpt, model.eval()


def outputs(family: str, model, hf, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    seg = torch.zeros_like(ids)
    with torch.no_grad():
        if family == "gpt":
            return model.lm_logits(model(ids).hidden), hf(input_ids=ids).logits
        if family == "bert":
            return model.mlm_logits(model(ids, seg).hidden), hf(input_ids=ids, token_type_ids=seg).prediction_logits
        if family == "xlnet":
            return model(ids, seg).logits, hf(ids, token_type_ids=seg).logits
        return model.mlm_logits(model(ids, seg).hidden), hf(ids, token_type_ids=seg).logits


@pytest.mark.parametrize("family", list(FAMILIES))
def test_export_loads_with_from_pretrained_and_gives_our_outputs(tmp_path, family):
    model_cfg, hf_class = FAMILIES[family]
    vocab = tmp_path / "tok"
    vocab.mkdir()
    (vocab / "vocab.txt").write_text("\n".join(f"w{i}" for i in range(V)) + "\n")
    (vocab / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    ckpt, model = write_ckpt(tmp_path, model_cfg, tokenizer=str(vocab))
    assert main([str(ckpt), str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "config.json").read_text())["architectures"] == [hf_class]
    hf = getattr(transformers, hf_class).from_pretrained(out).eval()
    ids = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(1))
    ours, theirs = outputs(family, model, hf, ids)
    assert (ours - theirs).abs().max() < 1e-4


def test_transformer_xl_export_has_the_4_35_layout_and_imports_back(tmp_path):
    fixture_cfg = hf_transfo_xl.config_from_hf(json.loads((TXL_FIXTURE / "config.json").read_text()))
    model_cfg = {"_target_": "genlab.models.transformer_xl.TransformerXL",
                 **{k: v for k, v in fixture_cfg.items() if k != "vocab_size"}}
    ckpt, model = write_ckpt(tmp_path, model_cfg, vocab_size=fixture_cfg["vocab_size"])
    assert main([str(ckpt), str(tmp_path / "out")]) == 0
    ours, theirs = load_file(tmp_path / "out" / "model.safetensors"), load_file(TXL_FIXTURE / "model.safetensors")
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}
    back = hf_transfo_xl.load_hf_checkpoint(tmp_path / "out").eval()
    ids = torch.randint(0, fixture_cfg["vocab_size"], (2, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(back.log_probs(ids)[0], model.log_probs(ids)[0])


def test_a_checkpoint_without_a_model_is_exit_2(tmp_path, capsys):
    ckpt = tmp_path / "x.ckpt"
    torch.save({"state_dict": {}, "genlab": {"config": {"model": {}}}}, ckpt)
    assert main([str(ckpt), str(tmp_path / "out")]) == 2
    assert "holds no model.* weights" in capsys.readouterr().err and not (tmp_path / "out").exists()
