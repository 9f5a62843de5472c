"""Funnel-Transformer encoder, decoder and heads (Dai thesis ch. 5).

The encoder is a sequence of blocks of post-LN relative-attention layers; between blocks the sequence is halved
by window-2 pooling (mean / max / top-attention) and the first layer of the new block attends from the pooled
sequence (query and residual) to the unpooled one (keys and values: "pool-query-only"). A separate [CLS] is kept
out of the pooling. For token-level objectives a decoder up-samples the last block by repetition, adds the output
of the last layer of block 0 and runs ``num_decoder_layers`` full-length layers. The bookkeeping of positions,
segments, the CLS mask and the key mask under pooling lives in ``genlab.models.funnel_structure``.

    out = model(input_ids [B,T], token_type_ids [B,T] | None (A=0, B=1, [CLS]=2), attention_mask [B,T] | None
                (1 = may be attended to; 0 = padding, and [MASK] in the original MLM))
    out.hidden          # [B,T,D] decoder output, or [B,T_M,D] encoder output without a decoder
    out.encoder_hidden  # [B,T_M,D] last encoder layer; row 0 is the [CLS] summary of the sequence
    out.hidden_states   # embedding output, then every encoder layer application (HF's order)
    out.decoder_input   # h_1 + up-sampled h_M (None without a decoder)

Module and parameter names follow Hugging Face ``FunnelModel`` inside a layer (``attention.q_head`` ...), with
the encoder's layers numbered flat over blocks (``encoder.layer.<k>``, the TF ``layer_k``; HF splits k into
``blocks.<b>.<l>``) so that layer-wise learning-rate decay sees every layer's depth; see
``genlab.interop.hf_funnel``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genlab.errors import ConfigError
from genlab.models.funnel_structure import (
    MASK_POOLS,
    POSITIONAL_MODES,
    Level,
    PairInputs,
    can_pool,
    input_level,
    pair_inputs,
    pool_level,
    pool_windows,
    pooled_length,
    select_level,
    shifted_view,
    upsample,
)
from genlab.models.xlnet import ACTIVATIONS, XLNetFeedForward
from genlab.nn.relative_attention import attend
from genlab.nn.views import output_view

POOLING_TYPES = ("mean", "max", "top_attn")


def _fp32_up(x: Tensor) -> Tensor:
    """Scores, masks, softmax and logits in at least fp32 (fp64 stays fp64, for the tests)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))
CLS_MASKS = ("auto", "always", "never")


