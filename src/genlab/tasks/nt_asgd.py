"""Non-monotonically triggered averaged SGD (NT-ASGD of AWD-LSTM, Merity et al. 2018, as MoS uses it).

Training runs plain SGD; after each epoch's validation, the trigger compares the loss with the minimum of all
but the last ``nonmono`` recorded losses (strict ``>``, checked before appending) and, once it fires, starts a
uniform Polyak average of the iterates. Instead of ``torch.optim.ASGD`` (whose eta lags the per-step lr
rescale by one step and whose averaging conventions vary across versions) the optimiser stays SGD and
this class keeps the average: ``ax`` after k post-switch steps is the mean of iterates 1..k.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor


def nonmonotone_trigger(history: list[float], value: float, nonmono: int) -> bool:
    """True when ``value`` is worse than the best of ``history`` excluding its last ``nonmono`` entries."""
    return len(history) > nonmono and value > min(history[:-nonmono])


class NTASGD:
    def __init__(self, nonmono: int = 5):
        if nonmono < 1:
            raise ValueError(f"nonmono must be >= 1, got {nonmono}")
        self.nonmono = nonmono
        self.history: list[float] = []
        self.active = False
        self.switch_epoch: int | None = None
        self.n_averaged = 0
        self.average: list[Tensor] | None = None

    def observe(self, value: float, epoch: int) -> bool:
        """Record one SGD-phase validation loss (1-based ``epoch``); return True if this epoch switches."""
        if self.active:
            return False
        fired = nonmonotone_trigger(self.history, value, self.nonmono)
        self.history.append(value)
        if fired:
            self.start(epoch)
        return fired

    def start(self, epoch: int | None = None) -> None:
        """Switch to averaging now (fine-tuning starts a fresh average at once)."""
        self.active, self.switch_epoch, self.n_averaged, self.average = True, epoch, 0, None

    @torch.no_grad()
    def update(self, params: Iterable[Tensor]) -> None:
        """Fold the iterate after an optimiser step into the running mean."""
        if not self.active:
            return
        params = list(params)
        self.n_averaged += 1
        if self.average is None:
            self.average = [p.detach().clone() for p in params]
            return
        for avg, p in zip(self.average, params):
            avg.add_(p.detach() - avg, alpha=1.0 / self.n_averaged)

    @contextmanager
    def averaged(self, params: Iterable[Tensor]) -> Iterator[bool]:
        """Temporarily load the average into ``params`` (no-op before the first averaged step); yields whether
        it did. The raw iterate is restored on exit, so training continues from it."""
        params = list(params)
        if self.average is None:
            yield False
            return
        raw = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p, avg in zip(params, self.average):
                p.copy_(avg)
        try:
            yield True
        finally:
            with torch.no_grad():
                for p, r in zip(params, raw):
                    p.copy_(r)

    def state_dict(self) -> dict[str, Any]:
        return {
            "nonmono": self.nonmono,
            "history": list(self.history),
            "active": self.active,
            "switch_epoch": self.switch_epoch,
            "n_averaged": self.n_averaged,
            "average": None if self.average is None else [a.cpu().clone() for a in self.average],
        }

    def load_state_dict(self, state: dict[str, Any], device: torch.device | None = None) -> None:
        self.nonmono, self.history = state["nonmono"], list(state["history"])
        self.active, self.switch_epoch, self.n_averaged = state["active"], state["switch_epoch"], state["n_averaged"]
        avg = state["average"]
        self.average = None if avg is None else [a.to(device) if device is not None else a for a in avg]
