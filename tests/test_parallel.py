"""FSDP2 through Lightning's ModelParallelStrategy on 2 CPU processes (gloo), and the user errors of genlab.parallel.

The 2-process run (per-block fully_shard + activation checkpointing, fp64 weights, dropout 0) must give the loss
trajectory of one plain process on the same global batch of streams; its sharded checkpoint must resume on 2
processes, resume on 1 process (another world size), and consolidate into a plain single-process model.
Processes are started as `python tests/test_parallel.py worker ...` with torchrun-style environment variables,
so Lightning treats them as externally launched (as under torchrun/srun).
"""

from __future__ import annotations

import functools
import json
import sys
import warnings
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from launch_ranks import exit_rank, run_ranks
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

from genlab.errors import ConfigError
from genlab.models.transformer_xl import TransformerXL
from genlab.parallel import (
    BlockWrapPolicy,
    FSDP2Strategy,
    ParallelizeMixin,
    accumulation_steps,
    check_precision,
    check_trainer_precision,
    find_blocks,
    is_sharded,
    parallelize,
)
from genlab.tasks.lm import LanguageModelTask

STREAMS, TGT_LEN, SEGMENTS, VOCAB, EPOCHS = 4, 8, 3, 50, 2


class LossLog(pl.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def batches(rank: int, world: int) -> list[dict]:
    """This rank's contiguous streams of one fixed corpus: SEGMENTS consecutive segments (memory carries)."""
    g = torch.Generator().manual_seed(7)
    corpus = torch.randint(0, VOCAB, (STREAMS, SEGMENTS * TGT_LEN + 1), generator=g)
    rows = corpus.chunk(world)[rank]
    return [{"input_ids": rows[:, s * TGT_LEN:(s + 1) * TGT_LEN],
             "target": rows[:, s * TGT_LEN + 1:(s + 1) * TGT_LEN + 1], "segment": s} for s in range(SEGMENTS)]


def make_task() -> LanguageModelTask:
    torch.manual_seed(0)
    model = TransformerXL(VOCAB, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0,
                          mem_len=8).double()
    return LanguageModelTask(model, functools.partial(torch.optim.Adam, lr=1e-2), None, monitor="train/loss")


def fit(strategy, devices: int, data: list[dict], ckpt_dir: str | None = None, ckpt_path: str | None = None):
    task, log = make_task(), LossLog()
    callbacks: list[pl.Callback] = [log]
    if ckpt_dir:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=ckpt_dir, filename="{epoch}", save_top_k=-1,
                                                      every_n_epochs=1, save_on_train_epoch_end=True))
    trainer = pl.Trainer(accelerator="cpu", devices=devices, strategy=strategy, max_epochs=EPOCHS, logger=False,
                         enable_checkpointing=bool(ckpt_dir), callbacks=callbacks, enable_progress_bar=False,
                         enable_model_summary=False, use_distributed_sampler=False, num_sanity_val_steps=0)
    trainer.fit(task, train_dataloaders=torch.utils.data.DataLoader(data, batch_size=None), ckpt_path=ckpt_path)
    if isinstance(strategy, FSDP2Strategy):  # really sharded per block, with activation checkpointing inside
        wrapped = [m for m in task.model.modules() if isinstance(m, CheckpointWrapper)]
        assert is_sharded(task.model) and len(wrapped) == len(task.model.layers)
    return log.losses


def worker(out: Path, world: int, rank: int, resume: str | None) -> None:
    """One rank: an uninterrupted sharded run saving a checkpoint per epoch, then a run resumed from epoch 0."""
    torch.set_num_threads(1)
    data = batches(rank, world)
    strategy = lambda: FSDP2Strategy(activation_checkpointing=True)  # noqa: E731
    result = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if resume is None:
            result["full"] = fit(strategy(), world, data, ckpt_dir=str(out / "ckpt"))
            resume = str(out / "ckpt" / "epoch=0.ckpt")
        result["resumed"] = fit(strategy(), world, data, ckpt_path=resume)
        result["xlnet"] = xlnet_losses(rank, world)
        result["tasks"] = sharded_task_losses(rank, world)
    result["view_warnings"] = sorted({str(w.message)[:80] for w in caught if "returned a view tensor" in str(w.message)})
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    exit_rank()


