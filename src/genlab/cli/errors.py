"""Turn user errors into one clear message and exit code 2; keep sweeps alive when one trial fails."""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable
from typing import Any

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


def run_script(main: Callable[[], Any]) -> None:
    """Entry point of an experiment script (argparse, no Hydra): a UserError prints one line and exits 2."""
    try:
        main()
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(USER_ERROR_EXIT)


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
    blocked = unwritable_run_dir(sys.argv[1:])
    if blocked:  # Hydra would fail creating it, with a traceback
        print(f"error: {blocked}", file=sys.stderr)
        sys.exit(USER_ERROR_EXIT)
    try:
        main()
    except SystemExit as exit_:
        if exit_.code == 1 and not _entered:
            hint = misspelt_key_hint(sys.argv[1:])
            if hint:
                print(f"error: {hint}", file=sys.stderr)
            sys.exit(USER_ERROR_EXIT)
        raise
    finally:
        _destroy_process_group()


def _destroy_process_group() -> None:
    """Tear down a torchrun rank's default process group before the interpreter exits: Lightning leaves it up, and a
    gloo group left to the exit handlers can abort a finished rank ("terminate called without an active exception")."""
    dist = sys.modules.get("torch.distributed")  # never imported: no group to tear down
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def unwritable_run_dir(argv: list[str]) -> str | None:
    """The problem with a run dir given on the command line (``hydra.run.dir=`` / ``paths.log_dir=``) that cannot
    be created or written, found before Hydra tries to create it; None when it looks fine or is not given."""
    import os
    from pathlib import Path

    for arg in argv:
        key, _, value = arg.lstrip("+").partition("=")
        if key not in ("hydra.run.dir", "paths.log_dir", "hydra.sweep.dir") or not value or "${" in value:
            continue
        path = Path(value).expanduser().absolute()
        existing = next((p for p in (path, *path.parents) if p.exists()), None)
        if existing is None:
            continue
        if not existing.is_dir():
            return (f"{key}={value} cannot be created: {existing} is a file, not a folder; choose another {key}.")
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"{key}={value} is not writable ({existing} is read-only for this user); choose another {key}."
    return None


def misspelt_key_hint(argv: list[str]) -> str | None:
    """For an override of a key the config lacks (``trainer.max_step=3``), the key the user meant. Hydra's own
    message suggests ``+trainer.max_step``, which adds a key nothing reads."""
    import difflib
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import DictConfig, OmegaConf

    script = Path(sys.argv[0]).resolve()
    conf = script.parent / "conf"
    if not (conf / f"{script.stem}.yaml").is_file():
        return None
    overrides = [a for a in argv if "=" in a and not a.startswith(("+", "~", "-"))]
    keys = [a.split("=", 1)[0] for a in overrides if "." in a.split("=", 1)[0] and not a.startswith("hydra.")]
    groups = [a for a in overrides if "." not in a.split("=", 1)[0]]
    try:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            cfg = compose(config_name=script.stem, overrides=groups)
    except Exception:  # noqa: BLE001 - the hint is a courtesy; Hydra has already printed its message
        return None
    for key in keys:
        parent, leaf = key.rsplit(".", 1)
        node = OmegaConf.select(cfg, parent, throw_on_missing=False)
        if isinstance(node, DictConfig) and leaf not in node:
            close = difflib.get_close_matches(leaf, [str(k) for k in node.keys()], n=1)
            if close:
                return (f"{key} is not a config key: did you mean {parent}.{close[0]}? (Hydra's '+{key}' would "
                        "add a new key that nothing reads.)")
            return f"{key} is not a config key; the keys of {parent} are: {', '.join(map(str, node.keys()))}."
    return None
