"""The dataset a DataModule decodes into host memory, for the memory estimate (``genlab.cli.memory``): the image
DataModules hold every image as float32 (SVHN's training and test splits: 1.1 GB) beside the batches, GDAN's the
words, ids and items of SQuAD (0.9 GB at the thesis' sizes). A DataModule class that holds its data says how much
with a ``setup_bytes()`` method, computed before any file is read (from published sizes, or the sizes of the files
where it will read them); the others (streamed or memory-mapped data) count nothing here."""

from __future__ import annotations

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf


def dataset_bytes(cfg: DictConfig) -> int:
    """Bytes the run's DataModule holds after ``setup`` (0 when its class does not say)."""
    from genlab.cli.build import data_class

    cls = data_class(cfg)
    if cls is None or not hasattr(cls, "setup_bytes"):
        return 0
    data = OmegaConf.to_container(cfg.data, resolve=True)
    data.pop("global_batch", None)  # the CLI's key, not a DataModule argument
    return int(instantiate(data).setup_bytes())  # its constructor only checks and keeps the arguments
