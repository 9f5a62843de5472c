"""``task.init_from`` never loads a checkpoint into a model of another architecture: for each of the five HF
families a folder whose config differs from the configured model in its activation, LayerNorm epsilon and head
count stops with a CheckpointError (exit 2) that lists every differing key as the Hydra override that fixes it,
and the model built with those overrides passes. Only config.json is written: the check runs before any weight is
read, so these tests build no HF model."""

from __future__ import annotations

import json

import pytest
import yaml

from genlab.errors import CheckpointError
from genlab.interop import hf_bert, hf_funnel, hf_gpt, hf_transfo_xl, hf_xlnet
from genlab.interop.hf_files import architecture_overrides, check_architecture
from genlab.models.bert import BertForPretraining
from genlab.models.funnel import FunnelModel
from genlab.models.gpt import GPTLMHeadModel
from genlab.models.transformer_xl import TransformerXL
from genlab.models.xlnet import XLNetLMHeadModel
from genlab.tasks.finetune_base import load_pretrained
from genlab.tasks.gpt import load_pretrained_state

transformers = pytest.importorskip("transformers", reason="transformers (test dependency) is not installed")

V = 40


def _folder(tmp_path, config: dict):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def _apply(kwargs: dict, message: str) -> dict:
    """The model kwargs with the message's ``model.<key>=<value>`` overrides applied, as Hydra would."""
    fixes = message.split("checkpoint's model: ")[1].split()
    return {**kwargs, **{f[len("model."):].split("=")[0]: yaml.safe_load(f.split("=", 1)[1]) for f in fixes}}


# family: (HF config class or None, base HF kwargs, the differing HF kwargs, the overrides that must be listed)
FAMILIES = {
    "gpt": ("OpenAIGPTConfig", dict(vocab_size=V, n_positions=16, n_embd=16, n_layer=1, n_head=2),
            dict(afn="relu", layer_norm_epsilon=1e-2, n_head=4),
            ["model.n_head=4", "model.afn=relu", "model.layer_norm_eps=0.01"]),
    "xlnet": ("XLNetConfig", dict(vocab_size=V, d_model=16, n_layer=1, n_head=2, d_inner=32, ff_activation="gelu"),
              dict(ff_activation="relu", layer_norm_eps=1e-2, n_head=4),
              ["model.n_head=4", "model.d_head=4", "model.ff_activation=relu", "model.layer_norm_eps=0.01"]),
    "funnel": ("FunnelConfig", dict(vocab_size=V, block_sizes=[1, 1], d_model=16, n_head=2, d_head=8, d_inner=32),
               dict(hidden_act="relu", layer_norm_eps=1e-2, n_head=4),
               ["model.n_head=4", "model.activation=relu", "model.layer_norm_eps=0.01"]),
    "bert": ("BertConfig", dict(vocab_size=V, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=16),
             dict(layer_norm_eps=1e-2, num_attention_heads=4),
             ["model.n_head=4", "model.layer_norm_eps=0.01"]),
}
MODELS = {"gpt": (GPTLMHeadModel, hf_gpt), "xlnet": (XLNetLMHeadModel, hf_xlnet), "funnel": (FunnelModel, hf_funnel),
          "bert": (BertForPretraining, hf_bert)}


def _hf_config(family: str, **kw) -> dict:
    cls, base, _, _ = FAMILIES[family]
    return getattr(transformers, cls)(**{**base, **kw}).to_dict()


def _init_from(family: str, model, folder) -> None:
    if family == "gpt":
        load_pretrained_state(str(folder), model)
    else:
        load_pretrained(model, str(folder))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_differing_activation_epsilon_and_head_count_is_refused_with_every_override(tmp_path, family):
    cls, interop = MODELS[family]
    kwargs = interop.config_from_hf(_hf_config(family))  # the preset: the checkpoint's model but for three keys
    differing = _hf_config(family, **FAMILIES[family][2])
    with pytest.raises(CheckpointError) as err:
        _init_from(family, cls(**kwargs), _folder(tmp_path, differing))
    message = str(err.value)
    assert message.startswith(f"task.init_from={tmp_path} was trained with a different model")
    assert sorted(message.split("checkpoint's model: ")[1].split()) == sorted(FAMILIES[family][3])
    fixed = _apply(kwargs, message)
    assert not architecture_overrides(interop.config_from_hf(differing), fixed, interop.ARCH_KEYS)
    (tmp_path / "config.json").unlink()  # the fixed model passes the same check (weights are another test's)
    check_architecture("x", interop.config_from_hf(differing), cls(**fixed).arch if family != "xlnet"
                       else cls(**fixed).transformer.arch, interop.ARCH_KEYS)


def test_bert_activation_other_than_gelu_is_refused_by_name(tmp_path):
    """genlab's BERT has one activation (erf GELU), so no override exists: the key is named instead."""
    model = BertForPretraining(**hf_bert.config_from_hf(_hf_config("bert")))
    with pytest.raises(CheckpointError, match="hidden_act='relu' is not supported"):
        load_pretrained(model, str(_folder(tmp_path, _hf_config("bert", hidden_act="relu"))))


def test_gpt_genlab_checkpoint_is_checked_against_its_recorded_model_config(tmp_path):
    import torch

    model = GPTLMHeadModel(V, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    ckpt = tmp_path / "last.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "genlab": {"config": {"model": {**model.arch, "afn": "relu", "n_positions": 8}}}}, ckpt)
    with pytest.raises(CheckpointError, match=r"checkpoint's model: model.afn=relu model.n_positions=8$"):
        load_pretrained_state(str(ckpt), model)


def test_transformer_xl_folder_builds_the_checkpoints_model_and_a_differing_config_is_listed(tmp_path):
    """Transformer-XL (no activation setting: ReLU in HF and here) has no init_from task: load_hf_checkpoint
    builds the model from the folder's own config; the shared check lists epsilon and head count."""
    base = dict(vocab_size=V, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32, mem_len=4, init_mem="zeros",
                same_length_variant="pytorch")
    published = TransformerXL(**{**base, "n_head": 4, "d_head": 4, "ln_eps": 1e-2})
    hf_transfo_xl.save_hf_checkpoint(published, tmp_path)
    loaded = hf_transfo_xl.load_hf_checkpoint(tmp_path)
    assert (loaded.n_head, loaded.arch["ln_eps"]) == (4, 1e-2)
    theirs = hf_transfo_xl.config_from_hf(json.loads((tmp_path / "config.json").read_text()))
    ours = hf_transfo_xl.architecture(TransformerXL(**base))
    assert architecture_overrides(theirs, ours, hf_transfo_xl.ARCH_KEYS) == [
        "model.n_head=4", "model.d_head=4", "model.ln_eps=0.01"]
