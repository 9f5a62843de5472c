"""Funnel-Transformer pretraining objectives: MLM and ELECTRA (Dai thesis §5.2.1, §5.3).

Both consume the masked-LM batches of the BERT pipeline (``input_ids`` corrupted at the targets, ``labels`` = the
original token at the targets and -100 elsewhere, ``token_type_ids``, ``attention_mask`` 1 = real), so masking
(``genlab.data.pretrain.mlm_examples``), the optimiser wiring and the evaluation bookkeeping are
``genlab.tasks.pretrain.MaskedLMTask``'s; the MLM loss is its mean cross-entropy over the targets.

* :class:`FunnelMLMTask`: the original code also hides the [MASK] tokens from attention (they are never keys,
  ``mlm_mask_tokens_as_keys: false``), which the key mask then carries through every pooling. Logs the
  masked-token accuracy next to the loss.
* :class:`FunnelElectraTask`: generator MLM loss on the masked input; at the targets the generator's
  Gumbel-argmax samples replace the tokens (no gradient flows through the sampling); the discriminator scores
  every non-pad position, target ``1 = original`` (a sample equal to the original counts as original); loss =
  gen + ``disc_weight`` * mean BCE over the non-pad positions (50 in the paper).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genlab.errors import ConfigError
from genlab.tasks.pretrain import MaskedLMTask

MASK_ID = 6  # <mask> of the platform's SentencePiece vocabularies (genlab.data.pretrain.xlnet_examples)


class FunnelMLMTask(MaskedLMTask):
    """Mean CE over the targets of ``model.mlm_logits`` on the decoder output (no next-sentence loss)."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., dict] | None = None,
        monitor: str = "valid/loss",
        monitor_mode: str = "min",
        weight_decay: float = 0.0,
        layer_decay: float = 1.0,
        layer_decay_mode: str = "lr_groups",
        include_embeddings_in_decay: bool = False,
        mask_token_id: int = MASK_ID,
        mlm_mask_tokens_as_keys: bool = False,
    ):
        super().__init__(model, optimizer, scheduler, monitor, monitor_mode, weight_decay, nsp_weight=0.0,
                         layer_decay=layer_decay, layer_decay_mode=layer_decay_mode,
                         include_embeddings_in_decay=include_embeddings_in_decay)
        self.mask_token_id, self.mlm_mask_tokens_as_keys = mask_token_id, mlm_mask_tokens_as_keys

    def attention_mask(self, batch: dict) -> Tensor:
        """1 = may be attended to: the batch's padding mask, and 0 at [MASK] unless ``mlm_mask_tokens_as_keys``
        (a quirk of the authors' code, unit-tested)."""
        ids = batch["input_ids"]
        mask = batch.get("attention_mask")
        mask = torch.ones_like(ids) if mask is None else mask
        if not self.mlm_mask_tokens_as_keys:
            mask = mask * (ids != self.mask_token_id).to(mask.dtype)
        return mask

    def _objective(self, batch: dict, train: bool) -> tuple[Tensor, float]:
        """Mean CE over the targets; logs the masked-token accuracy (``train/mlm_acc`` per step, ``valid/mlm_acc``
        and ``test/mlm_acc`` averaged over the targets of the split: the acceptance metric of the real-data
        mini, docs/systems/funnel.md)."""
        out = self.model(batch["input_ids"], batch.get("token_type_ids"), self.attention_mask(batch))
        sel = batch["labels"] != -100
        target = batch["labels"][sel]
        logits = self.model.mlm_logits(out.hidden[sel]).float()
        n = int(target.numel())
        if self._trainer is not None and n:
            split = "train" if train else ("test" if self.trainer.testing else "valid")
            accuracy = (logits.detach().argmax(-1) == target).float().mean()
            self.log(f"{split}/mlm_acc", accuracy, on_step=train, on_epoch=not train, batch_size=n)
        return F.cross_entropy(logits, target), float(n)


