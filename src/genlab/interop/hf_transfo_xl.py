"""Import/export Hugging Face 4.35 ``TransfoXLLMHeadModel`` checkpoints (the layout of the published WT103 model).

The HF layout names the same tensors as ours (fused q|k|v head-major, r_net, o_net, LayerNorms, adaptive
tables and projections [d_model, d_i]); only the names differ, so the mapping is a rename table. Tied keys
(output tables, tied projections, per-layer aliases of shared u/v) may be present or absent: present ones
must equal the tensor they alias. Cluster rows are taken in natural order (HF and TF), never permuted.

HF evaluates with unmasked zero initial memory and the PyTorch ``same_length`` mask; ``config_from_hf``
returns that profile (``init_mem="zeros"``, ``same_length_variant="pytorch"``). ``save_hf_checkpoint`` writes a
folder transformers 4.35 loads, and refuses a model whose evaluation HF cannot reproduce (our defaults
``init_mem="empty"`` and the TF ``same_length`` mask, relative attention other than ``rel``), naming the setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from genlab.errors import CheckpointError
from genlab.interop.hf_files import write_hf_folder
from genlab.models.transformer_xl import TransformerXL
from genlab.nn.positional import inverse_frequencies

INV_FREQ_KEY = "transformer.pos_emb.inv_freq"
# our config keys that change the outputs (Transformer-XL has one activation, ReLU, in HF and here)
ARCH_KEYS = ("vocab_size", "n_layer", "d_model", "n_head", "d_head", "d_inner", "d_embed", "ln_eps", "pre_lnorm",
             "untie_r", "cutoffs", "div_val", "tie_projs")


def architecture(model: TransformerXL) -> dict[str, Any]:
    """The constructor arguments of ``model`` that ``ARCH_KEYS`` names (our config keys)."""
    return {**model.arch, "vocab_size": model.vocab_size, "n_layer": model.n_layer, "d_model": model.d_model,
            "n_head": model.n_head, "d_head": model.d_head, "d_embed": model.d_embed}


def config_from_hf(config: Mapping[str, Any]) -> dict[str, Any]:
    """TransformerXL kwargs from an HF ``TransfoXLConfig`` dict (``config.json``), in the HF eval profile."""
    if config.get("attn_type", 0) != 0:
        raise CheckpointError(f"HF config attn_type={config['attn_type']}: only attn_type 0 can be imported")
    if config.get("sample_softmax", -1) > 0:
        raise CheckpointError("HF config sample_softmax > 0 is not supported; set it to -1")
    cutoffs = list(config.get("cutoffs", []))
    vocab = config.get("vocab_size", config.get("n_token"))
    if vocab is None:
        raise CheckpointError("HF config has no vocab_size (or n_token)")
    if "tie_projs" in config:  # what HF writes to config.json
        tie_projs = [bool(t) for t in config["tie_projs"]]
    else:
        tie_projs = [False] + [bool(config.get("proj_share_all_but_first", False))] * len(cutoffs)
    return dict(
        vocab_size=int(vocab),
        n_layer=config["n_layer"],
        d_model=config["d_model"],
        n_head=config["n_head"],
        d_head=config["d_head"],
        d_inner=config["d_inner"],
        d_embed=config.get("d_embed", config["d_model"]),
        dropout=config.get("dropout", 0.0),
        dropatt=config.get("dropatt", 0.0),
        mem_len=config.get("mem_len", 0),
        clamp_len=config.get("clamp_len", -1),
        same_length=config.get("same_length", False),
        same_length_variant="pytorch",
        init_mem="zeros",
        attn_type="rel",
        untie_r=config.get("untie_r", True),
        pre_lnorm=config.get("pre_lnorm", False),
        ln_eps=config.get("layer_norm_epsilon", 1e-5),
        tie_weight=config.get("tie_word_embeddings", True),
        cutoffs=cutoffs,
        div_val=config.get("div_val", 1),
        tie_projs=tie_projs,
        proj_same_dim=True,
        init_std=config.get("init_std", 0.02),
        proj_init_std=config.get("proj_init_std", 0.01),
    )


def hf_key_map(model: TransformerXL) -> dict[str, str]:
    """Every key of the HF state dict (aliases included) -> the name of our parameter it holds."""
    if model.attn_type != "rel":
        raise CheckpointError(f"HF TransfoXL has only relative attention; model.attn_type={model.attn_type!r}")
    t = "transformer."
    keys: dict[str, str] = {}
    for i in range(len(model.word_emb.tables)):
        keys[f"{t}word_emb.emb_layers.{i}.weight"] = f"word_emb.tables.{i}.weight"
    for k in model.word_emb.projs:
        keys[f"{t}word_emb.emb_projs.{k}"] = f"word_emb.projs.{k}"
    shared = model.u is not None
    for n in range(model.n_layer):
        hf, ours = f"{t}layers.{n}.", f"layers.{n}."
        keys[hf + "dec_attn.qkv_net.weight"] = ours + "attn.qkv.weight"
        keys[hf + "dec_attn.r_net.weight"] = ours + "attn.r_net.weight"
        keys[hf + "dec_attn.o_net.weight"] = ours + "attn.out.weight"
        keys[hf + "dec_attn.r_w_bias"] = "u" if shared else ours + "attn.u"
        keys[hf + "dec_attn.r_r_bias"] = "v" if shared else ours + "attn.v"
        for part in ("weight", "bias"):
            keys[hf + f"dec_attn.layer_norm.{part}"] = ours + f"attn.norm.{part}"
            keys[hf + f"pos_ff.CoreNet.0.{part}"] = ours + f"ff.fc1.{part}"
            keys[hf + f"pos_ff.CoreNet.3.{part}"] = ours + f"ff.fc2.{part}"
            keys[hf + f"pos_ff.layer_norm.{part}"] = ours + f"ff.norm.{part}"
    if shared:
        keys[f"{t}r_w_bias"], keys[f"{t}r_r_bias"] = "u", "v"
    crit = model.crit
    if crit.n_clusters:
        keys["crit.cluster_weight"], keys["crit.cluster_bias"] = "crit.cluster_weight", "crit.cluster_bias"
    for i in range(len(crit.weights)):
        keys[f"crit.out_layers.{i}.weight"] = f"crit.weights.{i}"
        keys[f"crit.out_layers.{i}.bias"] = f"crit.biases.{i}"
    for k in crit.projs:
        keys[f"crit.out_projs.{k}"] = f"crit.projs.{k}"
    return keys


def load_hf_state_dict(model: TransformerXL, state_dict: Mapping[str, Tensor], source: str = "state dict",
                       reverse_clusters: bool = False) -> None:
    """Copy an HF state dict into ``model`` in place.

    Fails on unknown keys, shape mismatches, missing non-tied parameters, and aliases that differ from the
    tensor they alias. Tied parameters keep sharing storage (they are one Parameter on our side).
    ``reverse_clusters=True`` is for weights trained with the official PyTorch code, whose head gives tail
    bin i the column -i: its cluster rows are reversed into natural order (never for HF/TF checkpoints).
    """
    if reverse_clusters:
        state_dict = {k: v.flip(0) if k in ("crit.cluster_weight", "crit.cluster_bias") else v
                      for k, v in state_dict.items()}
    keys = hf_key_map(model)
    params = dict(model.named_parameters(remove_duplicate=False))
    filled: dict[int, str] = {}
    unknown = [k for k in state_dict if k not in keys and k != INV_FREQ_KEY]
    if unknown:
        raise CheckpointError(f"{source}: unknown TransfoXL keys {unknown[:5]} (does the config match the file?)")
    if INV_FREQ_KEY in state_dict:
        expect = inverse_frequencies(model.d_model)
        if not torch.allclose(state_dict[INV_FREQ_KEY].float().cpu(), expect, atol=1e-6):
            raise CheckpointError(f"{source}: {INV_FREQ_KEY} differs from 1/10000^(2k/d) for d={model.d_model}")
    with torch.no_grad():
        for hf_key, value in state_dict.items():
            if hf_key == INV_FREQ_KEY:
                continue
            p = params[keys[hf_key]]
            if tuple(value.shape) != tuple(p.shape):
                raise CheckpointError(
                    f"{source}: {hf_key} has shape {tuple(value.shape)}, the model expects {tuple(p.shape)}")
            if id(p) in filled:
                if not torch.equal(p.detach().cpu(), value.to(p.dtype).cpu()):
                    raise CheckpointError(f"{source}: {hf_key} should be tied to {filled[id(p)]} but differs")
                continue
            p.copy_(value.to(p.dtype))
            filled[id(p)] = hf_key
    missing = sorted({name for name, p in params.items() if id(p) not in filled})
    if missing:
        hf_names = {v: k for k, v in keys.items()}
        raise CheckpointError(f"{source}: missing keys {[hf_names.get(m, m) for m in missing[:5]]}")


def export_hf_state_dict(model: TransformerXL) -> dict[str, Tensor]:
    """The full HF state dict (aliases and ``inv_freq`` included), loadable with ``strict=True``."""
    params = dict(model.named_parameters(remove_duplicate=False))
    out = {hf: params[ours].detach().clone() for hf, ours in hf_key_map(model).items()}
    out[INV_FREQ_KEY] = inverse_frequencies(model.d_model)
    return out


def load_hf_checkpoint(directory: str | Path, **overrides: Any) -> TransformerXL:
    """Build a model from an HF folder (``config.json`` + ``model.safetensors`` or ``pytorch_model.bin``)."""
    import json

    folder = Path(directory)
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{cfg_path} not found: point to a folder written by HF save_pretrained")
    kwargs = config_from_hf(json.loads(cfg_path.read_text()))
    kwargs.update(overrides)
    model = TransformerXL(**kwargs)
    st, pt = folder / "model.safetensors", folder / "pytorch_model.bin"
    if st.is_file():
        from safetensors.torch import load_file

        state, source = load_file(str(st)), str(st)
    elif pt.is_file():
        state, source = torch.load(pt, map_location="cpu", weights_only=True), str(pt)
    else:
        raise CheckpointError(f"{folder}: neither model.safetensors nor pytorch_model.bin is present")
    load_hf_state_dict(model, state, source)
    return model


def hf_differences(model: TransformerXL) -> list[str]:
    """Settings under which HF 4.35 would evaluate this model differently (empty when the export is faithful)."""
    diffs = []
    if model.attn_type != "rel":
        diffs.append(f"model.attn_type={model.attn_type!r} (HF has only the relative attention 'rel')")
    if model.init_mem != "zeros" and model.mem_len > 0:
        diffs.append(f"model.init_mem={model.init_mem!r} (HF starts from {model.mem_len} unmasked zero states; "
                     "init_mem=zeros reproduces it)")
    if model.same_length and model.same_length_variant != "pytorch":
        diffs.append(f"model.same_length_variant={model.same_length_variant!r} (HF masks one memory position "
                     "fewer: same_length_variant=pytorch reproduces it)")
    if model.ext_len:
        diffs.append(f"model.ext_len={model.ext_len} (HF has no extended context)")
    if not model.arch["proj_same_dim"]:
        diffs.append("model.proj_same_dim=false (HF always projects the first cluster)")
    return diffs


def config_to_hf(model: TransformerXL) -> dict[str, Any]:
    """An HF 4.35 ``TransfoXLConfig`` dict for our model (the keys 4.35's ``save_pretrained`` writes)."""
    a = model.arch
    return dict(
        model_type="transfo-xl", architectures=["TransfoXLLMHeadModel"], vocab_size=model.vocab_size,
        cutoffs=list(a["cutoffs"]), d_model=model.d_model, d_embed=model.d_embed, n_head=model.n_head,
        d_head=model.d_head, d_inner=a["d_inner"], div_val=a["div_val"], pre_lnorm=a["pre_lnorm"],
        n_layer=model.n_layer, mem_len=model.mem_len, clamp_len=model.clamp_len, same_length=model.same_length,
        attn_type=0, sample_softmax=-1, adaptive=True,
        dropout=a["dropout"], dropatt=a["dropatt"], untie_r=a["untie_r"], init="normal", init_range=0.01,
        proj_init_std=model.proj_init_std, init_std=model.init_std, layer_norm_epsilon=a["ln_eps"],
        tie_projs=list(a["tie_projs"]), tie_word_embeddings=a["tie_weight"], eos_token_id=0,
    )


def save_hf_checkpoint(model: TransformerXL, directory: str | Path, safe_serialization: bool = True,
                       allow_differences: bool = False) -> Path:
    """Write ``config.json`` and the weights so that transformers 4.35 ``TransfoXLLMHeadModel.from_pretrained``
    loads them. A model HF would evaluate differently is refused (``CheckpointError`` naming each setting) unless
    ``allow_differences``; the weights are the same either way."""
    diffs = hf_differences(model)
    if diffs and not allow_differences:
        raise CheckpointError("HF 4.35 would not reproduce this model's evaluation: " + "; ".join(diffs)
                              + ". Change the setting (it is an evaluation knob: the weights are the same), or "
                              "pass allow_differences=True to export anyway.")
    return write_hf_folder(directory, config_to_hf(model), export_hf_state_dict(model), _tied_keys(model),
                           safe_serialization)


def _tied_keys(model: TransformerXL) -> tuple[str, ...]:
    """What HF ties to another tensor, which 4.35's safetensors files leave out: the output tables and projections
    tied to the input ones, and each layer's alias of shared position biases."""
    a = model.arch
    tables = [f"crit.out_layers.{i}.weight" for i in range(len(model.crit.weights))] if a["tie_weight"] else []
    projs = [f"crit.out_projs.{k}" for k in model.crit.projs if a["tie_projs"][int(k)]]
    biases = [f"transformer.layers.{n}.dec_attn.{b}" for n in range(model.n_layer) for b in ("r_w_bias", "r_r_bias")
              if model.u is not None]
    return (*tables, *projs, *biases)
