"""HF BERT checkpoint import/export: fp64 parity with transformers (padding, token types), layouts, clear errors."""

from __future__ import annotations

import json

import pytest
import torch

from genlab.errors import CheckpointError
from genlab.interop.hf_bert import (
    config_from_hf,
    export_hf_state_dict,
    load_hf_checkpoint,
    load_hf_state_dict,
    read_state_dict,
    save_hf_checkpoint,
)
from genlab.models.bert import BertForPretraining

transformers = pytest.importorskip("transformers", reason="transformers (test dependency) is not installed")

V, T = 50, 7
HF_DIMS = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=16, type_vocab_size=2, hidden_dropout_prob=0.0,
               attention_probs_dropout_prob=0.0)
OUR_DIMS = dict(n_layer=2, d_model=32, n_head=4, d_inner=64, max_position=16, type_vocab_size=2, dropout=0.0,
                dropatt=0.0)


@pytest.fixture(autouse=True)
def fp64():
    """Models built by the importer are fp64 too, so the comparison is exact up to summation order."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every weight random (LayerNorm and biases included) so a mis-mapped tensor cannot hide; fp64."""
    torch.manual_seed(seed)
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


def hf(cls_name: str = "BertForPreTraining", seed: int = 1, **kw):
    cfg = transformers.BertConfig(**{**HF_DIMS, **kw})
    return randomise(getattr(transformers, cls_name)(cfg), seed)


def ours(seed: int = 0, **kw) -> BertForPretraining:
    return randomise(BertForPretraining(V, **{**OUR_DIMS, **kw}), seed)


def batch():
    """Two sequences, the second right-padded, with both token types."""
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, V, (2, T), generator=g)
    seg = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0, 0]])
    mask = torch.tensor([[1] * T, [1, 1, 1, 1, 0, 0, 0]])
    ids[1, 4:] = 0
    return ids, seg, mask


def assert_same_outputs(model: BertForPretraining, ref, tol: float = 1e-10) -> None:
    ids, seg, mask = batch()
    out = model(ids, seg, mask)
    theirs = ref(input_ids=ids, token_type_ids=seg, attention_mask=mask)
    if isinstance(ref, transformers.BertForPreTraining):
        body = ref.bert(input_ids=ids, token_type_ids=seg, attention_mask=mask)
        assert (model.mlm_logits(out.hidden) - theirs.prediction_logits).abs().max() < tol
        assert (model.nsp_logits(out.pooled) - theirs.seq_relationship_logits).abs().max() < tol
    else:
        body = theirs
    real = mask.bool()
    assert (out.hidden - body.last_hidden_state)[real].abs().max() < tol
    assert (out.pooled - body.pooler_output).abs().max() < tol


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "pytorch_model.bin"])
def test_import_hf_save_pretrained_matches_hidden_pooled_and_mlm_logits(tmp_path, safe):
    ref = hf()
    ref.save_pretrained(tmp_path, safe_serialization=safe)
    model = load_hf_checkpoint(tmp_path).double().eval()
    assert model.arch["n_head"] == 4 and model.arch["max_position"] == 16
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert_same_outputs(model, ref)


def test_sharded_checkpoint(tmp_path):
    ref = hf()
    ref.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert_same_outputs(load_hf_checkpoint(tmp_path).double().eval(), ref)


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "pytorch_model.bin"])
def test_export_then_hf_from_pretrained(tmp_path, safe):
    model = ours()
    path = save_hf_checkpoint(model, tmp_path, safe_serialization=safe)
    assert path.exists()
    ref = transformers.BertForPreTraining.from_pretrained(tmp_path, torch_dtype=torch.float64).eval()
    assert_same_outputs(model, ref)


def test_round_trip_state_dict_is_identity():
    a, b = ours(0), ours(5)
    load_hf_state_dict(b, export_hf_state_dict(a))
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


def test_bare_bert_model_keeps_heads_initialised(tmp_path):
    ref = hf("BertModel")
    ref.save_pretrained(tmp_path)
    model = ours()
    before = model.cls.seq_relationship.weight.clone()
    report = load_hf_state_dict(model, read_state_dict(tmp_path), source=str(tmp_path))
    assert any(k.startswith("cls.seq_relationship.") for k in report.kept_init)
    assert any(k.startswith("cls.predictions.transform.") for k in report.kept_init)
    assert not any(k.startswith("bert.") for k in report.kept_init)
    assert torch.equal(model.cls.seq_relationship.weight, before)
    assert_same_outputs(model, ref)


