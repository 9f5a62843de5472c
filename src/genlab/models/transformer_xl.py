"""Transformer-XL language model: segment recurrence + relative positional attention (Dai thesis
§3.2; Yang thesis §2.1.3; details from the authors' code, kimiyoung/transformer-xl).

Batch-major at the API and inside: hidden states [B, T, d]. ``memory`` is a list of N detached tensors
[B, M_cur, d], entry l being the input of layer l (entry 0 = the embedding after dropout). The vanilla
(Al-Rfou) baseline is this class with ``attn_type="abs_learned"`` and ``mem_len=0``.

Evaluation knobs ``mem_len``, ``clamp_len``, ``same_length``, ``ext_len`` are plain attributes the LM task
may override between calls.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genlab.errors import ConfigError
from genlab.models.lm_output import LMOutput
from genlab.nn.adaptive_embedding import AdaptiveEmbedding
from genlab.nn.adaptive_softmax import ProjectedAdaptiveLogSoftmax
from genlab.nn.positional import relative_positions, sinusoid_table
from genlab.nn.relative_attention import (
    ATTN_IMPLS,
    SAME_LENGTH_VARIANTS,
    AbsoluteAttention,
    RelPartialLearnableAttention,
    ShawRelativeAttention,
    attention_mask,
    flex_block_mask,
)
from genlab.nn.views import output_view

ATTN_TYPES = ("rel", "shaw", "abs_sinusoid", "abs_learned")
INIT_MEMS = ("empty", "zeros")
Memory = list[Tensor]


class PositionwiseFF(nn.Module):
    """ReLU feed-forward with residual and LayerNorm (post-LN, or pre-LN with a plain residual)."""

    def __init__(self, d_model: int, d_inner: int, dropout: float, pre_lnorm: bool, ln_eps: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_inner)
        self.fc2 = nn.Linear(d_inner, d_model)
        self.norm = nn.LayerNorm(d_model, eps=ln_eps)
        self.drop = nn.Dropout(dropout)
        self.pre_lnorm = pre_lnorm

    def forward(self, h: Tensor) -> Tensor:
        x = self.norm(h) if self.pre_lnorm else h
        out = self.drop(self.fc2(self.drop(F.relu(self.fc1(x)))))
        return h + out if self.pre_lnorm else self.norm(h + out)


class TXLLayer(nn.Module):
    """One block: attention over [mem; h], then the feed-forward. Its own forward so that per-block wrappers
    (FSDP2 ``fully_shard``, activation checkpointing, regional ``torch.compile``) hook one call per layer."""

    def __init__(self, attn: nn.Module, ff: PositionwiseFF) -> None:
        super().__init__()
        self.attn = attn
        self.ff = ff

    def forward(self, h: Tensor, *attn_args) -> Tensor:
        return self.ff(self.attn(h, *attn_args))


class TransformerXL(nn.Module):
    """Decoder-only LM over [memory; segment]; see the module docstring and docs/systems/transformer_xl.md for the
    defaults."""

    block_classes = (TXLLayer,)  # what genlab.parallel shards / checkpoints / compiles one by one

    def __init__(
        self,
        vocab_size: int,
        n_layer: int = 16,
        d_model: int = 410,
        n_head: int = 10,
        d_head: int = 41,
        d_inner: int = 2100,
        d_embed: int | None = None,
        dropout: float = 0.1,
        dropatt: float = 0.0,
        mem_len: int = 150,
        ext_len: int = 0,
        clamp_len: int = -1,
        same_length: bool = False,
        same_length_variant: str = "tf",
        init_mem: str = "empty",
        attn_type: str = "rel",
        shaw_bias_terms: bool = True,
        untie_r: bool = False,
        pre_lnorm: bool = False,
        ln_eps: float = 1e-5,
        tie_weight: bool = True,
        cutoffs: list[int] | None = None,
        div_val: int = 1,
        tie_projs: list[bool] | None = None,
        proj_same_dim: bool = True,
        init_std: float = 0.02,
        proj_init_std: float = 0.01,
        ln_gain_noise: bool = True,
        max_len: int = 512,
        attn_impl: str = "sdpa",
    ) -> None:
        super().__init__()
        cutoffs = list(cutoffs or [])
        n_bins = len(cutoffs) + 1
        tie_projs = list(tie_projs if tie_projs is not None else [False])
        if attn_type not in ATTN_TYPES:
            raise ConfigError(f"model.attn_type={attn_type!r} is unknown; use one of {ATTN_TYPES}")
        if init_mem not in INIT_MEMS:
            raise ConfigError(f"model.init_mem={init_mem!r} is unknown; use one of {INIT_MEMS}")
        if same_length_variant not in SAME_LENGTH_VARIANTS:
            raise ConfigError(
                f"model.same_length_variant={same_length_variant!r} is unknown; use one of {SAME_LENGTH_VARIANTS}"
            )
        if attn_impl not in ATTN_IMPLS:
            raise ConfigError(f"model.attn_impl={attn_impl!r} is unknown; use one of {ATTN_IMPLS}")
        if attn_impl == "flex" and (attn_type != "rel" or dropatt > 0):
            raise ConfigError(f"model.attn_impl=flex needs attn_type=rel and dropatt=0 (got {attn_type!r}, "
                              f"{dropatt}); use model.attn_impl=sdpa")
        if len(tie_projs) > n_bins:
            raise ConfigError(f"model.tie_projs has {len(tie_projs)} entries but cutoffs give {n_bins} bins")
        if any(c >= vocab_size for c in cutoffs) or sorted(set(cutoffs)) != cutoffs:
            raise ConfigError(f"model.cutoffs={cutoffs} must be increasing and below vocab_size={vocab_size}")
        if d_model % 2:
            raise ConfigError(f"model.d_model={d_model} must be even (sinusoid positions)")
        # architecture hyper-parameters, kept for checkpoint export (genlab.interop.hf_transfo_xl)
        self.arch = dict(d_inner=d_inner, dropout=dropout, dropatt=dropatt, untie_r=untie_r, pre_lnorm=pre_lnorm,
                         ln_eps=ln_eps, tie_weight=tie_weight, cutoffs=cutoffs, div_val=div_val,
                         tie_projs=tie_projs + [False] * (n_bins - len(tie_projs)), proj_same_dim=proj_same_dim)
        self.vocab_size, self.n_layer, self.d_model = vocab_size, n_layer, d_model
        self.n_head, self.d_head = n_head, d_head
        self.d_embed = d_embed or d_model
        self.attn_type, self.attn_impl = attn_type, attn_impl
        self.mem_len, self.ext_len, self.clamp_len = mem_len, ext_len, clamp_len
        self.same_length, self.same_length_variant, self.init_mem = same_length, same_length_variant, init_mem
        self.max_len = max_len
        self.init_std, self.proj_init_std, self.ln_gain_noise = init_std, proj_init_std, ln_gain_noise

        self.word_emb = AdaptiveEmbedding(vocab_size, self.d_embed, d_model, cutoffs, div_val, proj_same_dim)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList()
        for _ in range(n_layer):
            if attn_type == "rel":
                attn: nn.Module = RelPartialLearnableAttention(
                    d_model, n_head, d_head, dropout, dropatt, pre_lnorm, ln_eps, own_biases=untie_r,
                    attn_impl=attn_impl)
            elif attn_type == "shaw":
                attn = ShawRelativeAttention(d_model, n_head, d_head, max_len, dropout, dropatt, pre_lnorm,
                                             ln_eps, bias_terms=shaw_bias_terms, attn_impl=attn_impl)
            else:
                attn = AbsoluteAttention(d_model, n_head, d_head, dropout, dropatt, pre_lnorm, ln_eps, attn_impl)
            self.layers.append(TXLLayer(attn, PositionwiseFF(d_model, d_inner, dropout, pre_lnorm, ln_eps)))
        if attn_type == "rel" and not untie_r:  # u, v shared by every layer (official PyTorch code)
            self.u = nn.Parameter(torch.zeros(n_head, d_head))
            self.v = nn.Parameter(torch.zeros(n_head, d_head))
        else:
            self.u = self.v = None
        if attn_type == "abs_learned":  # Al-Rfou: learnable absolute positions added to every layer's input
            self.pos_tables = nn.Parameter(torch.zeros(n_layer, max_len, d_model))

        self.crit = ProjectedAdaptiveLogSoftmax(vocab_size, self.d_embed, d_model, cutoffs, div_val, proj_same_dim)
        self.reset_parameters()
        if tie_weight:  # output tables share storage with the input tables, bin by bin
            for i in range(len(self.crit.weights)):
                self.crit.weights[i] = self.word_emb.tables[i].weight
        for i, tie in enumerate(tie_projs):
            src = self.word_emb.proj(0 if div_val == 1 else i)
            if tie and src is not None and self.crit.proj(i) is not None:
                self.crit.projs[str(i)] = src

    # ------------------------------------------------------------------ init
    def reset_parameters(self) -> None:
        """The authors' ``weights_init`` (PyTorch ``--init normal``): N(0, init_std) weights, N(0, proj_init_std)
        projections, zero biases, LayerNorm gain N(1, init_std) (the code's quirk; ``ln_gain_noise=False`` gives 1)."""
        std = self.init_std
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0, std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, std)
            elif isinstance(module, nn.LayerNorm):
                if self.ln_gain_noise:
                    nn.init.normal_(module.weight, 1.0, std)
                else:
                    nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if ".projs." in name:
                nn.init.normal_(p, 0.0, self.proj_init_std)
            elif name.startswith("crit.weights") or leaf in ("u", "v", "r_emb", "cluster_weight", "pos_tables"):
                nn.init.normal_(p, 0.0, std)
            elif name.startswith("crit.biases") or leaf in ("cluster_bias", "r_bias"):
                nn.init.zeros_(p)

    def num_parameters(self) -> int:
        """Unique parameters (tied tensors counted once)."""
        seen: set[int] = set()
        total = 0
        for p in self.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
        return total

    def flops_per_token(self, seq_len: int) -> float:
        """Training matmul FLOPs per predicted token for segments of ``seq_len`` after a full memory, for MFU:
        3 x forward (forward, input and weight gradients) for q|k|v of the new rows, the content, position and
        value terms over K = seq_len + mem_len keys, output and feed-forward; 2 x forward for the memory rows'
        k|v (detached: no input gradient); plus the output layer counted dense (exact without cutoffs, an upper
        bound with adaptive clusters). The once-per-batch position projection is left out (shared by the
        batch)."""
        d, hd = self.d_model, self.n_head * self.d_head
        d_inner = self.layers[0].ff.fc1.out_features
        klen = seq_len + self.mem_len
        score_terms = 2 if self.attn_type == "abs_sinusoid" or self.attn_type == "abs_learned" else 3
        per_layer = 2 * d * 3 * hd + score_terms * 2 * hd * klen + 2 * hd * d + 4 * d * d_inner
        memory_kv = 2 * d * 2 * hd * self.mem_len / seq_len
        head = 2 * sum(p.numel() for p in self.crit.parameters() if p.dim() == 2)
        return 3.0 * (self.n_layer * per_layer + head) + 2.0 * self.n_layer * memory_kv

    # ------------------------------------------------------------------ core
    def position_embeddings(self, klen: int, device: torch.device | None = None) -> Tensor:
        """R for distances [K-1, ..., 0] (clamped at ``clamp_len``), always built in fp32 (bf16 would merge
        positions)."""
        pos = relative_positions(klen, clamp_len=self.clamp_len, device=device)
        return sinusoid_table(pos, self.d_model)

    def _initial_memory(self, batch: int, ref: Tensor, memory: Memory | None) -> Memory | None:
        if memory:
            return list(memory)
        if self.init_mem == "zeros" and self.mem_len > 0:  # TF/HF: M unmasked zero states
            z = ref.new_zeros(batch, self.mem_len, self.d_model)
            return [z] * self.n_layer
        return None

    def _learned_positions(self, layer: int, klen: int) -> Tensor:
        """Rows of the layer's absolute table for the K window positions (distance to the window end)."""
        dist = torch.arange(klen - 1, -1, -1, device=self.pos_tables.device)
        cap = self.max_len if self.clamp_len <= 0 else min(self.max_len, self.clamp_len)
        return self.pos_tables[layer, self.max_len - 1 - dist.clamp(max=cap - 1)]

    def hidden_states(self, input_ids: Tensor, memory: Memory | None = None) -> tuple[Tensor, Memory]:
        """Final hidden states [B, T, d] (before the output dropout) and the updated memory."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [B, T], got shape {tuple(input_ids.shape)}")
        bsz, qlen = input_ids.shape
        emb = self.word_emb(input_ids)
        mems = self._initial_memory(bsz, emb, memory)
        mlen = mems[0].size(1) if mems else 0
        klen = mlen + qlen
        mask = attention_mask(qlen, mlen, same_length=self.same_length, mem_len=self.mem_len,
                              variant=self.same_length_variant, device=input_ids.device)
        act_dtype = emb.dtype
        hids: list[Tensor] = []
        if self.attn_type == "rel":
            r = self.drop(self.position_embeddings(klen, input_ids.device).to(act_dtype))  # once per forward
            if self.attn_impl == "flex":
                mask = flex_block_mask(mask)  # once per forward, shared by every layer
            core = self.drop(emb)
            for i, layer in enumerate(self.layers):
                hids.append(core)
                core = layer(core, r, mask, mems[i] if mems else None, self.u, self.v)
        elif self.attn_type == "abs_sinusoid":
            pe = self.position_embeddings(klen, input_ids.device).to(act_dtype)
            core = self.drop(emb + pe[mlen:])
            for i, layer in enumerate(self.layers):
                hids.append(core)
                mem_i = mems[i] if mems else None
                if i == 0 and mem_i is not None:  # window positions on top of the cached ones, on a copy
                    mem_i = mem_i + pe[:mlen]
                core = layer(core, mask, mem_i)
        elif self.attn_type == "abs_learned":
            core = self.drop(emb)
            for i, layer in enumerate(self.layers):
                hids.append(core)
                pos = self._learned_positions(i, klen).to(act_dtype)
                mem_i = mems[i] + pos[:mlen] if mems else None
                core = layer(core + pos[mlen:], mask, mem_i)
        else:  # shaw
            core = self.drop(emb)
            for i, layer in enumerate(self.layers):
                hids.append(core)
                core = layer(core, mask, mems[i] if mems else None, self.clamp_len)
        return core, self._update_memory(hids, mems, mlen, qlen)

    @torch.no_grad()
    def _update_memory(self, hids: list[Tensor], mems: Memory | None, mlen: int, qlen: int) -> Memory:
        """new_mem[l] = concat(mem[l], hids[l])[beg:end], end = M_cur + T - ext_len, beg = max(0, end - M)."""
        end = mlen + qlen - self.ext_len
        beg = max(0, end - self.mem_len)
        if beg >= mlen:  # the window lies in the new segment (mem_len <= tgt_len, as in training): no concat
            return [h[:, beg - mlen:end - mlen].detach() for h in hids]
        return [torch.cat([mems[i], h], dim=1)[:, beg:end].detach() for i, h in enumerate(hids)]

    def _predicted(self, input_ids: Tensor, memory: Memory | None) -> tuple[Tensor, Memory]:
        hidden, new_mem = self.hidden_states(input_ids, memory)
        tgt_len = input_ids.size(1) - self.ext_len
        if tgt_len <= 0:
            raise ConfigError(f"model.ext_len={self.ext_len} leaves nothing to predict in a batch of "
                              f"{input_ids.size(1)} tokens; make ext_len smaller than the segment length")
        return self.drop(hidden[:, -tgt_len:]), new_mem

    def forward(self, input_ids: Tensor, target: Tensor | None = None, memory: Memory | None = None) -> LMOutput:
        """NLL [B, T'] of ``target`` for the last T' = T - ext_len positions (a [B, T] target is cut to T')."""
        pred, new_mem = self._predicted(input_ids, memory)
        nll = None
        if target is not None:
            bsz, tgt_len = pred.shape[:2]
            if target.size(1) != tgt_len:
                target = target[:, -tgt_len:]
            nll = output_view(self.crit(pred.reshape(bsz * tgt_len, -1), target.reshape(-1)), (bsz, tgt_len))
        return LMOutput(nll=nll, memory=new_mem, logits=None)

    def log_probs(self, input_ids: Tensor, memory: Memory | None = None) -> tuple[Tensor, Memory]:
        """Full fp32 log-probability table [B, T', V] and the updated memory."""
        pred, new_mem = self._predicted(input_ids, memory)
        bsz, tgt_len = pred.shape[:2]
        return self.crit.log_prob(pred.reshape(bsz * tgt_len, -1)).view(bsz, tgt_len, -1), new_mem

    @torch.no_grad()
    def generate(self, context: Tensor, n_tokens: int, top_k: int = 40,
                 generator: torch.Generator | None = None) -> Tensor:
        """Top-k sampling (the generated text of Yang thesis §2.1.4, Tables 2.11-2.13): the context is one segment, then
        one token per step reusing memory.

        Without memory (``mem_len == 0``) the last ``max_len`` tokens are recomputed at every step.
        Returns the sampled ids [B, n_tokens].
        """
        was_training, ext_len = self.training, self.ext_len
        self.eval()
        self.ext_len = 0
        try:
            window = context
            logp, mem = self.log_probs(context)
            out = []
            for _ in range(n_tokens):
                top, idx = logp[:, -1].topk(min(top_k, self.vocab_size), dim=-1)
                pick = torch.multinomial(top.softmax(-1), 1, generator=generator)
                tok = idx.gather(1, pick)
                out.append(tok)
                if self.mem_len > 0:
                    logp, mem = self.log_probs(tok, mem)
                else:
                    window = torch.cat([window, tok], dim=1)[:, -self.max_len:]
                    logp, _ = self.log_probs(window)
            return torch.cat(out, dim=1)
        finally:
            self.ext_len = ext_len
            self.train(was_training)
