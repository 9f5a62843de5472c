"""What one training step holds beyond the weights, measured on the model itself: a forward, loss and backward on a
small synthetic batch of the run's shape, with the bytes of every live tensor (activations autograd saves, autocast's
bf16 weight copies, the backward's temporaries such as a log-sum-exp's gradient; parameters and assigned gradients
excluded) recorded after every op. That timeline is taken at two batch sizes and extrapolated op by op to
``data.batch_size``; its maximum is the estimate (the peak can move from a batch-independent phase, a large table's
gradient, to the batch's own, so the maxima alone would not extrapolate). The batch is synthetic, so no data is read;
word ids follow Zipf's law (rank r has probability ~ 1/r, as in text, over a vocabulary sorted by frequency as every
genlab vocabulary is), which decides how many tokens an adaptive softmax sends through each of its tail clusters.

The tasks that optimise manually (bad GAN, CEGAN, Planetoid, GDAN) are stepped through a Trainer
(``genlab.cli.memory_manual``). Tasks whose synthetic batch is not known here return None: the caller falls back to
a formula.
"""

from __future__ import annotations

import contextlib
import math
import warnings
import weakref
from functools import partial
from itertools import accumulate
from typing import Any

import torch
from omegaconf import DictConfig
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

from genlab.cli import memory_manual

# answers per question of GPT-1's multiple-choice data: RACE's 4 options, the Story Cloze Test's 2 endings
GPT_CHOICES = {"genlab.data.finetune.gpt_datamodules.GPTRaceDataModule": 4,
               "genlab.data.finetune.gpt_datamodules.GPTStoryClozeDataModule": 2}
PROBE_TOKENS = 256  # tokens per row x rows of the smaller probe batch: enough for stable adaptive-softmax shares


def zipf_ids(shape: tuple[int, ...], vocab: int, low: int = 0, seed: int = 0) -> Tensor:
    """Ids in [low, vocab) at the quantiles of a continuous Zipf law (P(rank <= r) = ln r / ln n), shuffled."""
    n = max(vocab - low, 2)
    count = math.prod(shape)
    quantiles = (torch.arange(count, dtype=torch.float64) + 0.5) / count
    ranks = torch.exp(quantiles * math.log(n)).floor().long().clamp(1, n) - 1
    perm = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    return (ranks[perm] + low).view(shape)


def _get(node: DictConfig | None, key: str, default: Any = None) -> Any:
    return node.get(key, default) if node is not None else default


def _masked_labels(ids: Tensor, n_targets: int) -> Tensor:
    labels = torch.full_like(ids, -100)
    labels[:, : min(n_targets, ids.shape[1])] = ids[:, : min(n_targets, ids.shape[1])]
    return labels


def synthetic_batch(cfg: DictConfig, task: nn.Module, rows: int) -> dict[str, Any] | None:
    """A training batch of ``rows`` rows shaped as the run's data makes them, or None for a task not covered."""
    from genlab.tasks.awd_lm import AWDLanguageModelTask
    from genlab.tasks.gpt import GPTPretrainTask
    from genlab.tasks.lm import LanguageModelTask
    from genlab.tasks.pretrain import DAETask, MaskedLMTask, PermutationLMTask

    if memory_manual.covers(task):
        return memory_manual.synthetic_batch(cfg, task, rows)
    from genlab.tasks.pixelcnn import PixelCNNTask

    if isinstance(task, PixelCNNTask) and task.hparams.image_shape:  # images in [-1, 1], as the density data gives
        return {"x": torch.rand(rows, *task.hparams.image_shape, generator=torch.Generator().manual_seed(0)) * 2 - 1}
    data = cfg.get("data")
    vocab = _vocab_size(task)
    if vocab is None:
        return None
    if isinstance(task, AWDLanguageModelTask) or type(task) is LanguageModelTask:  # pretraining tasks subclass it
        seq = int(_get(data, "tgt_len") or _get(data, "bptt"))
        ids = zipf_ids((rows, seq + int(_get(data, "ext_len", 0) or 0)), vocab)
        return {"input_ids": ids, "target": zipf_ids((rows, seq), vocab, seed=1), "segment": 0}
    finetuned = _finetune_batch(data, task, rows, vocab)
    if finetuned is not None:
        return finetuned
    seq = _get(data, "seq_len")
    if seq is None:
        return None
    seq = int(seq)
    ids = zipf_ids((rows, seq), vocab, low=min(10, vocab - 2))
    if isinstance(task, GPTPretrainTask):
        return {"input_ids": ids}
    masking = _get(data, "masking") or {}
    n_targets = int(masking.get("num_targets") or masking.get("max_predictions") or round(0.15 * seq))
    common = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
              "nsp_label": torch.zeros(rows, dtype=torch.long), "segment": 0}
    if isinstance(task, PermutationLMTask):
        predict = int(_get(data, "num_predict"))
        perm = torch.zeros(rows, seq, seq)
        perm[:, :, -predict:] = 1.0
        mapping = torch.eye(seq)[None, -predict:].expand(rows, -1, -1).contiguous()
        return {**common, "perm_mask": perm, "target_mapping": mapping, "target": ids[:, -predict:],
                "target_mask": torch.ones(rows, predict)}
    if isinstance(task, DAETask):
        return {**common, "perm_mask": torch.zeros(rows, seq, seq), "labels": _masked_labels(ids, n_targets)}
    if isinstance(task, MaskedLMTask):  # BERT and both Funnel objectives
        return {**common, "labels": _masked_labels(ids, n_targets)}
    return None


