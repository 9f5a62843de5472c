"""Import/export Hugging Face Funnel-Transformer checkpoints (``FunnelModel`` / ``FunnelBaseModel`` layout).

| ours | HF |
|---|---|
| ``FunnelModel(use_decoder=False)`` | ``FunnelBaseModel`` (keys without prefix) |
| ``FunnelModel(use_decoder=True)`` | ``FunnelModel`` |
| ``FunnelForMaskedLM(mlm_transform=False)`` | ``FunnelForMaskedLM`` (``funnel.`` + ``lm_head``) |
| ``FunnelElectra``: ``funnel`` + ``discriminator_predictions`` | ``FunnelForPreTraining`` (no generator in HF) |
| ``FunnelBackbone.summary_proj`` + ``heads.ClassificationHead.proj`` | ``classifier.linear_hidden`` / ``.linear_out`` |

Key mapping inside the body (everything else is the identity):

* ``encoder.layer.<k>.`` <-> ``encoder.blocks.<b>.<l>.`` with ``k = sum(block_sizes[:b]) + l`` (ours numbers the
  distinct layers flat over blocks, as the TF ``layer_k``, so layer-wise decay sees each layer's depth);
* ``ffn.layer_1`` / ``ffn.layer_2`` <-> ``ffn.linear_1`` / ``ffn.linear_2`` (we reuse the XLNet FFN module);
* ``decoder.layers.<i>.`` and ``embeddings.{word_embeddings,layer_norm}`` are the same names;
* ``lm_head.weight`` (HF MLM) is tied to the word embedding: absent (safetensors) or equal to it;
* ELECTRA polarity: our discriminator scores P(original), HF's P(replaced); with ``BCE(l, y) = BCE(-l, 1-y)`` the
  port negates ``dense_prediction.{weight,bias}`` both ways, so HF's logits are exactly minus ours.

HF has no ``top_attn`` pooling, ``absolute`` attention, input projection (``d_embed != d_model``), MLM transform
or CLS mask decoupled from ``separate_cls``: such models do not export (CheckpointError). HF pools the key mask
"all real" (``mask_pool=all_real``); an imported model keeps our configured ``mask_pool`` (default: the original
``any_real``, which the published weights were trained with), so outputs match HF exactly only under
``all_real`` or when no pooling window straddles the padding boundary (pooling as in the authors' code, see
docs/systems/funnel.md). Loading is strict.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from genlab.errors import CheckpointError
from genlab.interop.hf_files import HFImport, copy_state, fit_problems, read_state_dict, write_hf_folder
from genlab.models.funnel import FunnelModel
from genlab.models.funnel_pretraining import FunnelElectra, FunnelForMaskedLM

TO_HF_ACT = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
FROM_HF_ACT = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
TO_HF_ATTN = {"rel_shift": "relative_shift", "gather": "relative_shift", "factorized": "factorized"}
FROM_HF_ATTN = {"relative_shift": "rel_shift", "factorized": "factorized"}
ENCODER_ONLY = ("FunnelBaseModel", "FunnelForSequenceClassification", "FunnelForMultipleChoice")
TIED = "lm_head.weight"
ARCH_KEYS = ("vocab_size", "block_sizes", "block_repeats", "d_model", "n_head", "d_head", "d_inner", "activation",
             "layer_norm_eps", "pooling_type", "pool_q_only", "separate_cls", "truncate_seq")  # change the outputs
FLIP = ("discriminator_predictions.dense_prediction.weight", "discriminator_predictions.dense_prediction.bias")
FFN_NAMES = ((".ffn.layer_1.", ".ffn.linear_1."), (".ffn.layer_2.", ".ffn.linear_2."))
Model = FunnelModel | FunnelForMaskedLM | FunnelElectra

__all__ = [
    "FunnelImport",
    "config_from_hf",
    "config_to_hf",
    "export_hf_state_dict",
    "from_hf_key",
    "load_hf_checkpoint",
    "load_hf_sequence_classification",
    "load_hf_state_dict",
    "save_hf_checkpoint",
    "to_hf_key",
]


FunnelImport = HFImport  # the name this module exported before the report was shared


def config_from_hf(config: Mapping[str, Any]) -> dict[str, Any]:
    """``FunnelModel`` kwargs from an HF ``FunnelConfig`` dict; ``use_decoder`` from ``architectures``."""
    if config.get("model_type", "funnel") != "funnel":
        raise CheckpointError(f"config.json has model_type={config.get('model_type')!r}; this importer reads Funnel")
    act, attn = config.get("hidden_act", "gelu_new"), config.get("attention_type", "relative_shift")
    if act not in FROM_HF_ACT:
        raise CheckpointError(f"HF config hidden_act={act!r} is not supported; use one of {sorted(FROM_HF_ACT)}")
    if attn not in FROM_HF_ATTN:
        raise CheckpointError(f"HF config attention_type={attn!r} is not supported; use one of {sorted(FROM_HF_ATTN)}")
    blocks = tuple(config.get("block_sizes", (4, 4, 4)))
    arch = (config.get("architectures") or ["FunnelModel"])[0]
    return dict(
        vocab_size=config.get("vocab_size", 30522), block_sizes=blocks,
        block_repeats=tuple(config.get("block_repeats") or (1,) * len(blocks)), d_model=config.get("d_model", 768),
        n_head=config.get("n_head", 12), d_head=config.get("d_head", 64), d_inner=config.get("d_inner", 3072),
        use_decoder=arch not in ENCODER_ONLY, num_decoder_layers=config.get("num_decoder_layers", 2),
        pooling_type=config.get("pooling_type", "mean"), pool_q_only=config.get("pool_q_only", True),
        separate_cls=config.get("separate_cls", True), truncate_seq=config.get("truncate_seq", True),
        attn_type=FROM_HF_ATTN[attn], dropout=config.get("hidden_dropout", 0.1),
        dropatt=config.get("attention_dropout", 0.1), dropact=config.get("activation_dropout", 0.0),
        activation=FROM_HF_ACT[act], layer_norm_eps=config.get("layer_norm_eps", 1e-9),
    )


def _body(model: Model) -> FunnelModel:
    return model if isinstance(model, FunnelModel) else model.funnel


def _architecture(model: Model) -> str:
    if isinstance(model, FunnelElectra):
        return "FunnelForPreTraining"
    if isinstance(model, FunnelForMaskedLM):
        return "FunnelForMaskedLM"
    return "FunnelModel" if model.decoder is not None else "FunnelBaseModel"


def config_to_hf(model: Model) -> dict[str, Any]:
    """An HF ``FunnelConfig`` dict for our model; CheckpointError for what HF cannot express."""
    a = _body(model).arch
    problems = []
    if a["pooling_type"] not in ("mean", "max"):
        problems.append(f"pooling_type={a['pooling_type']!r} (HF: mean, max)")
    if a["attn_type"] not in TO_HF_ATTN:
        problems.append(f"attn_type={a['attn_type']!r} (HF: relative attention only)")
    if a["d_embed"] != a["d_model"]:
        problems.append(f"d_embed={a['d_embed']} != d_model={a['d_model']} (HF has no input projection)")
    if a["cls_mask"] != "auto":
        problems.append(f"cls_mask={a['cls_mask']!r} (HF builds the CLS mask exactly when separate_cls)")
    if a["activation"] not in TO_HF_ACT:
        problems.append(f"activation={a['activation']!r}")
    if isinstance(model, FunnelForMaskedLM) and model.arch["mlm_transform"]:
        problems.append("mlm_transform=true (HF FunnelForMaskedLM has no dense/LayerNorm transform; export the body "
                        "with genlab.interop.hf_funnel.save_hf_checkpoint(model.funnel, ...))")
    if problems:
        raise CheckpointError("this Funnel cannot be written as a Hugging Face checkpoint: " + "; ".join(problems))
    return dict(
        model_type="funnel", architectures=[_architecture(model)], vocab_size=a["vocab_size"],
        block_sizes=list(a["block_sizes"]), block_repeats=list(a["block_repeats"]),
        num_decoder_layers=a["num_decoder_layers"], d_model=a["d_model"], n_head=a["n_head"], d_head=a["d_head"],
        d_inner=a["d_inner"], hidden_act=TO_HF_ACT[a["activation"]], hidden_dropout=a["dropout"],
        attention_dropout=a["dropatt"], activation_dropout=a["dropact"], layer_norm_eps=a["layer_norm_eps"],
        pooling_type=a["pooling_type"], attention_type=TO_HF_ATTN[a["attn_type"]], separate_cls=a["separate_cls"],
        truncate_seq=a["truncate_seq"], pool_q_only=a["pool_q_only"], initializer_range=a["init_std"],
        tie_word_embeddings=True,
    )


def to_hf_key(key: str, block_sizes: tuple[int, ...]) -> str:
    """Our body key -> HF body key (see the module docstring)."""
    m = re.match(r"^(.*?)encoder\.layer\.(\d+)\.(.*)$", key)
    if m:
        k, b = int(m.group(2)), 0
        while k >= block_sizes[b]:
            k -= block_sizes[b]
            b += 1
        key = f"{m.group(1)}encoder.blocks.{b}.{k}.{m.group(3)}"
    for ours, theirs in FFN_NAMES:
        key = key.replace(ours, theirs)
    return key


def from_hf_key(key: str, block_sizes: tuple[int, ...]) -> str:
    """HF body key -> our body key."""
    m = re.match(r"^(.*?)encoder\.blocks\.(\d+)\.(\d+)\.(.*)$", key)
    if m:
        b, l = int(m.group(2)), int(m.group(3))
        key = f"{m.group(1)}encoder.layer.{sum(block_sizes[:b]) + l}.{m.group(4)}"
    for ours, theirs in FFN_NAMES:
        key = key.replace(theirs, ours)
    return key


def _ours_by_hf_name(model: Model) -> dict[str, Tensor]:
    """Our state dict under HF names, for the target architecture (shared generator tensors left out)."""
    blocks = _body(model).arch["block_sizes"]
    state = {k: v for k, v in model.state_dict().items()}
    if isinstance(model, FunnelElectra):
        state = {k: v for k, v in state.items() if not k.startswith(("generator.", "generator_lm_head."))}
    return {to_hf_key(k, blocks): v for k, v in state.items()}


def export_hf_state_dict(model: Model) -> dict[str, Tensor]:
    """HF state dict (``config_to_hf(model)['architectures'][0]``); fresh contiguous tensors, the ELECTRA head
    negated to HF's polarity, the tied MLM weight included."""
    config_to_hf(model)  # refuse what HF cannot express
    state = {k: v.detach().clone().contiguous() for k, v in _ours_by_hf_name(model).items()}
    for key in FLIP:
        if key in state:
            state[key] = -state[key]
    if isinstance(model, FunnelForMaskedLM):
        state[TIED] = state["funnel.embeddings.word_embeddings.weight"].clone()
    return state


