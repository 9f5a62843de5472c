"""A run the machine cannot hold stops before training with the estimate and the keys to change (exit 2)."""

from __future__ import annotations

import pytest
import torch
from cli.test_quiet_start import TINY, _run
from omegaconf import OmegaConf

from genlab.cli.memory import GB, check_memory, estimate, sizes_before_data, transformer_activation_bytes
from genlab.errors import ConfigError


def _cfg(batch: int, seq: int = 64, **model):
    model = {"d_model": 32, "n_layer": 2, "n_head": 2, "mem_len": 16, **model}
    return OmegaConf.create({"model": model, "data": {"batch_size": batch, "tgt_len": seq},
                             "trainer": {"accelerator": "cpu"}})


def test_estimate_counts_weights_optimiser_and_activations():
    net = torch.nn.Linear(10, 10)  # 110 parameters
    est = estimate(_cfg(4), net)
    assert est.weights_bytes == 8 * 110 and est.optimizer_bytes == 8 * 110
    # no probe batch for a bare Linear: per layer 2 b s (34 h + 5 a (s + m)), 2 layers
    assert est.activation_bytes == 2 * 2 * 4 * 64 * (34 * 32 + 5 * 2 * (64 + 16))
    assert transformer_activation_bytes(OmegaConf.create({"model": {"n_hid": 3}, "data": {"batch_size": 4}})) is None
    sgd = OmegaConf.merge(_cfg(4), {"task": {"optimizer": {"_target_": "torch.optim.SGD", "momentum": 0.0}}})
    assert estimate(sgd, net).optimizer_bytes == 0


def test_model_sizes_come_from_the_config_before_the_data(compose_cfg):
    assert sizes_before_data(compose_cfg(["experiment=txl_wt103_base"])) == {"vocab_size": 267_735}
    assert sizes_before_data(compose_cfg(["experiment=xlnet_large"])) == {"vocab_size": 32_000}
    assert sizes_before_data(compose_cfg(["experiment=txl_wt103_base_mini"])) is None  # the mini's own vocabulary
    assert sizes_before_data(compose_cfg(["experiment=planetoid_t_cora_mini"])) is None  # features, classes: data only


def test_absurd_batch_stops_with_estimate_and_keys():
    with pytest.raises(ConfigError) as err:
        check_memory(_cfg(10**9), torch.nn.Linear(10, 10), available=16 * GB)
    message = str(err.value)
    assert "GB" in message and "data.batch_size" in message and "16.0 GB is available" in message


def test_a_run_that_fits_passes():
    assert check_memory(_cfg(4), torch.nn.Linear(10, 10), available=16 * GB).total_bytes < GB


def test_cli_absurd_batch_exits_2_before_any_data_work(tmp_path):
    # 10 layers x 100000 streams x 64 tokens: hundreds of GB of activations by the estimate. The corpus folder does
    # not exist: the memory check, made before the data is read, must be what stops the run.
    overrides = [o for o in TINY if not o.startswith(("data.batch_size", "data.tgt_len"))]
    result = _run(tmp_path, *overrides, "data.batch_size=100000", "data.tgt_len=64", "model.n_layer=10",
                  "model.cutoffs=[20000,40000,200000]", "data.source=path", f"data.path={tmp_path / 'no_corpus'}",
                  f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "only" in result.stderr and "GB is available" in result.stderr and "data.batch_size" in result.stderr
    assert "no_corpus" not in result.stderr  # not the data's error: the data was never looked at
    assert "Steps:" not in result.stdout + result.stderr  # stopped before training


def test_the_task_is_built_once_when_the_data_agrees(compose_cfg, monkeypatch):
    """task.init_from is read as the task is built: once, not for the memory check and again after the data."""
    from genlab import assemble
    from genlab.cli.train import build_data_and_task

    cfg = compose_cfg(["experiment=txl_ptb", *TINY])
    built, build_task = [], assemble.build_task
    monkeypatch.setattr(assemble, "build_task", lambda *a, **kw: built.append(build_task(*a, **kw)) or built[-1])

    class Data:  # the data: the vocabulary the config names (Penn Treebank's 10,000 words)
        vocab = 10_000

        def model_overrides(self):
            return {"vocab_size": self.vocab}

    monkeypatch.setattr(assemble, "build_data", lambda data_cfg: Data())
    assert build_data_and_task(cfg)[1] is built[0] and len(built) == 1
    Data.vocab = 500  # the data changes the model: built again (and checked again)
    task = build_data_and_task(cfg)[1]
    assert len(built) == 3 and task is built[2] and task.model.vocab_size == 500
