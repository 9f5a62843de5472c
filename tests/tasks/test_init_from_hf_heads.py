"""``task.init_from=<HF folder>`` of a finetuned HF task model: every head that maps 1:1 onto ours by name and shape
is loaded, the log names what was loaded / new / ignored, and the task then computes what HF computes.
Tiny random HF models (2 layers, d_model 32, vocab 100) saved with ``save_pretrained``."""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

import pytest
import torch

from genlab.interop import hf_bert, hf_xlnet
from genlab.models.bert import BertForPretraining
from genlab.models.xlnet import XLNetLMHeadModel
from genlab.tasks.finetune_classification import SequenceClassificationTask
from genlab.tasks.finetune_multiple_choice import MultipleChoiceTask
from genlab.tasks.finetune_span import SpanExtractionTask
from genlab.tasks.pretrained_heads import PRETRAINING_HEAD

transformers = pytest.importorskip("transformers", reason="transformers (test dependency) is not installed")

V = 100
XLNET = dict(vocab_size=V, d_model=32, n_layer=2, n_head=2, d_inner=64, ff_activation="gelu_new")
BERT = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64)
SGD = functools.partial(torch.optim.SGD, lr=0.1)


def save(folder: Path, cls: str, **config) -> Path:
    torch.manual_seed(0)
    family = transformers.XLNetConfig if cls.startswith("XLNet") else transformers.BertConfig
    getattr(transformers, cls)(family(**config)).save_pretrained(folder)
    return folder


def ours(folder: Path):
    """Our pretraining model with the sizes of the folder's config.json, as a finetuning preset would build it."""
    config = json.loads((folder / "config.json").read_text())
    if config["model_type"] == "xlnet":
        return XLNetLMHeadModel(**hf_xlnet.config_from_hf(config))
    return BertForPretraining(**hf_bert.config_from_hf(config))


def classification(folder: Path, n_labels: int = 2) -> SequenceClassificationTask:
    return classification_of(ours(folder), folder, n_labels)


def classification_of(model, folder: Path, n_labels: int = 2) -> SequenceClassificationTask:
    return SequenceClassificationTask(model, SGD, None, n_labels=n_labels, init_from=str(folder)).eval()


def xlnet_batch():
    torch.manual_seed(1)
    ids = torch.randint(5, V, (3, 11))
    seg = torch.zeros_like(ids)
    seg[:, 6:] = 1
    seg[:, -1] = 2
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # XLNet pads on the left
    seg[0, :4] = 4
    return ids, seg, mask


def bert_batch():
    torch.manual_seed(1)
    ids = torch.randint(5, V, (3, 11))
    seg = torch.zeros_like(ids)
    seg[:, 6:] = 1
    mask = torch.ones_like(ids)
    mask[0, 8:] = 0  # BERT pads on the right
    return ids, seg, mask


def test_xlnet_sequence_classification_heads_load_and_match_hf(tmp_path, caplog):
    folder = save(tmp_path / "xlnet-sst", "XLNetForSequenceClassification", **XLNET, num_labels=3)
    with caplog.at_level(logging.INFO, logger="genlab"):
        task = classification(folder, n_labels=3)
    report = task.init_report
    assert {"head.proj.weight", "head.proj.bias", "backbone.sequence_summary.summary.weight",
            "backbone.sequence_summary.summary.bias", "backbone.transformer.word_embedding.weight"} <= set(report.loaded)
    assert report.new == [] and report.ignored == {}
    assert "head.proj.{bias,weight}" in caplog.text and "0 new" in caplog.text

    ids, seg, mask = xlnet_batch()
    hf = transformers.XLNetForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        theirs = hf(input_ids=ids, token_type_ids=seg, attention_mask=mask.float()).logits
        logits = task({"input_ids": ids, "token_type_ids": seg, "attention_mask": mask})
    torch.testing.assert_close(logits, theirs, atol=1e-5, rtol=1e-5)

    # another label count: the projection does not fit and starts fresh, named with both shapes
    task = classification(folder, n_labels=2)
    assert task.init_report.new == ["head.proj.weight", "head.proj.bias"]
    assert "shape (3, 32)" in task.init_report.ignored["logits_proj.weight"]


