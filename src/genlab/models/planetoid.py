"""Planetoid-T (transductive), Planetoid-G (no features) and Planetoid-I (inductive): Yang thesis
§3.3.3-§3.3.4, Fig. 3.10.

Both models share one interface:
- ``forward(nodes, x) -> PlanetoidOutput``: class logits for the given node ids and their feature rows, plus
  the branch logits the reference architecture trains with auxiliary losses (``layer_loss``).
- ``context_embed(nodes, x)``: the instance embedding ``e_i`` of the context loss.
- ``context_logits(e)`` ([B, num_nodes], full softmax, Eq. 3.11) or ``context_score(e, c)`` ([B], negative
  sampling, Eq. 3.12), depending on ``context_mode``.
- ``supervised_parameters()`` / ``context_parameters()``: what each of the two alternating SGD steps updates
  (Algorithm 3 of Yang thesis §3.3.3).

``arch="reference"`` is the released code (softmax-activated C-wide branches, final softmax over their
concatenation); ``arch="paper"`` the thesis (ReLU hidden layers, one per branch, softmax over the concatenation).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

CONTEXT_MODES = ("softmax", "sigmoid")


class PlanetoidOutput(NamedTuple):
    logits: torch.Tensor  # [B, C]
    branch_logits: tuple[torch.Tensor, ...]  # reference arch: pre-softmax C-dim branches; paper arch: ()


def _dense(n_in: int, n_out: int) -> nn.Linear:
    """Lasagne's DenseLayer default: Glorot-uniform weights, zero bias."""
    layer = nn.Linear(n_in, n_out)
    nn.init.xavier_uniform_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


def _check(arch: str, context_mode: str) -> None:
    if arch not in ("reference", "paper"):
        raise ValueError(f"model.arch={arch!r} must be 'reference' or 'paper'")
    if context_mode not in CONTEXT_MODES:
        raise ValueError(f"model.context_mode={context_mode!r} must be one of {CONTEXT_MODES}")


class _Branch(nn.Module):
    """One feed-forward branch: reference -> C-dim logits (softmax applied before concatenation);
    paper -> ReLU hidden layer."""

    def __init__(self, n_in: int, width: int, arch: str):
        super().__init__()
        self.arch, self.layer = arch, _dense(n_in, width)

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        z = self.layer(h)
        if self.arch == "reference":
            return z.softmax(-1), z
        return F.relu(z), None


