"""The Table B.2 pattern (Dai's thesis App. B) through the presets, as a user runs them.

Fast: on the 4-GMM a short EGAN-Ent-NN run already calibrates its energy (KL(p_disc‖p_data) several times below
EGAN-Const's and the GAN's, whose energies stay flat on the data). Slow: the `_mini` presets over two seeds on all
three data sets (evidence and numbers in experiments/cegan/README.md)."""

from __future__ import annotations

import json
import statistics

import pytest

from genlab.cli.train import train

# 2,000 iterations (50 epochs of a 20,000-point subset): EGAN-Ent-NN's KL is about 0.5 there, 3.6 after 1,000
FAST = ["data.n_train=20000", "trainer.max_epochs=50", "trainer.check_val_every_n_epoch=50",
        "task.n_eval_generated=20000"]


def run(compose_cfg, tmp_path, name: str, seed: int, extra: list[str] = ()) -> dict[str, float]:
    out = tmp_path / f"{name}_{seed}"
    train(compose_cfg([f"experiment={name}", f"seed={seed}", f"paths.output_dir={out}", "logger=none",
                       "trainer.enable_progress_bar=false", *extra]))
    return json.loads((out / "metrics.json").read_text())["metrics"]


def test_check_16_entropy_calibrates_the_4gmm_energy(compose_cfg, tmp_path, record_property):
    kl = {v: run(compose_cfg, tmp_path, f"cegan_gmm4{v}_mini", 0, FAST)["test/kl_disc_data"]
          for v in ("", "_const", "_gan")}
    for v, value in kl.items():
        record_property(f"kl_disc_data{v or '_ent_nn'}", value)
    assert kl[""] * 3 < min(kl["_const"], kl["_gan"]), kl


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["gmm4", "two_spirals", "biased_gmm2"])
def test_table_b2_ordering_over_seeds(dataset, compose_cfg, tmp_path, record_property):
    """The pattern on the minis, seeds 0 and 1: EGAN-Ent-NN's KL(p_disc‖p_data) below EGAN-Const's and the GAN's
    in every seed; on the biased mixture Ent-NN gives the heavy mode the lower energy in every seed (the soft
    threshold 0.5 is recorded, not gated: the minis measured 0.38 and 0.47)."""
    runs = {v: [run(compose_cfg, tmp_path, f"cegan_{dataset}{v}_mini", s) for s in (0, 1)]
            for v in ("", "_const", "_gan")}
    kl = {v: [m["test/kl_disc_data"] for m in ms] for v, ms in runs.items()}
    for v, values in kl.items():
        record_property(f"kl_disc_data{v or '_ent_nn'}", statistics.fmean(values))
    for s in (0, 1):
        assert kl[""][s] < min(kl["_const"][s], kl["_gan"][s]), kl
    if dataset == "gmm4":  # the entropy term does not hurt the generator (Table B.2)
        gen = {v: statistics.fmean(m["test/kl_gen_emp"] for m in runs[v]) for v in ("", "_const")}
        assert gen[""] <= gen["_const"], gen
    if dataset == "biased_gmm2":
        gaps = [m["test/mode_energy_gap"] for m in runs[""]]
        record_property("mode_energy_gap_ent_nn", statistics.fmean(gaps))
        assert min(gaps) > 0, gaps
