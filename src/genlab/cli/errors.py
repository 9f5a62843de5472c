"""Turn user errors into one clear message and exit code 2; keep sweeps alive when one trial fails."""

from __future__ import annotations

import logging
import math
import sys
from typing import Any, Callable

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from genlab.errors import UserError

log = logging.getLogger("genlab")
USER_ERROR_EXIT = 2
_entered = False  # set once Hydra has composed the config and called our function


def in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def guarded(fn: Callable[[], Any], on_failure: Callable[[BaseException], None]) -> Any:
    """Run ``fn``. A UserError exits 2 with its message; in a multirun any failure is recorded and the trial
    returns NaN so the sweep goes on."""
    global _entered
    _entered = True
    try:
        return fn()
    except BaseException as err:  # noqa: BLE001 - every failure is recorded before it propagates
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise
        on_failure(err)
        if in_multirun():
            log.error("trial failed (%s: %s); the sweep continues", type(err).__name__, err)
            return math.nan
        user_error = find_user_error(err)
        if user_error is not None:
            print(f"error: {user_error}", file=sys.stderr)
            sys.exit(USER_ERROR_EXIT)
        raise


def find_user_error(err: BaseException | None) -> UserError | None:
    """The UserError behind ``err``: Hydra's instantiate and Lightning wrap what constructors and hooks raise."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, UserError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def run_hydra_main(main: Callable[[], Any]) -> None:
    """Call a ``@hydra.main`` function; Hydra's own composition errors (unknown override key, missing group
    option) are user errors too, so they exit 2 like ours (Hydra has printed the message naming the key)."""
    try:
        main()
    except SystemExit as exit_:
        if exit_.code == 1 and not _entered:
            sys.exit(USER_ERROR_EXIT)
        raise
