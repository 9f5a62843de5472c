"""Every GLUE `_mini` preset (XLNet and BERT) trains on CPU and beats its majority-class baseline on dev (STS-B:
the mean predictor, i.e. Pearson > 0), with the preset's own data, head, metric and optimiser recipe. The final
weights are scored (no checkpoint selection on dev), so the margin is not picked by the dev set itself."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from helpers import train_preset

warnings.filterwarnings("ignore", category=UserWarning)

# 400-step presets (labels with a cue inside one segment, or SST-2) run in CI; the 800-step pair-relation presets
# (word overlap across the two segments must be learnt from scratch) take twice as long and are marked slow.
FAST = ("cola", "sst2", "mnli", "rte")
SLOW = ("mrpc", "qqp", "stsb", "qnli", "wnli")
CASES = [(t, a) for t in FAST for a in ("xlnet", "bert")] + [
    pytest.param(t, a, marks=pytest.mark.slow) for t in SLOW for a in ("xlnet", "bert")]
# dev metric -> margin over the baseline (seed-0 runs here; seeds 0-2 in experiments/xlnet_glue/README.md)
MARGIN = {"acc": 0.10, "mcc": 0.3, "pearson": 0.1}
SLOW_MARGIN = 0.05  # xlnet_mrpc_mini measured 58 % after its 800 steps (README)
SST2_MARGIN = 0.0  # 40 dev sentences, 140 human-labelled training sentences, from scratch: the hard case (README)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))  # minis and tokenizers are shared by the xlnet/bert presets


@pytest.mark.parametrize(("task", "arch"), CASES)
def test_glue_mini_trains_and_beats_majority_class(task, arch, compose_cfg, cache, tmp_path, record_property):
    res, dm = train_preset(f"{arch}_{task}_mini", compose_cfg, cache, tmp_path)  # predictions/ go to tmp_path
    for key in ("test/pearson", "test/mcc", "test/acc", "test/mm/acc"):
        if key in res:
            record_property(key, float(res[key]))
    if task == "stsb":
        assert res["test/pearson"] > MARGIN["pearson"], res
        return
    if task == "cola":
        assert res["test/mcc"] > MARGIN["mcc"], res  # majority class has MCC 0
        return
    for split in dm.dev_splits:  # MNLI: matched and mismatched
        labels = dm.splits[split].labels
        majority = max(float(np.mean(labels == c)) for c in range(dm.n_labels))
        record_property(f"{split}/majority", majority)
        acc = res[f"test/{'mm/' if split == 'dev_mismatched' else ''}acc"]
        margin = SST2_MARGIN if task == "sst2" else SLOW_MARGIN if task in SLOW else MARGIN["acc"]
        assert acc > majority + margin, (split, acc, majority)
