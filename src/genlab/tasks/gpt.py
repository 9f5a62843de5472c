"""GPT-1 objectives (Radford et al. 2018, §3.1-§3.3, eq. (1)-(5)): unsupervised pretraining (causal LM over contiguous
windows) and
supervised finetuning with the auxiliary LM loss, on ``genlab.models.gpt.GPTLMHeadModel``.

Batch keys (dicts of tensors; the DataModules that build them are the data layer's):

Pretraining (:class:`GPTPretrainTask`)
    ``input_ids``  long ``[B, T]``: contiguous token windows (T ≤ n_positions; the paper: 64 x 512, randomly
                   sampled in training, non-overlapping held-out windows in evaluation). Position t predicts t+1.
    ``lm_mask``    optional long/bool ``[B, T]``, 1 = real token (a short last window); absent = all real.

Finetuning (:class:`GPTFinetuneTask`), built by ``genlab.data.finetune.gpt_transforms``:
    ``input_ids``  long, right-padded: ``[B, T]`` (``kind=classification``: ``<s> x <e>`` or entailment
                   ``<s> p $ h <e>``), ``[B, 2, T]`` (``similarity``: both orders), ``[B, K, T]`` (``multiple_choice``:
                   one ``<s> z q $ a_k <e>`` per choice). Specials are the model's ``special_ids`` (V, V+1, V+2).
    ``lm_mask``    same shape, 1 on real tokens including the specials, 0 on padding (the release's M).
    ``extract_index``  optional long ``[B]`` / ``[B, K]``: position of ``<e>``; default ``lm_mask.sum(-1) − 1``.
    ``labels``     long ``[B]`` (class, or the correct choice), or float ``[B]`` scores in [0, 5] (``stsb_head``);
                   absent on unlabelled splits (GLUE test), whose predictions go to the DataModule's writer.
    ``level``      optional long ``[B]`` (RACE: 0 middle, 1 high): ``acc_middle`` / ``acc_high`` are logged too.
    ``qid``        optional list of ids (multiple choice): test predictions are written to
                   ``<prediction_dir>/<dataset>_test.json``.

Evaluation splits follow the DataModule (``dev_splits`` for validation, ``test_split_names()`` for test, as the
finetuning suite's): the first logs ``<stage>/<metric>``, MNLI-mismatched ``<stage>/mm/<metric>``. Besides the
metric's own names every split logs ``<stage>/score``, the paper's metric of the task (accuracy; F1 for MRPC/QQP;
Pearson for STS-B; Matthews for CoLA), so one report table spans all tasks.

Losses: pretraining = mean next-token CE over real targets (ordinary-token softmax, no special rows); finetuning
``L3 = mean(L2) + lm_coef · mean over sequences of (per-sequence mean LM CE)`` where the LM CE runs over targets
``x_1..`` with ``lm_mask[1:] = 1`` (specials ``$``/``<e>`` included, ``<s>`` and padding never), averaged per
sequence and then over all ``B·K`` sequences (wrong choices included), as the release.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric

from genlab import checkpoints
from genlab.errors import CheckpointError, ConfigError
from genlab.interop.hf_gpt import MC_PREFIX
from genlab.metrics.glue_metrics import classification_metrics
from genlab.models.gpt import (
    GPTClassificationHead,
    GPTLMHeadModel,
    GPTMultipleChoiceHead,
    GPTOutput,
    GPTSimilarityHead,
    extract_states,
    transfer_pretrained,
)
from genlab.parallel import ParallelizeMixin
from genlab.tasks.data_interface import (
    ClassificationData,
    MultipleChoiceData,
    datamodule_of,
)
from genlab.tasks.gpt_optim import ndim_decay_groups
from genlab.tasks.pretrained_heads import PretrainedWeights, take_heads

log = logging.getLogger("genlab")

KINDS = ("classification", "similarity", "multiple_choice")
STSB_HEADS = (None, "soft6", "mse")
PAPER_SCORE = {"acc": "acc", "mcc": "mcc", "acc_f1": "f1", "corr": "pearson", "error": "error"}  # paper Tables 2-4
LEVELS = ("middle", "high")


# ------------------------------------------------------------------------------------------------------- losses
def token_nll(model: GPTLMHeadModel, out: GPTOutput, input_ids: Tensor, lm_mask: Tensor | None,
              special_rows: bool) -> tuple[Tensor, Tensor]:
    """Next-token CE at every real target: ``(nll [n], sequence index [n])`` over the flattened sequences.
    Logits are computed only where a real token follows (the softmax is the expensive part), never all at once."""
    t = input_ids.shape[-1]
    hidden = out.hidden.reshape(-1, t, out.hidden.shape[-1])[:, :-1]
    targets = input_ids.reshape(-1, t)[:, 1:]
    n_seq = targets.shape[0]
    if lm_mask is None:
        keep = torch.ones_like(targets, dtype=torch.bool)
    else:
        keep = lm_mask.reshape(-1, t)[:, 1:].bool()
    seq = torch.arange(n_seq, device=targets.device)[:, None].expand_as(targets)[keep]
    return model.lm_nll(hidden[keep], targets[keep], out, special_rows=special_rows), seq


def per_sequence_mean(nll: Tensor, seq: Tensor, n_seq: int) -> Tensor:
    """``[n_seq]`` mean NLL of each sequence (0 for a sequence without targets)."""
    sums = torch.zeros(n_seq, device=nll.device, dtype=nll.dtype).index_add_(0, seq, nll)
    counts = torch.zeros(n_seq, device=nll.device, dtype=nll.dtype).index_add_(0, seq, torch.ones_like(nll))
    return sums / counts.clamp_min(1.0)


def stsb_soft_targets(scores: Tensor, n_bins: int = 6) -> Tensor:
    """Tree-LSTM label encoding (release ``stsb_label_encoding``): a score y in [0, 5] puts mass
    ``⌊y⌋ + 1 − y`` on bin ⌊y⌋ and ``y − ⌊y⌋`` on bin ⌊y⌋ + 1."""
    y = scores.float().clamp(0, n_bins - 1)
    low = y.floor().long().clamp(max=n_bins - 2)
    frac = y - low.float()
    out = torch.zeros(*y.shape, n_bins, device=y.device)
    out.scatter_(-1, low[..., None], (1 - frac)[..., None])
    out.scatter_add_(-1, (low + 1)[..., None], frac[..., None])
    return out


def _optimizers(task: pl.LightningModule, model: nn.Module):
    optimizer = task.optimizer_factory(ndim_decay_groups(model, task.weight_decay))
    if task.scheduler_factory is None:
        return optimizer
    return {"optimizer": optimizer, "lr_scheduler": task.scheduler_factory(optimizer)}


# -------------------------------------------------------------------------------------------------- pretraining
class GPTPretrainTask(ParallelizeMixin, pl.LightningModule):
    """Causal LM over contiguous windows; ``valid/ppl`` = exp(mean NLL per predicted token) over the split.

    Optimiser groups follow the paper's decay rule (every tensor with ≥ 2 dims, ``weight_decay``); pair with
    ``OpenAIAdam`` (or AdamW) and ``optim.warmup_cosine`` / ``gpt_optim.oai_warmup_cosine``."""

    def __init__(self, model: GPTLMHeadModel, optimizer: Callable[..., torch.optim.Optimizer],
                 scheduler: Callable[..., dict] | None = None, monitor: str = "valid/loss", monitor_mode: str = "min",
                 weight_decay: float = 0.01):
        super().__init__()
        self.model = model
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.monitor, self.monitor_mode, self.weight_decay = monitor, monitor_mode, weight_decay
        self.valid_nll, self.test_nll = MeanMetric(), MeanMetric()

    def lm_nll(self, batch: dict) -> Tensor:
        """NLL of every real target token, ``[n]``."""
        ids = batch["input_ids"]
        nll, _ = token_nll(self.model, self.model(ids), ids, batch.get("lm_mask"), special_rows=False)
        return nll

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        loss = self.lm_nll(batch).mean()
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def _eval(self, batch: dict, metric: MeanMetric) -> None:
        nll = self.lm_nll(batch)
        metric.update(nll.mean(), weight=nll.numel())

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._eval(batch, self.valid_nll)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._eval(batch, self.test_nll)

    def _finish(self, split: str, metric: MeanMetric) -> None:
        if metric.update_count == 0:
            return
        loss = metric.compute()  # MeanMetric reduces across processes itself
        metric.reset()
        self.log(f"{split}/loss", loss)
        self.log(f"{split}/ppl", torch.exp(loss), prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        self._finish("valid", self.valid_nll)

    def on_test_epoch_end(self) -> None:
        self._finish("test", self.test_nll)

    def configure_optimizers(self):
        return _optimizers(self, self.model)


# --------------------------------------------------------------------------------------------------- finetuning
def load_pretrained_state(init_from: str, model: GPTLMHeadModel
                          ) -> tuple[dict[str, Tensor], dict[str, Any], dict[str, Tensor], dict[str, Any]]:
    """From a genlab ``.ckpt`` (GPT pretraining run) or an HF OpenAI GPT folder / weights file: our-named GPT
    tensors, the recorded data identity, the checkpoint's other tensors (HF heads, under the file's names) and the
    HF config.json ({} for a .ckpt). Stops (exit 2) when the checkpoint's architecture is not ``model``'s."""
    from genlab.interop import hf_gpt, hub

    path = hub.resolve(init_from)
    if not path.exists():
        raise CheckpointError(f"task.init_from={init_from}: no such file or folder; give a genlab GPT pretraining "
                              ".ckpt, an HF OpenAI GPT folder or hub id <owner>/<name>[@revision], or null to start "
                              "from scratch.")

    if path.suffix == ".ckpt":
        ckpt = checkpoints.load(path, key="task.init_from")
        state = checkpoints.submodule_weights(ckpt)
        if not state:
            raise CheckpointError(f"task.init_from={init_from}: the checkpoint holds no model.* weights.")
        theirs = checkpoints.record(ckpt).get("config", {}).get("model") or {}
        _check_architecture(init_from, theirs, model)
        return state, {"tokenizer_source": str(path), **checkpoints.data_identity(ckpt)}, {}, {}
    config_file = (path if path.is_dir() else path.parent) / "config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    if config:
        try:
            theirs = hf_gpt.config_from_hf(config)
        except CheckpointError as err:
            raise CheckpointError(f"task.init_from={init_from}: {err}") from err
        _check_architecture(init_from, theirs, model)
    raw = hf_gpt.read_state_dict(path)
    source = f"task.init_from={path}"
    return hf_gpt.genlab_state_from_hf(raw, source), {}, hf_gpt.hf_extra_tensors(raw, source), config


def _check_architecture(init_from: str, theirs: dict[str, Any], model: GPTLMHeadModel) -> None:
    from genlab.interop.hf_files import check_architecture
    from genlab.interop.hf_gpt import ARCH_KEYS

    ours, fixes = model.arch, []
    if theirs.get("n_positions", ours["n_positions"]) < ours["n_positions"]:  # a longer table is cut to ours
        fixes.append(f"model.n_positions={theirs['n_positions']}")
    check_architecture(f"task.init_from={init_from}", theirs, ours, ARCH_KEYS, fixes)


class GPTFinetuneTask(ParallelizeMixin, pl.LightningModule):
    """Finetuning with ``L3 = L2 + lm_coef · L1`` (GPT-1 paper eq. (5)). ``kind``: ``classification`` (also entailment:
    one sequence, ``n_labels`` classes), ``similarity`` (two orders summed before ``W_y``), ``multiple_choice``
    (one scalar per choice, softmax over choices; ``n_labels`` = number of choices, for the metric).
    ``stsb_head`` (similarity regression, GPT-1 paper §3.3): ``soft6`` = 6-way head on the Tree-LSTM soft targets,
    prediction Σ r·p_r; ``mse`` = scalar head; null = class labels.

    ``init_from``: a genlab GPT pretraining ``.ckpt`` or an HF OpenAI GPT folder; ``n_transfer`` (−1 nothing,
    0 embeddings, k bottom blocks, null all) chooses what is copied; the special rows and the head stay freshly
    initialised N(0, 0.02). Ablations of Table 5: ``init_from_pretrained=false`` = "w/o pre-training" (random
    init, while the data keeps the checkpoint's tokenizer), ``lm_coef=0`` = "w/o aux LM". ``prediction_dir``: where
    test predictions go (default ``<run dir>/predictions``)."""

    def __init__(self, model: GPTLMHeadModel, optimizer: Callable[..., torch.optim.Optimizer],
                 scheduler: Callable[..., dict] | None = None, kind: str = "classification", n_labels: int = 2,
                 metric: str = "acc", lm_coef: float = 0.5, clf_pdrop: float = 0.1, stsb_head: str | None = None,
                 weight_decay: float = 0.01, init_from: str | None = None, n_transfer: int | None = None,
                 init_from_pretrained: bool = True, monitor: str = "valid/acc", monitor_mode: str = "max",
                 prediction_dir: str | None = None):
        super().__init__()
        if kind not in KINDS:
            raise ConfigError(f"task.kind={kind!r} is unknown; use one of {KINDS}.")
        if stsb_head not in STSB_HEADS or (stsb_head and kind != "similarity"):
            raise ConfigError(f"task.stsb_head={stsb_head!r} must be null, 'soft6' or 'mse' (the latter two with "
                              "task.kind=similarity).")
        if model.n_special < 3:
            raise ConfigError(f"finetuning needs the 3 special tokens <s> $ <e>: set model.n_special=3 (it is "
                              f"{model.n_special}).")
        if lm_coef < 0:
            raise ConfigError(f"task.lm_coef={lm_coef} must be >= 0.")
        self.model, self.kind, self.lm_coef, self.stsb_head = model, kind, lm_coef, stsb_head
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.monitor, self.monitor_mode, self.weight_decay = monitor, monitor_mode, weight_decay
        self.pretrained_identity: dict[str, Any] = {}
        pretrained = None
        if init_from:
            state, self.pretrained_identity, extra, config = load_pretrained_state(init_from, model)
            copied = transfer_pretrained(model, state, n_transfer) if init_from_pretrained else []
            skipped = "task.init_from_pretrained=false" if not init_from_pretrained else f"task.n_transfer={n_transfer}"
            reasons = {k: f"not transferred ({skipped})" for k in state if k not in copied}
            pretrained = PretrainedWeights.of(model, init_from, copied, {**extra, **dict.fromkeys(reasons)}, config,
                                              reasons=reasons)
        d = model.n_embd
        if kind == "multiple_choice":
            self.head: nn.Module = GPTMultipleChoiceHead(d, clf_pdrop, model.init_std)
        else:
            n_out = {"soft6": 6, "mse": 1}.get(stsb_head or "", n_labels)
            cls = GPTSimilarityHead if kind == "similarity" else GPTClassificationHead
            self.head = cls(d, n_out, clf_pdrop, model.init_std)
        self.metric, self.n_labels, self.prediction_dir = ("corr" if stsb_head else metric), n_labels, prediction_dir
        self.init_report = None  # what init_from gave this task (pretrained_heads.InitReport)
        if pretrained is not None:  # HF DoubleHeads' multiple_choice_head is ours 1:1 (linear on h at <e>)
            heads = {MC_PREFIX: "head.linear.proj."} if kind == "multiple_choice" and init_from_pretrained else {}
            self.init_report = take_heads(self, pretrained, heads)
            log.info(self.init_report.format())
        classification_metrics(self.metric, n_labels)  # validate the name now
        self.metrics = nn.ModuleDict()
        self.split_names: dict[str, list[str]] = {"valid": ["dev"], "test": ["test"]}
        self._predictions: dict[str, list] = {}

    def _metrics(self, stage: str, split: str) -> nn.ModuleDict:
        key = f"{stage}_{split}"
        if key not in self.metrics:
            self.metrics[key] = nn.ModuleDict({"main": classification_metrics(self.metric, self.n_labels),
                                               **{lv: MeanMetric() for lv in LEVELS}}).to(self.device)
        return self.metrics[key]

    def setup(self, stage: str) -> None:
        dm: ClassificationData | MultipleChoiceData | None = datamodule_of(self)
        if dm is not None and hasattr(dm, "dev_splits"):
            self.split_names = {"valid": list(dm.dev_splits), "test": list(dm.test_split_names())}
        for st, names in self.split_names.items():
            for name in names:
                self._metrics(st, name)
        saved = self.pretrained_identity.get("tokenizer")
        if dm is None or not hasattr(dm, "identity") or saved is None:
            return
        current = dm.identity().get("tokenizer")
        if saved != current:
            fix = self.pretrained_identity.get("tokenizer_source", "the pretraining tokenizer")
            raise CheckpointError(f"task.init_from was pretrained with tokenizer {saved} but the data uses {current}; "
                                  f"set data.tokenizer={fix} (the checkpoint's own tokenizer).")

    # --- objective ----------------------------------------------------------------------------------------------
    def _check_shape(self, ids: Tensor) -> None:
        want = {"classification": 2, "similarity": 3, "multiple_choice": 3}[self.kind]
        if ids.dim() != want or (self.kind == "similarity" and ids.shape[1] != 2):
            layout = {2: "[B, T]", 3: "[B, 2, T]" if self.kind == "similarity" else "[B, K, T]"}[want]
            raise ConfigError(f"task.kind={self.kind} expects input_ids {layout}, got {tuple(ids.shape)}; "
                              "check that the data's task matches task.kind.")

    def forward(self, batch: dict) -> tuple[Tensor, GPTOutput]:
        """(head logits ``[B, n_out]`` / ``[B]`` / ``[B, K]``, backbone output)."""
        ids, mask = batch["input_ids"], batch.get("lm_mask")
        self._check_shape(ids)
        out = self.model(ids, token_type_ids=batch.get("token_type_ids"))  # right padding + causal: no pad mask
        index = batch.get("extract_index")
        if index is None:
            index = (mask.sum(-1) - 1) if mask is not None else torch.full(ids.shape[:-1], ids.shape[-1] - 1,
                                                                             device=ids.device)
        return self.head(extract_states(out.hidden, index.long())), out

    def classifier_loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        if self.stsb_head == "soft6":
            return -(stsb_soft_targets(labels) * F.log_softmax(logits.float(), -1)).sum(-1).mean()
        if self.stsb_head == "mse":
            return F.mse_loss(logits.float(), labels.float())
        return F.cross_entropy(logits.float(), labels)

    def lm_loss(self, batch: dict, out: GPTOutput) -> Tensor:
        """Mean over all sequences of the per-sequence mean next-token CE (tokens + special rows)."""
        ids = batch["input_ids"]
        nll, seq = token_nll(self.model, out, ids, batch.get("lm_mask"), special_rows=True)
        return per_sequence_mean(nll, seq, ids[..., 0].numel()).mean()

    def losses(self, batch: dict) -> dict[str, Tensor]:
        logits, out = self(batch)
        parts = {"logits": logits, "clf_loss": self.classifier_loss(logits, batch["labels"])}
        parts["lm_loss"] = self.lm_loss(batch, out) if self.lm_coef > 0 else logits.new_zeros(())
        parts["loss"] = parts["clf_loss"] + self.lm_coef * parts["lm_loss"]
        return parts

    def predict_scores(self, logits: Tensor) -> Tensor:
        if self.stsb_head == "soft6":
            return (logits.float().softmax(-1) * torch.arange(6, device=logits.device)).sum(-1)
        if self.stsb_head == "mse":
            return logits.float()
        return logits.argmax(-1)

    # --- steps --------------------------------------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        parts = self.losses(batch)
        self.log("train/loss", parts["loss"], prog_bar=True)
        self.log("train/clf_loss", parts["clf_loss"])
        if self.lm_coef > 0:
            self.log("train/lm_loss", parts["lm_loss"])
        return parts["loss"]

    def _eval(self, stage: str, batch: dict, dataloader_idx: int) -> None:
        names = self.split_names[stage]
        name = names[dataloader_idx] if dataloader_idx < len(names) else f"{stage}{dataloader_idx}"
        if "labels" not in batch:  # unlabelled split (GLUE test): keep predictions for the submission file
            logits, _ = self(batch)
            self._predictions.setdefault(name, []).extend(self.predict_scores(logits).detach().cpu().tolist())
            return
        parts = self.losses(batch)
        n, prefix = batch["labels"].shape[0], f"{stage}/{'mm/' if name == 'dev_mismatched' else ''}"
        log = {"add_dataloader_idx": False, "batch_size": n}
        self.log(f"{prefix}loss", parts["clf_loss"], sync_dist=True, **log)
        if self.lm_coef > 0:
            self.log(f"{prefix}lm_loss", parts["lm_loss"], sync_dist=True, **log)
        metrics = self._metrics(stage, name)
        scores = self.predict_scores(parts["logits"])
        metrics["main"].update(scores, batch["labels"])
        self.log_dict({f"{prefix}{k}": m for k, m in metrics["main"].items()}, **log)
        self.log(f"{prefix}score", metrics["main"][PAPER_SCORE[self.metric]], **log)
        if "level" in batch:  # RACE-m / RACE-h
            correct = (scores == batch["labels"]).float()
            for lv, level_name in enumerate(LEVELS):
                sel = batch["level"] == lv
                if sel.any():
                    metrics[level_name].update(correct[sel])
                    self.log(f"{prefix}acc_{level_name}", metrics[level_name], **log)
        if stage == "test" and "qid" in batch:
            probs = parts["logits"].float().softmax(-1).tolist()
            self._predictions.setdefault(name, []).extend(
                {"id": q, "answer": int(a) + 1, "probs": p} for q, a, p in zip(batch["qid"], scores.tolist(), probs))

    def validation_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval("valid", batch, dataloader_idx)

    def test_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval("test", batch, dataloader_idx)

    def on_test_epoch_start(self) -> None:
        self._predictions = {}

    def on_test_epoch_end(self) -> None:
        """GLUE submission files through the DataModule's writer; multiple-choice answers (1-based, with the
        probabilities) as ``<dataset>_<split>.json``. Rank 0 writes what it saw (single-process evaluation)."""
        if not self._predictions or not self.trainer.is_global_zero:
            return
        dm: ClassificationData | MultipleChoiceData | None = datamodule_of(self)
        out = Path(self.prediction_dir or Path(self.trainer.default_root_dir) / "predictions")
        out.mkdir(parents=True, exist_ok=True)
        for name, preds in self._predictions.items():
            if preds and isinstance(preds[0], dict):
                dataset = dm.identity().get("dataset", "task") if dm is not None and hasattr(dm, "identity") else "task"
                (out / f"{dataset}_{name}.json").write_text(json.dumps(preds, indent=1))
            elif dm is not None and hasattr(dm, "write_predictions"):
                dm.write_predictions(name, preds, out)

    def configure_optimizers(self):
        return _optimizers(self, self)
