"""Backbone adapters and finetuning heads (XLNet v1 §3.2-§3.5 and the released
run_*.py scripts)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from genlab.models.backbones import BertBackbone, XLNetBackbone, adapt
from genlab.models.bert import BertForPretraining
from genlab.models.heads import ClassificationHead, MultipleChoiceHead, SequenceSummary, SpanHead
from genlab.models.xlnet import XLNetLMHeadModel


@pytest.fixture(autouse=True)
def _fp64():
    """Parity in fp64, for this file's tests only (a module-level switch would leak into every other file)."""
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def tiny_xlnet():
    return XLNetLMHeadModel(50, n_layer=2, d_model=32, n_head=4, d_head=8, d_inner=64, dropout=0.0, dropatt=0.0)


def test_xlnet_summary_is_tanh_projection_of_last_position():
    torch.manual_seed(0)
    bb = adapt(tiny_xlnet(), summary_dropout=0.0).eval()
    assert isinstance(bb, XLNetBackbone) and bb.cls_position == "last"
    ids = torch.randint(5, 50, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, :3] = 0  # left padding
    h = bb.encode(ids, torch.zeros_like(ids), mask)
    assert h.shape == (2, 7, 32)
    expected = torch.tanh(h[:, -1] @ bb.sequence_summary.summary.weight.T + bb.sequence_summary.summary.bias)
    torch.testing.assert_close(bb.summary(h), expected)


def test_sequence_summary_is_shared_by_finetuning_and_the_nsp_head():
    torch.manual_seed(0)
    bb = adapt(tiny_xlnet(), summary_dropout=0.0).eval()
    nsp = SequenceSummary(32, 2, dropout=0.0).eval()
    nsp.summary.load_state_dict(bb.sequence_summary.summary.state_dict())
    h = torch.randn(3, 5, 32)
    torch.testing.assert_close(nsp(h), nsp.logits_proj(bb.summary(h)))


def test_finetuning_checkpoints_with_the_former_summary_name_still_load():
    torch.manual_seed(0)
    bb = adapt(tiny_xlnet(), summary_dropout=0.0)
    old = {k.replace("sequence_summary.summary.", "summary_proj."): v.clone() + 1 for k, v in bb.state_dict().items()}
    assert "summary_proj.weight" in old
    bb.load_state_dict(old, strict=True)
    torch.testing.assert_close(bb.sequence_summary.summary.weight, old["summary_proj.weight"])


def test_xlnet_padding_does_not_change_the_summary():
    torch.manual_seed(0)
    bb = adapt(tiny_xlnet(), summary_dropout=0.0).eval()
    ids = torch.randint(5, 50, (1, 5))
    seg = torch.zeros_like(ids)
    short = bb.summary(bb.encode(ids, seg, torch.ones_like(ids)))
    padded_ids = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], 1)
    padded_seg = torch.cat([torch.full((1, 3), 4), seg], 1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones_like(ids)], 1)
    torch.testing.assert_close(bb.summary(bb.encode(padded_ids, padded_seg, mask)), short)


def test_bert_summary_is_the_pretrained_pooler_on_first_token():
    torch.manual_seed(0)
    bert = BertForPretraining(50, n_layer=2, d_model=32, n_head=4, d_inner=64, max_position=16, dropout=0.0,
                              dropatt=0.0)
    bb = adapt(bert, summary_dropout=0.0).eval()
    assert isinstance(bb, BertBackbone) and bb.cls_position == "first"
    ids = torch.randint(5, 50, (2, 6))
    h = bb.encode(ids, None, torch.ones_like(ids))
    out = bert(ids, None, torch.ones_like(ids))
    torch.testing.assert_close(h, out.hidden)
    torch.testing.assert_close(bb.summary(h), out.pooled)


def test_adapt_rejects_unknown_models():
    from genlab.errors import ConfigError

    with pytest.raises(ConfigError, match="no finetuning adapter"):
        adapt(torch.nn.Linear(2, 2))


def test_classification_head_loss_ce_and_regression_mse():
    head = ClassificationHead(4, 3)
    pooled = torch.randn(5, 4)
    labels = torch.tensor([0, 1, 2, 1, 0])
    logits = head(pooled)
    assert logits.shape == (5, 3)
    torch.testing.assert_close(head.loss(logits, labels), F.cross_entropy(logits, labels).float())
    reg = ClassificationHead(4, 1)
    out = reg(pooled)
    assert out.shape == (5,)
    y = torch.rand(5) * 5
    torch.testing.assert_close(reg.loss(out, y), ((out.float() - y.float()) ** 2).mean())