def test_xlnet_summary_with_other_semantics_is_not_loaded(tmp_path):
    folder = save(tmp_path / "xlnet-first", "XLNetForSequenceClassification", **XLNET, summary_type="first")
    report = classification(folder).init_report
    assert "summary_type" in report.ignored["sequence_summary.summary.weight"]
    assert "backbone.sequence_summary.summary.weight" in report.new and "head.proj.weight" in report.loaded


def test_xlnet_question_answering_heads_load_and_match_hf_beams(tmp_path):
    folder = save(tmp_path / "xlnet-squad", "XLNetForQuestionAnswering", **XLNET)
    task = SpanExtractionTask(ours(folder), SGD, None, init_from=str(folder)).eval()
    report = task.init_report
    heads = {k for k in task.state_dict() if k.startswith("head.")}
    assert heads and heads <= set(report.loaded) and report.ignored == {}
    # XLNet's adapter always builds a sequence summary; the span head never reads it
    assert report.new == ["backbone.sequence_summary.summary.weight", "backbone.sequence_summary.summary.bias"]

    hf = transformers.XLNetForQuestionAnswering.from_pretrained(folder).eval()
    T = 12
    ids = torch.randint(5, V, (2, T))
    p_mask = torch.zeros(2, T)
    p_mask[:, 7:] = 1
    cls_index = torch.tensor([T - 1, T - 1])
    p_mask[:, T - 1] = 0
    mask = torch.ones(2, T)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, p_mask=p_mask, cls_index=cls_index)
        beams = task.head.beam(task.backbone.encode(ids, None, mask.long()), p_mask, cls_index, 5, 5)
    torch.testing.assert_close(beams.start_top_log_probs, ref.start_top_log_probs.log(), atol=1e-5, rtol=1e-5)
    assert torch.equal(beams.start_top_index, ref.start_top_index)
    reorder = lambda x: x.view(2, 5, 5).transpose(1, 2).reshape(2, 25)  # noqa: E731 - HF: [end rank][start rank]
    torch.testing.assert_close(beams.end_top_log_probs, reorder(ref.end_top_log_probs).log(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(beams.cls_logits, ref.cls_logits, atol=1e-5, rtol=1e-5)

    simple = save(tmp_path / "xlnet-squad-simple", "XLNetForQuestionAnsweringSimple", **XLNET)
    report = SpanExtractionTask(ours(simple), SGD, None, init_from=str(simple)).init_report
    assert "no equivalent" in report.ignored["qa_outputs.weight"]
    assert {"head.start_logits.dense.weight", "head.answer_class.dense_1.weight"} <= set(report.new)


def test_bert_sequence_classification_heads_load_and_match_hf(tmp_path, caplog):
    folder = save(tmp_path / "bert-sst", "BertForSequenceClassification", **BERT, num_labels=2)
    with caplog.at_level(logging.INFO, logger="genlab"):
        task = classification(folder)
    report = task.init_report
    assert {"head.proj.weight", "head.proj.bias", "backbone.bert.pooler.dense.weight"} <= set(report.loaded)
    assert report.new == [] and report.ignored == {}
    assert "backbone.bert.* (" in caplog.text

    ids, seg, mask = bert_batch()
    hf = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        theirs = hf(input_ids=ids, token_type_ids=seg, attention_mask=mask).logits
        logits = task({"input_ids": ids, "token_type_ids": seg, "attention_mask": mask})
    torch.testing.assert_close(logits, theirs, atol=1e-5, rtol=1e-5)


def test_bert_pretraining_pooler_loads_and_nsp_head_is_ignored(tmp_path, caplog):
    folder = save(tmp_path / "bert-pre", "BertForPreTraining", **BERT)
    with caplog.at_level(logging.INFO, logger="genlab"):
        task = classification(folder)
    report = task.init_report
    assert {"backbone.bert.pooler.dense.weight", "backbone.bert.pooler.dense.bias"} <= set(report.loaded)
    assert report.new == ["head.proj.weight", "head.proj.bias"]
    assert report.ignored["cls.seq_relationship.weight"] == PRETRAINING_HEAD
    assert report.ignored["cls.predictions.transform.dense.weight"] == PRETRAINING_HEAD
    assert "cls.seq_relationship.{bias,weight}" in caplog.text and PRETRAINING_HEAD in caplog.text

    ids, seg, mask = bert_batch()
    hf = transformers.BertForPreTraining.from_pretrained(folder).eval()
    with torch.no_grad():
        pooled = hf.bert(input_ids=ids, token_type_ids=seg, attention_mask=mask).pooler_output
        ours_pooled = task.backbone.summary(task.backbone.encode(ids, seg, mask))
    torch.testing.assert_close(ours_pooled, pooled, atol=1e-5, rtol=1e-5)

    # a folder without pooler and NSP head (BertForMaskedLM): the pooler is new; the NSP head is no part of a task
    mlm = save(tmp_path / "bert-mlm", "BertForMaskedLM", **BERT)
    report = classification(mlm).init_report
    assert report.new == ["backbone.bert.pooler.dense.weight", "backbone.bert.pooler.dense.bias",
                          "head.proj.weight", "head.proj.bias"]
    assert not any(k.startswith("cls.seq_relationship") for k in report.ignored)


@pytest.mark.parametrize("cls, sizes, batch", [("XLNetForMultipleChoice", XLNET, xlnet_batch),
                                               ("BertForMultipleChoice", BERT, bert_batch)])
def test_multiple_choice_heads_load_and_match_hf(tmp_path, cls, sizes, batch):
    folder = save(tmp_path / cls, cls, **sizes)
    task = MultipleChoiceTask(ours(folder), SGD, None, n_choices=3, init_from=str(folder)).eval()
    assert task.init_report.new == [] and task.init_report.ignored == {}
    ids, seg, mask = (x.unsqueeze(0) for x in batch())  # one question, its 3 options
    hf = getattr(transformers, cls).from_pretrained(folder).eval()
    with torch.no_grad():
        theirs = hf(input_ids=ids, token_type_ids=seg, attention_mask=mask).logits
        logits = task({"input_ids": ids, "token_type_ids": seg, "attention_mask": mask})
    torch.testing.assert_close(logits, theirs, atol=1e-5, rtol=1e-5)


def test_funnel_sequence_classification_heads_load(tmp_path):
    from genlab.interop.hf_funnel import config_from_hf
    from genlab.models.funnel_pretraining import FunnelForMaskedLM

    torch.manual_seed(0)
    config = transformers.FunnelConfig(vocab_size=V, block_sizes=[2, 1, 1], d_model=32, n_head=2, d_head=16,
                                       d_inner=64, num_labels=2)
    hf = transformers.FunnelForSequenceClassification(config)
    hf.save_pretrained(tmp_path / "funnel-sst")
    sizes = {k: v for k, v in config_from_hf(hf.config.to_dict()).items() if k != "use_decoder"}
    # HF pools the padding mask as "all real" (ours by default as the original code: any_real)
    task = classification_of(FunnelForMaskedLM(**sizes, mask_pool="all_real"), tmp_path / "funnel-sst")
    assert task.init_report.new == [] and task.init_report.ignored == {}
    assert torch.equal(task.backbone.summary_proj.weight, hf.classifier.linear_hidden.weight)
    assert torch.equal(task.head.proj.weight, hf.classifier.linear_out.weight)
    ids, seg, mask = bert_batch()
    with torch.no_grad():
        theirs = hf.eval()(input_ids=ids, token_type_ids=seg, attention_mask=mask).logits
        logits = task({"input_ids": ids, "token_type_ids": seg, "attention_mask": mask})
    torch.testing.assert_close(logits, theirs, atol=1e-5, rtol=1e-5)
