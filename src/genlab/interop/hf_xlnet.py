"""Import/export Hugging Face ``XLNetModel`` / ``XLNetLMHeadModel`` checkpoints (the released XLNet weights).

Our parameter names equal HF ``XLNetLMHeadModel`` keys, so the mapping is the identity plus three rules:
an ``XLNetModel`` checkpoint has no ``transformer.`` prefix and no LM bias (the bias stays 0); ``lm_loss.weight``
is tied to ``transformer.word_embedding.weight`` and may be absent (safetensors drops it) or present (it must
equal the embedding); finetuning heads (``sequence_summary``, ``logits_proj``, QA heads) are reported as unused
(a finetuning task takes those that fit its own head: genlab.tasks.pretrained_heads).
Loading is strict: a missing tensor, an extra layer or a shape mismatch raises ``CheckpointError`` naming the
tensors. Activations map ``gelu_tanh`` <-> HF ``gelu_new`` and ``gelu`` <-> ``gelu`` (erf).
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
from genlab.models.xlnet import XLNetLMHeadModel, XLNetModel

PREFIX = "transformer."
TIED = "lm_loss.weight"
ARCH_KEYS = ("vocab_size", "n_layer", "d_model", "n_head", "d_head", "d_inner", "ff_activation", "untie_r",
             "layer_norm_eps")  # our config keys that change the outputs
HEAD_PREFIXES = ("sequence_summary.", "logits_proj.", "start_logits.", "end_logits.", "answer_class.", "qa_outputs.")
TO_HF_ACT = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
FROM_HF_ACT = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def config_from_hf(config: Mapping[str, Any]) -> dict[str, Any]:
    """``XLNetLMHeadModel`` kwargs from an HF ``XLNetConfig`` dict (``config.json``)."""
    act = config.get("ff_activation", "gelu")
    if act not in FROM_HF_ACT:
        raise CheckpointError(f"HF config ff_activation={act!r} is not supported; use one of {sorted(FROM_HF_ACT)}")
    d_model, n_head = config["d_model"], config["n_head"]
    return dict(
        vocab_size=config["vocab_size"], n_layer=config["n_layer"], d_model=d_model, n_head=n_head,
        d_head=config.get("d_head", d_model // n_head), d_inner=config["d_inner"], ff_activation=FROM_HF_ACT[act],
        untie_r=config.get("untie_r", True), dropout=config.get("dropout", 0.1), dropatt=config.get("dropout", 0.1),
        layer_norm_eps=config.get("layer_norm_eps", 1e-12), init_std=config.get("initializer_range", 0.02),
        attn_type=config.get("attn_type", "bi"), bi_data=config.get("bi_data", False),
        clamp_len=config.get("clamp_len", -1), same_length=config.get("same_length", False),
        mem_len=_mem_len_from_hf(config), reuse_len=config.get("reuse_len"), empty_row_policy="uniform",
    )


def _mem_len_from_hf(config: Mapping[str, Any]) -> int | None:
    """HF caches memory whenever ``use_mems`` is on (eval: ``use_mems_eval``, default true) and keeps every cached
    position when ``mem_len`` is null or 0. Ours: ``None`` = unbounded, 0 = no memory."""
    if not config.get("use_mems_eval", True) and not config.get("use_mems_train", False):
        return 0
    return config.get("mem_len") or None


def config_to_hf(model: XLNetLMHeadModel | XLNetModel) -> dict[str, Any]:
    """An HF ``XLNetConfig`` dict for our model (HF needs d_head = d_model / n_head)."""
    backbone = _backbone(model)
    a = backbone.arch
    if a["d_head"] * a["n_head"] != a["d_model"]:
        raise CheckpointError(f"HF XLNet needs d_head = d_model / n_head; this model has d_head={a['d_head']}, "
                              f"d_model={a['d_model']}, n_head={a['n_head']}")
    return dict(
        model_type="xlnet", architectures=["XLNetLMHeadModel"], vocab_size=a["vocab_size"], d_model=a["d_model"],
        n_layer=a["n_layer"], n_head=a["n_head"], d_head=a["d_head"], d_inner=a["d_inner"],
        ff_activation=TO_HF_ACT[a["ff_activation"]], untie_r=True, attn_type=backbone.attn_type,
        initializer_range=a["init_std"], layer_norm_eps=a["layer_norm_eps"], dropout=a["dropout"],
        mem_len=backbone.mem_len or None, reuse_len=backbone.reuse_len, bi_data=backbone.bi_data,
        use_mems_eval=backbone.keeps_memory, use_mems_train=backbone.keeps_memory,
        clamp_len=backbone.clamp_len, same_length=backbone.same_length, tie_word_embeddings=True,
    )


def _backbone(model: XLNetLMHeadModel | XLNetModel) -> XLNetModel:
    return model.transformer if isinstance(model, XLNetLMHeadModel) else model


def _normalise(state: Mapping[str, Tensor], source: str) -> tuple[dict[str, Tensor], list[str]]:
    """HF keys -> LM-head-model keys; returns (tensors, unused head keys)."""
    has_prefix = any(k.startswith(PREFIX) for k in state)
    out, unused = {}, []
    for key, value in state.items():
        if key.startswith(HEAD_PREFIXES):
            unused.append(key)
        elif key.startswith(PREFIX) or key.startswith("lm_loss."):
            out[key] = value
        elif not has_prefix:  # bare XLNetModel checkpoint
            out[PREFIX + key] = value
        else:
            unused.append(key)
    if not out:
        raise CheckpointError(f"{source}: no XLNet tensors found (expected keys like "
                              "'transformer.word_embedding.weight')")
    return out, unused


def load_hf_state_dict(model: XLNetLMHeadModel | XLNetModel, state_dict: Mapping[str, Tensor],
                       source: str = "state dict") -> HFImport:
    """Copy an HF state dict into ``model`` (strict); the report lists the unused finetuning-head keys."""
    state, unused = _normalise(state_dict, source)
    report = HFImport(unused=unused)
    lm = isinstance(model, XLNetLMHeadModel)
    ours = model.state_dict() if lm else {PREFIX + k: v for k, v in model.state_dict().items()}
    tied = state.pop(TIED, None)
    ours = {k: v for k, v in ours.items() if k != TIED}
    if not lm:
        state.pop("lm_loss.bias", None)
    elif "lm_loss.bias" not in state:  # XLNetModel checkpoint: keep our zero bias
        state["lm_loss.bias"] = torch.zeros_like(ours["lm_loss.bias"])
        report.kept_init.append("lm_loss.bias")

    problems = fit_problems(ours, state)
    if problems:
        raise CheckpointError(f"{source} does not fit this XLNet ({_describe(_backbone(model))}): "
                              + " | ".join(problems) + ". Set the model sizes to the checkpoint's config.json.")
    emb = state[PREFIX + "word_embedding.weight"]
    if tied is not None and not torch.equal(tied, emb):
        raise CheckpointError(f"{source}: lm_loss.weight differs from transformer.word_embedding.weight, "
                              "but XLNet ties them; this checkpoint is not a tied XLNet LM")
    if not _backbone(model).arch["untie_r"]:
        _check_shared_biases(state, _backbone(model).n_layer, source)

    target = model if lm else _backbone(model)
    if not lm:
        state = {k[len(PREFIX):]: v for k, v in state.items()}
    copy_state(target, state)
    report.loaded = [k for k in state if k not in report.kept_init]
    return report


def _check_shared_biases(state: Mapping[str, Tensor], n_layer: int, source: str) -> None:
    for name in ("r_w_bias", "r_r_bias", "r_s_bias"):
        first = state[f"{PREFIX}layer.0.rel_attn.{name}"]
        for layer in range(1, n_layer):
            if not torch.equal(state[f"{PREFIX}layer.{layer}.rel_attn.{name}"], first):
                raise CheckpointError(f"{source}: layer.{layer}.rel_attn.{name} differs from layer 0, but the "
                                      "model shares it across layers; set model.untie_r=true")


def _describe(backbone: XLNetModel) -> str:
    a = backbone.arch
    return (f"vocab_size={a['vocab_size']}, n_layer={a['n_layer']}, d_model={a['d_model']}, "
            f"n_head={a['n_head']}, d_head={a['d_head']}, d_inner={a['d_inner']}")


def export_hf_state_dict(model: XLNetLMHeadModel | XLNetModel) -> dict[str, Tensor]:
    """HF ``XLNetLMHeadModel`` (or ``XLNetModel`` for a backbone) state dict; fresh contiguous tensors."""
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


def load_hf_checkpoint(directory: str | Path, **overrides: Any) -> XLNetLMHeadModel:
    """Build our LM head model from an HF folder (``config.json`` + weights). The config's memory semantics carry
    over (``mem_len`` null = unbounded memory, ``reuse_len``, ``use_mems_*``), and a query row with no visible key
    attends uniformly, as in HF. ``overrides`` are any :class:`XLNetLMHeadModel` arguments (``dropout``,
    ``mem_len``, ``reuse_len``, ``empty_row_policy`` ...)."""
    folder = Path(directory)
    config_path = folder / "config.json"
    if not config_path.exists():
        raise CheckpointError(f"{folder}: config.json not found (an HF XLNet folder has config.json and weights)")
    kwargs = {**config_from_hf(json.loads(config_path.read_text())), **overrides}
    model = XLNetLMHeadModel(**kwargs)
    load_hf_state_dict(model, read_state_dict(folder), source=str(folder))
    return model


def save_hf_checkpoint(model: XLNetLMHeadModel, directory: str | Path, safe_serialization: bool = True) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (tied lm_loss.weight left out, as HF does) or
    ``pytorch_model.bin`` so that ``transformers.XLNetLMHeadModel.from_pretrained(directory)`` loads it."""
    return write_hf_folder(directory, config_to_hf(model), export_hf_state_dict(model), (TIED,),
                           safe_serialization)

