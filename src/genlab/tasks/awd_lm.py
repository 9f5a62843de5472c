"""AWD-LSTM / MoS language-model training (the MoS / AWD-LSTM recipe, Dai thesis App. A.7): SGD -> NT-ASGD, variable
BPTT with a per-step lr
rescale, AR/TAR, gradient clipping, ``small_batch_size`` accumulation with per-chunk hidden states, and the
fine-tuning stage that restarts averaging from the best checkpoint.

Manual optimisation, one optimiser step per batch:
  for each column chunk j of ``small_batch_size`` streams (its own persistent state):
      loss_j = mean NLL + alpha * mean(g^2) + beta * mean((h_t - h_{t-1})^2), backward of loss_j * small / B
  clip the global gradient norm; lr <- lr0 * seq_len / bptt for this step only; SGD step (its weight decay is
  added after clipping, as in the original); fold the iterate into the NT-ASGD average once switched.
Validation and test evaluate the averaged weights when averaging has started; checkpoints hold the raw
iterate plus the average, so a resume across the switch is exact.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn

from genlab import checkpoints
from genlab.errors import CheckpointError, ConfigError
from genlab.tasks.data_interface import StreamData, datamodule_of
from genlab.tasks.nt_asgd import NTASGD, nonmonotone_trigger
from genlab.tasks.optim import TaskOptimization

STAGES = ("train", "finetune")


def ar_tar(output: Tensor, raw_output: Tensor, alpha: float, beta: float) -> Tensor:
    """AR on the dropped top output, TAR on the raw one, differences within the (sub-)batch only."""
    ar = alpha * output.pow(2).mean() if alpha else output.new_zeros(())
    tar = beta * (raw_output[:, 1:] - raw_output[:, :-1]).pow(2).mean() if beta and raw_output.shape[1] > 1 else 0.0
    return ar + tar


def averaged_weights(checkpoint: dict[str, Any], path: str | Path) -> dict[str, Tensor]:
    """Model weights of a loaded AWD task checkpoint: the NT-ASGD average when averaging had started."""
    if "state_dict" not in checkpoint or "awd" not in checkpoint:
        raise CheckpointError(f"{path} is not a checkpoint of genlab.tasks.awd_lm.AWDLanguageModelTask.")
    weights = checkpoints.submodule_weights(checkpoint)
    asgd = checkpoint["awd"]["nt_asgd"]
    if asgd["average"] is not None:
        for name, avg in zip(checkpoint["awd"]["param_names"], asgd["average"]):
            weights[name].copy_(avg)  # in place: a tied decoder shares this storage and must follow
    return weights


def load_awd_checkpoint(path: str | Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Model weights of an AWD task checkpoint file (see :func:`averaged_weights`) and the data identity it was
    trained on."""
    checkpoint = checkpoints.load(path, key="task.init_checkpoint",
                                  fix="Pass the best checkpoint of the training stage (task.init_checkpoint=/path/to/"
                                      "best.ckpt).")
    return averaged_weights(checkpoint, path), checkpoints.data_identity(checkpoint)


def check_vocabulary(saved: dict[str, Any], current: dict[str, Any], where: str | Path) -> None:
    checkpoints.check_data_identity(saved, current, str(where), keys=checkpoints.VOCABULARY_KEYS,
                                    fix="use the same data.dataset / data.options as the training stage")


