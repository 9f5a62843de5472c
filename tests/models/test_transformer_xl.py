"""Transformer-XL model checks (Dai et al., 2019, Yang's thesis §2.1.3: segment-level recurrence with state reuse,
relative positional encodings and their efficient computation; the released code's variants) plus the LM interface."""

from __future__ import annotations

import pytest
import torch

from genlab.errors import ConfigError
from genlab.models.lm_output import LMOutput
from genlab.models.transformer_xl import TransformerXL

V = 50
TINY = dict(n_layer=3, d_model=32, n_head=4, d_head=8, d_inner=64, dropout=0.0, dropatt=0.0)


def _model(seed: int = 0, spread: float = 0.3, **kw) -> TransformerXL:
    """fp64 eval model with large random weights so position and mask bugs show up."""
    torch.manual_seed(seed)
    args = {**TINY, **kw}
    m = TransformerXL(V, **args).double().eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
            else:
                p.normal_(0, spread)
    return m


def _chunked(m: TransformerXL, ids: torch.Tensor, seg: int) -> torch.Tensor:
    mem, out = None, []
    with torch.no_grad():
        for s in range(0, ids.size(1), seg):
            lp, mem = m.log_probs(ids[:, s:s + seg], mem)
            out.append(lp)
    return torch.cat(out, 1)


def _stream(n: int, b: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (b, n), generator=torch.Generator().manual_seed(seed))


def test_interface_and_shapes():
    m = _model(mem_len=5, cutoffs=[10, 30], div_val=2)
    ids = _stream(7)
    out = m(ids, target=ids, memory=None)
    assert isinstance(out, LMOutput) and out.logits is None
    assert out.nll.shape == (2, 7)
    assert len(out.memory) == m.n_layer and all(t.shape == (2, 5, 32) for t in out.memory)
    assert m(ids).nll is None
    lp, _ = m.log_probs(ids)
    assert torch.allclose(out.nll, -lp.gather(-1, ids[..., None]).squeeze(-1))


@pytest.mark.parametrize("attn_type,pre_lnorm", [("rel", False), ("rel", True), ("shaw", False)])
def test_c2_state_reuse_is_exact(attn_type, pre_lnorm):
    """Chunks of 6 with memory (mem_len >= T, empty init) == one forward over all 24 tokens."""
    m = _model(mem_len=24, attn_type=attn_type, max_len=32, pre_lnorm=pre_lnorm)
    ids = _stream(24)
    with torch.no_grad():
        full, _ = m.log_probs(ids)
    assert (full - _chunked(m, ids, 6)).abs().max() < 1e-5


def test_c14_eval_is_deterministic():
    m = _model(mem_len=8, dropout=0.3, dropatt=0.3)
    ids = _stream(12)
    assert torch.equal(_chunked(m, ids, 6), _chunked(m, ids, 6))


def test_c2_fails_with_zero_initial_memory():
    m = _model(mem_len=24, init_mem="zeros")
    ids = _stream(24)
    m.init_mem = "empty"
    with torch.no_grad():
        full, _ = m.log_probs(ids)
    m.init_mem = "zeros"
    assert (full - _chunked(m, ids, 6)).abs().max() > 1e-2


def test_c2_fails_for_absolute_positions_with_recurrence():
    """Temporal confusion (thesis §2.1.3): absolute positions + memory != full forward."""
    m = _model(mem_len=24, attn_type="abs_sinusoid")
    ids = _stream(24)
    with torch.no_grad():
        full, _ = m.log_probs(ids)
    assert (full - _chunked(m, ids, 6)).abs().max() > 1e-2


@pytest.mark.parametrize("attn_type", ["rel", "shaw", "abs_sinusoid", "abs_learned"])
def test_c3_causality(attn_type):
    m = _model(mem_len=8, attn_type=attn_type, max_len=32)
    ids = _stream(18)
    base = _chunked(m, ids, 6)
    for t in (3, 9, 14):  # inside the first segment, and later (earlier positions are in the memory)
        changed = ids.clone()
        changed[:, t] = (changed[:, t] + 1) % V
        moved = _chunked(m, changed, 6)
        assert torch.equal(base[:, :t], moved[:, :t])
        assert (base[:, t:] - moved[:, t:]).abs().max() > 1e-6


@pytest.mark.parametrize("variant,extra", [("tf", 1), ("pytorch", 0)])
def test_c4_same_length_equals_sliding_window(variant, extra):
    """1 layer, mem_len M=5, L=6: chunked same_length eval == sliding window over [t-M, t] (tf) or [t-M+1, t]."""
    M = 5
    m = _model(n_layer=1, mem_len=M, same_length=True, same_length_variant=variant)
    ids = _stream(24)
    chunked = _chunked(m, ids, 6)
    m.same_length = False
    width = M + extra
    with torch.no_grad():
        for t in range(24):
            window = ids[:, max(0, t - width + 1):t + 1]
            lp, _ = m.log_probs(window)
            assert (lp[:, -1] - chunked[:, t]).abs().max() < 1e-8, t


