"""Check ``group=option`` overrides against the files in conf/ before Hydra composes.

Hydra answers a misspelt option (``experiment=txl_mni``) with every option of the group, 215 lines for
``experiment``; this stops first with one line naming the closest options (difflib), exit code 2.
``group=null`` (Hydra 1.3 refuses a null group choice with a traceback) means the group's ``none`` option.
"""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path

from genlab.cli.errors import USER_ERROR_EXIT

SWEEP_SYNTAX = ("(", "[", "{", "$")  # choice(...), range(...), interpolations: left to Hydra


def group_options(group_dir: Path) -> list[str]:
    return sorted(p.relative_to(group_dir).with_suffix("").as_posix() for p in group_dir.rglob("*.yaml"))


def unknown_choice(arg: str, config_dir: Path) -> str | None:
    """The error for one command-line argument, or None when it is not a group choice or names a known option."""
    key, sep, value = arg.partition("=")
    key = key.lstrip("+~")
    if not sep or arg.startswith("-") or "." in key or key.startswith("hydra") or any(c in value for c in SWEEP_SYNTAX):
        return None
    group_dir = config_dir / key
    if not group_dir.is_dir():
        return None
    options = group_options(group_dir)
    shown = os.path.relpath(group_dir) if Path.cwd() in group_dir.parents else str(group_dir)
    for option in value.split(","):  # a multirun sweeps over a comma-separated list
        if option in ("", "null") or option in options:
            continue
        close = difflib.get_close_matches(option, options, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        return f"no option {key}={option} in {shown}/ ({len(options)} options). {hint}See them with: ls {shown}"
    return None


def check_group_choices(argv: list[str], config_dir: str | Path) -> None:
    """Exit 2 with a short message at the first unknown ``group=option`` among ``argv``."""
    for arg in argv:
        message = unknown_choice(arg, Path(config_dir))
        if message:
            print(f"error: {message}", file=sys.stderr)
            sys.exit(USER_ERROR_EXIT)


def null_choices_to_none(argv: list[str], config_dir: str | Path) -> list[str]:
    """``argv`` with ``group=null`` (also inside a sweep list, ``logger=csv,null``) spelt ``group=none`` for every
    group that has a ``none.yaml`` (``logger=null``: no logger at all)."""
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        options = value.split(",")
        if sep and not key.startswith(("+", "~", "-")) and "null" in options and \
                (Path(config_dir) / key / "none.yaml").is_file():
            arg = f"{key}={','.join('none' if o == 'null' else o for o in options)}"
        out.append(arg)
    return out


def evaluates_init_from(argv: list[str]) -> bool:
    """The command line names a preset and no checkpoint: evaluate the preset with its ``task.init_from``."""
    keys = {a.split("=", 1)[0].lstrip("+~") for a in argv if "=" in a}
    return "experiment" in keys and "ckpt_path" not in keys