def _finetune_batch(data: DictConfig | None, task: nn.Module, rows: int, vocab: int) -> dict[str, Any] | None:
    """A batch of the XLNet/BERT/Funnel/GPT-1 finetuning tasks (classification, multiple choice, span extraction)."""
    from genlab.tasks.finetune_classification import SequenceClassificationTask
    from genlab.tasks.finetune_multiple_choice import MultipleChoiceTask
    from genlab.tasks.finetune_span import SpanExtractionTask
    from genlab.tasks.gpt import GPTFinetuneTask

    if isinstance(task, GPTFinetuneTask):  # [B, T], both orders [B, 2, T], or the choices [B, K, T]
        lead = {"similarity": (2,), "multiple_choice": (GPT_CHOICES.get(str(_get(data, "_target_", "")), 4),)}
        ids = zipf_ids((rows, *lead.get(task.kind, ()), int(_get(data, "max_seq_len"))), vocab, low=min(10, vocab - 2))
        labels = torch.zeros(rows) if task.stsb_head else torch.zeros(rows, dtype=torch.long)
        return {"input_ids": ids, "lm_mask": torch.ones_like(ids), "labels": labels}
    if not isinstance(task, (SequenceClassificationTask, MultipleChoiceTask, SpanExtractionTask)):
        return None
    seq = int(_get(data, "max_seq_len"))
    choices = (task.n_choices,) if isinstance(task, MultipleChoiceTask) else ()
    ids = zipf_ids((rows, *choices, seq), vocab, low=min(10, vocab - 2))
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids)}
    first = torch.zeros(rows, dtype=torch.long)
    if isinstance(task, SpanExtractionTask):
        return {**batch, "p_mask": torch.zeros(rows, seq), "cls_index": first, "start_positions": first,
                "end_positions": first, "is_impossible": torch.zeros(rows)}
    regression = getattr(task, "n_labels", 2) == 1
    return {**batch, "labels": torch.zeros(rows) if regression else first}


def _vocab_size(task: nn.Module) -> int | None:
    """The model's vocabulary: its ``vocab_size``, else the rows of its word-embedding table (BERT/XLNet/Funnel name
    it ``word_embedding(s)``), else of its largest table. Not simply the largest: a vocabulary trained on a small
    dataset can be smaller than the position table."""
    model = getattr(task, "model", None)
    if isinstance(getattr(model, "vocab_size", None), int):
        return model.vocab_size
    tables = {name: m.num_embeddings for name, m in task.named_modules() if isinstance(m, nn.Embedding)}
    words = [rows for name, rows in tables.items() if name.rsplit(".", 1)[-1].startswith("word_embedding")]
    if words:
        return words[0]
    return max(tables.values()) if tables else None


