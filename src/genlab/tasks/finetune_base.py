"""Shared machinery of the finetuning tasks (XLNet paper §3.1, App. A.3): pretrained initialisation, the backbone
adapter, optimiser groups with the official weight-decay rule and layer-wise learning-rate decay, and the check
that the checkpoint's tokenizer is the one the data uses.

``init_from`` (a config key) names what to start from:
* a Hugging Face XLNet, BERT or Funnel folder or weights file (``config.json`` + ``model.safetensors``/
  ``pytorch_model.bin``, e.g. the published ``xlnet-base-cased``, ``bert-base-uncased`` or
  ``funnel-transformer/intermediate`` saved offline), or its hub id ``<owner>/<name>[@revision]``
  (genlab.interop.hub) — imported strictly, and only into a model whose config has the checkpoint's architecture
  (else exit 2 with the overrides); when the folder ships its tokenizer (``spiece.model`` / ``vocab.txt``), the
  finetuning data must use it (``data.tokenizer``, which the presets default to ``${task.init_from}``). A Funnel
  checkpoint without a decoder (the hub's ``-base`` variants) serves the sequence tasks; SQuAD needs the decoder;
* a genlab pretraining checkpoint (``.ckpt`` written by ``train.py``, e.g. ``experiment=xlnet_base``): its
  ``model.*`` weights load strictly into the same model config, and its recorded tokenizer identity must equal the
  finetuning data's (``data.tokenizer`` must be the pretraining SentencePiece model). For a Funnel only the body
  (``model.funnel.*``) is loaded, so an MLM or an ELECTRA checkpoint finetunes with the same ``model=funnel_*``;
* null: random initialisation (the ``_mini`` presets; results are then from scratch).

The finetuned heads of an HF task model (``XLNetForSequenceClassification``, ``XLNetForQuestionAnswering``,
``BertForSequenceClassification`` ...) load into the task's head where names and shapes map 1:1
(genlab.tasks.pretrained_heads); one log block lists what was loaded, what is new and what was ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn

from genlab import checkpoints
from genlab.errors import CheckpointError, ConfigError
from genlab.interop import hf_bert, hf_funnel, hf_xlnet, hub
from genlab.interop.hf_files import check_architecture
from genlab.models.backbones import adapt
from genlab.models.bert import BertForPretraining
from genlab.models.funnel import FunnelModel
from genlab.models.funnel_pretraining import FunnelElectra, FunnelForMaskedLM
from genlab.models.xlnet import XLNetLMHeadModel, XLNetModel
from genlab.parallel import ParallelizeMixin
from genlab.tasks.data_interface import IdentifiedData, datamodule_of
from genlab.tasks.layerwise_lr import check_mode, layer_decay_groups
from genlab.tasks.optim import TaskOptimization, configured_lr
from genlab.tasks.pretrained_heads import PretrainedWeights, take_heads

log = logging.getLogger("genlab")
FUNNELS = (FunnelModel, FunnelForMaskedLM, FunnelElectra)


def load_pretrained(model: nn.Module, init_from: str, token_level: bool = False
                    ) -> tuple[dict[str, Any], PretrainedWeights]:
    """Load weights into ``model`` in place; returns the checkpoint's recorded data identity (may be empty) and
    what was loaded, with the checkpoint tensors left for the task's heads.
    ``token_level``: the task reads every position (a Funnel then needs the checkpoint's decoder)."""
    path = hub.resolve(init_from)
    if not path.exists():
        raise CheckpointError(f"task.init_from={init_from}: no such file or folder; give an HF XLNet/BERT/Funnel "
                              "folder, a hub id <owner>/<name>[@revision] or a genlab .ckpt file, or null to start "
                              "from scratch.")
    if path.suffix == ".ckpt":
        ckpt = checkpoints.load(path, key="task.init_from")
        state = checkpoints.submodule_weights(ckpt)
        if not state:
            raise CheckpointError(f"task.init_from={init_from}: the checkpoint holds no model.* weights.")
        # data.tokenizer=<the .ckpt> stands for the run's own tokenizer (genlab.data.tokenizers.from_checkpoint)
        identity = {"tokenizer_source": str(path), **checkpoints.data_identity(ckpt)}
        ours = {k: v for k, v in _arch(model).items() if k == "vocab_size"}  # the data's, through model_overrides
        checkpoints.check_data_identity(identity, ours, f"task.init_from={init_from}",
                                        fix=f"finetune on the checkpoint's own tokenizer: data.tokenizer={path}")
        _check_ckpt_architecture(model, ckpt, init_from)
        if isinstance(model, FUNNELS):
            loaded = _load_funnel_body(model, state, init_from)
        else:
            loaded = _load_strict_but_mlm_transform(model, state, init_from)
        return identity, PretrainedWeights.of(model, str(path), loaded, {})
    if isinstance(model, (XLNetLMHeadModel, XLNetModel)):
        interop: Any = hf_xlnet
    elif isinstance(model, BertForPretraining):
        interop = hf_bert
    elif isinstance(model, FUNNELS):
        interop = hf_funnel
    else:
        raise CheckpointError(f"task.init_from={init_from}: only XLNet, BERT and Funnel import HF folders; for "
                              f"{type(model).__name__} give a genlab .ckpt.")
    config = _check_hf_architecture(model, path, interop)
    state = interop.read_state_dict(path)
    if isinstance(model, FUNNELS):
        report = _import_hf_funnel(model, state, path, token_level)
    else:
        report = interop.load_hf_state_dict(model, state, source=f"task.init_from={path}")
    # an unused key the importer renamed (TF LayerNorm names) has no tensor here: still reported, as ignored
    weights = PretrainedWeights.of(model, str(path), report.loaded, {k: state.get(k) for k in report.unused}, config,
                                   file_names=getattr(report, "file_names", {}), notes=getattr(report, "notes", []))
    tokenizer = _shipped_tokenizer(path)
    if tokenizer is None:
        return {}, weights
    from genlab.data.tokenizers.from_checkpoint import load_tokenizer

    return {"tokenizer": load_tokenizer(tokenizer).identity, "tokenizer_source": str(tokenizer)}, weights


def _load_strict_but_mlm_transform(model: nn.Module, state: dict[str, torch.Tensor], init_from: str) -> list[str]:
    """Strict, except for BERT's optional MLM transform (``model.mlm_transform``): finetuning never reads the MLM
    head, so a checkpoint pretrained with or without it fits a finetuning model built either way."""
    optional, ours = "cls.predictions.transform.", model.state_dict()
    state = {k: v for k, v in state.items() if not k.startswith(optional) or k in ours}
    loaded = list(state)
    state.update({k: v for k, v in ours.items() if k.startswith(optional) and k not in state})
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"task.init_from={init_from} does not match the model config ({err}); use the "
                              "model= preset the checkpoint was pretrained with.") from err
    return loaded


