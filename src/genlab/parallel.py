"""Sharding, activation checkpointing and regional compilation of a model, in one place.

``parallelize`` applies, per block and in torchtitan's order, (1) activation checkpointing, (2) regional
``torch.compile``, (3) FSDP2 ``fully_shard`` with a mixed-precision policy and optional CPU offload, and finally
shards the root (embeddings, output layer, shared parameters). Models declare their blocks with a class
attribute ``block_classes`` (or a ``blocks()`` method returning the block modules): Transformer-XL, XLNet, BERT,
GPT-1 and Funnel-Transformer do (an ELECTRA pair declares them once, for both bodies). Methods other than
``forward`` that tasks call on a root (``encode``, ``mlm_logits``, GPT's ``lm_logits`` ...) are declared in a class
attribute ``forward_methods``, so the sharded parameters are gathered around them too; such a method reads the
parameters itself rather than a parameter a forward returned, whose gathered copy is freed once that forward ends.

Lightning drives it: ``FSDP2Strategy`` is Lightning's ``ModelParallelStrategy`` with pure data-parallel sharding
over every process by default and the options below; ``ParallelizeMixin`` gives a LightningModule the
``configure_model`` hook that calls ``parallelize`` on the task when such a strategy runs. Every transformer task
uses it: the LM task, the pretraining tasks (PLM, DAE, MLM, GPT LM, Funnel MLM/ELECTRA) and the finetuning tasks.
Nothing here moves data between processes itself: collectives, checkpoints and launching stay Lightning's and
PyTorch's.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from pytorch_lightning.strategies import ModelParallelStrategy
from torch import nn

from genlab.errors import ConfigError

PRECISIONS = ("64-true", "32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "16-true")
# Lightning's short spellings (``precision=bf16``, ``16``, ``64``) and what it turns them into.
PRECISION_ALIASES = {"64": "64-true", "32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed"}
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


# --------------------------------------------------------------------------------------------- user checks
def find_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of the first module (``model`` itself or, for a task, the model it holds) that
    declares them with a ``blocks()`` method or a ``block_classes`` class attribute, in order."""
    for module in model.modules():
        if inspect.isfunction(getattr(type(module), "blocks", None)):
            blocks = list(module.blocks())
        elif getattr(type(module), "block_classes", None):
            classes = tuple(type(module).block_classes)
            blocks = [m for m in module.modules() if isinstance(m, classes)]
        else:
            continue
        if blocks:
            return blocks
    raise ConfigError(
        f"strategy=fsdp: {type(model).__name__} declares no blocks to shard. Add a class attribute "
        "`block_classes = (MyBlock,)` (or a `blocks()` method) to the model, or use strategy=ddp."
    )


def accumulation_steps(global_batch: int, micro_batch: int, world_size: int) -> int:
    """Gradient-accumulation steps so ``micro_batch x world_size x steps == global_batch`` on any device count."""
    per_step = micro_batch * world_size
    if global_batch <= 0 or global_batch % per_step:
        raise ConfigError(
            f"data.global_batch={global_batch} is not a multiple of micro-batch x world size = {micro_batch} x "
            f"{world_size} = {per_step}; choose a global batch divisible by {per_step} or change data.batch_size "
            "/ trainer.devices / trainer.num_nodes."
        )
    return global_batch // per_step


def resolve_accelerator(accelerator: str = "auto") -> str:
    """``cuda``, ``mps`` or ``cpu`` for a config's ``trainer.accelerator``, resolved as Lightning does."""
    if accelerator in ("auto", "gpu"):
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    return accelerator if accelerator in ("cuda", "mps") else "cpu"


def world_size(devices: Any, num_nodes: int = 1, accelerator: str = "auto") -> int:
    """Processes a run will have: devices per node (int, list of ids, "0,1", -1/"auto") x ``num_nodes``."""
    if isinstance(devices, str) and devices != "auto":
        devices = [d for d in devices.split(",") if d.strip()] if "," in devices else int(devices)
    if not isinstance(devices, (int, str)):  # a list of device ids (list or ListConfig)
        per_node = len(devices)
    elif devices in ("auto", -1):  # Lightning: every GPU of the node, one process on CPU
        kind = resolve_accelerator(accelerator)
        per_node = torch.cuda.device_count() if kind == "cuda" else 1
    else:
        per_node = int(devices)
    if per_node < 1 or int(num_nodes) < 1:
        raise ConfigError(f"trainer.devices={devices} x trainer.num_nodes={num_nodes} gives no process to run on.")
    return per_node * int(num_nodes)


