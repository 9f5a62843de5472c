"""AWD-LSTM language model with a Softmax, Mixture-of-Softmaxes or Mixture-of-Contexts output layer.

AWD-LSTM (Merity et al. 2018) as the MoS code builds it: embedding-row dropout -> locked dropout -> L weight-dropped
LSTM layers with locked dropout between them -> locked dropout on the top output ``g`` -> head. Follows the recurrent-LM
protocol (CONTRIBUTING.md): ``model(input_ids, target, memory) -> LMOutput``; ``memory`` is the list of per-layer
``(h, c)`` states, detached (truncated BPTT). ``run`` also returns the activations AR/TAR need.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from genlab.errors import ConfigError
from genlab.models.lm_output import LMOutput
from genlab.nn.locked_dropout import LockedDropout, embedding_dropout
from genlab.nn.mixture_of_softmaxes import build_head
from genlab.nn.weight_drop import WeightDropLSTM

Memory = list[tuple[Tensor, Tensor]]


@dataclass
class AWDOutput:
    nll: Tensor | None  # [B, T] float32
    memory: Memory  # detached per-layer (h [B, H], c [B, H])
    raw_output: Tensor  # top LSTM output before dropout (TAR)
    output: Tensor  # top LSTM output after locked dropout (AR, fed to the head)
    embedded: Tensor  # embedding output after dropout (for truncated-BPTT tests)


class AWDLSTM(nn.Module):
    """``nhid`` for the lower layers, ``nhidlast`` for the top one. With ``head="softmax"`` and tied weights the
    top layer feeds the decoder directly, so ``nhidlast`` must equal ``emsize``; MoS/MoC project ``nhidlast``
    to ``n_experts * emsize`` through a tanh latent layer."""

    def __init__(
        self,
        vocab_size: int,
        emsize: int = 280,
        nhid: int = 960,
        nhidlast: int = 620,
        nlayers: int = 3,
        head: str = "mos",
        n_experts: int = 15,
        dropout: float = 0.4,
        dropouth: float = 0.225,
        dropouti: float = 0.4,
        dropoute: float = 0.1,
        dropoutl: float = 0.29,
        wdrop: float = 0.5,
        tie_weights: bool = True,
        mos_log_eps: float = 1e-8,
    ):
        super().__init__()
        if head == "softmax" and nhidlast != emsize:
            raise ConfigError(
                f"model.head=softmax feeds the top LSTM output to the decoder, so model.nhidlast ({nhidlast}) "
                f"must equal model.emsize ({emsize}); set model.nhidlast={emsize}."
            )
        if nlayers < 1:
            raise ConfigError(f"model.nlayers must be >= 1, got {nlayers}.")
        self.vocab_size, self.emsize, self.nlayers, self.head_type = vocab_size, emsize, nlayers, head
        self.dropoute = dropoute
        self.encoder = nn.Embedding(vocab_size, emsize)
        sizes = [emsize] + [nhid] * (nlayers - 1) + [nhidlast]
        self.rnns = nn.ModuleList(WeightDropLSTM(sizes[i], sizes[i + 1], wdrop) for i in range(nlayers))
        self.drop_in, self.drop_hid, self.drop_out = LockedDropout(dropouti), LockedDropout(dropouth), LockedDropout(dropout)
        self.head = build_head(head, nhidlast, emsize, vocab_size, n_experts, dropoutl, mos_log_eps)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        if tie_weights:
            self.head.decoder.weight = self.encoder.weight

    def init_memory(self, batch_size: int, device=None, dtype=None) -> Memory:
        return [
            (torch.zeros(batch_size, r.hidden_size, device=device, dtype=dtype),) * 2 for r in self.rnns
        ]

    def run(self, input_ids: Tensor, target: Tensor | None = None, memory: Memory | None = None) -> AWDOutput:
        emb = embedding_dropout(self.encoder.weight, input_ids, self.dropoute, self.training)
        x = self.drop_in(emb)
        new_memory: Memory = []
        for i, rnn in enumerate(self.rnns):
            x, state = rnn(x, None if memory is None else memory[i])
            new_memory.append((state[0].detach(), state[1].detach()))
            if i < self.nlayers - 1:
                x = self.drop_hid(x)
        raw = x
        out = self.drop_out(raw)
        nll = None if target is None else self.head.nll(out, target).float()
        return AWDOutput(nll, new_memory, raw, out, emb)

    def forward(self, input_ids: Tensor, target: Tensor | None = None, memory: Memory | None = None) -> LMOutput:
        res = self.run(input_ids, target, memory)
        return LMOutput(nll=res.nll, memory=res.memory, logits=None)

    def log_prob(self, input_ids: Tensor, memory: Memory | None = None) -> tuple[Tensor, Memory]:
        """Full next-token log-probabilities ``[B, T, M]`` (analysis: rank, pairwise KL)."""
        res = self.run(input_ids, None, memory)
        return self.head.log_prob(res.output), res.memory
