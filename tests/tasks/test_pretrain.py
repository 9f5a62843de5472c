"""Pretraining tasks (XLNet v1 §2.2-§2.5, App. A.3; the BERT and DAE baselines of §3.7): loss definitions, optimiser
rules, memory, and xlnet_mini / dae / bert_mini losses falling on the offline Wikipedia mini."""

import functools

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from genlab.models.bert import BertForPretraining
from genlab.models.xlnet import XLNetLMHeadModel
from genlab.tasks.layerwise_lr import AdamWeightDecay, decays, layer_decay_groups, scale_layer_gradients
from genlab.tasks.optim import warmup_linear
from genlab.tasks.pretrain import (
    DAETask,
    MaskedLMTask,
    PermutationLMTask,
    masked_fraction,
)

V = 40


def _xlnet(**kw):
    torch.manual_seed(0)
    args = dict(n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0, dropatt=0.0)
    return XLNetLMHeadModel(V, **{**args, **kw})


def _plm_batch(B=2, T=8, P=4, real=3):
    torch.manual_seed(1)
    ids = torch.randint(9, V, (B, T))
    mapping = torch.zeros(B, P, T)
    for b in range(B):
        for k, pos in enumerate(range(T - real, T)):
            mapping[b, k, pos] = 1
    perm = torch.zeros(B, T, T)
    perm[:, :, T - real :] = 1  # targets hidden from everybody (still a valid order: targets predicted last)
    mask = torch.zeros(B, P)
    mask[:, :real] = 1
    target = torch.where(mask.bool(), torch.gather(ids, 1, mapping.argmax(-1)), torch.zeros(B, P, dtype=torch.long))
    return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "perm_mask": perm, "target_mapping": mapping,
            "target": target, "target_mask": mask, "nsp_label": torch.tensor([0, 1])}


def _opt(lr=1e-3):
    return functools.partial(AdamWeightDecay, lr=lr, eps=1e-6)


def test_c17_plm_loss_is_mean_ce_over_real_slots_and_ignores_padding():
    task = PermutationLMTask(_xlnet(), _opt(), reuse_len=None, mem_init="none")
    batch = _plm_batch()
    loss, n = task._objective(batch, train=False)
    out = task.model(batch["input_ids"], batch["token_type_ids"], None, batch["perm_mask"], batch["target_mapping"])
    ce = F.cross_entropy(out.logits[:, :3].reshape(-1, V), batch["target"][:, :3].reshape(-1))
    torch.testing.assert_close(loss, ce)
    assert n == 6
    padded = dict(batch)  # double the padding slots
    padded["target_mapping"] = torch.cat([batch["target_mapping"], torch.zeros(2, 4, 8)], 1)
    padded["target"] = torch.cat([batch["target"], torch.zeros(2, 4, dtype=torch.long)], 1)
    padded["target_mask"] = torch.cat([batch["target_mask"], torch.zeros(2, 4)], 1)
    torch.testing.assert_close(task._objective(padded, train=False)[0], loss)


def test_memory_carries_across_batches_with_zero_init():
    task = PermutationLMTask(_xlnet(mem_len=6), _opt(), reuse_len=4, mem_init="zeros")
    batch = _plm_batch()
    task._objective(batch, train=True)
    mem = task._train_memory[0]  # one memory per accumulation chunk; the batch has no "chunk": chunk 0
    assert len(mem) == 2 and mem[0].shape == (2, 6, 32) and not mem[0].requires_grad
    # layer-0 memory = the last 6 of [zeros(6); embeddings of the first reuse_len=4 tokens]
    emb = task.model.transformer.word_embedding(batch["input_ids"][:, :4])
    torch.testing.assert_close(mem[0][:, 2:], emb.detach())
    assert (mem[0][:, :2] == 0).all()
    task._objective(batch, train=True)
    torch.testing.assert_close(task._train_memory[0][0][:, -4:], emb.detach())
    torch.testing.assert_close(task._train_memory[0][0][:, :2], emb.detach()[:, 2:])


