"""Reading genlab checkpoints, in one place: the file itself, the run record stored in it, and its data identity.

A checkpoint written by ``train.py`` is Lightning's dictionary (``state_dict``, optimiser, loops, callbacks ...)
plus one genlab record under :data:`RECORD`::

    checkpoint["genlab"] = {"config": <the run's resolved config, a plain dict>,
                            "data_identity": <what the data was: dataset, vocabulary / tokenizer fingerprints>}

The config lets ``eval.py`` rebuild the run; the data identity lets every consumer (evaluation, resuming, a second
training stage, finetuning) refuse data the weights were not trained on, with one checker,
:func:`check_data_identity`. Writers: :class:`genlab.callbacks.run_record.RunRecord` (config and identity) and tasks
that know their data themselves (:func:`record_data_identity`). Checkpoints of earlier versions kept the AWD task's
identity at the top level (``checkpoint["data_identity"]``); :func:`data_identity` still reads it there.

Checkpoints are files users share, so reading one never runs code: :func:`load` reads tensors and plain values only
(``weights_only=True``; that is all genlab writes) and :func:`run_config` refuses a config naming code to build.

Hugging Face / original published checkpoints are not genlab checkpoints: ``genlab.interop`` reads those.
"""

from __future__ import annotations

import os
import pickle
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from genlab.errors import CheckpointError
from genlab.safe_pickle import RefusedGlobal, loads

RECORD = "genlab"
# The keys that decide which token ids mean what: weights moved to other data (a second training stage, finetuning
# a pretrained model) must agree on these, whereas evaluation and resuming must agree on every recorded key.
VOCABULARY_KEYS = ("tokenizer", "vocab", "vocab_size")


def _label(path: str | os.PathLike, key: str | None) -> str:
    return f"{key}={path}" if key else str(path)


def is_sharded(path: str | os.PathLike) -> bool:
    """A folder of shards (torch.distributed.checkpoint: ``.metadata`` + ``*.distcp``), as ``strategy=fsdp`` saves."""
    return Path(path).is_dir() and (Path(path) / ".metadata").is_file()


def exists(path: str | os.PathLike) -> bool:
    """A checkpoint file, or a folder of shards."""
    return Path(path).is_file() or is_sharded(path)


def load(path: str | os.PathLike, *, key: str | None = None, fix: str = "", map_location: Any = "cpu",
         mmap: bool = False, shard_tensors: bool = True) -> dict[str, Any]:
    """The checkpoint at ``path`` as a dictionary; a folder of FSDP2 shards is consolidated into one (in memory).

    A missing, truncated or foreign file (not written by ``torch.save``, or not a dictionary) raises
    :class:`CheckpointError` naming the file, as ``<key>=<path>`` when ``key`` (the config key the path came from)
    is given, followed by ``fix``; so does one that holds more than tensors and plain values (it could run code).
    ``mmap`` maps tensors lazily (reading one small entry of a large file). ``shard_tensors=False`` reads a folder
    of shards without its tensors: everything else in it is read (and checked), at no memory cost."""
    import torch

    where, fix = _label(path, key), f" {fix}" if fix else ""
    if not exists(path):
        raise CheckpointError(f"{where}: no such file.{fix}")
    try:
        if is_sharded(path):  # every tensor of every rank, read on this one process
            checkpoint = _load_sharded(Path(path), shard_tensors)
        else:
            checkpoint = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as err:  # noqa: BLE001 - a truncated or foreign file is the user's input
        refused = _refused_global(err)
        if refused:
            raise CheckpointError(f"{where} holds {refused}, which no genlab checkpoint stores (only tensors and "
                                  "plain values); it was not loaded, since unpickling it could run code. Pass a "
                                  f"checkpoint written by genlab's train.py.{fix}") from err
        reason = str(err).split("WeightsUnpickler error:")[-1].strip()  # torch's advice to load unsafely: dropped
        raise CheckpointError(f"{where} is not a readable checkpoint (truncated, or not written by torch.save: "
                              f"{type(err).__name__}: {reason.splitlines()[0] if reason else ''}).{fix}") from err
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"{where} is not a checkpoint (it holds a {type(checkpoint).__name__}, not a "
                              f"dictionary).{fix}")
    return checkpoint