def training_loss(task: nn.Module, batch: dict[str, Any]) -> Tensor:
    """The loss a training step backpropagates (AWD-LSTM: one column chunk's NLL, as its step backpropagates)."""
    from genlab.tasks.awd_lm import AWDLanguageModelTask

    if isinstance(task, AWDLanguageModelTask):
        return task.model.run(batch["input_ids"], batch["target"], None).nll.mean()
    with warnings.catch_warnings():  # self.log outside a Trainer
        warnings.simplefilter("ignore")
        return task.training_step(batch, 0)


def autocast_for(precision: str) -> contextlib.AbstractContextManager:
    if precision.startswith("bf16") and "mixed" in precision:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    if precision.startswith("16") and "mixed" in precision:
        return torch.autocast("cpu", dtype=torch.float16)
    return contextlib.nullcontext()


def op_scratch_bytes(func: Any, args: tuple, kwargs: dict, out: Any) -> int:
    """Bytes a CPU kernel allocates and frees inside one op, which its outputs do not show:

    - a pointwise op (TensorIterator) whose inputs are of another floating dtype than its result casts a copy of each
      such input first (on the CPU only; a GPU casts while it loads): the fp32 residual plus a bf16 branch under
      autocast holds a second fp32 copy of the branch;
    - oneDNN's LSTM backward (``mkldnn_rnn_layer_backward``) keeps the gradients of the 4 gates at every time step,
      fp32: 4 x T x B x H x 4 bytes (16 bytes per element of the layer's output);
    - ``logsumexp`` holds ``exp(x - max)`` of its whole input before summing it (254 MiB for a 254 MiB input;
      MoS's mixture: the jump beyond the heap model in mos_wt2's step).
    """
    if func is torch.ops.aten.mkldnn_rnn_layer_backward.default:
        return 16 * args[7].numel()  # args[7]: the layer's output [T, B, H] (or [B, T, H])
    if func is torch.ops.aten.logsumexp.default:  # exp(x - max) of every element, summed afterwards
        return args[0].numel() * args[0].element_size()
    if torch.Tag.pointwise not in func.tags:
        return 0
    result = next((t for t in tree_leaves(out) if isinstance(t, Tensor)), None)
    if result is None or not result.is_floating_point():
        return 0
    return sum(t.numel() * result.element_size() for t in tree_leaves((args, kwargs))
               if isinstance(t, Tensor) and t.dim() > 0 and t.is_floating_point() and t.dtype != result.dtype)


def _on_host_or_device(t: Any) -> bool:
    return isinstance(t, Tensor) and t.device.type != "meta"


