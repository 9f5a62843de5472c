"""Official metric of each GLUE task and the text-classification error rate (XLNet paper §3.4-§3.5), on torchmetrics.

``metric`` kinds: ``mcc`` (CoLA: Matthews correlation), ``acc_f1`` (MRPC/QQP: accuracy and binary F1 of class 1),
``corr`` (STS-B: Pearson and Spearman), ``acc`` (MNLI, QNLI, RTE, SST-2, WNLI), ``error`` (text classification:
``100 − 100·accuracy`` plus accuracy). Values are fractions except ``error`` (percent, as the papers' tables).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import BinaryF1Score, BinaryMatthewsCorrCoef, MulticlassAccuracy
from torchmetrics.regression import PearsonCorrCoef, SpearmanCorrCoef

from genlab.errors import ConfigError

KINDS = ("mcc", "acc_f1", "corr", "acc", "error")
PRIMARY = {"mcc": "mcc", "acc_f1": "acc", "corr": "pearson", "acc": "acc", "error": "error"}


class ErrorRate(Metric):
    """Error rate in percent: ``100 · (1 − correct / total)``."""

    def __init__(self) -> None:
        super().__init__()
        self.add_state("correct", torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor) -> None:
        self.correct += (preds == target).sum()
        self.total += target.numel()

    def compute(self) -> Tensor:
        return 100.0 * (1.0 - self.correct / self.total)


class GlueMatthewsCorrCoef(BinaryMatthewsCorrCoef):
    """Binary Matthews correlation as GLUE scores it (scikit-learn): 0.0 whenever the denominator is zero, i.e. when
    the predictions or the labels hold a single class. torchmetrics returns 1.0 when both hold the same single
    class, which would report a constant classifier on a one-class batch as perfect."""

    def __init__(self) -> None:
        super().__init__()

    def compute(self) -> Tensor:
        tn, fp, fn, tp = self.confmat.flatten().double()
        if (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn) == 0:
            return torch.zeros((), device=self.confmat.device)
        return super().compute()


def classification_metrics(kind: str, n_labels: int) -> MetricCollection:
    """Metrics fed with predicted class indices (or scores for ``corr``) and targets."""
    if kind not in KINDS:
        raise ConfigError(f"task.metric={kind!r} is unknown; use one of {KINDS}.")
    if kind == "corr":
        return MetricCollection({"pearson": PearsonCorrCoef(), "spearman": SpearmanCorrCoef()})
    acc = MulticlassAccuracy(num_classes=max(n_labels, 2), average="micro")
    if kind == "mcc":
        return MetricCollection({"mcc": GlueMatthewsCorrCoef(), "acc": acc})
    if kind == "acc_f1":
        return MetricCollection({"acc": acc, "f1": BinaryF1Score()})
    if kind == "error":
        return MetricCollection({"error": ErrorRate(), "acc": acc})
    return MetricCollection({"acc": acc})


def primary(kind: str) -> str:
    return PRIMARY[kind]




