"""The activation probe follows every live tensor of a training step, and extrapolates it to the run's batch."""

from __future__ import annotations

import gc
import math
from functools import partial

import pytest
import torch
from omegaconf import OmegaConf

from genlab import assemble
from genlab.cli import memory_heap, memory_probe
from genlab.cli.memory_heap import MMAP_WITH_SETTING
from genlab.models.awd_lstm import AWDLSTM
from genlab.models.transformer_xl import TransformerXL
from genlab.tasks.awd_lm import AWDLanguageModelTask
from genlab.tasks.lm import LanguageModelTask


def test_step_peak_holds_the_logits_and_their_backward_temporaries():
    head = torch.nn.Linear(16, 1000)
    x, target = torch.randn(64, 16), torch.randint(0, 1000, (64,))

    class Task(torch.nn.Module):  # the probe steps a task: training_step(batch) -> loss
        def __init__(self):
            super().__init__()
            self.head = head

        def training_step(self, batch, _):
            logits = self.head(batch["x"])
            return (torch.logsumexp(logits, -1) - logits.gather(1, batch["t"][:, None]).squeeze(1)).mean()

    task = Task()
    logits = 4 * 64 * 1000
    peak = memory_probe.step_peak_bytes(task, {"x": x, "t": target}, "32-true")
    # the saved logits, then in the backward (x - lse).exp(), the product with the gradient and the gather's zeros
    assert 3 * logits <= peak <= 6 * logits
    assert all(p.grad is None for p in task.parameters())  # the probe leaves no gradient behind
    assert memory_probe.step_peak_bytes(task, {"x": x[:32], "t": target[:32]}, "32-true") < 0.6 * peak


