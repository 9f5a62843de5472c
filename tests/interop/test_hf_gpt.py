"""HF OpenAI GPT import/export (HF's openai-gpt layout): fp32 parity with transformers on random weights
(bare model, LM head, double heads with multiple-choice logits; right padding), export round trips, layouts and
clear errors. Offline: the HF models are built from configs, never downloaded."""

from __future__ import annotations

import json

import pytest
import torch

from genlab.errors import CheckpointError
from genlab.interop.hf_gpt import (
    config_from_hf,
    export_hf_state_dict,
    genlab_state_from_hf,
    load_hf_checkpoint,
    load_hf_state_dict,
    save_hf_checkpoint,
)
from genlab.models.gpt import (
    GPTLMHeadModel,
    GPTMultipleChoiceHead,
    extract_states,
    transfer_pretrained,
)
from genlab.tasks.gpt import per_sequence_mean, token_nll

transformers = pytest.importorskip("transformers", reason="transformers (test dependency) is not installed")

V, T, D = 99, 12, 32
HF_DIMS = dict(vocab_size=V, n_positions=64, n_embd=D, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
               attn_pdrop=0.0, summary_first_dropout=0.0)
TOL = 1e-5  # fp32


def randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every weight random (LayerNorm and biases included) so that a mis-mapped tensor cannot hide."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    return model.eval()


def hf(cls_name: str = "OpenAIGPTLMHeadModel", seed: int = 1, **kw):
    return randomise(getattr(transformers, cls_name)(transformers.OpenAIGPTConfig(**{**HF_DIMS, **kw})), seed)


def batch(shape=(3,)):
    """Right-padded sequences (lengths 12, 8, 5 ...) with their masks and last real positions."""
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, V, (*shape, T), generator=g)
    lengths = torch.tensor([T, 8, 5, 10, 7, 3])[: ids[..., 0].numel()].view(shape)
    mask = (torch.arange(T) < lengths[..., None]).long()
    ids = ids * mask  # pad id 0
    return ids, mask, lengths - 1


def assert_close(a: torch.Tensor, b: torch.Tensor, tol: float = TOL) -> None:
    assert (a - b).abs().max().item() < tol


@pytest.mark.parametrize("cls_name", ["OpenAIGPTModel", "OpenAIGPTLMHeadModel"])
def test_import_gives_hf_hidden_states_and_logits(tmp_path, cls_name):
    ref = hf(cls_name)
    ref.save_pretrained(tmp_path)
    model = load_hf_checkpoint(tmp_path).eval()
    assert model.output_embedding() is model.transformer.tokens_embed.weight
    ids, mask, _ = batch()
    real = mask.bool()
    theirs = ref(input_ids=ids, attention_mask=mask)
    ours = model(ids)  # right padding: no mask needed
    body = theirs if cls_name == "OpenAIGPTModel" else ref.transformer(input_ids=ids, attention_mask=mask)
    assert_close(ours.hidden[real], body.last_hidden_state[real])
    assert_close(model(ids, mask).hidden[real], body.last_hidden_state[real])  # with the optional pad mask
    if cls_name == "OpenAIGPTLMHeadModel":
        assert_close(model.lm_logits(ours.hidden)[real], theirs.logits[real])


def test_lm_loss_equals_hf_when_all_sequences_have_the_same_length(tmp_path):
    """Check 7: our per-sequence mean then batch mean equals HF's token mean for equal lengths (and differs,
    as documented, with unequal lengths)."""
    ref = hf()
    ref.save_pretrained(tmp_path)
    model = load_hf_checkpoint(tmp_path).eval()
    ids = torch.randint(0, V, (3, T), generator=torch.Generator().manual_seed(4))
    nll, seq = token_nll(model, model(ids), ids, None, special_rows=True)
    ours = per_sequence_mean(nll, seq, 3).mean()
    assert_close(ours, ref(input_ids=ids, labels=ids).loss)
    ids, mask, _ = batch()
    labels = ids.masked_fill(mask == 0, -100)
    nll, seq = token_nll(model, model(ids), ids, mask, special_rows=True)
    theirs = ref(input_ids=ids, attention_mask=mask, labels=labels).loss
    assert_close(nll.mean(), theirs)  # token mean = HF's
    assert (per_sequence_mean(nll, seq, 3).mean() - theirs).abs() > 1e-3  # ours (release) is per sequence