def test_masked_lm_without_pooler_and_classifier_heads_are_reported():
    mlm = hf("BertForMaskedLM")  # no pooler, no NSP head
    model = ours()
    report = load_hf_state_dict(model, mlm.state_dict())
    assert sorted(k for k in report.kept_init if k.startswith("bert.")) == ["bert.pooler.dense.bias",
                                                                           "bert.pooler.dense.weight"]
    ids, seg, mask = batch()
    theirs = mlm(input_ids=ids, token_type_ids=seg, attention_mask=mask).logits
    assert (model.mlm_logits(model(ids, seg, mask).hidden) - theirs)[mask.bool()].abs().max() < 1e-10

    clf = hf("BertForSequenceClassification", num_labels=3)
    report = load_hf_state_dict(ours(), clf.state_dict())
    assert sorted(report.unused) == ["classifier.bias", "classifier.weight"]


def test_tensorflow_gamma_beta_names():
    ref = hf()
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in ref.state_dict().items()}
    assert any(k.endswith("gamma") for k in state)
    model = ours()
    load_hf_state_dict(model, state)
    assert_same_outputs(model, ref)


def test_wrong_sizes_name_the_tensors():
    state = hf().state_dict()
    with pytest.raises(CheckpointError, match=r"bert.encoder.layer.0.intermediate.dense.weight.*Set the model sizes"):
        load_hf_state_dict(ours(d_inner=48), state)
    with pytest.raises(CheckpointError, match=r"tensors the model does not have: bert.encoder.layer.1"):
        load_hf_state_dict(ours(n_layer=1), state)
    with pytest.raises(CheckpointError, match=r"missing tensors: bert.encoder.layer.2"):
        load_hf_state_dict(ours(n_layer=3), state)
    partial = {k: v for k, v in state.items() if k != "bert.pooler.dense.bias"}
    with pytest.raises(CheckpointError, match=r"missing tensors: bert.pooler.dense.bias"):
        load_hf_state_dict(ours(), partial)
    with pytest.raises(CheckpointError, match="no BERT tensors"):
        load_hf_state_dict(ours(), {"foo.weight": torch.zeros(2)})


def test_untied_decoder_is_refused():
    state = dict(hf().state_dict())
    state["cls.predictions.decoder.weight"] = state["cls.predictions.decoder.weight"] + 1
    with pytest.raises(CheckpointError, match="ties them"):
        load_hf_state_dict(ours(), state)


def test_unsupported_config_and_missing_files(tmp_path):
    cfg = transformers.BertConfig(**HF_DIMS).to_dict()
    assert config_from_hf(cfg)["d_inner"] == 64
    with pytest.raises(CheckpointError, match="hidden_act='gelu_new'"):
        config_from_hf({**cfg, "hidden_act": "gelu_new"})
    with pytest.raises(CheckpointError, match="relative_key"):
        config_from_hf({**cfg, "position_embedding_type": "relative_key"})
    with pytest.raises(CheckpointError, match="model_type='xlnet'"):
        config_from_hf({**cfg, "model_type": "xlnet"})
    with pytest.raises(CheckpointError, match="config.json not found"):
        load_hf_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_hf_checkpoint(tmp_path)


@pytest.mark.parametrize("head", ["BertForSequenceClassification", "BertForMultipleChoice"])
def test_c23_finetuning_heads_equal_hf_bert_task_models(tmp_path, head):
    """Imported through task.init_from, our task = pooled [CLS] -> Linear equals the HF task model exactly."""
    import functools

    from genlab.tasks.finetune_classification import SequenceClassificationTask
    from genlab.tasks.finetune_multiple_choice import MultipleChoiceTask

    ref = hf(head, num_labels=3)
    ref.save_pretrained(tmp_path)
    sgd = functools.partial(torch.optim.SGD, lr=0.1)
    if head == "BertForSequenceClassification":
        task = SequenceClassificationTask(BertForPretraining(V, **OUR_DIMS), sgd, None, n_labels=3, summary_dropout=0.0,
                                          init_from=str(tmp_path))
        ids, seg, mask = batch()
    else:
        task = MultipleChoiceTask(BertForPretraining(V, **OUR_DIMS), sgd, None, n_choices=2, summary_dropout=0.0,
                                  init_from=str(tmp_path))
        ids, seg, mask = (t.view(1, 2, T) for t in batch())
    task = task.double().eval()
    with torch.no_grad():  # HF task heads are finetuning heads: copied, not imported
        task.head.proj.weight.copy_(ref.classifier.weight)
        task.head.proj.bias.copy_(ref.classifier.bias)
    ours = task({"input_ids": ids, "token_type_ids": seg, "attention_mask": mask})
    theirs = ref(input_ids=ids, token_type_ids=seg, attention_mask=mask).logits
    assert ours.shape == theirs.shape and (ours - theirs).abs().max() < 1e-10