def _normalise(model: Model, state_dict: Mapping[str, Tensor], source: str
               ) -> tuple[dict[str, Tensor], list[str], dict[str, str]]:
    """HF tensors under our names, with or without the ``funnel.`` prefix our model expects; unused keys; our
    name -> the file's."""
    wants_prefix = not isinstance(model, FunnelModel)
    has_prefix = any(k.startswith("funnel.") for k in state_dict)
    blocks = _body(model).arch["block_sizes"]
    out, unused, names = {}, [], {}
    for key, value in state_dict.items():
        body = key[len("funnel."):] if has_prefix and key.startswith("funnel.") else None if has_prefix else key
        if body is None:  # a head of an HF task model
            if wants_prefix and key.startswith(("lm_head.", "discriminator_predictions.")):
                out[key] = value
            else:
                unused.append(key)
            continue
        if body.startswith("decoder.") and _body(model).decoder is None:
            unused.append(key)
            continue
        ours = ("funnel." if wants_prefix else "") + from_hf_key(body, blocks)
        out[ours], names[ours] = value, key
    if not any("embeddings.word_embeddings" in k for k in out):
        raise CheckpointError(f"{source}: no Funnel tensors found (expected keys like "
                              "'embeddings.word_embeddings.weight' or 'funnel.embeddings.word_embeddings.weight')")
    return out, unused, names


