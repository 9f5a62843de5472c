"""What a finetuning task took from ``task.init_from``, and the finetuned heads of Hugging Face task models.

The body is imported into the pretraining model before the finetuning adapter wraps it (genlab.tasks.finetune_base);
the heads of an HF task model (``XLNetForSequenceClassification``, ``XLNetForQuestionAnswering``,
``BertForSequenceClassification`` ...) are what that import leaves unused. Each task names the HF head prefixes that
are its own parameters 1:1 (``HEADS`` tables below); every such tensor whose shape fits is copied. One log block then
says which task tensors were loaded, which start freshly initialised (new) and which checkpoint tensors were ignored
and why.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

log = logging.getLogger("genlab")

# HF heads whose parameters are ours by name (after the prefix) and computation (eval mode):
# XLNetFor{SequenceClassification,MultipleChoice}: tanh summary of <cls> (last) + logits_proj;
# BertFor{SequenceClassification,MultipleChoice}: classifier on the pooler (the pooler is part of the body);
# FunnelFor{SequenceClassification,MultipleChoice}: tanh projection of [CLS] + linear_out (longest prefix wins).
SUMMARY_HEADS = {"sequence_summary.": "backbone.sequence_summary.", "logits_proj.": "head.proj.",
                 "classifier.": "head.proj.", "classifier.linear_hidden.": "backbone.summary_proj.",
                 "classifier.linear_out.": "head.proj."}
# XLNetForQuestionAnswering: start logits, end logits conditioned on the start, answer class (genlab SpanHead).
SPAN_HEADS = {"start_logits.": "head.start_logits.", "end_logits.": "head.end_logits.",
              "answer_class.": "head.answer_class."}

PRETRAINING_HEAD = "pretraining head; finetuning does not use it"
NO_COUNTERPART = "no counterpart in this task"
# HF heads that look close to ours but compute something else: never copied, said so.
NO_EQUIVALENT = {
    "qa_outputs.": "HF's independent start/end projection (XLNetForQuestionAnsweringSimple, BertForQuestionAnswering) "
                   "has no equivalent in genlab's span head, whose end logits are conditioned on the start",
}


@dataclass
class PretrainedWeights:
    """What ``load_pretrained`` copied into the pretraining model, kept until the task's heads exist."""

    source: str
    loaded: dict[int, str]  # storage address of a model tensor filled from the checkpoint -> its model name
    unused: dict[str, Tensor | None]  # checkpoint tensors the body import had no place for (HF task heads)
    config: dict[str, Any] = field(default_factory=dict)  # the HF folder's config.json ({} for a genlab .ckpt)
    file_names: dict[str, str] = field(default_factory=dict)  # model name of a loaded tensor -> the file's name
    reasons: dict[str, str] = field(default_factory=dict)  # why an unused checkpoint tensor is not taken
    notes: list[str] = field(default_factory=list)  # what the import changes besides tensors (printed with them)
    # the loaded tensors themselves: a module the adapter drops (Funnel's decoder) must not free its storage, which
    # a new task tensor could then reuse and be mistaken for a loaded one
    alive: list[Tensor] = field(default_factory=list, repr=False)

    @classmethod
    def of(cls, model: nn.Module, source: str, loaded: Iterable[str], unused: Mapping[str, Tensor | None],
           config: Mapping[str, Any] | None = None, **kw: Any) -> PretrainedWeights:
        ours = model.state_dict(keep_vars=True)
        # the adapter renames the body's tensors (transformer.* -> backbone.transformer.*) but keeps them: match
        # by storage, so every backbone family is covered without a prefix table
        kept = [k for k in loaded if k in ours]
        return cls(source, {ours[k].data_ptr(): k for k in kept}, dict(unused), dict(config or {}), **kw,
                   alive=[ours[k] for k in kept])


@dataclass
class InitReport:
    """Task tensors filled from the checkpoint, task tensors left fresh, checkpoint tensors ignored (with why)."""

    source: str
    loaded: list[str]
    new: list[str]
    ignored: dict[str, str]
    notes: list[str] = field(default_factory=list)

    def format(self) -> str:
        lines = [f"task.init_from={self.source}: {len(self.loaded)} tensors loaded, {len(self.new)} new "
                 f"(freshly initialised), {len(self.ignored)} checkpoint tensors ignored",
                 f"  loaded: {brief(self.loaded) or '-'}", f"  new: {brief(self.new) or '-'}"]
        by_reason: dict[str, list[str]] = defaultdict(list)
        for key, why in self.ignored.items():
            by_reason[why].append(key)
        lines += [f"  ignored: {brief(keys)} ({why})" for why, keys in by_reason.items()] or ["  ignored: -"]
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])