def test_c19_weight_decay_mask_names():
    assert decays("transformer.layer.0.rel_attn.q") and decays("transformer.word_embedding.weight")
    for name in ("transformer.layer.0.rel_attn.r_w_bias", "transformer.layer.3.rel_attn.r_r_bias", "x.r_s_bias"):
        assert decays(name)
    for name in ("transformer.layer.0.rel_attn.layer_norm.weight", "transformer.layer.0.ff.layer_1.bias",
                 "bert.embeddings.LayerNorm.weight", "lm_loss.bias", "cls.predictions.bias"):
        assert not decays(name)


@pytest.mark.parametrize("fused", [True, False])
def test_c19_adam_weight_decay_matches_hand_computed_two_steps(fused):
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = AdamWeightDecay([p], lr=0.1, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.01, fused=fused)
    theta, m, v = np.array([1.0, -2.0]), np.zeros(2), np.zeros(2)
    for g in ([0.5, -1.0], [0.2, 0.3]):
        p.grad = None

        def closure(g=g):  # as Lightning steps: the gradients appear inside step()
            p.grad = torch.tensor(g)
            return 0.0

        opt.step(closure)
        g = np.array(g)
        m = 0.9 * m + 0.1 * g
        v = 0.99 * v + 0.01 * g * g
        theta = theta - 0.1 * (m / (np.sqrt(v) + 1e-6) + 0.01 * theta)  # no bias correction
    np.testing.assert_allclose(p.detach().numpy(), theta, rtol=1e-6)