def load_hf_state_dict(model: Model, state_dict: Mapping[str, Tensor], source: str = "state dict") -> FunnelImport:
    """Copy an HF Funnel state dict into ``model`` (strict, see the module docstring)."""
    state, unused, names = _normalise(model, state_dict, source)
    report = FunnelImport(unused=unused, file_names=names)
    mask_pool = _body(model).arch["mask_pool"]
    if mask_pool != "all_real":
        report.notes.append(f"HF pools the padding mask 'all_real'; this model has model.mask_pool={mask_pool} (the "
                            "original code's), so outputs on padded batches differ from HF's where a pooling window "
                            "straddles the padding; model.mask_pool=all_real reproduces HF")
    ours = dict(model.state_dict())
    if isinstance(model, FunnelElectra):  # HF has no generator: it keeps its initialisation
        report.kept_init = [k for k in ours if k.startswith("generator_lm_head.")
                            or (k.startswith("generator.") and not k.startswith("generator.embeddings."))]
        ours = {k: v for k, v in ours.items() if not k.startswith(("generator.", "generator_lm_head."))}
        for key in FLIP:
            if key in state:
                state[key] = -state[key]
    tied = state.pop(TIED, None)
    if isinstance(model, FunnelForMaskedLM) and model.arch["mlm_transform"]:
        report.unused += [k for k in state if k.startswith("lm_head.")] + ([TIED] if tied is not None else [])
        state = {k: v for k, v in state.items() if not k.startswith("lm_head.")}
        report.kept_init += [k for k in ours if k.startswith("lm_head.")]
        ours = {k: v for k, v in ours.items() if not k.startswith("lm_head.")}
    problems = fit_problems(ours, state)
    if problems:
        raise CheckpointError(f"{source} does not fit this Funnel ({_describe(_body(model))}): "
                              + " | ".join(problems) + ". Set the model sizes to the checkpoint's config.json.")
    emb = state.get("funnel.embeddings.word_embeddings.weight")
    if tied is not None and emb is not None and not torch.equal(tied, emb):
        raise CheckpointError(f"{source}: lm_head.weight differs from the word embedding, but the Funnel MLM ties "
                              "them; this checkpoint is not a tied Funnel MLM")
    copy_state(model, state)
    report.loaded = list(state)
    return report


