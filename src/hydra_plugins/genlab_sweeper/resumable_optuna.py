"""The sweeper Hydra finds (``hydra.sweeper._target_`` in conf/hparams_search/optuna.yaml).

Hydra imports every public module under ``hydra_plugins`` at start-up, for every run, and prints an "Error
importing ... Plugin is incompatible" line for each one that fails. The implementation (:mod:`._resumable_optuna`,
:mod:`._sqlite_store`) needs the optional sweep extra (hydra-optuna-sweeper, optuna), so it lives in private modules
Hydra skips, and this module stays importable without them: then the sweeper is a stand-in that says, only when a
sweep actually asks for it, how to install the extra.
"""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper

SWEEP_EXTRA_MODULES = ("hydra_plugins.hydra_optuna_sweeper", "optuna")

try:
    from hydra_plugins.genlab_sweeper._resumable_optuna import ResumableOptunaSweeper

    # Hydra finds a plugin by the module its class says it is in: the public one, which the configs name.
    ResumableOptunaSweeper.__module__ = __name__
except ModuleNotFoundError as err:
    if not (err.name or "").startswith(SWEEP_EXTRA_MODULES):
        raise
    _MISSING = err.name

    class ResumableOptunaSweeper(Sweeper):  # type: ignore[no-redef]
        """Stand-in without the sweep extra: refuses the sweep with the install command."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            from genlab.errors import ConfigError

            raise ConfigError(f"hparams_search=optuna needs the sweep extra ({_MISSING} is not installed): "
                              "pip install -e '.[sweep]'")

        def setup(self, **kwargs: Any) -> None:  # pragma: no cover - __init__ refuses first
            raise NotImplementedError

        def sweep(self, arguments: list[str]) -> Any:  # pragma: no cover - __init__ refuses first
            raise NotImplementedError