def _refused_global(err: Exception) -> str | None:
    """The global a pickle was refused for, by torch's weights-only unpickler or :mod:`genlab.safe_pickle`."""
    if isinstance(err, RefusedGlobal):
        return str(err)
    found = re.search(r"Unsupported global: GLOBAL (\S+)", str(err)) if isinstance(err, pickle.UnpicklingError) else None
    return found.group(1) if found else None


def _load_sharded(folder: Path, tensors: bool) -> dict[str, Any]:
    """Lightning's consolidation of a ``torch.distributed.checkpoint`` folder (``_load_distributed_checkpoint``),
    without code: the index is checked against DCP's metadata classes before DCP unpickles it, and non-tensor
    entries and Lightning's ``meta.pt`` load with ``weights_only=True``."""
    import torch
    from lightning_fabric.utilities.load import _METADATA_FILENAME
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint._traverse import set_element
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    for index in [folder / ".metadata", *folder.glob("__*.metadata")]:  # the index and ranks' own: DCP unpickles
        if index.is_file():  # them unrestricted, so they are read with the allow-list first (refused before code)
            loads(index.read_bytes(), _dcp_metadata_globals())

    class Planner(_EmptyStateDictLoadPlanner):
        def _should_include_key(self, key: str, metadata: Any) -> bool:
            return tensors or not isinstance(metadata.state_dict_metadata[key], TensorStorageMetadata)

        def load_bytes(self, read_item: Any, value: Any) -> None:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn],
                        torch.load(value, weights_only=True))

    checkpoint: dict[str, Any] = {}
    try:
        _load_state_dict(checkpoint, storage_reader=FileSystemReader(folder), planner=Planner(), no_dist=True)
    except CheckpointException as wrapped:  # a BaseException holding each rank's error: raise this rank's
        raise next(iter(wrapped.failures.values()))[0] from None
    extra = folder / _METADATA_FILENAME
    if extra.is_file():
        checkpoint.update(torch.load(extra, map_location="cpu", weights_only=True))
    return checkpoint


def _dcp_metadata_globals() -> dict[tuple[str, str], object]:
    """What ``torch.distributed.checkpoint`` pickles its ``.metadata`` index with: its dataclasses, the checkpoint's
    path, sizes, dtypes and layouts (by name). None of them runs anything when built."""
    import pathlib

    import torch
    from torch.distributed.checkpoint import filesystem, metadata

    names = ("Metadata", "StorageMeta", "MetadataIndex", "TensorStorageMetadata", "BytesStorageMetadata",
             "ChunkStorageMetadata", "TensorProperties", "_MEM_FORMAT_ENCODING")
    table: dict[tuple[str, str], object] = {(metadata.__name__, n): getattr(metadata, n) for n in names}
    table.update({(filesystem.__name__, "_StorageInfo"): filesystem._StorageInfo, ("torch", "Size"): torch.Size,
                  ("torch.serialization", "_get_layout"): torch.serialization._get_layout})
    table.update({("pathlib", n): getattr(pathlib, n) for n in ("Path", "PosixPath", "WindowsPath", "PurePosixPath")})
    table.update({("torch", n): getattr(torch, n) for n in dir(torch) if isinstance(getattr(torch, n), torch.dtype)})
    return table