class _Lifetimes(TorchDispatchMode):
    """Every storage an op creates (activations, autocast's weight copies, the backward's temporaries, gradients;
    not a view of a storage it was given that the step did not create: a weight's transpose or split, the batch):
    its bytes, and the op counts at which it appeared and was freed (a weak reference's callback); and the scratch
    an op's kernel holds while it runs (:func:`op_scratch_bytes`), as a storage alive for that op only, allocated
    before its outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.spans: list[list[int]] = []  # [first op, op after the last, bytes]
        self._index: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._refs: list[weakref.ref] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        scratch = op_scratch_bytes(func, args, kwargs or {}, out)
        if scratch:
            self.spans.append([self.ops, self.ops + 1, scratch])
        given = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if _on_host_or_device(t)}
        for t in tree_leaves(out):
            if _on_host_or_device(t) and t.untyped_storage().data_ptr() not in given:
                self.track(t.untyped_storage())
        return out

    def track(self, storage: torch.UntypedStorage) -> None:
        if storage in self._index:
            return
        self._index[storage] = len(self.spans)
        self.spans.append([self.ops, -1, storage.nbytes()])
        self._refs.append(weakref.ref(storage, partial(self._freed, len(self.spans) - 1)))

    def _freed(self, i: int, _ref: weakref.ref) -> None:
        self.spans[i][1] = self.ops + 1

    def settled(self) -> list[list[int]]:
        """A copy of the spans as they stand, with a storage not freed by the step's last op marked alive to its end
        (-1), however it is freed later: a storage the task keeps to its next step is freed by a later probe, whose
        spans must still line up with these (``live_and_heap_bytes``)."""
        return [[first, -1 if after > self.ops else after, nbytes] for first, after, nbytes in self.spans]

    def excluded(self, tensors: list[Tensor]) -> set[int]:
        """The spans of ``tensors``' storages (the parameters' gradients)."""
        return {i for i in (self._index.get(t.untyped_storage()) for t in tensors) if i is not None}


def timeline(spans: list[list[int]], skip: set[int]) -> list[int]:
    """Live bytes after each op, without the spans in ``skip``."""
    ops = max((first for first, _, _ in spans), default=0)
    ops = max([ops, *(after - 1 for _, after, _ in spans)])
    delta = [0] * (ops + 2)
    for i, (first, after, nbytes) in enumerate(spans):
        if i not in skip:
            delta[first] += nbytes
            delta[after if after >= 0 else ops + 1] -= nbytes
    return list(accumulate(delta))[1:-1]


def step_spans(task: nn.Module, batch: dict[str, Any], precision: str) -> tuple[list[list[int]], set[int]]:
    """The storages a training step's forward, loss and backward create ([first op, op after the last, bytes], in
    allocation order) and which of them are the parameters' gradients (the RNG, the task's mode and gradients, and
    the memories the step kept are left as they were)."""
    if memory_manual.covers(task):
        return memory_manual.step_spans(task, batch, precision, _Lifetimes())
    lifetimes = _Lifetimes()
    was_training = task.training
    task.train()
    try:
        with torch.random.fork_rng():
            batch = _after_a_segment(task, batch, precision, lifetimes)
            with lifetimes:
                with autocast_for(precision):
                    loss = training_loss(task, batch)
                loss.backward()
                del loss
        return lifetimes.settled(), lifetimes.excluded([p.grad for p in task.parameters() if p.grad is not None])
    finally:
        task.train(was_training)
        for param in task.parameters():
            param.grad = None
        if isinstance(getattr(task, "_train_memory", None), list):
            task._train_memory = []


def _after_a_segment(task: nn.Module, batch: dict[str, Any], precision: str, lifetimes: _Lifetimes) -> dict:
    """A training step after the first of a pass attends over the memory the previous segment left (Transformer-XL,
    XLNet: mem_len + L keys, not L): run that segment without gradients, track its memory as live from the step's
    start (the step replaces it), and return ``batch`` as its successor. Other tasks' batches come back as they are
    (AWD-LSTM's carried state is a few vectors; its probe step starts without one)."""
    from genlab.tasks.awd_lm import AWDLanguageModelTask

    model = getattr(task, "model", None)
    backbone = getattr(model, "transformer", model)
    if "segment" not in batch or isinstance(task, AWDLanguageModelTask) or not getattr(backbone, "mem_len", 0):
        return batch
    with torch.no_grad(), autocast_for(precision):
        training_loss(task, {**batch, "segment": 0})
    for t in tree_leaves(getattr(task, "_train_memory", None)):
        if isinstance(t, Tensor):
            lifetimes.track(t.untyped_storage())
    return {**batch, "segment": 1}


def step_timeline(task: nn.Module, batch: dict[str, Any], precision: str) -> list[int]:
    """Live bytes after each op of a training step, parameters and their gradients excluded."""
    return timeline(*step_spans(task, batch, precision))


def step_peak_bytes(task: nn.Module, batch: dict[str, Any], precision: str) -> int:
    return max(step_timeline(task, batch, precision), default=0)


def probe_rows(cfg: DictConfig, batch_size: int) -> tuple[int, int]:
    """The two probe batch sizes: an even number of rows of about PROBE_TOKENS tokens, then twice that (at most the
    real batch)."""
    data = cfg.get("data")
    image = _get(cfg.get("task"), "image_shape")  # PixelCNN++: each pixel is a position, like a token
    seq = int(_get(data, "tgt_len") or _get(data, "bptt") or _get(data, "seq_len") or _get(data, "max_seq_len")
              or (math.prod(image[1:]) if image else 1))
    small = max(1, min(batch_size, 2 * math.ceil(PROBE_TOKENS / seq / 2)))  # even: bi_data halves the rows
    return small, max(small, min(batch_size, 2 * small))


def activation_bytes(cfg: DictConfig, task: nn.Module, mmap_at: int | None = None) -> int | None:
    """Peak bytes a training step holds beyond parameters and gradients at ``data.batch_size`` (the micro-batch),
    or None when no batch can be made. ``mmap_at``: on CPU, glibc's mmap threshold (``genlab.cli.memory_heap``),
    and the estimate is the heap the step grows rather than its live bytes; None: the live bytes (a GPU's caching
    allocator)."""
    both = live_and_heap_bytes(cfg, task, mmap_at)
    return None if both is None else both[mmap_at is not None]


def live_and_heap_bytes(cfg: DictConfig, task: nn.Module, mmap_at: int | None) -> tuple[int, int] | None:
    """:func:`activation_bytes` without and with the heap, from one probe (the heap's is the live one without
    ``mmap_at``)."""
    data = cfg.get("data")
    batch_size = _get(data, "batch_size")
    if not isinstance(batch_size, int):
        return None
    from genlab.tasks.awd_lm import AWDLanguageModelTask

    passes = 1  # forward-backward passes per optimiser step, each replayed in the heap
    if isinstance(task, AWDLanguageModelTask) and getattr(task, "small_batch_size", None):
        passes = max(1, batch_size // int(task.small_batch_size))
        batch_size = min(batch_size, int(task.small_batch_size))  # one column chunk at a time
    precision = str(_get(cfg.get("trainer"), "precision", "32-true"))
    if memory_manual.covers(task):  # the size probed (GDAN: paragraph tokens) and its run's value
        small, large, batch_size, batch_of = memory_manual.probe_plan(cfg, task, batch_size)
    else:
        small, large = probe_rows(cfg, batch_size)
        batch_of = partial(synthetic_batch, cfg, task)
    batch = batch_of(small)
    if batch is None:
        return None
    at_small = step_spans(task, batch, precision)
    at_large = at_small if large == small else step_spans(task, batch_of(large), precision)
    scale = 0.0 if large == small else (batch_size - small) / (large - small)
    aligned = [s[:2] for s in at_small[0]] == [s[:2] for s in at_large[0]] and at_small[1] == at_large[1]
    if aligned:  # the same storages: each one's size is linear in the rows
        spans = [[first, after, max(0, round(a + (b - a) * scale))]
                 for (first, after, a), (_, _, b) in zip(at_small[0], at_large[0])]
        return _step_bytes(spans, at_large[1], mmap_at, passes)
    # another op sequence (an adaptive-softmax tail the small batch missed): the peaks alone are linear
    a, b = _step_bytes(*at_small, mmap_at, passes), _step_bytes(*at_large, mmap_at, passes)
    return int(a[0] + (b[0] - a[0]) * scale), int(a[1] + (b[1] - a[1]) * scale)


def _step_bytes(spans: list[list[int]], grads: set[int], mmap_at: int | None, passes: int = 1) -> tuple[int, int]:
    """The peak of live bytes without the gradients, and, given ``mmap_at``, the heap's high-water mark less the
    gradients (they are counted with the weights; in the heap they take their place among the activations) over the
    measured steps' ``passes`` forward-backward passes each: the heap fragments further with every pass (AWD-LSTM's
    column chunks, ``task.small_batch_size``: mos_wt2's 3 chunks of 5 rows grow it 2.88 -> 3.54 GB over 2 steps)."""
    live = max(timeline(spans, grads), default=0)
    if mmap_at is None:
        return live, live
    from genlab.cli import memory_heap

    heap = memory_heap.high_water(spans, mmap_at, memory_heap.STEPS * passes)
    return live, max(live, heap - sum(spans[i][2] for i in grads))


def batch_bytes(cfg: DictConfig, task: nn.Module) -> int:
    """Bytes of one real-size batch (the data loader holds it, and 2 prefetched per worker)."""
    data = cfg.get("data")
    batch_size = _get(data, "batch_size")
    if not isinstance(batch_size, int):
        return 0
    copies = 1 + 2 * int(_get(data, "num_workers", 0) or 0)
    if memory_manual.covers(task):
        return memory_manual.batch_bytes(cfg, task, batch_size) * copies
    batch = synthetic_batch(cfg, task, 1)
    if batch is None:
        return 0
    one = sum(v.nbytes for v in batch.values() if isinstance(v, Tensor))
    return one * batch_size * copies
