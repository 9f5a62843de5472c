"""GPT-1 objectives (Radford et al., 2018, §3.1-§3.3: Eq. 1-5): the LM loss and its
normalisation, L3 = L2 + λ·L1, the finetuning kinds through Lightning, init_from, and two small CPU behaviours."""

from __future__ import annotations

import math
from functools import partial
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from genlab.data.finetune.gpt_transforms import SpecialTokens, classification, right_pad
from genlab.errors import CheckpointError, ConfigError
from genlab.models.gpt import GPTLMHeadModel, GPTOutput, transfer_pretrained
from genlab.nn.linear_cross_entropy import linear_cross_entropy
from genlab.tasks.gpt import (
    GPTFinetuneTask,
    GPTPretrainTask,
    per_sequence_mean,
    stsb_soft_targets,
    token_nll,
)
from genlab.tasks.gpt_optim import OpenAIAdam, ndim_decay_groups

V, D = 30, 32
SP = SpecialTokens.after_vocab(V)
QUIET = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
             enable_model_summary=False)


def tiny(seed: int = 0, n_special: int = 3, dropout: float = 0.0, **kw) -> GPTLMHeadModel:
    torch.manual_seed(seed)
    return GPTLMHeadModel(V, n_special, n_positions=32, n_embd=D, n_layer=2, n_head=4, resid_pdrop=dropout,
                          embd_pdrop=dropout, attn_pdrop=dropout, **kw)


def finetune(kind: str = "classification", lm_coef: float = 0.5, model=None, **kw) -> GPTFinetuneTask:
    kw.setdefault("clf_pdrop", 0.0)
    return GPTFinetuneTask(model or tiny(), partial(OpenAIAdam, lr=1e-3), kind=kind, lm_coef=lm_coef, **kw)


def entailment_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    rows = [[SP.start, *torch.randint(0, V, (n,), generator=g).tolist(), SP.delimiter, 3, 4, SP.extract]
            for n in (2, 6, 4)]
    ids, mask = right_pad(rows, pad_id=0)
    return {"input_ids": ids, "lm_mask": mask, "labels": torch.tensor([0, 1, 1])}


# ---------------------------------------------------------------------------------------------------- LM loss
def test_lm_loss_is_shifted_masked_and_averaged_per_sequence_on_a_toy_batch():
    """Check 8: logits[:, :-1] vs tokens[:, 1:], masked by M[:, 1:], mean per sequence then over the batch."""
    model = tiny().eval()
    ids = torch.tensor([[V, 5, 6, V + 1, V + 2], [V, 7, V + 2, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    out = model(ids)
    logp = model.lm_logits(out.hidden).log_softmax(-1)
    by_hand = []
    for b in range(2):
        ces = [-logp[b, t - 1, ids[b, t]] for t in range(1, 5) if mask[b, t]]
        by_hand.append(sum(ces) / len(ces))
    want = (by_hand[0] + by_hand[1]) / 2
    got = finetune(model=model).lm_loss({"input_ids": ids, "lm_mask": mask}, out)
    assert torch.allclose(got, want, atol=1e-6)


def uniform_ce_logits(ce: float, n_classes: int, target: int) -> torch.Tensor:
    """Logits whose cross-entropy at ``target`` is exactly ``ce``: target 0, the others w with
    log(1 + (R−1)e^w) = ce."""
    w = math.log((math.exp(ce) - 1) / (n_classes - 1))
    logits = torch.full((n_classes,), w, dtype=torch.float64)
    logits[target] = 0.0
    return logits


class StubLM:
    """The softmax matrix is the identity, so the logits are the hidden states themselves: the test writes the
    logits (hence the CEs) it wants."""

    def lm_nll(self, hidden, target, out=None, special_rows=True):
        return linear_cross_entropy(hidden, torch.eye(hidden.shape[-1], dtype=hidden.dtype), target)


def test_aux_lm_targets_and_per_sequence_normalisation_with_a_stub():
    """Check 24: in [<s>, a, $, b, <e>, pad, pad] the targets are a, $, b, <e>; <s> is never a target and pads
    add nothing; two sequences with 3 and 7 real tokens give (mean of 2 CEs + mean of 6 CEs) / 2."""
    R, T = 8, 7
    ids = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5, 6]])
    mask = torch.tensor([[1, 1, 1, 0, 0, 0, 0], [1] * 7])
    hidden = torch.zeros(2, T, R, dtype=torch.float64)
    for t in range(T - 1):  # position t predicts ids[:, t + 1]
        hidden[0, t] = uniform_ce_logits(1.0, R, int(ids[0, t + 1]))
        hidden[1, t] = uniform_ce_logits(3.0, R, int(ids[1, t + 1]))
    out = GPTOutput(hidden, torch.empty(0), torch.empty(0))
    nll, seq = token_nll(StubLM(), out, ids, mask, special_rows=True)
    assert nll.shape == (8,) and seq.tolist() == [0, 0] + [1] * 6
    per_seq = per_sequence_mean(nll, seq, 2)
    assert per_seq.mean().item() == pytest.approx((1.0 + 3.0) / 2)
    assert nll.mean().item() == pytest.approx((2 * 1.0 + 6 * 3.0) / 8)  # the token mean, which we do not use
    # the targets: changing <s> or the padding changes nothing, changing a real token after <s> does
    for b, t, changes in ((0, 0, False), (0, 4, False), (0, 6, False), (0, 2, True), (1, 6, True)):
        other = ids.clone()
        other[b, t] = 7
        moved = per_sequence_mean(*token_nll(StubLM(), out, other, mask, True), 2).mean().item()
        assert (moved != pytest.approx(2.0)) == changes, (b, t)