def xlnet_steps(model: torch.nn.Module, rank: int, world: int, steps: int = 3) -> list[float]:
    """SGD on this rank's rows of a fixed two-stream batch (perm_mask + target_mapping); global-mean losses."""
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, VOCAB, (4, 6), generator=g).chunk(world)[rank]
    perm = torch.rand(4, 6, 6, generator=g).lt(0.5).double().chunk(world)[rank]
    target = torch.randint(0, VOCAB, (4, 2), generator=g).chunk(world)[rank]
    mapping = torch.eye(6, dtype=torch.float64)[None, :2].expand(ids.size(0), -1, -1)

    def loss() -> torch.Tensor:
        logits = model(ids, perm_mask=perm, target_mapping=mapping).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    return sgd_losses(model, loss, world, steps)


def sgd_losses(module: torch.nn.Module, loss_fn, world: int, steps: int) -> list[float]:
    """``steps`` SGD updates (lr 0.5) of ``module`` on ``loss_fn()``; each step's loss averaged over the ranks."""
    opt = torch.optim.SGD(module.parameters(), lr=0.5)
    losses = []
    for _ in range(steps):
        loss = loss_fn()
        opt.zero_grad()
        loss.backward()
        opt.step()
        value = loss.detach().clone()
        if world > 1:
            torch.distributed.all_reduce(value)
        losses.append(float(value) / world)
    return losses


def make_xlnet() -> torch.nn.Module:
    from genlab.models.xlnet import XLNetLMHeadModel

    torch.manual_seed(0)
    return XLNetLMHeadModel(VOCAB, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0,
                            dropatt=0.0).double()


def xlnet_losses(rank: int, world: int) -> list[float]:
    """FSDP2 (per-layer fully_shard via genlab.parallel) on XLNet outside Lightning, on the job's process group."""
    from torch.distributed.device_mesh import init_device_mesh

    model = make_xlnet()
    parallelize(model, init_device_mesh("cpu", (world,)), activation_checkpointing=True)
    assert is_sharded(model)
    return xlnet_steps(model, rank, world)


TASK_KINDS = ("bert_finetune", "bert_mlm", "xlnet_dae", "xlnet_plm_nsp", "gpt_lm", "gpt_multiple_choice",
              "funnel_mlm", "funnel_electra", "funnel_finetune")
SINGLE_PART_KINDS = ("bert_mlm", "xlnet_dae", "gpt_lm", "funnel_mlm", "funnel_electra")  # no head beside the model
CHOICES = 3


def make_funnel(cls: type) -> torch.nn.Module:
    """Two blocks (one pooling) and a one-layer decoder: the smallest Funnel that pools and upsamples."""
    return cls(VOCAB, block_sizes=(1, 1), d_model=32, n_head=2, d_head=16, d_inner=64, num_decoder_layers=1,
               dropout=0.0, dropatt=0.0, max_position=16, **({"width_shrink": 0.5} if cls.__name__ ==
                                                              "FunnelElectra" else {}))


