"""Dynamic evaluation (Krause et al. 2017) as used by MoS (Dai thesis Table A.9 and the
authors' ``dynamiceval.py``).

1. Gradient statistics on the training stream (batch 100, chunks of 5): ``MS = sqrt(sum_chunks g^2)``
   (``ms=True``: ``sqrt(mean)``); ``decrate = MS / sum_tensors mean(MS)`` clipped to ``<= 1/lamb`` (no clip when
   ``lamb = 0``).
2. On valid/test, batch 1, chunks of 5, state carried: record the chunk's mean NLL, then
   ``theta <- theta + lamb * decrate * (theta0 - theta) - lr * grad / (MS + eps)`` on every parameter.

Every dropout, weight drop included, is off (``model.eval()``; cuDNN RNN backward is disabled because it refuses
eval mode). The model's weights are restored to theta0 when a run ends, so valid and test start from the same
model and repeated runs are bit-identical.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from genlab.errors import UserError

# Called after every chunk: (chunks done, chunks in all, token-mean NLL so far or None), e.g. to log progress.
Progress = Callable[[int, int, float | None], None]


def _stream_rows(tokens: Tensor, batch_size: int) -> Tensor:
    """Batch-major [B, L] contiguous streams (the tail that does not fill a row is dropped)."""
    length = len(tokens) // batch_size
    if length < 2:
        raise UserError(f"dynamic evaluation: {len(tokens)} tokens are too few for {batch_size} streams.")
    return tokens[: length * batch_size].view(batch_size, length)


def _n_chunks(rows: Tensor, bptt: int) -> int:
    return math.ceil((rows.shape[1] - 1) / bptt)


def _chunks(rows: Tensor, bptt: int) -> Iterator[tuple[Tensor, Tensor]]:
    for start in range(0, rows.shape[1] - 1, bptt):
        end = min(start + bptt, rows.shape[1] - 1)
        yield rows[:, start:end], rows[:, start + 1 : end + 1]


@contextmanager
def _no_dropout_with_grad(model: nn.Module):
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad(), torch.backends.cudnn.flags(enabled=False):
            yield
    finally:
        model.train(was_training)


def _forward(model: nn.Module, x: Tensor, y: Tensor, memory):
    out = model(x, target=y, memory=memory)
    if out.memory is None:
        raise UserError(
            f"dynamic evaluation needs a recurrent model that returns its state as `memory`; "
            f"{type(model).__name__} returned none. Use it with an AWD-LSTM (model=awd_lstm*)."
        )
    return out.nll.mean(), out.memory


def _params(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]  # tied weights appear once


def gradient_statistics(model: nn.Module, train_tokens: Tensor, batch_size: int = 100, bptt: int = 5,
                        ms: bool = False, progress: Progress | None = None) -> dict[str, Tensor]:
    """Per-parameter ``MS`` from the training stream (step 1)."""
    params = _params(model)
    sq = {n: torch.zeros_like(p) for n, p in params}
    rows = _stream_rows(train_tokens.to(next(model.parameters()).device), batch_size)
    n_chunks, memory = 0, None
    with _no_dropout_with_grad(model):
        for x, y in _chunks(rows, bptt):
            model.zero_grad(set_to_none=True)
            loss, memory = _forward(model, x, y, memory)
            loss.backward()
            for n, p in params:
                if p.grad is not None:
                    sq[n] += p.grad.detach() ** 2
            n_chunks += 1
            if progress is not None:
                progress(n_chunks, _n_chunks(rows, bptt), None)
        model.zero_grad(set_to_none=True)
    return {n: (s / n_chunks).sqrt() if ms else s.sqrt() for n, s in sq.items()}


def decay_rates(stats: dict[str, Tensor], lamb: float) -> dict[str, Tensor]:
    gsum = sum(s.mean() for s in stats.values())
    rates = {n: s / gsum for n, s in stats.items()}
    if lamb > 0:  # lamb = 0: no pull-back, nothing to clip (the original divides by zero here)
        rates = {n: r.clamp(max=1.0 / lamb) for n, r in rates.items()}
    return rates


@torch.no_grad()
def apply_update(params, theta0, decrate, stats, lr: float, lamb: float, epsilon: float) -> None:
    """``theta += lamb * decrate * (theta0 - theta) - lr * grad / (MS + eps)`` for every (name, param)."""
    for n, p in params:
        step = lamb * decrate[n] * (theta0[n] - p)
        if p.grad is not None:
            step -= lr * p.grad / (stats[n] + epsilon)
        p.add_(step)


def dynamic_evaluate(model: nn.Module, tokens: Tensor, stats: dict[str, Tensor], lr: float = 0.002,
                     lamb: float = 0.075, epsilon: float = 0.001, bptt: int = 5,
                     progress: Progress | None = None) -> tuple[float, list[float]]:
    """Step 2 on one split (batch 1). Returns the token-mean NLL and the per-chunk losses (each recorded
    before its update). The weights are back at theta0 afterwards."""
    params = _params(model)
    theta0 = {n: p.detach().clone() for n, p in params}
    decrate = decay_rates(stats, lamb)
    rows = _stream_rows(tokens.to(next(model.parameters()).device), 1)
    losses, lengths, memory = [], [], None
    scored_nll, scored_tokens, n_chunks = 0.0, 0, _n_chunks(rows, bptt)
    try:
        with _no_dropout_with_grad(model):
            for x, y in _chunks(rows, bptt):
                model.zero_grad(set_to_none=True)
                loss, memory = _forward(model, x, y, memory)
                losses.append(loss.item())
                lengths.append(x.shape[1])
                loss.backward()
                apply_update(params, theta0, decrate, stats, lr, lamb, epsilon)
                if progress is not None:
                    scored_nll, scored_tokens = scored_nll + losses[-1] * lengths[-1], scored_tokens + lengths[-1]
                    progress(len(losses), n_chunks, scored_nll / scored_tokens)
    finally:
        with torch.no_grad():
            for n, p in params:
                p.copy_(theta0[n])
        model.zero_grad(set_to_none=True)
    total = sum(l * w for l, w in zip(losses, lengths))
    return total / sum(lengths), losses


def perplexity(mean_nll: float) -> float:
    return math.exp(mean_nll)