def check_strategy_device(strategy: Any, accelerator: str = "auto") -> None:
    """FSDP1 cannot run on CPU: Lightning's FSDPStrategy refuses it and PyTorch's FullyShardedDataParallel raises
    "FSDP needs a non-CPU accelerator device" (torch 2.13). Say so before any work, with the alternatives."""
    target = strategy.get("_target_", "") if hasattr(strategy, "get") else str(strategy)
    fsdp1 = target.rsplit(".", 1)[-1] == "FSDPStrategy" or target in ("fsdp", "fsdp_cpu_offload")
    if fsdp1 and resolve_accelerator(str(accelerator)) == "cpu":
        raise ConfigError(
            "strategy=fsdp1 (Lightning's FSDPStrategy, PyTorch FSDP1) needs a CUDA GPU: FSDP1 has no CPU device "
            "support. On CPU use strategy=fsdp (FSDP2, gloo) or strategy=ddp; on GPUs set trainer.accelerator=gpu."
        )


def normalize_precision(precision: Any) -> str:
    """``trainer.precision`` as Lightning reads it: ``bf16`` -> ``bf16-mixed``, ``16`` -> ``16-mixed``, ``32`` ->
    ``32-true``, ``64`` -> ``64-true`` (the int and string spellings alike); other values unchanged."""
    precision = str(precision)
    return PRECISION_ALIASES.get(precision, precision)


def check_precision(precision: str, device: torch.device) -> None:
    """Refuse, with the fix, a ``trainer.precision`` the device cannot run. bf16 runs on every CPU (autocast to
    bfloat16 with fp32 islands: softmax, masks, position tables, losses); fp16 has no CPU autocast."""
    precision = normalize_precision(precision)
    if precision not in PRECISIONS:
        raise ConfigError(f"trainer.precision={precision} is unknown; use one of {', '.join(PRECISIONS)} "
                          f"(or Lightning's short {', '.join(PRECISION_ALIASES)})")
    half = precision.startswith("16")
    bf16 = precision.startswith("bf16")
    if device.type == "cuda":
        if bf16 and not torch.cuda.is_bf16_supported():
            raise ConfigError(
                f"trainer.precision={precision}: {torch.cuda.get_device_name(device)} has no bfloat16 support; "
                "use trainer.precision=16-mixed (or 32-true)."
            )
    elif device.type == "cpu":
        if half:
            raise ConfigError(
                f"trainer.precision={precision} is not supported on CPU (no fp16 autocast/loss scaling there); "
                "use trainer.precision=bf16-mixed or 32-true."
            )
    elif device.type == "mps" and precision == "64-true":
        raise ConfigError("trainer.precision=64-true: MPS has no float64; use trainer.precision=32-true.")


def check_trainer_precision(precision: str, accelerator: str = "auto") -> None:
    """``check_precision`` from config values, before the Trainer exists (Lightning would silently turn
    16-mixed into bf16-mixed on CPU): ``accelerator`` auto/gpu/cuda/mps/cpu resolves as Lightning does."""
    check_precision(precision, torch.device(resolve_accelerator(accelerator)))


def _dtype(name: str | None) -> torch.dtype | None:
    if name is None:
        return None
    if name not in _DTYPES:
        raise ConfigError(f"strategy dtype {name!r} is unknown; use one of {tuple(_DTYPES)} or null")
    return _DTYPES[name]


def mixed_precision_dtypes(precision: str) -> tuple[torch.dtype | None, torch.dtype | None]:
    """(param_dtype, reduce_dtype) FSDP2 uses for ``trainer.precision``: low-precision compute for ``*-mixed``
    with fp32 gradient reduction; nothing to cast for ``*-true`` (the weights already have that dtype)."""
    precision = normalize_precision(precision)
    if precision == "bf16-mixed":
        return torch.bfloat16, torch.float32
    if precision == "16-mixed":
        return torch.float16, torch.float32
    return None, None


# ------------------------------------------------------------------------------------------------ the plan
def _replace(model: nn.Module, old: nn.Module, new: nn.Module) -> None:
    for parent in model.modules():
        for name, child in parent.named_children():
            if child is old:
                setattr(parent, name, new)
                return
    raise ValueError(f"block {type(old).__name__} is not a submodule of {type(model).__name__}")


def _parts(task: nn.Module) -> list[nn.Module]:
    """The top-level parts of a task holding trainable parameters: its model and heads (not metrics)."""
    return [m for m in task.children() if any(p.requires_grad for p in m.parameters())]


