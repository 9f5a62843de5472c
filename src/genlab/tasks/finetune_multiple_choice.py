"""Multiple-choice finetuning (RACE, XLNet paper §3.2): each of the 4 option sequences is encoded, summarised
(XLNet: ``<cls>`` last, tanh projection, dropout) and scored by ``Linear(d, 1)``; softmax over the options, CE loss.
Accuracy is logged over all questions and on the Middle / High subsets (``<stage>/acc``, ``/acc_middle``,
``/acc_high``). In ``test``, batches that carry question ids (``qid``, as RaceDataModule's do) are also written to
``<prediction_dir>/race_<split>.json`` (default ``<run dir>/predictions``): per question id the predicted
letter and the 4 option probabilities, ``{"<qid>": {"answer": "B", "probs": [pA, pB, pC, pD]}}``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torchmetrics import MeanMetric

from genlab.data.finetune.race import LETTERS
from genlab.models.heads import MultipleChoiceHead
from genlab.tasks.data_interface import MultipleChoiceData, datamodule_of
from genlab.tasks.finetune_base import FinetuneTask
from genlab.tasks.pretrained_heads import SUMMARY_HEADS

SUBSETS = ("all", "middle", "high")


class MultipleChoiceTask(FinetuneTask):
    def __init__(self, model: nn.Module, optimizer: Callable[..., torch.optim.Optimizer],
                 scheduler: Callable[..., dict] | None, monitor: str = "valid/acc", monitor_mode: str = "max",
                 n_choices: int = 4, weight_decay: float = 0.0, layer_decay: float = 1.0,
                 layer_decay_mode: str = "lr_groups", summary_dropout: float = 0.1, init_from: str | None = None,
                 require_pretrained: bool = False, prediction_dir: str | None = None) -> None:
        super().__init__(model, optimizer, scheduler, monitor, monitor_mode, weight_decay, layer_decay,
                         layer_decay_mode, summary_dropout, init_from, require_pretrained, prediction_dir)
        self.n_choices = n_choices
        self._predictions: dict[str, dict] = {}  # test predictions of this rank, by question id
        self.head = MultipleChoiceHead(self.backbone.d_model)
        self.load_pretrained_heads(SUMMARY_HEADS)
        self.acc = nn.ModuleDict({f"{stage}_{s}": MeanMetric() for stage in ("valid", "test") for s in SUBSETS})

    def setup(self, stage: str) -> None:
        self.check_tokenizer()

    def forward(self, batch: dict) -> torch.Tensor:
        flat = {k: batch[k].flatten(0, 1) for k in ("input_ids", "token_type_ids", "attention_mask")}
        hidden = self.backbone.encode(flat["input_ids"], flat["token_type_ids"], flat["attention_mask"])
        return self.head(self.backbone.summary(hidden), self.n_choices)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self.head.loss(self(batch), batch["labels"])
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def _eval(self, stage: str, batch: dict) -> torch.Tensor:
        logits = self(batch)
        loss = self.head.loss(logits, batch["labels"])
        self.log(f"{stage}/loss", loss, sync_dist=True, batch_size=logits.shape[0])
        correct = (logits.argmax(-1) == batch["labels"]).float()
        for s, sel in (("all", torch.ones_like(correct, dtype=torch.bool)), ("middle", batch["level"] == 0),
                       ("high", batch["level"] == 1)):
            metric = self.acc[f"{stage}_{s}"]
            if sel.any():
                metric.update(correct[sel])
            name = f"{stage}/acc" if s == "all" else f"{stage}/acc_{s}"
            self.log(name, metric, on_step=False, on_epoch=True)
        return logits

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._eval("valid", batch)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        logits = self._eval("test", batch)
        if "qid" in batch:  # the letter is the metric's argmax, so accuracy recomputed from the file is test/acc
            letters = [LETTERS[i] for i in logits.argmax(-1).tolist()]
            probs = logits.float().softmax(-1).tolist()
            self._predictions.update({q: {"answer": a, "probs": p} for q, a, p in zip(batch["qid"], letters, probs)})

    def on_test_epoch_start(self) -> None:
        self._predictions = {}

    def on_test_epoch_end(self) -> None:
        predictions = self._gather(self._predictions)
        if predictions and self.trainer.is_global_zero:  # batches without ids (plain tensors) write nothing
            dm: MultipleChoiceData | None = datamodule_of(self)
            split = getattr(dm, "test_split", "test")
            self.write_predictions(predictions, split)

    def _gather(self, local: dict[str, dict]) -> dict[str, dict]:
        """Every rank's predictions (a DistributedSampler's padding repeats questions: same id, same entry)."""
        if self.trainer.world_size == 1 or not torch.distributed.is_initialized():
            return local
        parts: list[dict | None] = [None] * self.trainer.world_size
        torch.distributed.all_gather_object(parts, local)
        return {qid: entry for part in parts for qid, entry in part.items()}

    def write_predictions(self, predictions: dict[str, dict], split: str) -> Path:
        out = self.predictions_dir()
        path = out / f"race_{split}.json"
        path.write_text(json.dumps(predictions, indent=1))
        return path