def test_c5_stop_gradient():
    torch.manual_seed(0)
    m = TransformerXL(V, **{**TINY, "dropout": 0.1}, mem_len=6, tie_weight=False)
    m.train()
    seg1 = torch.arange(0, 12).view(2, 6)  # tokens 0..11 only in segment 1
    seg2 = torch.arange(20, 32).view(2, 6)
    out1 = m(seg1, seg1)
    assert all(not t.requires_grad and t.grad_fn is None for t in out1.memory)
    m.zero_grad()
    out2 = m(seg2, seg2, out1.memory)
    out2.nll.mean().backward()
    table_grad = m.word_emb.tables[0].weight.grad
    assert torch.count_nonzero(table_grad[:12]) == 0  # nothing flows back into segment 1
    assert torch.count_nonzero(table_grad[20:32]) > 0
    assert all(not t.requires_grad for t in out2.memory)


def test_c6_memory_update_arithmetic():
    torch.manual_seed(0)
    M, L = 7, 4
    m = TransformerXL(V, **{**TINY, "dropout": 0.5}, mem_len=M)
    m.train()
    seen: list[torch.Tensor] = []
    hooks = [layer.attn.register_forward_pre_hook(lambda mod, args: seen.append(args[0].detach()))
             for layer in m.layers]
    mem = None
    for step in range(3):
        seen.clear()
        out = m(_stream(L, seed=step), memory=mem)
        assert len(out.memory) == m.n_layer == len(seen)
        m_cur = 0 if mem is None else mem[0].size(1)
        for layer, new in enumerate(out.memory):
            assert new.size(1) == min(M, m_cur + L)
            old = seen[layer] if mem is None else torch.cat([mem[layer], seen[layer]], 1)
            assert torch.equal(new, old[:, -new.size(1):])
        mem = out.memory
    for h in hooks:
        h.remove()
    # Entry 0 is the post-dropout embedding (train mode), not the clean one.
    emb = m.word_emb(_stream(L, seed=2))
    assert not torch.allclose(seen[0], emb)
    assert ((seen[0] == 0) | torch.isclose(seen[0], emb * 2)).all()


def test_ext_len_predicts_last_positions_and_caches_before_them():
    m = _model(mem_len=10, ext_len=2)
    ids = _stream(8)
    out = m(ids, target=ids)
    assert out.nll.shape == (2, 6)
    with torch.no_grad():
        m.ext_len = 0
        full, _ = m.log_probs(ids)
        m.ext_len = 2
    assert torch.allclose(out.nll, -full[:, 2:].gather(-1, ids[:, 2:, None]).squeeze(-1))
    assert out.memory[0].size(1) == 6  # the last ext_len inputs are re-fed, so they are not cached


def test_c7_position_input():
    m = _model(mem_len=4)
    R = m.position_embeddings(9)
    assert R.dtype == torch.float32 and R.shape == (9, 32)
    assert torch.equal(R[-1], torch.cat([torch.zeros(16), torch.ones(16)]))  # distance 0 is the last row
    m.clamp_len = 3
    Rc = m.position_embeddings(9)
    assert all(torch.equal(Rc[j], R[9 - 1 - 3]) for j in range(0, 9 - 3))  # distances >= 3 use R_3
    assert torch.equal(Rc[-3:], R[-3:])


