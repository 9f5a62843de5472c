"""Gradients of the training paths that write the content term into the score bias in place (TXL relative
attention, XLNet two-stream attention) equal finite differences (fp64 gradcheck), with memory, masks and
segments; the TXL path also matches the textbook reference gradients of ``attn_impl="naive"``."""

from __future__ import annotations

import pytest
import torch

from genlab.models.xlnet import XLNetModel
from genlab.nn.positional import relative_positions, sinusoid_table
from genlab.nn.relative_attention import RelPartialLearnableAttention, attention_mask

D, H, DH = 16, 2, 8


def _randomise(module: torch.nn.Module, seed: int) -> None:
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.4)


@pytest.mark.parametrize("mlen,same_length", [(0, False), (3, False), (3, True)])
def test_txl_training_path_gradcheck_and_equals_naive(mlen, same_length):
    qlen = 4
    layers = {}
    for impl in ("sdpa", "naive"):
        layers[impl] = RelPartialLearnableAttention(D, H, DH, own_biases=True, attn_impl=impl).double()
        _randomise(layers[impl], 0)
    g = torch.Generator().manual_seed(1)
    h = torch.randn(2, qlen, D, dtype=torch.float64, generator=g, requires_grad=True)
    mem = torch.randn(2, mlen, D, dtype=torch.float64, generator=g, requires_grad=True) if mlen else None
    r = sinusoid_table(relative_positions(qlen + mlen), D).double()
    mask = attention_mask(qlen, mlen, same_length=same_length, mem_len=2)
    inputs = (h,) if mem is None else (h, mem)

    def run(impl):
        return lambda *x: layers[impl](x[0], r, mask, x[1] if len(x) > 1 else None)

    assert torch.autograd.gradcheck(run("sdpa"), inputs)
    grads = {}
    for impl in ("sdpa", "naive"):
        out = run(impl)(*inputs)
        grads[impl] = torch.autograd.grad(out.square().sum(), [*inputs, *layers[impl].parameters()])
    for got, want in zip(grads["sdpa"], grads["naive"]):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mlen", [0, 2])
def test_xlnet_two_stream_training_path_gradcheck(mlen):
    b, t, p = 2, 4, 2
    model = XLNetModel(30, n_layer=1, d_model=D, n_head=H, d_head=DH, d_inner=32, dropout=0.0,
                       dropatt=0.0).double()
    _randomise(model, 3)
    attn = model.layer[0].rel_attn
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 30, (b, t), generator=g)
    seg = torch.randint(0, 2, (b, t), generator=g)
    perm = (torch.rand(b, t, t, generator=g) > 0.5).double()
    perm[:, :, 0] = 0  # one visible key per row
    tm = torch.nn.functional.one_hot(torch.stack([torch.randperm(t, generator=g)[:p] for _ in range(b)]),
                                     t).double()
    ctx = model._context(ids, seg, None, perm, tm, mlen, torch.float64)
    h = torch.randn(b, t, D, dtype=torch.float64, generator=g, requires_grad=True)
    q = torch.randn(b, p, D, dtype=torch.float64, generator=g, requires_grad=True)
    mem = torch.randn(b, mlen, D, dtype=torch.float64, generator=g) if mlen else None

    def run(h_in, g_in):
        out_h, out_g = attn(h_in, g_in, mem, ctx)
        return out_h, out_g

    assert torch.autograd.gradcheck(run, (h, q))


def test_same_length_without_memory_stays_causal():
    """With mem_len 0 the same_length bound would leave each query only itself; the mask stays causal."""
    for variant in ("tf", "pytorch"):
        assert torch.equal(attention_mask(5, 0, same_length=True, mem_len=0, variant=variant), attention_mask(5, 0))
