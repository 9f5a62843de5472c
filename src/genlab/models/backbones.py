"""Backbone interface for finetuning: one protocol, adapters for every pretrained encoder.

A finetuning head only needs two things from a pretrained network::

    hidden = backbone.encode(input_ids, token_type_ids, attention_mask)   # [B, T, d]; attention_mask 1 = real token
    pooled = backbone.summary(hidden)                                       # [B, d] sequence summary

XLNet puts ``<cls>`` last (left padding), so its summary is ``dropout(tanh(W h_T + b))`` with a freshly initialised
projection (the authors' code, ``summary_type=last, use_summ_proj``; ``genlab.models.heads.SequenceSummary``, also
the pretraining NSP head). BERT puts ``[CLS]`` first and its summary is
the pretrained pooler ``tanh(W h_0 + b)`` followed by dropout. Funnel/GPT adapters implement the same two methods.
``cls_position`` tells data builders where the summary token sits. Layer parameters keep the ``...layer.<l>.``
names, so layer-wise learning-rate decay (genlab.tasks.layerwise_lr) sees the depth of every weight.
"""

from __future__ import annotations

import re
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from genlab.errors import ConfigError
from genlab.models.bert import BertForPretraining
from genlab.models.funnel import FunnelModel
from genlab.models.funnel_pretraining import FunnelElectra, FunnelForMaskedLM
from genlab.models.heads import SequenceSummary
from genlab.models.xlnet import XLNetLMHeadModel, XLNetModel


@runtime_checkable
class Backbone(Protocol):
    d_model: int
    n_layer: int
    cls_position: str  # "first" | "last"

    def encode(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
               attention_mask: Tensor | None = None) -> Tensor: ...

    def summary(self, hidden: Tensor) -> Tensor: ...


class XLNetBackbone(nn.Module):
    """Content stream of an XLNet (no memory, no permutation); the LM head of a pretraining model is dropped."""

    cls_position = "last"
    forward_methods = ("encode", "summary")  # entry points besides forward (genlab.parallel gathers around them)

    def __init__(self, model: XLNetModel | XLNetLMHeadModel, summary_dropout: float = 0.1, init_std: float = 0.02):
        super().__init__()
        self.transformer = model.transformer if isinstance(model, XLNetLMHeadModel) else model
        # finetuning runs the plain bidirectional encoder (no permutation, no memory)
        self.transformer.mem_len, self.transformer.attn_type, self.transformer.bi_data = 0, "bi", False
        self.d_model, self.n_layer = self.transformer.d_model, self.transformer.n_layer
        self.sequence_summary = SequenceSummary(self.d_model, dropout=summary_dropout, init_std=init_std)

    def encode(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
               attention_mask: Tensor | None = None) -> Tensor:
        dtype = self.transformer.word_embedding.weight.dtype
        input_mask = None if attention_mask is None else (1 - attention_mask.to(dtype))  # XLNet: 1 = padding
        return self.transformer(input_ids, token_type_ids, input_mask).output  # dropout(h), as the official heads

    def summary(self, hidden: Tensor) -> Tensor:
        return self.sequence_summary(hidden)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # finetuning checkpoints written before the summary was the shared SequenceSummary named it summary_proj
        for key in [k for k in state_dict if k.startswith(prefix + "summary_proj.")]:
            state_dict[prefix + "sequence_summary.summary." + key[len(prefix + "summary_proj."):]] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class BertBackbone(nn.Module):
    """BERT's own network (``BertModel``: embeddings, encoder, pretrained pooler); the MLM/NSP heads are dropped."""

    cls_position = "first"
    forward_methods = ("encode", "summary")  # entry points besides forward (genlab.parallel gathers around them)

    def __init__(self, model: BertForPretraining, summary_dropout: float = 0.1):
        super().__init__()
        self.bert = model.bert
        self.d_model, self.n_layer = model.d_model, model.n_layer
        self.summary_dropout = nn.Dropout(summary_dropout)

    def encode(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
               attention_mask: Tensor | None = None) -> Tensor:
        return self.bert(input_ids, token_type_ids, attention_mask)

    def summary(self, hidden: Tensor) -> Tensor:
        return self.summary_dropout(self.bert.pooler(hidden))


