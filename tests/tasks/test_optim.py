"""Transformer-XL's schedule (the released code): warm-up from 0 to lr, then cosine to min_lr_ratio * lr; weight-decay
exclusions."""

import math

import pytest
import torch

from genlab.tasks.optim import constant, warmup_cosine, warmup_linear, weight_decay_groups


def lrs(schedule_fn, steps: int, **kw) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = schedule_fn(opt, **kw)["scheduler"]
    out = []
    for _ in range(steps + 1):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_warmup_cosine_matches_the_tf_form():
    values = lrs(warmup_cosine, 100, warmup_steps=10, max_steps=100, min_lr_ratio=0.004)
    assert values[0] == 0.0 and values[5] == pytest.approx(1.0) and values[10] == pytest.approx(2.0)
    assert values[100] == pytest.approx(2.0 * 0.004)
    mid = 0.004 + (1 - 0.004) * 0.5 * (1 + math.cos(math.pi * 0.5))
    assert values[55] == pytest.approx(2.0 * mid)
    assert all(a >= b for a, b in zip(values[10:], values[11:]))


def test_warmup_linear_and_constant():
    values = lrs(warmup_linear, 20, warmup_steps=4, max_steps=20)
    assert values[0] == 0 and values[4] == pytest.approx(2.0) and values[12] == pytest.approx(1.0) and values[20] == 0
    assert lrs(constant, 3) == [2.0] * 4


def test_no_weight_decay_on_biases_norms_and_embeddings():
    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    decay, no_decay = weight_decay_groups(model, weight_decay=0.01)
    assert [p.shape for p in decay["params"]] == [torch.Size([4, 4])]
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert len(no_decay["params"]) == 4


def test_clipping_bounds_the_global_norm():
    p = torch.nn.Parameter(torch.zeros(10))
    p.grad = torch.full((10,), 3.0)
    torch.nn.utils.clip_grad_norm_([p], 0.25)
    assert p.grad.norm() == pytest.approx(0.25, rel=1e-5)


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_a_fused_optimiser_clips_through_lightning(precision, tmp_path):
    """task.optimizer.fused=true with trainer.gradient_clip_val: Lightning refuses to clip for a fused optimiser
    under mixed precision (a grad scaler would be unscaled inside step()); bf16-mixed has no scaler, so the task
    clips itself, and the gradients the fused step sees are clipped."""
    import functools

    import pytorch_lightning as pl

    from genlab.models.transformer_xl import TransformerXL
    from genlab.tasks.lm import LanguageModelTask

    norms = []

    class Recorded(LanguageModelTask):
        def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
            norms.append(float(torch.nn.utils.get_total_norm([p.grad for p in self.parameters() if p.grad is not None])))

    torch.manual_seed(0)
    model = TransformerXL(40, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32, dropout=0.0, mem_len=4)
    task = Recorded(model, functools.partial(torch.optim.Adam, lr=1e-3, fused=True), None)
    ids = torch.randint(0, 40, (2, 9))
    batches = [{"input_ids": ids[:, :8], "target": ids[:, 1:], "segment": 0}] * 3
    trainer = pl.Trainer(max_steps=3, precision=precision, gradient_clip_val=1e-3, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path, accelerator="cpu")
    trainer.fit(task, torch.utils.data.DataLoader(batches, batch_size=None))
    assert len(norms) == 3 and max(norms) <= 1e-3 * (1 + 1e-4), norms


def test_a_fused_optimiser_with_clipping_under_a_grad_scaler_is_a_config_error():
    """16-mixed (GPU only) has a grad scaler, which a fused step unscales itself: one clear error, not Lightning's."""
    import functools
    import types

    from genlab.errors import ConfigError
    from genlab.models.transformer_xl import TransformerXL
    from genlab.tasks.lm import LanguageModelTask

    model = TransformerXL(40, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32, dropout=0.0, mem_len=4)
    task = LanguageModelTask(model, functools.partial(torch.optim.Adam, lr=1e-3, fused=True), None)
    task._trainer = types.SimpleNamespace(precision_plugin=types.SimpleNamespace(scaler=object()))
    optimizer = task.configure_optimizers()
    with pytest.raises(ConfigError, match="task.optimizer.fused=false"):
        task.configure_gradient_clipping(optimizer, 0.25, "norm")
