"""Why ``model.attn_impl=flex`` cannot train on CPU: PyTorch (2.13) has no FlexAttention backward there, eager or
compiled. The model raises a clear ConfigError instead (tests/nn/test_flex_attention.py). When this test fails,
PyTorch has gained the backward: then test flex == sdpa == naive gradients and lift that error."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention.flex_attention import flex_attention


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_pytorch_has_no_flex_attention_backward_on_cpu(compiled):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=g, requires_grad=True) for _ in range(3))
    bias = torch.randn(16, 16, generator=g)

    def relative_term(score, b, h, i, j):  # the shape of TXL's score_mod: add a position term per (i, j)
        return score + bias[i, j]

    attend = torch.compile(flex_attention) if compiled else flex_attention
    with pytest.raises(NotImplementedError, match="FlexAttention does not support backward on CPU"):
        attend(q, k, v, score_mod=relative_term).sum().backward()