class _ContextHead(nn.Module):
    """Output side of the context loss: a dense layer over all nodes (full softmax, with bias) or one context
    vector ``w_c`` per node (negative sampling). Both separate from the instance embeddings."""

    def __init__(self, num_nodes: int, dim: int, mode: str):
        super().__init__()
        self.mode = mode
        if mode == "softmax":
            self.out = _dense(dim, num_nodes)
        else:
            self.vectors = nn.Embedding(num_nodes, dim)
            nn.init.normal_(self.vectors.weight, std=0.01)

    def logits(self, e: torch.Tensor) -> torch.Tensor:
        return self.out(e)

    def score(self, e: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return (e * self.vectors(c)).sum(-1)


class _Planetoid(nn.Module):
    context: _ContextHead
    context_mode: str

    def context_logits(self, e: torch.Tensor) -> torch.Tensor:
        return self.context.logits(e)

    def context_score(self, e: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return self.context.score(e, c)

    def _join(self, parts: list[tuple[torch.Tensor, torch.Tensor | None]]) -> PlanetoidOutput:
        h = torch.cat([p[0] for p in parts], -1)
        return PlanetoidOutput(self.out(h), tuple(p[1] for p in parts if p[1] is not None))


class PlanetoidT(_Planetoid):
    """Transductive Planetoid (Eq. 3.13): ``p(y | x, e) = softmax([h(x), h(e)] W)`` with a free embedding per
    node, trained jointly with the context loss on the same embeddings. ``use_feature=False`` is Planetoid-G."""

    def __init__(
        self,
        num_nodes: int,
        n_features: int,
        n_classes: int,
        embedding_size: int = 50,
        arch: str = "reference",
        hidden_x: int | None = None,
        hidden_e: int | None = None,
        use_feature: bool = True,
        update_emb: bool = True,
        context_mode: str = "softmax",
    ):
        super().__init__()
        _check(arch, context_mode)
        self.arch, self.use_feature, self.update_emb, self.context_mode = arch, use_feature, update_emb, context_mode
        self.embedding = nn.Embedding(num_nodes, embedding_size)
        nn.init.normal_(self.embedding.weight, std=0.01)  # Lasagne EmbeddingLayer default
        self.context = _ContextHead(num_nodes, embedding_size, context_mode)
        wx = n_classes if arch == "reference" else (hidden_x or n_classes)
        we = n_classes if arch == "reference" else (hidden_e or n_classes)
        self.branch_x = _Branch(n_features, wx, arch) if use_feature else None
        if use_feature or arch == "paper":
            self.branch_e = _Branch(embedding_size, we, arch)
            self.out = _dense((wx if use_feature else 0) + we, n_classes)
        else:  # reference Planetoid-G: softmax(e W + b) directly
            self.branch_e = None
            self.out = _dense(embedding_size, n_classes)

    def forward(self, nodes: torch.Tensor, x: torch.Tensor | None = None) -> PlanetoidOutput:
        e = self.embedding(nodes)
        if not self.update_emb:
            e = e.detach()  # the supervised loss trains only the classifier
        if self.branch_e is None:
            return PlanetoidOutput(self.out(e), ())
        parts = [self.branch_x(x)] if self.branch_x is not None else []
        parts.append(self.branch_e(e))
        return self._join(parts)

    def context_embed(self, nodes: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        return self.embedding(nodes)

    def supervised_parameters(self) -> list[nn.Parameter]:
        skip = {id(p) for p in self.context.parameters()}
        if not self.update_emb:
            skip.add(id(self.embedding.weight))
        return [p for p in self.parameters() if id(p) not in skip]

    def context_parameters(self) -> list[nn.Parameter]:
        return [self.embedding.weight, *self.context.parameters()]


class PlanetoidI(_Planetoid):
    """Inductive Planetoid (Eq. 3.14): the embedding is a hidden layer of the features, ``e = ReLU(x W_e + b)``,
    so ``p(y | x)`` never looks at the graph and new feature rows can be classified. ``num_nodes`` = the
    training nodes that get context vectors. The context branch reuses ``W_e``; in the reference code it has
    its own bias (``share_embedding_bias=False``)."""

    def __init__(
        self,
        num_nodes: int,
        n_features: int,
        n_classes: int,
        embedding_size: int = 50,
        arch: str = "reference",
        hidden_x: int | None = None,
        hidden_e: int | None = None,
        share_embedding_bias: bool = False,
        context_mode: str = "softmax",
    ):
        super().__init__()
        _check(arch, context_mode)
        self.arch, self.context_mode = arch, context_mode
        wx = n_classes if arch == "reference" else (hidden_x or n_classes)
        we = n_classes if arch == "reference" else (hidden_e or n_classes)
        self.branch_x = _Branch(n_features, wx, arch)
        self.embed = _dense(n_features, embedding_size)
        self.context_bias = None if share_embedding_bias else nn.Parameter(torch.zeros(embedding_size))
        self.branch_e = _Branch(embedding_size, we, arch)
        self.out = _dense(wx + we, n_classes)
        self.context = _ContextHead(num_nodes, embedding_size, context_mode)

    def forward(self, nodes: torch.Tensor | None, x: torch.Tensor) -> PlanetoidOutput:
        e = F.relu(self.embed(x))
        return self._join([self.branch_x(x), self.branch_e(e)])

    def context_embed(self, nodes: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
        bias = self.embed.bias if self.context_bias is None else self.context_bias
        return F.relu(F.linear(x, self.embed.weight, bias))

    def supervised_parameters(self) -> list[nn.Parameter]:
        skip = {id(p) for p in self.context.parameters()}
        if self.context_bias is not None:
            skip.add(id(self.context_bias))
        return [p for p in self.parameters() if id(p) not in skip]

    def context_parameters(self) -> list[nn.Parameter]:
        extra = [self.embed.bias] if self.context_bias is None else [self.context_bias]
        return [self.embed.weight, *extra, *self.context.parameters()]