class FunnelRelAttention(nn.Module):
    """Relative multi-head attention of one Funnel layer with its residual and LayerNorm (Dai thesis
    Eq. (5.1); relative attention as the authors' code).

    ``A = s(q+u)·k + C·[s(q+v)·(phi(pq-pk) W_r) + s(q+b_s)·seg_embed[S]] - 1e6·hidden_key``; the content term runs
    inside ``genlab.nn.relative_attention.attend`` (SDPA with the other terms as an fp32 additive bias). Unlike
    ``RelPartialLearnableAttention`` (fused q|k|v without biases, causal distances, no segment term) the
    projections have separate weights, k/v/o biases, and the query and key sides may be different sequences.
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, dropout: float, dropatt: float, layer_norm_eps: float,
                 relative: bool = True) -> None:
        super().__init__()
        self.n_head, self.d_head, self.dropatt = n_head, d_head, dropatt
        self.scale = 1.0 / math.sqrt(d_head)
        inner = n_head * d_head
        self.q_head = nn.Linear(d_model, inner, bias=False)
        self.k_head = nn.Linear(d_model, inner)
        self.v_head = nn.Linear(d_model, inner)
        if relative:
            self.r_w_bias = nn.Parameter(torch.zeros(n_head, d_head))
            self.r_r_bias = nn.Parameter(torch.zeros(n_head, d_head))
            self.r_kernel = nn.Parameter(torch.zeros(d_model, n_head, d_head))
            self.r_s_bias = nn.Parameter(torch.zeros(n_head, d_head))
            self.seg_embed = nn.Parameter(torch.zeros(2, n_head, d_head))  # 0 = different segment, 1 = same
        self.relative = relative
        self.post_proj = nn.Linear(inner, d_model)
        self.layer_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def score_bias(self, q: Tensor, inputs: PairInputs) -> Tensor | None:
        """Scaled positional + segment terms times C, plus the key mask: fp32 [B, N, Tq, Tk] (or None)."""
        bias = None
        if self.relative:
            bias = self._positional(q, inputs)
            if inputs.same_segment is not None:
                seg = torch.einsum("bind,snd->bnis", (q + self.r_s_bias) * self.scale, self.seg_embed)
                seg = _fp32_up(seg)
                bias = bias + torch.where(inputs.same_segment[:, None], seg[..., 1:], seg[..., :1])
            if inputs.keep is not None:
                bias = bias * inputs.keep[:, None]
        if inputs.key_bias is not None:
            bias = inputs.key_bias if bias is None else bias + inputs.key_bias
        return bias

    def _positional(self, q: Tensor, inputs: PairInputs) -> Tensor:
        qv = (q + self.r_r_bias) * self.scale  # [B, Tq, N, d]
        if inputs.mode == "factorized":
            phi, pi, psi, omega = (t.to(qv.dtype) for t in inputs.factors)
            qr = torch.einsum("bind,Dnd->binD", qv, self.r_kernel)
            pos = (torch.einsum("binD,jD->bnij", qr * phi[:, None], psi)
                   + torch.einsum("binD,jD->bnij", qr * pi[:, None], omega))
            return _fp32_up(pos)
        r_head = torch.einsum("wD,Dnd->wnd", inputs.table.to(qv.dtype), self.r_kernel)
        raw = _fp32_up(torch.einsum("bind,wnd->bniw", qv, r_head))  # [B, N, Tq, W]
        if inputs.mode == "rel_shift":
            return shifted_view(raw, inputs.q_len, inputs.k_len, inputs.shift)
        index = inputs.index[:, None].expand(raw.shape[0], raw.shape[1], -1, -1)
        return raw.gather(3, index)

    def forward(self, query: Tensor, key: Tensor, inputs: PairInputs, need_probs: bool = False
                ) -> tuple[Tensor, Tensor | None]:
        """``LayerNorm(query + Dropout(W_o attention))``: the residual is the query side (the pooled sequence in
        a pooling layer, thesis eq. 5.4). Returns (output [B, Tq, D], probabilities [B, N, Tq, Tk] or None)."""
        b, tq, _ = query.shape
        tk = key.shape[1]
        q = self.q_head(query).view(b, tq, self.n_head, self.d_head)
        k = self.k_head(key).view(b, tk, self.n_head, self.d_head)
        v = self.v_head(key).view(b, tk, self.n_head, self.d_head)
        bias = self.score_bias(q, inputs)
        q_content = q + self.r_w_bias if self.relative else q
        probs = None
        if need_probs:
            scores = _fp32_up(torch.einsum("bind,bjnd->bnij", q_content * self.scale, k))
            if bias is not None:
                scores = scores + bias
            probs = scores.softmax(-1)
            vec = torch.einsum("bnij,bjnd->bind", F.dropout(probs, self.dropatt, self.training).to(v.dtype), v)
            vec = vec.reshape(b, tq, -1)
        else:
            full = (b, self.n_head, tq, tk)
            if bias is None:
                bias = torch.zeros(1, 1, 1, 1, device=query.device)
            elif bias.shape != full:
                bias = bias.expand(full)
                if bias.requires_grad:  # attend() accumulates the content scores into a bias with a gradient
                    bias = bias.clone()
            vec = attend(q_content.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), bias, self.dropatt,
                         self.training, "sdpa")
        out = self.dropout(self.post_proj(vec))
        return self.layer_norm(query + out), probs


class FunnelLayer(nn.Module):
    """Attention sub-layer then the position-wise FFN (the XLNet FFN: ``LN(x + drop(W2 drop_act(act(W1 x))))``)."""

    def __init__(self, d_model: int, n_head: int, d_head: int, d_inner: int, dropout: float, dropatt: float,
                 dropact: float, activation: str, layer_norm_eps: float, relative: bool = True) -> None:
        super().__init__()
        self.attention = FunnelRelAttention(d_model, n_head, d_head, dropout, dropatt, layer_norm_eps, relative)
        self.ffn = XLNetFeedForward(d_model, d_inner, dropout, dropact, activation, layer_norm_eps)

    def forward(self, query: Tensor, key: Tensor, inputs: PairInputs, need_probs: bool = False
                ) -> tuple[Tensor, Tensor | None]:
        h, probs = self.attention(query, key, inputs, need_probs)
        return self.ffn(h), probs


@dataclass
class EncoderOutput:
    hidden: Tensor  # [B, T_M, D]
    hidden_states: list[Tensor]  # input, then every layer application
    first_block_hidden: Tensor  # output of the last application of block 0 (full length): the decoder residual
    levels: list[Level]  # level 0 .. level of the output
    level0_inputs: PairInputs  # full-length self-attention structures (reused by the decoder)
    attentions: list[Tensor] = field(default_factory=list)


class FunnelEncoder(nn.Module):
    """Blocks of layers with pooling between them (Dai thesis §5.2.2, Eq. (5.3)-(5.4)). ``layer`` holds the distinct
    layers, flat over blocks; block b applies each of its ``block_sizes[b]`` layers ``block_repeats[b]`` times in a
    row."""

    def __init__(self, block_sizes: tuple[int, ...], block_repeats: tuple[int, ...], d_model: int, n_head: int,
                 d_head: int, d_inner: int, dropout: float, dropatt: float, dropact: float, activation: str,
                 layer_norm_eps: float, pooling_type: str, pool_q_only: bool, separate_cls: bool, truncate_seq: bool,
                 attn_type: str, mask_pool: str, cls_mask: str) -> None:
        super().__init__()
        self.block_sizes, self.block_repeats = block_sizes, block_repeats
        self.d_model, self.pooling_type, self.pool_q_only = d_model, pooling_type, pool_q_only
        self.separate_cls, self.truncate_seq, self.attn_type = separate_cls, truncate_seq, attn_type
        self.mask_pool = mask_pool
        self.cls_mask = separate_cls if cls_mask == "auto" else cls_mask == "always"
        self.pos_dropout = nn.Dropout(dropout)
        self.layer = nn.ModuleList(
            FunnelLayer(d_model, n_head, d_head, d_inner, dropout, dropatt, dropact, activation, layer_norm_eps,
                        attn_type != "absolute")
            for _ in range(sum(block_sizes))
        )

    def pairs(self, q: Level, k: Level) -> PairInputs:
        return pair_inputs(q, k, self.attn_type, self.d_model, self.pos_dropout)

    def _pool(self, h: Tensor, level: Level, probs: Tensor | None) -> tuple[Tensor, Level]:
        if self.pooling_type != "top_attn":
            return (pool_windows(h, self.pooling_type, self.separate_cls, self.truncate_seq),
                    pool_level(level, self.separate_cls, self.truncate_seq, self.mask_pool))
        index = top_attention_index(probs, pooled_length(h.shape[1], self.separate_cls, self.truncate_seq),
                                    self.separate_cls)
        return h.gather(1, index[..., None].expand(-1, -1, h.shape[2])), select_level(level, index, self.separate_cls)

    def forward(self, h: Tensor, token_type_ids: Tensor | None = None, hidden_keys: Tensor | None = None,
                output_attentions: bool = False) -> EncoderOutput:
        """``h`` [B, T, D] embedded input; ``hidden_keys`` [B, T] bool, True = never attended to."""
        level = input_level(h.shape[1], token_type_ids, hidden_keys, self.cls_mask, h.device)
        levels, plain = [level], self.pairs(level, level)
        level0_inputs = plain
        states, attentions, first_block = [h], [], h
        probs = None
        k = 0
        for b, (size, repeats) in enumerate(zip(self.block_sizes, self.block_repeats)):
            pool_inputs = None
            if b > 0 and can_pool(h.shape[1], self.separate_cls):
                pooled, new_level = self._pool(h, level, probs)
                key = h if self.pool_q_only else pooled
                pool_inputs = self.pairs(new_level, level if self.pool_q_only else new_level)
                level = new_level
                levels.append(level)
                plain = self.pairs(level, level)
            for p in range(size):
                layer = self.layer[k]
                k += 1
                for r in range(repeats):
                    last_of_block = p == size - 1 and r == repeats - 1
                    need = output_attentions or (last_of_block and self.pooling_type == "top_attn")
                    if pool_inputs is not None and p == 0 and r == 0:
                        h, probs = layer(pooled, key, pool_inputs, need)
                    else:
                        h, probs = layer(h, h, plain, need)
                    states.append(h)
                    if output_attentions:
                        attentions.append(probs)
            if b == 0:
                first_block = h
        return EncoderOutput(h, states, first_block, levels, level0_inputs, attentions)


def top_attention_index(probs: Tensor | None, keep: int, separate_cls: bool) -> Tensor:
    """Top-attention pooling (ablation (6) of Dai thesis Table 5.7, our choices where the thesis is silent): score each
    position by the attention it receives in the previous layer (summed over heads and queries), keep the ``keep``
    best in their original order, [CLS] always when separate. Returns [B, keep] indices."""
    if probs is None or probs.shape[-1] != probs.shape[-2]:
        raise ConfigError("model.pooling_type=top_attn needs the previous block to end with a self-attention "
                          "layer (a block of one layer that itself pools has none); use block sizes >= 2.")
    score = probs.detach().sum(dim=(1, 2))  # [B, T]
    if separate_cls:
        top = score[:, 1:].topk(keep - 1, dim=1).indices + 1
        top = torch.cat([torch.zeros_like(top[:, :1]), top], dim=1)
    else:
        top = score.topk(keep, dim=1).indices
    return top.sort(dim=1).values


class FunnelDecoder(nn.Module):
    """``g = h_1 + upsample(h_M)`` then full-length layers on the level-0 structures (Dai thesis Eq. (5.5))."""

    def __init__(self, n_layer: int, separate_cls: bool, **layer_kw) -> None:
        super().__init__()
        self.separate_cls = separate_cls
        self.layers = nn.ModuleList(FunnelLayer(**layer_kw) for _ in range(n_layer))

    def forward(self, enc: EncoderOutput, output_attentions: bool = False) -> tuple[Tensor, Tensor, list[Tensor]]:
        stride = 2 ** (len(enc.levels) - 1)  # poolings that actually happened
        target = enc.first_block_hidden.shape[1]
        g = enc.first_block_hidden + upsample(enc.hidden, stride, target, self.separate_cls)
        h, attentions = g, []
        for layer in self.layers:
            h, probs = layer(h, h, enc.level0_inputs, output_attentions)
            if output_attentions:
                attentions.append(probs)
        return h, g, attentions


class FunnelEmbeddings(nn.Module):
    """``Dropout(LayerNorm(E[x]))``: no position or segment embedding, those enter the attention (authors' code);
    with ``absolute=True`` (ablation (4)) ``E[x] + P[pos] + S[seg mod 2]`` before the LayerNorm."""

    def __init__(self, vocab_size: int, d_embed: int, dropout: float, layer_norm_eps: float, absolute: bool = False,
                 max_position: int = 512) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, d_embed)
        if absolute:
            self.position_embeddings = nn.Embedding(max_position, d_embed)
            self.token_type_embeddings = nn.Embedding(2, d_embed)
        self.absolute, self.max_position = absolute, max_position
        self.layer_norm = nn.LayerNorm(d_embed, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        e = self.word_embeddings(input_ids)
        if self.absolute:
            if input_ids.shape[1] > self.max_position:
                raise ConfigError(f"sequence length {input_ids.shape[1]} exceeds the {self.max_position} learned "
                                  "positions of model.attn_type=absolute")
            e = e + self.position_embeddings.weight[: input_ids.shape[1]]
            if token_type_ids is not None:
                e = e + self.token_type_embeddings(token_type_ids % 2)
        return self.dropout(self.layer_norm(e))


@dataclass
class FunnelOutput:
    hidden: Tensor
    encoder_hidden: Tensor
    hidden_states: list[Tensor]
    decoder_input: Tensor | None = None
    attentions: list[Tensor] = field(default_factory=list)


class FunnelModel(nn.Module):
    """Embeddings + encoder (+ decoder when ``use_decoder``). Defaults: B6-6-6H768 (Dai thesis §5.3.1).

    ``block_sizes``/``block_repeats``: distinct layers per block and how often each is applied in a row
    (``B6-3x2-3x2`` = (6, 3, 3) x (1, 2, 2)). ``d_embed`` != ``d_model`` adds an input projection (the ELECTRA
    generator). ``attn_type``: ``rel_shift`` | ``factorized`` | ``gather`` (the same positional term three ways)
    | ``absolute`` (ablation). ``mask_pool``: ``any_real`` (original) | ``all_real`` (HF). ``cls_mask``: ``auto``
    (= ``separate_cls``, HF) | ``always`` (original TF) | ``never``.
    """

    block_classes = (FunnelLayer,)  # what FSDP2 / activation checkpointing wrap (genlab.parallel)

    def __init__(
        self,
        vocab_size: int,
        block_sizes: tuple[int, ...] = (6, 6, 6),
        block_repeats: tuple[int, ...] | None = None,
        d_model: int = 768,
        n_head: int = 12,
        d_head: int = 64,
        d_inner: int = 3072,
        d_embed: int | None = None,
        use_decoder: bool = True,
        num_decoder_layers: int = 2,
        pooling_type: str = "mean",
        pool_q_only: bool = True,
        separate_cls: bool = True,
        truncate_seq: bool = True,
        attn_type: str = "rel_shift",
        mask_pool: str = "any_real",
        cls_mask: str = "auto",
        dropout: float = 0.1,
        dropatt: float = 0.1,
        dropact: float = 0.0,
        activation: str = "gelu_tanh",
        layer_norm_eps: float = 1e-9,
        init_std: float = 0.02,
        max_position: int = 512,
    ) -> None:
        super().__init__()
        block_sizes = tuple(int(b) for b in block_sizes)
        block_repeats = (1,) * len(block_sizes) if block_repeats is None else tuple(int(r) for r in block_repeats)
        d_embed = d_model if d_embed is None else d_embed
        _check(block_sizes, block_repeats, d_model, pooling_type, attn_type, mask_pool, cls_mask, activation)
        self.arch = dict(vocab_size=vocab_size, block_sizes=block_sizes, block_repeats=block_repeats,
                         d_model=d_model, n_head=n_head, d_head=d_head, d_inner=d_inner, d_embed=d_embed,
                         use_decoder=use_decoder, num_decoder_layers=num_decoder_layers, pooling_type=pooling_type,
                         pool_q_only=pool_q_only, separate_cls=separate_cls, truncate_seq=truncate_seq,
                         attn_type=attn_type, mask_pool=mask_pool, cls_mask=cls_mask, dropout=dropout,
                         dropatt=dropatt, dropact=dropact, activation=activation, layer_norm_eps=layer_norm_eps,
                         init_std=init_std)
        self.d_model, self.d_embed, self.init_std = d_model, d_embed, init_std
        self.n_layer = sum(block_sizes)
        self.embeddings = FunnelEmbeddings(vocab_size, d_embed, dropout, layer_norm_eps, attn_type == "absolute",
                                           max_position)
        self.input_proj = nn.Linear(d_embed, d_model) if d_embed != d_model else None
        layer_kw = dict(d_model=d_model, n_head=n_head, d_head=d_head, d_inner=d_inner, dropout=dropout,
                        dropatt=dropatt, dropact=dropact, activation=activation, layer_norm_eps=layer_norm_eps)
        self.encoder = FunnelEncoder(block_sizes, block_repeats, pooling_type=pooling_type, pool_q_only=pool_q_only,
                                     separate_cls=separate_cls, truncate_seq=truncate_seq, attn_type=attn_type,
                                     mask_pool=mask_pool, cls_mask=cls_mask, **layer_kw)
        self.decoder = (FunnelDecoder(num_decoder_layers, separate_cls, relative=attn_type != "absolute", **layer_kw)
                        if use_decoder else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Original init: truncated normal (±2σ, σ = init_std) for embeddings, every weight matrix, r_* and
        seg_embed; zero biases; LayerNorm (1, 0) (the authors' code)."""
        std = self.init_std
        for name, p in self.named_parameters():
            if name.endswith("bias") and not name.split(".")[-1].startswith("r_"):
                nn.init.zeros_(p)
            elif "layer_norm" in name:
                nn.init.ones_(p)
            else:
                nn.init.trunc_normal_(p, std=std, a=-2 * std, b=2 * std)

    def embed(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        h = self.embeddings(input_ids, token_type_ids)
        return h if self.input_proj is None else self.input_proj(h)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                output_attentions: bool = False) -> FunnelOutput:
        hidden_keys = None if attention_mask is None else attention_mask == 0
        if token_type_ids is None:  # all segment A: the segment term still acts through the CLS mask (as HF)
            token_type_ids = torch.zeros_like(input_ids)
        enc = self.encoder(self.embed(input_ids, token_type_ids), token_type_ids, hidden_keys, output_attentions)
        if self.decoder is None:
            return FunnelOutput(enc.hidden, enc.hidden, enc.hidden_states, attentions=enc.attentions)
        h, g, dec_attn = self.decoder(enc, output_attentions)
        return FunnelOutput(h, enc.hidden, enc.hidden_states, g, enc.attentions + dec_attn)


def _check(block_sizes: tuple[int, ...], block_repeats: tuple[int, ...], d_model: int, pooling_type: str,
           attn_type: str, mask_pool: str, cls_mask: str, activation: str) -> None:
    if not block_sizes or min(block_sizes) < 1:
        raise ConfigError(f"model.block_sizes={list(block_sizes)} needs at least one block of at least one layer")
    if len(block_repeats) != len(block_sizes) or min(block_repeats) < 1:
        raise ConfigError(f"model.block_repeats={list(block_repeats)} needs one repeat count >= 1 per block of "
                          f"model.block_sizes={list(block_sizes)}")
    for key, value, allowed in (("pooling_type", pooling_type, POOLING_TYPES), ("attn_type", attn_type,
                                POSITIONAL_MODES), ("mask_pool", mask_pool, MASK_POOLS), ("cls_mask", cls_mask,
                                CLS_MASKS), ("activation", activation, tuple(ACTIVATIONS))):
        if value not in allowed:
            raise ConfigError(f"model.{key}={value!r} is unknown; use one of {list(allowed)}")
    if d_model % 2:
        raise ConfigError(f"model.d_model={d_model} must be even (sin/cos halves of the positional encoding)")


class FunnelMLMHead(nn.Module):
    """``logits = LayerNorm(gelu(h W_p + b_p)) Eᵀ + b`` with E the (tied) input embedding, in fp32.
    ``transform=False`` gives HF ``FunnelForMaskedLM``'s head, ``h Eᵀ + b`` (needs d_model = d_embed)."""

    def __init__(self, d_model: int, d_embed: int, vocab_size: int, layer_norm_eps: float = 1e-9,
                 transform: bool = True, activation: str = "gelu_tanh") -> None:
        super().__init__()
        if not transform and d_model != d_embed:
            raise ConfigError(f"an MLM head without transform needs d_model ({d_model}) = d_embed ({d_embed})")
        self.transform = transform
        if transform:
            self.dense = nn.Linear(d_model, d_embed)
            self.layer_norm = nn.LayerNorm(d_embed, eps=layer_norm_eps)
            self.act = ACTIVATIONS[activation]
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, h: Tensor, embedding: Tensor) -> Tensor:
        if self.transform:
            h = self.layer_norm(self.act(self.dense(h)))
        return F.linear(_fp32_up(h), _fp32_up(embedding), _fp32_up(self.bias))


