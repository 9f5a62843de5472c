"""Semi-supervised QA with Generative Domain-Adaptive Nets (Yang thesis §3.2.4, Eq. (3.8)-(3.9),
Algorithm 1).

Manual optimisation, exactly one parameter update per training step (so ``trainer.max_steps`` counts updates):

1. ``mle_steps`` updates of G by MLE on L (methods with a generator; skipped with ``g_init_from``); with
   ``mle_keep_best`` the G with the lowest dev-question NLL (``valid/g_nll``) seen meanwhile is restored after.
2. D starts from its random init (``d_pretrain_steps`` > 0 would first fit it on L alone: off by default).
3. Algorithm 1: ``t_d`` D updates, then ``t_g`` G updates, repeated. A D update maximises
   ``J(L, d_true, D) + J(U_G, d_gen, D)`` on one L batch and one U batch whose questions come from the *current* G
   (no grad; context pseudo-questions for the Context rows), each term a mean over its own batch. A G update samples
   one question per (p, a) of a U batch (train mode, log-probs kept), scores it with D frozen (eval mode, no grad) and
   steps REINFORCE ``−λ·mean((R − b)·log P_G(q|p,a))``, R and b constants.

``method`` picks the Table 3.4 row (gdan_objectives.METHODS): where the U questions come from, whether domain tags
are appended, and G's reward (``adv``: log P_{D,d_true}(a|p,q); ``dual``: D untagged; ``gan``: the domain
classifier's log P(human)); rows without a G update never step G after MLE. Evaluation always appends ``d_true``
when the method uses tags and decodes the best span of at most ``max_answer_len`` tokens; EM/F1 follow the official
SQuAD v1.1 script (genlab.metrics.squad_eval) on the substring of the original context, logged as fractions
(``valid/f1`` for early stopping on dev, with ``valid/best_f1`` the best so far = the dev F1 of the checkpoint that
is tested; ``test/f1``/``test/exact`` on the held-out test split).
``train/d_loss_gen`` (D's loss on the U_G batch, −J(U_G, d_gen, D)) is logged at every D update (Figure 3.8).

Batches (D ids in D's vocabulary with <pad>=0; G ids in G's vocabulary, ``g_p_ext`` in G's extended vocabulary;
every sequence right-padded, masks bool with a valid prefix; D and G views of a paragraph are the same tokens):

* training: ``{"lab": L, "unl": U}``; ``unl`` is never read by ``sl`` (its loader need not exist).
  L: ``p_ids [B,T]``, ``p_mask [B,T]``, ``q_ids [B,Tq]``, ``q_mask [B,Tq]``, ``start [B]``, ``end [B]`` (inclusive
  token span); for generator methods also ``g_p_ids [B,T]``, ``g_p_ext [B,T]``, ``g_q_ids [B,Tg]`` (target ids in the
  extended vocabulary, ending with <eos>), ``g_q_mask [B,Tg]``.
  U (paragraph + extracted answer chunk, no question): ``p_ids``, ``p_mask``, ``start``, ``end``, and for generator
  methods ``g_p_ids``, ``g_p_ext``; ``index [B]`` (row of U) with ``cache_generated``.
* valid/test: L's D keys plus ``qid`` (list[str]), ``context`` (list[str], original text), ``offsets [B,T,2]``
  (character start/end of each paragraph token in ``context``), ``answers`` (list[list[str]], gold texts); with
  the G keys of L as well, G's dev-question NLL is logged as ``valid/g_nll``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor

from genlab.errors import CheckpointError, ConfigError
from genlab.metrics.squad_eval import evaluate_v1
from genlab.models.gdan import GDAN, TAG_GEN, TAG_TRUE
from genlab.models.gdan.generator import Generated
from genlab.tasks.gdan_objectives import (
    METHODS,
    Baseline,
    Method,
    WeightSchedule,
    balanced_d_loss,
    best_span,
    cat_padded,
    context_question,
    domain_bce,
    ganin_lambda,
    reinforce_loss,
    rl_baseline,
)
from genlab.utils import atomic_write


class GDANTask(pl.LightningModule):
    def __init__(self, model: GDAN, optimizer: Callable, g_mle_optimizer: Callable | None = None,
                 g_rl_optimizer: Callable | None = None, scheduler: Any = None, method: Method = "gen_domain_adv",
                 monitor: str = "valid/f1", monitor_mode: str = "max", t_d: int = 1, t_g: int = 1,
                 mle_steps: int = 0, mle_keep_best: bool = True, g_init_from: str | None = None,
                 d_pretrain_steps: int = 0, d_grad_clip: float | None = 10.0, g_mle_grad_clip: float | None = 5.0,
                 g_rl_grad_clip: float | None = None, baseline: Baseline = "batch_mean",
                 baseline_momentum: float = 0.9, reward_clip: float | None = None,
                 weight_schedule: WeightSchedule | None = None, mle_mix_weight: float = 0.0,
                 decode_for_d: Literal["sample", "greedy"] = "sample", context_window: int = 5,
                 max_answer_len: int = 15, cache_generated: bool = False, prediction_dir: str | None = None) -> None:
        super().__init__()
        if method not in METHODS:
            raise ConfigError(f"task.method={method!r}: choose one of {sorted(METHODS)}.")
        spec = METHODS[method]
        if scheduler is not None:
            raise ConfigError("task.scheduler must be null for GDAN: learning rates are the optimisers' own.")
        if t_d < 1 or t_g < 1:
            raise ConfigError(f"task.t_d={t_d} and task.t_g={t_g} must both be >= 1 (Algorithm 1's T_D, T_G).")
        if spec.unlabeled_source == "generator":
            if model.generator is None:
                raise ConfigError(f"task.method={method} needs a question generator: use model=gdan (not "
                                  "gdan_reader).")
            if g_mle_optimizer is None or g_rl_optimizer is None:
                raise ConfigError(f"task.method={method} needs task.g_mle_optimizer and task.g_rl_optimizer.")
        if spec.g_update == "gan" and model.domain_classifier is None:
            raise ConfigError("task.method=gen_gan needs model.domain_classifier (model=gdan_gan).")
        if cache_generated and spec.g_update != "none":
            raise ConfigError(f"task.cache_generated=true with method={method}: G changes during training, so its "
                              "questions cannot be cached; use it with gen / gen_domain only.")
        if g_init_from is not None and mle_steps:
            raise ConfigError("task.g_init_from loads an MLE-trained G; set task.mle_steps=0 with it.")
        # Optimiser factories stay out of the hparams: checkpoints must load with torch.load(weights_only=True).
        self.save_hyperparameters(ignore=["model", "optimizer", "g_mle_optimizer", "g_rl_optimizer", "scheduler"])
        self.automatic_optimization = False
        self.model, self.spec, self.method = model, spec, method
        self.make_opt_d, self.make_opt_g_mle, self.make_opt_g_rl = optimizer, g_mle_optimizer, g_rl_optimizer
        self.monitor = monitor
        self.uses_generator = spec.unlabeled_source == "generator"
        self.mle_steps = mle_steps if self.uses_generator else 0
        self.weight_schedule = weight_schedule or spec.weight_schedule
        # Training state beyond weights and optimisers (saved in checkpoints, see on_save_checkpoint).
        self.counts = {"mle": 0, "d_pre": 0, "d": 0, "g": 0}
        self.mle_closed = not self.uses_generator or self.mle_steps == 0
        self.running_baseline: float | None = None
        self.best_g_nll = math.inf
        self.best_dev_f1 = -math.inf  # logged as valid/best_f1: the dev F1 of the checkpoint selected for test
        self.best_dev_step = -1  # ... and valid/best_step, the global step it was reached at
        self.best_g_state: dict[str, Tensor] | None = None
        self.generated_cache: dict[int, Tensor] = {}
        self.generated_at_g_step: int | None = None  # G updates done when the last U_G batch was generated
        self.frozen_g_dev_nll: tuple[float, float] | None = None  # (NLL sum, tokens) of dev under a G that is final
        if g_init_from is not None:
            self._load_generator(g_init_from)

    # ------------------------------------------------------------------------------------------------ set-up
    def _load_generator(self, path: str) -> None:
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError) as err:
            raise CheckpointError(f"task.g_init_from={path}: cannot load ({err}).") from err
        state = ckpt.get("state_dict", ckpt) if isinstance(ckpt, dict) else {}
        prefix = "model.generator."
        gen = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        if not gen:
            raise CheckpointError(f"task.g_init_from={path} holds no '{prefix}*' weights; pass a checkpoint of "
                                  "this task (e.g. a run with a generator method).")
        self.model.generator.load_state_dict(gen)

    def setup(self, stage: str) -> None:
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if stage == "fit" and self.spec.unlabeled_source != "none" and getattr(dm, "has_unlabeled", True) is False:
            raise ConfigError(f"task.method={self.method} trains on unlabelled (paragraph, answer) pairs, but the "
                              "data module reads none: set data.unlabeled=true (and data.unlabeled_path).")
        vocab_map = getattr(dm, "g_to_d_ids", None)
        if callable(vocab_map) and self.model.generator is not None:
            self.model.set_vocab_map(vocab_map())

    def configure_optimizers(self):
        d_params = [p for p in self.model.reader.parameters() if p.requires_grad]
        if self.model.domain_classifier is not None and self.spec.g_update == "gan":
            d_params += list(self.model.domain_classifier.parameters())
        opts = [self.make_opt_d(d_params)]
        if self.uses_generator:
            g_params = list(self.model.generator.parameters())
            opts += [self.make_opt_g_mle(g_params), self.make_opt_g_rl(g_params)]
        return opts

    # ------------------------------------------------------------------------------------------------ schedule
    def next_update(self) -> Literal["mle", "d_pretrain", "d", "g"]:
        """Which update Algorithm 1 makes next (MLE pre-training, optional D pre-training, then T_D D / T_G G)."""
        if self.uses_generator and self.counts["mle"] < self.mle_steps:
            return "mle"
        if self.counts["d_pre"] < self.hparams.d_pretrain_steps:
            return "d_pretrain"
        if self.spec.g_update == "none":
            return "d"
        t_d, t_g = self.hparams.t_d, self.hparams.t_g
        return "d" if (self.counts["d"] + self.counts["g"]) % (t_d + t_g) < t_d else "g"

    def _close_mle(self) -> None:
        """Leaving MLE: restore the G with the best dev-question NLL (``mle_keep_best``) and drop the snapshot."""
        if self.hparams.mle_keep_best and self.best_g_state is not None:
            self.model.generator.load_state_dict(self.best_g_state)
        self.best_g_state = None
        self.mle_closed = True

    def rl_weight(self) -> float:
        """Multiplier of G's policy-gradient loss: 1, or Ganin's λ(p) with p the fraction of the alternating phase
        done (Gen + GAN / Gen + dual)."""
        if self.weight_schedule == "constant":
            return 1.0
        max_steps = self.trainer.max_steps
        if max_steps is None or max_steps <= 0:
            raise ConfigError("task.weight_schedule=ganin ramps over the run: set trainer.max_steps.")
        start = self.counts["mle"] + self.counts["d_pre"]
        return ganin_lambda((self.counts["d"] + self.counts["g"]) / max(1, max_steps - start))

    # ------------------------------------------------------------------------------------------------ losses
    def mle_loss(self, lab: dict[str, Tensor]) -> dict[str, Tensor]:
        """G's teacher-forced NLL on L: per-question sum over steps (incl. <eos>), averaged over the batch."""
        g = self.model.generator
        enc = g.encode(lab["g_p_ids"], lab["g_p_ext"], lab["p_mask"], lab["start"], lab["end"])
        log_probs = g.teacher_forced(enc, lab["g_q_ids"], lab["g_q_mask"])
        total = -log_probs.sum()
        return {"loss": total / len(log_probs), "nll_per_token": total.detach() / lab["g_q_mask"].sum()}

    def unlabeled_questions(self, unl: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """D-vocabulary questions for a U batch: context pseudo-questions, or questions from the current G."""
        if self.spec.unlabeled_source == "context":
            return context_question(unl["p_ids"], unl["p_mask"], unl["start"], unl["end"],
                                    self.hparams.context_window, self.model.reader.unk_id, self.model.reader.pad_id)
        g = self.model.generator
        rows = unl["index"].tolist() if self.hparams.cache_generated else None
        if rows is not None and all(r in self.generated_cache for r in rows):
            return self._from_cache(rows)
        with torch.no_grad():  # G only supplies data here: integer ids, no path from D's loss back into G
            enc = g.encode(unl["g_p_ids"], unl["g_p_ext"], unl["p_mask"], unl["start"], unl["end"])
            gen = g.sample(enc, greedy=self.hparams.decode_for_d == "greedy")
            q, q_mask = self.model.questions_for_reader(gen, unl["g_p_ext"], unl["p_ids"])
        self.generated_at_g_step = self.counts["g"]
        if rows is not None:
            for r, ids, m in zip(rows, q.cpu(), q_mask.cpu()):
                self.generated_cache.setdefault(r, ids[m])
            return self._from_cache(rows)
        return q, q_mask

    def _from_cache(self, rows: list[int]) -> tuple[Tensor, Tensor]:
        seqs = [self.generated_cache[r] for r in rows]
        q = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=self.model.reader.pad_id)
        lengths = torch.tensor([len(s) for s in seqs])
        mask = torch.arange(q.shape[1])[None, :] < lengths[:, None]
        return q.to(self.device), mask.to(self.device)

    def d_loss(self, batch: dict[str, dict[str, Tensor]], with_unlabeled: bool = True) -> dict[str, Tensor]:
        """Eq. 3.8 on one L batch (tag d_true) and one U_G batch (tag d_gen), in one forward pass of D but with a
        separate mean per dataset; plus the domain classifier's BCE for Gen + GAN."""
        lab = batch["lab"]
        parts = [(lab["p_ids"], lab["p_mask"], lab["q_ids"], lab["q_mask"], lab["start"], lab["end"], TAG_TRUE)]
        if with_unlabeled and self.spec.unlabeled_source != "none":
            unl = batch["unl"]
            q, q_mask = self.unlabeled_questions(unl)
            parts.append((unl["p_ids"], unl["p_mask"], q, q_mask, unl["start"], unl["end"], TAG_GEN))
        p_ids, p_mask, q_ids, q_mask = (cat_padded([x[i] for x in parts], pad) for i, pad in
                                        ((0, self.model.reader.pad_id), (1, False), (2, self.model.reader.pad_id),
                                         (3, False)))
        start, end = torch.cat([x[4] for x in parts]), torch.cat([x[5] for x in parts])
        tag = None
        if self.spec.domain_tags:
            tag = torch.cat([torch.full_like(x[4], x[6]) for x in parts])
        res = self.model.reader(p_ids, p_mask, q_ids, q_mask, tag)
        nll = -res.log_likelihood(start, end)
        n_lab = len(lab["start"])
        out = {"loss_lab": nll[:n_lab].mean()}
        nll_unl = nll[n_lab:] if len(parts) > 1 else None
        out["loss"] = balanced_d_loss(nll[:n_lab], nll_unl)
        if nll_unl is not None:
            out["loss_gen"] = nll_unl.mean()
            if self.spec.g_update == "gan":  # the classifier learns on D's features without moving them
                logits = self.model.domain_classifier(res.hidden.detach(), res.answer_mask)
                out["domain_bce"] = domain_bce(logits[:n_lab], logits[n_lab:])
                out["loss"] = out["loss"] + out["domain_bce"]
        return out

    @torch.no_grad()
    def reward(self, unl: dict[str, Tensor], q_ids: Tensor, q_mask: Tensor) -> Tensor:
        """R for G's questions, with D (and the classifier) frozen in eval mode: ``adv`` log P_{D,d_true}(a|p,q);
        ``dual`` log P_D(a|p,q) as D is trained on generated data; ``gan`` log P_classifier(human | p, q)."""
        reader, clf = self.model.reader, self.model.domain_classifier
        modes = [(m, m.training) for m in (reader, clf) if m is not None]
        for m, _ in modes:
            m.eval()
        try:
            kind = self.spec.g_update
            tag = None
            if kind == "adv":
                tag = torch.full_like(unl["start"], TAG_TRUE)
            elif kind == "dual" and self.spec.domain_tags:
                tag = torch.full_like(unl["start"], TAG_GEN)
            res = reader(unl["p_ids"], unl["p_mask"], q_ids, q_mask, tag)
            if kind == "gan":
                return F.logsigmoid(clf(res.hidden, res.answer_mask))
            return res.log_likelihood(unl["start"], unl["end"])
        finally:
            for m, was_training in modes:
                m.train(was_training)

    def g_loss(self, unl: dict[str, Tensor], lab: dict[str, Tensor] | None = None,
               weight: float = 1.0) -> dict[str, Any]:
        """REINFORCE on one U batch: one sampled question per (p, a), log-probs kept from that same pass."""
        g = self.model.generator
        enc = g.encode(unl["g_p_ids"], unl["g_p_ext"], unl["p_mask"], unl["start"], unl["end"])
        gen: Generated = g.sample(enc)
        q, q_mask = self.model.questions_for_reader(gen, unl["g_p_ext"], unl["p_ids"])
        reward = self.reward(unl, q, q_mask)
        if self.hparams.reward_clip is not None:
            reward = reward.clamp_min(-self.hparams.reward_clip)
        b, self.running_baseline = rl_baseline(reward, self.hparams.baseline, self.running_baseline,
                                               self.hparams.baseline_momentum)
        seq_log_prob = gen.sequence_log_prob()
        loss = reinforce_loss(reward, b, seq_log_prob, weight)
        out = {"loss": loss, "reward": reward, "baseline": b, "seq_log_prob": seq_log_prob, "generated": gen,
               "question_len": gen.mask.sum(1).float().mean()}
        if self.hparams.mle_mix_weight and lab is not None:
            out["mle"] = self.mle_loss(lab)["loss"]
            out["loss"] = loss + self.hparams.mle_mix_weight * out["mle"]
        return out

    # ------------------------------------------------------------------------------------------------ training
    def _update(self, opt, loss: Tensor, clip: float | None) -> None:
        opt.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        if clip:
            self.clip_gradients(opt, gradient_clip_val=clip, gradient_clip_algorithm="norm")
        opt.step()
        opt.zero_grad(set_to_none=True)  # no gradient lingers on the side the next update must not move

    def training_step(self, batch: dict[str, dict[str, Tensor]], batch_idx: int) -> None:
        kind = self.next_update()
        if kind != "mle" and not self.mle_closed:
            self._close_mle()
        opts = self.optimizers()
        opts = opts if isinstance(opts, list) else [opts]
        hp = self.hparams
        bs = len(batch["lab"]["start"])
        if kind == "mle":
            out = self.mle_loss(batch["lab"])
            self._update(opts[1], out["loss"], hp.g_mle_grad_clip)
            self.counts["mle"] += 1
            logs = {"train/loss": out["loss"], "train/g_mle_nll": out["nll_per_token"]}
        elif kind in ("d", "d_pretrain"):
            out = self.d_loss(batch, with_unlabeled=kind == "d")
            self._update(opts[0], out["loss"], hp.d_grad_clip)
            self.counts["d" if kind == "d" else "d_pre"] += 1
            logs = {"train/loss": out["loss"], "train/d_loss": out["loss"], "train/d_loss_lab": out["loss_lab"]}
            if "loss_gen" in out:
                logs["train/d_loss_gen"] = out["loss_gen"]  # −J(U_G, d_gen, D): Figure 3.8
            if "domain_bce" in out:
                logs["train/d_domain_bce"] = out["domain_bce"]
        else:
            weight = self.rl_weight()
            out = self.g_loss(batch["unl"], batch["lab"] if hp.mle_mix_weight else None, weight)
            self._update(opts[2], out["loss"], hp.g_rl_grad_clip)
            self.counts["g"] += 1
            logs = {"train/loss": out["loss"], "train/g_loss": out["loss"], "train/reward": out["reward"].mean(),
                    "train/baseline": out["baseline"], "train/rl_weight": weight,
                    "train/question_len": out["question_len"]}
            bs = len(out["reward"])
        self.log_dict({k: v.detach() if torch.is_tensor(v) else v for k, v in logs.items()}, batch_size=bs)

    # ------------------------------------------------------------------------------------------------ evaluation
    def on_validation_epoch_start(self) -> None:
        self._eval = {"sums": torch.zeros(5, dtype=torch.float64), "preds": {}}  # em, f1, n, g_nll, g_tokens

    on_test_epoch_start = on_validation_epoch_start

    @property
    def g_is_final(self) -> bool:
        """G no longer changes: its MLE phase is over and the method never updates it (Gen, Gen + domain)."""
        return self.uses_generator and self.mle_closed and self.spec.g_update == "none"

    def _eval_step(self, batch: dict[str, Any], stage: str) -> None:
        tag = torch.full_like(batch["start"], TAG_TRUE) if self.spec.domain_tags else None  # test time: d_true
        res = self.model.reader(batch["p_ids"], batch["p_mask"], batch["q_ids"], batch["q_mask"], tag)
        j, k = best_span(res.start_log_probs, res.end_log_probs, self.hparams.max_answer_len)
        rows = torch.arange(len(j), device=j.device)
        char_start = batch["offsets"][rows, j, 0].tolist()
        char_end = batch["offsets"][rows, k, 1].tolist()
        preds = {qid: ctx[a:b] for qid, ctx, a, b in zip(batch["qid"], batch["context"], char_start, char_end)}
        qas = [{"id": qid, "answers": [{"text": t} for t in golds]}
               for qid, golds in zip(batch["qid"], batch["answers"])]
        scores = evaluate_v1([{"paragraphs": [{"qas": qas}]}], preds)  # the official v1.1 script, in percent
        sums = self._eval["sums"]
        sums[0] += scores["exact"] * scores["total"] / 100.0
        sums[1] += scores["f1"] * scores["total"] / 100.0
        sums[2] += scores["total"]
        self._eval["preds"].update(preds)
        if self.uses_generator and "g_q_ids" in batch and not (stage == "valid" and self.frozen_g_dev_nll):
            lab = {key: batch[key] for key in ("g_p_ids", "g_p_ext", "p_mask", "start", "end", "g_q_ids", "g_q_mask")}
            out = self.mle_loss(lab)
            n_tokens = float(batch["g_q_mask"].sum())
            sums[3] += float(out["nll_per_token"]) * n_tokens
            sums[4] += n_tokens

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval_step(batch, "valid")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def _eval_end(self, stage: str) -> None:
        sums = self.trainer.strategy.reduce(self._eval["sums"].to(self.device), reduce_op="sum").cpu()
        em, f1, n, g_nll, g_tokens = sums.tolist()
        if n == 0:
            return
        if stage == "valid" and self.frozen_g_dev_nll:  # a final G's dev NLL is computed once, then reused
            g_nll, g_tokens = self.frozen_g_dev_nll
        elif stage == "valid" and self.g_is_final and g_tokens and not self.trainer.sanity_checking:
            self.frozen_g_dev_nll = (g_nll, g_tokens)
        logs = {f"{stage}/exact": em / n, f"{stage}/f1": f1 / n}
        if stage == "valid" and not self.d_has_trained:
            logs = {}  # D is its random init: not a model to select (Algorithm 1 early-stops its while loop only)
        elif stage == "valid" and not self.trainer.sanity_checking:
            if f1 / n > self.best_dev_f1:  # strictly better, as ModelCheckpoint ranks it
                self.best_dev_f1, self.best_dev_step = f1 / n, self.global_step
            logs["valid/best_f1"] = self.best_dev_f1
            logs["valid/best_step"] = float(self.best_dev_step)
        if g_tokens:
            logs[f"{stage}/g_nll"] = g_nll / g_tokens
            in_mle = not self.mle_closed and self.counts["mle"] > 0
            if stage == "valid" and in_mle and logs["valid/g_nll"] < self.best_g_nll:
                self.best_g_nll = logs["valid/g_nll"]
                self.best_g_state = {k: v.detach().cpu().clone() for k, v in self.model.generator.state_dict().items()}
        self.log_dict(logs)
        if stage == "test" and self.hparams.prediction_dir and self.trainer.is_global_zero:
            with atomic_write(Path(self.hparams.prediction_dir) / "predictions.json", "w") as f:
                f.write(json.dumps(self._eval["preds"], indent=1))

    @property
    def d_has_trained(self) -> bool:
        """Whether D has had an update: only then is dev F1 logged, so no checkpoint of the MLE phase (random D) can
        be selected or tested."""
        return self.counts["d"] + self.counts["d_pre"] > 0

    def on_test_start(self) -> None:
        if not self.d_has_trained:
            raise ConfigError("GDAN: the model to test has an untrained D (a run that ended, or a checkpoint written, "
                              f"in G's MLE phase: {self.counts['mle']} of task.mle_steps={self.mle_steps} updates, no "
                              "D update); set trainer.max_steps above task.mle_steps and test a checkpoint written "
                              "after D has trained.")

    def on_validation_epoch_end(self) -> None:
        self._eval_end("valid")

    def on_test_epoch_end(self) -> None:
        self._eval_end("test")

    # ------------------------------------------------------------------------------------------------ resume
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        rows = sorted(self.generated_cache)
        seqs = [self.generated_cache[r] for r in rows]
        checkpoint["gdan"] = {
            "counts": dict(self.counts), "mle_closed": self.mle_closed, "running_baseline": self.running_baseline,
            "best_g_nll": self.best_g_nll, "best_g_state": self.best_g_state, "best_dev_f1": self.best_dev_f1,
            "best_dev_step": self.best_dev_step, "generated_at_g_step": self.generated_at_g_step,
            "cache_rows": torch.tensor(rows, dtype=torch.long),
            "cache_tokens": torch.cat(seqs) if seqs else torch.zeros(0, dtype=torch.long),
            "cache_lengths": torch.tensor([len(s) for s in seqs], dtype=torch.long),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("gdan")
        if state is None:
            return
        self.counts = dict(state["counts"])
        self.mle_closed, self.running_baseline = state["mle_closed"], state["running_baseline"]
        self.best_g_nll, self.best_g_state = state["best_g_nll"], state["best_g_state"]
        self.best_dev_f1 = state.get("best_dev_f1", -math.inf)
        self.best_dev_step = state.get("best_dev_step", -1)
        self.generated_at_g_step = state["generated_at_g_step"]
        seqs = torch.split(state["cache_tokens"], state["cache_lengths"].tolist())
        self.generated_cache = dict(zip(state["cache_rows"].tolist(), seqs))
