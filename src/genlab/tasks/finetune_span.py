"""SQuAD span extraction finetuning with the XLNet span head (XLNet paper §3.3).

Training: ``0.5·(CE_start + CE_end)`` with end logits teacher-forced on the gold start, plus (SQuAD 2.0) ``0.5·BCE``
of the answer-class logit against ``is_impossible``. Evaluation: start/end beam search per window, n-best texts
across windows, null score = min over windows of the answer-class logit, then the official EM/F1
(genlab.metrics.squad_eval). SQuAD 2.0 logs the scores at ``null_threshold`` and, with
``threshold: search_on_dev``, the best threshold found on the dev set itself (``best_exact``/``best_f1``, what
the official script reports). A SQuAD 1.1 dev set ignores the answerability head and always answers,
also when the model was trained on 2.0 (``data.eval_version=1.1``: the SQuAD 1.1 protocol of XLNet paper §3.3).
Prediction files (official format): ``predictions.json``, ``null_odds.json``, ``nbest_predictions.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from genlab.data.finetune.squad_predictions import postprocess
from genlab.errors import ConfigError
from genlab.metrics.squad_eval import evaluate_v1, evaluate_v2
from genlab.models.heads import SpanHead
from genlab.tasks.data_interface import SpanData, datamodule_of
from genlab.tasks.finetune_base import FinetuneTask
from genlab.tasks.pretrained_heads import SPAN_HEADS

RESULT_KEYS = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "cls_logits")


class SpanExtractionTask(FinetuneTask):
    monitor_needs_full_pass = True  # F1/EM exist only after a whole dev pass (train.py refuses limit_val_batches)

    def __init__(self, model: nn.Module, optimizer: Callable[..., torch.optim.Optimizer],
                 scheduler: Callable[..., dict] | None, monitor: str = "valid/best_f1", monitor_mode: str = "max",
                 version: str = "2.0", start_n_top: int = 5, end_n_top: int = 5, n_best: int = 5,
                 max_answer_length: int = 64, threshold: str = "search_on_dev", null_threshold: float = 0.0,
                 weight_decay: float = 0.0, layer_decay: float = 0.75, layer_decay_mode: str = "lr_groups",
                 init_from: str | None = None, require_pretrained: bool = False,
                 prediction_dir: str | None = None) -> None:
        super().__init__(model, optimizer, scheduler, monitor, monitor_mode, weight_decay, layer_decay,
                         layer_decay_mode, 0.0, init_from, require_pretrained, prediction_dir, token_level=True)
        if version not in ("1.1", "2.0"):
            raise ConfigError(f"task.version={version!r} must be '1.1' or '2.0'.")
        if threshold not in ("search_on_dev", "fixed"):
            raise ConfigError(f"task.threshold={threshold!r} must be 'search_on_dev' or 'fixed'.")
        self.version, self.threshold, self.null_threshold = version, threshold, null_threshold
        self._dev_version = version  # the scored dev set's version, read from the DataModule at each evaluation
        self.start_n_top, self.end_n_top, self.n_best = start_n_top, end_n_top, n_best
        self.max_answer_length = max_answer_length
        body = getattr(self.backbone, "transformer", None) or getattr(self.backbone, "funnel", None)
        eps = getattr(body, "arch", {}).get("layer_norm_eps", 1e-12)
        self.head = SpanHead(self.backbone.d_model, layer_norm_eps=eps)
        self.load_pretrained_heads(SPAN_HEADS)
        self._results: dict[int, dict[str, np.ndarray]] = {}

    def setup(self, stage: str) -> None:
        self.check_tokenizer()

    def _hidden(self, batch: dict) -> torch.Tensor:
        return self.backbone.encode(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        hidden = self._hidden(batch)
        s_lp, e_lp, cls = self.head(hidden, batch["p_mask"], batch["cls_index"], batch["start_positions"])
        imp = batch["is_impossible"] if self.version == "2.0" else None
        loss = self.head.loss(s_lp, e_lp, cls, batch["start_positions"], batch["end_positions"], imp)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def _eval_step(self, batch: dict) -> None:
        beams = self.head.beam(self._hidden(batch), batch["p_mask"], batch["cls_index"], self.start_n_top,
                               self.end_n_top)
        for k, f in enumerate(batch["feature_index"].tolist()):
            self._results[f] = {key: getattr(beams, key)[k].float().cpu().numpy() for key in RESULT_KEYS}

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step(batch)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_start(self) -> None:
        self._results = {}

    on_test_epoch_start = on_validation_epoch_start

    def scores(self, examples, feats, data, version: str | None = None) -> tuple[dict[str, float], tuple]:
        """Official scores of the collected windows on ``data``. ``version`` is the dev set's: "1.1" ignores the
        answer-class head and always answers (also for a model trained on 2.0, the XLNet paper's 1.1 protocol)."""
        n = len(feats.cls_index)
        results = {k: np.stack([self._results[f][k] for f in range(n)]) for k in RESULT_KEYS}
        preds, null, nbest = postprocess(examples, feats, results, self.start_n_top, self.end_n_top, self.n_best,
                                         self.max_answer_length)
        if (version or self.version) == "1.1":
            return evaluate_v1(data, preds), (preds, null, nbest)
        out = evaluate_v2(data, preds, null, self.null_threshold)
        return out, (preds, null, nbest)

    def _finish(self, stage: str) -> None:
        dm: SpanData = datamodule_of(self)
        feats = dm.features["dev"]
        if len(self._results) < len(feats.cls_index):  # sanity/limited runs: score only complete passes
            return
        self._dev_version = getattr(dm, "dev_version", self.version)
        out, (preds, null, nbest) = self.scores(dm.dev_examples, feats, dm.dev_data, self._dev_version)
        keep = ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_exact", "best_f1",
                "best_f1_thresh")
        self.log_dict({f"{stage}/{k.lower()}": float(v) for k, v in out.items() if k in keep})
        if stage == "test":
            self._write(preds, null, nbest, out)

    def on_validation_epoch_end(self) -> None:
        self._finish("valid")

    def on_test_epoch_end(self) -> None:
        self._finish("test")

    def _write(self, preds, null, nbest, out) -> None:
        root = self.predictions_dir()
        if self._dev_version == "2.0" and self.threshold == "fixed":
            preds = {q: ("" if null[q] > self.null_threshold else t) for q, t in preds.items()}
        (root / "predictions.json").write_text(json.dumps(preds, indent=1))
        (root / "null_odds.json").write_text(json.dumps(null, indent=1))
        (root / "nbest_predictions.json").write_text(json.dumps(nbest, indent=1))
        (root / "eval.json").write_text(json.dumps(out, indent=1))
