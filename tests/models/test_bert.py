"""BERT baseline (Devlin et al., 2019, as XLNet v1 §3.7 uses it): parameter count, HF layout and numerical parity with
BertForPreTraining."""

import pytest
import torch

from genlab.models.bert import BertForPretraining


def test_bert_base_parameter_count_with_xlnet_vocab():
    with torch.device("meta"):
        model = BertForPretraining(vocab_size=32000)
    assert sum(p.numel() for p in model.parameters()) == 111_243_010
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight


def test_shapes_and_padding_is_invisible():
    torch.manual_seed(0)
    model = BertForPretraining(vocab_size=50, n_layer=2, d_model=32, n_head=2, d_inner=64, max_position=16,
                               dropout=0.0, dropatt=0.0).eval()
    ids = torch.randint(9, 50, (2, 10))
    types = torch.zeros_like(ids)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    out = model(ids, types, mask)
    assert out.hidden.shape == (2, 10, 32) and out.pooled.shape == (2, 32)
    assert model.mlm_logits(out.hidden).shape == (2, 10, 50) and model.nsp_logits(out.pooled).shape == (2, 2)
    ids2 = ids.clone()
    ids2[1, 7:] = 5  # change only the padded tokens
    out2 = model(ids2, types, mask)
    torch.testing.assert_close(out2.hidden[1, :7], out.hidden[1, :7])


def test_matches_hugging_face_bert_for_pretraining():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12)
    hf = transformers.BertForPreTraining(cfg).eval()
    ours = BertForPretraining(vocab_size=50, n_layer=2, d_model=32, n_head=2, d_inner=64, max_position=16,
                              dropout=0.0, dropatt=0.0).eval()
    skip = ("position_ids", "token_type_ids", "cls.predictions.decoder.bias")  # HF buffers; bias alias
    hf_state = {k: v for k, v in hf.state_dict().items() if not any(s in k for s in skip)}
    missing, unexpected = ours.load_state_dict(hf_state, strict=False)
    assert not unexpected and set(missing) <= {"cls.predictions.decoder.weight"}
    ids = torch.randint(0, 50, (2, 12))
    types = torch.cat([torch.zeros(2, 6), torch.ones(2, 6)], 1).long()
    mask = torch.ones_like(ids)
    mask[0, 9:] = 0
    ref = hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
    out = ours(ids, types, mask)
    real = mask.bool()
    torch.testing.assert_close(ours.mlm_logits(out.hidden)[real], ref.prediction_logits[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.nsp_logits(out.pooled), ref.seq_relationship_logits, atol=1e-5, rtol=1e-5)


def test_mlm_head_without_transform_is_the_tied_decoder_plus_bias():
    """model.mlm_transform=false (a mini-scale option, as XLNet's LM head): logits = h Eᵀ + b."""
    torch.manual_seed(0)
    model = BertForPretraining(vocab_size=50, n_layer=1, d_model=32, n_head=2, d_inner=64, max_position=16,
                               mlm_transform=False)
    assert not any(".transform." in k for k in model.state_dict())
    torch.nn.init.normal_(model.cls.predictions.bias)
    h = torch.randn(2, 5, 32)
    expected = h @ model.bert.embeddings.word_embeddings.weight.T + model.cls.predictions.bias
    torch.testing.assert_close(model.mlm_logits(h), expected)
    with_transform = BertForPretraining(vocab_size=50, n_layer=1, d_model=32, n_head=2, d_inner=64, max_position=16)
    extra = sum(p.numel() for p in with_transform.parameters()) - sum(p.numel() for p in model.parameters())
    assert extra == 32 * 32 + 32 + 2 * 32  # dense + LayerNorm


def test_export_to_hugging_face_refuses_a_model_without_the_mlm_transform(tmp_path):
    from genlab.errors import CheckpointError
    from genlab.interop.hf_bert import save_hf_checkpoint

    model = BertForPretraining(vocab_size=50, n_layer=1, d_model=32, n_head=2, d_inner=64, max_position=16,
                               mlm_transform=False)
    with pytest.raises(CheckpointError, match="mlm_transform"):
        save_hf_checkpoint(model, tmp_path / "hf")