def gumbel_argmax(logits: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One sample per row of ``softmax(logits)`` (temperature 1) as ``argmax(logits + Gumbel noise)``; no gradient."""
    with torch.no_grad():
        u = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=torch.float32)
        gumbel = -torch.log(-torch.log(u.clamp(1e-9, 1.0 - 1e-9)))
        return (logits.detach().float() + gumbel).argmax(-1)


def replace_targets(input_ids: Tensor, labels: Tensor, sampled: Tensor) -> tuple[Tensor, Tensor]:
    """(x~, y): the sampled tokens at the targets (``labels != -100``), the input elsewhere (the masked input
    differs from the original only at the targets); ``y = 1[x~ == x]`` with x the original sequence."""
    targets = labels != -100
    replaced = input_ids.masked_scatter(targets, sampled.to(input_ids.dtype))
    original = torch.where(targets, labels, input_ids)
    return replaced, (replaced == original).float()


class FunnelElectraTask(MaskedLMTask):
    """``gen_loss + disc_weight * disc_loss`` on a ``genlab.models.funnel_pretraining.FunnelElectra``."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., dict] | None = None,
        monitor: str = "valid/loss",
        monitor_mode: str = "min",
        weight_decay: float = 0.0,
        layer_decay: float = 1.0,
        layer_decay_mode: str = "lr_groups",
        include_embeddings_in_decay: bool = False,
        disc_weight: float = 50.0,
    ):
        super().__init__(model, optimizer, scheduler, monitor, monitor_mode, weight_decay, nsp_weight=0.0,
                         layer_decay=layer_decay, layer_decay_mode=layer_decay_mode,
                         include_embeddings_in_decay=include_embeddings_in_decay)
        if not hasattr(model, "discriminator_logits"):
            raise ConfigError(f"task=funnel_electra needs an ELECTRA model (model=funnel_electra_*), got "
                              f"{type(model).__name__}")
        if disc_weight < 0:
            raise ConfigError(f"task.disc_weight={disc_weight} must be >= 0")
        self.disc_weight = disc_weight

    def losses(self, batch: dict) -> dict[str, Tensor]:
        """Generator and discriminator losses and what they were computed from (tests read these)."""
        ids, types, labels = batch["input_ids"], batch.get("token_type_ids"), batch["labels"]
        mask = batch.get("attention_mask")
        mask = torch.ones_like(ids) if mask is None else mask
        targets = labels != -100
        gen_logits = self.model.mlm_logits(self.model.generator_hidden(ids, types, mask)[targets])
        gen_loss = F.cross_entropy(gen_logits, labels[targets])
        replaced, is_original = replace_targets(ids, labels, gumbel_argmax(gen_logits))
        disc_logits = self.model.discriminator_logits(replaced, types, mask)
        real = mask.bool()
        disc_loss = F.binary_cross_entropy_with_logits(disc_logits[real], is_original[real])
        return dict(gen_loss=gen_loss, disc_loss=disc_loss, loss=gen_loss + self.disc_weight * disc_loss,
                    replaced=replaced, is_original=is_original, disc_logits=disc_logits,
                    n_targets=targets.sum())

    def _objective(self, batch: dict, train: bool) -> tuple[Tensor, float]:
        out = self.losses(batch)
        if self._trainer is not None:
            split = "train" if train else "valid"
            real = batch.get("attention_mask", torch.ones_like(batch["input_ids"])).bool()
            accuracy = ((out["disc_logits"] > 0).float() == out["is_original"])[real].float().mean()
            replaced = 1 - out["is_original"][batch["labels"] != -100].mean()
            self.log_dict({f"{split}/gen_loss": out["gen_loss"].detach(), f"{split}/disc_loss": out["disc_loss"].detach(),
                           f"{split}/disc_acc": accuracy, f"{split}/replaced_frac": replaced},
                          on_step=train, on_epoch=not train)
        return out["loss"], float(out["n_targets"])


__all__ = ["FunnelElectraTask", "FunnelMLMTask", "gumbel_argmax", "replace_targets"]
