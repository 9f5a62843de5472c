"""Import/export Hugging Face OpenAI GPT checkpoints (``OpenAIGPTModel``, ``OpenAIGPTLMHeadModel``,
``OpenAIGPTDoubleHeadsModel``) into ``genlab.models.gpt``.

Parameter mapping (ours <- HF, per block i; HF's ``Conv1D`` stores weights [in, out], our ``nn.Linear`` [out, in],
so every block matrix is transposed; q | k | v stay the column blocks of the fused projection):

| ours                                       | Hugging Face                                     |
|--------------------------------------------|--------------------------------------------------|
| ``transformer.tokens_embed.weight``        | same (``OpenAIGPTModel``: no ``transformer.``)    |
| ``transformer.positions_embed.weight``     | same                                             |
| ``transformer.h.{i}.attn.qkv.{weight,bias}``  | ``transformer.h.{i}.attn.c_attn.{weight ᵀ,bias}`` |
| ``transformer.h.{i}.attn.proj.{weight,bias}`` | ``transformer.h.{i}.attn.c_proj.{weight ᵀ,bias}`` |
| ``transformer.h.{i}.mlp.c_fc.{weight,bias}``  | same names, weight ᵀ                              |
| ``transformer.h.{i}.mlp.c_proj.{weight,bias}``| same names, weight ᵀ                              |
| ``transformer.h.{i}.ln_{1,2}.{weight,bias}``  | same                                             |
| (tied: ``transformer.tokens_embed.weight``)   | ``lm_head.weight`` (tied, no bias)                |
| ``GPTMultipleChoiceHead.linear.proj.{weight,bias}`` | ``multiple_choice_head.summary.{weight,bias}``  |

Rules: the tied ``lm_head.weight`` may be absent or present (then it must equal the token embedding); HF's
DoubleHeads safetensors keep ``lm_head.weight`` and drop the embedding, which is then read from it. HF's causal-mask
buffers (``h.{i}.attn.bias``, old checkpoints) and ``position_ids`` are skipped. Multiple-choice head tensors load
into a ``GPTMultipleChoiceHead`` when one is given, else they are reported as unused. HF's vocabulary counts the
special tokens of a resized model: ``n_special`` says how many of its last rows are ours (``<s> $ <e>``).
HF ``afn="gelu"`` is the tanh GELU (our ``gelu_tanh``); HF's MLP width is always 4·n_embd. Loading is strict:
missing tensors, extra layers or shape mismatches raise ``CheckpointError`` naming them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from genlab.errors import CheckpointError
from genlab.interop.hf_files import (
    copy_state,
    fit_problems,
    read_state_dict,
    write_hf_folder,
)
from genlab.models.gpt import GPTLMHeadModel, GPTMultipleChoiceHead

PREFIX = "transformer."
TIED = "lm_head.weight"
TOKENS = PREFIX + "tokens_embed.weight"
MC_PREFIX = "multiple_choice_head.summary."
FROM_HF_ACT = {"gelu": "gelu_tanh", "gelu_new": "gelu_tanh", "relu": "relu", "silu": "silu", "swish": "silu"}
TO_HF_ACT = {"gelu_tanh": "gelu", "relu": "relu", "silu": "silu"}
# HF name piece <-> ours, and whether the weight is a Conv1D (transposed) matrix
RENAMES = ((".attn.c_attn.", ".attn.qkv."), (".attn.c_proj.", ".attn.proj."))
CONV1D = re.compile(r"\.h\.\d+\.(attn\.(qkv|proj)|mlp\.(c_fc|c_proj))\.weight$")
# our config keys that change the outputs besides the shapes (n_positions: a longer checkpoint table is cut)
ARCH_KEYS = ("n_embd", "n_layer", "n_head", "n_inner", "afn", "layer_norm_eps")
SKIP = re.compile(r"(^|\.)h\.\d+\.attn\.(bias|masked_bias)$|(^|\.)position_ids$")

__all__ = ["GPTImport", "config_from_hf", "config_to_hf", "export_hf_state_dict", "genlab_state_from_hf",
           "hf_extra_tensors", "load_hf_checkpoint", "load_hf_state_dict", "read_state_dict", "save_hf_checkpoint"]


@dataclass
class GPTImport:
    """What an import did besides copying: checkpoint keys it ignored."""

    unused: list[str] = field(default_factory=list)


def config_from_hf(config: Mapping[str, Any], n_special: int = 0) -> dict[str, Any]:
    """``GPTLMHeadModel`` kwargs from an HF ``OpenAIGPTConfig`` dict; the last ``n_special`` vocabulary rows
    become our special rows."""
    model_type = config.get("model_type", "openai-gpt")
    if model_type != "openai-gpt":
        raise CheckpointError(f"config.json has model_type={model_type!r}; this importer reads OpenAI GPT "
                              "(model_type 'openai-gpt') checkpoints.")
    act = config.get("afn", "gelu")
    if act not in FROM_HF_ACT:
        raise CheckpointError(f"HF config afn={act!r} is not supported; use one of {sorted(FROM_HF_ACT)}.")
    if not 0 <= n_special < config["vocab_size"]:
        raise CheckpointError(f"n_special={n_special} does not fit the checkpoint's vocab_size={config['vocab_size']}")
    n_embd = config.get("n_embd", 768)
    return dict(
        vocab_size=config["vocab_size"] - n_special, n_special=n_special, n_positions=config.get("n_positions", 512),
        n_embd=n_embd, n_layer=config.get("n_layer", 12), n_head=config.get("n_head", 12), n_inner=4 * n_embd,
        afn=FROM_HF_ACT[act], resid_pdrop=config.get("resid_pdrop", 0.1), embd_pdrop=config.get("embd_pdrop", 0.1),
        attn_pdrop=config.get("attn_pdrop", 0.1), layer_norm_eps=config.get("layer_norm_epsilon", 1e-5),
        init_std=config.get("initializer_range", 0.02),
    )


def config_to_hf(model: GPTLMHeadModel, mc_head: GPTMultipleChoiceHead | None = None) -> dict[str, Any]:
    """An HF ``OpenAIGPTConfig`` dict for our model (DoubleHeads layout when ``mc_head`` is given)."""
    a = model.arch
    if a["n_inner"] != 4 * a["n_embd"]:
        raise CheckpointError(f"HF OpenAI GPT needs n_inner = 4 * n_embd; this model has n_inner={a['n_inner']}, "
                              f"n_embd={a['n_embd']}.")
    if a["afn"] not in TO_HF_ACT:
        raise CheckpointError(f"model.afn={a['afn']!r} has no HF OpenAI GPT equivalent; use one of "
                              f"{sorted(TO_HF_ACT)}.")
    return dict(
        model_type="openai-gpt",
        architectures=["OpenAIGPTDoubleHeadsModel" if mc_head is not None else "OpenAIGPTLMHeadModel"],
        vocab_size=a["vocab_size"] + a["n_special"], n_positions=a["n_positions"], n_embd=a["n_embd"],
        n_layer=a["n_layer"], n_head=a["n_head"], afn=TO_HF_ACT[a["afn"]], resid_pdrop=a["resid_pdrop"],
        embd_pdrop=a["embd_pdrop"], attn_pdrop=a["attn_pdrop"], layer_norm_epsilon=a["layer_norm_eps"],
        initializer_range=a["init_std"], summary_type="cls_index", summary_use_proj=True, summary_activation=None,
        summary_proj_to_labels=True,
        summary_first_dropout=mc_head.clf_pdrop if mc_head is not None else 0.1, tie_word_embeddings=True,
    )


def _to_ours(key: str) -> str:
    for theirs, ours in RENAMES:
        key = key.replace(theirs, ours)
    return key


def _to_hf(key: str) -> str:
    for theirs, ours in RENAMES:
        key = key.replace(ours, theirs)
    return key


def _normalise(state: Mapping[str, Tensor], source: str) -> tuple[dict[str, Tensor], dict[str, Tensor], list[str]]:
    """HF keys -> (our model's tensors, multiple-choice head tensors, unused keys)."""
    has_prefix = any(k.startswith(PREFIX) for k in state)
    model, head, unused = {}, {}, []
    for key, value in state.items():
        if SKIP.search(key):
            continue
        if key.startswith(MC_PREFIX):
            head["linear.proj." + key[len(MC_PREFIX):]] = value
            continue
        if not has_prefix and key.startswith(("tokens_embed.", "positions_embed.", "h.")):
            key = PREFIX + key  # bare OpenAIGPTModel checkpoint
        if not key.startswith(PREFIX) and key != TIED:
            unused.append(key)
            continue
        key = _to_ours(key)
        model[key] = value.t() if CONV1D.search(key) else value
    if not any(k.startswith(PREFIX) for k in model):
        raise CheckpointError(f"{source}: no OpenAI GPT tensors found (expected keys like "
                              "'transformer.tokens_embed.weight' or 'tokens_embed.weight')")
    return model, head, unused


def _resolve_tied(state: dict[str, Tensor], source: str) -> dict[str, Tensor]:
    tied = state.pop(TIED, None)
    if TOKENS not in state and tied is not None:  # DoubleHeads safetensors store the tied matrix as lm_head
        state[TOKENS] = tied
    elif tied is not None and TOKENS in state and not torch.equal(tied, state[TOKENS]):
        raise CheckpointError(f"{source}: {TIED} differs from {TOKENS}, but GPT ties them.")
    return state


def genlab_state_from_hf(state_dict: Mapping[str, Tensor], source: str = "state dict") -> dict[str, Tensor]:
    """The tensors of ``GPTLMHeadModel`` under our names (no model needed, e.g. for a partial transfer with
    ``genlab.models.gpt.transfer_pretrained``); head tensors are dropped."""
    return _resolve_tied(_normalise(state_dict, source)[0], source)


def hf_extra_tensors(state_dict: Mapping[str, Tensor], source: str = "state dict") -> dict[str, Tensor]:
    """The tensors of an HF checkpoint outside ``GPTLMHeadModel`` (``multiple_choice_head.*`` of
    ``OpenAIGPTDoubleHeadsModel``, other task heads), under the names the file gives them."""
    _, head, unused = _normalise(state_dict, source)
    return {**{MC_PREFIX + k[len("linear.proj."):]: v for k, v in head.items()}, **{k: state_dict[k] for k in unused}}


def load_hf_state_dict(model: GPTLMHeadModel, state_dict: Mapping[str, Tensor], source: str = "state dict",
                       mc_head: GPTMultipleChoiceHead | None = None) -> GPTImport:
    """Copy an HF OpenAI GPT state dict into ``model`` (and its multiple-choice head into ``mc_head``)."""
    state, head, unused = _normalise(state_dict, source)
    state = _resolve_tied(state, source)
    problems = fit_problems(model.state_dict(), state)
    if problems:
        a = model.arch
        sizes = ", ".join(f"{k}={a[k]}" for k in ("vocab_size", "n_special", "n_positions", "n_embd", "n_layer"))
        raise CheckpointError(f"{source} does not fit this GPT ({sizes}): " + " | ".join(problems)
                              + ". Set the model sizes to the checkpoint's config.json.")
    copy_state(model, state)
    report = GPTImport(unused=unused)
    if mc_head is None:
        report.unused += [MC_PREFIX + k[len("linear.proj."):] for k in head]
    elif head:
        problems = fit_problems(mc_head.state_dict(), head)
        if problems:
            raise CheckpointError(f"{source}: multiple_choice_head does not fit: " + " | ".join(problems))
        copy_state(mc_head, head)
    return report


def export_hf_state_dict(model: GPTLMHeadModel, mc_head: GPTMultipleChoiceHead | None = None) -> dict[str, Tensor]:
    """HF ``OpenAIGPTLMHeadModel`` (or DoubleHeads) state dict, tied ``lm_head.weight`` included; fresh tensors."""
    state = {}
    for key, value in model.state_dict().items():
        value = value.detach()
        state[_to_hf(key)] = (value.t() if CONV1D.search(key) else value).clone().contiguous()
    state[TIED] = state[TOKENS].clone()
    if mc_head is not None:
        for key, value in mc_head.state_dict().items():
            state[MC_PREFIX + key[len("linear.proj."):]] = value.detach().clone().contiguous()
    return state


def load_hf_checkpoint(directory: str | Path, n_special: int = 0, mc_head: GPTMultipleChoiceHead | None = None,
                       **overrides: Any) -> GPTLMHeadModel:
    """Build our GPT from an HF folder (``config.json`` + weights); ``overrides`` change kwargs such as dropout."""
    folder = Path(directory)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{folder}: config.json not found (an HF OpenAI GPT folder has config.json and "
                              "weights)")
    model = GPTLMHeadModel(**{**config_from_hf(json.loads(config_path.read_text()), n_special), **overrides})
    load_hf_state_dict(model, read_state_dict(folder), source=str(folder), mc_head=mc_head)
    return model


def save_hf_checkpoint(model: GPTLMHeadModel, directory: str | Path, mc_head: GPTMultipleChoiceHead | None = None,
                       safe_serialization: bool = True) -> Path:
    """Write ``config.json`` + weights so that ``OpenAIGPTLMHeadModel.from_pretrained(directory)`` (or
    ``OpenAIGPTDoubleHeadsModel`` when ``mc_head`` is given) loads it."""
    return write_hf_folder(directory, config_to_hf(model, mc_head), export_hf_state_dict(model, mc_head), (TIED,),
                           safe_serialization)