class AWDLanguageModelTask(TaskOptimization, pl.LightningModule):
    def __init__(
        self,
        model: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., dict] | None = None,
        monitor: str = "valid/loss",
        monitor_mode: str = "min",
        metric: str = "ppl",
        small_batch_size: int | None = None,
        alpha: float = 2.0,
        beta: float = 1.0,
        clip: float = 0.25,
        nonmono: int = 5,
        stage: str = "train",
        init_checkpoint: str | None = None,
    ):
        super().__init__()
        if stage not in STAGES:
            raise ConfigError(f"task.stage must be one of {STAGES}, got {stage!r}.")
        if stage == "finetune" and not init_checkpoint:
            raise ConfigError("task.stage=finetune continues from the best checkpoint of the training stage: set "
                              "task.init_checkpoint=/path/to/best.ckpt.")
        if scheduler is not None:
            raise ConfigError("task.scheduler must be null: AWD-LSTM's lr is fixed apart from the per-step "
                              "seq_len/bptt rescale and the NT-ASGD switch.")
        if metric not in ("ppl", "bpc"):
            raise ConfigError(f"task.metric must be 'ppl' or 'bpc', got {metric!r}.")
        self.automatic_optimization = False
        self.model, self.optimizer_factory, self.scheduler_factory = model, optimizer, None
        self.monitor, self.monitor_mode, self.metric = monitor, monitor_mode, metric
        self.small_batch_size, self.alpha, self.beta, self.clip = small_batch_size, alpha, beta, clip
        self.stage, self.init_checkpoint = stage, init_checkpoint
        self.nt_asgd = NTASGD(nonmono)
        self.finetune_history: list[float] = []
        self.data_identity: dict[str, Any] = {}
        self._train_memory: list | None = None  # one state per column chunk
        self._eval_memory = None
        self._eval_sum, self._eval_count = 0.0, 0
        self.lr_trace: deque[float] = deque(maxlen=4096)  # lr of the latest steps (tests, debugging)

    # -- setup: data identity, fine-tuning initialisation ----------------------------------------------------
    def setup(self, stage: str) -> None:
        dm: StreamData | None = datamodule_of(self)
        if dm is not None and hasattr(dm, "identity") and getattr(dm, "corpus", None) is not None:
            self.data_identity = dm.identity()
        if stage == "fit" and self.stage == "finetune" and not self.nt_asgd.active:
            # a resumed fine-tuning run (ckpt_path) overwrites all of this when Lightning restores its state
            weights, identity = load_awd_checkpoint(self.init_checkpoint)
            check_vocabulary(identity, self.data_identity, self.init_checkpoint)
            try:
                self.model.load_state_dict(weights)
            except RuntimeError as err:
                raise CheckpointError(f"{self.init_checkpoint} does not fit model: {err}".split("\n")[0]) from err
            self.nt_asgd.start(epoch=0)  # a fresh average from the loaded (averaged) weights

    def _params(self) -> list[nn.Parameter]:
        return list(self.model.parameters())

    # -- training --------------------------------------------------------------------------------------------
    def _chunks(self, batch_size: int) -> int:
        small = self.small_batch_size or batch_size
        if batch_size % small:
            raise ConfigError(f"task.small_batch_size={small} must divide data.batch_size={batch_size}.")
        return batch_size // small

    def chunked_backward(self, inputs: Tensor, target: Tensor, backward: Callable[[Tensor], None]) -> Tensor:
        """Backward of NLL + AR + TAR over the column chunks (each with its own state, loss scaled by
        small / B); returns the batch's mean NLL (detached)."""
        batch_size = inputs.shape[0]
        n_chunks = self._chunks(batch_size)
        small = batch_size // n_chunks
        total_nll = inputs.new_zeros((), dtype=torch.float32)
        for j in range(n_chunks):
            cols = slice(j * small, (j + 1) * small)
            out = self.model.run(inputs[cols], target[cols], self._train_memory[j])
            self._train_memory[j] = out.memory
            nll = out.nll.mean()
            backward((nll + ar_tar(out.output, out.raw_output, self.alpha, self.beta)) * (small / batch_size))
            total_nll += nll.detach() * (small / batch_size)
        return total_nll

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        inputs, target = batch["input_ids"], batch["target"]
        if batch["segment"] == 0 or self._train_memory is None:  # new pass: every stream restarts
            self._train_memory = [None] * self._chunks(inputs.shape[0])
        opt = self.optimizers()
        opt.zero_grad()
        total_nll = self.chunked_backward(inputs, target, self.manual_backward)
        self.clip_gradients(opt, gradient_clip_val=self.clip, gradient_clip_algorithm="norm")
        scale = float(batch.get("lr_scale", 1.0))
        base = [g["lr"] for g in opt.param_groups]
        for g, lr in zip(opt.param_groups, base):
            g["lr"] = lr * scale
        self.lr_trace.append(opt.param_groups[0]["lr"])
        opt.step()
        for g, lr in zip(opt.param_groups, base):  # restore: rescales must not compound
            g["lr"] = lr
        self.nt_asgd.update(self._params())
        self.log("train/loss", total_nll, prog_bar=True)
        self.log("train/ppl", total_nll.exp())
        self.log("train/asgd", float(self.nt_asgd.active))
        return total_nll

    # -- evaluation: averaged weights once averaging has started ------------------------------------------
    def _begin_eval(self) -> None:
        self._eval_memory, self._eval_sum, self._eval_count = None, 0.0, 0
        self._avg_ctx = self.nt_asgd.averaged(self._params())
        self._avg_ctx.__enter__()

    def _eval_step(self, batch: dict) -> None:
        out = self.model(batch["input_ids"], target=batch["target"], memory=self._eval_memory)
        self._eval_memory = out.memory
        self._eval_sum += out.nll.double().sum()
        self._eval_count += out.nll.numel()

    def _end_eval(self, split: str) -> float | None:
        self._avg_ctx.__exit__(None, None, None)
        self._eval_memory = None
        if self._eval_count == 0:
            return None
        stats = torch.stack([torch.as_tensor(self._eval_sum, dtype=torch.float64, device=self.device),
                             torch.tensor(float(self._eval_count), dtype=torch.float64, device=self.device)])
        if self._trainer is not None and self.trainer.world_size > 1:
            stats = self.all_gather(stats).sum(0)
        loss = (stats[0] / stats[1]).item()
        self.log(f"{split}/loss", loss)
        value = math.exp(loss) if self.metric == "ppl" else loss / math.log(2)
        self.log(f"{split}/{self.metric}", value, prog_bar=True)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step(batch)

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_start(self) -> None:
        self._begin_eval()

    def on_test_epoch_start(self) -> None:
        self._begin_eval()

    def on_test_epoch_end(self) -> None:
        self._end_eval("test")

    def on_validation_epoch_end(self) -> None:
        loss = self._end_eval("valid")
        if loss is None or self.trainer.sanity_checking or self.trainer.state.fn != "fit":
            return
        epoch = self.current_epoch + 1
        if self.stage == "train":
            if self.nt_asgd.observe(loss, epoch):
                self.print(f"epoch {epoch}: switching to ASGD (valid loss {loss:.4f})")
        else:  # fine-tuning stops on the same strict non-monotone rule over the averaged losses
            if nonmonotone_trigger(self.finetune_history, loss, self.nt_asgd.nonmono):
                self.trainer.should_stop = True
            self.finetune_history.append(loss)
        self.log("train/asgd_switch_epoch", float(self.nt_asgd.switch_epoch or 0))

    # -- optimiser (configure_optimizers: genlab.tasks.optim.TaskOptimization; clipped in training_step) --------
    def optimizer_groups(self) -> list[nn.Parameter]:
        return self._params()  # SGD with weight_decay on all parameters, as the MoS code

    # -- checkpoints -----------------------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoints.record_data_identity(checkpoint, self.data_identity)
        checkpoint["awd"] = {
            "nt_asgd": self.nt_asgd.state_dict(),
            "param_names": [n for n, _ in self.model.named_parameters()],
            "finetune_history": list(self.finetune_history),
            "stage": self.stage,
            "train_memory": self._train_memory,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        saved = checkpoint.get("awd")
        if saved is None:
            raise CheckpointError("this checkpoint was not written by AWDLanguageModelTask (no 'awd' state).")
        identity = checkpoints.data_identity(checkpoint)
        if self.data_identity:
            check_vocabulary(identity, self.data_identity, "ckpt_path")
        self.data_identity = identity or self.data_identity
        self.nt_asgd.load_state_dict(saved["nt_asgd"], device=self.device)
        self.finetune_history = list(saved["finetune_history"])
        self._train_memory = saved["train_memory"]

    def on_fit_start(self) -> None:
        if self.nt_asgd.average is not None:
            self.nt_asgd.average = [a.to(self.device) for a in self.nt_asgd.average]
        if self._train_memory is not None:
            self._train_memory = [
                None if m is None else [(h.to(self.device), c.to(self.device)) for h, c in m]
                for m in self._train_memory
            ]
