"""The GDAN system as one module: reader D, generator G (absent for the SL/Context rows), the optional domain
classifier of the "Gen + GAN" baseline, and the hand-over of G's questions to D (Yang thesis §3.2.4-§3.2.5)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from genlab.models.gdan.generator import Generated, QuestionGenerator
from genlab.models.gdan.reader import GAReader
from genlab.nn.mlp import mlp_layers


class DomainClassifier(nn.Module):
    """"Gen + GAN": max-pool of D's question-aware paragraph states over valid positions, then a 1-hidden-layer
    MLP -> logit of "human-written question" (our reconstruction of the thesis' baseline)."""

    def __init__(self, in_dim: int, hidden: int = 128) -> None:
        super().__init__()
        layers, width = mlp_layers(in_dim, [hidden])
        self.mlp = nn.Sequential(*layers, nn.Linear(width, 1))

    def forward(self, states: Tensor, mask: Tensor) -> Tensor:
        pooled = states.masked_fill(~mask[..., None], float("-inf")).amax(1)
        return self.mlp(pooled).squeeze(-1)


class GDAN(nn.Module):
    """Holds D, G and the GAN baseline's classifier so one ``model:`` config builds the whole system.

    ``g_to_d`` maps G's vocabulary ids to D's (a buffer, saved with the weights). By default the two vocabularies
    share their ids (identity, which needs ``|V_G| <= |V_D|``); the data layer installs its own map with
    ``set_vocab_map`` when they differ."""

    def __init__(self, reader: GAReader, generator: QuestionGenerator | None = None,
                 domain_classifier: DomainClassifier | None = None) -> None:
        super().__init__()
        self.reader, self.generator, self.domain_classifier = reader, generator, domain_classifier
        if generator is not None:
            if generator.vocab_size > reader.vocab_size:
                raise ValueError(f"generator.vocab_size={generator.vocab_size} > reader.vocab_size="
                                 f"{reader.vocab_size}: shared ids need |V_G| <= |V_D|; install a map with "
                                 "set_vocab_map for separate vocabularies.")
            self.register_buffer("g_to_d", torch.arange(generator.vocab_size))

    @torch.no_grad()
    def set_vocab_map(self, g_to_d: Tensor) -> None:
        """``g_to_d[i]`` = D's id of G's word i (D's ``unk_id`` for words D does not know)."""
        if g_to_d.shape != self.g_to_d.shape:
            raise ValueError(f"vocabulary map of shape {tuple(g_to_d.shape)}, expected {tuple(self.g_to_d.shape)}.")
        self.g_to_d.copy_(g_to_d)

    def questions_for_reader(self, gen: Generated, g_p_ext: Tensor, p_ids: Tensor) -> tuple[Tensor, Tensor]:
        """G's tokens as D's question ids: vocabulary words through ``g_to_d``,
        copied OOV words as D's id of the paragraph token they were copied from; <eos>/padding dropped; an empty
        question becomes a single <unk>. ``g_p_ext`` and ``p_ids`` are the same paragraph's tokens ([B, T])."""
        g, r = self.generator, self.reader
        tok = gen.tokens
        keep = gen.mask & (tok != g.eos_id)
        n_ext = max(int(tok.max()) + 1, int(g_p_ext.max()) + 1, g.vocab_size)
        oov_to_d = torch.full((tok.shape[0], n_ext), r.unk_id, dtype=torch.long, device=tok.device)
        oov_to_d.scatter_(1, g_p_ext, p_ids)  # every paragraph position writes its own D id under its extended id
        in_vocab = self.g_to_d[tok.clamp(max=g.vocab_size - 1)]
        q = torch.where(tok < g.vocab_size, in_vocab, oov_to_d.gather(1, tok))
        empty = ~keep.any(1)
        keep[:, 0] |= empty
        q[:, 0] = torch.where(empty, torch.full_like(q[:, 0], r.unk_id), q[:, 0])
        return q.masked_fill(~keep, r.pad_id), keep