def _load_funnel_body(model: nn.Module, state: dict[str, torch.Tensor], init_from: str) -> list[str]:
    """A genlab Funnel checkpoint (MLM or ELECTRA): the body strictly, the pretraining heads (MLM head, generator,
    discriminator head) left out, since finetuning never reads them."""
    body = model if isinstance(model, FunnelModel) else model.funnel
    prefix = "" if isinstance(model, FunnelModel) else "funnel."
    part = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    try:
        body.load_state_dict(part, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"task.init_from={init_from} does not match the Funnel body of the model config ({err}); "
                              "use the model= sizes the checkpoint was pretrained with.") from err
    return [prefix + k for k in part]


def _import_hf_funnel(model: nn.Module, state: dict[str, torch.Tensor], path: Path, token_level: bool):
    """An HF Funnel checkpoint into the body: a checkpoint without a decoder (``FunnelBaseModel``, the hub's
    ``-base`` variants, sequence classification) fits when the task does not need the decoder, which is then
    dropped; the HF task heads are left to the task (pretrained_heads)."""
    from genlab.interop.hf_funnel import load_hf_state_dict

    body = model if isinstance(model, FunnelModel) else model.funnel
    has_decoder = any(k.startswith(("decoder.", "funnel.decoder.")) for k in state)
    if body.decoder is not None and not has_decoder:
        if token_level:
            raise CheckpointError(f"task.init_from={path} has no decoder (an encoder-only '-base' checkpoint), but "
                                  "this task reads every position through the Funnel decoder; use the full "
                                  "checkpoint (e.g. funnel-transformer/intermediate, not intermediate-base).")
        body.decoder = None
    report = load_hf_state_dict(body, state, source=f"task.init_from={path}")
    prefix = "" if isinstance(model, FunnelModel) else "funnel."
    report.loaded = [prefix + k for k in report.loaded]
    report.file_names = {prefix + k: v for k, v in report.file_names.items()}
    return report


