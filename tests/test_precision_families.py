"""trainer.precision=bf16-mixed on CPU for every transformer family: one training step under
``torch.autocast("cpu", dtype=torch.bfloat16)`` (what Lightning's bf16-mixed plugin runs) is finite, its loss and
gradients follow fp32, and the fp32 islands hold.

CPU autocast keeps softmax and log-softmax in the input dtype (CUDA autocast promotes them to fp32), so every
model must put its own islands in fp32: attention softmax and masks, position tables, losses, the adaptive
softmax's log-sum-exp. The islands are checked below the autocast layer (a dispatch mode sees the dtypes the
kernels really get). Attention is the one exception allowed bf16 inputs: SDPA's fused CPU kernel (BERT/GPT)
accumulates the scores and the softmax in fp32 inside, as flash attention does on a GPU, and the unfused training
path of the relative attentions (TXL, XLNet) hands the softmax kernel its [B·H, L, K] scores in bf16, which the
kernel computes in fp32 and rounds once (``test_low_precision_softmax_is_fp32_inside``) before the bf16 values GEMM.
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from genlab.models.bert import BertForPretraining
from genlab.models.funnel_pretraining import FunnelElectra, FunnelForMaskedLM
from genlab.models.gpt import GPTLMHeadModel
from genlab.models.transformer_xl import TransformerXL
from genlab.models.xlnet import XLNetLMHeadModel
from genlab.tasks.finetune_classification import SequenceClassificationTask
from genlab.tasks.finetune_multiple_choice import MultipleChoiceTask
from genlab.tasks.finetune_span import SpanExtractionTask
from genlab.tasks.funnel_pretrain import FunnelElectraTask, FunnelMLMTask
from genlab.tasks.gpt import GPTFinetuneTask, GPTPretrainTask
from genlab.tasks.lm import LanguageModelTask
from genlab.tasks.pretrain import DAETask, MaskedLMTask, PermutationLMTask

V, B, T, P = 50, 4, 8, 2
SGD = functools.partial(torch.optim.SGD, lr=0.1)
# ops whose inputs must be fp32 under bf16 autocast (the islands), by aten name
ISLANDS = ("_softmax", "_log_softmax", "logsumexp", "nll_loss_forward", "nll_loss2d_forward",
           "binary_cross_entropy_with_logits", "mse_loss", "sin", "cos")
FUSED_ATTENTION = ("_scaled_dot_product_flash_attention_for_cpu",)  # fp32 softmax inside the kernel
ATTENTION_SOFTMAX_NDIM = 3  # the relative attentions' probabilities over flattened [B·H, L, K] scores


def _xlnet() -> XLNetLMHeadModel:
    return XLNetLMHeadModel(V, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0, dropatt=0.0)


def _bert() -> BertForPretraining:
    return BertForPretraining(V, n_layer=2, d_model=32, n_head=2, d_inner=64, max_position=16, dropout=0.0,
                              dropatt=0.0)


def _gpt() -> GPTLMHeadModel:
    return GPTLMHeadModel(V, 3, n_positions=32, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                          attn_pdrop=0.0)


FUNNEL = dict(block_sizes=(1, 1, 1), d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0, dropatt=0.0)


def _batches() -> dict[str, dict]:
    g = torch.Generator().manual_seed(13)
    ids = torch.randint(9, V, (B, T), generator=g)
    perm = torch.zeros(B, T, T)
    perm[:, :, -P:] = 1.0  # the prediction slots hidden from every position
    pre = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
           "segment": 0, "labels": torch.randint(0, 3, (B,), generator=g),
           "nsp_label": torch.randint(0, 2, (B,), generator=g), "perm_mask": perm,
           "target_mapping": torch.eye(T)[None, -P:].expand(B, -1, -1), "target": ids[:, -P:],
           "target_mask": torch.ones(B, P)}
    mlm = {**pre, "labels": torch.full_like(ids, -100)}
    mlm["labels"][:, -P:] = ids[:, -P:]
    p_mask = torch.zeros(B, T)
    p_mask[:, :2] = 1.0
    span = {**pre, "p_mask": p_mask, "cls_index": torch.full((B,), T - 1), "start_positions": torch.tensor([2, 3, 4, 5]),
            "end_positions": torch.tensor([3, 4, 5, 6]), "is_impossible": torch.tensor([0.0, 1.0, 0.0, 0.0])}
    choices = {k: pre[k].view(2, 2, T) for k in ("input_ids", "token_type_ids", "attention_mask")}
    return {"lm": {"input_ids": ids, "target": torch.roll(ids, -1, 1), "segment": 0}, "plm": pre, "mlm": mlm,
            "span": span, "choice": {**choices, "labels": torch.tensor([0, 1])},
            "gpt": {"input_ids": ids, "lm_mask": torch.ones_like(ids), "labels": pre["labels"]}}


FAMILIES = {  # name: (task factory, batch key)
    "txl": (lambda: LanguageModelTask(TransformerXL(V, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64,
                                                    dropout=0.0, mem_len=8), SGD, None), "lm"),
    "txl_adaptive": (lambda: LanguageModelTask(TransformerXL(V, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64,
                                                             dropout=0.0, mem_len=8, cutoffs=[20, 35], div_val=2),
                                               SGD, None), "lm"),
    "xlnet_plm_nsp": (lambda: PermutationLMTask(_xlnet(), SGD, reuse_len=None, mem_init="none", nsp_weight=1.0), "plm"),
    "xlnet_dae": (lambda: DAETask(_xlnet(), SGD, reuse_len=None, mem_init="none"), "mlm"),
    "bert_mlm_nsp": (lambda: MaskedLMTask(_bert(), SGD, nsp_weight=1.0), "mlm"),
    "xlnet_classification": (lambda: SequenceClassificationTask(_xlnet(), SGD, None, n_labels=3, summary_dropout=0.0),
                             "plm"),
    "bert_classification": (lambda: SequenceClassificationTask(_bert(), SGD, None, n_labels=3, summary_dropout=0.0),
                            "plm"),
    "xlnet_span": (lambda: SpanExtractionTask(_xlnet(), SGD, None), "span"),
    "xlnet_multiple_choice": (lambda: MultipleChoiceTask(_xlnet(), SGD, None, n_choices=2, summary_dropout=0.0),
                              "choice"),
    "gpt_pretrain": (lambda: GPTPretrainTask(_gpt(), SGD), "gpt"),
    "gpt_finetune": (lambda: GPTFinetuneTask(_gpt(), SGD, kind="classification", n_labels=3, clf_pdrop=0.0), "gpt"),
    "funnel_mlm": (lambda: FunnelMLMTask(FunnelForMaskedLM(V, **FUNNEL), SGD), "mlm"),
    "funnel_electra": (lambda: FunnelElectraTask(FunnelElectra(V, **FUNNEL, width_shrink=0.5), SGD), "mlm"),
}


class KernelDtypes(TorchDispatchMode):
    """Records (op name, input dtypes) of the island ops as the kernels receive them (after autocast)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, tuple[torch.dtype, ...]]] = []
        self.attention_softmax: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name == "_softmax" and args[0].dim() == ATTENTION_SOFTMAX_NDIM:
            self.attention_softmax.append(args[0].dtype)
        elif name in ISLANDS or name in FUSED_ATTENTION:
            self.seen.append((name, tuple(a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point())))
        return func(*args, **(kwargs or {}))