# ------------------------------------------------------------------------------------------- the genlab record
def record(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """The genlab record of a loaded checkpoint (empty for a checkpoint written outside ``train.py``)."""
    return dict(checkpoint.get(RECORD) or {})


def run_config(checkpoint: Mapping[str, Any], path: str | os.PathLike) -> dict[str, Any]:
    """The resolved config of the run that wrote the checkpoint; an error naming ``path`` when it has none, or when
    it names something to build that genlab's configs never do (:func:`check_targets`)."""
    config = record(checkpoint).get("config")
    if config is None:
        raise CheckpointError(f"{path} was not written by genlab's train.py (no '{RECORD}' record with the run's "
                              "config); pass a checkpoint of a train.py run (its checkpoints/*.ckpt).")
    check_targets({k: config.get(k) for k in REBUILT}, path)
    return config


# The sections of a run config that rebuilding the run (eval.py) instantiates; callbacks and loggers are the caller's.
REBUILT = ("data", "model", "task")


# What a run's config builds (``_target_``): classes of these packages, and genlab's own factories and schedules.
TARGET_PACKAGES = ("genlab.", "torch.nn.", "torch.optim.", "pytorch_lightning.")
TARGET_FUNCTIONS = ("genlab.tasks.", "genlab.callbacks.")


def check_targets(config: Any, path: str | os.PathLike, key: str = "",
                  fix: str = "Pass one written by genlab's train.py.") -> None:
    """Every ``_target_`` of a config read from a checkpoint is a class of :data:`TARGET_PACKAGES` or a function of
    :data:`TARGET_FUNCTIONS`. eval.py instantiates that config: plain strings in a file must not name ``os.system``
    (weights_only=True stops pickled code, not this)."""
    if isinstance(config, Mapping):
        target = config.get("_target_")
        if target is not None and not _buildable(str(target)):
            raise CheckpointError(f"{path} records {key + '.' if key else ''}_target_={target}, which genlab does not "
                                  "build from a checkpoint (only classes of genlab, torch.nn, torch.optim "
                                  "and Lightning, and genlab's factories): a config read from a file must not name "
                                  f"code to run. {fix}")
        for k, v in config.items():
            check_targets(v, path, f"{key}.{k}" if key else str(k), fix)
    elif isinstance(config, list | tuple):
        for i, v in enumerate(config):
            check_targets(v, path, f"{key}[{i}]", fix)


def _buildable(target: str) -> bool:
    import importlib
    import inspect

    if not target.startswith(TARGET_PACKAGES):
        return False  # nothing outside them is imported
    module, _, name = target.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):  # e.g. a method (Class.method), which Hydra would call
        return False
    return inspect.isclass(obj) or (inspect.isfunction(obj) and target.startswith(TARGET_FUNCTIONS))


def data_identity(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """What the checkpoint's weights were trained on (empty when unknown)."""
    identity = record(checkpoint).get("data_identity")
    if identity is None:  # written before the record held it: the AWD task's own top-level key
        identity = checkpoint.get("data_identity")
    return dict(identity or {})


def write_record(checkpoint: dict[str, Any], config: Mapping[str, Any] | None = None,
                 data_identity: Mapping[str, Any] | None = None) -> None:
    """Store the run's config and/or data identity in ``checkpoint`` (merged: writers may each give one part)."""
    entry = checkpoint.setdefault(RECORD, {})
    if config is not None:
        entry["config"] = config
    if data_identity is not None:
        entry["data_identity"] = dict(data_identity)


def record_data_identity(checkpoint: dict[str, Any], identity: Mapping[str, Any]) -> None:
    """For tasks that know their data (checkpoints written outside ``train.py`` too): keep a non-empty identity."""
    if identity:
        write_record(checkpoint, data_identity={**record(checkpoint).get("data_identity", {}), **identity})


def check_data_identity(saved: Mapping[str, Any], current: Mapping[str, Any], where: str,
                        keys: Iterable[str] | None = None, fix: str | None = None) -> None:
    """Raise :class:`CheckpointError` when the checkpoint ``where`` was trained on other data than ``current``.

    Compares the keys both identities record, restricted to ``keys`` when given (:data:`VOCABULARY_KEYS` for weights
    moved to other data); a key only one side records says nothing. ``fix`` is the remedy named in the message."""
    shared = set(saved) & set(current)
    if keys is not None:
        shared &= set(keys)
    for key in sorted(shared):
        if saved[key] != current[key]:
            fix = fix or ("use the data the checkpoint was trained on (for eval.py: drop the data= override), "
                          "or retrain")
            raise CheckpointError(f"checkpoint {where} was trained with {key}={saved[key]!r} but the data gives "
                                  f"{current[key]!r} (a different vocabulary, tokenizer or dataset); {fix}.")


# ------------------------------------------------------------------------------------------------ the weights
def submodule_weights(checkpoint: Mapping[str, Any], prefix: str = "model.") -> dict[str, Any]:
    """The task's weights under ``prefix`` (``model.`` = the model the task was built around), prefix removed."""
    state = checkpoint.get("state_dict") or {}
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