def test_multiple_choice_lm_loss_averages_over_every_choice_sequence():
    """Check 24: over all B·K sequences (wrong choices included)."""
    task = finetune("multiple_choice", n_labels=2)
    ids = torch.randint(0, V, (2, 2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, 1, 4:] = 0
    out = task.model(ids)
    per_choice = [task.lm_loss({"input_ids": ids[b, k][None], "lm_mask": mask[b, k][None]}, task.model(ids[b, k][None]))
                  for b in range(2) for k in range(2)]
    assert torch.allclose(task.lm_loss({"input_ids": ids, "lm_mask": mask}, out), torch.stack(per_choice).mean(),
                          atol=1e-6)


def test_lm_loss_and_extract_state_ignore_right_padding():
    """Check 2 (loss side): number and content of pads after <e> change neither the LM loss nor the logits."""
    task = finetune().eval()
    batch = entailment_batch()
    base = task.losses(batch)
    ids, mask = batch["input_ids"], batch["lm_mask"]
    longer = {"input_ids": torch.cat([ids.masked_fill(mask == 0, 11), torch.full((3, 4), 17)], 1),
              "lm_mask": torch.cat([mask, torch.zeros(3, 4, dtype=torch.long)], 1), "labels": batch["labels"]}
    other = task.losses(longer)
    assert torch.allclose(base["lm_loss"], other["lm_loss"], atol=1e-6)
    assert torch.allclose(base["logits"], other["logits"], atol=1e-6)


# ----------------------------------------------------------------------------------------------- L3 = L2 + λ L1
def grads(task: GPTFinetuneTask, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    task.zero_grad()
    loss.backward()
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in task.named_parameters()}


def test_l3_is_mean_clf_plus_half_mean_lm_and_gradients_are_linear():
    """Checks 9 and 25: L3 = L2 + 0.5·L1 with means, not sums; ∇L3 = ∇L2 + 0.5·∇L1; λ = 0 is exactly L2."""
    task = finetune(lm_coef=0.5)
    batch = entailment_batch()
    parts = task.losses(batch)
    logits, _ = task(batch)
    assert torch.allclose(parts["clf_loss"], F.cross_entropy(logits, batch["labels"]))
    assert torch.allclose(parts["loss"], parts["clf_loss"] + 0.5 * parts["lm_loss"])
    g3 = grads(task, task.losses(batch)["loss"])
    g2 = grads(task, task.losses(batch)["clf_loss"])
    g1 = grads(task, task.losses(batch)["lm_loss"])
    for name in g3:
        assert torch.allclose(g3[name], g2[name] + 0.5 * g1[name], atol=1e-6), name
    no_aux = finetune(lm_coef=0.0, model=task.model)
    no_aux.head.load_state_dict(task.head.state_dict())
    parts0 = no_aux.losses(batch)
    assert torch.equal(parts0["loss"], parts0["clf_loss"]) and torch.allclose(parts0["loss"], parts["clf_loss"])
    g0 = grads(no_aux, no_aux.losses(batch)["loss"])
    for name in g0:
        assert torch.allclose(g0[name], g2[name], atol=1e-7), name


def test_stsb_soft_targets_and_expected_score():
    t = stsb_soft_targets(torch.tensor([3.4, 5.0, 0.0]))
    assert torch.allclose(t[0], torch.tensor([0, 0, 0, 0.6, 0.4, 0]))
    assert torch.allclose(t[1], torch.tensor([0, 0, 0, 0, 0, 1.0])) and t[2, 0] == 1
    task = finetune("similarity", stsb_head="soft6")
    assert task.head.linear.proj.out_features == 6 and task.metric == "corr"
    logits = torch.log(t + 1e-9)
    assert torch.allclose(task.predict_scores(logits), torch.tensor([3.4, 5.0, 0.0]), atol=1e-6)


def test_configuration_errors():
    with pytest.raises(ConfigError, match="n_special=3"):
        finetune(model=tiny(n_special=0))
    with pytest.raises(ConfigError, match="task.kind"):
        finetune("regression")
    with pytest.raises(ConfigError, match="stsb_head"):
        finetune("classification", stsb_head="soft6")
    with pytest.raises(ConfigError, match=r"\[B, 2, T\]"):
        finetune("similarity").losses(entailment_batch())


# -------------------------------------------------------------------------------------------- through Lightning
def loader(batches):
    return torch.utils.data.DataLoader(batches, batch_size=None)


def test_pretraining_task_fits_and_reports_token_perplexity(tmp_path):
    torch.manual_seed(0)
    task = GPTPretrainTask(tiny(n_special=0), partial(OpenAIAdam, lr=1e-3))
    train = [{"input_ids": torch.randint(0, V, (4, 16))} for _ in range(3)]
    short = (torch.arange(16) < torch.tensor([[16], [12], [9]])).long()  # a short last window per row
    valid = [{"input_ids": torch.randint(0, V, (2, 16))},
             {"input_ids": torch.randint(0, V, (3, 16)), "lm_mask": short}]
    trainer = pl.Trainer(max_steps=3, default_root_dir=tmp_path, **QUIET)
    trainer.fit(task, loader(train), loader(valid))
    nll = torch.cat([task.lm_nll(b) for b in valid])
    assert trainer.callback_metrics["valid/loss"].item() == pytest.approx(nll.mean().item(), rel=1e-5)
    assert trainer.callback_metrics["valid/ppl"].item() == pytest.approx(math.exp(nll.mean().item()), rel=1e-5)
    logits_rows = task.model.lm_logits(task.model(train[0]["input_ids"]).hidden, special_rows=False).shape[-1]
    assert logits_rows == V  # pretraining never predicts the special rows


@pytest.mark.parametrize("kind,shape,labels,extra", [
    ("classification", (4, 9), torch.tensor([0, 1, 2, 1]), dict(n_labels=3)),
    ("similarity", (4, 2, 9), torch.tensor([0.5, 4.2, 3.0, 1.0]), dict(stsb_head="soft6")),
    ("similarity", (4, 2, 9), torch.tensor([0, 1, 1, 0]), dict(n_labels=2, metric="acc_f1")),
    ("multiple_choice", (4, 3, 9), torch.tensor([0, 2, 1, 1]), dict(n_labels=3)),
])
def test_finetuning_kinds_train_and_report_their_metric(tmp_path, kind, shape, labels, extra):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, shape, generator=g)
    mask = torch.ones_like(ids)
    mask[..., 7:] = 0
    ids[..., 6] = SP.extract
    batches = [{"input_ids": ids, "lm_mask": mask, "labels": labels}] * 2
    task = finetune(kind, model=tiny(dropout=0.1), clf_pdrop=0.1, **extra)
    trainer = pl.Trainer(max_steps=2, default_root_dir=tmp_path, **QUIET)
    trainer.fit(task, loader(batches), loader(batches))
    metrics = trainer.callback_metrics
    assert math.isfinite(metrics["valid/loss"].item()) and math.isfinite(metrics["valid/lm_loss"].item())
    key = {"classification": "valid/acc", "multiple_choice": "valid/acc"}.get(kind, "valid/pearson")
    if extra.get("metric") == "acc_f1":
        key = "valid/f1"
    assert key in metrics