def _step(name: str, autocast: bool, record: KernelDtypes | None = None):
    """The task's loss and gradients after one training step's forward/backward (same weights, same RNG)."""
    make, key = FAMILIES[name]
    torch.manual_seed(0)
    task = make()
    batch = _batches()[key]
    torch.manual_seed(1)  # ELECTRA samples its replacements
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log without a Trainer
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            if record is not None:
                with record:
                    loss = task.training_step(batch, 0)
            else:
                loss = task.training_step(batch, 0)
        loss.backward()
    grads = torch.cat([p.grad.flatten() for p in task.parameters() if p.grad is not None])
    return loss.detach(), grads


@pytest.mark.parametrize("name", list(FAMILIES))
def test_one_bf16_autocast_step_is_finite_and_follows_fp32(name):
    ref_loss, ref_grads = _step(name, autocast=False)
    record = KernelDtypes()
    loss, grads = _step(name, autocast=True, record=record)
    assert loss.dtype == torch.float32 and torch.isfinite(loss) and torch.isfinite(grads).all()
    assert abs(float(loss) - float(ref_loss)) <= 0.01 * abs(float(ref_loss)) + 1e-3, (float(loss), float(ref_loss))
    cosine = torch.nn.functional.cosine_similarity(grads, ref_grads, dim=0)
    assert cosine > 0.98, float(cosine)  # bf16 GEMMs, fp32 islands: the update points the same way
    low = [(op, dts) for op, dts in record.seen if op in ISLANDS and torch.bfloat16 in dts]
    assert record.seen and not low, f"fp32 islands computed in bf16: {sorted(set(low))}"


@pytest.mark.parametrize("name", ["txl", "xlnet_plm_nsp"])
def test_relative_attention_trains_its_scores_in_bf16(name):
    """TXL and XLNet keep the [B·H, L, K] score chain in bf16 under autocast (half the traffic of fp32 scores)."""
    record = KernelDtypes()
    _step(name, autocast=True, record=record)
    assert record.attention_softmax and set(record.attention_softmax) == {torch.bfloat16}


def test_low_precision_softmax_is_fp32_inside():
    """The CPU softmax kernel computes a bf16 row in fp32 and rounds each probability once: bit for bit the fp32
    softmax of the same scores, rounded (so a bf16 attention softmax is an fp32 island with bf16 storage, as the
    values GEMM would round the probabilities anyway). Its backward agrees with the fp32 backward to rounding."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(6, 32, 300, generator=g) * 8).bfloat16()
    x[..., 200:] = float("-inf")  # masked keys
    y = x.softmax(-1)
    assert torch.equal(y, x.float().softmax(-1).bfloat16())
    grad = torch.randn(y.shape, generator=g).bfloat16()
    low = torch._softmax_backward_data(grad, y, -1, torch.bfloat16).float()
    ref = torch._softmax_backward_data(grad.float(), y.float(), -1, torch.float32)
    assert (low - ref).abs().max() <= 2**-8 * ref.abs().max()


def test_low_precision_islands_are_really_detected():
    """The recorder sees a bf16 softmax when a model leaves it to CPU autocast (so the check above can fail)."""
    record = KernelDtypes()
    with torch.autocast("cpu", dtype=torch.bfloat16), record:
        torch.nn.Linear(4, 4)(torch.randn(2, 4)).softmax(-1)
    assert ("_softmax", (torch.bfloat16,)) in record.seen
