"""``python eval.py ckpt_path=... [data=...] [eval.mem_len=1600 eval.tgt_len=128 ...]``.

Rebuilds the run from the config stored in the checkpoint, applies evaluation overrides, checks that the data's
vocabulary/tokenizer is the one the model was trained with, and evaluates the requested splits.

``python eval.py experiment=<finetuning preset> task.init_from=<folder>`` (no ckpt_path) evaluates weights nobody
trained here, e.g. a published finetuned Hugging Face checkpoint: the preset's data, model and task, the weights
and heads of ``task.init_from`` (genlab.tasks.pretrained_heads), valid and test, no training.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from genlab import assemble, checkpoints
from genlab.callbacks.wandb import join_training_group, log_summary, run_dir_of_checkpoint
from genlab.cli import build, run_dir
from genlab.cli.errors import find_user_error, guarded, in_multirun
from genlab.cli.host_memory import apply_host_memory_setting
from genlab.cli.summary import print_summary
from genlab.cli.validate import validate_config
from genlab.errors import ConfigError
from genlab.report.best_of import record_evaluation
from genlab.runs import write_final_metrics, write_json, write_run_metadata

log = logging.getLogger("genlab")

# Evaluation overrides that belong to the data (segment length, streams); all others set model attributes.
# Where the data lives: a new `data=` of the run's own kind keeps the run's values unless set on the command line.
DATA_LOCATION_KEYS = ("source", "path", "tokenizer", "cache_dir")
DATA_KEYS = {"tgt_len": "eval_tgt_len", "batch_size": "eval_batch_size", "ext_len": "eval_ext_len"}
EVAL_SCALARS: dict[str, Any] = {"name": str, "seed": int, "ckpt_path": str, "splits": list, "eval": dict,
                                "mode": str, "dynamic": dict, "callbacks": dict, "reuse_host_memory": bool}


def load_run_config(ckpt_path: str) -> dict[str, Any]:
    """The genlab record (the run's config and data identity) of a checkpoint written by train.py."""
    checkpoint = checkpoints.load(ckpt_path, key="ckpt_path")
    return {"config": checkpoints.run_config(checkpoint, ckpt_path),
            "data_identity": checkpoints.data_identity(checkpoint)}


def evaluate(cfg: DictConfig) -> dict[str, float]:
    if OmegaConf.is_missing(cfg, "ckpt_path"):
        raise ConfigError("eval.py needs ckpt_path=path/to/checkpoint.ckpt (e.g. a run's checkpoints/last.ckpt).")
    validate_config(cfg, EVAL_SCALARS)
    apply_host_memory_setting(cfg)
    record = load_run_config(cfg.ckpt_path)
    run = OmegaConf.create(record["config"])
    if cfg.get("data") is not None:
        run.data = _new_data(run.data, cfg.data)
    overrides = {k: v for k, v in (cfg.get("eval") or {}).items() if v is not None}
    model_overrides = dict(run.task.get("test_overrides") or {})
    for key, value in overrides.items():
        if key in DATA_KEYS:
            run.data[DATA_KEYS[key]] = value
        else:
            model_overrides[key] = value
    if "test_overrides" in run.task:
        run.task.test_overrides = model_overrides
        run.task.valid_overrides = model_overrides
    elif overrides:
        raise ConfigError(f"eval.* overrides {sorted(overrides)} are not supported by task {run.task._target_}.")

    datamodule = assemble.build_data(run.data)
    if hasattr(datamodule, "identity"):
        checkpoints.check_data_identity(record["data_identity"], datamodule.identity(), cfg.ckpt_path)
    task = assemble.build_task(run, datamodule)
    log.info("evaluating %s on %s (%s evaluation)", cfg.ckpt_path, ", ".join(cfg.splits), cfg.get("mode", "standard"))
    join_training_group(cfg, cfg.ckpt_path)  # logger=wandb: the evaluation shows up in its training run's group
    if cfg.get("mode", "standard") == "dynamic":
        results = dynamic_evaluation(cfg, task, datamodule)
    elif cfg.get("mode", "standard") == "standard":
        results = standard_evaluation(cfg, task, datamodule)
    else:
        raise ConfigError(f"mode={cfg.mode}: use mode=standard or mode=dynamic.")
    mode = cfg.get("mode", "standard")
    dynamic = OmegaConf.to_container(cfg.dynamic) if mode == "dynamic" else None
    truncated = [f"first {dynamic['max_tokens']} tokens of each split"] if dynamic and dynamic.get("max_tokens") else []
    settings = ", ".join([f"{k}={v}" for k, v in overrides.items()] + truncated) or "training settings"
    log_summary(results)
    # config.yaml + run.json + metrics.json make the folder a run genlab-report collects; metrics.json gains the
    # evaluation's own settings
    out = record_evaluation(cfg, record["config"], results, run_dir_of_checkpoint(cfg.ckpt_path))
    write_json(out / "metrics.json", {"status": "finished", "monitor": None, "ckpt_path": str(cfg.ckpt_path),
                                      "mode": mode, "settings": dict(overrides.items()), "dynamic": dynamic,
                                      "splits": list(cfg.splits),
                                      "metrics": {k: v for k, v in results.items() if math.isfinite(v)}})
    print_summary(f"evaluated {cfg.ckpt_path} ({mode}, {settings})", results, out)
    return results


def _new_data(trained: DictConfig, new: DictConfig) -> DictConfig:
    """`data=<config>` for evaluation; of the same `_target_` as the run's, it keeps the run's data location
    (path, tokenizer, ...) so e.g. `data=squad2_eval11` needs no `data.path=` repeated."""
    if new.get("_target_") != trained.get("_target_"):
        return new
    explicit = {o.split("=", 1)[0].lstrip("+~") for o in _command_line_overrides()}
    new = new.copy()
    for key in DATA_LOCATION_KEYS:
        if key in trained and key in new and f"data.{key}" not in explicit:
            new[key] = trained[key]
    return new


def _command_line_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def standard_evaluation(cfg: DictConfig, task, datamodule) -> dict[str, float]:
    trainer = build.build_trainer(cfg, build.build_callbacks(cfg), build.build_loggers(cfg))
    results: dict[str, float] = {}
    # Lightning asks for the training callbacks whose state the checkpoint holds (RNG, ModelCheckpoint); an
    # evaluation restores only the weights and needs none of them.
    warnings.filterwarnings("ignore", message=r"Be aware that when using `ckpt_path`, callbacks")
    for split in cfg.splits:
        if split == "valid":
            out = trainer.validate(task, datamodule=datamodule, ckpt_path=cfg.ckpt_path, verbose=False,
                                   weights_only=True)
        elif split == "test":
            out = trainer.test(task, datamodule=datamodule, ckpt_path=cfg.ckpt_path, verbose=False,
                               weights_only=True)
        else:
            raise ConfigError(f"splits: unknown split '{split}' (use valid and/or test).")
        results.update({k: float(v) for k, v in (out[0] if out else {}).items()})
    return results


def dynamic_evaluation(cfg: DictConfig, task, datamodule) -> dict[str, float]:
    """Dynamic evaluation (Krause et al. 2017; Dai thesis Table A.9): gradient statistics on train, then adapt while
    scoring each split with batch 1. Works for any recurrent LM of the protocol; AWD checkpoints use their NT-ASGD
    average."""
    from genlab.tasks.awd_lm import averaged_weights
    from genlab.tasks.dynamic_eval import dynamic_evaluate, gradient_statistics

    model = task.model
    if not hasattr(datamodule, "corpus"):
        raise ConfigError("mode=dynamic needs a language-modelling dataset (a token stream).")
    checkpoint = checkpoints.load(cfg.ckpt_path, key="ckpt_path")
    if "awd" in checkpoint:
        model.load_state_dict(averaged_weights(checkpoint, cfg.ckpt_path))
    else:
        task.load_state_dict(checkpoint["state_dict"])
    dyn = cfg.dynamic
    limit = dyn.get("max_tokens")
    tokens = lambda split: torch.as_tensor(datamodule.corpus.splits[split][:limit].astype("int64"))  # noqa: E731
    started = time.monotonic()
    log.info("dynamic evaluation: gradient statistics on train (%d tokens, batch %d)", len(tokens("train")),
             dyn.stat_batch_size)
    stats = gradient_statistics(model, tokens("train"), dyn.stat_batch_size, dyn.bptt, ms=dyn.ms,
                                progress=_progress_log("gradient statistics on train", started))
    results: dict[str, float] = {}
    for split in cfg.splits:
        log.info("dynamic evaluation: adapting while scoring %s (%d tokens, batch 1), %.0fs so far", split,
                 len(tokens(split)), time.monotonic() - started)
        nll, _ = dynamic_evaluate(model, tokens(split), stats, dyn.lr, dyn.lamb, dyn.epsilon, dyn.bptt,
                                  progress=_progress_log(f"scoring {split}", started))
        results[f"{split}/loss"] = nll
        results[f"{split}/ppl"] = math.exp(nll)
        log.info("dynamic evaluation: %s/ppl = %.4f", split, results[f"{split}/ppl"])
    return results


def evaluate_init_from(cfg: DictConfig) -> dict[str, float]:
    """Valid and test of a finetuning preset (the composed train.py config) with the weights of task.init_from."""
    import pytorch_lightning as pl

    validate_config(cfg)
    apply_host_memory_setting(cfg)
    init_from = OmegaConf.select(cfg, "task.init_from", default=None)
    if not init_from:
        raise ConfigError(f"eval.py experiment={cfg.name} evaluates the weights of task.init_from=<HF folder or "
                          "genlab .ckpt>: set it, or pass ckpt_path=<a train.py checkpoint> to evaluate a trained run.")
    out = Path(cfg.paths.output_dir)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = assemble.build_data(cfg.data)
    task = assemble.build_task(cfg, datamodule)
    with open_dict(cfg):  # nothing is trained: no checkpoints, LR or throughput monitors
        cfg.callbacks = {"progress": cfg.callbacks.get("progress")}
    trainer = build.build_trainer(cfg, build.build_callbacks(cfg), build.build_loggers(cfg))
    write_run_metadata(cfg, out)
    log.info("evaluating %s with task.init_from=%s (no training)", cfg.name, init_from)
    results: dict[str, float] = {}
    for run in (trainer.validate, trainer.test) if assemble.has_test(datamodule) else (trainer.validate,):
        for per_loader in run(task, datamodule=datamodule, verbose=False):
            results.update({k: float(v) for k, v in per_loader.items()})
    log_summary(results)
    write_final_metrics(out, results, status="finished")
    print_summary(f"evaluated {init_from} (experiment={cfg.name}, no training)", results, out)
    return results


def _progress_log(what: str, started: float, lines: int = 10):
    """A dynamic-evaluation progress callback that logs ``lines`` times over ``what``'s chunks: one chunk is a few
    tokens, and a split takes minutes."""

    def report(done: int, total: int, nll: float | None) -> None:
        if done % max(1, total // lines):
            return
        ppl = f", ppl so far {math.exp(nll):.2f}" if nll is not None else ""
        log.info("dynamic evaluation: %s, chunk %d/%d (%.0f%%)%s, %.0fs so far", what, done, total,
                 100 * done / total, ppl, time.monotonic() - started)

    return report


def _forget_run_dir(cfg: DictConfig):
    """On bad input, remove the run directory Hydra created for this evaluation (records are written at the end)."""
    out = Path(cfg.paths.output_dir)
    fresh = run_dir.is_fresh(out)

    def forget(err: BaseException) -> None:
        if fresh and find_user_error(err) is not None and not in_multirun():
            run_dir.remove_unused(out, Path(cfg.paths.log_dir))

    return forget


def main(cfg: DictConfig) -> dict[str, float]:
    return guarded(lambda: evaluate(cfg), _forget_run_dir(cfg))


def main_init_from(cfg: DictConfig) -> dict[str, float]:
    return guarded(lambda: evaluate_init_from(cfg), _forget_run_dir(cfg))
