"""Issue 27: a run SIGKILLed after a checkpoint and resumed with ``ckpt_path=`` ends bit-exactly where an
uninterrupted run ends: weights, optimiser state, loop counters and logged training losses (torch.equal).

One row per task family; a new family is one more line in FAMILIES."""

from __future__ import annotations

import random

import pytest

from reliability.harness import COMMON, assert_equal_state, kill_at, load, losses, train

pytestmark = pytest.mark.reliability

# (preset, extra overrides). Steps: checkpoints at 2, 4, 6; the kill lands after the first one.
FAMILIES = [
    pytest.param("txl_mini", [], id="lm"),
    pytest.param("xlnet_base_mini", [], id="plm"),
    pytest.param("bert_base_mini", [], id="mlm"),
    pytest.param("bert_sst2_mini", [], id="classification"),
    pytest.param("bert_squad1_mini", [], id="span"),
    pytest.param("bert_race_mini", [], id="multiple_choice"),
    pytest.param("mos_ptb_awd_mini", [], id="awd_lstm"),
    pytest.param("bad_gan_mnist_mini", [], id="bad_gan"),
    pytest.param("cegan_gmm4_mini", [], id="cegan"),
    pytest.param("planetoid_t_cora_mini", [], id="planetoid"),
]


def _final(run_dir):
    ckpt = load(run_dir / "checkpoints" / "last.ckpt")
    return ckpt


@pytest.mark.parametrize(("preset", "extra"), FAMILIES)
def test_sigkill_then_resume_is_bit_exact(preset, extra, tmp_path):
    args = [f"experiment={preset}", *COMMON, *extra]
    full = train(tmp_path / "full", *args)
    assert full.returncode == 0, full.stderr[-4000:]

    step = random.Random(preset).choice([3, 4, 5])  # after the first checkpoint (step 2), before the end (6)
    run = tmp_path / "killed"
    killed = train(run, *args, *kill_at(step))
    assert killed.returncode == -9, killed.stderr[-4000:]
    resumed = train(run, *args, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-4000:]

    a, b = _final(tmp_path / "full"), _final(run)
    assert a["global_step"] == b["global_step"] == 6
    assert_equal_state(a["state_dict"], b["state_dict"], "state_dict")
    assert_equal_state(a["optimizer_states"], b["optimizer_states"], "optimizer_states")
    assert_equal_state(a.get("lr_schedulers"), b.get("lr_schedulers"), "lr_schedulers")
    full_losses, resumed_losses = losses(tmp_path / "full"), losses(run)
    after_resume = {k: v for k, v in full_losses.items() if k[0] >= step - 1}
    assert after_resume, "no training losses logged"
    assert {k: resumed_losses.get(k) for k in after_resume} == after_resume