def make_task_of(kind: str) -> torch.nn.Module:
    """Tasks whose model is not the only part holding parameters (finetuning head, NSP head) or that call their
    model through other entry points than forward (encode/summary, mlm_logits, hidden_states/lm_logits, GPT's
    tied lm_logits, ELECTRA's generator and discriminator)."""
    from genlab.models.bert import BertForPretraining
    from genlab.models.funnel_pretraining import FunnelElectra, FunnelForMaskedLM
    from genlab.models.gpt import GPTLMHeadModel
    from genlab.models.xlnet import XLNetLMHeadModel
    from genlab.tasks.finetune_classification import SequenceClassificationTask
    from genlab.tasks.funnel_pretrain import FunnelElectraTask, FunnelMLMTask
    from genlab.tasks.gpt import GPTFinetuneTask, GPTPretrainTask
    from genlab.tasks.pretrain import DAETask, MaskedLMTask, PermutationLMTask

    torch.manual_seed(0)
    sgd = functools.partial(torch.optim.SGD, lr=0.5)
    if kind.startswith("gpt"):  # finetuning in the release's layout: the forward's matrices feed the softmax
        release = kind == "gpt_multiple_choice"
        gpt = GPTLMHeadModel(VOCAB, n_special=3, n_positions=16, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                             embd_pdrop=0.0, attn_pdrop=0.0, embd_dropout_on_matrix=release,
                             lm_softmax_includes_positions=release)
        if kind == "gpt_lm":
            return GPTPretrainTask(gpt, sgd).double()
        return GPTFinetuneTask(gpt, sgd, kind="multiple_choice", n_labels=CHOICES, lm_coef=0.5,
                               clf_pdrop=0.0).double()
    if kind == "funnel_mlm":
        return FunnelMLMTask(make_funnel(FunnelForMaskedLM), sgd).double()
    if kind == "funnel_electra":
        return FunnelElectraTask(make_funnel(FunnelElectra), sgd, disc_weight=1.0).double()
    if kind == "funnel_finetune":
        return SequenceClassificationTask(make_funnel(FunnelElectra), sgd, None, n_labels=3,
                                          summary_dropout=0.0).double()
    if kind.startswith("bert"):
        bert = BertForPretraining(VOCAB, n_layer=2, d_model=32, n_head=2, d_inner=64, max_position=16, dropout=0.0,
                                  dropatt=0.0)
        if kind == "bert_mlm":
            return MaskedLMTask(bert, sgd, nsp_weight=1.0).double()
        return SequenceClassificationTask(bert, sgd, None, n_labels=3, summary_dropout=0.0).double()
    xlnet = XLNetLMHeadModel(VOCAB, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0, dropatt=0.0)
    if kind == "xlnet_dae":
        return DAETask(xlnet, sgd, reuse_len=None, mem_init="none").double()
    task = PermutationLMTask(xlnet, sgd, reuse_len=None, mem_init="none", nsp_weight=1.0).double()
    task.nsp_head.dropout.p = 0.0  # deterministic, so 1 process and 2 shards see the same function
    return task


def task_batch(kind: str, rank: int, world: int) -> dict:
    """This rank's rows of a fixed batch with every key the objectives of TASK_KINDS read."""
    g = torch.Generator().manual_seed(13)
    B, T, P = 4, 8, 2
    ids = torch.randint(5, VOCAB, (B, T), generator=g)
    mapping = torch.eye(T, dtype=torch.float64)[None, -P:].expand(B, -1, -1)
    perm = torch.zeros(B, T, T, dtype=torch.float64)
    perm[:, :, -P:] = 1.0  # the targets hidden from every position
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
             "labels": torch.randint(0, 3, (B,), generator=g), "nsp_label": torch.randint(0, 2, (B,), generator=g),
             "perm_mask": perm, "target_mapping": mapping, "target": ids[:, -P:],
             "target_mask": torch.ones(B, P, dtype=torch.float64), "segment": 0}
    if kind in ("bert_mlm", "xlnet_dae", "funnel_mlm", "funnel_electra"):
        batch["labels"] = torch.full_like(ids, -100)
        batch["labels"][:, -P:] = ids[:, -P:]  # the corrupted positions: the same two per row
    if kind == "gpt_lm":
        batch["lm_mask"] = torch.ones_like(ids)
        batch["lm_mask"][::2, -3:] = 0  # short last windows, as many on every rank (each rank averages its own)
    if kind == "gpt_multiple_choice":  # <s> ... <e> per choice, right-padded to different lengths
        start, extract = VOCAB, VOCAB + 2
        choices = torch.randint(5, VOCAB, (B, CHOICES, T), generator=g)
        lengths = torch.randint(4, T + 1, (B, CHOICES), generator=g)
        positions = torch.arange(T)
        choices[..., 0] = start
        choices[positions.expand(B, CHOICES, T) == (lengths - 1)[..., None]] = extract
        batch["lm_mask"] = (positions < lengths[..., None]).long()
        batch["input_ids"] = choices * batch["lm_mask"]
        batch["token_type_ids"] = torch.zeros_like(batch["input_ids"])  # GPT reads them per choice, as HF does
    return {k: v.chunk(world)[rank] if torch.is_tensor(v) else v for k, v in batch.items()}