def test_token_type_ids_look_up_the_token_embedding_as_hf(tmp_path):
    ref = hf("OpenAIGPTLMHeadModel")
    ref.save_pretrained(tmp_path)
    model = load_hf_checkpoint(tmp_path).eval()
    ids, mask, _ = batch((2, 3))
    types = torch.randint(0, V, ids.shape, generator=torch.Generator().manual_seed(5))
    theirs = ref(input_ids=ids.view(-1, T), token_type_ids=types.view(-1, T)).logits.view(*ids.shape, -1)
    out = model(ids, token_type_ids=types)
    real = mask.bool()
    assert_close(model.lm_logits(out.hidden)[real], theirs[real])
    assert (model(ids).hidden - out.hidden).abs().max() > 0.1  # the types change the outputs


def test_finetuning_takes_the_double_heads_multiple_choice_head(tmp_path, caplog):
    """``task.init_from=<OpenAIGPTDoubleHeadsModel folder>``: kind=multiple_choice loads multiple_choice_head 1:1
    (choice logits equal HF's mc_logits); another kind reports it ignored. The load report lists every tensor."""
    import functools

    from genlab.tasks.gpt import GPTFinetuneTask

    ref = hf("OpenAIGPTDoubleHeadsModel")
    ref.save_pretrained(tmp_path)
    opt = functools.partial(torch.optim.AdamW, lr=1e-4)

    def task(kind):
        model = GPTLMHeadModel(V, 3, n_positions=64, n_embd=D, n_layer=2, n_head=4, resid_pdrop=0.0,
                               embd_pdrop=0.0, attn_pdrop=0.0)
        return GPTFinetuneTask(model, opt, kind=kind, n_labels=3, clf_pdrop=0.0, init_from=str(tmp_path)).eval()

    with caplog.at_level("INFO", logger="genlab"):
        mc = task("multiple_choice")
    report = mc.init_report
    assert {"head.linear.proj.weight", "head.linear.proj.bias"} <= set(report.loaded) and not report.ignored
    assert report.new == []  # the special rows are part of the (loaded) token table
    assert "multiple_choice_head" not in caplog.text and "2 new" not in caplog.text
    ids, mask, last = batch((2, 3))
    with torch.no_grad():
        logits, _ = mc({"input_ids": ids, "lm_mask": mask, "extract_index": last})
    assert_close(logits, ref(input_ids=ids, mc_token_ids=last).mc_logits)
    other = task("classification").init_report
    assert set(other.ignored) == {"multiple_choice_head.summary.weight", "multiple_choice_head.summary.bias"}
    assert other.new and all(k.startswith("head.") for k in other.new)  # only the classification head is new


def test_double_heads_multiple_choice_logits_match(tmp_path):
    """Check 7: mc_logits with mc_token_ids = index of <e> equal our multiple-choice head's logits."""
    ref = hf("OpenAIGPTDoubleHeadsModel")
    ref.save_pretrained(tmp_path)
    head = GPTMultipleChoiceHead(D, clf_pdrop=0.0)
    model = load_hf_checkpoint(tmp_path, mc_head=head).eval()
    head.eval()
    ids, mask, last = batch((2, 3))
    theirs = ref(input_ids=ids, mc_token_ids=last)
    out = model(ids)
    assert_close(head(extract_states(out.hidden, last)), theirs.mc_logits)
    real = mask.bool()
    assert_close(model.lm_logits(out.hidden)[real], theirs.logits[real])


@pytest.mark.parametrize("double", [False, True], ids=["lm_head", "double_heads"])
@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "pytorch_model.bin"])
def test_export_loads_in_hf_with_equal_outputs(tmp_path, double, safe):
    torch.manual_seed(0)
    model = randomise(GPTLMHeadModel(V, 0, n_positions=64, n_embd=D, n_layer=2, n_head=4), 3)
    head = randomise(GPTMultipleChoiceHead(D, 0.0), 4) if double else None
    path = save_hf_checkpoint(model, tmp_path, mc_head=head, safe_serialization=safe)
    assert path.name == ("model.safetensors" if safe else "pytorch_model.bin")
    cls = transformers.OpenAIGPTDoubleHeadsModel if double else transformers.OpenAIGPTLMHeadModel
    ref = cls.from_pretrained(tmp_path).eval()
    ids, mask, last = batch((2, 3) if double else (3,))
    out = model(ids)
    theirs = ref(input_ids=ids, mc_token_ids=last) if double else ref(input_ids=ids)
    real = mask.bool()
    assert_close(model.lm_logits(out.hidden)[real], theirs.logits[real])
    if double:
        assert_close(head(extract_states(out.hidden, last)), theirs.mc_logits)