def _shipped_tokenizer(path: Path) -> Path | None:
    """The tokenizer file an HF checkpoint folder ships (spiece.model, vocab.txt, tokenizer.json), if any."""
    from genlab.data.tokenizers.from_checkpoint import tokenizer_file

    return tokenizer_file(path if path.is_dir() else path.parent)


def _arch_family(model: nn.Module) -> str:
    if isinstance(model, BertForPretraining):
        return "bert"
    return "funnel" if isinstance(model, FUNNELS) else "xlnet"


def _arch(model: nn.Module) -> dict[str, Any]:
    """The constructor arguments a BERT or XLNet model records (empty for other backbones)."""
    inner = model.transformer if isinstance(model, XLNetLMHeadModel) else model
    return dict(getattr(inner, "arch", {}))


def _check_hf_architecture(model: nn.Module, path: Path, interop: Any) -> dict[str, Any]:
    """Shapes are checked by the strict import; this catches what shapes cannot (the activation, LayerNorm eps, the
    head split) and names every override to set. Returns the folder's config.json ({} without one)."""
    import json

    config = (path if path.is_dir() else path.parent) / "config.json"
    if not config.is_file():
        return {}
    hf_config = json.loads(config.read_text())
    try:
        theirs = interop.config_from_hf(hf_config)
    except CheckpointError as err:
        raise CheckpointError(f"task.init_from={path}: {err}") from err
    ours, fixes = _arch(model), []
    if theirs["vocab_size"] != ours["vocab_size"]:
        shipped = _shipped_tokenizer(path) or "<the checkpoint's spiece.model / vocab.txt>"
        fixes.append(f"data.tokenizer={shipped} (its vocabulary has {theirs['vocab_size']} tokens, the data's "
                     f"tokenizer {ours['vocab_size']})")
    keys = [k for k in interop.ARCH_KEYS if k != "vocab_size"]
    check_architecture(f"task.init_from={path}", theirs, ours, keys, fixes)
    return hf_config


def _check_ckpt_architecture(model: nn.Module, ckpt: dict[str, Any], init_from: str) -> None:
    """A genlab checkpoint records its run's model config: every key that changes the outputs must match."""
    theirs = checkpoints.record(ckpt).get("config", {}).get("model") or {}
    interop = {"bert": hf_bert, "funnel": hf_funnel, "xlnet": hf_xlnet}[_arch_family(model)]
    keys = [k for k in interop.ARCH_KEYS if k != "vocab_size"]  # the data's: checked with the tokenizer identity
    check_architecture(f"task.init_from={init_from}", theirs, _arch(model), keys)


