"""GLUE / text-classification metrics against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from genlab.errors import ConfigError
from genlab.metrics.glue_metrics import classification_metrics, primary


def compute(kind, preds, target, n_labels=2):
    m = classification_metrics(kind, n_labels)
    m.update(torch.as_tensor(preds), torch.as_tensor(target))
    return {k: float(v) for k, v in m.compute().items()}


def test_cola_matthews_correlation_hand_computed():
    # TP=2, TN=1, FP=1, FN=1 -> (2*1 - 1*1) / sqrt(3*3*2*2) = 1/6
    out = compute("mcc", [1, 1, 0, 1, 0], [1, 1, 0, 0, 1])
    assert out["mcc"] == pytest.approx(1 / 6, abs=1e-6)


@pytest.mark.parametrize("preds, target", [([1, 1, 1, 1], [1, 1, 1, 1]), ([0, 0, 0], [0, 0, 0]),
                                           ([1, 1, 1, 1], [1, 0, 1, 0]), ([1, 0, 1, 0], [0, 0, 0, 0])])
def test_cola_matthews_is_zero_on_a_single_class_as_scikit_learn(preds, target):
    """GLUE scores CoLA with sklearn.metrics.matthews_corrcoef, which is 0.0 when a margin is empty."""
    sklearn = pytest.importorskip("sklearn.metrics")
    assert compute("mcc", preds, target)["mcc"] == 0.0 == sklearn.matthews_corrcoef(target, preds)


def test_cola_matthews_matches_scikit_learn_on_random_labels():
    sklearn = pytest.importorskip("sklearn.metrics")
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        preds, target = torch.randint(0, 2, (15,), generator=g), torch.randint(0, 2, (15,), generator=g)
        want = sklearn.matthews_corrcoef(target.numpy(), preds.numpy())
        assert compute("mcc", preds, target)["mcc"] == pytest.approx(want, abs=1e-6)


def test_mrpc_accuracy_and_f1_of_positive_class():
    # TP=2, FP=1, FN=1, TN=2 -> acc 4/6, F1 = 2*2/(2*2+1+1) = 2/3
    out = compute("acc_f1", [1, 1, 1, 0, 0, 0], [1, 1, 0, 1, 0, 0])
    assert out["acc"] == pytest.approx(4 / 6) and out["f1"] == pytest.approx(2 / 3)


def test_stsb_pearson_and_spearman():
    pred, gold = [1.0, 2.0, 3.0, 5.0], [1.0, 3.0, 2.0, 4.0]
    mp, mg = sum(pred) / 4, sum(gold) / 4
    cov = sum((p - mp) * (g - mg) for p, g in zip(pred, gold))
    pear = cov / math.sqrt(sum((p - mp) ** 2 for p in pred) * sum((g - mg) ** 2 for g in gold))
    out = compute("corr", pred, gold, 1)
    assert out["pearson"] == pytest.approx(pear, abs=1e-6)
    # ranks (1,2,3,4) vs (1,3,2,4): 1 - 6*sum(d^2)/(n(n^2-1)) = 1 - 6*2/60 = 0.8
    assert out["spearman"] == pytest.approx(0.8, abs=1e-6)


def test_mnli_accuracy_three_classes():
    assert compute("acc", [0, 1, 2, 2], [0, 1, 1, 2], 3)["acc"] == pytest.approx(0.75)


def test_text_classification_error_rate_percent():
    out = compute("error", [0, 1, 4, 2, 3], [0, 1, 4, 2, 2], 5)
    assert out["error"] == pytest.approx(20.0) and out["acc"] == pytest.approx(0.8)


def test_primary_metric_names_and_unknown_kind():
    assert [primary(k) for k in ("mcc", "acc_f1", "corr", "acc", "error")] == ["mcc", "acc", "pearson", "acc", "error"]
    with pytest.raises(ConfigError, match="task.metric"):
        classification_metrics("auc", 2)
