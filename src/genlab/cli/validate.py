"""Check a composed config before any work: every ``_target_`` node's keys must be arguments of its target,
with values of the annotated types. The target's signature is the schema, so models and tasks stay the single
source of truth for their options."""

from __future__ import annotations

import difflib
import inspect
import types
import typing
from typing import Any

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf

from genlab.errors import ConfigError

HYDRA_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}
ROOT_SCALARS: dict[str, Any] = {"name": str, "seed": int, "ckpt_path": str | None, "test_after_fit": bool,
                                 "reuse_host_memory": bool}
ROOT_GROUPS = {"paths", "trainer", "logger", "callbacks", "model", "task", "data", "debug", "hparams_search", "launcher",
               "experiment", "hydra", "eval", "splits"}
# Keys the entry point itself consumes from a `_target_` node (removed before instantiation), with their types.
CLI_KEYS: dict[str, dict[str, Any]] = {"data": {"global_batch": int | None}}


def validate_config(cfg: DictConfig, root_scalars: dict[str, Any] | None = None) -> None:
    """Raise ConfigError naming the first unknown key or mistyped value."""
    scalars = ROOT_SCALARS if root_scalars is None else root_scalars
    for key in cfg.keys():
        if key not in scalars and key not in ROOT_GROUPS:
            raise ConfigError(f"unknown top-level config key '{key}'{_suggest(key, [*scalars, *ROOT_GROUPS])}.")
    for key, expected in scalars.items():
        if key in cfg and not _matches(OmegaConf.select(cfg, key, throw_on_missing=False), expected):
            raise ConfigError(f"config key '{key}' must be {_name(expected)}, got {cfg[key]!r}.")
    for key in ("trainer", "logger", "callbacks", "model", "task", "data"):
        node = cfg.get(key)
        if node is not None:
            _walk(node, key)
    check_data_tier(cfg.get("data"))


def check_data_tier(data: Any) -> None:
    """``data.path`` is read only by the ``path`` tier (and by ``corpus: text`` pretraining). Set on an offline mini
    it would be ignored without a word, so stop and say which key switches the tier."""
    if not isinstance(data, DictConfig) or OmegaConf.select(data, "path", default=None) is None:
        return
    path = data.path
    if data.get("source") == "mini":
        raise ConfigError(f"data.path={path} is set but data.source=mini builds the offline stand-in and would "
                          "ignore it. Add data.source=path to read your copy (or data.source=download to fetch it), "
                          "or drop data.path to train on the mini.")
    corpus = data.get("corpus")
    if corpus is not None and "source" not in data and corpus != "text":
        raise ConfigError(f"data.path={path} is set but data.corpus={corpus} is an offline corpus and would ignore "
                          "it. Add data.corpus=text to pretrain on your shards, or drop data.path.")


def _walk(node: Any, path: str) -> None:
    if isinstance(node, DictConfig):
        if "_target_" in node:
            _check_target(node, path)
        for key in node.keys():
            value = node._get_node(key)
            if isinstance(value, (DictConfig, ListConfig)):
                _walk(value, f"{path}.{key}")
    elif isinstance(node, ListConfig):
        for i, item in enumerate(node):
            if isinstance(item, (DictConfig, ListConfig)):
                _walk(item, f"{path}[{i}]")


def _check_target(node: DictConfig, path: str) -> None:
    target = node["_target_"]
    try:
        obj = get_object(target)
    except Exception as err:  # noqa: BLE001 - any import failure is the user's _target_
        raise ConfigError(f"config key '{path}._target_': cannot import '{target}' ({err}).") from err
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return
    params = sig.parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    try:
        hints = typing.get_type_hints(obj.__init__ if inspect.isclass(obj) else obj)
    except Exception:  # noqa: BLE001 - unresolvable annotations: check names only
        hints = {}
    cli_keys = CLI_KEYS.get(path, {})
    for key in node.keys():
        if key in HYDRA_KEYS:
            continue
        if key in cli_keys:
            value = OmegaConf.select(node, key, throw_on_missing=False)
            if not _matches(value, cli_keys[key]):
                raise ConfigError(f"config key '{path}.{key}' must be {_name(cli_keys[key])}, got {value!r}.")
            continue
        if key not in params:
            raise ConfigError(
                f"config key '{path}.{key}' is not an argument of {target}{_suggest(key, list(params))}."
            )
        value = OmegaConf.select(node, key, throw_on_missing=False)
        if key in hints and not isinstance(node._get_node(key), DictConfig) and not _matches(value, hints[key]):
            raise ConfigError(f"config key '{path}.{key}' must be {_name(hints[key])}, got {value!r}.")


def _matches(value: Any, expected: Any) -> bool:
    """Loose runtime check of a config value against an annotation; unknown annotations pass."""
    if value is None:
        return expected is Any or _allows_none(expected)
    if value == "???":
        return True
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(expected) if arg is not type(None))
    if origin is typing.Literal:
        return value in typing.get_args(expected)
    if expected is bool:
        return isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is str:
        return isinstance(value, str)
    if expected in (list, tuple) or origin in (list, tuple, typing.Sequence):
        return isinstance(value, (list, tuple, ListConfig))
    if expected is dict or origin is dict:
        return isinstance(value, (dict, DictConfig))
    return True


def _allows_none(expected: Any) -> bool:
    return type(None) in typing.get_args(expected) or expected is type(None)


def _name(expected: Any) -> str:
    return getattr(expected, "__name__", None) or str(expected).replace("typing.", "")


def _suggest(key: str, options: list[str]) -> str:
    close = difflib.get_close_matches(key, options, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
