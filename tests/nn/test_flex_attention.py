"""FlexAttention and naive paths of Transformer-XL relative attention equal the fused SDPA path.

On CPU FlexAttention runs eagerly (the unfused reference implementation; compiling it takes about a minute
here), which checks the score_mod / block-mask math; the fused kernel is the same math compiled.
"""

from __future__ import annotations

import copy

import pytest
import torch

from genlab.errors import ConfigError
from genlab.models.transformer_xl import TransformerXL
from genlab.nn.positional import relative_positions, sinusoid_table
from genlab.nn.relative_attention import RelPartialLearnableAttention, attention_mask, flex_block_mask

D, H, DH, V = 32, 4, 8, 40


def _rel(impl: str) -> RelPartialLearnableAttention:
    torch.manual_seed(0)
    m = RelPartialLearnableAttention(D, H, DH, own_biases=True, attn_impl=impl).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
    return m


@pytest.mark.parametrize("mlen,clamp_len,same_length,variant", [
    (0, -1, False, "tf"), (5, -1, False, "tf"), (5, 3, False, "tf"), (5, -1, True, "tf"), (5, -1, True, "pytorch"),
])
def test_flex_and_naive_equal_sdpa_in_the_attention_layer(mlen, clamp_len, same_length, variant):
    B, L = 2, 6
    h = torch.randn(B, L, D, dtype=torch.float64)
    mem = torch.randn(B, mlen, D, dtype=torch.float64) if mlen else None
    r = sinusoid_table(relative_positions(L + mlen, clamp_len=clamp_len), D).double()
    mask = attention_mask(L, mlen, same_length=same_length, mem_len=mlen, variant=variant)
    with torch.no_grad():  # FlexAttention has no backward on CPU
        ref = _rel("sdpa")(h, r, mask, mem)
        for impl in ("flex", "naive"):
            got = _rel(impl)(h, r, mask, mem)
            torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10, msg=impl)
        # The block mask built once per forward gives the same as the boolean mask.
        torch.testing.assert_close(_rel("flex")(h, r, flex_block_mask(mask), mem), ref, rtol=1e-10, atol=1e-10)


def _model(impl: str, **kw) -> TransformerXL:
    torch.manual_seed(0)
    m = TransformerXL(V, n_layer=2, d_model=D, n_head=H, d_head=DH, d_inner=64, dropout=0.0, mem_len=6,
                      attn_impl=impl, **kw).double()
    with torch.no_grad():  # larger weights than the init so position terms matter
        for name, p in m.named_parameters():
            if p.dim() >= 2 or name.endswith((".u", ".v")) or name in ("u", "v"):
                p.normal_(0, 0.2)
    return m


def _segments(m: TransformerXL, ids: torch.Tensor) -> torch.Tensor:
    mem, losses = None, []
    for s in range(0, 12, 4):  # three segments: memory carries across them
        out = m(ids[:, s:s + 4], target=ids[:, s + 1:s + 5], memory=mem)
        mem = out.memory
        losses.append(out.nll.mean())
    return torch.stack(losses)


@pytest.mark.parametrize("same_length", [False, True])
def test_flex_model_equals_sdpa_over_segments(same_length):
    ids = torch.randint(0, V, (2, 15), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = _segments(_model("sdpa", same_length=same_length, clamp_len=4), ids)
        got = _segments(_model("flex", same_length=same_length, clamp_len=4), ids)
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("same_length", [False, True])
def test_naive_model_equals_sdpa_over_segments_with_gradients(same_length):
    ids = torch.randint(0, V, (2, 15), generator=torch.Generator().manual_seed(1))
    grads = {}
    for impl in ("sdpa", "naive"):
        m = _model(impl, same_length=same_length, clamp_len=4)
        loss = _segments(m, ids)
        loss.sum().backward()
        grads[impl] = (loss.detach(), {n: p.grad for n, p in m.named_parameters()})
    torch.testing.assert_close(grads["naive"][0], grads["sdpa"][0], rtol=1e-10, atol=1e-10)
    for name, g in grads["sdpa"][1].items():
        torch.testing.assert_close(grads["naive"][1][name], g, rtol=1e-8, atol=1e-10, msg=name)


def test_flex_training_on_cpu_is_a_clear_error():
    m = _model("flex")
    ids = torch.randint(0, V, (2, 4))
    with pytest.raises(ConfigError, match="no backward on CPU"):
        m(ids, target=ids)


def test_flex_under_bf16_autocast_and_bf16_weights_is_finite_and_close_to_fp32():
    m = _model("flex").float()
    ids = torch.randint(0, V, (2, 8), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = m(ids, target=ids).nll
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = m(ids, target=ids).nll
        bf16 = copy.deepcopy(m).to(torch.bfloat16)
        out = bf16(ids, target=ids).nll
    assert torch.isfinite(low).all()
    torch.testing.assert_close(low.float(), ref, rtol=0.05, atol=0.05)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, rtol=0.05, atol=0.1)


def test_flex_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="attn_impl"):
        TransformerXL(V, n_layer=1, d_model=D, n_head=H, d_head=DH, d_inner=64, attn_impl="fast")
    with pytest.raises(ConfigError, match="attn_impl=flex"):
        TransformerXL(V, n_layer=1, d_model=D, n_head=H, d_head=DH, d_inner=64, attn_impl="flex", attn_type="shaw")
    with pytest.raises(ConfigError, match="dropatt"):
        TransformerXL(V, n_layer=1, d_model=D, n_head=H, d_head=DH, d_inner=64, attn_impl="flex", dropatt=0.1)
