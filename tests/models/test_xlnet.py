"""XLNet model checks in model scope (XLNet v1 §2.2-§2.5: parameter counts, no leakage
under the permutation, proper distributions, bidirectional data, memory, segments, empty rows)."""

from __future__ import annotations

import itertools

import pytest
import torch

from genlab.data.pretrain.permutation import (
    local_perm,
    prediction_slots,
    sample_ranks,
    two_half_perm_mask,
)
from genlab.errors import ConfigError
from genlab.models.xlnet import XLNetLMHeadModel, XLNetModel, count_params, plm_loss

V = 40
TINY = dict(n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0, dropatt=0.0)


def tiny(seed: int = 0, dtype=torch.float64, **kw) -> XLNetLMHeadModel:
    torch.manual_seed(seed)
    model = XLNetLMHeadModel(V, **{**TINY, **kw}).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


def two_half_example(t: int, seed: int, n_context: int = 3):
    """Ids, perm mask (two halves, official rule), ranks and target slots; position 0 of each half is context."""
    g = torch.Generator().manual_seed(seed)
    r = t // 2
    ids = torch.randint(10, V, (t,), generator=g)
    masked = torch.rand(t, generator=g) < 0.5
    masked[[0, r]] = False
    masked[1] = True
    ranks = sample_ranks(r, r, batch_shape=(2,), generator=g)
    halves = [local_perm(ids[i * r:(i + 1) * r], masked[i * r:(i + 1) * r], ranks[i]) for i in range(2)]
    perm = two_half_perm_mask(halves[0].perm_mask, halves[1].perm_mask)
    is_target = torch.cat([h.is_target for h in halves])
    slots = prediction_slots(ids, is_target, num_predict=t // 2)
    global_rank = torch.cat([ranks[0], ranks[1] + r])  # reuse half precedes the non-reuse half
    return ids, perm, is_target, global_rank, slots


# --- parameter counts -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("size,expected,per_layer", [
    (dict(n_layer=12, d_model=768, n_head=12, d_head=64, d_inner=3072), 116_750_336, 7_678_464),
    (dict(n_layer=24, d_model=1024, n_head=16, d_head=64, d_inner=4096), 360_300_800, 13_645_824),
])
def test_c1_parameter_counts(size, expected, per_layer):
    with torch.device("meta"):
        model = XLNetLMHeadModel(32000, **size)
    assert count_params(model) == expected
    assert count_params(model.transformer.layer[0]) == per_layer
    assert model.lm_loss.weight is model.transformer.word_embedding.weight


def test_c1_names_and_shapes():
    model = tiny()
    sd = model.state_dict()
    for name in ["q", "k", "v", "o", "r"]:
        assert sd[f"transformer.layer.1.rel_attn.{name}"].shape == (32, 2, 16)
    for name in ["r_w_bias", "r_r_bias", "r_s_bias"]:
        assert sd[f"transformer.layer.0.rel_attn.{name}"].shape == (2, 16)
    assert sd["transformer.layer.0.rel_attn.seg_embed"].shape == (2, 2, 16)
    assert sd["transformer.layer.0.ff.layer_1.weight"].shape == (64, 32)
    assert sd["transformer.mask_emb"].shape == (1, 1, 32)
    assert sd["lm_loss.bias"].shape == (V,)
    assert not any(k.endswith(("q.bias", "k.bias", "v.bias", "o.bias", "r.bias")) for k in sd)


def test_c1_output_shapes():
    model = tiny(mem_len=5)
    ids = torch.randint(0, V, (2, 6))
    plain = model(ids)
    assert plain.hidden.shape == (2, 6, 32) and plain.logits.shape == (2, 6, V) and plain.query_hidden is None
    tm = torch.nn.functional.one_hot(torch.tensor([[1, 4, 0]] * 2), 6).double()
    out = model(ids, target_mapping=tm, reuse_len=4)
    assert out.query_hidden.shape == (2, 3, 32) and out.logits.shape == (2, 3, V)
    assert [m.shape for m in out.memory] == [(2, 4, 32)] * 2
    out = model(ids, target_mapping=tm, memory=model.transformer.init_memory(2, ids.device), reuse_len=4)
    assert [m.shape for m in out.memory] == [(2, 5, 32)] * 2