def test_init_from_a_pretraining_checkpoint_and_the_tokenizer_check(tmp_path):
    pre = GPTPretrainTask(tiny(seed=7, n_special=0), partial(OpenAIAdam, lr=1e-3))
    trainer = pl.Trainer(max_steps=1, default_root_dir=tmp_path, **QUIET)
    trainer.fit(pre, loader([{"input_ids": torch.randint(0, V, (2, 8))}]))
    ckpt = tmp_path / "pre.ckpt"
    trainer.save_checkpoint(ckpt)
    saved = torch.load(ckpt, weights_only=False)
    saved["genlab"] = {"data_identity": {"tokenizer": "spm:abc", "vocab_size": V}}
    torch.save(saved, ckpt)
    task = finetune(model=tiny(seed=1), init_from=str(ckpt), n_transfer=1)
    ours, theirs = task.model.state_dict(), pre.model.state_dict()
    assert torch.equal(ours["transformer.tokens_embed.weight"][:V], theirs["transformer.tokens_embed.weight"])
    assert torch.equal(ours["transformer.h.0.mlp.c_fc.weight"], theirs["transformer.h.0.mlp.c_fc.weight"])
    assert not torch.equal(ours["transformer.h.1.mlp.c_fc.weight"], theirs["transformer.h.1.mlp.c_fc.weight"])
    task._trainer = SimpleNamespace(datamodule=SimpleNamespace(identity=lambda: {"tokenizer": "spm:other"}))
    with pytest.raises(CheckpointError, match="spm:other"):
        task.setup("fit")
    with pytest.raises(CheckpointError, match="no such file"):
        finetune(init_from=str(tmp_path / "missing.ckpt"))


