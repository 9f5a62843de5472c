"""The memory probe (``genlab.cli.memory_probe``) for the tasks that optimise manually: the bad GAN, CEGAN, Planetoid
and GDAN. Their ``training_step`` makes its own updates (``self.optimizers()``, ``manual_backward``, gradient
clipping), so it runs only under a Trainer: the probe hands a deep copy of the task (the run's weights, RNG and
training state are left as they were) and a synthetic batch to Lightning's own fit loop for one epoch of one or a few
iterations, and records every tensor they create. The copy is set to take its heaviest iteration: the bad GAN's
low-density penalty on, CEGAN updating both networks, GDAN one MLE, one D and one G update. Gradients (taken from
each optimiser as it steps) and optimiser states are left out of the activations: ``genlab.cli.memory`` counts them
per parameter.

Before any data is read the model's sizes come from the config where the data's are published (Planetoid's
Cora / Citeseer / Pubmed graphs) or capped (GDAN's vocabularies, ``data.d_vocab_max`` / ``data.g_vocab_max``);
``train.py`` checks again with the data's sizes when they differ. GDAN's paragraphs are padded to the longest in a
batch, which only the data knows: the probe takes ``data.max_paragraph_tokens``, else :data:`PARAGRAPH_TOKENS`.
"""

from __future__ import annotations

import contextlib
import copy
import math
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from genlab.data.graphs.context import largest_context_batch
from genlab.data.graphs.planetoid import PUBLISHED_SIZES

PARAGRAPH_TOKENS = 400  # GDAN: an assumed batch-longest SQuAD paragraph; data.max_paragraph_tokens bounds it
PROBE_ROWS = 8  # rows of the smaller probe batch of the image GANs (then twice that)
PROBE_TOKENS = 16  # GDAN: paragraph tokens of the shorter probe batch (then twice that)


def covers(task: nn.Module) -> bool:
    from genlab.tasks.bad_gan import BadGANTask
    from genlab.tasks.cegan import CEGANTask
    from genlab.tasks.gdan import GDANTask
    from genlab.tasks.planetoid import PlanetoidTask

    return isinstance(task, (BadGANTask, CEGANTask, GDANTask, PlanetoidTask))


def sizes_before_data(cfg: DictConfig) -> dict[str, Any] | None:
    """The model sizes a Planetoid or GDAN run's data would give, from the config (GDAN: at most), or None (another
    task, a mini, or a graph whose sizes are not published)."""
    data = cfg.get("data")
    target = str((data or {}).get("_target_", ""))
    if data is None or data.get("source") == "mini":
        return None
    if target.endswith("PlanetoidDataModule"):
        graph = PUBLISHED_SIZES.get(str(data.get("name")))
        return None if graph is None else {"num_nodes": graph[0], "n_features": graph[3], "n_classes": graph[2]}
    if target.endswith("SemiSupervisedSquadDataModule"):
        if (cfg.get("task") or {}).get("g_init_from"):
            return None  # a trained G has the data's vocabulary: it cannot be loaded into the capped one
        sizes: dict[str, Any] = {"reader": {"vocab_size": int(data.d_vocab_max)}}
        if data.get("generator_vocab"):
            sizes["generator"] = {"vocab_size": int(data.g_vocab_max)}
        return sizes
    return None


def probe_plan(cfg: DictConfig, task: nn.Module, batch_size: int) -> tuple[int, int, int, Callable[[int], Any]]:
    """The two sizes probed, the run's value of that size and the batch at a size. Rows of ``data.batch_size``: the
    real batch for Planetoid (small), PROBE_ROWS and twice that for the bad GAN, for CEGAN more than its k-NN
    entropy term's neighbours (the term's pairwise distances, quadratic in the batch, are small). GDAN: the real batch, at paragraphs of PROBE_TOKENS and twice that many tokens
    (its recurrent layers make a few ops per token, each recorded), extrapolated to the run's paragraph length."""
    from genlab.tasks.cegan import CEGANTask
    from genlab.tasks.gdan import GDANTask
    from genlab.tasks.planetoid import PlanetoidTask

    if isinstance(task, GDANTask):
        unl = _scaler(batch_size, batch_size)(cfg.data.get("unlabeled_batch_size"))
        length = int(cfg.data.get("max_paragraph_tokens") or PARAGRAPH_TOKENS)
        return PROBE_TOKENS, 2 * PROBE_TOKENS, length, partial(_gdan_batch, cfg, task, batch_size, unl)
    small = min(batch_size, PROBE_ROWS)
    if isinstance(task, CEGANTask):  # more rows than the k-NN entropy term's neighbours
        small = min(batch_size, 2 * PROBE_ROWS + task.hparams.nn_k)
    elif isinstance(task, PlanetoidTask):
        small = batch_size
    return small, min(batch_size, 2 * small), batch_size, partial(synthetic_batch, cfg, task)