@pytest.mark.parametrize("fused", [True, False])
def test_c19_adam_weight_decay_resumes_from_a_checkpoint_of_the_per_tensor_implementation(fused):
    """The moments were once stored as ``m`` / ``v`` next to plain groups: such a state resumes the same update."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = AdamWeightDecay([p], lr=0.1, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.01, fused=fused)
    m, v = np.array([0.05, -0.1]), np.array([0.0025, 0.01])
    old = {"state": {0: {"m": torch.tensor(m, dtype=torch.float32), "v": torch.tensor(v, dtype=torch.float32)}},
           "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "eps": 1e-6, "weight_decay": 0.01, "params": [0]}]}
    opt.load_state_dict(old)
    assert opt.param_groups[0]["fused"] is fused
    p.grad = torch.tensor([0.2, 0.3])
    opt.step()
    g = np.array([0.2, 0.3])
    m, v = 0.9 * m + 0.1 * g, 0.99 * v + 0.01 * g * g
    theta = np.array([1.0, -2.0])
    np.testing.assert_allclose(p.detach().numpy(), theta - 0.1 * (m / (np.sqrt(v) + 1e-6) + 0.01 * theta), rtol=1e-6)


def test_c18_linear_warmup_then_linear_decay_to_min_ratio():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = AdamWeightDecay([p], lr=4e-4)
    sched = warmup_linear(opt, warmup_steps=10, max_steps=110, min_lr_ratio=0.001)["scheduler"]
    lrs = []
    for _ in range(111):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == 0 and lrs[10] == pytest.approx(4e-4) and lrs[110] == pytest.approx(4e-7)
    assert lrs[60] == pytest.approx(4e-4 - (4e-4 - 4e-7) * 0.5)


def test_c20_layerwise_lr_groups_and_grad_scale():
    model = _xlnet(n_layer=3)
    groups = layer_decay_groups(model, lr=1.0, weight_decay=0.01, layer_decay=0.5)
    lr_of = {id(p): g["lr"] for g in groups for p in g["params"]}
    wd_of = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    for name, p in model.named_parameters():
        if ".layer." in name:
            layer = int(name.split(".layer.")[1].split(".")[0])
            assert lr_of[id(p)] == 0.5 ** (2 - layer), name
        else:
            assert lr_of[id(p)] == 1.0, name
        assert wd_of[id(p)] == (0.01 if decays(name) else 0.0)
    # grad_scale: only the layer scopes are scaled; r_* biases, seg_embed, embeddings, mask_emb, lm bias are not
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    scale_layer_gradients(model, 0.5)
    for name, p in model.named_parameters():
        unscaled = any(k in name for k in ("r_w_bias", "r_r_bias", "r_s_bias", "seg_embed")) or ".layer." not in name
        layer = None if unscaled else int(name.split(".layer.")[1].split(".")[0])
        expected = 1.0 if unscaled else 0.5 ** (2 - layer)
        assert torch.all(p.grad == expected), name


# --------------------------------------------------------------------------------------------- small-scale runs
@pytest.fixture(scope="module")
def mini_cache(tmp_path_factory):
    pytest.importorskip("gensim", reason="pretrain_mini reads the Wikipedia excerpt inside the gensim wheel")
    return str(tmp_path_factory.mktemp("pretrain_cache"))


def _datamodule(objective, cache, **kw):
    from genlab.data.pretrain.datamodule import PretrainDataModule

    args = dict(objective=objective, corpus="pretrain_mini", cache_dir=cache, vocab_size=2000, batch_size=8,
                seq_len=64, reuse_len=32, perm_size=32, num_predict=10, bi_data=objective != "mlm",
                nsp=objective == "mlm", masking=dict(max_predictions=10))
    dm = PretrainDataModule(**{**args, **kw})
    dm.prepare_data()
    dm.setup("fit")
    return dm


class _Losses(pl.Callback):
    def __init__(self):
        self.values = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.values.append(float(outputs["loss"]))


def _fit(task, dm, steps):
    losses = _Losses()
    trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, accelerator="cpu",
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[losses],
                         limit_val_batches=0, gradient_clip_val=1.0)
    trainer.fit(task, dm)
    return np.mean(losses.values[:10]), np.mean(losses.values[-10:])


def _sched(steps):
    return functools.partial(warmup_linear, warmup_steps=20, max_steps=steps, min_lr_ratio=0.001)


def test_xlnet_mini_plm_loss_falls(mini_cache):
    pl.seed_everything(0)
    dm = _datamodule("plm", mini_cache)
    model = XLNetLMHeadModel(dm.model_overrides()["vocab_size"], n_layer=2, d_model=64, n_head=4, d_head=16,
                             d_inner=128, dropout=0.0, dropatt=0.0, mem_len=48, bi_data=True)
    first, last = _fit(PermutationLMTask(model, _opt(), _sched(120), reuse_len=32), dm, 120)
    assert last < first - 1.0, (first, last)


def test_c27_dae_on_xlnet_backbone_loss_falls_and_inputs_masked(mini_cache):
    pl.seed_everything(0)
    dm = _datamodule("dae", mini_cache)
    batch = dm.batches("train")[(0, 0)]
    assert 0.08 < masked_fraction(batch) < 0.16
    model = XLNetLMHeadModel(dm.model_overrides()["vocab_size"], n_layer=2, d_model=64, n_head=4, d_head=16,
                             d_inner=128, dropout=0.0, dropatt=0.0, mem_len=48, bi_data=True)
    first, last = _fit(DAETask(model, _opt(), _sched(100), reuse_len=32), dm, 100)
    assert last < first - 1.0, (first, last)


def test_c27_bert_mini_mlm_loss_falls_and_mask_share(mini_cache):
    pl.seed_everything(0)
    dm = _datamodule("mlm", mini_cache, masking=dict(max_predictions=77))
    shares = [masked_fraction(dm.batches("train")[(0, s)]) for s in range(5)]
    assert 0.10 < np.mean(shares) < 0.14  # 15% chosen, 80% of them <mask> -> 12%
    assert masked_fraction(_datamodule("plm", mini_cache).batches("train")[(0, 0)]) == 0.0
    model = BertForPretraining(dm.model_overrides()["vocab_size"], n_layer=2, d_model=64, n_head=4, d_inner=128,
                               max_position=64, dropout=0.0, dropatt=0.0)
    first, last = _fit(MaskedLMTask(model, _opt(), _sched(120)), dm, 120)
    assert last < first - 1.0, (first, last)


def test_plm_with_nsp_head_trains(mini_cache):
    dm = _datamodule("plm", mini_cache)
    model = XLNetLMHeadModel(dm.model_overrides()["vocab_size"], n_layer=1, d_model=32, n_head=2, d_head=16,
                             d_inner=64, dropout=0.0, dropatt=0.0, mem_len=16, bi_data=True)
    task = PermutationLMTask(model, _opt(), None, reuse_len=32, nsp_weight=1.0)
    batch = dm.batches("train")[(0, 0)]
    loss, _ = task._objective(batch, train=True)
    loss.backward()
    assert task.nsp_head.logits_proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("mem_len", [0, 48])
def test_loader_batches_give_the_losses_of_host_built_masks(mini_cache, mem_len):
    """PLM and DAE batches carry integers; the masks the task builds from them give the same losses, step after step
    with memory, as the dense masks of the former host construction (per-half local_perm, two_half_perm_mask)."""
    from genlab.data.pretrain.permutation import local_perm, prediction_slots, two_half_perm_mask

    for objective, task_cls in (("plm", PermutationLMTask), ("dae", DAETask)):
        dm = _datamodule(objective, mini_cache)
        batches, tasks = dm.batches("train"), []
        for _ in range(2):
            torch.manual_seed(0)
            model = XLNetLMHeadModel(dm.model_overrides()["vocab_size"], n_layer=1, d_model=32, n_head=2, d_head=16,
                                     d_inner=64, dropout=0.0, dropatt=0.0, mem_len=mem_len, bi_data=True)
            tasks.append(task_cls(model, _opt(), reuse_len=32))
        for step in (0, 1):
            b = batches[(0, step)]
            ids, n = b["input_ids"], len(b["input_ids"])
            if objective == "plm":
                halves = [local_perm(ids[:, sl], b["is_target"][:, sl], b["ranks"][:, sl])
                          for sl in (slice(0, 32), slice(32, 64))]
                host = {"perm_mask": two_half_perm_mask(halves[0].perm_mask, halves[1].perm_mask),
                        "target_mapping": prediction_slots(ids, b["is_target"], 10).target_mapping}
            else:
                host = {"perm_mask": two_half_perm_mask(torch.zeros(n, 32, 32), torch.zeros(n, 32, 32))}
            dense, packed = tasks[0]._objective({**b, **host}, train=False), tasks[1]._objective(b, train=False)
            assert torch.equal(dense[0], packed[0]) and dense[1] == packed[1], (objective, step)


def test_resume_mid_pass_equals_an_uninterrupted_run(tmp_path):
    """Checkpoint at step 3 of 6 holds weights, optimiser, schedule, XLNet memory and the (pass, step) position."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    from genlab.data.pretrain.datamodule import PretrainDataModule

    rng = np.random.default_rng(0)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    (tmp_path / "corpus" / "train").mkdir(parents=True)
    text = "\n\n".join("\n".join(" ".join(rng.choice(words, 6)) + "." for _ in range(4)) for _ in range(150))
    (tmp_path / "corpus" / "train" / "a.txt").write_text(text)

    def run(steps, ckpt=None, save=None):
        pl.seed_everything(0)
        dm = PretrainDataModule(objective="plm", corpus="text", path=str(tmp_path / "corpus"),
                                cache_dir=str(tmp_path / "cache"), train_glob="train/*.txt", valid_glob=None,
                                vocab_size=60, batch_size=4, seq_len=32, reuse_len=16, perm_size=16, num_predict=5)
        dm.prepare_data()
        dm.setup("fit")
        model = XLNetLMHeadModel(dm.model_overrides()["vocab_size"], n_layer=1, d_model=32, n_head=2, d_head=16,
                                 d_inner=64, dropout=0.0, dropatt=0.0, mem_len=24, bi_data=True)
        task = PermutationLMTask(model, _opt(), _sched(6), reuse_len=16)
        cbs = [ModelCheckpoint(dirpath=save, every_n_train_steps=3, save_top_k=-1)] if save else []
        trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=bool(save), accelerator="cpu",
                             enable_progress_bar=False, enable_model_summary=False, callbacks=cbs,
                             limit_val_batches=0, deterministic=True)
        trainer.fit(task, dm, ckpt_path=ckpt)
        return task

    full = run(6, save=str(tmp_path / "ckpt"))
    ckpt = next(p for p in (tmp_path / "ckpt").iterdir() if "step=3" in p.name)
    resumed = run(6, ckpt=str(ckpt))
    for (name, a), (_, b) in zip(full.named_parameters(), resumed.named_parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert len(full._train_memory) == len(resumed._train_memory) == 1
    for a, b in zip(full._train_memory[0], resumed._train_memory[0], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