# --------------------------------------------------------------------------------------- small-scale behaviour
def test_causal_lm_learns_a_long_range_copy():
    """Check 20: on `a1..a6 | a1..a6` the copied half's loss goes to ~0, the random half stays at log 8."""
    torch.manual_seed(0)
    half, vocab = 6, 8
    model = GPTLMHeadModel(vocab + 1, 0, n_positions=16, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.0,
                           embd_pdrop=0.0, attn_pdrop=0.0)
    opt = OpenAIAdam(ndim_decay_groups(model, 0.0), lr=1e-3)

    def sample(n):
        a = torch.randint(0, vocab, (n, half))
        return torch.cat([a, torch.full((n, 1), vocab), a], 1)

    def halves():
        x = sample(256)
        with torch.no_grad():
            nll = token_nll(model, model(x), x, None, special_rows=False)[0].view(256, -1)
        return nll[:, : half - 1].mean().item(), nll[:, half:].mean().item()

    for step in range(1, 801):
        x = sample(32)
        loss = token_nll(model, model(x), x, None, special_rows=False)[0].mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 and halves()[1] < 0.05:
            break
    first, second = halves()
    assert second < 0.1
    assert abs(first - math.log(vocab)) < 0.05


def test_pretraining_then_finetuning_beats_finetuning_from_scratch():
    """Check 21: the label (which of two Markov chains wrote the sequence) is a property of the LM domain; 32
    labelled examples; pretrained transfer wins by far (the sign of Table 5's "w/o pre-training" row) and the aux
    LM loss (λ = 0.5) trains as well as without it."""
    vocab, length, steps = 16, 16, (1, 5)
    g = torch.Generator().manual_seed(0)

    def sample(n):
        chain = torch.randint(0, 2, (n,), generator=g)
        x = torch.zeros(n, length, dtype=torch.long)
        x[:, 0] = torch.randint(0, vocab, (n,), generator=g)
        stride = torch.tensor(steps)[chain]
        for t in range(1, length):
            follow = torch.rand(n, generator=g) < 0.8
            x[:, t] = torch.where(follow, (x[:, t - 1] + stride) % vocab, torch.randint(0, vocab, (n,), generator=g))
        return x, chain

    def model(seed):
        torch.manual_seed(seed)
        return GPTLMHeadModel(vocab, 3, n_positions=32, n_embd=64, n_layer=2, n_head=4)

    pretrained = model(0)
    opt = OpenAIAdam(ndim_decay_groups(pretrained, 0.01), lr=2e-3)
    for _ in range(200):
        x, _ = sample(32)
        loss = token_nll(pretrained, pretrained(x), x, None, special_rows=False)[0].mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    special = SpecialTokens.after_vocab(vocab)
    encode = lambda x: right_pad([classification(r.tolist(), special) for r in x])
    (x_train, y_train), (x_test, y_test) = sample(32), sample(512)
    (train_ids, train_mask), (test_ids, test_mask) = encode(x_train), encode(x_test)

    def finetune_accuracy(init: dict | None, lm_coef: float) -> float:
        task = GPTFinetuneTask(model(1), partial(OpenAIAdam, lr=1e-3), lm_coef=lm_coef)
        if init is not None:
            transfer_pretrained(task.model, init)
        opt = OpenAIAdam(ndim_decay_groups(task, 0.01), lr=1e-3)
        for _ in range(10):
            for i in range(0, 32, 8):
                parts = task.losses({"input_ids": train_ids[i:i + 8], "lm_mask": train_mask[i:i + 8],
                                     "labels": y_train[i:i + 8]})
                opt.zero_grad()
                parts["loss"].backward()
                opt.step()
        task.eval()
        with torch.no_grad():
            logits = task({"input_ids": test_ids, "lm_mask": test_mask})[0]
        return (logits.argmax(-1) == y_test).float().mean().item()

    transferred = finetune_accuracy(pretrained.state_dict(), 0.5)
    scratch = finetune_accuracy(None, 0.5)
    without_aux = finetune_accuracy(pretrained.state_dict(), 0.0)
    assert transferred >= 0.8 and transferred - scratch >= 0.2, (transferred, scratch)
    assert transferred >= without_aux - 0.1, (transferred, without_aux)


