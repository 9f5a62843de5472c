"""BERT encoder with masked-LM and next-sentence heads: the baseline of XLNet (Devlin et al. 2019;
XLNet paper Eq. (2)).

Post-LN Transformer encoder with learned absolute positions and token types, biased q/k/v/out projections and
fused attention (``genlab.nn.attention.attend_heads``: SDPA). Module names follow the Hugging Face ``BertForPreTraining``
state dict (``bert.embeddings...``, ``bert.encoder.layer.<l>...``, ``cls.predictions...``,
``cls.seq_relationship``) so published or HF-initialised weights load 1:1.

    out = model(input_ids [B,T], token_type_ids [B,T] | None, attention_mask [B,T] (1 = real) | None)
    out.hidden [B,T,d]; out.pooled [B,d]; model.mlm_logits(h [...,d]) -> [...,V]; model.nsp_logits(pooled) -> [B,2]
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genlab.errors import ConfigError
from genlab.nn.attention import attend_heads


@dataclass
class BertOutput:
    hidden: Tensor  # [B, T, d] last encoder layer
    pooled: Tensor  # [B, d] tanh(W h_[CLS] + b)


class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size: int, d_model: int, max_position: int, type_vocab_size: int, dropout: float,
                 eps: float):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, d_model)
        self.position_embeddings = nn.Embedding(max_position, d_model)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, d_model)
        self.LayerNorm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        pos = self.position_embeddings.weight[: input_ids.shape[1]]
        x = self.word_embeddings(input_ids) + pos + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int, dropatt: float):
        super().__init__()
        self.n_head, self.dropatt = n_head, dropatt
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        B, T, _ = x.shape
        q, k, v = (lin(x).view(B, T, self.n_head, -1).transpose(1, 2) for lin in (self.query, self.key, self.value))
        return attend_heads(q, k, v, mask, self.dropatt if self.training else 0.0)


class BertSublayerOutput(nn.Module):
    """``LN(residual + dropout(W x + b))`` (post-LN)."""

    def __init__(self, d_in: int, d_model: int, dropout: float, eps: float):
        super().__init__()
        self.dense = nn.Linear(d_in, d_model)
        self.LayerNorm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(residual + self.dropout(self.dense(x)))


class BertAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int, dropout: float, dropatt: float, eps: float):
        super().__init__()
        self.self = BertSelfAttention(d_model, n_head, dropatt)
        self.output = BertSublayerOutput(d_model, d_model, dropout, eps)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, d_model: int, d_inner: int):
        super().__init__()
        self.dense = nn.Linear(d_model, d_inner)

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(self.dense(x))  # erf GELU (BERT)


class BertLayer(nn.Module):
    def __init__(self, d_model: int, n_head: int, d_inner: int, dropout: float, dropatt: float, eps: float):
        super().__init__()
        self.attention = BertAttention(d_model, n_head, dropout, dropatt, eps)
        self.intermediate = BertIntermediate(d_model, d_inner)
        self.output = BertSublayerOutput(d_inner, d_model, dropout, eps)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, n_layer: int, **kw):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(**kw) for _ in range(n_layer))

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        for layer in self.layer:
            x = layer(x, mask)
        return x


class BertPooler(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


class BertModel(nn.Module):
    """Embeddings + encoder (+ the pooler, applied by the caller): the network pretraining and finetuning share."""

    block_classes = (BertLayer,)  # what genlab.parallel shards / checkpoints / compiles one by one

    def __init__(self, vocab_size: int, n_layer: int, d_model: int, n_head: int, d_inner: int, max_position: int,
                 type_vocab_size: int, dropout: float, dropatt: float, eps: float):
        super().__init__()
        self.max_position = max_position
        self.embeddings = BertEmbeddings(vocab_size, d_model, max_position, type_vocab_size, dropout, eps)
        self.encoder = BertEncoder(n_layer, d_model=d_model, n_head=n_head, d_inner=d_inner, dropout=dropout,
                                   dropatt=dropatt, eps=eps)
        self.pooler = BertPooler(d_model)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                attention_mask: Tensor | None = None) -> Tensor:
        """Last encoder layer [B, T, d]; ``attention_mask`` [B, T] is 1 for real tokens (padding keys are masked)."""
        if input_ids.shape[1] > self.max_position:
            raise ConfigError(f"sequence length {input_ids.shape[1]} exceeds model.max_position={self.max_position}; "
                              "lower data.max_seq_len (or raise model.max_position).")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        mask = None
        if attention_mask is not None:  # [B,1,1,T] boolean: True = may attend (keys only)
            mask = attention_mask.bool()[:, None, None, :]
        return self.encoder(self.embeddings(input_ids, token_type_ids), mask)


class BertPredictionTransform(nn.Module):
    def __init__(self, d_model: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.LayerNorm = nn.LayerNorm(d_model, eps=eps)

    def forward(self, h: Tensor) -> Tensor:
        return self.LayerNorm(F.gelu(self.dense(h)))


class BertLMPrediction(nn.Module):
    """``logits = LN(gelu(W h + b)) Eᵀ + b_out`` with the decoder tied to the word embedding; without the transform
    (``transform=False``) ``logits = h Eᵀ + b_out``, as XLNet's LM head."""

    def __init__(self, d_model: int, vocab_size: int, eps: float, transform: bool = True):
        super().__init__()
        self.transform = BertPredictionTransform(d_model, eps) if transform else nn.Identity()
        self.decoder = nn.Linear(d_model, vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, h: Tensor) -> Tensor:
        return self.decoder(self.transform(h)) + self.bias