def test_multiple_choice_head_groups_options():
    head = MultipleChoiceHead(4)
    pooled = torch.randn(8, 4)  # 2 questions x 4 options
    logits = head(pooled, 4)
    assert logits.shape == (2, 4)
    torch.testing.assert_close(logits[1, 2], head.proj(pooled[6])[0])
    loss = head.loss(logits, torch.tensor([0, 3]))
    torch.testing.assert_close(loss, F.cross_entropy(logits, torch.tensor([0, 3])).float())


def _span_inputs(seed=0, B=2, T=9, d=8):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, d, generator=g)
    p_mask = torch.zeros(B, T)
    p_mask[:, 5:8] = 1  # question, <sep>s
    cls_index = torch.full((B,), 8, dtype=torch.long)
    return hidden, p_mask, cls_index


def test_c22_end_logits_depend_on_gold_start_only():
    torch.manual_seed(0)
    head = SpanHead(8, dropout=0.0).eval()
    hidden, p_mask, cls_index = _span_inputs()
    start = torch.tensor([1, 3])
    s1, e1, c1 = head(hidden, p_mask, cls_index, start)
    with torch.no_grad():
        head.start_logits.dense.weight.add_(1.0)  # changes the predicted start distribution only
    s2, e2, c2 = head(hidden, p_mask, cls_index, start)
    torch.testing.assert_close(e1, e2)
    assert not torch.allclose(s1, s2) and not torch.allclose(c1, c2)


def test_span_masking_and_answer_class_uses_masked_start_softmax():
    torch.manual_seed(1)
    head = SpanHead(8, dropout=0.0).eval()
    hidden, p_mask, cls_index = _span_inputs()
    start_lp, end_lp, cls_logits = head(hidden, p_mask, cls_index, torch.tensor([0, 2]))
    assert torch.all(start_lp[:, 5:8] < -1e20) and torch.all(end_lp[:, 5:8] < -1e20)
    masked, _ = head.start_log_probs(hidden, p_mask)
    w = torch.softmax(masked, -1)
    feat = torch.cat([(w[..., None] * hidden).sum(1), hidden[:, 8]], -1)
    ref = head.answer_class.dense_1(torch.tanh(head.answer_class.dense_0(feat))).squeeze(-1)
    torch.testing.assert_close(cls_logits, ref)


