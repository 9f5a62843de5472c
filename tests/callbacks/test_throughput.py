"""ThroughputMonitor logs tokens/s, step time, peak memory and MFU from a measured CPU peak, without syncs."""

from __future__ import annotations

import functools

import pytest
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


# ------------------------------------------------------------------------------------------------ MFU, synthetic
class FixedFlops(pl.LightningModule):
    """A model with a known cost: ``flops_per_token()`` = 1000, tokens = input_ids.numel()."""

    def __init__(self) -> None:
        super().__init__()
        self.model = torch.nn.Linear(4, 1)
        self.model.flops_per_token = lambda: 1000.0

    def training_step(self, batch, batch_idx):
        return self.model(batch["x"]).float().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class FakeClock:
    """``time`` for the callback's module only: each perf_counter() call advances one second."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now


def _fit_fixed(precision: str, monkeypatch, peaks: dict[str, float], window: int = 2) -> dict:
    from genlab.callbacks import throughput

    monkeypatch.setattr(throughput, "measured_gemm_flops", lambda device, dtype="fp32", **kw: peaks[dtype])
    monkeypatch.setattr(throughput, "time", FakeClock())
    data = [{"input_ids": torch.zeros(2, 8, dtype=torch.long), "x": torch.randn(2, 4)} for _ in range(window)]
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                         precision=precision, callbacks=[ThroughputMonitor(window=window)],
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(FixedFlops(), train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None))
    return trainer.callback_metrics


def test_mfu_is_measured_against_the_peak_of_the_dtype_that_computes(monkeypatch):
    """2 steps x 16 tokens x 1000 FLOPs in 1 (fake) second = 32,000 FLOP/s; the fp32 peak is 64,000 and the
    bf16 peak 128,000: fp32 runs give 0.5, bf16-mixed runs 0.25 (before the fix, 0.5: the fp32 rate)."""
    peaks = {"fp32": 64_000.0, "bf16": 128_000.0, "fp16": 1e9, "fp64": 1e9}
    assert float(_fit_fixed("32-true", monkeypatch, peaks)["perf/mfu"]) == pytest.approx(0.5)
    assert float(_fit_fixed("bf16-mixed", monkeypatch, peaks)["perf/mfu"]) == pytest.approx(0.25)


def test_mfu_never_exceeds_one_and_says_why(monkeypatch):
    peaks = {"fp32": 16_000.0, "bf16": 16_000.0, "fp16": 1.0, "fp64": 1.0}  # below the achieved 32,000 FLOP/s
    with pytest.warns(UserWarning, match="exceeds the peak"):
        metrics = _fit_fixed("32-true", monkeypatch, peaks)
    assert float(metrics["perf/mfu"]) == pytest.approx(1.0)
    monitor = ThroughputMonitor()
    monitor._peak = 100.0
    assert monitor.mfu(50.0) == 0.5
    with pytest.warns(UserWarning):
        assert monitor.mfu(400.0) == 1.0
    assert monitor.mfu(100.0) == 0.25  # the raised peak stays


def test_peak_follows_compute_dtype_and_lightning_short_spellings(monkeypatch):
    from genlab.callbacks import throughput

    monkeypatch.setattr(throughput, "measured_gemm_flops", lambda device, dtype="fp32", **kw: {"fp32": 1.0}.get(dtype, 3.0))
    cpu = torch.device("cpu")
    assert [throughput.peak_flops(cpu, p) for p in ("32-true", "32", "bf16-mixed", "bf16-true", "bf16")] == \
        [1.0, 1.0, 3.0, 3.0, 3.0]
    assert throughput.compute_dtype("16-mixed") == "fp16" and throughput.compute_dtype("64-true") == "fp64"


def test_measured_bf16_and_fp32_gemm_rates_are_positive():
    from genlab.callbacks.throughput import measured_gemm_flops

    for dtype in ("fp32", "bf16"):
        assert measured_gemm_flops("cpu", n=64, seconds=0.01, dtype=dtype) > 0


class TwoLayers(pl.LightningModule):
    """No flops_per_token: embedding [V, a] -> Linear(a, b) -> Linear(b, V) -> CE at every token."""

    def __init__(self, V=40, a=8, b=16) -> None:
        super().__init__()
        self.emb, self.l1, self.l2 = torch.nn.Embedding(V, a), torch.nn.Linear(a, b), torch.nn.Linear(b, V)

    def training_step(self, batch, batch_idx):
        ids = batch["input_ids"]
        logits = self.l2(self.l1(self.emb(ids)))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_without_an_analytic_count_the_first_step_is_counted():
    """The counted matmuls: forward 2(ab + bV) + backward 4(ab + bV) per token = 6(ab + bV); 6 x parameters
    would add the embedding table (a lookup, not a matmul) and the biases."""
    monitor = ThroughputMonitor(window=100)
    data = [{"input_ids": torch.randint(0, 40, (2, 8))} for _ in range(2)]
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                         callbacks=[monitor], enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(TwoLayers(), train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None))
    assert monitor._flops_per_token == 6 * (8 * 16 + 16 * 40)
    assert monitor._steps == 1 and monitor._counter is None  # the counted step is not timed
