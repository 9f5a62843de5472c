"""Helpers shared by test files (importable because pytest's pythonpath includes tests/)."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
SHARED = ROOT.parent / "shared"

# A one-layer Transformer-XL on the WikiText mini: fast enough for end-to-end tests of the LM machinery.
TINY_TXL = [
    "experiment=txl_mini",
    "model.n_layer=1",
    "model.d_model=32",
    "model.n_head=2",
    "model.d_head=16",
    "model.d_inner=64",
    "model.mem_len=16",
    "data.batch_size=4",
    "data.tgt_len=16",
    "data.eval_batch_size=4",
    "data.eval_tgt_len=16",
    "task.valid_overrides={}",
    "task.test_overrides={mem_len: 32, same_length: true}",
]


def compose_config(overrides: list[str], run_dir: Path, config_name: str = "train") -> DictConfig:
    """The config train.py would see for ``overrides``, writing into ``run_dir``; loggers off by default."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):  # what a real Hydra run fills in at start-up
        cfg.hydra.runtime.cwd = str(ROOT)
        cfg.hydra.runtime.output_dir = str(run_dir)
    HydraConfig.instance().set_config(cfg)  # keeps its own reference: the hydra node must stay resolvable
    cfg = copy.deepcopy(cfg)
    keys = [o.split("=")[0] for o in overrides]
    with open_dict(cfg):
        if "paths.output_dir" not in keys:
            cfg.paths.output_dir = str(run_dir)
        cfg.paths.log_dir = str(run_dir)
        if "logger" not in keys:
            cfg.logger = None
        del cfg.hydra
    return cfg


def train_preset(name: str, compose_cfg, cache_dir, root,
                 overrides: Sequence[str] = ()) -> tuple[dict[str, float], pl.LightningDataModule]:
    """Train experiment ``name`` with seed 0 exactly as composed (plus ``overrides``) and test its final weights (no
    checkpoint chosen on dev, no validation); prediction files go under ``root``. The test results of every split,
    merged."""
    from genlab.assemble import build_data, build_task

    cfg = compose_cfg([f"experiment={name}", f"paths.cache_dir={cache_dir}", "seed=0", *overrides])
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    dm = build_data(cfg.data)
    task = build_task(cfg, dm)
    tr = pl.Trainer(default_root_dir=root, max_steps=cfg.trainer.max_steps, gradient_clip_val=cfg.trainer.gradient_clip_val,
                    limit_val_batches=0, logger=False, enable_checkpointing=False, accelerator="cpu",
                    enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    tr.fit(task, dm)
    results = tr.test(task, dm, verbose=False)  # one dict per test split (MNLI: matched, then mismatched)
    return {k: v for r in results for k, v in r.items()}, dm


class PreemptAfterBatches(pl.Callback):
    """Simulates a preemption between micro-batches: after ``n`` training batches, save ``path`` and stop."""

    def __init__(self, n: int, path):
        self.n, self.path, self.seen = n, path, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.seen += 1
        if self.seen == self.n:
            trainer.save_checkpoint(self.path)
            trainer.should_stop = True


def flushed_wandb_record(paths: Callable[[], Sequence[Path]], needle: bytes, patience_s: float = 60.0) -> bytes:
    """The bytes of the offline ``.wandb`` files ``paths()`` names, once they contain ``needle`` or patience runs out.

    W&B's service process writes the run record asynchronously, and may finish after ``finish()`` returns.
    """
    deadline = time.monotonic() + patience_s
    while True:
        data = b"".join(p.read_bytes() for p in paths() if p.exists())
        if needle in data or time.monotonic() > deadline:
            return data
        time.sleep(0.2)


class TouchPayload:
    """A pickle payload: unpickling it calls ``Path.touch`` on ``path``, so the file appearing proves code ran."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def __reduce__(self):
        return (Path.touch, (self.path,))


def laid_out(split, key: str) -> np.ndarray:
    """Field ``key`` of every item of a finetuning split (laid out one item at a time), stacked."""
    return np.stack([np.asarray(split[i][key]) for i in range(len(split))])
