"""``data.global_batch`` -> ``trainer.accumulate_grad_batches`` in the CLI build, and the strategy/device checks
that must fail before any work (exit 2)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch

from genlab import assemble
from genlab.cli import build
from genlab.errors import ConfigError
from genlab.parallel import check_strategy_device, world_size
from helpers import ROOT


def test_world_size_is_devices_per_node_times_nodes():
    assert world_size(2, 1, "cpu") == 2
    assert world_size(4, 8, "cpu") == 32
    assert world_size([0, 1, 3], 2, "cpu") == 6
    assert world_size("0,1", 1, "cpu") == 2
    assert world_size("3", 2, "cpu") == 6
    assert world_size("auto", 2, "cpu") == 2  # Lightning runs one CPU process per node for devices=auto
    with pytest.raises(ConfigError, match="trainer.devices"):
        world_size(0, 1, "cpu")


def _cfg(compose_cfg, *extra):
    return compose_cfg(["experiment=txl_mini", "trainer.accelerator=cpu", "data.batch_size=4", *extra])


@pytest.mark.parametrize("devices,nodes,expected", [(1, 1, 8), (2, 1, 4), (2, 2, 2), (8, 1, 1)])
def test_accumulation_is_derived_from_world_size_and_micro_batch(compose_cfg, devices, nodes, expected):
    cfg = _cfg(compose_cfg, "+data.global_batch=32", f"trainer.devices={devices}", f"trainer.num_nodes={nodes}")
    assert build.accumulate_grad_batches(cfg) == expected


def test_without_global_batch_the_explicit_accumulation_is_kept(compose_cfg):
    assert build.accumulate_grad_batches(_cfg(compose_cfg, "trainer.accumulate_grad_batches=3")) == 3


def test_global_batch_not_divisible_names_the_keys(compose_cfg):
    cfg = _cfg(compose_cfg, "+data.global_batch=30", "trainer.devices=2")
    with pytest.raises(ConfigError, match=r"data.global_batch=30 .* 4 x 2 = 8.*data.batch_size"):
        build.accumulate_grad_batches(cfg)


def test_global_batch_conflicting_with_explicit_accumulation_is_an_error(compose_cfg):
    cfg = _cfg(compose_cfg, "+data.global_batch=32", "trainer.devices=1", "trainer.accumulate_grad_batches=2")
    with pytest.raises(ConfigError, match="accumulate_grad_batches=8.*accumulate_grad_batches=2"):
        build.accumulate_grad_batches(cfg)
    # The same value written twice is no conflict.
    cfg = _cfg(compose_cfg, "+data.global_batch=32", "trainer.devices=1", "trainer.accumulate_grad_batches=8")
    assert build.accumulate_grad_batches(cfg) == 8


def test_global_batch_needs_a_micro_batch(compose_cfg):
    cfg = _cfg(compose_cfg, "+data.global_batch=32", "~data.batch_size")
    with pytest.raises(ConfigError, match="data.batch_size"):
        build.accumulate_grad_batches(cfg)


def test_derived_accumulation_reaches_the_trainer_and_is_logged_and_recorded(compose_cfg, caplog):
    cfg = _cfg(compose_cfg, "+data.global_batch=8", "trainer.devices=1")
    datamodule = assemble.build_data(cfg.data)  # global_batch is the CLI's key: the DataModule never sees it
    assert datamodule.batch_size == 4
    with caplog.at_level(logging.INFO, logger="genlab"):
        trainer = build.build_trainer(cfg, [], [])
    assert trainer.accumulate_grad_batches == 2
    assert cfg.trainer.accumulate_grad_batches == 2  # the run's config.yaml records the value used
    assert "data.global_batch=8 = data.batch_size 4 x 1 processes x trainer.accumulate_grad_batches 2" in caplog.text


def test_fsdp1_on_cpu_fails_fast_with_the_alternatives(compose_cfg):
    cfg = compose_cfg(["experiment=txl_mini", "strategy=fsdp1", "trainer.accelerator=cpu"])
    with pytest.raises(ConfigError, match="strategy=fsdp1.*CUDA GPU.*strategy=fsdp"):
        build.build_trainer(cfg, [], [])
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="fsdp1"):
            check_strategy_device(cfg.trainer.strategy, "auto")
        with pytest.raises(ConfigError, match="fsdp1"):
            check_strategy_device("fsdp", "cpu")  # Lightning's own name for FSDPStrategy
    check_strategy_device(cfg.trainer.strategy, "cuda")
    check_strategy_device({"_target_": "genlab.parallel.FSDP2Strategy"}, "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the check is about CPU-only machines")
def test_pytorch_fsdp1_really_refuses_cpu():
    """The reason for the check above: PyTorch's FSDP1 itself has no CPU path (torch 2.13). If this starts to
    fail, FSDP1 runs on CPU and check_strategy_device can be relaxed (Lightning's own guard permitting)."""
    code = (
        "import torch, torch.distributed as dist\n"
        "from torch.distributed.fsdp import FullyShardedDataParallel\n"
        "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)\n"
        "FullyShardedDataParallel(torch.nn.Linear(2, 2))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "FSDP needs a non-CPU accelerator device" in result.stderr


def test_train_py_with_fsdp1_on_cpu_exits_2(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "experiment=txl_mini", "strategy=fsdp1", "trainer.accelerator=cpu",
         f"paths.output_dir={tmp_path}", "logger=csv"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
        env={**os.environ, "GENLAB_OFFLINE": "1", "WANDB_MODE": "disabled", "GENLAB_LOGS": str(tmp_path / "outputs")},
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "strategy=fsdp1" in result.stderr and "CUDA GPU" in result.stderr


def test_train_py_accepts_global_batch_and_names_it_when_not_divisible(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "experiment=txl_mini", "+data.global_batch=30", "data.batch_size=4",
         "trainer.devices=2", "trainer.accelerator=cpu", f"paths.output_dir={tmp_path}", "logger=csv"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
        env={**os.environ, "GENLAB_OFFLINE": "1", "WANDB_MODE": "disabled", "GENLAB_LOGS": str(tmp_path / "outputs")},
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "data.global_batch=30" in result.stderr and "not an argument" not in result.stderr


def test_validation_checks_the_global_batch_type(compose_cfg):
    from genlab.cli.validate import validate_config

    cfg = compose_cfg(["experiment=txl_mini", "+data.global_batch=many"])
    with pytest.raises(ConfigError, match="data.global_batch"):
        validate_config(cfg)
    validate_config(compose_cfg(["experiment=txl_mini", "+data.global_batch=32"]))


# -------------------------------------------------------------------------- accumulation chunks, samplers
def test_chunks_interleave_segment_by_segment_and_cover_the_global_streams():
    """Rank r of W accumulating A owns chunks r*A+j of the W*A chunks; items go segment t of every chunk, then t+1."""
    import numpy as np

    from genlab.data.lm.streams import (
        ChunkedStreamSegments,
        StreamSegments,
        split_streams,
    )

    tokens = np.arange(2 * 2 * 3 * 11)
    world, chunks, micro = 2, 2, 3
    whole = split_streams(tokens, micro * world * chunks)
    for rank in range(world):
        data = ChunkedStreamSegments(tokens, micro, 4, rank=rank, world_size=world, chunks=chunks)
        assert len(data) == chunks * StreamSegments(whole, 4).n_segments
        for i in range(len(data)):
            item = data[i]
            k, j = divmod(i, chunks)
            assert (item["segment"], item["chunk"]) == (k, j)
            rows = whole[(rank * chunks + j) * micro : (rank * chunks + j + 1) * micro]
            want = StreamSegments(rows, 4)[k]
            assert torch.equal(item["input_ids"], want["input_ids"]) and torch.equal(item["target"], want["target"])


def test_lm_datamodule_learns_the_accumulation_from_the_trainer_and_resumes_by_item(compose_cfg):
    cfg = _cfg(compose_cfg, "+data.global_batch=8", "trainer.devices=1")
    datamodule = assemble.build_data(cfg.data)
    trainer = build.build_trainer(cfg, [], [])
    datamodule.trainer = trainer
    batches = list(datamodule.train_dataloader())
    assert [b["chunk"] for b in batches[:4]] == [0, 1, 0, 1] and [b["segment"] for b in batches[:4]] == [0, 0, 1, 1]
    datamodule.load_state_dict({"next_item": 3, "chunks": 2})  # mid-cycle: segment 1, chunk 1 comes next
    resumed = next(iter(datamodule.train_dataloader()))
    assert (resumed["segment"], resumed["chunk"]) == (1, 1)
    assert torch.equal(resumed["input_ids"], batches[3]["input_ids"])
    datamodule.load_state_dict({"next_segment": 2})  # a checkpoint from before chunks: one item per segment
    assert next(iter(datamodule.train_dataloader()))["segment"] == 2


def test_distributed_sampler_is_off_for_rank_sharded_data_and_on_for_the_rest(compose_cfg):
    assert build.distributed_sampler(compose_cfg(["experiment=txl_mini"])) is False
    assert build.distributed_sampler(compose_cfg(["experiment=mos_ptb_mini"])) is False
    assert build.distributed_sampler(compose_cfg(["experiment=bert_sst2_mini"])) is True
    assert build.distributed_sampler(compose_cfg(["experiment=bert_sst2_mini", "+trainer.use_distributed_sampler=false"])) is False
    trainer = build.build_trainer(compose_cfg(["experiment=bert_sst2_mini", "trainer.accelerator=cpu"]), [], [])
    assert trainer._accelerator_connector.use_distributed_sampler is True


def test_bptt_data_refuses_the_trainers_accumulation_and_names_small_batch_size(compose_cfg):
    cfg = compose_cfg(["experiment=mos_ptb_mini", "trainer.accelerator=cpu", "trainer.devices=1",
                       "+data.global_batch=24", "data.batch_size=12"])
    with pytest.raises(ConfigError, match=r"accumulate_grad_batches=2.*task.small_batch_size"):
        build.build_trainer(cfg, [], [])


def test_data_that_cannot_be_split_by_rank_refuses_several_processes(compose_cfg):
    from genlab.data.graphs.planetoid import PlanetoidDataModule

    assert PlanetoidDataModule.data_parallel is False
    cfg = compose_cfg(["experiment=planetoid_g_karate_mini", "trainer.accelerator=cpu", "trainer.devices=2"])
    with pytest.raises(ConfigError, match=r"PlanetoidDataModule runs on one process.*trainer.devices=1"):
        build.build_trainer(cfg, [], [])
    build.check_data_parallel(compose_cfg(["experiment=bert_sst2_mini", "trainer.accelerator=cpu", "trainer.devices=2"]))
