"""Optuna sweeper that resumes: the study lives in SQLite in the sweep dir, and a rerun finishes the budget.

Lives in the ``hydra_plugins`` namespace because Hydra only instantiates sweepers from there. Differences from
Hydra's Optuna sweeper, which it wraps:
- ``storage: sqlite:///<file>`` is kept by :class:`SQLiteTrialStore` (Optuna 2.10's RDB storage fails with
  SQLAlchemy 2); its folder is created first.
- a seeded sampler is re-seeded with seed + trials seen on resume, so it does not propose the same points again.
- a rerun runs only the trials still missing from ``n_trials``; trials left RUNNING by the interruption are marked
  FAIL (flagged ``genlab:interrupted``) and not counted, trials that ran and failed are counted.
- a trial that returns NaN/inf (train.py's answer for a failed trial) is told to Optuna as FAIL; Hydra's sweeper
  would crash telling Optuna a NaN value.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.utils import instantiate
from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
from omegaconf import OmegaConf

log = logging.getLogger("genlab")
SQLITE = "sqlite:///"
INTERRUPTED = "genlab:interrupted"


class _NonFiniteAsFailure(Launcher):
    """Launcher wrapper: a non-finite objective becomes None, which the Optuna sweeper records as a FAIL trial."""

    def __init__(self, inner: Launcher) -> None:
        self.inner = inner

    def setup(self, **kwargs: Any) -> None:
        self.inner.setup(**kwargs)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        returns = self.inner.launch(job_overrides, initial_job_idx)
        for ret in returns:
            if ret.status == JobStatus.COMPLETED and _non_finite(ret.return_value):
                ret.return_value = None
        return returns


def _non_finite(value: Any) -> bool:
    try:
        return not math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


class ResumableOptunaSweeper(OptunaSweeper):
    def setup(self, **kwargs: Any) -> None:
        super().setup(**kwargs)
        impl = self.sweeper
        self._sampler_cfg = OmegaConf.select(kwargs["config"], "hydra.sweeper.sampler")
        impl.launcher = _NonFiniteAsFailure(impl.launcher)
        if isinstance(impl.storage, str) and impl.storage.startswith(SQLITE):
            # imported here, as Hydra's own sweeper imports optuna: Hydra imports this module at every start-up,
            # and optuna's import (~3 CPU s alone, ~1.1 after Lightning's) would be paid by every run, not sweeps only
            from hydra_plugins.genlab_sweeper._sqlite_store import SQLiteTrialStore

            impl.study_name = impl.study_name or "genlab"
            impl.storage = SQLiteTrialStore(impl.storage[len(SQLITE):], impl.study_name)

    def sweep(self, arguments: list[str]) -> None:
        impl = self.sweeper
        done, seen = self._resume_state()
        if seen:
            impl.job_idx = seen  # new trials get new job numbers after the old ones
            self._advance_sampler(seen)
            log.info("resuming study %r: %d of %d trials done", impl.study_name, done, impl.n_trials)
        impl.n_trials = max(0, impl.n_trials - done)
        return impl.sweep(arguments)

    def _advance_sampler(self, seen: int) -> None:
        """A seeded sampler restarted as-is would propose the first trials again; seed it with seed + trials seen,
        which keeps a resumed search reproducible."""
        cfg = self._sampler_cfg
        if isinstance(self.sweeper.sampler, functools.partial) or cfg is None or "_target_" not in cfg:
            return  # the grid sampler skips visited points by itself
        seed = cfg.get("seed")
        if seed is not None:
            self.sweeper.sampler = instantiate(cfg, seed=int(seed) + seen)
        elif hasattr(self.sweeper.sampler, "reseed_rng"):
            self.sweeper.sampler.reseed_rng()

    def _resume_state(self) -> tuple[int, int]:
        """(trials that count as done, trials ever started) in the stored study."""
        import optuna
        from optuna.trial import TrialState

        impl = self.sweeper
        if impl.storage is None or impl.study_name is None:
            return 0, 0
        try:
            study = optuna.load_study(study_name=impl.study_name, storage=impl.storage)
        except KeyError:  # no such study yet
            return 0, 0
        for t in study.get_trials(deepcopy=False):
            if t.state == TrialState.RUNNING:  # its process died with the sweep
                study._storage.set_trial_system_attr(t._trial_id, INTERRUPTED, True)
                study._storage.set_trial_state(t._trial_id, TrialState.FAIL)
        trials = study.get_trials(deepcopy=False)
        done = sum(t.state.is_finished() and not t.system_attrs.get(INTERRUPTED) for t in trials)
        return done, len(trials)
