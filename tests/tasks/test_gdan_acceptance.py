"""The acceptance checks of the GDAN real-data mini (experiments/gdan/README.md), through the presets as a user runs
them (slow: six mini runs, about 30 CPU-minutes; evidence and the full method table in experiments/gdan/README.md):
(a) SL's mean test F1 >= 0.25 and at least 3x a random legal span's; (b) Context beats SL on mean test F1 by more than
the larger std over the 3 seeds (the issue's gate, rather than a fixed +0.02) and on mean dev F1. A better dev F1 in
every seed was measured in 2 of 3 (README), so it is recorded, not gated. (c) GDAN tests a checkpoint of its
alternating phase (after D's first update), never one of G's MLE phase."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from genlab.cli.build import build_data
from genlab.cli.train import train
from genlab.metrics.squad_eval import evaluate_v1

SEEDS = (0, 1, 2)


def run(compose_cfg, tmp_path, name: str, seed: int) -> dict[str, float]:
    out = tmp_path / f"{name}_{seed}"
    train(compose_cfg([f"experiment={name}", f"seed={seed}", f"paths.output_dir={out}",
                       "trainer.enable_progress_bar=false"]))
    return json.loads((out / "metrics.json").read_text())["metrics"]


@pytest.mark.slow
def test_check_23_context_beats_sl_at_the_lowest_labelling_rate(compose_cfg, tmp_path, record_property):
    sl = [run(compose_cfg, tmp_path, "gdan_squad_sl_mini", s) for s in SEEDS]
    ctx = [run(compose_cfg, tmp_path, "gdan_squad_context_mini", s) for s in SEEDS]
    sl_f1, ctx_f1 = [m["test/f1"] for m in sl], [m["test/f1"] for m in ctx]
    record_property("sl_test_f1", statistics.fmean(sl_f1))
    record_property("context_test_f1", statistics.fmean(ctx_f1))
    dm = build_data(compose_cfg(["experiment=gdan_squad_sl_mini"]).data)
    random_span = evaluate_v1(dm.gold("test"), dm.random_span_predictions("test"))["f1"] / 100.0
    record_property("random_span_f1", random_span)
    assert statistics.fmean(sl_f1) >= max(0.25, 3 * random_span)
    record_property("seeds_with_better_dev_f1", sum(c["valid/best_f1"] > s["valid/best_f1"] for c, s in zip(ctx, sl)))
    assert statistics.fmean(c["valid/best_f1"] for c in ctx) > statistics.fmean(s["valid/best_f1"] for s in sl)
    spread = max(statistics.stdev(sl_f1), statistics.stdev(ctx_f1))
    assert statistics.fmean(ctx_f1) - statistics.fmean(sl_f1) > spread


@pytest.mark.slow
def test_gdan_tests_a_checkpoint_written_after_d_has_trained(compose_cfg, tmp_path):
    """Model selection is Algorithm 1's early stopping: the tested checkpoint is one of the alternating phase, never
    of G's MLE phase (D untrained), and its step is the logged valid/best_step."""
    cfg = compose_cfg(["experiment=gdan_squad_gen_domain_adv_mini"])
    m = run(compose_cfg, tmp_path, "gdan_squad_gen_domain_adv_mini", 0)
    best = json.loads((tmp_path / "gdan_squad_gen_domain_adv_mini_0" / "metrics.json").read_text())["best_checkpoint"]
    assert int(m["valid/best_step"]) == int(Path(best).stem.removeprefix("best-step")) > cfg.task.mle_steps
