"""OmegaConf resolvers the configs use; registered when genlab.cli is imported (before Hydra composes)."""

from __future__ import annotations

import hashlib

from omegaconf import OmegaConf

MAX_DIRNAME = 180  # file systems allow 255 bytes per path component; leave room for Hydra's own suffixes


def trial_dirname(override_dirname: str, job_num: int | str) -> str:
    """A sweep trial's directory: its job number, then its overrides (shortened with a hash when too long).

    The number keeps trials apart whatever the overrides say: `experiment` is not in ``override_dirname`` (it
    names the sweep dir), so a sweep over presets would otherwise put every preset's trial in one folder. A path
    in an override (``data.path=/data/x``) is flattened, or each "/" would open a directory level."""
    override_dirname = override_dirname.replace("/", "_")
    name = f"{job_num}_{override_dirname}" if override_dirname else f"trial{job_num}"
    if len(name.encode()) <= MAX_DIRNAME:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    return f"{name.encode()[: MAX_DIRNAME - 11].decode(errors='ignore')}_{digest}"


def register() -> None:
    if not OmegaConf.has_resolver("genlab.trial_dir"):
        OmegaConf.register_new_resolver("genlab.trial_dir", trial_dirname)