def test_untie_r_false_shares_biases_and_init():
    model = XLNetModel(V, **{**TINY, "untie_r": False})
    a, b = model.layer[0].rel_attn, model.layer[1].rel_attn
    assert a.r_w_bias is b.r_w_bias and a.r_r_bias is b.r_r_bias and a.r_s_bias is b.r_s_bias
    assert a.seg_embed is not b.seg_embed
    fresh = XLNetLMHeadModel(1000, **TINY)
    assert fresh.lm_loss.bias.abs().sum() == 0 and fresh.transformer.layer[0].ff.layer_1.bias.abs().sum() == 0
    assert abs(fresh.transformer.word_embedding.weight.std().item() - 0.02) < 0.002


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="model.attn_type"):
        XLNetModel(V, attn_type="causal")
    with pytest.raises(ConfigError, match="model.ff_activation"):
        XLNetModel(V, ff_activation="swish")
    with pytest.raises(ConfigError, match="bi_data"):
        tiny(bi_data=True)(torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="one-hot"):
        tiny()(torch.zeros(1, 4, dtype=torch.long), target_mapping=torch.full((1, 2, 4), 0.25, dtype=torch.float64))


# --- no leakage -------------------------------------------------------------------------------------------------

def embedding_jacobian_rows(model, ids, seg, perm, slots, memory, stream: str):
    """For each slot (query) or target position (content): which input positions have a nonzero gradient."""
    captured = {}

    def hook(_module, _inp, out):
        out.retain_grad()
        captured["emb"] = out

    handle = model.transformer.word_embedding.register_forward_hook(hook)
    out = model(ids[None], seg[None], perm_mask=perm[None], target_mapping=slots.target_mapping[None],
                memory=memory, reuse_len=ids.shape[0] // 2)
    handle.remove()
    rows = []
    n = int(slots.target_mask.sum())
    for p in range(n):
        captured["emb"].grad = None
        x = out.query_hidden[0, p] if stream == "query" else out.hidden[0, slots.positions[p]]
        x.sum().backward(retain_graph=True)
        rows.append(captured["emb"].grad[0].abs().sum(-1) > 0)
    return torch.stack(rows), out


@pytest.mark.parametrize("policy", ["zero", "uniform"])
@pytest.mark.parametrize("seed", [0, 1])
def test_c7_no_leak_gradient(policy, seed):
    t = 16
    model = tiny(seed, mem_len=6, n_layer=3, empty_row_policy=policy)
    ids, perm, is_target, rank, slots = two_half_example(t, seed)
    seg = torch.zeros(t, dtype=torch.long)
    memory = [torch.randn(1, 6, 32, dtype=torch.float64) for _ in range(3)]
    permuted = is_target | torch.isin(ids, torch.tensor([3, 4]))  # targets and SEP/CLS
    pos = slots.positions[: int(slots.target_mask.sum())]
    for stream in ("query", "content"):
        sees, _ = embedding_jacobian_rows(model, ids, seg, perm, slots, memory, stream)
        for p, i in enumerate(pos.tolist()):
            later = permuted & (rank >= rank[i]) if stream == "query" else permuted & (rank > rank[i])
            assert not sees[p][later].any(), f"{stream} stream at {i} depends on a later/own token"
    # changing any non-reuse token leaves reuse-half outputs (both streams) and the new memory unchanged
    out_a = model(ids[None], perm_mask=perm[None], target_mapping=slots.target_mapping[None], memory=memory,
                  reuse_len=t // 2)
    ids_b = ids.clone()
    ids_b[t // 2:] = (ids_b[t // 2:] + 7) % V
    out_b = model(ids_b[None], perm_mask=perm[None], target_mapping=slots.target_mapping[None], memory=memory,
                  reuse_len=t // 2)
    reuse_slots = pos < t // 2
    assert torch.equal(out_a.hidden[:, : t // 2], out_b.hidden[:, : t // 2])
    assert torch.equal(out_a.query_hidden[0, : len(pos)][reuse_slots], out_b.query_hidden[0, : len(pos)][reuse_slots])
    for ma, mb in zip(out_a.memory, out_b.memory):
        assert torch.equal(ma, mb)


def test_empty_query_row_zero_policy_does_not_leak():
    """First target with no visible key (no context, no memory): zero policy returns a zero attention vector,
    so the prediction cannot depend on the target's own token; the official uniform policy leaks it."""
    ids = torch.tensor([[11, 12, 13]])
    perm = local_perm(ids[0], torch.ones(3, dtype=torch.bool), torch.tensor([0, 1, 2])).perm_mask[None]
    tm = torch.nn.functional.one_hot(torch.tensor([[0]]), 3).double()
    for policy, leaks in [("zero", False), ("uniform", True)]:
        model = tiny(empty_row_policy=policy)
        a = model(ids, perm_mask=perm, target_mapping=tm).logits
        b = model(torch.tensor([[20, 12, 13]]), perm_mask=perm, target_mapping=tm).logits
        assert (not torch.equal(a, b)) == leaks, policy
    model = tiny(empty_row_policy="zero")
    model.train()
    out = model(ids, perm_mask=perm, target_mapping=tm)
    plm_loss(out.logits, ids[:, :1], torch.ones(1, 1)).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# --- proper distribution ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 2, 0)])
def test_c8_proper_distribution(order):
    torch.manual_seed(0)
    model = XLNetLMHeadModel(3, **TINY).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    xs = torch.tensor(list(itertools.product(range(3), repeat=3)))  # all 27 target assignments
    ids = torch.cat([torch.zeros(27, 1, dtype=torch.long), xs], dim=1)  # position 0: a context token
    masked = torch.tensor([False, True, True, True])
    ranks = torch.tensor([3] + [order.index(k) for k in range(3)])  # rank of position 1+k = its place in z
    perm = local_perm(ids, masked.expand(27, 4), ranks.expand(27, 4)).perm_mask
    slots = prediction_slots(ids, masked.expand(27, 4), num_predict=3)
    logp = model(ids, perm_mask=perm, target_mapping=slots.target_mapping.double()).logits.log_softmax(-1)
    joint = logp.gather(-1, slots.target[..., None]).squeeze(-1).sum(-1)
    assert abs(joint.exp().sum().item() - 1.0) < 1e-5


# --- the two streams -----------------------------------------------------------------------------------------

def test_c9_query_stream_never_feeds_content():
    model = tiny()
    ids, perm, _, _, slots = two_half_example(12, 3)
    with_q = model(ids[None], perm_mask=perm[None], target_mapping=slots.target_mapping[None].double())
    without = model(ids[None], perm_mask=perm[None])
    assert torch.equal(with_q.hidden, without.hidden)
    with_q.hidden.sum().backward()
    grad = model.transformer.mask_emb.grad
    assert grad is None or torch.count_nonzero(grad) == 0


def test_c10_slot_path_equals_full_length_path_and_padding_slots():
    model = tiny()
    ids, perm, is_target, _, slots = two_half_example(12, 4)
    n = int(slots.target_mask.sum())
    shuffled = torch.randperm(n)
    tm = slots.target_mapping[:n][shuffled]
    tm = torch.cat([tm, torch.zeros(3, 12)]).double()  # three padding slots
    a = model(ids[None], perm_mask=perm[None], target_mapping=tm[None])
    b = model(ids[None], perm_mask=perm[None], inp_q=is_target[None].double())  # official full-length path
    pos = slots.positions[:n][shuffled]
    assert (a.query_hidden[0, :n] - b.query_hidden[0, pos]).abs().max() < 1e-10
    assert torch.isfinite(a.logits).all()
    # padding slots contribute nothing, and more padding does not change the loss
    target = torch.cat([ids[pos], torch.zeros(3, dtype=torch.long)])[None]
    weight = torch.cat([torch.ones(n), torch.zeros(3)])[None]
    loss = plm_loss(a.logits, target, weight)
    ce = torch.nn.functional.cross_entropy(a.logits[0, :n], ids[pos])
    assert torch.allclose(loss, ce)
    tm2 = torch.cat([tm, torch.zeros(4, 12, dtype=torch.float64)])
    a2 = model(ids[None], perm_mask=perm[None], target_mapping=tm2[None])
    loss2 = plm_loss(a2.logits, torch.cat([target, torch.zeros(1, 4, dtype=torch.long)], 1),
                     torch.cat([weight, torch.zeros(1, 4)], 1))
    assert torch.allclose(loss, loss2)


# --- bi_data ----------------------------------------------------------------------------------------------------

def test_c11_bi_data_symmetry():
    model = tiny(bi_data=True)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, V, (9,), generator=g)
    seg = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2])
    out = model(torch.stack([x, x.flip(0)]), torch.stack([seg, seg.flip(0)])).hidden
    assert (out[1] - out[0].flip(0)).abs().max() < 1e-5
    model.transformer.bi_data = False  # without negated distances the mirror image is not reproduced
    out = model(torch.stack([x, x.flip(0)]), torch.stack([seg, seg.flip(0)])).hidden
    assert (out[1] - out[0].flip(0)).abs().max() > 1e-3


# --- memory -----------------------------------------------------------------------------------------------------

def test_c12_cache_semantics():
    model = tiny(mem_len=5)
    model.train()  # memory must be detached even when gradients flow
    inputs = []
    hooks = [layer.register_forward_pre_hook(lambda _m, args: inputs.append(args[0]))
             for layer in model.transformer.layer]
    old = [torch.randn(2, 4, 32, dtype=torch.float64) for _ in range(2)]
    ids = torch.randint(0, V, (2, 6))
    out = model(ids, memory=old, reuse_len=3)
    for h in hooks:
        h.remove()
    assert len(out.memory) == 2
    for layer, (mem, inp) in enumerate(zip(out.memory, inputs)):
        assert not mem.requires_grad
        assert torch.equal(mem, torch.cat([old[layer], inp[:, :3]], 1)[:, -5:])
    assert torch.equal(inputs[0], model.transformer.word_embedding(ids))
    model.transformer.mem_len = 0
    assert model(ids, memory=old).memory is None


@pytest.mark.parametrize("bi_data", [False, True])
def test_c13_recurrence_equivalence(bi_data):
    r = 6
    model = tiny(mem_len=r, bi_data=bi_data)
    g = torch.Generator().manual_seed(1)
    b = 2
    s1 = torch.randint(0, V, (b, r), generator=g)
    s2 = torch.randint(0, V, (b, r), generator=g)
    masked = torch.rand(b, r, generator=g) < 0.5
    masked[:, 0] = False
    p2 = local_perm(s2, masked, sample_ranks(r, r, (b,), generator=g))
    slots = prediction_slots(s2, p2.is_target, num_predict=r)
    tm = slots.target_mapping.double()
    joint_perm = two_half_perm_mask(torch.zeros(b, r, r), p2.perm_mask)
    joint_tm = torch.cat([torch.zeros(b, r, r, dtype=torch.float64), tm], dim=-1)
    joint = model(torch.cat([s1, s2], 1), perm_mask=joint_perm, target_mapping=joint_tm)
    first = model(s1, reuse_len=r)
    second = model(s2, perm_mask=p2.perm_mask, target_mapping=tm, memory=first.memory, reuse_len=r)
    assert (joint.hidden[:, r:] - second.hidden).abs().max() < 1e-5
    real = slots.target_mask.bool()
    assert (joint.query_hidden[real] - second.query_hidden[real]).abs().max() < 1e-5


# --- segments ---------------------------------------------------------------------------------------------------

def test_c14_segment_relabelling_invariance():
    model = tiny()
    ids = torch.randint(0, V, (1, 9))
    seg = torch.tensor([[0, 0, 0, 1, 1, 1, 2, 2, 2]])
    base = model(ids, seg).hidden
    relabelled = model(ids, torch.tensor([[5, 5, 5, 0, 0, 0, 1, 1, 1]])).hidden
    assert (base - relabelled).abs().max() < 1e-10
    merged = model(ids, torch.tensor([[0, 0, 0, 0, 0, 0, 2, 2, 2]])).hidden  # different "same" pairs
    assert (base - merged).abs().max() > 1e-3
    no_seg = model(ids, None).hidden  # omitted segments = all-equal ids
    all_equal = model(ids, torch.zeros_like(seg)).hidden
    assert (no_seg - all_equal).abs().max() < 1e-10


def test_padding_has_no_effect_on_real_positions():
    model = tiny()
    ids = torch.randint(0, V, (1, 8))
    pad = torch.zeros(1, 8, dtype=torch.float64)
    pad[0, :3] = 1
    a = model(ids, input_mask=pad).hidden
    ids2 = ids.clone()
    ids2[0, :3] = torch.tensor([1, 2, 3])
    b = model(ids2, input_mask=pad).hidden
    assert torch.equal(a[0, 3:], b[0, 3:])


# --- configs ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,expected", [("xlnet_base", 116_750_336), ("xlnet_large", 360_300_800),
                                           ("xlnet_base_bert_comparable", 116_750_336), ("xlnet_tiny", None)])
def test_model_configs_instantiate(name, expected):
    from pathlib import Path

    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(Path(__file__).parents[2] / "conf" / "model" / f"{name}.yaml")
    assert "vocab_size" not in cfg  # comes from the data module
    with torch.device("meta"):
        model = instantiate(cfg, vocab_size=32000)
    assert isinstance(model, XLNetLMHeadModel)
    if expected is not None:
        assert count_params(model) == expected


# --- overfitting ------------------------------------------------------------------------------------------------

def test_c24_overfits_two_sentences():
    torch.manual_seed(0)
    model = XLNetLMHeadModel(20, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0, dropatt=0.0)
    ids = torch.tensor([[10, 11, 12, 13, 14, 15, 4, 16, 17, 18, 19, 12, 4, 3]]).expand(8, -1)
    seg = torch.tensor([[0] * 7 + [1] * 6 + [2]]).expand(8, -1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(500):
        masked = torch.rand(8, 14, generator=g) < 0.3
        perm = local_perm(ids, masked, sample_ranks(14, 14, (8,), generator=g))
        slots = prediction_slots(ids, perm.is_target, num_predict=14)
        out = model(ids, seg, perm_mask=perm.perm_mask, target_mapping=slots.target_mapping)
        loss = plm_loss(out.logits, slots.target, slots.target_mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-20:]) / 20 < 0.1


def test_no_grad_sdpa_path_equals_training_path():
    """Without gradients attention runs through SDPA; with gradients through baddbmm + softmax: same numbers."""
    for dtype in (torch.float64, torch.float32):
        model = tiny(dtype=dtype, mem_len=4)
        ids, perm, _, _, slots = two_half_example(12, 6)
        args = dict(perm_mask=perm[None].to(dtype), target_mapping=slots.target_mapping[None].to(dtype),
                    memory=[torch.randn(1, 4, 32, dtype=dtype) for _ in range(2)])
        seg = torch.randint(0, 2, (1, 12))
        train_path = model(ids[None], seg, **args)
        with torch.no_grad():
            infer_path = model(ids[None], seg, **args)
        tol = 1e-10 if dtype == torch.float64 else 1e-5
        assert (train_path.logits - infer_path.logits).abs().max() < tol
        assert (train_path.hidden - infer_path.hidden).abs().max() < tol


def test_bf16_autocast_close_to_fp32():
    model = tiny(dtype=torch.float32, mem_len=4)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
    ids, perm, _, _, slots = two_half_example(12, 7)
    args = dict(perm_mask=perm[None], target_mapping=slots.target_mapping[None],
                memory=model.transformer.init_memory(1))
    ref = model(ids[None], **args).logits
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(ids[None], **args)
        loss = plm_loss(out.logits, slots.target[None], slots.target_mask[None])
    loss.backward()
    assert torch.isfinite(loss)
    assert (out.logits.float() - ref).abs().max() < 2e-2 * ref.abs().max()


def test_model_pickles_for_ddp_spawn():
    """ddp_spawn pickles the LightningModule; a lambda activation made every default XLNet unpicklable."""
    import pickle

    torch.manual_seed(0)
    m = XLNetLMHeadModel(50, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32, dropout=0.0, dropatt=0.0)
    ids = torch.randint(0, 50, (1, 6))
    copy = pickle.loads(pickle.dumps(m))
    torch.testing.assert_close(copy.transformer(ids).output, m.transformer(ids).output)
