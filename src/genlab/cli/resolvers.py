"""OmegaConf resolvers the configs use; registered when genlab.cli is imported (before Hydra composes)."""

from __future__ import annotations

import hashlib

from omegaconf import OmegaConf

MAX_DIRNAME = 180  # file systems allow 255 bytes per path component; leave room for Hydra's own suffixes


def trial_dirname(override_dirname: str, job_num: int | str) -> str:
    """A sweep trial's directory: named by its overrides, shortened with a hash when too long for the disk."""
    name = override_dirname or f"trial{job_num}"
    if len(name.encode()) <= MAX_DIRNAME:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    return f"{job_num}_{name.encode()[: MAX_DIRNAME - 22].decode(errors='ignore')}_{digest}"


def register() -> None:
    if not OmegaConf.has_resolver("genlab.trial_dir"):
        OmegaConf.register_new_resolver("genlab.trial_dir", trial_dirname)
