"""XLNet backbone (two-stream Transformer-XL) and LM head (XLNet paper, Yang et al. 2019, §2).

Interface (batch-major)::

    out = model(input_ids,            # [B, T] long
                token_type_ids,       # [B, T] long segment ids, or None (no segment term)
                input_mask=None,      # [B, T] float, 1 = padding (official convention)
                perm_mask=None,       # [B, T, T] float, 1 = query i may NOT attend key j (query-stream mask)
                target_mapping=None,  # [B, P, T] one-hot rows; all-zero row = padding slot
                memory=None,          # list of n_layer tensors [B, M, d] (content-stream layer inputs)
                reuse_len=None,       # cache only the first reuse_len positions (None = the model's reuse_len)
                inp_q=None)           # [B, T] 1 = target: official full-length query stream (no target_mapping)
    out.logits        # [B, P, V] (query stream) or [B, T, V] without target_mapping (LM head model only)
    out.hidden        # [B, T, d] content-stream output of the last layer (no final dropout)
    out.query_hidden  # [B, P, d] query-stream output ([B, T, d] with inp_q), or None
    out.output        # dropout(query_hidden if present else hidden): what the official heads consume
    out.memory        # list of n_layer detached [B, min(mem_len, M + reuse_len), d], or None if mem_len == 0
                      # (mem_len=None keeps every cached position, as HF does for a config with mem_len null)

The content mask is ``perm_mask`` with the diagonal freed (the content stream sees itself, XLNet paper §2.3); padding
keys are hidden from every real query, memory columns are always visible. ``mem_len``, ``reuse_len``, ``clamp_len``,
``same_length``, ``bi_data`` and ``attn_type`` are plain attributes a task may change between calls.

A query-stream slot that sees no key (the first target of a factorisation order, without memory) attends
uniformly to every key under ``empty_row_policy="uniform"``, as the official code and HF do (the paper presets and
imported checkpoints). Such a row averages over all keys, its own token included, so the prediction can read the
token it predicts; ``"zero"`` gives that slot a zero attention vector instead, for ablations of that leak. Without perm_mask and target_mapping the
backbone is a plain bidirectional encoder (finetuning / DAE).

Parameter names equal the Hugging Face ``XLNetLMHeadModel`` state dict (see genlab.interop.hf_xlnet).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genlab.errors import ConfigError
from genlab.nn.positional import relative_positions, sinusoid_table
from genlab.nn.two_stream_attention import MASK_FILL, StreamContext, TwoStreamRelAttention
from genlab.nn.views import output_view


def gelu_tanh(x: Tensor) -> Tensor:
    """The official XLNet GELU (HF "gelu_new"); a named function, not a lambda, so the model pickles (ddp_spawn)."""
    return F.gelu(x, approximate="tanh")


ACTIVATIONS = {
    "gelu_tanh": gelu_tanh,
    "gelu": F.gelu,  # exact erf (HF "gelu")
    "relu": F.relu,
}


@dataclass
class XLNetOutput:
    hidden: Tensor
    query_hidden: Tensor | None
    output: Tensor
    memory: list[Tensor] | None
    logits: Tensor | None = None


class XLNetFeedForward(nn.Module):
    """``LN(x + drop(W2 drop_inner(act(W1 x))))`` (post-LN, XLNet paper App. A.2), shared by both streams."""

    def __init__(self, d_model: int, d_inner: int, dropout: float, inner_dropout: float,
                 activation: str, layer_norm_eps: float) -> None:
        super().__init__()
        self.layer_1 = nn.Linear(d_model, d_inner)
        self.layer_2 = nn.Linear(d_inner, d_model)
        self.layer_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.act = ACTIVATIONS[activation]
        self.inner_dropout = nn.Dropout(inner_dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        y = self.layer_2(self.inner_dropout(self.act(self.layer_1(x))))
        return self.layer_norm(x + self.dropout(y))


class XLNetLayer(nn.Module):
    def __init__(self, attn: TwoStreamRelAttention, ff: XLNetFeedForward) -> None:
        super().__init__()
        self.rel_attn = attn
        self.ff = ff

    def forward(self, h: Tensor, g: Tensor | None, mem: Tensor | None, ctx: StreamContext
                ) -> tuple[Tensor, Tensor | None]:
        h, g = self.rel_attn(h, g, mem, ctx)
        return self.ff(h), (None if g is None else self.ff(g))


class XLNetModel(nn.Module):
    """Two-stream XLNet backbone (word embedding, mask_emb, L layers); no absolute positions or segments."""

    block_classes = (XLNetLayer,)  # what FSDP2 / activation checkpointing wrap (genlab.parallel)

    def __init__(
        self,
        vocab_size: int,
        n_layer: int = 12,
        d_model: int = 768,
        n_head: int = 12,
        d_head: int = 64,
        d_inner: int = 3072,
        ff_activation: str = "gelu_tanh",
        untie_r: bool = True,
        dropout: float = 0.1,
        dropatt: float = 0.1,
        ff_inner_dropout: float | None = None,
        init_std: float = 0.02,
        layer_norm_eps: float = 1e-12,
        attn_type: str = "bi",
        bi_data: bool = False,
        clamp_len: int = -1,
        same_length: bool = False,
        mem_len: int | None = 0,
        empty_row_policy: str = "uniform",
        reuse_len: int | None = None,
    ) -> None:
        super().__init__()
        if ff_activation not in ACTIVATIONS:
            raise ConfigError(f"model.ff_activation={ff_activation!r} is unknown; use one of {sorted(ACTIVATIONS)}")
        if attn_type not in ("bi", "uni"):
            raise ConfigError(f"model.attn_type={attn_type!r} is unknown; use 'bi' or 'uni'")
        if empty_row_policy not in ("zero", "uniform"):
            raise ConfigError(f"model.empty_row_policy={empty_row_policy!r} is unknown; use 'zero' or 'uniform'")
        if d_model % 2:
            raise ConfigError(f"model.d_model={d_model} must be even (sin/cos halves of the positional table)")
        # architecture hyper-parameters, kept for checkpoint export (genlab.interop.hf_xlnet)
        self.arch = dict(vocab_size=vocab_size, n_layer=n_layer, d_model=d_model, n_head=n_head, d_head=d_head,
                         d_inner=d_inner, ff_activation=ff_activation, untie_r=untie_r, dropout=dropout,
                         dropatt=dropatt, layer_norm_eps=layer_norm_eps, init_std=init_std)
        self.d_model, self.n_layer, self.init_std = d_model, n_layer, init_std
        self.attn_type, self.bi_data, self.clamp_len = attn_type, bi_data, clamp_len
        self.same_length, self.mem_len, self.reuse_len = same_length, mem_len, reuse_len
        self.empty_row_policy = empty_row_policy
        self.word_embedding = nn.Embedding(vocab_size, d_model)
        self.mask_emb = nn.Parameter(torch.empty(1, 1, d_model))
        shared = None if untie_r else tuple(nn.Parameter(torch.empty(n_head, d_head)) for _ in range(3))
        inner = dropout if ff_inner_dropout is None else ff_inner_dropout
        self.layer = nn.ModuleList(
            XLNetLayer(
                TwoStreamRelAttention(d_model, n_head, d_head, dropout, dropatt, layer_norm_eps, shared),
                XLNetFeedForward(d_model, d_inner, dropout, inner, ff_activation, layer_norm_eps),
            )
            for _ in range(n_layer)
        )
        self.dropout = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, init_std) for embeddings, projections, r/s biases, seg_embed, FF kernels; zero biases;
        LayerNorm (1, 0), as the authors' code."""
        std = self.init_std
        nn.init.normal_(self.word_embedding.weight, std=std)
        nn.init.normal_(self.mask_emb, std=std)
        for layer in self.layer:
            a = layer.rel_attn
            for p in (a.q, a.k, a.v, a.o, a.r, a.r_w_bias, a.r_r_bias, a.r_s_bias, a.seg_embed):
                nn.init.normal_(p, std=std)
            for lin in (layer.ff.layer_1, layer.ff.layer_2):
                nn.init.normal_(lin.weight, std=std)
                nn.init.zeros_(lin.bias)
            for ln in (a.layer_norm, layer.ff.layer_norm):
                nn.init.ones_(ln.weight)
                nn.init.zeros_(ln.bias)

    def init_memory(self, batch_size: int, device: torch.device | None = None) -> list[Tensor]:
        """Official initial memory: zeros of full length mem_len per layer (the authors' code, ``mem_init: zeros``); an
        unbounded memory (``mem_len=None``) starts empty. In the parameters' dtype (the residual stream's)."""
        dtype = self.mask_emb.dtype
        return [torch.zeros(batch_size, self.mem_len or 0, self.d_model, device=device, dtype=dtype)
                for _ in range(self.n_layer)]

    # --- per-forward precomputation -------------------------------------------------------------------------

    def _positional(self, qlen: int, klen: int, bsz: int, device: torch.device) -> Tensor:
        """Sinusoids for distances [K..-T+1], [n_dir, K+T, d]; backward half uses negated distances."""
        if self.bi_data and bsz % 2:
            raise ConfigError(f"model.bi_data=true needs an even batch [forward; backward], got batch {bsz}")
        pos = relative_positions(klen, qlen, bidirectional=True, device=device)
        seqs = [pos, -pos] if self.bi_data else [pos]
        if self.clamp_len > 0:
            seqs = [s.clamp(-self.clamp_len, self.clamp_len) for s in seqs]
        return torch.stack([sinusoid_table(s, self.d_model) for s in seqs])

    def _query_mask(self, qlen: int, mlen: int, bsz: int, input_mask: Tensor | None, perm_mask: Tensor | None,
                    device: torch.device) -> Tensor | None:
        """Boolean blocked mask [B, T, K] of the query stream (the authors' ``_local_perm``), or None if nothing is
        blocked."""
        mask = None
        if self.attn_type == "uni":
            i = torch.arange(qlen, device=device)[:, None]
            j = torch.arange(mlen + qlen, device=device)[None, :]
            mask = j > mlen + i
            if self.same_length:
                mask = mask | (j < i)
            mask = mask[None].expand(bsz, -1, -1)
        data = None
        if input_mask is not None:
            data = input_mask[:, None, :] > 0
        if perm_mask is not None:
            data = perm_mask > 0 if data is None else data | (perm_mask > 0)
        if data is not None:
            data = F.pad(data.expand(bsz, qlen, qlen), (mlen, 0), value=False)
            mask = data if mask is None else mask | data
        return mask

    def _context(self, input_ids: Tensor, token_type_ids: Tensor | None, input_mask: Tensor | None,
                 perm_mask: Tensor | None, target_mapping: Tensor | None, mlen: int, dtype: torch.dtype
                 ) -> StreamContext:
        bsz, qlen = input_ids.shape
        klen, device = mlen + qlen, input_ids.device

        blocked_g = self._query_mask(qlen, mlen, bsz, input_mask, perm_mask, device)
        mask_h = mask_g = None
        if blocked_g is not None:
            eye = F.pad(torch.eye(qlen, dtype=torch.bool, device=device), (mlen, 0), value=False)
            blocked_h = blocked_g & ~eye
            fill = max(MASK_FILL, torch.finfo(dtype).min)  # -1e30 overflows fp16
            mask_h = torch.zeros(blocked_h.shape, dtype=dtype, device=device).masked_fill_(blocked_h, fill)
            mask_g = torch.zeros(blocked_g.shape, dtype=dtype, device=device).masked_fill_(blocked_g, fill)
            mask_h, mask_g = mask_h[:, None], mask_g[:, None]

        seg_h = None
        if token_type_ids is not None:
            cat = F.pad(token_type_ids, (mlen, 0), value=0)  # memory has segment id 0
            seg_h = (token_type_ids[:, :, None] != cat[:, None, :]).to(dtype)[:, None]

        seg_g = slot_index = slot_valid = None
        if target_mapping is not None:
            if not (((target_mapping == 0) | (target_mapping == 1)).all() and (target_mapping.sum(-1) <= 1).all()):
                raise ValueError("target_mapping rows must be one-hot or all zero (padding slots)")
            pos = target_mapping.argmax(-1)  # [B, P]
            valid = target_mapping.sum(-1) > 0
            slot_index = (qlen - pos)[:, None, :, None] + torch.arange(klen, device=device)
            rows = pos[:, None, :, None].expand(-1, 1, -1, klen)
            if mask_g is not None:
                if self.empty_row_policy == "zero":  # a slot that sees no key gets a zero attention vector
                    valid = valid & ~blocked_g.gather(1, rows[:, 0]).all(-1)
                mask_g = mask_g.gather(2, rows)
            slot_valid = valid.to(dtype)[:, None, :, None]
            if seg_h is not None:
                seg_g = seg_h.gather(2, rows)

        pos_emb = self.dropout(self._positional(qlen, klen, bsz, device).to(dtype))
        return StreamContext(pos_emb, mask_h, mask_g, seg_h, seg_g, slot_index, slot_valid)

    @property
    def keeps_memory(self) -> bool:
        return self.mem_len is None or self.mem_len > 0

    def _cache(self, h: Tensor, mem: Tensor | None, reuse_len: int | None) -> Tensor:
        """new_mem = stopgrad(concat(mem, h[:reuse_len])[-mem_len:]) (XLNet paper §2.4); all of it for mem_len=None."""
        cur = h if reuse_len is None or reuse_len <= 0 else h[:, :reuse_len]
        cat = cur if mem is None or mem.shape[1] == 0 else torch.cat([mem, cur], dim=1)
        return (cat if self.mem_len is None else cat[:, -self.mem_len:]).detach()

    # --- forward ---------------------------------------------------------------------------------------------

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,
        input_mask: Tensor | None = None,
        perm_mask: Tensor | None = None,
        target_mapping: Tensor | None = None,
        memory: list[Tensor] | None = None,
        reuse_len: int | None = None,
        inp_q: Tensor | None = None,
    ) -> XLNetOutput:
        """``inp_q`` [B, T] (1 = target) selects the official full-length query stream instead of
        target_mapping: a query slot at every position with ``g⁰ = w`` at targets and ``E[x]`` elsewhere."""
        if inp_q is not None and target_mapping is not None:
            raise ValueError("pass either target_mapping or inp_q, not both")
        if inp_q is not None:
            eye = torch.eye(input_ids.shape[1], dtype=self.word_embedding.weight.dtype, device=input_ids.device)
            target_mapping = eye.expand(input_ids.shape[0], -1, -1)
        if memory is not None and len(memory) != self.n_layer:
            raise ValueError(f"memory has {len(memory)} tensors, the model has {self.n_layer} layers")
        mlen = 0 if memory is None else memory[0].shape[1]
        dtype = self.word_embedding.weight.dtype
        ctx = self._context(input_ids, token_type_ids, input_mask, perm_mask, target_mapping, mlen, dtype)

        emb = self.word_embedding(input_ids)
        h = self.dropout(emb)
        g = None
        if inp_q is not None:
            sel = inp_q[..., None].to(emb.dtype)
            g = self.dropout(sel * self.mask_emb + (1 - sel) * emb)
        elif target_mapping is not None:
            g = self.dropout(self.mask_emb.expand(input_ids.shape[0], target_mapping.shape[1], -1))

        new_memory: list[Tensor] | None = [] if self.keeps_memory else None
        reuse_len = self.reuse_len if reuse_len is None else reuse_len
        for i, layer in enumerate(self.layer):
            mem = None if memory is None or mlen == 0 else memory[i]
            if new_memory is not None:
                new_memory.append(self._cache(h, mem, reuse_len))
            h, g = layer(h, g, mem, ctx)

        output = self.dropout(h if g is None else g)
        return XLNetOutput(hidden=h, query_hidden=g, output=output, memory=new_memory)


