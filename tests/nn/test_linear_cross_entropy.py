"""The fused output layer + cross-entropy equals the unfused expression in value and gradient."""

import pytest
import torch
import torch.nn.functional as F

from genlab.nn.linear_cross_entropy import linear_cross_entropy


def unfused(h, w, t, b=None):
    return F.cross_entropy(F.linear(h, w, b).float(), t, reduction="none")


def leaves(n=37, d=16, v=50, bias=True, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(n, d, generator=g, dtype=dtype).requires_grad_()
    w = torch.randn(v, d, generator=g, dtype=dtype).requires_grad_()
    b = torch.randn(v, generator=g, dtype=dtype).requires_grad_() if bias else None
    t = torch.randint(0, v, (n,), generator=g)
    row_weights = torch.rand(n, generator=g, dtype=dtype)  # a per-row upstream gradient, not a plain mean
    return h, w, b, t, row_weights


def grads(loss_fn, h, w, b, t, row_weights, autocast=False):
    for x in (h, w, b):
        if x is not None:
            x.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        nll = loss_fn(h, w, t, b)
    (nll * row_weights).sum().backward()
    return nll.detach(), [x.grad.clone() for x in (h, w, b) if x is not None]


@pytest.mark.parametrize("block_elements", [1, 50 * 5, 50 * 37, 1 << 21])  # one row, ragged last block, one block
def test_fp32_equals_unfused_across_block_sizes(block_elements):
    leaf = leaves()
    ref_nll, ref_grads = grads(unfused, *leaf)
    nll, got = grads(lambda h, w, t, b: linear_cross_entropy(h, w, t, b, block_elements=block_elements), *leaf)
    assert nll.dtype == torch.float32
    torch.testing.assert_close(nll, ref_nll, rtol=1e-6, atol=1e-6)
    for a, r in zip(got, ref_grads):
        torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-6)


def test_gradcheck_float64_without_bias():
    h, w, _, t, _ = leaves(n=7, d=5, v=11, bias=False, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda h, w: linear_cross_entropy(h, w, t, block_elements=22), (h, w))


def test_bf16_autocast_matches_unfused_autocast():
    """Same rounding points as autocast's linear: bf16 GEMMs, fp32 softmax, the logits' gradient in bf16."""
    leaf = leaves(n=64, d=32, v=300)
    ref_nll, ref_grads = grads(unfused, *leaf, autocast=True)
    nll, got = grads(lambda h, w, t, b: linear_cross_entropy(h, w, t, b, block_elements=300 * 16), *leaf,
                     autocast=True)
    torch.testing.assert_close(nll, ref_nll, rtol=0, atol=0)  # same bf16 logits, same fp32 log-softmax
    for a, r in zip(got, ref_grads):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, r, rtol=2e-2, atol=2e-2 * r.abs().max().item())


def test_no_grad_keeps_nothing_and_gives_the_same_nll():
    h, w, b, t, _ = leaves()
    with torch.no_grad():
        nll = linear_cross_entropy(h, w, t, b, block_elements=100)
        assert nll.grad_fn is None
        torch.testing.assert_close(nll, unfused(h, w, t, b))
