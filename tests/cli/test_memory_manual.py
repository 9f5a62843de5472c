"""The memory probe steps the manually optimised tasks (bad GAN, CEGAN, Planetoid, GDAN) through a Trainer, on a copy:
their activations are estimated, their gradients and optimiser states left to the per-parameter counts, and the run's
task is left as it was."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch

from genlab import assemble
from genlab.cli import memory_manual, memory_probe
from genlab.cli.memory import sizes_before_data
from genlab.cli.train import check_memory_before_data
from genlab.errors import ConfigError

SMALL = {  # the paper presets at toy widths (the model's code and the task's step are the paper preset's)
    "bad_gan_mnist_fm": ["data.batch_size=6", "data.labeled_batch_size=4"],
    "cegan_gmm4_mini": ["data.batch_size=30"],
    "planetoid_t_cora": ["data.batch_size=5", "data.g_batch_size=2", "data.g_sample_size=7"],
    "gdan_squad_gen_domain_adv": ["data.d_vocab_max=300", "data.g_vocab_max=200", "data.batch_size=3",
                                  "data.unlabeled_batch_size=2", "data.max_paragraph_tokens=40",
                                  "model.reader.hidden=8", "model.reader.embed_dim=8", "model.reader.num_layers=2",
                                  "model.generator.embed_dim=8", "model.generator.enc_hidden=8",
                                  "model.generator.dec_hidden=8", "data.g_max_question_tokens=5",
                                  "data.max_question_tokens=6"],
}


TRAINING_STATE = ("gap", "update_counts", "counts", "mle_closed", "running_baseline", "best_acc", "stopped_on_nan")


def _state(task):
    return ({k: v.clone() for k, v in task.state_dict().items()},
            {k: copy.deepcopy(getattr(task, k)) for k in TRAINING_STATE if hasattr(task, k)})


@pytest.mark.parametrize("preset", list(SMALL))
def test_probe_steps_a_copy_and_counts_neither_gradients_nor_optimiser_states(compose_cfg, preset):
    cfg = compose_cfg([f"experiment={preset}", *SMALL[preset]])
    task = assemble.build_task(cfg, sizes=sizes_before_data(cfg))
    before, rng = _state(task), torch.get_rng_state()
    small, large, target, batch_of = memory_manual.probe_plan(cfg, task, cfg.data.batch_size)
    spans, left_out = memory_probe.step_spans(task, batch_of(large), "32-true")
    # every gradient the optimisers stepped with, and (Adam) both moments, are left out; SGD keeps no state
    params = [p for p in task.parameters() if p.requires_grad]
    left = Counter(spans[i][2] for i in left_out)
    per_param = 1 + 2 * (preset != "planetoid_t_cora")
    for nbytes, count in Counter(4 * p.numel() for p in params).items():
        assert left[nbytes] >= per_param * count, (nbytes, left[nbytes], count)
    assert memory_probe.activation_bytes(cfg, task) > 0
    # the run's task is untouched: weights, buffers (batch norm statistics), training state, RNG, no Trainer
    (weights, state), (weights_after, state_after) = before, _state(task)
    torch.testing.assert_close(weights_after, weights, rtol=0, atol=0, equal_nan=True)
    assert state == state_after and state
    assert torch.equal(torch.get_rng_state(), rng) and task._trainer is None
    assert all(p.grad is None for p in task.parameters())


def test_sizes_before_data_of_graphs_and_gdan(compose_cfg):
    assert sizes_before_data(compose_cfg(["experiment=planetoid_t_pubmed"])) == {
        "num_nodes": 19717, "n_features": 500, "n_classes": 3}
    assert sizes_before_data(compose_cfg(["experiment=gdan_squad_gen_domain_adv"])) == {
        "reader": {"vocab_size": 200_000}, "generator": {"vocab_size": 30_000}}
    assert sizes_before_data(compose_cfg(["experiment=gdan_squad_sl"])) == {"reader": {"vocab_size": 200_000}}
    assert sizes_before_data(compose_cfg(["experiment=gdan_squad_gen_domain_adv", "task.mle_steps=0",
                                          "task.g_init_from=g.ckpt"])) is None  # G's vocabulary: the data's
    assert sizes_before_data(compose_cfg(["experiment=planetoid_t_cora_mini"])) is None  # the mini's own graph


def test_a_gan_that_cannot_fit_stops_before_its_data(compose_cfg, tmp_path):
    # ten million 784-pixel images a batch: the probe's two small batches, extrapolated; no data folder exists
    cfg = compose_cfg(["experiment=bad_gan_mnist_fm", "data.batch_size=10000000", "data.labeled_batch_size=100",
                       "data.source=path", f"data.path={tmp_path / 'no_data'}", "trainer.accelerator=cpu"])
    with pytest.raises(ConfigError, match="data.batch_size") as err:
        check_memory_before_data(cfg)
    assert float(str(err.value).split(" GB")[0].split()[-1]) > 100  # hundreds of GB, from the activations
    assert not (tmp_path / "no_data").exists()