def test_c22_beam_returns_5x5_and_the_best_valid_span():
    torch.manual_seed(2)
    head = SpanHead(8, dropout=0.0).eval()
    hidden, p_mask, cls_index = _span_inputs(T=12)
    p_mask[:, 9:] = 0
    p_mask[:, 5:8] = 1
    beams = head.beam(hidden, p_mask, cls_index, 5, 5)
    assert beams.start_top_index.shape == (2, 5) and beams.end_top_index.shape == (2, 25)
    # brute force: score every (start, end) with teacher-forced end log-probs
    B, T = hidden.shape[:2]
    for b in range(B):
        best, best_pair = -float("inf"), None
        for s in range(T):
            s_lp, e_lp, _ = head(hidden[b:b + 1], p_mask[b:b + 1], cls_index[b:b + 1], torch.tensor([s]))
            for e in range(T):
                score = s_lp[0, s] + e_lp[0, e]
                if score > best:
                    best, best_pair = score, (s, e)
        flat = beams.start_top_log_probs[b].repeat_interleave(5) + beams.end_top_log_probs[b]
        i = int(flat.argmax())
        pair = (int(beams.start_top_index[b, i // 5]), int(beams.end_top_index[b, i]))
        assert pair == best_pair
        torch.testing.assert_close(flat.max(), best)
        assert not set(beams.start_top_index[b].tolist()) & {5, 6, 7}
    # flat layout is [start rank][end rank]: row i holds the ends conditioned on start i
    s_lp, e_lp, _ = head(hidden, p_mask, cls_index, beams.start_top_index[:, 1])
    torch.testing.assert_close(beams.end_top_log_probs[:, 5:10], e_lp.topk(5, -1).values)


def test_span_loss_matches_formula():
    start_lp = torch.log_softmax(torch.randn(2, 6), -1)
    end_lp = torch.log_softmax(torch.randn(2, 6), -1)
    cls = torch.randn(2)
    s, e, imp = torch.tensor([1, 5]), torch.tensor([2, 5]), torch.tensor([0.0, 1.0])
    loss = SpanHead.loss(start_lp, end_lp, cls, s, e, imp)
    ce = -(start_lp[[0, 1], s].mean() + end_lp[[0, 1], e].mean()) / 2
    bce = F.binary_cross_entropy_with_logits(cls, imp)
    torch.testing.assert_close(loss, (ce + 0.5 * bce).float())


def test_c23_sequence_classification_equals_hf_xlnet():
    transformers = pytest.importorskip("transformers")
    import functools

    from genlab.interop.hf_xlnet import load_hf_state_dict
    from genlab.tasks.finetune_classification import SequenceClassificationTask

    torch.manual_seed(0)
    cfg = transformers.XLNetConfig(vocab_size=50, d_model=32, n_layer=2, n_head=4, d_inner=64, ff_activation="gelu_new",
                                   num_labels=3, dropout=0.0, summary_last_dropout=0.0)
    hf = transformers.XLNetForSequenceClassification(cfg).double().eval()
    model = XLNetLMHeadModel(50, n_layer=2, d_model=32, n_head=4, d_head=8, d_inner=64, dropout=0.0, dropatt=0.0)
    unused = load_hf_state_dict(model, hf.state_dict()).unused
    assert any(k.startswith("sequence_summary") for k in unused)
    task = SequenceClassificationTask(model, functools.partial(torch.optim.SGD, lr=0.1), None, n_labels=3,
                                      summary_dropout=0.0).double().eval()
    with torch.no_grad():
        # the same name as HF's: sequence_summary.summary
        task.backbone.sequence_summary.summary.load_state_dict(hf.sequence_summary.summary.state_dict())
        task.head.proj.weight.copy_(hf.logits_proj.weight)
        task.head.proj.bias.copy_(hf.logits_proj.bias)
    ids = torch.randint(5, 50, (2, 9))
    seg = torch.zeros_like(ids)
    seg[:, 5:] = 1
    seg[:, -1] = 2
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding
    seg[0, :3] = 4
    ours = task({"input_ids": ids, "token_type_ids": seg, "attention_mask": mask})
    ref = hf(input_ids=ids, token_type_ids=seg, attention_mask=mask.double()).logits
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-8)


def test_c23_span_head_inference_equals_hf_xlnet_qa_after_reordering():
    transformers = pytest.importorskip("transformers")
    from genlab.interop.hf_xlnet import load_hf_state_dict

    torch.manual_seed(0)
    cfg = transformers.XLNetConfig(vocab_size=50, d_model=32, n_layer=2, n_head=4, d_inner=64, ff_activation="gelu_new",
                                   dropout=0.0, start_n_top=5, end_n_top=5)
    hf = transformers.XLNetForQuestionAnswering(cfg).double().eval()
    model = XLNetLMHeadModel(50, n_layer=2, d_model=32, n_head=4, d_head=8, d_inner=64, dropout=0.0, dropatt=0.0)
    load_hf_state_dict(model, hf.state_dict())
    bb = adapt(model, summary_dropout=0.0).double().eval()
    head = SpanHead(32, layer_norm_eps=cfg.layer_norm_eps, dropout=0.0).double().eval()
    heads = {k: v for k, v in hf.state_dict().items() if k.split(".")[0] in ("start_logits", "end_logits", "answer_class")}
    head.load_state_dict(heads, strict=True)  # same parameter names as HF
    T = 14
    ids = torch.randint(5, 50, (2, T))
    p_mask = torch.zeros(2, T, dtype=torch.float64)
    p_mask[:, 8:12] = 1
    p_mask[1, 12:] = 1  # right padding of row 1 (cls at 11 would be masked: use 7 as its cls for the test)
    cls_index = torch.tensor([12, 7])
    p_mask[0, 12] = 0
    p_mask[1, 7] = 0
    mask = torch.ones(2, T, dtype=torch.float64)
    mask[1, 12:] = 0
    ref = hf(input_ids=ids, attention_mask=mask, p_mask=p_mask, cls_index=cls_index)
    ours = head.beam(bb.encode(ids, None, mask.long()), p_mask, cls_index, 5, 5)
    torch.testing.assert_close(ours.start_top_log_probs, ref.start_top_log_probs.log())
    assert torch.equal(ours.start_top_index, ref.start_top_index)
    # HF flattens [end rank][start rank] and returns probabilities; ours [start rank][end rank] log-probs
    reorder = lambda x: x.view(2, 5, 5).transpose(1, 2).reshape(2, 25)
    torch.testing.assert_close(ours.end_top_log_probs, reorder(ref.end_top_log_probs).log())
    assert torch.equal(ours.end_top_index, reorder(ref.end_top_index))
    torch.testing.assert_close(ours.cls_logits, ref.cls_logits)
