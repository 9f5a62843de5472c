"""Pretraining objectives of the XLNet paper and its baselines (XLNet paper §2.3 and the §3.7 ablation).

* :class:`PermutationLMTask` — XLNet permutation LM (two-stream, partial prediction), memory carried across
  consecutive batches of the same streams (one memory per accumulated chunk), optional NSP head (ablation row 8).
* :class:`DAETask` — "DAE + Transformer-XL" (ablation row 2): BERT-style corruption on the XLNet backbone's
  content stream, same streams, memory and bidirectional pipeline, no query stream, no permutation.
* :class:`MaskedLMTask` — BERT masked LM (+ NSP) on :class:`genlab.models.bert.BertForPretraining`.

Optimisation: the optimiser factory receives parameter groups with the official weight-decay exclusions
(LayerNorm and biases, but ``r_*_bias`` decayed) and optional layer-wise learning rates (see ``layerwise_lr``).
Memory handling, per-split evaluation memory, checkpointed memory (every chunk on every rank) and the gradients of
an unfinished accumulation cycle saved mid-cycle are inherited from the LM task (``genlab.tasks.lm``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from genlab.data.pretrain.permutation import plm_dense_inputs, reuse_half_mask
from genlab.errors import ConfigError
from genlab.models.heads import SequenceSummary
from genlab.tasks.layerwise_lr import check_mode, layer_decay_groups
from genlab.tasks.lm import LanguageModelTask, detach
from genlab.tasks.optim import configured_lr


class _PretrainTask(LanguageModelTask):
    """Shared optimiser wiring (decay exclusions, layer-wise lr) and evaluation bookkeeping."""

    def __init__(self, model: nn.Module, optimizer: Callable[..., torch.optim.Optimizer],
                 scheduler: Callable[..., dict] | None, monitor: str, monitor_mode: str, weight_decay: float,
                 layer_decay: float, layer_decay_mode: str, include_embeddings_in_decay: bool):
        super().__init__(model, optimizer, scheduler, monitor=monitor, monitor_mode=monitor_mode, metric="ppl",
                         weight_decay=weight_decay)
        self.layer_decay, self.layer_decay_mode = layer_decay, check_mode(layer_decay_mode)
        self.include_embeddings_in_decay = include_embeddings_in_decay

    def optimizer_groups(self) -> list[dict[str, Any]]:
        rate = self.layer_decay if self.layer_decay_mode == "lr_groups" else 1.0  # grad_scale: after clipping
        return layer_decay_groups(self, configured_lr(self.optimizer_factory), self.weight_decay, rate,
                                  include_embeddings=self.include_embeddings_in_decay)

    def _log_nsp(self, train: bool, value: torch.Tensor) -> None:
        if self._trainer is not None:  # the objective also runs outside a Trainer (tests, notebooks)
            self.log(f"{'train' if train else 'valid'}/nsp_loss", value)

    def _log_eval(self, metric, loss: torch.Tensor, weight: float) -> None:
        metric.update(loss.detach(), weight=weight)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        loss, weight = self._objective(batch, train=False)
        self._log_eval(self.valid_nll, loss, weight)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        loss, weight = self._objective(batch, train=False)
        self._log_eval(self.test_nll, loss, weight)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss, _ = self._objective(batch, train=True)
        self.log("train/loss", loss, prog_bar=True)
        return loss


class _MemoryMixin:
    """XLNet memory across consecutive batches: zeros of full mem_len at the start (``mem_init=zeros``, official)
    or empty (``none``); never reset inside a pass (the authors' data pipeline); evaluation splits use their own memory.

    Training keeps one memory per accumulated chunk of streams (``batch["chunk"]``, see PretrainDataModule), so
    1 process accumulating A micro-batches carries the same memories as A processes (TXL ``batch_chunk``)."""

    def _memory(self, batch: dict, train: bool):
        ids = batch["input_ids"]
        if train:
            memory = self._train_memory[self._chunk_slot(batch)]
        else:
            memory = self._eval_memory
        backbone = getattr(self.model, "transformer", self.model)
        if memory is None and self.mem_init == "zeros" and (getattr(backbone, "mem_len", 0) or 0) > 0:
            memory = backbone.init_memory(ids.shape[0], ids.device)
        return memory

    def _keep(self, batch: dict, train: bool, memory) -> None:
        if train:
            self._train_memory[self._chunk_slot(batch)] = detach(memory)
        else:
            self._eval_memory = detach(memory)


def _check_mem_init(mem_init: str) -> str:
    if mem_init not in ("zeros", "none"):
        raise ConfigError(f"task.mem_init={mem_init!r} must be 'zeros' or 'none'.")
    return mem_init


class PermutationLMTask(_MemoryMixin, _PretrainTask):
    """Loss = mean CE over real prediction slots (``Σ CE·target_mask / Σ target_mask``) [+ nsp_weight · NSP CE]."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., dict] | None = None,
        monitor: str = "valid/loss",
        monitor_mode: str = "min",
        weight_decay: float = 0.01,
        reuse_len: int = 256,
        mem_init: str = "zeros",
        nsp_weight: float = 0.0,
        layer_decay: float = 1.0,
        layer_decay_mode: str = "lr_groups",
        include_embeddings_in_decay: bool = False,
    ):
        super().__init__(model, optimizer, scheduler, monitor, monitor_mode, weight_decay, layer_decay,
                         layer_decay_mode, include_embeddings_in_decay)
        self.reuse_len, self.mem_init, self.nsp_weight = reuse_len, _check_mem_init(mem_init), nsp_weight
        self.nsp_head = SequenceSummary(model.transformer.d_model, 2) if nsp_weight > 0 else None

    def _objective(self, batch: dict, train: bool) -> tuple[torch.Tensor, float]:
        if "perm_mask" not in batch:  # a loader batch: its dense masks are built here, on the model's device
            batch = {**batch, **plm_dense_inputs(batch)}
        ids = batch["input_ids"]
        memory = self._memory(batch, train)
        out = self.model(ids, batch["token_type_ids"], None, batch["perm_mask"], batch["target_mapping"], memory,
                         self.reuse_len)
        self._keep(batch, train, out.memory)
        mask = batch["target_mask"]
        ce = F.cross_entropy(out.logits.flatten(0, 1).float(), batch["target"].flatten(), reduction="none")
        n = mask.sum()
        loss = (ce * mask.flatten()).sum() / n.clamp_min(1.0)
        if self.nsp_head is not None:
            nsp = F.cross_entropy(self.nsp_head(out.hidden).float(), batch["nsp_label"])
            self._log_nsp(train, nsp)
            if train:
                return loss + self.nsp_weight * nsp, float(n)
        return loss, float(n)