def test_round_trip_state_dict_is_identity_and_special_rows_map_to_the_last_hf_rows():
    a = randomise(GPTLMHeadModel(V, 3, n_positions=16, n_embd=D, n_layer=2, n_head=4), 0)
    b = GPTLMHeadModel(V, 3, n_positions=16, n_embd=D, n_layer=2, n_head=4)
    state = export_hf_state_dict(a)
    assert state["transformer.tokens_embed.weight"].shape == (V + 3, D)
    assert state["transformer.h.0.attn.c_attn.weight"].shape == (D, 3 * D)  # Conv1D [in, out]
    load_hf_state_dict(b, state)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert ka == kb and torch.equal(va, vb)
    cfg = config_from_hf({"model_type": "openai-gpt", "vocab_size": V + 3, "n_embd": D}, n_special=3)
    assert cfg["vocab_size"] == V and cfg["n_special"] == 3


def test_resized_hf_model_imports_with_its_specials(tmp_path):
    ref = hf(vocab_size=V + 3)
    ref.save_pretrained(tmp_path)
    model = load_hf_checkpoint(tmp_path, n_special=3).eval()
    assert model.special_ids == [V, V + 1, V + 2]
    ids = torch.tensor([[V, 5, 6, V + 1, 7, V + 2]])
    assert_close(model.lm_logits(model(ids).hidden), ref(input_ids=ids).logits)


def test_old_layout_buffers_sharding_and_partial_transfer(tmp_path):
    ref = hf("OpenAIGPTModel")
    state = dict(ref.state_dict())
    state["h.0.attn.bias"] = torch.ones(1, 1, 64, 64).tril()  # causal-mask buffer of old HF checkpoints
    model = GPTLMHeadModel(V, 0, n_positions=64, n_embd=D, n_layer=2, n_head=4).eval()
    assert load_hf_state_dict(model, state).unused == []
    ids = batch()[0]
    assert_close(model(ids).hidden, ref(input_ids=ids).last_hidden_state)
    ref.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert_close(load_hf_checkpoint(tmp_path).eval()(ids).hidden, ref(input_ids=ids).last_hidden_state)
    finetune = GPTLMHeadModel(V, 3, n_positions=64, n_embd=D, n_layer=2, n_head=4)
    transfer_pretrained(finetune, genlab_state_from_hf(state), n_transfer=1)
    assert torch.equal(finetune.transformer.tokens_embed.weight[:V], ref.tokens_embed.weight)
    assert torch.equal(finetune.transformer.h[0].attn.qkv.weight, ref.h[0].attn.c_attn.weight.T)
    assert not torch.equal(finetune.transformer.h[1].attn.qkv.weight, ref.h[1].attn.c_attn.weight.T)


def test_errors_name_the_problem(tmp_path):
    model = GPTLMHeadModel(V, 0, n_positions=64, n_embd=D, n_layer=2, n_head=4)
    with pytest.raises(CheckpointError, match="model_type"):
        config_from_hf({"model_type": "gpt2", "vocab_size": V})
    with pytest.raises(CheckpointError, match="h.2"):
        load_hf_state_dict(model, hf(n_layer=3).state_dict())
    state = export_hf_state_dict(model)
    state["lm_head.weight"] = state["lm_head.weight"] + 1
    with pytest.raises(CheckpointError, match="ties"):
        load_hf_state_dict(model, state)
    with pytest.raises(CheckpointError, match="config.json"):
        load_hf_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "openai-gpt", "vocab_size": V, "n_embd": D,
                                                      "n_head": 4, "n_layer": 2, "n_positions": 64}))
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_hf_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="n_inner"):
        save_hf_checkpoint(GPTLMHeadModel(V, n_embd=D, n_head=4, n_layer=1, n_inner=40), tmp_path / "x")


def test_full_size_config_once():
    """Check 7 at the paper's size (random weights, one short sequence)."""
    ref = randomise(transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig(
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)), 0)
    model = GPTLMHeadModel(40478).eval()
    load_hf_state_dict(model, ref.state_dict())
    ids = torch.randint(0, 40478, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert_close(model.lm_logits(model(ids).hidden), ref(input_ids=ids).logits, tol=1e-3)