def rank_rows_of_global_samples(rank: int, world: int):
    """ELECTRA's Gumbel samples with the noise of the global batch's rows: each rank samples its own targets
    with the random numbers one process draws for those rows (the same fixed noise at every step)."""
    from genlab.tasks.funnel_pretrain import gumbel_argmax

    def sample(logits: torch.Tensor) -> torch.Tensor:
        everyone = logits.repeat(world, 1)  # one row per target of the global batch, this rank's at rank * n
        return gumbel_argmax(everyone, torch.Generator().manual_seed(17)).chunk(world)[rank]

    return sample


def task_loss(kind: str, task: torch.nn.Module, batch: dict) -> torch.Tensor:
    if kind in ("bert_finetune", "funnel_finetune"):
        return task.head.loss(task(batch), batch["labels"])
    if kind == "gpt_lm":
        return task.lm_nll(batch).mean()
    if kind == "gpt_multiple_choice":
        return task.losses(batch)["loss"]
    return task._objective(batch, train=True)[0]


def task_steps(kind: str, task: torch.nn.Module, rank: int, world: int, steps: int = 3) -> list[float]:
    """SGD on this rank's rows; global-mean losses."""
    from unittest import mock

    batch = task_batch(kind, rank, world)
    with mock.patch("genlab.tasks.funnel_pretrain.gumbel_argmax", rank_rows_of_global_samples(rank, world)):
        return sgd_losses(task, lambda: task_loss(kind, task, batch), world, steps)


def sharded_task_losses(rank: int, world: int) -> dict[str, list[float]]:
    """The shared hook's call, parallelize(task, mesh): the model's blocks and every part of the task sharded."""
    from torch.distributed.device_mesh import init_device_mesh

    losses = {}
    for kind in TASK_KINDS:
        task = make_task_of(kind)
        n_blocks = len(find_blocks(task))  # ELECTRA: the discriminator's layers and the generator's
        parallelize(task, init_device_mesh("cpu", (world,)), activation_checkpointing=True)
        parts = [m for m in task.children() if any(True for _ in m.parameters())]
        assert all(is_sharded(m) for m in parts) and len(parts) == (1 if kind in SINGLE_PART_KINDS else 2)
        units = [m for m in task.modules() if isinstance(m, CheckpointWrapper) and is_sharded(m)]
        assert len(units) == n_blocks, f"{kind}: {len(units)} of {n_blocks} blocks sharded"
        losses[kind] = task_steps(kind, task, rank, world)
    return losses


