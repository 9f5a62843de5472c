"""GPT-1 model checks (Radford et al., 2018, §3.1, §4.1: the 12-layer decoder, its
sizes and the released code's details) on tiny configs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from genlab.errors import CheckpointError, ConfigError
from genlab.models.gpt import (
    GPTBlock,
    GPTClassificationHead,
    GPTLMHeadModel,
    GPTMultipleChoiceHead,
    GPTSimilarityHead,
    extract_states,
    transfer_pretrained,
)
from genlab.parallel import find_blocks

V, S, D = 40, 3, 32
TINY = dict(n_positions=16, n_embd=D, n_layer=2, n_head=4)


def tiny(seed: int = 0, n_special: int = S, **kw) -> GPTLMHeadModel:
    torch.manual_seed(seed)
    return GPTLMHeadModel(V, n_special, **{**TINY, **kw})


def ids(shape, seed: int = 1, high: int = V) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------------------------- architecture
def test_causality_prefix_outputs_bit_identical_and_future_gradient_zero():
    """Check 1."""
    model = tiny().eval()
    x = ids((2, 10))
    y = x.clone()
    y[:, 6:] = ids((2, 4), seed=9)
    a, b = model(x), model(y)
    assert torch.equal(a.hidden[:, :6], b.hidden[:, :6])
    assert torch.equal(model.lm_logits(a.hidden)[:, :6], model.lm_logits(b.hidden)[:, :6])
    # gradient of logit_t w.r.t. the embeddings of later positions is exactly 0
    emb = model.transformer.tokens_embed(x).detach().requires_grad_(True)
    h = emb + model.transformer.positions_embed.weight[:10]
    for block in model.transformer.h:
        h = block(h)
    model.lm_logits(h)[:, 4].sum().backward()
    assert emb.grad[:, 5:].abs().max() == 0 and emb.grad[:, :5].abs().max() > 0


def test_right_padding_invariance_of_extract_state():
    """Check 2 (hidden state at <e>; the loss side is in tests/tasks/test_gpt.py)."""
    model = tiny().eval()
    seq = ids((1, 7))
    states = []
    for n_pad, fill in ((0, 0), (3, 0), (5, 17)):
        x = torch.cat([seq, torch.full((1, n_pad), fill)], dim=1)
        states.append(extract_states(model(x).hidden, torch.tensor([6])))
    assert torch.equal(states[0], states[1]) and torch.equal(states[0], states[2])


def test_tied_output_matrix_is_the_token_embedding_and_gets_both_gradients():
    """Check 3: the same tensor object, special rows included; gradient from the input and the output use."""
    model = tiny()
    assert model.output_embedding() is model.transformer.tokens_embed.weight
    assert model.output_embedding().shape == (V + S, D)
    x = ids((2, 6))
    logits = model.lm_logits(model(x).hidden)
    assert logits.shape[-1] == V + S
    # output use only: a token never fed as input still gets gradient through the softmax
    logits.logsumexp(-1).sum().backward()
    grad = model.transformer.tokens_embed.weight.grad
    unseen = sorted(set(range(V + S)) - set(x.flatten().tolist()))
    assert grad[unseen].abs().sum(-1).min() > 0
    # input use: a fed token's row gets more than the output term
    model.zero_grad()
    h = model(x).hidden
    F.linear(h, model.output_embedding().detach()).sum().backward()  # output use cut: input use only
    fed = x.flatten().unique()
    assert grad is not None and model.transformer.tokens_embed.weight.grad[fed].abs().sum(-1).min() > 0


def test_post_ln_block_with_zeroed_sublayers_is_two_layernorms():
    """Check 5: x -> LN_2(LN_1(x))."""
    torch.manual_seed(0)
    block = GPTBlock(D, 4, 4 * D, "gelu_tanh", 0.0, 0.0, 1e-5).eval()
    with torch.no_grad():
        for p in (*block.attn.parameters(), *block.mlp.parameters()):
            p.zero_()
        for ln in (block.ln_1, block.ln_2):
            ln.weight.normal_(1, 0.5)
            ln.bias.normal_(0, 0.5)
    x = torch.randn(2, 5, D) * 3 + 1
    assert torch.allclose(block(x), block.ln_2(block.ln_1(x)), atol=1e-6)


def test_parameter_count_of_the_paper_config():
    """Check 6: 116,534,784 (vocab 40478, 512 positions, 12 x 768); +2,304 for 3 specials; +769 for Linear(768, 1)."""
    with torch.device("meta"):
        base = GPTLMHeadModel(40478)
        special = GPTLMHeadModel(40478, n_special=3)
        head = GPTMultipleChoiceHead(768)
    count = lambda m: sum(p.numel() for p in m.parameters())
    assert count(base) == 116_534_784
    assert count(special) - count(base) == 2_304
    assert count(head) == 769
    assert sum(p.numel() for p in base.transformer.h.parameters()) == 85_054_464  # "85.1M in the 12 blocks" (§6)


def test_init_is_normal_002_with_zero_biases_and_unit_gains():
    model = GPTLMHeadModel(2000, 3, n_positions=64, n_embd=128, n_layer=2, n_head=4)
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            assert p.abs().max() == 0, name
        elif ".ln_" in name:
            assert torch.equal(p, torch.ones_like(p)), name
        else:
            assert p.mean().abs() < 2e-3 and abs(p.std().item() - 0.02) < 1e-3, name


def test_block_classes_are_found_for_sharding_and_checkpointing():
    model = tiny()
    blocks = find_blocks(model)
    assert len(blocks) == 2 and all(isinstance(b, GPTBlock) for b in blocks)
    assert GPTLMHeadModel.block_classes == (GPTBlock,)


def test_leading_dims_and_length_check():
    model = tiny().eval()
    x = ids((2, 3, 8))
    out = model(x)
    assert out.hidden.shape == (2, 3, 8, D)
    assert torch.allclose(out.hidden[1, 2], model(x[1, 2][None]).hidden[0], atol=1e-6)
    with pytest.raises(ConfigError, match="n_positions"):
        model(ids((1, 17)))
    with pytest.raises(ConfigError, match="divisible"):
        GPTLMHeadModel(V, n_embd=30, n_head=4)


def test_release_embedding_dropout_and_softmax_rows():
    """The released code's flags: eval outputs unchanged; in training a token gets the same dropped row at every
    position; the position rows join the softmax only when asked."""
    plain = tiny(embd_pdrop=0.5)
    release = tiny(embd_pdrop=0.5, embd_dropout_on_matrix=True, lm_softmax_includes_positions=True)
    release.load_state_dict(plain.state_dict())
    x = torch.tensor([[5, 5, 7, 5]])
    plain.eval(), release.eval()
    a, b = plain(x), release(x)
    assert torch.equal(a.hidden, b.hidden)
    la, lb = plain.lm_logits(a.hidden, a), release.lm_logits(b.hidden, b)
    assert lb.shape[-1] == V + S + 16 and torch.equal(la, lb[..., : V + S])
    assert plain.lm_logits(a.hidden, a, special_rows=False).shape[-1] == V
    release.train()
    torch.manual_seed(3)
    out = release(x)
    assert (out.token_rows[5] == 0).any() and out.token_rows is not release.output_embedding()
    emb = F.embedding(x, out.token_rows)
    assert torch.equal(emb[0, 0], emb[0, 1]) and torch.equal(emb[0, 0], emb[0, 3])
    # the tied softmax of this forward uses the dropped matrix
    assert torch.equal(release.lm_logits(out.hidden, out)[..., :V + S], F.linear(out.hidden, out.token_rows))



@pytest.mark.parametrize("special_rows", [True, False])
def test_fused_lm_nll_equals_the_cross_entropy_of_lm_logits(special_rows):
    """Value and gradients, in the release layout too (dropped matrix of this forward, position rows in the
    softmax): the fused loss reads the same matrix as lm_logits."""
    model = tiny(embd_pdrop=0.5, embd_dropout_on_matrix=True, lm_softmax_includes_positions=True).train()
    x = ids((2, 6))
    target = x.flatten()[torch.randperm(12, generator=torch.Generator().manual_seed(0))]
    grads = []
    for fused in (False, True):
        model.zero_grad()
        torch.manual_seed(3)
        out = model(x)
        h = out.hidden.flatten(0, 1)
        if fused:
            nll = model.lm_nll(h, target, out, special_rows)
        else:
            nll = F.cross_entropy(model.lm_logits(h, out, special_rows).float(), target, reduction="none")
        (nll * torch.arange(12.0)).sum().backward()  # an uneven weight per row
        grads.append((nll.detach(), *(p.grad.clone() for p in model.parameters())))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)

# ------------------------------------------------------------------------------------------ finetuning heads
def test_special_ids_are_new_rows_after_the_vocabulary():
    """Check 23 (model side): <s> $ <e> = V, V+1, V+2; the tied head has V + 3 rows."""
    model = tiny()
    assert model.special_ids == [V, V + 1, V + 2]
    assert model.lm_logits(model(ids((1, 3))).hidden).shape[-1] == V + 3


def test_classifier_reads_the_extract_position():
    model = tiny().eval()
    head = GPTClassificationHead(D, 3, clf_pdrop=0.0)
    x = ids((2, 9))
    index = torch.tensor([4, 8])
    h = model(x).hidden
    want = head.linear.proj(torch.stack([h[0, 4], h[1, 8]]))
    assert torch.allclose(head(extract_states(h, index)), want)


def test_similarity_sums_states_before_the_linear_layer_with_a_bias():
    """Checks 11 and 26: logits = W(h_AB + h_BA) + b exactly, with b = 1 so that summing/averaging logits or
    concatenating fails; symmetric under swapping the orders."""
    torch.manual_seed(0)
    head = GPTSimilarityHead(D, 2, clf_pdrop=0.0).eval()
    with torch.no_grad():
        head.linear.proj.bias.fill_(1.0)
    h = torch.randn(3, 2, D)
    w, b = head.linear.proj.weight, head.linear.proj.bias
    want = (h[:, 0] + h[:, 1]) @ w.T + b
    out = head(h)
    assert torch.allclose(out, want, atol=1e-6)
    assert not torch.allclose(out, (h[:, 0] @ w.T + b) + (h[:, 1] @ w.T + b), atol=1e-3)
    assert not torch.allclose(out, ((h[:, 0] @ w.T + b) + (h[:, 1] @ w.T + b)) / 2, atol=1e-3)
    assert torch.equal(head(h), head(h.flip(1)))


def test_multiple_choice_is_linear_d_to_1_per_choice_and_permutation_equivariant():
    """Checks 12 and 26."""
    torch.manual_seed(0)
    head = GPTMultipleChoiceHead(D, clf_pdrop=0.1).eval()
    assert head.linear.proj.weight.shape == (1, D) and head.linear.proj.bias.shape == (1,)
    h = torch.randn(4, 5, D)
    logits = head(h)
    assert logits.shape == (4, 5)
    assert torch.allclose(logits, (h @ head.linear.proj.weight.T + head.linear.proj.bias).squeeze(-1))
    perm = torch.tensor([3, 0, 4, 1, 2])
    assert torch.equal(head(h[:, perm]), logits[:, perm])
    labels = logits.argmax(-1)
    assert torch.equal(head(h[:, perm]).argmax(-1), (perm[None, :] == labels[:, None]).int().argmax(-1))


def test_classifier_dropout_mask_is_shared_across_choices():
    """Check 13: in training, the zeroed features are the same for every choice of an example."""
    head = GPTMultipleChoiceHead(D, clf_pdrop=0.5).train()
    seen = {}

    def record(module, args):
        seen["x"] = args[0]

    head.linear.register_forward_pre_hook(record)
    torch.manual_seed(0)
    head(torch.ones(3, 4, D))
    dropped = (seen["x"].view(3, 4, D) == 0)
    assert dropped.any()
    assert torch.equal(dropped, dropped[:, :1].expand_as(dropped))
    assert not torch.equal(dropped[0], dropped[1])  # examples draw their own mask


# ---------------------------------------------------------------------------------------------- transfer
def pretrained_state(seed: int = 5) -> dict[str, torch.Tensor]:
    """Every tensor random (biases and LayerNorms too), so a copied tensor cannot equal a fresh one by chance."""
    torch.manual_seed(seed)
    return {k: torch.randn_like(v) for k, v in tiny(seed, n_special=0).state_dict().items()}


def test_special_rows_stay_fresh_and_everything_else_equals_the_checkpoint():
    """Check 14: with all blocks transferred, only the 3 special rows (N(0, 0.02)) differ from the checkpoint."""
    state = pretrained_state()
    model = GPTLMHeadModel(V, 3, **TINY)
    fresh = model.transformer.tokens_embed.weight[V:].detach().clone()
    transfer_pretrained(model, state)
    ours = model.state_dict()
    for key, value in state.items():
        if key == "transformer.tokens_embed.weight":
            assert torch.equal(ours[key][:V], value)
            assert torch.equal(ours[key][V:], fresh)
        else:
            assert torch.equal(ours[key], value), key
    big = GPTLMHeadModel(4000, 3, n_positions=8, n_embd=512, n_layer=1, n_head=4)
    rows = big.transformer.tokens_embed.weight[4000:]
    assert abs(rows.std().item() - 0.02) < 2e-3 and rows.mean().abs() < 3e-3


@pytest.mark.parametrize("k", [-1, 0, 1, 2])
def test_n_transfer_copies_embeddings_and_the_bottom_k_blocks_only(k):
    """Check 15."""
    state = pretrained_state()
    model = GPTLMHeadModel(V, 3, **TINY)
    before = {n: t.clone() for n, t in model.state_dict().items()}
    copied = transfer_pretrained(model, state, n_transfer=k)
    after = model.state_dict()
    for key in after:
        if key == "transformer.tokens_embed.weight":
            transferred = torch.equal(after[key][:V], state[key])
        else:
            transferred = torch.equal(after[key], state[key])
        in_copied_block = any(key.startswith(f"transformer.h.{i}.") for i in range(max(k, 0)))
        should = k >= 0 and (in_copied_block or "embed" in key)
        assert transferred == should, key
        if not should:
            assert torch.equal(after[key], before[key]), key
    assert (copied == []) == (k == -1)


def test_transfer_errors_name_the_problem():
    model = GPTLMHeadModel(V, 3, **TINY)
    with pytest.raises(CheckpointError, match="ordinary tokens"):
        transfer_pretrained(model, GPTLMHeadModel(V + 1, 0, **TINY).state_dict())
    with pytest.raises(CheckpointError, match="positions"):
        transfer_pretrained(model, GPTLMHeadModel(V, 0, **{**TINY, "n_positions": 8}).state_dict())
    with pytest.raises(ConfigError, match="n_transfer"):
        transfer_pretrained(model, pretrained_state(), n_transfer=3)
    state = pretrained_state()
    del state["transformer.h.1.ln_2.bias"]
    with pytest.raises(CheckpointError, match="ln_2.bias"):
        transfer_pretrained(model, state)


# ------------------------------------------------------------------------------------------------- precision
def bf16_relative_error(model: GPTLMHeadModel, x: torch.Tensor) -> float:
    with torch.no_grad():
        ref = model(x).hidden.float()
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            low = model(x).hidden.float()
    return ((low - ref).norm() / ref.norm()).item()


def test_bf16_autocast_matches_fp32_on_cpu():
    """Check 22, scaled down to a CPU: bf16 autocast hidden states within 1e-2 relative of fp32."""
    model = tiny(n_embd=64, n_head=4).eval()
    assert bf16_relative_error(model, ids((2, 16))) < 1e-2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the full-size check needs a CUDA GPU")
def test_full_size_bf16_forward_and_a_finetuning_step_on_gpu():
    """Check 22: full-size bf16 forward within 1e-2 relative of fp32; one finetuning step on 32 x 2 choices x 512
    tokens (the release's Story Cloze batch at n_ctx 512) fits and runs."""
    from functools import partial

    from genlab.tasks.gpt import GPTFinetuneTask
    from genlab.tasks.gpt_optim import OpenAIAdam, ndim_decay_groups

    torch.manual_seed(0)
    model = GPTLMHeadModel(40478, 3).cuda().eval()
    assert bf16_relative_error(model, torch.randint(0, 40478, (4, 512), device="cuda")) < 1e-2
    task = GPTFinetuneTask(model.train(), partial(OpenAIAdam), kind="multiple_choice").cuda()
    opt = OpenAIAdam(ndim_decay_groups(task, 0.01), lr=6.25e-5)
    batch = {"input_ids": torch.randint(0, 40481, (32, 2, 512), device="cuda"),
             "lm_mask": torch.ones(32, 2, 512, dtype=torch.long, device="cuda"),
             "labels": torch.randint(0, 2, (32,), device="cuda")}
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = task.losses(batch)["loss"]
    loss.backward()
    torch.nn.utils.clip_grad_norm_(task.parameters(), 1.0)
    opt.step()
    assert torch.isfinite(loss)