def synthetic_batch(cfg: DictConfig, task: nn.Module, rows: int) -> dict[str, Any] | None:
    """A training batch of ``rows`` rows (``data.batch_size``'s share; the other batch sizes scaled with it)."""
    from genlab.tasks.bad_gan import BadGANTask
    from genlab.tasks.cegan import CEGANTask
    from genlab.tasks.gdan import GDANTask
    from genlab.tasks.planetoid import PlanetoidTask

    data = cfg.get("data") or {}
    scaled = _scaler(rows, data.get("batch_size") or rows)
    gen = torch.Generator().manual_seed(0)
    if isinstance(task, BadGANTask):
        shape = _sample_shape(task.model.generator, task.model.discriminator)
        batch = {"x_lab": torch.rand(scaled(data.get("labeled_batch_size")), *shape, generator=gen),
                 "x_unl": torch.rand(rows, *shape, generator=gen)}
        batch["y_lab"] = torch.zeros(len(batch["x_lab"]), dtype=torch.long)
        if data.get("g_step_unlabeled") == "separate":
            batch["x_unl2"] = torch.rand(rows, *shape, generator=gen)
        if task.hparams.fake_source == "data":
            batch["x_fake"] = torch.rand(rows, *shape, generator=gen)
        return batch
    if isinstance(task, CEGANTask):
        return {"x": torch.rand(rows, *_sample_shape(task.model.generator, task.model.discriminator), generator=gen)}
    if isinstance(task, PlanetoidTask):
        ctx_rows = largest_context_batch(*(data[k] for k in (
            "sampler", "g_batch_size", "g_sample_size", "path_size", "window", "window_rule", "neg_samp",
            "context_batch_size", "neg_mode")))
        return _planetoid_batch(task.model, rows, scaled(ctx_rows), gen)
    if isinstance(task, GDANTask):
        length = int(data.get("max_paragraph_tokens") or PARAGRAPH_TOKENS)
        return _gdan_batch(cfg, task, rows, scaled(data.get("unlabeled_batch_size")), length)
    return None


def _scaler(rows: int, batch_size: int):
    """Another of the batch's sizes (None: the same as ``data.batch_size``) at ``rows`` rows of it."""
    return lambda size: max(1, math.ceil(rows * (size or batch_size) / batch_size))


def _sample_shape(generator: nn.Module | None, discriminator: nn.Module) -> tuple[int, ...]:
    """One data point's shape: what the generator makes, else what the discriminator's first layer reads."""
    if generator is not None:  # in eval mode: batch norm's running statistics stay as they are
        was_training = generator.training
        try:
            with torch.no_grad():
                return tuple(generator.eval()(torch.zeros(2, generator.z_dim)).shape[1:])
        finally:
            generator.train(was_training)
    first = next(m for m in discriminator.modules() if isinstance(m, nn.Linear))
    return (first.in_features,)


def _planetoid_batch(model: nn.Module, rows: int, ctx_rows: int, gen: torch.Generator) -> dict[str, Any]:
    """One supervised and one context sub-batch over the whole graph's features (the model's sizes)."""
    head = model.context
    nodes = head.out.out_features if head.mode == "softmax" else head.vectors.num_embeddings
    n_features = model.branch_x.layer.in_features if model.branch_x is not None else 1
    pick = torch.randint(0, nodes, (rows + 2 * ctx_rows,), generator=gen)
    gamma = torch.ones(ctx_rows) if model.context_mode == "softmax" else torch.ones(ctx_rows).index_fill_(
        0, torch.arange(0, ctx_rows, 2), -1.0)
    subs = [{"kind": "sup", "nodes": pick[:rows]},
            {"kind": "ctx", "i": pick[rows:rows + ctx_rows], "c": pick[rows + ctx_rows:], "gamma": gamma}]
    return {"x": torch.rand(nodes, n_features, generator=gen), "y": torch.zeros(nodes, dtype=torch.long),
            "subs": subs, "warmup": False}