def launch(out: Path, world: int, resume: str | None = None) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    run_ranks(__file__, ["worker", str(out), str(world), "{rank}"] + ([resume] if resume else []), world)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def mean_over_ranks(results: list[dict], key: str) -> list[float]:
    return [sum(vals) / len(vals) for vals in zip(*(r[key] for r in results))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("fsdp")
    two = launch(root / "two", 2)
    one = launch(root / "one", 1, resume=str(root / "two" / "ckpt" / "epoch=0.ckpt"))
    single = fit("auto", 1, batches(0, 1))
    xlnet = xlnet_steps(make_xlnet(), 0, 1)
    tasks = {kind: task_steps(kind, make_task_of(kind), 0, 1) for kind in TASK_KINDS}
    return {"two": two, "one": one, "single": single, "xlnet": xlnet, "tasks": tasks,
            "ckpt": root / "two" / "ckpt" / "epoch=0.ckpt"}


@pytest.mark.distributed
def test_fsdp2_two_processes_follow_the_single_process_loss_trajectory(runs):
    assert len(runs["single"]) == EPOCHS * SEGMENTS
    fsdp = mean_over_ranks(runs["two"], "full")
    assert fsdp[0] != fsdp[-1]
    torch.testing.assert_close(torch.tensor(fsdp), torch.tensor(runs["single"]), rtol=1e-5, atol=1e-6)


@pytest.mark.distributed
def test_fsdp2_xlnet_two_processes_follow_the_single_process_loss_trajectory(runs):
    fsdp = runs["two"][0]["xlnet"]
    assert fsdp == runs["two"][1]["xlnet"] and fsdp[0] != fsdp[-1]
    torch.testing.assert_close(torch.tensor(fsdp), torch.tensor(runs["xlnet"]), rtol=1e-6, atol=1e-8)


@pytest.mark.distributed
@pytest.mark.parametrize("kind", TASK_KINDS)
def test_fsdp2_tasks_with_heads_and_entry_points_follow_the_single_process_loss_trajectory(runs, kind):
    """Each part holding parameters is a root (so a head's gradients are reduced too) and the model's entry points
    besides forward gather its shards: finetuning, BERT MLM + NSP, DAE, PLM + NSP."""
    fsdp = runs["two"][0]["tasks"][kind]
    assert fsdp == runs["two"][1]["tasks"][kind] and fsdp[0] != fsdp[-1]
    torch.testing.assert_close(torch.tensor(fsdp), torch.tensor(runs["tasks"][kind]), rtol=1e-5, atol=1e-6)


@pytest.mark.distributed
def test_fsdp2_sharded_modules_return_no_autograd_views(runs):
    """FSDP2 warns when a sharded module returns a view (an in-place op on it would skip the pre-backward hook):
    every family's outputs (GPT's hidden states, heads' regrouped scores, XLNet's logits, Funnel's discriminator
    scores, Transformer-XL's NLL) come out as views of nothing (``genlab.nn.views.output_view``)."""
    assert [r["view_warnings"] for r in runs["two"] + runs["one"]] == [[], [], []]


@pytest.mark.distributed
def test_fsdp2_distributed_checkpoint_resumes(runs):
    assert (runs["ckpt"]).is_dir(), "ModelParallelStrategy should save a folder of shards"
    resumed = mean_over_ranks(runs["two"], "resumed")
    torch.testing.assert_close(torch.tensor(resumed), torch.tensor(runs["single"][SEGMENTS:]), rtol=1e-5, atol=1e-6)


@pytest.mark.distributed
def test_fsdp2_checkpoint_resumes_on_another_world_size(runs):
    resumed = runs["one"][0]["resumed"]
    torch.testing.assert_close(torch.tensor(resumed), torch.tensor(runs["single"][SEGMENTS:]), rtol=1e-5, atol=1e-6)


@pytest.mark.distributed
def test_fsdp2_checkpoint_loads_into_a_single_process_model(runs):
    from lightning_fabric.utilities.load import _load_distributed_checkpoint

    full = _load_distributed_checkpoint(runs["ckpt"])
    task = make_task()
    task.load_state_dict(full["state_dict"], strict=True)  # plain module, same keys (no FSDP/AC prefixes)
    first = batches(0, 1)[0]
    with torch.no_grad():
        loss = task.model(first["input_ids"], target=first["target"]).nll.float().mean()
    # Epoch 1 starts with empty memory, so its first loss is this forward of the epoch-0 weights.
    assert abs(float(loss) - runs["single"][SEGMENTS]) < 1e-5


@pytest.mark.distributed
def test_fsdp2_checkpoint_folder_is_read_as_one_checkpoint(runs, tmp_path):
    """task.init_from / data.tokenizer read checkpoints through genlab.checkpoints.load: a folder of shards (what
    strategy=fsdp saves) is consolidated there, so a sharded pretraining run finetunes like any other."""
    from genlab import checkpoints

    assert checkpoints.is_sharded(runs["ckpt"]) and checkpoints.exists(runs["ckpt"])
    weights = checkpoints.submodule_weights(checkpoints.load(runs["ckpt"]))
    model = make_task().model
    model.load_state_dict(weights, strict=True)
    assert not checkpoints.exists(tmp_path) and not checkpoints.is_sharded(tmp_path)  # a folder without shards


# ------------------------------------------------------------------------------------------ single-process
def test_fsdp_without_block_classes_is_a_clear_error():
    with pytest.raises(ConfigError, match="block_classes"):
        find_blocks(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_global_batch_not_divisible_by_world_times_micro_batch_is_a_clear_error():
    assert accumulation_steps(64, micro_batch=4, world_size=2) == 8
    with pytest.raises(ConfigError, match="global_batch=60.*4 x 2"):
        accumulation_steps(60, micro_batch=4, world_size=2)


def test_precision_the_device_cannot_run_is_a_clear_error():
    check_precision("bf16-mixed", torch.device("cpu"))
    check_precision("32-true", torch.device("cpu"))
    with pytest.raises(ConfigError, match="16-mixed.*CPU"):
        check_precision("16-mixed", torch.device("cpu"))
    with pytest.raises(ConfigError, match="unknown"):
        check_precision("fp8", torch.device("cpu"))
    if not torch.cuda.is_available():  # from config values, before Lightning turns 16-mixed into bf16 on CPU
        with pytest.raises(ConfigError, match="16-mixed.*CPU"):
            check_trainer_precision("16-mixed", "auto")
        check_trainer_precision("bf16-mixed", "cpu")


def test_fsdp1_policy_wraps_exactly_the_declared_blocks():
    task = make_task()
    policy = BlockWrapPolicy()
    assert policy(task, recurse=True)  # the root (a task holding the model) is visited first
    assert all(policy(layer, recurse=False) for layer in task.model.layers)
    assert not policy(task.model.layers[0].attn, recurse=False)


def test_activation_checkpointing_keeps_outputs_gradients_and_state_dict_keys():
    task = make_task()
    ref = make_task().model
    keys = set(ref.state_dict())
    parallelize(task.model, None, activation_checkpointing=True)
    assert set(task.model.state_dict()) == keys
    b = batches(0, 1)[0]
    for model in (ref, task.model):
        model(b["input_ids"], target=b["target"]).nll.mean().backward()
    for (name, p), q in zip(ref.named_parameters(), task.model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)


def test_fsdp_strategy_defaults_to_pure_data_parallel():
    strategy = FSDP2Strategy()
    assert strategy._tensor_parallel_size == 1 and strategy._data_parallel_size == "auto"
    opts = strategy.parallelize_options("bf16-mixed")
    assert opts["param_dtype"] is torch.bfloat16 and opts["reduce_dtype"] is torch.float32
    assert FSDP2Strategy(param_dtype=None).parallelize_options("bf16-mixed")["param_dtype"] is None


def test_xlnet_blocks_are_found_and_checkpointing_keeps_outputs_and_gradients():
    """XLNetModel declares ``block_classes = (XLNetLayer,)``: its layers are found, and activation checkpointing
    them keeps the two-stream outputs and gradients."""
    from genlab.models.xlnet import XLNetLMHeadModel

    def build():
        torch.manual_seed(0)
        return XLNetLMHeadModel(VOCAB, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0,
                                dropatt=0.0).double()

    ref, ckpt = build(), build()
    assert len(find_blocks(ckpt)) == 2
    parallelize(ckpt, None, activation_checkpointing=True)
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, VOCAB, (2, 6), generator=g)
    perm = torch.rand(2, 6, 6, generator=g).lt(0.5).double()
    mapping = torch.eye(6, dtype=torch.float64)[None, :2].expand(2, -1, -1)
    for model in (ref, ckpt):
        model(ids, perm_mask=perm, target_mapping=mapping).logits.square().mean().backward()
    for (name, p), q in zip(ref.named_parameters(), ckpt.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)


def test_every_transformer_task_uses_the_one_parallelize_hook():
    from genlab.tasks.finetune_base import FinetuneTask
    from genlab.tasks.funnel_pretrain import FunnelElectraTask, FunnelMLMTask
    from genlab.tasks.gpt import GPTFinetuneTask, GPTPretrainTask
    from genlab.tasks.pretrain import DAETask, MaskedLMTask, PermutationLMTask

    for task in (LanguageModelTask, PermutationLMTask, DAETask, MaskedLMTask, FinetuneTask, GPTPretrainTask,
                 GPTFinetuneTask, FunnelMLMTask, FunnelElectraTask):
        assert task.configure_model is ParallelizeMixin.configure_model, task.__name__


@pytest.mark.parametrize("kind", ["bert_finetune", "xlnet_finetune", "bert_mlm"])
def test_tasks_checkpoint_every_block_and_keep_outputs_gradients_and_keys(kind):
    """parallelize(task): the blocks of the task's model (BERT declares BertLayer) are found through the task and
    activation-checkpointed; keys, outputs and gradients stay those of the plain task."""
    from genlab.models.bert import BertForPretraining
    from genlab.models.xlnet import XLNetLMHeadModel
    from genlab.tasks.finetune_classification import SequenceClassificationTask
    from genlab.tasks.pretrain import MaskedLMTask

    def build():
        torch.manual_seed(0)
        if kind == "xlnet_finetune":
            model = XLNetLMHeadModel(VOCAB, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0,
                                     dropatt=0.0)
        else:
            model = BertForPretraining(VOCAB, n_layer=2, d_model=32, n_head=2, d_inner=64, max_position=16,
                                       dropout=0.0, dropatt=0.0)
        sgd = functools.partial(torch.optim.SGD, lr=0.1)
        if kind == "bert_mlm":
            return MaskedLMTask(model, sgd, nsp_weight=1.0).double()
        return SequenceClassificationTask(model, sgd, None, n_labels=3, summary_dropout=0.0).double()

    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, VOCAB, (2, 8), generator=g)
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
             "labels": torch.where(torch.rand(2, 8, generator=g) < 0.3, ids, -100), "nsp_label": torch.tensor([0, 1])}
    batch["labels"][:, 0] = ids[:, 0]  # at least one MLM position
    ref, ckpt = build(), build()
    keys = set(ref.state_dict())
    parallelize(ckpt, None, activation_checkpointing=True)
    assert set(ckpt.state_dict()) == keys
    assert len([m for m in ckpt.modules() if isinstance(m, CheckpointWrapper)]) == 2
    for task in (ref, ckpt):
        loss = task._objective(batch, train=True)[0] if kind == "bert_mlm" else task(batch).square().mean()
        loss.backward()
    for (name, p), q in zip(ref.named_parameters(), ckpt.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)