def parallelize(
    model: nn.Module,
    mesh: Any | None,
    *,
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype | None = None,
    cpu_offload: bool = False,
    activation_checkpointing: bool = False,
    compile_blocks: bool = False,
    reshard_after_forward: bool = True,
) -> nn.Module:
    """Apply AC -> compile -> fully_shard to each block, then fully_shard the root. In place; returns ``model``.

    ``model`` is a model, or a task (a LightningModule) holding one: the blocks are those of the first module that
    declares them, and a task's roots are its top-level parts holding parameters (the model, a finetuning head, an
    NSP head), each sharded on its own, so every trainable parameter is sharded and its gradients reduced while
    the task itself stays a plain LightningModule. ``mesh=None`` skips sharding (single process: activation
    checkpointing and compilation only).
    """
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
        register_fsdp_forward_method,
    )

    blocks = find_blocks(model)
    wrapped = []
    for block in blocks:
        if activation_checkpointing:  # recompute the block in backward; state-dict keys stay unchanged
            new = checkpoint_wrapper(block)
            _replace(model, block, new)
            block = new
        if compile_blocks:  # regional: one compiled graph reused by every block of the same shape
            block.compile()
        wrapped.append(block)
    if mesh is None:
        return model
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    offload = CPUOffloadPolicy() if cpu_offload else OffloadPolicy()
    for i, block in enumerate(wrapped):
        # The last block's parameters are needed again at once by backward: keep them gathered.
        reshard = reshard_after_forward and i < len(wrapped) - 1
        fully_shard(block, mesh=mesh, mp_policy=mp, offload_policy=offload, reshard_after_forward=reshard)
    for root in _parts(model) if isinstance(model, pl.LightningModule) else [model]:
        fully_shard(root, mesh=mesh, mp_policy=mp, offload_policy=offload, reshard_after_forward=reshard_after_forward)
        # FSDP2 gathers a root's parameters around forward only; a model's other entry points (a backbone's
        # encode/summary, BERT's mlm_logits ...) are declared in forward_methods and gathered around as well
        for name in getattr(type(root), "forward_methods", ()):
            register_fsdp_forward_method(root, name)
    return model


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules())


# -------------------------------------------------------------------------------------------- Lightning glue
class FSDP2Strategy(ModelParallelStrategy):
    """Lightning's ``ModelParallelStrategy`` used as pure FSDP2: by default every process is one data-parallel
    shard (``data_parallel_size=auto`` = world size, no tensor parallelism), plus the options ``parallelize``
    takes. ``param_dtype``/``reduce_dtype`` = ``auto`` follow ``trainer.precision``."""

    def __init__(
        self,
        data_parallel_size: Literal["auto"] | int = "auto",
        tensor_parallel_size: Literal["auto"] | int = 1,
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
        activation_checkpointing: bool = False,
        compile_blocks: bool = False,
        cpu_offload: bool = False,
        reshard_after_forward: bool = True,
        param_dtype: str | None = "auto",
        reduce_dtype: str | None = "auto",
    ) -> None:
        super().__init__(data_parallel_size, tensor_parallel_size, save_distributed_checkpoint, process_group_backend)
        self.activation_checkpointing, self.compile_blocks = activation_checkpointing, compile_blocks
        self.cpu_offload, self.reshard_after_forward = cpu_offload, reshard_after_forward
        self.param_dtype, self.reduce_dtype = param_dtype, reduce_dtype

    def setup_environment(self) -> None:
        world = self.num_nodes * self.num_processes
        tp = 1 if self._tensor_parallel_size == "auto" else int(self._tensor_parallel_size)
        if self._data_parallel_size == "auto":
            if world % tp:
                raise ConfigError(f"strategy.tensor_parallel_size={tp} does not divide the world size {world}")
            self._data_parallel_size = world // tp
        self._tensor_parallel_size = tp
        super().setup_environment()

    def parallelize_options(self, precision: str) -> dict[str, Any]:
        auto_param, auto_reduce = mixed_precision_dtypes(precision)
        return {
            "param_dtype": auto_param if self.param_dtype == "auto" else _dtype(self.param_dtype),
            "reduce_dtype": auto_reduce if self.reduce_dtype == "auto" else _dtype(self.reduce_dtype),
            "cpu_offload": self.cpu_offload,
            "activation_checkpointing": self.activation_checkpointing,
            "compile_blocks": self.compile_blocks,
            "reshard_after_forward": self.reshard_after_forward,
        }


class ParallelizeMixin:
    """Put before ``pl.LightningModule`` in a task's bases (``class LanguageModelTask(ParallelizeMixin,
    pl.LightningModule)``) to ``parallelize`` the task (its model per block, then every part holding parameters)
    when the run uses ``ModelParallelStrategy`` (``strategy=fsdp``)."""

    def configure_model(self) -> None:
        trainer = self.trainer
        strategy = trainer.strategy
        if not isinstance(strategy, ModelParallelStrategy) or is_sharded(self):
            return  # other strategies wrap the model themselves; Lightning calls this hook again for test
        precision = str(trainer.precision)
        check_precision(precision, strategy.root_device)
        if isinstance(strategy, FSDP2Strategy):
            options = strategy.parallelize_options(precision)
        else:
            options = dict(zip(("param_dtype", "reduce_dtype"), mixed_precision_dtypes(precision)))
        parallelize(self, strategy.device_mesh["data_parallel"], **options)


class BlockWrapPolicy:
    """FSDP1 auto-wrap (or activation-checkpointing) policy for Lightning's ``FSDPStrategy``: wrap every block
    the model declares. The block classes are read from the root on the first call (the root is visited first),
    so one config serves every model."""

    def __init__(self) -> None:
        self.classes: tuple[type[nn.Module], ...] | None = None

    def __call__(self, module: nn.Module, recurse: bool, nonwrapped_numel: int = 0) -> bool:
        if self.classes is None:
            self.classes = tuple({type(b) for b in find_blocks(module)})
        return True if recurse else isinstance(module, self.classes)
