"""Hugging Face Hub ids where a checkpoint path is expected (``task.init_from``, ``data.tokenizer``).

``<owner>/<name>`` or ``<owner>/<name>@<revision>`` (branch, tag or commit) that is not an existing local path is
fetched with ``huggingface_hub.snapshot_download`` into the hub's cache (``HF_HUB_CACHE``; weights, configs and
tokenizer files only) and stands for that snapshot folder, so the tokenizer comes with the weights. With
``HF_HUB_OFFLINE=1`` or ``GENLAB_OFFLINE=1`` only the cache is read; online, the hub's calls time out after
``ETAG_TIMEOUT_S`` seconds. Files absent from the cache (offline) or unreachable are one CheckpointError (exit 2).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from genlab.errors import CheckpointError

HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?")
# what an importer or tokenizer reads; never the TF/Flax/ONNX copies a model repository may also hold
PATTERNS = ["*.json", "*.safetensors", "*.model", "vocab.txt", "merges.txt"]
PICKLED = ["pytorch_model*.bin"]  # only when the repository has no safetensors (read with weights_only=True)
ETAG_TIMEOUT_S = 10.0


def offline() -> bool:
    """The user asked for no network: HF's own switch or genlab's."""
    return any(os.environ.get(v, "0").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "GENLAB_OFFLINE"))


def resolve(value: str | os.PathLike, key: str = "task.init_from") -> Path:
    """A local path as given; a hub id as its snapshot folder in the hub cache (downloaded unless offline)."""
    path = Path(value).expanduser()
    match = HUB_ID.fullmatch(str(value))
    if path.exists() or match is None or path.suffix == ".ckpt":  # a mistyped checkpoint path is not a hub id
        return path
    from huggingface_hub import snapshot_download

    repo, revision = match["repo"], match["revision"]
    cache_dir, local_only = os.environ.get("HF_HUB_CACHE"), offline()

    def download(patterns: list[str]) -> Path:
        return Path(snapshot_download(repo, revision=revision, cache_dir=cache_dir, allow_patterns=patterns,
                                      local_files_only=local_only, etag_timeout=ETAG_TIMEOUT_S))

    try:
        folder = download(PATTERNS)
        if not any(folder.glob("model*.safetensors*")) and not local_only:
            folder = download(PICKLED)
    except Exception as err:  # noqa: BLE001 - offline cache miss, unknown repo or revision, network: one message
        where = f"{repo} (revision {revision or 'main'})"
        why = ("it is not in the hub cache and HF_HUB_OFFLINE/GENLAB_OFFLINE forbids downloading; download it once "
               "online, or give a local folder" if local_only else
               f"downloading it failed ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); check "
               "the id and revision, or give a local folder")
        raise CheckpointError(f"{key}={value}: no such local path, and the hub model {where} is unavailable: "
                              f"{why}.") from err
    return folder
