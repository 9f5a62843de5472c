"""GPT-1: the decoder-only, post-LayerNorm Transformer LM of Radford et al. 2018 (§3.1, eq. (2)), and its
finetuning heads (§3.2-§3.3).

    h_0 = dropout(W_e[U] + W_p[0..T-1])
    h_l = block(h_l-1),  block(x): n = LN_1(x + drop(attn(x))); h = LN_2(n + drop(W_proj gelu(W_fc n)))
    logits = h_L W_eᵀ                      (tied, no bias, no final LayerNorm)

Interface (batch-major; any leading dims ``...`` such as ``[B, K]`` for K choices are flattened and restored)::

    out = model(input_ids [..., T], attention_mask [..., T] (1 = real) | None)
    out.hidden          # [..., T, d] final states
    model.lm_logits(h [..., d], out, special_rows=True) -> [..., R]   tied softmax logits
    model.lm_nll(h [N, d], target [N], out, special_rows=True) -> [N]  fp32 NLL under those logits (fused)

Right padding needs no mask: attention is causal, so real positions (and the extract token ``<e>``, the last real
one) never see padding. ``attention_mask`` is there for left padding or other layouts.

Vocabulary: rows ``0 .. vocab_size−1`` are ordinary tokens, ``vocab_size .. vocab_size+n_special−1`` the
finetuning specials ``<s> $ <e>`` (paper §3.3: new ids, N(0, 0.02)). Pretraining predicts ordinary tokens only
(``special_rows=False``), so one model config serves both phases and a pretrained checkpoint loads shape for shape.

Parameter names follow Hugging Face ``OpenAIGPTLMHeadModel`` (``transformer.tokens_embed``, ``transformer.h.<i>.ln_1``
...) except the fused attention (``attn.qkv`` / ``attn.proj`` of genlab.nn.attention, HF ``c_attn`` / ``c_proj``) and
the MLP linears, which are ``nn.Linear`` ([out, in]) where HF's ``Conv1D`` stores [in, out]: genlab.interop.hf_gpt
renames and transposes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genlab.errors import CheckpointError, ConfigError
from genlab.models.heads import ClassificationHead, MultipleChoiceHead
from genlab.nn.attention import MultiHeadSelfAttention
from genlab.nn.linear_cross_entropy import linear_cross_entropy
from genlab.nn.views import output_view


def gelu_tanh(x: Tensor) -> Tensor:
    """The release's GELU ``0.5x(1+tanh(√(2/π)(x+0.044715x³)))`` (HF ``gelu``/``gelu_new``); a named function,
    so models pickle."""
    return F.gelu(x, approximate="tanh")


ACTIVATIONS = {"gelu_tanh": gelu_tanh, "gelu": F.gelu, "relu": F.relu, "silu": F.silu}


@dataclass
class GPTOutput:
    hidden: Tensor         # [..., T, d] last block's output
    # The dropped matrices this forward looked up (training with embd_dropout_on_matrix), which the tied softmax
    # must reuse; None when it used the parameters themselves: lm_logits then reads its own (gathered) parameters,
    # since a sharded model frees the gathered copy once forward returns.
    token_rows: Tensor | None = None     # [vocab_size + n_special, d]
    position_rows: Tensor | None = None  # [n_positions, d]


class GPTMLP(nn.Module):
    def __init__(self, d_model: int, d_inner: int, afn: str):
        super().__init__()
        self.c_fc = nn.Linear(d_model, d_inner)
        self.c_proj = nn.Linear(d_inner, d_model)
        self.act = ACTIVATIONS[afn]

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class GPTBlock(nn.Module):
    """Post-LN block (original Transformer order, not GPT-2's pre-LN)."""

    def __init__(self, d_model: int, n_head: int, d_inner: int, afn: str, resid_pdrop: float, attn_pdrop: float,
                 eps: float):
        super().__init__()
        self.attn = MultiHeadSelfAttention(d_model, n_head, attn_pdrop, causal=True)
        self.ln_1 = nn.LayerNorm(d_model, eps=eps)
        self.mlp = GPTMLP(d_model, d_inner, afn)
        self.ln_2 = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(resid_pdrop)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        n = self.ln_1(x + self.dropout(self.attn(x, key_padding_mask)))
        return self.ln_2(n + self.dropout(self.mlp(n)))


class GPTModel(nn.Module):
    """Embeddings + ``n_layer`` blocks (HF ``OpenAIGPTModel``)."""

    block_classes = (GPTBlock,)

    def __init__(self, vocab_size: int, n_special: int, n_positions: int, n_embd: int, n_layer: int, n_head: int,
                 n_inner: int, afn: str, resid_pdrop: float, embd_pdrop: float, attn_pdrop: float,
                 layer_norm_eps: float, embd_dropout_on_matrix: bool):
        super().__init__()
        self.n_positions, self.embd_dropout_on_matrix = n_positions, embd_dropout_on_matrix
        self.tokens_embed = nn.Embedding(vocab_size + n_special, n_embd)
        self.positions_embed = nn.Embedding(n_positions, n_embd)
        self.drop = nn.Dropout(embd_pdrop)
        self.h = nn.ModuleList(GPTBlock(n_embd, n_head, n_inner, afn, resid_pdrop, attn_pdrop, layer_norm_eps)
                               for _ in range(n_layer))

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> GPTOutput:
        """``token_type_ids`` (optional, HF ``OpenAIGPTModel``'s input): ids looked up in the token embedding itself
        and added to the input, as HF does (GPT-1 has no separate segment table)."""
        *lead, t = input_ids.shape
        if t > self.n_positions:
            raise ConfigError(f"sequence length {t} exceeds model.n_positions={self.n_positions}; shorten the "
                              "inputs (data.max_seq_len) or raise model.n_positions.")
        ids = input_ids.reshape(-1, t)
        mask = None if attention_mask is None else attention_mask.reshape(-1, t)
        tokens, positions = self.tokens_embed.weight, self.positions_embed.weight
        dropped = self.embd_dropout_on_matrix and self.training
        if dropped:  # release: dropout on the matrix itself, one mask per row for the batch
            tokens, positions = self.drop(tokens), self.drop(positions)
        x = F.embedding(ids, tokens) + positions[:t]
        if token_type_ids is not None:
            x = x + F.embedding(token_type_ids.reshape(-1, t), tokens)
        if not dropped:  # HF: dropout on the summed activations
            x = self.drop(x)
        for block in self.h:
            x = block(x, mask)
        x = output_view(x, (*lead, t, x.shape[-1]))
        return GPTOutput(x) if not dropped else GPTOutput(x, tokens, positions)


class GPTLMHeadModel(nn.Module):
    """GPT-1 with its tied LM head (HF ``OpenAIGPTLMHeadModel``). Paper defaults: 12 x 768, 12 heads, 3072 inner,
    512 learned positions, tanh GELU, dropout 0.1 everywhere, LayerNorm eps 1e-5, N(0, 0.02) init (paper §4.1).

    ``n_special`` rows for ``<s> $ <e>`` follow the ``vocab_size`` ordinary tokens. ``embd_dropout_on_matrix``
    and ``lm_softmax_includes_positions`` reproduce the release (openai/finetune-transformer-lm); both are off by
    default (HF layout) and change nothing in eval mode / for the ordinary-token logits respectively."""

    block_classes = (GPTBlock,)
    forward_methods = ("lm_logits", "lm_nll")  # entry points besides forward (genlab.parallel gathers the tied W)

    def __init__(
        self,
        vocab_size: int,
        n_special: int = 0,
        n_positions: int = 512,
        n_embd: int = 768,
        n_layer: int = 12,
        n_head: int = 12,
        n_inner: int | None = None,
        afn: str = "gelu_tanh",
        resid_pdrop: float = 0.1,
        embd_pdrop: float = 0.1,
        attn_pdrop: float = 0.1,
        layer_norm_eps: float = 1e-5,
        init_std: float = 0.02,
        embd_dropout_on_matrix: bool = False,
        lm_softmax_includes_positions: bool = False,
    ):
        super().__init__()
        if n_embd % n_head:
            raise ConfigError(f"model.n_embd={n_embd} must be divisible by model.n_head={n_head}.")
        if afn not in ACTIVATIONS:
            raise ConfigError(f"model.afn={afn!r} is unknown; use one of {sorted(ACTIVATIONS)}.")
        if vocab_size < 1 or n_special < 0:
            raise ConfigError(f"model.vocab_size={vocab_size} / model.n_special={n_special}: need >= 1 / >= 0.")
        n_inner = 4 * n_embd if n_inner is None else n_inner
        self.vocab_size, self.n_special, self.n_embd, self.n_layer = vocab_size, n_special, n_embd, n_layer
        self.init_std, self.lm_softmax_includes_positions = init_std, lm_softmax_includes_positions
        # constructor sizes, for checkpoint import/export (genlab.interop.hf_gpt) and architecture checks
        self.arch = dict(vocab_size=vocab_size, n_special=n_special, n_positions=n_positions, n_embd=n_embd,
                         n_layer=n_layer, n_head=n_head, n_inner=n_inner, afn=afn, resid_pdrop=resid_pdrop,
                         embd_pdrop=embd_pdrop, attn_pdrop=attn_pdrop, layer_norm_eps=layer_norm_eps,
                         init_std=init_std)
        self.transformer = GPTModel(vocab_size, n_special, n_positions, n_embd, n_layer, n_head, n_inner, afn,
                                    resid_pdrop, embd_pdrop, attn_pdrop, layer_norm_eps, embd_dropout_on_matrix)
        self.apply(self._init)

    def _init(self, m: nn.Module) -> None:
        """N(0, init_std) for every weight matrix and embedding, zero biases, LayerNorm (1, 0) (paper §4.1)."""
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=self.init_std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    @property
    def special_ids(self) -> list[int]:
        """Ids of the special rows, in order (``<s>``, ``$``, ``<e>`` for n_special = 3)."""
        return list(range(self.vocab_size, self.vocab_size + self.n_special))

    def output_embedding(self) -> Tensor:
        """The tied output matrix: the token embedding itself (same tensor object)."""
        return self.transformer.tokens_embed.weight

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> GPTOutput:
        return self.transformer(input_ids, attention_mask, token_type_ids)

    def output_rows(self, out: GPTOutput | None = None, special_rows: bool = True) -> Tensor:
        """The softmax matrix ``W [R, d]``: the ordinary tokens (+ the specials when ``special_rows``) (+ the position
        rows when ``lm_softmax_includes_positions``, release finetuning). ``out`` supplies the matrices the forward
        used (the dropped ones under ``embd_dropout_on_matrix`` in training); otherwise the parameters are used."""
        dropped = out is not None and out.token_rows is not None
        tokens = out.token_rows if dropped else self.output_embedding()
        if not special_rows and self.n_special:  # a slice's backward zero-fills a whole [V, d] gradient: only if needed
            tokens = tokens[: self.vocab_size]
        if self.lm_softmax_includes_positions:
            positions = out.position_rows if dropped else self.transformer.positions_embed.weight
            tokens = torch.cat([tokens, positions])
        return tokens

    def lm_logits(self, hidden: Tensor, out: GPTOutput | None = None, special_rows: bool = True) -> Tensor:
        """``hidden @ Wᵀ`` with ``W = output_rows(out, special_rows)``."""
        return F.linear(hidden, self.output_rows(out, special_rows))

    def lm_nll(self, hidden: Tensor, target: Tensor, out: GPTOutput | None = None, special_rows: bool = True
               ) -> Tensor:
        """fp32 NLL ``[N]`` of ``target [N]`` under ``softmax(lm_logits(hidden [N, d]))``, without materialising the
        ``[N, R]`` logits in fp32 (genlab.nn.linear_cross_entropy)."""
        return linear_cross_entropy(hidden, self.output_rows(out, special_rows), target)


# ----------------------------------------------------------------------------------------------- finetuning heads
def extract_states(hidden: Tensor, index: Tensor) -> Tensor:
    """``hidden [..., T, d]`` at ``index [...]`` (the extract token ``<e>``) -> ``[..., d]``."""
    idx = index[..., None, None].expand(*index.shape, 1, hidden.shape[-1])
    return hidden.gather(-2, idx).squeeze(-2)


class GPTClassificationHead(nn.Module):
    """Classification / entailment (paper eq. (3)): ``W_y dropout(h_<e>) + b_y``; one logit per class
    (``n_labels=1``: a scalar, the STS-B MSE variant)."""

    def __init__(self, d_model: int, n_labels: int, clf_pdrop: float = 0.1, init_std: float = 0.02):
        super().__init__()
        self.dropout = nn.Dropout(clf_pdrop)
        self.linear = ClassificationHead(d_model, n_labels, init_std)

    def forward(self, h_extract: Tensor) -> Tensor:
        return self.linear(self.dropout(h_extract))


class GPTSimilarityHead(GPTClassificationHead):
    """Similarity (paper §3.3): ``h_<e>(A $ B) + h_<e>(B $ A)`` summed *before* ``W_y``. Input ``[B, 2, d]``."""

    def forward(self, h_extract: Tensor) -> Tensor:
        if h_extract.shape[-2] != 2:
            raise ValueError(f"similarity needs the two orders on dim -2, got shape {tuple(h_extract.shape)}")
        return super().forward(h_extract.sum(-2))


class GPTMultipleChoiceHead(nn.Module):
    """QA / commonsense (paper §3.3): scalar ``W_y dropout(h_<e>) + b_y`` per choice, logits ``[B, K]`` (softmax over
    K in the loss). The dropout mask is drawn once per example and shared by its K choices (as the release)."""

    def __init__(self, d_model: int, clf_pdrop: float = 0.1, init_std: float = 0.02):
        super().__init__()
        self.clf_pdrop = clf_pdrop
        self.linear = MultipleChoiceHead(d_model, init_std)

    def forward(self, h_extract: Tensor) -> Tensor:
        b, k, d = h_extract.shape
        if self.training and self.clf_pdrop > 0:
            keep = F.dropout(h_extract.new_ones(b, 1, d), self.clf_pdrop, training=True)
            h_extract = h_extract * keep
        return self.linear(h_extract.reshape(b * k, d), k)


# ---------------------------------------------------------------------------------------------- weight transfer
def transfer_pretrained(model: GPTLMHeadModel, state: Mapping[str, Tensor], n_transfer: int | None = None
                        ) -> list[str]:
    """Copy pretrained weights (our key names, e.g. a pretraining checkpoint's ``model.*``) into ``model``.

    ``n_transfer`` (the layer-transfer analysis of paper §5, Fig. 2 left): −1 nothing, 0 the embeddings only, k the
    embeddings and blocks ``0..k−1``; None (default) all blocks. The ordinary token rows (and the positions the model
    has) are copied; the special rows keep their fresh N(0, 0.02) initialisation (the only new parameters besides the
    head). Returns the keys copied. Strict about what it copies: a missing tensor or a shape mismatch raises
    ``CheckpointError``."""
    n_layer = model.n_layer
    if n_transfer is None:
        n_transfer = n_layer
    if not -1 <= n_transfer <= n_layer:
        raise ConfigError(f"task.n_transfer={n_transfer} must be in [-1, {n_layer}] (model.n_layer={n_layer}).")
    if n_transfer == -1:
        return []
    ours = model.state_dict()
    tok, pos = "transformer.tokens_embed.weight", "transformer.positions_embed.weight"
    wanted = [k for k in ours if k not in (tok, pos)
              and any(k.startswith(f"transformer.h.{i}.") for i in range(n_transfer))]
    missing = [k for k in (tok, pos, *wanted) if k not in state]
    if missing:
        raise CheckpointError("pretrained weights lack " + ", ".join(missing[:6])
                              + (" ..." if len(missing) > 6 else "") + "; is this a GPT checkpoint?")
    v, p = model.vocab_size, ours[pos].shape[0]
    if state[tok].shape[0] not in (v, v + model.n_special) or state[tok].shape[1] != model.n_embd:
        raise CheckpointError(f"pretrained token embedding is {tuple(state[tok].shape)} but the model has "
                              f"{v} ordinary tokens of width {model.n_embd}: finetune with the pretraining "
                              "tokenizer and model sizes.")
    if state[pos].shape[0] < p:
        raise CheckpointError(f"pretrained model has {state[pos].shape[0]} positions, fewer than model.n_positions="
                              f"{p}; set model.n_positions={state[pos].shape[0]}.")
    bad = [k for k in wanted if state[k].shape != ours[k].shape]
    if bad:
        raise CheckpointError("pretrained shapes differ from the model's in " + ", ".join(bad[:6]))
    with torch.no_grad():
        params = model.state_dict(keep_vars=True)
        params[tok][:v].copy_(state[tok][:v])
        params[pos].copy_(state[pos][:p])
        for k in wanted:
            params[k].copy_(state[k])
    return [tok, pos, *wanted]