class DAETask(_MemoryMixin, _PretrainTask):
    """Mean CE at the corrupted positions from the last content-stream layer through the tied softmax."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., dict] | None = None,
        monitor: str = "valid/loss",
        monitor_mode: str = "min",
        weight_decay: float = 0.01,
        reuse_len: int = 256,
        mem_init: str = "zeros",
        layer_decay: float = 1.0,
        layer_decay_mode: str = "lr_groups",
        include_embeddings_in_decay: bool = False,
    ):
        super().__init__(model, optimizer, scheduler, monitor, monitor_mode, weight_decay, layer_decay,
                         layer_decay_mode, include_embeddings_in_decay)
        self.reuse_len, self.mem_init = reuse_len, _check_mem_init(mem_init)

    def _objective(self, batch: dict, train: bool) -> tuple[torch.Tensor, float]:
        ids = batch["input_ids"]
        memory = self._memory(batch, train)
        perm_mask = batch.get("perm_mask")
        if perm_mask is None:  # a loader batch: the reuse/non-reuse block, built on the model's device
            perm_mask = reuse_half_mask(ids.shape[1], int(batch["reuse_len"]), ids.device).expand(len(ids), -1, -1)
        out = self.model.hidden_states(ids, batch["token_type_ids"], None, perm_mask, None, memory, self.reuse_len)
        self._keep(batch, train, out.memory)
        sel = batch["labels"] != -100
        logits = self.model.lm_logits(out.output[sel])  # only the selected positions go through the softmax
        return F.cross_entropy(logits.float(), batch["labels"][sel]), float(sel.sum())


class MaskedLMTask(_PretrainTask):
    """BERT: mean CE over the chosen positions + ``nsp_weight`` · NSP CE (0 = the "no NSP" variant)."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., dict] | None = None,
        monitor: str = "valid/loss",
        monitor_mode: str = "min",
        weight_decay: float = 0.01,
        nsp_weight: float = 1.0,
        layer_decay: float = 1.0,
        layer_decay_mode: str = "lr_groups",
        include_embeddings_in_decay: bool = False,
    ):
        super().__init__(model, optimizer, scheduler, monitor, monitor_mode, weight_decay, layer_decay,
                         layer_decay_mode, include_embeddings_in_decay)
        self.nsp_weight = nsp_weight

    def _objective(self, batch: dict, train: bool) -> tuple[torch.Tensor, float]:
        out = self.model(batch["input_ids"], batch["token_type_ids"], batch.get("attention_mask"))
        sel = batch["labels"] != -100
        mlm = F.cross_entropy(self.model.mlm_logits(out.hidden[sel]).float(), batch["labels"][sel])
        if self.nsp_weight > 0:
            nsp = F.cross_entropy(self.model.nsp_logits(out.pooled).float(), batch["nsp_label"])
            self._log_nsp(train, nsp)
            if train:
                return mlm + self.nsp_weight * nsp, float(sel.sum())
        return mlm, float(sel.sum())


def masked_fraction(batch: dict[str, Any], mask_id: int = 6) -> float:
    """Share of input positions holding ``<mask>`` (≈12% for BERT, 0 for XLNet)."""
    return float((batch["input_ids"] == mask_id).float().mean())