def test_compile_blocks_compiles_each_block_in_place():
    task = make_task()
    keys = set(task.model.state_dict())
    parallelize(task.model, None, compile_blocks=True)
    assert all(layer._compiled_call_impl is not None for layer in task.model.layers)
    assert task.model._compiled_call_impl is None  # regional: the root stays eager
    assert set(task.model.state_dict()) == keys  # no _orig_mod prefixes: checkpoints stay portable


@pytest.mark.parametrize("name,cls", [("fsdp", "FSDP2Strategy"), ("fsdp1", "FSDPStrategy")])
def test_strategy_presets_compose_and_build(name, cls, compose_cfg):
    from hydra.utils import instantiate

    from genlab.cli.validate import validate_config

    cfg = compose_cfg(["experiment=txl_mini", f"strategy={name}"])
    validate_config(cfg)
    strategy = instantiate(cfg.trainer.strategy)
    assert type(strategy).__name__ == cls


@pytest.mark.parametrize("experiment", ["bert_base_mini", "gpt_books_mini", "gpt_rte_mini", "funnel_l6_electra_mini",
                                        "funnel_sst2_mini"])
def test_fsdp_preset_validates_for_every_transformer_family(experiment, compose_cfg):
    """No family refuses strategy=fsdp at config time (the 2-process trajectories above are the runtime check)."""
    from genlab.cli.validate import validate_config

    cfg = compose_cfg([f"experiment={experiment}", "strategy=fsdp", "trainer.accelerator=cpu"])
    validate_config(cfg)
    assert cfg.trainer.strategy._target_.endswith("FSDP2Strategy")


if __name__ == "__main__" and sys.argv[1] == "worker":
    worker(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else None)