_FUNNEL_EMBEDDING = re.compile(r"(?:^|\.)funnel\.(?:embeddings|input_proj)\.")
_FUNNEL_ENCODER = re.compile(r"(?:^|\.)funnel\.encoder\.layer\.(\d+)\.")
_FUNNEL_DECODER = re.compile(r"(?:^|\.)funnel\.decoder\.layers\.(\d+)\.")


class FunnelBackbone(nn.Module):
    """Funnel body of a pretraining model (the discriminator for ELECTRA; generator and heads dropped). Sequence
    tasks read the encoder only (length T_M) and summarise its [CLS] row 0 as ``dropout(tanh(W h_0 + b))`` with a
    fresh projection (the authors' code; HF ``FunnelClassificationHead`` = this summary followed by
    ``heads.ClassificationHead``); ``use_decoder=True`` keeps the decoder for token-level tasks (SQuAD); a 1-block
    model (the L-layer baselines) is full length without one.

    Layer-wise learning-rate decay follows the original code: ``layer_depth`` gives the embedding id 0,
    encoder layer k id k + 1 and decoder layer i id ``n_encoder + 1 + i``, over ``n_depth_ids`` ids."""

    cls_position = "first"
    forward_methods = ("encode", "summary")  # entry points besides forward (genlab.parallel gathers around them)

    def __init__(self, model: FunnelModel | FunnelForMaskedLM | FunnelElectra, summary_dropout: float = 0.1,
                 use_decoder: bool = False, init_std: float = 0.02):
        super().__init__()
        self.funnel = model if isinstance(model, FunnelModel) else model.funnel
        if not use_decoder:
            self.funnel.decoder = None  # unused parameters would stall DDP and take optimiser state
        elif self.funnel.decoder is None and len(self.funnel.arch["block_sizes"]) > 1:
            raise ConfigError("a token-level task (SQuAD) needs the Funnel decoder: build the model with "
                              "model.use_decoder=true (a 1-block model needs none)")
        self.d_model, self.n_layer = self.funnel.d_model, self.funnel.n_layer
        n_decoder = 0 if self.funnel.decoder is None else len(self.funnel.decoder.layers)
        self.n_depth_ids = 1 + self.n_layer + n_decoder
        self.summary_proj = nn.Linear(self.d_model, self.d_model)
        nn.init.trunc_normal_(self.summary_proj.weight, std=init_std, a=-2 * init_std, b=2 * init_std)
        nn.init.zeros_(self.summary_proj.bias)
        self.summary_dropout = nn.Dropout(summary_dropout)

    def encode(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
               attention_mask: Tensor | None = None) -> Tensor:
        return self.funnel(input_ids, token_type_ids, attention_mask).hidden

    def summary(self, hidden: Tensor) -> Tensor:
        return self.summary_dropout(torch.tanh(self.summary_proj(hidden[:, 0])))

    def layer_depth(self, name: str) -> int | None:
        """Depth id of a parameter named ``...funnel.<...>`` (None for the heads and the summary projection)."""
        if _FUNNEL_EMBEDDING.search(name):
            return 0
        m = _FUNNEL_ENCODER.search(name)
        if m:
            return int(m.group(1)) + 1
        m = _FUNNEL_DECODER.search(name)
        return None if m is None else self.n_layer + 1 + int(m.group(1))


def adapt(model: nn.Module, summary_dropout: float = 0.1, token_level: bool = False) -> nn.Module:
    """Wrap a pretraining model (or bare backbone) in its finetuning adapter; adapters pass through.
    ``token_level``: the task reads every position (SQuAD), so a Funnel keeps its decoder."""
    if isinstance(model, (XLNetBackbone, BertBackbone, FunnelBackbone)) or isinstance(model, Backbone):
        return model
    if isinstance(model, (FunnelModel, FunnelForMaskedLM, FunnelElectra)):
        return FunnelBackbone(model, summary_dropout, use_decoder=token_level)
    if isinstance(model, (XLNetLMHeadModel, XLNetModel)):
        return XLNetBackbone(model, summary_dropout)
    if isinstance(model, BertForPretraining):
        return BertBackbone(model, summary_dropout)
    raise ConfigError(f"model {type(model).__name__} has no finetuning adapter; use an XLNet, BERT or Funnel model "
                      "config (model=xlnet_base, model=bert_base, ...) or implement encode()/summary().")
