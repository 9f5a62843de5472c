"""Issue 27: a run SIGKILLed after a checkpoint and resumed with ``ckpt_path=`` ends bit-exactly where an
uninterrupted run ends: weights, optimiser state, loop counters and logged training losses (torch.equal).

One row per task family; a new family is one more line in FAMILIES."""

from __future__ import annotations

import random

import pytest

from reliability.harness import COMMON, assert_equal_state, kill_at, load, losses, train

pytestmark = pytest.mark.reliability

# (preset, extra overrides, steps the kill may land on). Checkpoints at steps 2, 4, 6 and at every validation; the
# kill lands after the first one. limit_train_batches=3 makes step 3 an epoch end (validation, then a checkpoint):
# a kill at step 3 resumes from an end-of-epoch checkpoint into the next epoch (validation every epoch, so that
# Lightning writes it in on_train_epoch_end).
ANY = [3, 4, 5]
EPOCH_END = (["trainer.limit_train_batches=3", "trainer.check_val_every_n_epoch=1"], [3])
TINY_GPT = ["model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.n_inner=64"]
FAMILIES = [
    pytest.param("txl_mini", [], ANY, id="lm"),
    # loader workers respawned every pass (the multi-process iterator must not spend the resume position)
    pytest.param("xlnet_base_mini", ["data.num_workers=2", "data.persistent_workers=false"], ANY, id="plm"),
    pytest.param("bert_base_mini", [], ANY, id="mlm"),
    pytest.param("bert_sst2_mini", [], ANY, id="classification"),
    pytest.param("xlnet_sst2_mini", *EPOCH_END, id="classification_epoch_end"),
    pytest.param("bert_squad1_mini", ["callbacks.checkpoint.monitor=null"], ANY, id="span"),  # F1: full dev pass
    pytest.param("bert_race_mini", [], ANY, id="multiple_choice"),
    # epoch-end checkpoint of an unsized loader whose window lengths are drawn per epoch (set_epoch)
    pytest.param("mos_ptb_awd_mini", *EPOCH_END, id="awd_lstm_epoch_end"),
    pytest.param("mos_ptb_mini", [], ANY, id="mos"),
    pytest.param("bad_gan_mnist_mini", [], ANY, id="bad_gan"),
    pytest.param("cegan_gmm4_mini", [], ANY, id="cegan"),
    pytest.param("gpt_books_mini", [*TINY_GPT, "task.scheduler.warmup_steps=3"], ANY, id="gpt_pretrain"),
    # 4-step epochs: the kill (step 3) resumes mid-epoch from step 2 and trains on into the next epoch's order
    pytest.param("gpt_sst2_mini", [*TINY_GPT, "data.batch_size=4", "data.max_seq_len=48", "model.n_positions=48",
                                   "trainer.limit_train_batches=4"], [3], id="gpt_finetune"),
    pytest.param("funnel_wiki_b1_1_1_mlm_mini", ["data.batch_size=4", "data.eval_batch_size=4", "data.seq_len=32",
                                                 "data.masking.num_targets=5", "model.block_sizes=[1,1,1]",
                                                 "model.block_repeats=[1,1,1]", "task.scheduler.warmup_steps=3"],
                 ANY, id="funnel_mlm"),
    # ELECTRA's generator samples replacements with Gumbel noise from the global RNG
    pytest.param("funnel_b6_6_6_electra_mini", ["data.batch_size=4", "data.eval_batch_size=4", "data.seq_len=32",
                                                "data.masking.num_targets=5", "model.block_sizes=[1,1,1]",
                                                "model.block_repeats=[1,1,1]", "task.scheduler.warmup_steps=3"],
                 ANY, id="funnel_electra"),
    # the kill lands in the adversarial phase, after the MLE warm-up (task.mle_steps)
    pytest.param("gdan_squad_gen_domain_adv_mini", ["data.mini=synthetic", "model.reader.embed_dim=8",
                                                    "model.reader.hidden=4", "model.generator.embed_dim=8",
                                                    "model.generator.enc_hidden=4", "model.generator.dec_hidden=8",
                                                    "model.generator.max_question_len=6", "data.batch_size=4",
                                                    "data.unlabeled_batch_size=4", "data.eval_batch_size=64",
                                                    "task.mle_steps=3"], ANY, id="gdan"),
    # Planetoid counts one step per sub-batch (the warm-up batch alone is 5 here) and validates after every batch
    pytest.param("planetoid_t_cora_mini", ["trainer.max_steps=-1", "data.steps=6", "data.warmup_label_iters=3",
                                           "data.warmup_graph_iters=2", "trainer.val_check_interval=1"], [9],
                 id="planetoid"),
]


def _final(run_dir):
    ckpt = load(run_dir / "checkpoints" / "last.ckpt")
    return ckpt


@pytest.mark.parametrize(("preset", "extra", "kill_steps"), FAMILIES)
def test_sigkill_then_resume_is_bit_exact(preset, extra, kill_steps, tmp_path):
    args = [f"experiment={preset}", *COMMON, *extra]
    full = train(tmp_path / "full", *args)
    assert full.returncode == 0, full.stderr[-4000:]

    step = random.Random(preset).choice(kill_steps)  # after the first checkpoint (step 2), before the end (6)
    run = tmp_path / "killed"
    killed = train(run, *args, *kill_at(step))
    assert killed.returncode == -9, killed.stderr[-4000:]
    saved = load(run / "checkpoints" / "last.ckpt")
    resumed_from = saved["loops"]["fit_loop"]["epoch_loop.state_dict"]["_batches_that_stepped"]
    assert 0 < saved["global_step"] <= step
    if "trainer.limit_train_batches=3" in extra:
        assert saved["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"] == 1, "not an epoch-end save"
    resumed = train(run, *args, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-4000:]

    a, b = _final(tmp_path / "full"), _final(run)
    assert a["global_step"] == b["global_step"] > step
    assert_equal_state(a["state_dict"], b["state_dict"], "state_dict")
    assert_equal_state(a["optimizer_states"], b["optimizer_states"], "optimizer_states")
    assert_equal_state(a.get("lr_schedulers"), b.get("lr_schedulers"), "lr_schedulers")
    full_losses, resumed_losses = losses(tmp_path / "full"), losses(run)
    # the steps after the killed run's last checkpoint are trained again; rows it logged before are in the CSV
    after_resume = {k: v for k, v in full_losses.items() if k[0] >= resumed_from}
    assert after_resume, "no training losses logged"
    assert {k: resumed_losses.get(k) for k in after_resume} == after_resume
