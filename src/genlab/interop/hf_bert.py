"""Import/export Hugging Face ``BertModel`` / ``BertForPreTraining`` checkpoints into ``genlab.models.bert``.

Our module names equal HF ``BertForPreTraining`` keys, so the mapping is the identity plus these rules:
* a bare ``BertModel`` checkpoint has no ``bert.`` prefix; HF task models (``BertForSequenceClassification`` ...)
  carry finetuning heads (``classifier.``, ``qa_outputs.``) that are reported as unused;
* checkpoints converted from the original TensorFlow release name LayerNorm parameters ``gamma``/``beta``;
* the MLM decoder is tied to the word embedding and its bias to ``cls.predictions.bias``: both may be absent
  (safetensors drops shared tensors) or present (they must then equal what they are tied to);
* whole optional parts may be absent and keep their initialisation, reported as such: the pooler
  (``BertForMaskedLM`` has none), the MLM head and the NSP head (``BertModel`` has neither). A part that is only
  partly present is an error.
Everything else is strict: a missing tensor, an extra layer or a shape mismatch raises ``CheckpointError``
naming the tensors. Only the erf GELU (``hidden_act=gelu``) and absolute positions are supported.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from genlab.errors import CheckpointError
from genlab.interop.hf_files import (
    HFImport,
    copy_state,
    fit_problems,
    read_state_dict,
    write_hf_folder,
)
from genlab.models.bert import BertForPretraining

PREFIX = "bert."
TIED = "cls.predictions.decoder.weight"
# our config keys that change the outputs (BERT has one activation, the erf GELU: config_from_hf refuses others)
ARCH_KEYS = ("vocab_size", "n_layer", "d_model", "n_head", "d_inner", "max_position", "type_vocab_size",
             "layer_norm_eps")
TIED_BIAS = "cls.predictions.decoder.bias"
MLM_BIAS = "cls.predictions.bias"
BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")  # non-parameter buffers of some HF versions
HEAD_PREFIXES = ("classifier.", "qa_outputs.")
OPTIONAL_PARTS = ("bert.pooler.", "cls.predictions.", "cls.seq_relationship.")
TF_NAMES = {"LayerNorm.gamma": "LayerNorm.weight", "LayerNorm.beta": "LayerNorm.bias"}

__all__ = [
    "BertImport",
    "config_from_hf",
    "config_to_hf",
    "export_hf_state_dict",
    "load_hf_checkpoint",
    "load_hf_state_dict",
    "read_state_dict",
    "save_hf_checkpoint",
]


BertImport = HFImport  # the name this module exported before the report was shared


def config_from_hf(config: Mapping[str, Any]) -> dict[str, Any]:
    """``BertForPretraining`` kwargs from an HF ``BertConfig`` dict (``config.json``)."""
    model_type = config.get("model_type", "bert")
    if model_type != "bert":
        raise CheckpointError(f"config.json has model_type={model_type!r}; this importer reads BERT checkpoints "
                              "(use genlab.interop.hf_xlnet for XLNet).")
    act = config.get("hidden_act", "gelu")
    if act != "gelu":
        raise CheckpointError(f"HF config hidden_act={act!r} is not supported; genlab's BERT uses the erf GELU "
                              "('gelu'), as the published BERT checkpoints do.")
    positions = config.get("position_embedding_type", "absolute")
    if positions != "absolute":
        raise CheckpointError(f"HF config position_embedding_type={positions!r} is not supported; only 'absolute'.")
    return dict(
        vocab_size=config["vocab_size"], n_layer=config["num_hidden_layers"], d_model=config["hidden_size"],
        n_head=config["num_attention_heads"], d_inner=config["intermediate_size"],
        max_position=config.get("max_position_embeddings", 512), type_vocab_size=config.get("type_vocab_size", 2),
        dropout=config.get("hidden_dropout_prob", 0.1), dropatt=config.get("attention_probs_dropout_prob", 0.1),
        layer_norm_eps=config.get("layer_norm_eps", 1e-12), init_std=config.get("initializer_range", 0.02),
    )


def config_to_hf(model: BertForPretraining) -> dict[str, Any]:
    """An HF ``BertConfig`` dict for our model."""
    a = model.arch
    if not a["mlm_transform"]:
        raise CheckpointError("HF BertForPreTraining always has the MLM transform (dense, GELU, LayerNorm); a model "
                              "pretrained with model.mlm_transform=false has no such weights to export.")
    return dict(
        model_type="bert", architectures=["BertForPreTraining"], vocab_size=a["vocab_size"],
        hidden_size=a["d_model"], num_hidden_layers=a["n_layer"], num_attention_heads=a["n_head"],
        intermediate_size=a["d_inner"], hidden_act="gelu", hidden_dropout_prob=a["dropout"],
        attention_probs_dropout_prob=a["dropatt"], max_position_embeddings=a["max_position"],
        type_vocab_size=a["type_vocab_size"], initializer_range=a["init_std"], layer_norm_eps=a["layer_norm_eps"],
        position_embedding_type="absolute", pad_token_id=0, tie_word_embeddings=True,
    )


def _rename(key: str) -> str:
    for old, new in TF_NAMES.items():
        if key.endswith(old):
            return key[: -len(old)] + new
    return key


def _normalise(state: Mapping[str, Tensor], source: str) -> tuple[dict[str, Tensor], list[str]]:
    """HF keys -> our ``BertForPretraining`` keys; returns (tensors, unused keys)."""
    has_prefix = any(k.startswith(PREFIX) for k in state)
    out, unused = {}, []
    for key, value in state.items():
        key = _rename(key)
        if not has_prefix and not key.startswith(("cls.", *HEAD_PREFIXES)):
            key = PREFIX + key  # bare BertModel checkpoint
        if key[len(PREFIX):] in BUFFERS:
            continue
        if key.startswith((PREFIX, "cls.")):
            out[key] = value
        else:
            unused.append(key)
    if not any(k.startswith(PREFIX + "embeddings.") for k in out):
        raise CheckpointError(f"{source}: no BERT tensors found (expected keys like "
                              "'bert.embeddings.word_embeddings.weight' or 'embeddings.word_embeddings.weight')")
    return out, unused


def _describe(model: BertForPretraining) -> str:
    a = model.arch
    return ", ".join(f"{k}={a[k]}" for k in ("vocab_size", "n_layer", "d_model", "n_head", "d_inner",
                                              "max_position", "type_vocab_size"))


def load_hf_state_dict(model: BertForPretraining, state_dict: Mapping[str, Tensor],
                       source: str = "state dict") -> BertImport:
    """Copy an HF BERT state dict into ``model`` (strict, see the module docstring)."""
    state, unused = _normalise(state_dict, source)
    ours = {k: v for k, v in model.state_dict().items() if k != TIED}
    tied, tied_bias = state.pop(TIED, None), state.pop(TIED_BIAS, None)
    if tied_bias is not None and MLM_BIAS not in state:  # old layout: the bias lived on the decoder only
        state[MLM_BIAS] = tied_bias
        tied_bias = None

    report = BertImport(unused=unused)
    for part in OPTIONAL_PARTS:
        if not any(k.startswith(part) for k in state) and not (part == "cls.predictions." and tied is not None):
            absent = [k for k in ours if k.startswith(part)]
            report.kept_init.extend(absent)
            ours = {k: v for k, v in ours.items() if k not in absent}

    problems = fit_problems(ours, state)
    if problems:
        raise CheckpointError(f"{source} does not fit this BERT ({_describe(model)}): " + " | ".join(problems)
                              + ". Set the model sizes to the checkpoint's config.json.")
    if tied is not None and not torch.equal(tied, state[PREFIX + "embeddings.word_embeddings.weight"]):
        raise CheckpointError(f"{source}: {TIED} differs from bert.embeddings.word_embeddings.weight, but BERT "
                              "ties them; this checkpoint is not a tied BERT MLM.")
    if tied_bias is not None and not torch.equal(tied_bias, state[MLM_BIAS]):
        raise CheckpointError(f"{source}: {TIED_BIAS} differs from {MLM_BIAS}, but BERT ties them.")

    copy_state(model, state)
    report.loaded = list(state)
    return report


def export_hf_state_dict(model: BertForPretraining) -> dict[str, Tensor]:
    """HF ``BertForPreTraining`` state dict (tied decoder weight and bias included); fresh contiguous tensors."""
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    state[TIED_BIAS] = state[MLM_BIAS].clone()
    return state


def load_hf_checkpoint(directory: str | Path, **overrides: Any) -> BertForPretraining:
    """Build our BERT from an HF folder (``config.json`` + weights); ``overrides`` change kwargs such as
    dropout."""
    folder = Path(directory)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{folder}: config.json not found (an HF BERT folder has config.json and weights)")
    model = BertForPretraining(**{**config_from_hf(json.loads(config_path.read_text())), **overrides})
    load_hf_state_dict(model, read_state_dict(folder), source=str(folder))
    return model


def save_hf_checkpoint(model: BertForPretraining, directory: str | Path, safe_serialization: bool = True) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (tied tensors left out, as HF does) or ``pytorch_model.bin``
    so that ``transformers.BertForPreTraining.from_pretrained(directory)`` loads it."""
    return write_hf_folder(directory, config_to_hf(model), export_hf_state_dict(model), (TIED, TIED_BIAS),
                           safe_serialization)
