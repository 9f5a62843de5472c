"""The activation probe counts what autograd really saves, and extrapolates it to the run's batch."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from genlab.cli import memory_probe
from genlab.models.transformer_xl import TransformerXL
from genlab.nn.adaptive_embedding import bin_bounds
from genlab.tasks.lm import LanguageModelTask


def test_saved_bytes_are_the_tensors_backward_needs():
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    # Linear saves its input (x; the ReLU output, which ReLU itself saves too: one storage), never its weight
    assert memory_probe.saved_bytes(net, lambda: net(x).sum()) == 4 * (5 * 8 + 5 * 16)
    under_bf16 = memory_probe.saved_bytes(net, lambda: net(x).sum(), "bf16-mixed")
    # autocast: bf16 copies of x, of the ReLU output and of the second weight (the gradient of the ReLU output
    # needs it; x needs none, so the first weight's copy is not kept)
    assert under_bf16 == 2 * (5 * 8 + 5 * 16 + 4 * 16)


def test_zipf_ids_follow_the_rank_law():
    ids = memory_probe.zipf_ids((4, 1000), vocab=100_000)
    assert ids.min() >= 0 and ids.max() < 100_000
    share = (ids < 1000).float().mean().item()
    assert math.isclose(share, math.log(1000) / math.log(100_000), abs_tol=0.01)


def _txl_task(cutoffs):
    model = TransformerXL(vocab_size=3000, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32, mem_len=4,
                          cutoffs=cutoffs, dropout=0.0, dropatt=0.0)
    return LanguageModelTask(model, optimizer=torch.optim.Adam)


def test_probe_extrapolates_to_the_measured_batch():
    task = _txl_task([500, 1500])
    cfg = OmegaConf.create({"data": {"batch_size": 48, "tgt_len": 16}, "trainer": {"precision": "32-true"}})
    small, large = memory_probe.probe_rows(cfg, 48)
    assert (small, large) == (16, 32)
    direct = memory_probe.task_saved_bytes(task, memory_probe.synthetic_batch(cfg, task, 48), "32-true")
    assert abs(memory_probe.activation_bytes(cfg, task)[0] - direct) / direct < 0.03


def test_adaptive_softmax_tails_counted_for_their_tokens_only():
    cfg = OmegaConf.create({"data": {"batch_size": 8, "tgt_len": 32}, "trainer": {"precision": "32-true"}})
    full, adaptive = _txl_task([]), _txl_task([500, 1500])
    batch = memory_probe.synthetic_batch(cfg, full, 8)
    target = batch["target"].flatten()
    saved_full = memory_probe.task_saved_bytes(full, batch, "32-true")
    saved_adaptive = memory_probe.task_saved_bytes(adaptive, batch, "32-true")
    bounds = bin_bounds(3000, [500, 1500])
    # the full softmax keeps N x V fp32 log-probabilities; the adaptive one N x (500 + 2) plus each tail's rows
    tails = sum(int(((target >= lo) & (target < hi)).sum()) * (hi - lo) for lo, hi in zip(bounds[1:-1], bounds[2:]))
    logits_drop = 4 * (target.numel() * 3000 - target.numel() * 502 - tails)
    assert abs((saved_full - saved_adaptive) - logits_drop) / logits_drop < 0.25


@pytest.mark.parametrize("preset", ["bert_stsb_mini", "xlnet_race_mini", "funnel_squad1_mini"])
def test_finetuning_tasks_probed_on_their_own_batch(compose_cfg, preset):
    """Regression, multiple choice ([B, choices, T]) and span extraction: saved bytes extrapolated from two probe
    batches equal those of the real batch (linear in rows), so the guard no longer falls back to a formula."""
    from genlab.cli import build

    cfg = compose_cfg([f"experiment={preset}", "data.batch_size=6", "data.max_seq_len=24"])
    torch.manual_seed(0)
    task = build.build_task(cfg, sizes={"vocab_size": 300})
    batch = memory_probe.synthetic_batch(cfg, task, 6)
    direct = memory_probe.task_saved_bytes(task, batch, str(cfg.trainer.precision))
    assert direct > 0 and abs(memory_probe.activation_bytes(cfg, task)[0] - direct) / direct < 0.03