class FunnelDiscriminatorHead(nn.Module):
    """ELECTRA discriminator: ``logit_i = w·gelu(W h_i + b) + c``; sigmoid(logit) = P(token is original), the
    original code's polarity (HF ``FunnelForPreTraining`` scores "replaced"; the interop negates w, c)."""

    def __init__(self, d_model: int, activation: str = "gelu_tanh") -> None:
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.dense_prediction = nn.Linear(d_model, 1)
        self.act = ACTIVATIONS[activation]

    def forward(self, h: Tensor) -> Tensor:
        scores = self.dense_prediction(self.act(self.dense(h)))
        return _fp32_up(output_view(scores, scores.shape[:-1]))


def init_head(module: nn.Module, std: float) -> None:
    """Truncated normal weights, zero biases, LayerNorm (1, 0), as the backbone."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=std, a=-2 * std, b=2 * std)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    if isinstance(getattr(module, "bias", None), nn.Parameter):
        nn.init.zeros_(module.bias)


__all__ = [
    "FunnelDecoder",
    "FunnelDiscriminatorHead",
    "FunnelEncoder",
    "FunnelLayer",
    "FunnelMLMHead",
    "FunnelModel",
    "FunnelOutput",
    "FunnelRelAttention",
    "init_head",
    "top_attention_index",
]