# ------------------------------------------------------------------------------------------------------ configs
@pytest.mark.parametrize("model_cfg", ["gpt", "gpt_mini"])
@pytest.mark.parametrize("task_cfg", ["gpt_pretrain", "gpt_finetune"])
def test_configs_validate_and_build(model_cfg, task_cfg):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from genlab.cli.validate import validate_config
    from helpers import CONF

    cfg = OmegaConf.create({"trainer": {"max_steps": 100},
                            "model": OmegaConf.load(CONF / "model" / f"{model_cfg}.yaml"),
                            "task": OmegaConf.load(CONF / "task" / f"{task_cfg}.yaml")})
    validate_config(cfg)
    sizes = {} if model_cfg == "gpt_mini" else dict(n_embd=64, n_head=4, n_inner=256, n_layer=2)
    model = instantiate(cfg.model, vocab_size=V, **sizes)
    assert model.arch["n_special"] == 3
    task = instantiate(cfg.task, model=model, _convert_="all")
    optim = task.configure_optimizers()
    assert isinstance(optim["optimizer"], OpenAIAdam) and optim["lr_scheduler"]["scheduler"].get_last_lr()[0] == 0.0
    if model_cfg == "gpt":
        assert (cfg.model.n_layer, cfg.model.n_embd, cfg.model.n_head, cfg.model.n_positions) == (12, 768, 12, 512)
