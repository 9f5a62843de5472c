"""ThroughputMonitor logs tokens/s, step time, peak memory and MFU from a measured CPU peak, without syncs."""

from __future__ import annotations

import functools

import pytorch_lightning as pl
import torch

from genlab.callbacks.throughput import ThroughputMonitor, count_tokens, peak_memory_mb
from genlab.models.transformer_xl import TransformerXL
from genlab.tasks.lm import LanguageModelTask


def test_throughput_monitor_logs_speed_memory_and_mfu():
    torch.manual_seed(0)
    model = TransformerXL(50, n_layer=1, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0, mem_len=8)
    task = LanguageModelTask(model, functools.partial(torch.optim.SGD, lr=0.1), None, monitor="train/loss")
    rows = torch.randint(0, 50, (2, 33))
    data = [{"input_ids": rows[:, s:s + 8], "target": rows[:, s + 1:s + 9], "segment": i}
            for i, s in enumerate(range(0, 32, 8))]
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                         callbacks=[ThroughputMonitor(window=2)], enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(task, train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None))
    m = trainer.callback_metrics
    assert m["perf/tokens_per_s"] > 0 and m["perf/step_time_s"] > 0
    assert m["perf/samples_per_s"] * 8 == m["perf/tokens_per_s"]
    assert 0 < m["perf/mfu"] < 1
    assert m["perf/peak_mem_mb"] >= 1 and peak_memory_mb(torch.device("cpu")) >= m["perf/peak_mem_mb"]
    assert count_tokens(data[0]) == (16, 2)


def test_transformer_xl_flops_per_token_matches_counted_matmuls():
    """MFU's numerator: the analytic count equals PyTorch's FLOP counter over a training step (forward +
    backward, full memory) up to the once-per-batch position projection."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    b, t, mem_len = 8, 32, 32
    model = TransformerXL(100, n_layer=2, d_model=64, n_head=4, d_head=16, d_inner=256, dropout=0.0,
                          mem_len=mem_len)
    ids = torch.randint(0, 100, (b, 2 * t + 1))
    memory = model(ids[:, :t], target=ids[:, 1:t + 1]).memory
    with FlopCounterMode(display=False) as counter:
        model(ids[:, t:2 * t], target=ids[:, t + 1:2 * t + 1], memory=memory).nll.sum().backward()
    analytic = model.flops_per_token(seq_len=t) * b * t
    assert abs(counter.get_total_flops() / analytic - 1) < 0.02