class BertPretrainingHeads(nn.Module):
    def __init__(self, d_model: int, vocab_size: int, eps: float, mlm_transform: bool = True):
        super().__init__()
        self.predictions = BertLMPrediction(d_model, vocab_size, eps, mlm_transform)
        self.seq_relationship = nn.Linear(d_model, 2)


class BertForPretraining(nn.Module):
    """BERT-Base defaults (L=12, d=768, H=12, d_i=3072, 512 positions, 2 token types).

    ``mlm_transform=False`` drops the MLM head's dense + GELU + LayerNorm (not in the paper): the 2 x 64 RACE mini
    reads the article only when pretrained without it (experiments/xlnet_race/README.md)."""

    forward_methods = ("mlm_logits", "nsp_logits")  # entry points besides forward (genlab.parallel)

    def __init__(
        self,
        vocab_size: int,
        n_layer: int = 12,
        d_model: int = 768,
        n_head: int = 12,
        d_inner: int = 3072,
        max_position: int = 512,
        type_vocab_size: int = 2,
        dropout: float = 0.1,
        dropatt: float = 0.1,
        layer_norm_eps: float = 1e-12,
        init_std: float = 0.02,
        mlm_transform: bool = True,
    ):
        super().__init__()
        if d_model % n_head:
            raise ConfigError(f"model.d_model={d_model} must be divisible by model.n_head={n_head}.")
        self.n_layer, self.d_model, self.max_position, self.init_std = n_layer, d_model, max_position, init_std
        # constructor sizes, for checkpoint import/export (genlab.interop.hf_bert) and architecture checks
        self.arch = dict(vocab_size=vocab_size, n_layer=n_layer, d_model=d_model, n_head=n_head, d_inner=d_inner,
                         max_position=max_position, type_vocab_size=type_vocab_size, dropout=dropout,
                         dropatt=dropatt, layer_norm_eps=layer_norm_eps, init_std=init_std,
                         mlm_transform=mlm_transform)
        self.bert = BertModel(vocab_size, n_layer, d_model, n_head, d_inner, max_position, type_vocab_size,
                                 dropout, dropatt, layer_norm_eps)
        self.cls = BertPretrainingHeads(d_model, vocab_size, layer_norm_eps, mlm_transform)
        self.apply(self._init)
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight  # tied

    def _init(self, m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.trunc_normal_(m.weight, std=self.init_std, a=-2 * self.init_std, b=2 * self.init_std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                attention_mask: Tensor | None = None) -> BertOutput:
        h = self.bert(input_ids, token_type_ids, attention_mask)
        return BertOutput(hidden=h, pooled=self.bert.pooler(h))

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        return self.cls.predictions(hidden)

    def nsp_logits(self, pooled: Tensor) -> Tensor:
        return self.cls.seq_relationship(pooled)