class FinetuneTask(TaskOptimization, ParallelizeMixin, pl.LightningModule):
    """Base class: backbone adapter + optimiser wiring; subclasses add a head and the objective. Sharded (FSDP2),
    checkpointed and compiled per backbone block by ``genlab.parallel`` like the pretraining tasks."""

    def __init__(self, model: nn.Module, optimizer: Callable[..., torch.optim.Optimizer],
                 scheduler: Callable[..., dict] | None, monitor: str, monitor_mode: str, weight_decay: float,
                 layer_decay: float, layer_decay_mode: str, summary_dropout: float, init_from: str | None,
                 require_pretrained: bool = False, prediction_dir: str | None = None, token_level: bool = False
                 ) -> None:
        super().__init__()
        self.prediction_dir = prediction_dir
        if require_pretrained and not init_from:
            raise ConfigError("this preset finetunes a pretrained model: set task.init_from=<HF XLNet/BERT/Funnel "
                              "folder, hub id <owner>/<name> or genlab .ckpt> (data.tokenizer follows it), or "
                              "task.require_pretrained=false to train from scratch.")
        if monitor_mode not in ("min", "max"):
            raise ConfigError(f"task.monitor_mode={monitor_mode!r} must be 'min' or 'max'.")
        self.pretrained_identity, self._pretrained = (load_pretrained(model, init_from, token_level) if init_from
                                                       else ({}, None))
        self.init_report = None  # what init_from gave this task (pretrained_heads.InitReport), once heads exist
        self.backbone = adapt(model, summary_dropout, token_level)
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.monitor, self.monitor_mode = monitor, monitor_mode
        self.weight_decay, self.layer_decay = weight_decay, layer_decay
        self.layer_decay_mode = check_mode(layer_decay_mode)

    def load_pretrained_heads(self, heads: dict[str, str]) -> None:
        """Subclasses call this once their head exists: the checkpoint's task heads that ``heads`` maps onto this
        task (HF prefix -> ours) are copied, and what was loaded / new / ignored is logged."""
        weights, self._pretrained = self._pretrained, None
        if weights is None:
            return
        self.init_report = take_heads(self, weights, heads)
        log.info(self.init_report.format())

    def check_tokenizer(self) -> None:
        """A pretrained checkpoint must be finetuned on text tokenised with its own tokenizer."""
        dm: IdentifiedData | None = datamodule_of(self)
        if dm is None or not hasattr(dm, "identity") or not self.pretrained_identity:
            return
        fix = self.pretrained_identity.get("tokenizer_source", "the pretraining SentencePiece .model file")
        checkpoints.check_data_identity(self.pretrained_identity, dm.identity(), "task.init_from",
                                        keys=checkpoints.VOCABULARY_KEYS,
                                        fix=f"set data.tokenizer={fix} (the checkpoint's own tokenizer)")

    def predictions_dir(self) -> Path:
        """Where prediction files go: ``task.prediction_dir``, else ``<run dir>/predictions`` (the trainer's root,
        so the place does not depend on which logger is first)."""
        out = Path(self.prediction_dir or Path(self.trainer.default_root_dir) / "predictions")
        out.mkdir(parents=True, exist_ok=True)
        return out

    # -- optimisation (configure_optimizers: genlab.tasks.optim.TaskOptimization) ----------------------------
    def layer_count(self) -> int:
        return self.backbone.n_layer

    def layer_depths(self) -> dict[str, Any]:
        """The backbone's own layer depths for layer-wise decay (Funnel), else the ``layer.<l>`` rule."""
        depth = getattr(self.backbone, "layer_depth", None)
        return {} if depth is None else {"depth": depth, "n_ids": self.backbone.n_depth_ids}

    def optimizer_groups(self) -> list[dict[str, Any]]:
        rate = self.layer_decay if self.layer_decay_mode == "lr_groups" else 1.0  # grad_scale: after clipping
        return layer_decay_groups(self, configured_lr(self.optimizer_factory), self.weight_decay, rate,
                                  n_layer=self.layer_count(), **self.layer_depths())