def _gdan_batch(cfg: DictConfig, task: nn.Module, rows: int, unl_rows: int, length: int) -> dict[str, Any]:
    """L and U batches of paragraphs of ``length`` tokens, questions of the longest the data keeps (word ids: any,
    no layer's size depends on them)."""
    data, model = cfg.data, task.model
    gen = torch.Generator().manual_seed(0)

    def ids(shape: tuple[int, ...], vocab: int, low: int) -> Tensor:
        return torch.randint(low, vocab, shape, generator=gen)
    q_len = int(data.get("max_question_tokens") or 60)
    d_vocab = model.reader.vocab_size

    def paragraphs(n: int) -> dict[str, Tensor]:
        out = {"p_ids": ids((n, length), d_vocab, low=2), "p_mask": torch.ones(n, length, dtype=bool),
               "start": torch.full((n,), length // 2), "end": torch.full((n,), length // 2 + 2)}
        if model.generator is not None:
            g_vocab = model.generator.vocab_size
            out["g_p_ids"] = ids((n, length), g_vocab, low=4)
            out["g_p_ext"] = out["g_p_ids"].clone()
            oov = max(1, length // 10)  # paragraph words outside G's vocabulary: copied by their slot
            out["g_p_ext"][:, -oov:] = g_vocab + torch.arange(oov)
        return out

    lab = {**paragraphs(rows), "q_ids": ids((rows, q_len), d_vocab, low=2),
           "q_mask": torch.ones(rows, q_len, dtype=bool)}
    if model.generator is not None:
        g_len = int(data.get("g_max_question_tokens") or model.generator.max_question_len)
        lab["g_q_ids"] = ids((rows, g_len), model.generator.vocab_size, low=4)
        lab["g_q_ids"][:, -1] = model.generator.eos_id
        lab["g_q_mask"] = torch.ones(rows, g_len, dtype=bool)
    return {"lab": lab, "unl": {**paragraphs(unl_rows), "index": torch.arange(unl_rows)}}


def batch_bytes(cfg: DictConfig, task: nn.Module, batch_size: int) -> int:
    """Bytes of a batch of ``batch_size`` rows, from batches of 1 and 2 rows (Planetoid's features are in every
    batch once)."""
    one, two = (_tensor_bytes(synthetic_batch(cfg, task, rows)) for rows in (1, 2))
    return one + (two - one) * (batch_size - 1)


def _tensor_bytes(batch: dict[str, Any]) -> int:
    """Bytes of a batch's tensors, each storage once."""
    seen: dict[int, int] = {}
    for value in _leaves(batch):
        seen[id(value.untyped_storage())] = value.untyped_storage().nbytes()
    return sum(seen.values())


def _leaves(value: Any):
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)


def heaviest(task: nn.Module) -> int:
    """Set ``task`` (the probe's copy) to take its heaviest iterations on synthetic batches, without its data
    module; returns how many iterations that takes."""
    from genlab.tasks.bad_gan import BadGANTask
    from genlab.tasks.cegan import CEGANTask
    from genlab.tasks.gdan import GDANTask

    if isinstance(task, BadGANTask):
        task.initialised.fill_(True)  # no data-dependent init (it needs the data module) ...
        task.ld_threshold.fill_(0.0)  # ... nor a density threshold from the data
        task.hparams.ld_start_iter, task.hparams.ld_prob = -1, 1.0  # the low-density penalty in this step
    elif isinstance(task, CEGANTask):
        task.hparams.schedule = "all"
    elif isinstance(task, GDANTask):
        task.mle_steps, task.mle_closed = int(task.uses_generator), not task.uses_generator
        task.hparams.t_d = task.hparams.t_g = 1
        return 1 + int(task.uses_generator) + int(task.uses_generator and task.spec.g_update != "none")
    return 1


def step_spans(task: nn.Module, batch: dict[str, Any], precision: str, lifetimes) -> tuple[list[list[int]], set[int]]:
    """:func:`genlab.cli.memory_probe.step_spans` of a manually optimised task, recorded by ``lifetimes`` (the probe's
    dispatch mode): its heaviest iterations on ``batch`` through a Lightning Trainer on the CPU, on a copy of the
    task. The gradients and optimiser states are the spans returned to leave out."""
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader

    probe = copy.deepcopy(task)
    iterations = heaviest(probe)
    counted: set[int] = set()
    make_optimizers = probe.configure_optimizers

    def optimizers_that_report():
        made = make_optimizers()
        for opt in made if isinstance(made, (list, tuple)) else [made]:
            opt.register_step_pre_hook(lambda o, *_: counted.update(lifetimes.excluded(
                [p.grad for group in o.param_groups for p in group["params"] if p.grad is not None])))
            opt.register_step_post_hook(lambda o, *_: counted.update(lifetimes.excluded(
                [t for state in o.state.values() for t in state.values() if isinstance(t, Tensor)])))
        return made

    probe.configure_optimizers = optimizers_that_report
    with torch.random.fork_rng(), warnings.catch_warnings(), _quiet():
        warnings.simplefilter("ignore")  # Lightning's advice on loaders and logging, about this probe
        trainer = pl.Trainer(accelerator="cpu", devices=1, precision=precision, max_epochs=1, max_steps=10**9,
                             logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0)
        with lifetimes:
            trainer.fit(probe, train_dataloaders=DataLoader([batch] * iterations, batch_size=None))
    return lifetimes.settled(), counted


@contextlib.contextmanager
def _quiet():
    import logging

    from genlab.cli.quiet import LIGHTNING_LOGGERS

    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
