"""Funnel-Transformer finetuning through the shared suite (Dai's thesis §5.3 and the released
code's finetuning layout): published HF
folders and genlab MLM/ELECTRA checkpoints as ``task.init_from``, the decoder kept only for token-level tasks,
Funnel's layer-wise learning-rate depths, and the ``funnel`` input layout (segment 2 on [CLS])."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from genlab.data.finetune.datamodule import encode_pair
from genlab.errors import CheckpointError, ConfigError
from genlab.interop.hf_files import read_state_dict
from genlab.interop.hf_funnel import save_hf_checkpoint
from genlab.models.backbones import FunnelBackbone
from genlab.models.funnel import FunnelModel
from genlab.models.funnel_pretraining import FunnelElectra, FunnelForMaskedLM
from genlab.tasks.finetune_classification import SequenceClassificationTask
from genlab.tasks.finetune_multiple_choice import MultipleChoiceTask
from genlab.tasks.finetune_span import SpanExtractionTask

V = 60
TINY = {"block_sizes": (2, 1, 1), "d_model": 32, "n_head": 2, "d_head": 16, "d_inner": 64}
FUNNEL_VOCAB = ["<pad>", "<unk>", "<cls>", "<sep>", "<mask>", "<s>", "</s>"] + [f"w{i}" for i in range(V - 7)]


def _opt(lr=1e-3):
    return functools.partial(torch.optim.AdamW, lr=lr, betas=(0.9, 0.99), eps=1e-6)


def classifier(model, **kw):
    return SequenceClassificationTask(model, _opt(), None, n_labels=2, weight_decay=0.0, **kw)


def span(model, **kw):
    return SpanExtractionTask(model, _opt(), None, **kw)


def _hf_folder(root, model, vocab=True):
    save_hf_checkpoint(model, root)
    if vocab:
        (root / "vocab.txt").write_text("\n".join(FUNNEL_VOCAB) + "\n")
        (root / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    return root


def test_hf_funnel_folder_finetunes_with_its_own_tokenizer(tmp_path):
    torch.manual_seed(0)
    published = FunnelModel(V, **TINY)  # an HF FunnelModel (with decoder), e.g. funnel-transformer/small
    folder = _hf_folder(tmp_path / "small", published)
    task = classifier(FunnelForMaskedLM(V, **TINY), init_from=str(folder))
    body = task.backbone.funnel
    assert body.decoder is None  # sequence task: encoder only
    report = task.init_report  # the decoder under the file's names, and HF's padding semantics named
    decoder = [k for k in read_state_dict(folder) if k.startswith("decoder.")]
    assert {k: v for k, v in report.ignored.items() if k.startswith("decoder.")} == dict.fromkeys(
        decoder, "Funnel decoder; this task reads the encoder output only")
    assert not any(k.startswith("funnel.decoder") for k in report.ignored) and "decoder." in report.format()
    assert len(report.notes) == 1 and "model.mask_pool=all_real reproduces HF" in report.format()
    for name, p in published.named_parameters():
        if not name.startswith("decoder."):
            torch.testing.assert_close(dict(body.named_parameters())[name], p, rtol=0, atol=0, msg=name)
    identity = task.pretrained_identity
    assert identity["tokenizer"].startswith("wordpiece-") and identity["tokenizer_source"].endswith("vocab.txt")
    qa = span(FunnelForMaskedLM(V, **TINY), init_from=str(folder))  # SQuAD keeps the decoder, imported too
    torch.testing.assert_close(qa.backbone.funnel.decoder.layers[1].ffn.layer_2.weight,
                               published.decoder.layers[1].ffn.layer_2.weight, rtol=0, atol=0)


def test_hf_base_checkpoint_without_decoder(tmp_path):
    torch.manual_seed(0)
    folder = _hf_folder(tmp_path / "small-base", FunnelModel(V, **TINY, use_decoder=False), vocab=False)
    task = MultipleChoiceTask(FunnelForMaskedLM(V, **TINY), _opt(), None, init_from=str(folder))
    assert task.backbone.funnel.decoder is None
    with pytest.raises(CheckpointError, match="no decoder"):
        span(FunnelForMaskedLM(V, **TINY), init_from=str(folder))


def test_hf_funnel_architecture_mismatch_names_the_keys(tmp_path):
    folder = _hf_folder(tmp_path / "f", FunnelModel(V, **TINY), vocab=False)
    with pytest.raises(CheckpointError, match=r"model.block_sizes=\[2,1,1\]"):
        classifier(FunnelForMaskedLM(V, **{**TINY, "block_sizes": (1, 1, 1)}), init_from=str(folder))
    with pytest.raises(CheckpointError, match="vocabulary"):
        classifier(FunnelForMaskedLM(V + 1, **TINY), init_from=str(folder))


@pytest.mark.parametrize("pretrain_cls", [FunnelForMaskedLM, FunnelElectra])
def test_genlab_mlm_or_electra_checkpoint_loads_the_body_only(tmp_path, pretrain_cls):
    torch.manual_seed(0)
    pretrained = pretrain_cls(V, **TINY, **({"width_shrink": 0.5} if pretrain_cls is FunnelElectra else {}))
    ckpt = tmp_path / "last.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in pretrained.state_dict().items()},
                "genlab": {"data_identity": {"vocab_size": V, "tokenizer": "spm-x"}}}, ckpt)
    task = classifier(FunnelForMaskedLM(V, **TINY), init_from=str(ckpt))
    theirs = dict(pretrained.funnel.named_parameters())
    for name, p in task.backbone.funnel.named_parameters():
        torch.testing.assert_close(p, theirs[name], rtol=0, atol=0, msg=name)
    assert task.pretrained_identity["tokenizer"] == "spm-x"
    with pytest.raises(CheckpointError, match="Funnel body"):
        classifier(FunnelForMaskedLM(V, **{**TINY, "d_inner": 32}), init_from=str(ckpt))


def test_layer_depths_follow_the_original_code_with_and_without_decoder():
    task = span(FunnelForMaskedLM(V, **TINY), layer_decay=0.5, layer_decay_mode="lr_groups")
    b = task.backbone
    assert b.n_layer == 4 and b.n_depth_ids == 1 + 4 + 2
    assert b.layer_depth("backbone.funnel.embeddings.word_embeddings.weight") == 0
    assert b.layer_depth("backbone.funnel.encoder.layer.3.attention.r_w_bias") == 4
    assert b.layer_depth("backbone.funnel.decoder.layers.1.ffn.layer_1.weight") == 6
    assert b.layer_depth("head.start.weight") is None and b.layer_depth("backbone.summary_proj.weight") is None
    opt = task.configure_optimizers()
    lr_of = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    f = b.funnel
    assert lr_of[id(f.decoder.layers[1].ffn.layer_1.weight)] == pytest.approx(1e-3)
    assert lr_of[id(f.decoder.layers[0].ffn.layer_1.weight)] == pytest.approx(5e-4)
    assert lr_of[id(f.encoder.layer[3].attention.seg_embed)] == pytest.approx(1e-3 * 0.5**2)
    assert lr_of[id(f.encoder.layer[0].attention.q_head.weight)] == pytest.approx(1e-3 * 0.5**5)
    assert lr_of[id(f.embeddings.word_embeddings.weight)] == pytest.approx(1e-3 * 0.5**6)
    cls_task = classifier(FunnelForMaskedLM(V, **TINY), layer_decay=0.5)  # no decoder: 1 + 4 ids
    assert cls_task.backbone.n_depth_ids == 5
    lr_cls = {id(p): g["lr"] for g in cls_task.configure_optimizers().param_groups for p in g["params"]}
    top = cls_task.backbone.funnel.encoder.layer[3]
    assert lr_cls[id(top.ffn.layer_1.weight)] == pytest.approx(1e-3)
    assert lr_cls[id(cls_task.head.proj.weight)] == pytest.approx(1e-3)


def test_grad_scale_mode_scales_the_layer_scoped_relative_biases_and_the_embedding():
    task = classifier(FunnelForMaskedLM(V, **TINY), layer_decay=0.5, layer_decay_mode="grad_scale")
    for p in task.parameters():
        p.grad = torch.ones_like(p)
    from genlab.tasks.layerwise_lr import scale_layer_gradients

    scale_layer_gradients(task, 0.5, **task.layer_depths())
    f = task.backbone.funnel
    assert float(f.encoder.layer[0].attention.r_w_bias.grad[0, 0]) == 0.5**3  # inside the layer scope here
    assert float(f.embeddings.word_embeddings.weight.grad[0, 0]) == 0.5**4
    assert float(f.encoder.layer[3].ffn.layer_1.weight.grad[0, 0]) == 1.0
    assert float(task.head.proj.weight.grad[0, 0]) == 1.0


def test_one_block_baseline_is_token_level_without_decoder():
    model = FunnelForMaskedLM(V, **{**TINY, "block_sizes": (3,), "use_decoder": False})
    backbone = FunnelBackbone(model, use_decoder=True)
    ids = torch.randint(0, V, (2, 12))
    assert backbone.encode(ids).shape == (2, 12, 32) and backbone.n_depth_ids == 4
    with pytest.raises(ConfigError, match="use_decoder"):
        FunnelForMaskedLM(V, **{**TINY, "use_decoder": False})


def test_funnel_layout_puts_segment_2_on_cls():
    ids, seg, mask = encode_pair([11, 12, 13], [21, 22], 10, "funnel", cls_id=2, sep_id=3, pad_id=0)
    assert ids.tolist() == [2, 11, 12, 13, 3, 21, 22, 3, 0, 0]
    assert seg.tolist() == [2, 0, 0, 0, 0, 1, 1, 1, 0, 0] and mask.tolist() == [1] * 8 + [0, 0]
    bert = encode_pair([11, 12, 13], [21, 22], 10, "bert", cls_id=2, sep_id=3, pad_id=0)
    assert bert[1].tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 0, 0]


def test_funnel_layouts_of_squad_and_race_with_a_funnel_wordpiece_vocabulary(tmp_path):
    from genlab.data.finetune.race import RaceQuestion, encode_question
    from genlab.data.finetune.squad import SquadExample, build_features
    from genlab.data.tokenizers.wordpiece import WordPieceTokenizer

    (tmp_path / "vocab.txt").write_text("\n".join(FUNNEL_VOCAB + ["the", "cat", "sat", "who", "?"]) + "\n")
    tok = WordPieceTokenizer(tmp_path / "vocab.txt")
    assert (tok.cls_id, tok.sep_id, tok.pad_id, tok.mask_id, tok.unk_id) == (2, 3, 0, 4, 1)
    ex = SquadExample(qid="q", question="who sat ?", context="the cat sat", answers=[], is_impossible=True)
    feats, _ = build_features([ex], tok, max_seq_len=16, doc_stride=8, max_query_length=8, layout="funnel")
    assert feats.input_ids[0, 0] == 2 and feats.token_type_ids[0, 0] == 2 and feats.cls_index[0] == 0
    q_len = 3
    assert (feats.token_type_ids[0, 1:q_len + 2] == 0).all() and feats.token_type_ids[0, q_len + 2] == 1
    q = RaceQuestion(qid="r", article="the cat sat", question="who sat ?", options=("the", "cat", "sat", "who"),
                     label=0, level=0)
    ids, seg, _ = encode_question(q, tok, 16, 8, "funnel")
    assert ids[0, 0] == 2 and seg[0, 0] == 2 and ids[0, 1:5].tolist() == tok.encode("who sat ? the")
    assert np.all(seg[:, 1:6] == 0)


@pytest.mark.parametrize("hf_class", ["FunnelBaseModel", "FunnelForSequenceClassification", "FunnelModel"])
def test_a_transformers_save_pretrained_folder_finetunes_with_equal_encoder_outputs(tmp_path, hf_class):
    """A folder written by ``transformers`` itself (what a published checkpoint is) imports through
    ``task.init_from``: the finetuning backbone's encoder output equals HF's on an unpadded input (eval, fp32)."""
    transformers = pytest.importorskip("transformers", reason="transformers (test dependency) is not installed")
    config = transformers.FunnelConfig(vocab_size=V, block_sizes=[2, 1, 1], d_model=32, n_head=2, d_head=16,
                                       d_inner=64, num_labels=2)
    torch.manual_seed(0)
    hf = getattr(transformers, hf_class)(config).eval()
    with torch.no_grad():  # spread HF's small r_* init so every term matters
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    hf.save_pretrained(tmp_path / "hf", safe_serialization=True)
    task = classifier(FunnelForMaskedLM(V, **TINY), init_from=str(tmp_path / "hf")).eval()
    ids = torch.randint(7, V, (2, 16))
    types = torch.cat([torch.full((2, 1), 2), torch.zeros(2, 7, dtype=torch.long), torch.ones(2, 8, dtype=torch.long)],
                      dim=1)
    body = hf.funnel if hasattr(hf, "funnel") else hf
    with torch.no_grad():
        if hf_class == "FunnelModel":  # its output is the decoder's: compare the encoder's
            theirs = body.encoder(body.embeddings(ids), torch.ones_like(ids), types).last_hidden_state
        else:
            theirs = body(ids, token_type_ids=types).last_hidden_state
        ours = task.backbone.encode(ids, types, torch.ones_like(ids))
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
