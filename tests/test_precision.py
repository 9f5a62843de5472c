"""Precision presets (trainer.precision=32-true|bf16-mixed|bf16-true) on Transformer-XL: masking, scores and
softmax stay fp32 inside attention, and low-precision outputs are finite and close to fp32."""

from __future__ import annotations

import copy
import functools

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from genlab.models.transformer_xl import TransformerXL
from genlab.tasks.lm import LanguageModelTask

V = 60


def _model(**kw) -> TransformerXL:
    torch.manual_seed(0)
    return TransformerXL(V, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0, mem_len=8,
                         same_length=True, **kw)


def _two_segments(m: TransformerXL, ids: torch.Tensor) -> torch.Tensor:
    first = m(ids[:, :8], target=ids[:, 1:9])
    return m(ids[:, 8:16], target=ids[:, 9:17], memory=first.memory).nll  # memory + same_length masks in play


@pytest.mark.parametrize("mode", ["bf16-mixed", "bf16-true"])
@pytest.mark.parametrize("impl", ["sdpa", "naive"])
def test_masking_and_softmax_keep_fp32_arithmetic_and_outputs_match_fp32(mode, impl, monkeypatch):
    """Evaluation: the sdpa path hands SDPA's fused kernel (fp32 scores and softmax inside) bf16 inputs and a bf16
    bias (bf16 position scores, exact -inf mask); the naive reference upcasts and takes its softmax in fp32."""
    m = _model(attn_impl=impl).eval()
    ids = torch.randint(0, V, (2, 17), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = _two_segments(m, ids)
    seen: list[torch.dtype] = []
    sdpa, softmax = F.scaled_dot_product_attention, torch.Tensor.softmax

    def record_sdpa(q, k, v, attn_mask=None, **kw):
        seen.extend([q.dtype, k.dtype, attn_mask.dtype if attn_mask.dtype != torch.bool else torch.float32])
        return sdpa(q, k, v, attn_mask=attn_mask, **kw)

    def record_softmax(x, *a, **kw):
        seen.append(x.dtype)
        return softmax(x, *a, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", record_sdpa)
    monkeypatch.setattr(torch.Tensor, "softmax", record_softmax)
    with torch.no_grad():
        if mode == "bf16-mixed":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                low = _two_segments(m, ids)
        else:
            low = _two_segments(copy.deepcopy(m).to(torch.bfloat16), ids)
    expected = torch.bfloat16 if impl == "sdpa" else torch.float32
    assert seen and all(dt == expected for dt in seen), seen
    assert low.dtype == torch.float32 and torch.isfinite(low).all()
    torch.testing.assert_close(low, ref, rtol=0.05, atol=0.1)


class LossLog(pl.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "bf16-true"])
def test_lightning_precision_presets_train_transformer_xl(precision):
    g = torch.Generator().manual_seed(4)
    rows = torch.randint(0, V, (4, 25), generator=g)
    data = [{"input_ids": rows[:, s:s + 8], "target": rows[:, s + 1:s + 9], "segment": i}
            for i, s in enumerate(range(0, 24, 8))]
    task = LanguageModelTask(_model(), functools.partial(torch.optim.Adam, lr=1e-3), None, monitor="train/loss")
    log = LossLog()
    trainer = pl.Trainer(accelerator="cpu", devices=1, precision=precision, max_epochs=1, logger=False,
                         enable_checkpointing=False, callbacks=[log], enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(task, train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None))
    assert len(log.losses) == 3 and all(torch.isfinite(torch.tensor(log.losses)))
    assert abs(log.losses[0] - torch.log(torch.tensor(float(V)))) < 0.5  # near-uniform start in every preset


@pytest.mark.parametrize("short,full", [("bf16", "bf16-mixed"), (16, "16-mixed"), ("32", "32-true"), (64, "64-true")])
def test_lightning_short_precision_spellings_are_checked_as_lightning_reads_them(short, full):
    from genlab.errors import ConfigError
    from genlab.parallel import check_precision, mixed_precision_dtypes, normalize_precision

    assert normalize_precision(short) == full
    assert mixed_precision_dtypes(str(short)) == mixed_precision_dtypes(full)
    if full == "16-mixed":  # refused for what it is (fp16 on CPU), not as an unknown value
        with pytest.raises(ConfigError, match="not supported on CPU"):
            check_precision(short, torch.device("cpu"))
    else:
        check_precision(short, torch.device("cpu"))  # trainer.precision=bf16 runs bf16-mixed on CPU
