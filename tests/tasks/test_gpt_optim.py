"""GPT-1 optimisation (Radford et al., 2018, §4.1, and the released code): the release's schedules, its Adam, the
decay rule, clipping before the update."""

from __future__ import annotations

import itertools
import math
from functools import partial

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from genlab.models.gpt import GPTLMHeadModel
from genlab.tasks.gpt import GPTPretrainTask
from genlab.tasks.gpt_optim import (
    OpenAIAdam,
    ndim_decay_groups,
    oai_cosine,
    oai_linear,
    oai_warmup_cosine,
    oai_warmup_linear,
)
from genlab.tasks.optim import warmup_cosine


def factors(schedule: dict, steps: int) -> list[float]:
    fn = schedule["scheduler"].lr_lambdas[0]
    return [fn(s) for s in range(steps + 1)]


def test_warmup_linear_values_of_the_release():
    """Check 16."""
    assert oai_linear(0.001) == pytest.approx(0.5 * 0.999)
    assert oai_linear(0.5) == pytest.approx(0.5)
    assert oai_linear(1.0) == 0.0
    assert oai_linear(0.0) == 0.0 and oai_linear(0.002) == pytest.approx(0.998)


@pytest.mark.parametrize("form", ["paper", "oai"])
def test_pretraining_cosine_peaks_at_2000_and_reaches_0_at_the_last_step(form):
    """Check 16, for the paper's smooth form (optim.warmup_cosine) and the release's (gpt_optim)."""
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    total = 10_000
    if form == "paper":
        schedule = warmup_cosine(opt, warmup_steps=2000, max_steps=total, min_lr_ratio=0.0)
    else:
        schedule = oai_warmup_cosine(opt, max_steps=total, warmup_steps=2000)
    f = factors(schedule, total)
    assert f[0] == 0.0 and f[1000] == pytest.approx(0.5)
    assert max(range(total + 1), key=f.__getitem__) == 2000 and f[2000] == pytest.approx(1.0)
    assert f[total] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in itertools.pairwise(f[2000:]))
    if form == "oai":  # the release's cosine runs over the whole progress: a small jump after warm-up
        assert f[2001] == pytest.approx(0.5 * (1 + math.cos(math.pi * 2001 / total)))
        assert oai_cosine(0.2, 0.2) == 1.0


def model_with_every_kind_of_tensor() -> nn.Module:
    return nn.ModuleDict({"emb": nn.Embedding(5, 4), "lin": nn.Linear(4, 4), "ln": nn.LayerNorm(4)})


def test_weight_decay_touches_only_tensors_with_two_or_more_dims():
    """Check 17: a bias with zero gradient is unchanged after a step; a weight (and an embedding) with zero
    gradient shrinks by lr_t · 0.01 · θ."""
    torch.manual_seed(0)
    model = model_with_every_kind_of_tensor()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    lr, (b1, b2) = 0.1, (0.9, 0.999)
    opt = OpenAIAdam(ndim_decay_groups(model, 0.01), lr=lr, betas=(b1, b2))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    lr_t = lr * math.sqrt(1 - b2) / (1 - b1)
    for name, p in model.named_parameters():
        if p.ndim >= 2:
            assert torch.allclose(p, before[name] * (1 - lr_t * 0.01), atol=1e-7), name
        else:
            assert torch.equal(p, before[name]), name
    groups = ndim_decay_groups(GPTLMHeadModel(10, 3, n_positions=4, n_embd=8, n_layer=1, n_head=2), 0.01)
    assert sum(len(g["params"]) for g in groups) == len(list(GPTLMHeadModel(10, 3, n_positions=4, n_embd=8,
                                                                             n_layer=1, n_head=2).parameters()))


def test_adam_update_is_the_releases_formula():
    """Bias correction folded into the step size with the 1-based step; decay scaled by the same lr_t."""
    torch.manual_seed(1)
    p = nn.Parameter(torch.randn(3, 2))
    q = p.detach().clone()
    m, v = torch.zeros_like(q), torch.zeros_like(q)
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-8, 0.01
    opt = OpenAIAdam([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    for t in range(1, 4):
        g = torch.randn(3, 2)
        p.grad = g.clone()
        opt.step()
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        lr_t = lr * math.sqrt(1 - b2**t) / (1 - b1**t)
        q = q - lr_t * (m / (v.sqrt() + eps) + wd * q)
        assert torch.allclose(p.detach(), q, atol=1e-7)


@pytest.mark.parametrize("base", [0, 1])
def test_schedule_step_base(base):
    """Check 27: with base 0 (release) the first step moves no parameter (lr 0, decay term included) while Adam's
    m and v change; base 1 moves. The schedule is evaluated at x = (t + base) / T."""
    torch.manual_seed(2)
    model = model_with_every_kind_of_tensor()
    before = [p.detach().clone() for p in model.parameters()]
    opt = OpenAIAdam(ndim_decay_groups(model, 0.01), lr=0.1)
    schedule = oai_warmup_linear(opt, max_steps=1000, warmup_frac=0.002, step_base=base)
    assert factors(schedule, 3) == pytest.approx([oai_linear((t + base) / 1000) for t in range(4)])
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    schedule["scheduler"].step()
    moved = [not torch.equal(p, b) for p, b in zip(model.parameters(), before)]
    assert all(moved) if base == 1 else not any(moved)
    assert all(opt.state[p]["m"].abs().sum() > 0 and opt.state[p]["v"].abs().sum() > 0 for p in model.parameters())


class RecordNorms(pl.Callback):
    def __init__(self):
        self.raw = []

    def on_after_backward(self, trainer, module):
        self.raw.append(total_norm(module.parameters()))


class RecordingAdam(OpenAIAdam):
    """Records the global gradient norm the update reads (Lightning runs forward, backward and clipping in the
    closure it hands to ``step``)."""

    def step(self, closure=None):
        with torch.enable_grad():
            loss = closure()
        self.seen.append(total_norm(p for g in self.param_groups for p in g["params"]))
        super().step()
        return loss


def total_norm(params) -> float:
    return torch.norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])).item()


def test_global_norm_clipping_happens_before_the_update(tmp_path):
    """Check 18: Lightning's gradient_clip_val=1 clips the global norm before OpenAIAdam reads the gradients."""
    torch.manual_seed(0)
    model = GPTLMHeadModel(30, 0, n_positions=8, n_embd=16, n_layer=1, n_head=2, init_std=0.5)
    RecordingAdam.seen = []
    task = GPTPretrainTask(model, partial(RecordingAdam, lr=1e-3))
    data = [{"input_ids": torch.randint(0, 30, (4, 8))} for _ in range(2)]
    norms = RecordNorms()
    trainer = pl.Trainer(max_steps=2, gradient_clip_val=1.0, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[norms], default_root_dir=tmp_path)
    trainer.fit(task, train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None))
    assert len(RecordingAdam.seen) == 2 and min(norms.raw) > 1.0
    assert max(RecordingAdam.seen) <= 1.0 + 1e-6