class XLNetLMHeadModel(nn.Module):
    """XLNet backbone + tied softmax ``logits = dropout(g or h) Eᵀ + b`` (XLNet paper Eq. (4)). ``hidden_states`` and
    ``lm_logits`` split the two, for objectives that score only some positions (the DAE baseline)."""

    forward_methods = ("hidden_states", "lm_logits")  # entry points besides forward (genlab.parallel)

    def __init__(
        self,
        vocab_size: int,
        n_layer: int = 12,
        d_model: int = 768,
        n_head: int = 12,
        d_head: int = 64,
        d_inner: int = 3072,
        ff_activation: str = "gelu_tanh",
        untie_r: bool = True,
        dropout: float = 0.1,
        dropatt: float = 0.1,
        ff_inner_dropout: float | None = None,
        init_std: float = 0.02,
        layer_norm_eps: float = 1e-12,
        attn_type: str = "bi",
        bi_data: bool = False,
        clamp_len: int = -1,
        same_length: bool = False,
        mem_len: int | None = 0,
        empty_row_policy: str = "uniform",
        reuse_len: int | None = None,
    ) -> None:
        super().__init__()
        self.transformer = XLNetModel(
            vocab_size, n_layer, d_model, n_head, d_head, d_inner, ff_activation, untie_r, dropout, dropatt,
            ff_inner_dropout, init_std, layer_norm_eps, attn_type, bi_data, clamp_len, same_length, mem_len,
            empty_row_policy, reuse_len,
        )
        self.lm_loss = nn.Linear(self.transformer.d_model, vocab_size, bias=True)
        self.lm_loss.weight = self.transformer.word_embedding.weight  # tied (same tensor)
        nn.init.zeros_(self.lm_loss.bias)

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,
        input_mask: Tensor | None = None,
        perm_mask: Tensor | None = None,
        target_mapping: Tensor | None = None,
        memory: list[Tensor] | None = None,
        reuse_len: int | None = None,
        inp_q: Tensor | None = None,
    ) -> XLNetOutput:
        out = self.hidden_states(input_ids, token_type_ids, input_mask, perm_mask, target_mapping, memory, reuse_len,
                                 inp_q)
        out.logits = self.lm_logits(out.output)
        return out

    def hidden_states(self, *args, **kwargs) -> XLNetOutput:
        """The backbone's outputs without the softmax (arguments as :meth:`forward`)."""
        return self.transformer(*args, **kwargs)

    def lm_logits(self, hidden: Tensor) -> Tensor:
        logits = self.lm_loss(hidden)  # a view of the 2-D GEMM output for 3-D hidden states
        return output_view(logits, logits.shape)


def plm_loss(logits: Tensor, target: Tensor, target_weight: Tensor) -> Tensor:
    """Mean cross-entropy over real targets: ``Σ CE·w / Σ w`` (partial prediction, XLNet paper Eq. (5)); padding slots
    have weight 0."""
    flat = logits.flatten(0, -2)
    if flat.dtype in (torch.float16, torch.bfloat16):  # CE in fp32 for low-precision logits
        flat = flat.float()
    ce = F.cross_entropy(flat, target.flatten(), reduction="none")
    w = target_weight.flatten().to(ce.dtype)
    den = w.sum()
    return (ce * w).sum() / den.clamp_min(torch.finfo(ce.dtype).tiny)


def count_params(model: nn.Module) -> int:
    """Distinct parameters (tied tensors counted once)."""
    return sum(p.numel() for p in model.parameters())


__all__ = ["XLNetModel", "XLNetLMHeadModel", "XLNetOutput", "plm_loss", "count_params"]