def test_a_view_of_a_weight_is_not_an_activation():
    """An fp32 linear layer transposes its weight and the adaptive softmax splits its shared table: views of storages
    the step did not allocate (the weights, counted with the parameters; the batch) add nothing to its peak."""
    layer = torch.nn.Linear(500, 500)
    layer.weight.requires_grad_(False)  # no weight-sized gradient temporaries either

    class Task(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def training_step(self, batch, _):
            table = self.layer.weight.split([100, 400])[1]
            return self.layer(batch["x"].view(4, 500)).sum() + table.sum()

    peak = memory_probe.step_peak_bytes(Task(), {"x": torch.randn(2000)}, "32-true")
    assert 0 < peak < 0.05 * layer.weight.nbytes  # the step's own tensors: a few 8 KB rows


def test_probes_at_two_batches_line_up_when_the_task_keeps_a_tensor_to_its_next_step():
    """A step that keeps a tensor until the next one (a logged value) frees it during the next probe: each probe's
    spans are fixed when it returns, so the two still line up and are extrapolated storage by storage (they did not,
    at random, and the peaks alone were extrapolated: txl_text8_large's heap at 64 rows read 7.7 instead of 10.2 GB)."""

    class Task(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(16, 64)

        def training_step(self, batch, _):
            out = self.head(batch["x"])
            self.kept = out.detach().sum(-1)  # alive until the next step replaces it
            return out.square().mean()

    task = Task()
    gc.disable()  # the first probe's recorder lives on (as it may when no collection runs between the probes)
    try:
        small, _ = memory_probe.step_spans(task, {"x": torch.randn(8, 16)}, "32-true")
        large, _ = memory_probe.step_spans(task, {"x": torch.randn(16, 16)}, "32-true")
    finally:
        gc.enable()
    assert [s[:2] for s in small] == [s[:2] for s in large]


def test_the_heap_is_replayed_over_every_column_chunk_of_an_awd_step(monkeypatch):
    """AWD-LSTM with task.small_batch_size makes batch/small forward-backward passes per step, and the CPU heap
    fragments further with each: the probe steps one chunk but replays it once per pass of the measured steps."""
    model = AWDLSTM(vocab_size=40, emsize=8, nhid=16, nhidlast=12, nlayers=2, head="mos", n_experts=3)
    task = AWDLanguageModelTask(model, optimizer=partial(torch.optim.SGD, lr=1.0), small_batch_size=2)
    cfg = OmegaConf.create({"data": {"batch_size": 6, "bptt": 8}, "trainer": {"precision": "32-true"}})
    replays, replay = [], memory_heap.high_water

    def counted(spans, mmap_at, steps=memory_heap.STEPS):
        replays.append(steps)
        return replay(spans, mmap_at, steps)

    monkeypatch.setattr(memory_heap, "high_water", counted)
    live, heap = memory_probe.live_and_heap_bytes(cfg, task, MMAP_WITH_SETTING)
    assert replays and set(replays) == {memory_heap.STEPS * 3} and heap >= live  # 3 chunks of 2 rows per step


def test_zipf_ids_follow_the_rank_law():
    ids = memory_probe.zipf_ids((4, 1000), vocab=100_000)
    assert ids.min() >= 0 and ids.max() < 100_000
    share = (ids < 1000).float().mean().item()
    assert math.isclose(share, math.log(1000) / math.log(100_000), abs_tol=0.01)


def _txl_task(cutoffs):
    model = TransformerXL(vocab_size=3000, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32, mem_len=4,
                          cutoffs=cutoffs, dropout=0.0, dropatt=0.0)
    return LanguageModelTask(model, optimizer=torch.optim.Adam)


def test_probe_extrapolates_to_the_measured_batch():
    task = _txl_task([500, 1500])
    cfg = OmegaConf.create({"data": {"batch_size": 48, "tgt_len": 16}, "trainer": {"precision": "32-true"}})
    small, large = memory_probe.probe_rows(cfg, 48)
    assert (small, large) == (16, 32)
    direct = memory_probe.step_peak_bytes(task, memory_probe.synthetic_batch(cfg, task, 48), "32-true")
    live, heap = memory_probe.live_and_heap_bytes(cfg, task, MMAP_WITH_SETTING)
    assert abs(live - direct) / direct < 0.03 and live == memory_probe.activation_bytes(cfg, task)
    assert heap == memory_probe.activation_bytes(cfg, task, MMAP_WITH_SETTING) >= live  # freed holes stay mapped


def test_images_probed_at_a_few_rows_and_extrapolated():
    """An image's pixels are its positions: PixelCNN++ was probed at its whole batch (the probe of 120 SVHN images was
    killed at 19.6 GB resident), now at a few images, extrapolated as a text batch is."""
    from genlab.models.pixelcnn_pp import PixelCNNPP
    from genlab.tasks.pixelcnn import PixelCNNTask

    cfg = OmegaConf.create({"data": {"batch_size": 24}, "task": {"image_shape": [1, 8, 8]},
                            "trainer": {"precision": "32-true"}})
    assert memory_probe.probe_rows(cfg, 24) == (4, 8)
    torch.manual_seed(0)
    task = PixelCNNTask(PixelCNNPP(in_channels=1, n_filters=8, n_resnet=1, n_mix=2, n_stages=2),
                        optimizer=torch.optim.Adam, image_shape=[1, 8, 8])
    direct = memory_probe.step_peak_bytes(task, memory_probe.synthetic_batch(cfg, task, 24), "32-true")
    assert abs(memory_probe.activation_bytes(cfg, task) - direct) / direct < 0.03


def test_adaptive_softmax_tails_counted_for_their_tokens_only():
    cfg = OmegaConf.create({"data": {"batch_size": 8, "tgt_len": 32}, "trainer": {"precision": "32-true"}})
    full, adaptive = _txl_task([]), _txl_task([500, 1500])
    batch = memory_probe.synthetic_batch(cfg, full, 8)
    tokens = batch["target"].numel()
    peak_full = memory_probe.step_peak_bytes(full, batch, "32-true")
    peak_adaptive = memory_probe.step_peak_bytes(adaptive, batch, "32-true")
    # the full softmax holds N x V fp32 log-probabilities and their gradient; the adaptive one N x 502 plus only the
    # tail rows of the tokens that fall in each tail (a Zipf batch sends few of them there)
    assert peak_full >= 2 * 4 * tokens * 3000
    assert peak_adaptive < 0.5 * peak_full


def test_probe_steps_over_the_memory_a_previous_segment_left():
    """Every training step after a pass's first attends over mem_len + L keys, not L: so does the probe's (and the
    memory it starts with is live), and the task is left without one."""

    def probe(mem_len):
        torch.manual_seed(0)
        model = TransformerXL(vocab_size=50, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32, mem_len=mem_len,
                              dropout=0.0, dropatt=0.0)
        task = LanguageModelTask(model, optimizer=torch.optim.Adam)
        cfg = OmegaConf.create({"data": {"batch_size": 4, "tgt_len": 64}})
        return memory_probe.step_peak_bytes(task, memory_probe.synthetic_batch(cfg, task, 4), "32-true"), task

    without, _ = probe(0)
    with_memory, task = probe(64)
    scores = 4 * 2 * 64 * 64 * 4  # one fp32 [B, H, L, L] map; with memory each map of the chain is twice that
    assert with_memory - without >= 2 * scores
    assert task._train_memory == []


def test_a_pointwise_op_on_mixed_dtypes_holds_a_cast_copy_of_the_other_input():
    residual, branch = torch.randn(64, 32), torch.randn(64, 32, dtype=torch.bfloat16)
    lifetimes = memory_probe._Lifetimes()
    with lifetimes:
        total = residual + branch  # TensorIterator casts the bf16 input to fp32 before adding
        same = residual + residual
    assert [s[2] for s in lifetimes.spans] == [64 * 32 * 4, total.untyped_storage().nbytes(),
                                                same.untyped_storage().nbytes()]
    assert lifetimes.spans[0][1] == lifetimes.spans[0][0] + 1  # alive for that op only


def test_logsumexp_holds_the_exponentials_of_its_input():
    x = torch.randn(64, 100)
    lifetimes = memory_probe._Lifetimes()
    with lifetimes:
        torch.logsumexp(x, -1)
    assert [s[2] for s in lifetimes.spans] == [64 * 100 * 4, 64 * 4]  # exp(x - max) for that op, then the result


def test_the_lstm_backward_holds_every_step_s_gate_gradients():
    """oneDNN's LSTM backward (the CPU kernel nn.LSTM runs) keeps fp32 gradients of 4 gates per step: 16 B per output."""
    lstm = torch.nn.LSTM(8, 16)
    x = torch.randn(12, 3, 8, requires_grad=True)
    lifetimes = memory_probe._Lifetimes()
    with lifetimes:
        out, _ = lstm(x)
        out.sum().backward()
    scratch = [s for s in lifetimes.spans if s[1] == s[0] + 1 and s[2] == 16 * out.numel()]
    assert len(scratch) == 1


@pytest.mark.parametrize("preset", ["bert_stsb_mini", "xlnet_race_mini", "funnel_squad1_mini", "gpt_race_mini",
                                    "gpt_mrpc_mini"])
def test_finetuning_tasks_probed_on_their_own_batch(compose_cfg, preset):
    """Regression, multiple choice ([B, choices, T]), span extraction, GPT-1's choices and both orders ([B, 2, T]):
    the peak extrapolated from two probe batches equals that of the real batch (linear in rows), so the guard no
    longer falls back to a formula."""

    cfg = compose_cfg([f"experiment={preset}", "data.batch_size=6", "data.max_seq_len=24"])
    torch.manual_seed(0)
    task = assemble.build_task(cfg, sizes={"vocab_size": 300})
    batch = memory_probe.synthetic_batch(cfg, task, 6)
    direct = memory_probe.step_peak_bytes(task, batch, str(cfg.trainer.precision))
    assert direct > 0 and abs(memory_probe.activation_bytes(cfg, task) - direct) / direct < 0.03


def test_probe_ids_fit_a_word_table_smaller_than_the_position_table():
    """A tokenizer trained on a tiny dataset can give fewer words than positions: the probe's ids must index the
    word table (a finetuning task's backbone has no ``vocab_size``), else a bad-data run dies in the probe."""
    from genlab.models.bert import BertEmbeddings

    class Finetune(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = torch.nn.Module()
            self.backbone.embeddings = BertEmbeddings(vocab_size=32, d_model=8, max_position=128, type_vocab_size=2,
                                                      dropout=0.0, eps=1e-12)

    assert memory_probe._vocab_size(Finetune()) == 32
