"""Sequence classification / regression finetuning (GLUE, IMDB, Yelp, DBpedia, AG, Amazon; XLNet paper §3.4-§3.5).

``logits = W_c · summary(backbone(x)) + b_c``; cross-entropy, or mean squared error for STS-B (``n_labels=1``).
Metrics per dev split with the task's official metric (genlab.metrics.glue_metrics); the first dev split logs as
``valid/<metric>``, MNLI-mismatched as ``valid/mm/<metric>``. In ``test`` the labelled dev splits are scored again
(GLUE test labels are hidden) and the unlabelled GLUE test files, when present, are written in the GLUE submission
format to ``prediction_dir`` (default: ``<run dir>/predictions``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from genlab.errors import ConfigError
from genlab.metrics.glue_metrics import classification_metrics
from genlab.models.heads import ClassificationHead
from genlab.tasks.data_interface import ClassificationData, datamodule_of
from genlab.tasks.finetune_base import FinetuneTask
from genlab.tasks.pretrained_heads import SUMMARY_HEADS


def split_prefix(name: str) -> str:
    return "mm/" if name == "dev_mismatched" else ""


class SequenceClassificationTask(FinetuneTask):
    def __init__(self, model: nn.Module, optimizer: Callable[..., torch.optim.Optimizer],
                 scheduler: Callable[..., dict] | None, monitor: str = "valid/acc", monitor_mode: str = "max",
                 n_labels: int = 2, metric: str = "acc", weight_decay: float = 0.0, layer_decay: float = 1.0,
                 layer_decay_mode: str = "lr_groups", summary_dropout: float = 0.1, init_from: str | None = None,
                 require_pretrained: bool = False, prediction_dir: str | None = None) -> None:
        super().__init__(model, optimizer, scheduler, monitor, monitor_mode, weight_decay, layer_decay,
                         layer_decay_mode, summary_dropout, init_from, require_pretrained, prediction_dir)
        self.n_labels, self.metric = n_labels, metric
        self.head = ClassificationHead(self.backbone.d_model, n_labels)
        self.load_pretrained_heads(SUMMARY_HEADS)
        classification_metrics(metric, n_labels)  # validate the name now
        self.metrics = nn.ModuleDict()
        self._split_names: dict[str, list[str]] = {}
        self._predictions: dict[str, list[torch.Tensor]] = {}

    def forward(self, batch: dict) -> torch.Tensor:
        hidden = self.backbone.encode(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        return self.head(self.backbone.summary(hidden))

    def setup(self, stage: str) -> None:
        dm: ClassificationData | None = datamodule_of(self)
        if dm is None:
            return
        if getattr(dm, "n_labels", self.n_labels) != self.n_labels:
            raise ConfigError(f"task.n_labels={self.n_labels} but data.task={dm.task} has {dm.n_labels} labels "
                              f"{list(dm.labels) or '(regression)'}; set task.n_labels={dm.n_labels}.")
        self.check_tokenizer()
        self._split_names = {"valid": list(dm.dev_splits), "test": dm.test_split_names()}
        for stage_name, names in self._split_names.items():
            for n in names:
                key = f"{stage_name}_{n}"
                if key not in self.metrics:
                    self.metrics[key] = classification_metrics(self.metric, self.n_labels)

    # --- steps --------------------------------------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self.head.loss(self(batch), batch["labels"])
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def _predict(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.float() if self.n_labels == 1 else logits.argmax(-1)

    def _eval_step(self, stage: str, batch: dict, dataloader_idx: int) -> None:
        logits = self(batch)
        names = self._split_names.get(stage) or ["dev"]
        name = names[dataloader_idx]
        if "labels" not in batch:  # unlabelled GLUE test split: keep predictions for the submission file
            self._predictions.setdefault(name, []).append(self._predict(logits).detach().cpu())
            return
        prefix = f"{stage}/{split_prefix(name)}"
        loss = self.head.loss(logits, batch["labels"])
        self.log(f"{prefix}loss", loss, add_dataloader_idx=False, sync_dist=True,
                 batch_size=batch["labels"].shape[0])
        metrics = self.metrics[f"{stage}_{name}"] if f"{stage}_{name}" in self.metrics else None
        if metrics is None:
            return
        metrics.update(self._predict(logits), batch["labels"])
        self.log_dict({f"{prefix}{k}": m for k, m in metrics.items()}, add_dataloader_idx=False)

    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step("valid", batch, dataloader_idx)

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step("test", batch, dataloader_idx)

    def on_test_epoch_start(self) -> None:
        self._predictions = {}

    def on_test_epoch_end(self) -> None:
        dm: ClassificationData | None = datamodule_of(self)
        if not self._predictions or dm is None or not hasattr(dm, "write_predictions"):
            return
        out = self.predictions_dir()
        for name, parts in self._predictions.items():
            dm.write_predictions(name, torch.cat(parts).tolist(), out)
