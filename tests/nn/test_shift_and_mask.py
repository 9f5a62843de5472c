"""The one-pass rel-shift + mask (``shift_and_mask``) equals the textbook pad/reshape ``rel_shift`` followed by
``masked_fill``, in values and in gradients, for every mask the models build."""

from __future__ import annotations

import pytest
import torch

from genlab.nn.relative_attention import attention_mask, rel_shift, shift_and_mask


@pytest.mark.parametrize("qlen,mlen", [(1, 0), (5, 0), (4, 3), (3, 9), (6, 6)])
@pytest.mark.parametrize("same_length,variant", [(False, "tf"), (True, "tf"), (True, "pytorch")])
def test_shift_and_mask_equals_reference_values_and_gradients(qlen, mlen, same_length, variant):
    g = torch.Generator().manual_seed(qlen * 10 + mlen)
    klen = qlen + mlen
    mask = attention_mask(qlen, mlen, same_length=same_length, mem_len=max(mlen, 1), variant=variant)
    raw = torch.randn(2, 3, qlen, klen, generator=g, dtype=torch.float64)
    upstream = torch.randn(2, 3, qlen, klen, generator=g, dtype=torch.float64)

    ref_in, got_in = raw.clone().requires_grad_(), raw.clone().requires_grad_()
    ref = rel_shift(ref_in).masked_fill(mask, float("-inf"))
    got = shift_and_mask(got_in, mask)
    assert got.is_contiguous()
    torch.testing.assert_close(got, ref, rtol=0, atol=0)

    # an upstream gradient on the blocked entries too: masked_fill's backward drops it, so must ours
    (want,) = torch.autograd.grad(ref, ref_in, upstream)
    (grad,) = torch.autograd.grad(got, got_in, upstream)
    assert grad.is_contiguous()  # what the position-score matmul's backward reads without a copy
    torch.testing.assert_close(grad, want, rtol=0, atol=0)


def test_shift_and_mask_keeps_the_input_dtype_and_accepts_non_contiguous_input():
    """bf16 in (the position scores' GEMM output under autocast), bf16 out: the -inf mask is exact in bf16."""
    g = torch.Generator().manual_seed(0)
    mask = attention_mask(4, 2)
    raw = torch.randn(3, 6, 4, generator=g).to(torch.bfloat16).transpose(-1, -2)  # [3, 4, 6], strided
    got = shift_and_mask(raw, mask)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, rel_shift(raw).masked_fill(mask, float("-inf")), rtol=0, atol=0)


def test_shift_and_mask_reads_permuted_leading_dims_without_a_copy():
    """The batch-folded position GEMM yields [B, H, L, K] as a view of [H, B, L, K]: the values must match the
    reference, and the gradient must come back in that same layout (so the GEMM's backward reads it as is)."""
    g = torch.Generator().manual_seed(1)
    mask = attention_mask(5, 4)
    base = torch.randn(3, 2, 5, 9, generator=g, dtype=torch.float64, requires_grad=True)  # [H, B, L, K]
    raw = base.transpose(0, 1)  # [B, H, L, K], each [L, K] block contiguous
    upstream = torch.randn(2, 3, 5, 9, generator=g, dtype=torch.float64)
    got = shift_and_mask(raw, mask)
    assert got.is_contiguous()
    ref = rel_shift(raw.contiguous()).masked_fill(mask, float("-inf"))
    torch.testing.assert_close(got, ref, rtol=0, atol=0)
    (grad,) = torch.autograd.grad(got, raw, upstream)
    assert grad.stride() == raw.stride()
    (want,) = torch.autograd.grad(ref, raw, upstream)
    torch.testing.assert_close(grad, want, rtol=0, atol=0)