def take_heads(task: nn.Module, weights: PretrainedWeights, heads: Mapping[str, str]) -> InitReport:
    """Copy the checkpoint's head tensors that ``heads`` maps onto ``task`` (names and shapes), then account for
    every task tensor and every checkpoint tensor."""
    ours = task.state_dict(keep_vars=True)
    names_at: dict[int, list[str]] = defaultdict(list)
    for name, tensor in ours.items():
        names_at[tensor.data_ptr()].append(name)
    loaded = [name for ptr in weights.loaded for name in names_at.get(ptr, [])]
    ignored = {weights.file_names.get(key, key): dropped_reason(key) for ptr, key in weights.loaded.items()
               if ptr not in names_at}
    refused = incompatible_heads(weights.config)
    with torch.no_grad():
        for key, value in weights.unused.items():
            prefix = max((p for p in heads if key.startswith(p)), key=len, default=None)
            target = None if prefix is None else heads[prefix] + key[len(prefix):]
            if key in weights.reasons:
                ignored[key] = weights.reasons[key]
            elif value is None or target is None or target not in ours:
                ignored[key] = next((why for p, why in NO_EQUIVALENT.items() if key.startswith(p)), NO_COUNTERPART)
            elif prefix in refused:
                ignored[key] = refused[prefix]
            elif tuple(value.shape) != tuple(ours[target].shape):
                ignored[key] = f"shape {tuple(value.shape)}, this task's {target} is {tuple(ours[target].shape)}"
            else:
                ours[target].copy_(value.to(ours[target].dtype))
                loaded.append(target)
    taken = set(loaded)
    return InitReport(weights.source, sorted(taken), [n for n in ours if n not in taken], ignored, weights.notes)


def dropped_reason(name: str) -> str:
    """Why a tensor the import loaded is not part of the task (the adapter dropped its module)."""
    if name.startswith(("decoder.", "funnel.decoder.")):
        return "Funnel decoder; this task reads the encoder output only"
    return PRETRAINING_HEAD


def incompatible_heads(config: Mapping[str, Any]) -> dict[str, str]:
    """HF heads whose shapes fit but whose config computes something other than ours."""
    if config.get("model_type") == "openai-gpt":  # DoubleHeads: linear on the hidden state at mc_token_ids (<e>)
        summary = (config.get("summary_type", "cls_index"), config.get("summary_use_proj", True),
                   config.get("summary_activation"))
        if summary == ("cls_index", True, None):
            return {}
        return {"multiple_choice_head.summary.": f"config.json's summary (summary_type, summary_use_proj, summary_activation)"
                                        f" = {summary}; genlab's multiple-choice head is ('cls_index', True, None)"}
    if config.get("model_type") != "xlnet":
        return {}
    summary = (config.get("summary_type", "last"), config.get("summary_use_proj", True),
               config.get("summary_activation", "tanh"))
    if summary == ("last", True, "tanh"):
        return {}
    return {"sequence_summary.": f"config.json's summary (summary_type, summary_use_proj, summary_activation) = "
                                 f"{summary}; genlab's is ('last', True, 'tanh')"}


def brief(keys: Iterable[str]) -> str:
    """``a.b.* (37)`` for a large group of names under the same two-part prefix, ``a.b.{bias,weight}`` otherwise."""
    groups: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        groups[".".join(key.split(".")[:2])].append(key)
    parts = []
    for prefix, members in groups.items():
        if len(members) > 4:
            parts.append(f"{prefix}.* ({len(members)})")
            continue
        modules: dict[str, list[str]] = defaultdict(list)
        for key in members:
            module, _, leaf = key.rpartition(".")
            modules[module].append(leaf)
        parts += [f"{m}.{leaves[0]}".lstrip(".") if len(leaves) == 1 else f"{m}.{{{','.join(sorted(leaves))}}}"
                  for m, leaves in modules.items()]
    return ", ".join(parts)