def load_hf_sequence_classification(backbone: nn.Module, head: nn.Module, state_dict: Mapping[str, Tensor],
                                     source: str = "state dict") -> FunnelImport:
    """HF ``FunnelForSequenceClassification`` / ``FunnelForMultipleChoice`` into a ``FunnelBackbone`` and a
    ``heads.ClassificationHead`` / ``MultipleChoiceHead``: ``classifier.linear_hidden`` -> ``summary_proj``,
    ``classifier.linear_out`` -> ``head.proj``, ``funnel.*`` -> the body."""
    report = load_hf_state_dict(backbone.funnel, {k: v for k, v in state_dict.items() if k.startswith("funnel.")},
                                source)
    for module, theirs in ((backbone.summary_proj, "classifier.linear_hidden"), (head.proj, "classifier.linear_out")):
        part = {n: state_dict[f"{theirs}.{n}"] for n in ("weight", "bias") if f"{theirs}.{n}" in state_dict}
        problems = fit_problems(dict(module.state_dict()), part)
        if problems:
            raise CheckpointError(f"{source}: {theirs} does not fit this head: " + " | ".join(problems))
        copy_state(module, part)
    return report


def _describe(body: FunnelModel) -> str:
    a = body.arch
    return ", ".join(f"{k}={a[k]}" for k in ("vocab_size", "block_sizes", "block_repeats", "d_model", "n_head",
                                              "d_head", "d_inner", "use_decoder", "num_decoder_layers"))


def load_hf_checkpoint(directory: str | Path, **overrides: Any) -> Model:
    """Build our model from an HF folder (``config.json`` + weights): ``FunnelBaseModel``/``FunnelModel`` ->
    ``FunnelModel``, ``FunnelForMaskedLM`` -> ``FunnelForMaskedLM(mlm_transform=False)``, ``FunnelForPreTraining``
    -> ``FunnelElectra`` (fresh generator). ``overrides`` change kwargs such as dropout or mask_pool."""
    folder = Path(directory)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{folder}: config.json not found (an HF Funnel folder has config.json and weights)")
    config = json.loads(config_path.read_text())
    state = read_state_dict(folder)
    kwargs = config_from_hf(config)
    if not config.get("architectures"):  # e.g. a FunnelBaseModel saved without it: the weights say
        kwargs["use_decoder"] = any(k.startswith(("decoder.", "funnel.decoder.")) for k in state)
    kwargs.update(overrides)
    arch = (config.get("architectures") or ["FunnelModel"])[0]
    if arch == "FunnelForMaskedLM":
        model: Model = FunnelForMaskedLM(**{"mlm_transform": False, **kwargs})
    elif arch == "FunnelForPreTraining":
        model = FunnelElectra(**kwargs)
    else:
        model = FunnelModel(**kwargs)
    load_hf_state_dict(model, state, source=str(folder))
    return model


def save_hf_checkpoint(model: Model, directory: str | Path, safe_serialization: bool = True) -> Path:
    """Write ``config.json`` + weights so that ``transformers.<architecture>.from_pretrained(directory)`` loads it
    (the tied MLM weight left out of safetensors, as HF does)."""
    return write_hf_folder(directory, config_to_hf(model), export_hf_state_dict(model), (TIED,), safe_serialization)