def _train_copy_task(mem_len: int, steps: int = 2000) -> tuple[TransformerXL, torch.Tensor]:
    """Recurrence setup: random length-12 blocks over 16 symbols, each repeated 8 times, in 16 ordered streams."""
    g = torch.Generator().manual_seed(0)

    def corpus(n_blocks: int) -> torch.Tensor:
        blocks = torch.randint(0, 16, (n_blocks, 1, 12), generator=g).expand(-1, 8, -1)
        return blocks.reshape(-1)

    train = corpus(2700)
    train = train[: train.numel() // 16 * 16].view(16, -1)
    test = corpus(90)
    test = test[: test.numel() // 16 * 16].view(16, -1)
    torch.manual_seed(0)
    m = TransformerXL(16, n_layer=1, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0, dropatt=0.0,
                      mem_len=mem_len, init_std=0.02)
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    mem, pos = None, 0
    for _ in range(steps):
        if pos + 9 > train.size(1):
            mem, pos = None, 0
        out = m(train[:, pos:pos + 8], train[:, pos + 1:pos + 9], mem)
        mem, pos = out.memory, pos + 8
        opt.zero_grad()
        out.nll.mean().backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 0.25)
        opt.step()
    return m.eval(), test


def _eval_nll(m: TransformerXL, test: torch.Tensor, mem_len: int, same_length: bool = False) -> float:
    m.mem_len, m.same_length = mem_len, same_length
    mem, total, count = None, 0.0, 0
    with torch.no_grad():
        for pos in range(0, test.size(1) - 1, 8):
            x, y = test[:, pos:pos + 8], test[:, pos + 1:pos + 9]
            x = x[:, : y.size(1)]
            out = m(x, y, mem)
            mem = out.memory
            total += out.nll.sum().item()
            count += out.nll.numel()
    return total / count


@pytest.fixture(scope="module")
def copy_models():
    with_mem, test = _train_copy_task(mem_len=16)
    without_mem, _ = _train_copy_task(mem_len=0)
    return with_mem, without_mem, test


def test_c11_learns_beyond_the_segment(copy_models):
    with_mem, without_mem, test = copy_models
    assert _eval_nll(with_mem, test, 16) <= 1.0
    assert _eval_nll(without_mem, test, 0) >= 2.5


def test_c12_longer_eval_memory_does_not_hurt(copy_models):
    with_mem, _, test = copy_models
    base = _eval_nll(with_mem, test, 16)
    assert _eval_nll(with_mem, test, 48) <= base + 0.05
    assert _eval_nll(with_mem, test, 48, same_length=True) <= base + 0.05
    with_mem.mem_len, with_mem.same_length = 16, False


@pytest.mark.parametrize("kwargs,count", [
    (dict(vocab_size=204, n_layer=12, d_model=512, n_head=8, d_head=64, d_inner=2048), 41_055_436),
    (dict(vocab_size=204, n_layer=24, d_model=1024, n_head=8, d_head=128, d_inner=3072), 277_231_820),
    (dict(vocab_size=267_735, n_layer=16, d_model=410, n_head=10, d_head=41, d_inner=2100,
          cutoffs=[20000, 40000, 200000], div_val=1), 151_107_538),
    (dict(vocab_size=267_735, n_layer=18, d_model=1024, n_head=16, d_head=64, d_inner=4096,
          cutoffs=[20000, 40000, 200000], div_val=4, untie_r=True, tie_projs=[False, True, True, True]),
     285_205_322),
    (dict(vocab_size=267_735, n_layer=16, d_model=1024, n_head=16, d_head=64, d_inner=4096,
          cutoffs=[20000, 40000, 200000], div_val=4, untie_r=True, tie_projs=[False, True, True, True]),
     257_919_818),
])
def test_c13_parameter_counts(kwargs, count):
    with torch.device("meta"):
        m = TransformerXL(**kwargs)
    assert m.num_parameters() == count


def test_c13_untie_r_adds_per_layer_biases():
    with torch.device("meta"):
        shared = TransformerXL(V, **TINY)
        untied = TransformerXL(V, **TINY, untie_r=True)
    assert untied.num_parameters() - shared.num_parameters() == 2 * (TINY["n_layer"] - 1) * 4 * 8


@pytest.mark.parametrize("init_mem", ["empty", "zeros"])
def test_c16_bf16_autocast_first_segment(init_mem):
    torch.manual_seed(0)
    m = TransformerXL(V, **TINY, mem_len=6, same_length=True, init_mem=init_mem, cutoffs=[10, 30], div_val=2)
    ids = _stream(6)
    mem = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(2):
            out = m(ids, ids, mem)
            mem = out.memory
            assert out.nll.dtype == torch.float32
            assert torch.isfinite(out.nll).all()


def test_c21_positions_stay_fp32():
    torch.manual_seed(0)
    m = TransformerXL(V, **TINY, mem_len=4)
    ref = m.position_embeddings(1600)
    m_bf16 = m.to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        built = m_bf16.position_embeddings(1600)
    assert built.dtype == torch.float32 and torch.equal(built, ref)
    assert ref.unique(dim=0).size(0) == 1600


def test_generate_with_memory_matches_full_recompute():
    """Greedy (top_k=1) generation reusing memory == argmax of a full forward over context + generated."""
    m = _model(mem_len=40, spread=0.1)
    ctx = _stream(5, b=2)
    gen = m.generate(ctx, 8, top_k=1)
    assert gen.shape == (2, 8)
    seq = ctx
    with torch.no_grad():
        for _ in range(8):
            lp, _ = m.log_probs(seq)
            seq = torch.cat([seq, lp[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(gen, seq[:, 5:])
    sampled = m.generate(ctx, 4, top_k=3, generator=torch.Generator().manual_seed(0))
    assert sampled.shape == (2, 4) and sampled.max() < V


def test_vanilla_generation_without_memory():
    m = _model(mem_len=0, attn_type="abs_learned", max_len=16, spread=0.1)
    assert m.generate(_stream(5), 3, top_k=1).shape == (2, 3)


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="attn_type"):
        TransformerXL(V, **TINY, attn_type="bogus")
    with pytest.raises(ConfigError, match="init_mem"):
        TransformerXL(V, **TINY, init_mem="ones")
    with pytest.raises(ConfigError, match="same_length_variant"):
        TransformerXL(V, **TINY, same_length_variant="hf")
    with pytest.raises(ConfigError, match="cutoffs"):
        TransformerXL(V, **TINY, cutoffs=[30, 10])
    with pytest.raises(ConfigError, match="ext_len"):
        TransformerXL(V, **TINY, ext_len=4)(_stream(4))
