"""Output layer and cross-entropy in one op: ``F.cross_entropy(F.linear(h, W, b).float(), t, reduction="none")``
without the fp32 ``[N, V]`` logits, log-probabilities and their gradient.

A softmax over a large vocabulary (GPT-1: 40,478 words) spends a step's non-GEMM time on whole ``[N, V]`` passes:
the fp32 copy of the logits, the log-softmax and its backward, the zero-filled gradient of the gather. Here the
logits are written into the buffer that becomes their gradient, in the compute dtype (the autocast dtype, else the
input's); a block of rows at a time, the log-softmax, the NLL and ``softmax - onehot`` (the gradient of the NLL with
respect to its logits) are computed and the block is overwritten by that gradient, so the fp32 temporaries are one
block's. The backward is then two GEMMs, with the incoming per-row gradient ``g`` applied to the small side of
each: ``dh = g ⊙ (D W)``, ``dW = Dᵀ (g ⊙ h)``, ``db = Dᵀ g``.

Values equal the unfused expression up to rounding (fp32: ~1e-6 relative; bf16 autocast: the gradient is rounded
to bf16 before its GEMMs, as the unfused path's autocast does). Evaluation (no gradient wanted) keeps nothing: the
logits are made a block at a time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# logits per softmax block (and per GEMM in evaluation): 207 rows of GPT-1's; narrower GEMMs are slower (51 rows:
# 20-25 % on a 1-thread CPU)
BLOCK_ELEMENTS = 1 << 23


def _compute_dtype(x: Tensor) -> torch.dtype:
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype


def _block_nll(logits: Tensor, target: Tensor, grad_out: Tensor | None) -> Tensor:
    """NLL of one block ``[r, V]`` of logits; writes ``softmax - onehot`` into ``grad_out`` when given (which may be
    the logits' own buffer: they are read once, by the log-softmax)."""
    logp = torch.log_softmax(logits, -1, dtype=torch.promote_types(logits.dtype, torch.float32))
    nll = -logp.gather(1, target[:, None]).squeeze(1)
    if grad_out is not None:
        # same dtype: the exponent goes straight into the gradient (no [r, V] copy); else it is rounded once, after
        # the target's -1 (as autocast's unfused backward rounds it)
        p = torch.exp(logp, out=grad_out) if grad_out.dtype == logp.dtype else logp.exp_()
        p[torch.arange(len(target), device=p.device), target] -= 1.0
        if p is not grad_out:
            grad_out.copy_(p)
    return nll


def _linear_into(out: Tensor, h: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """``F.linear(h, w, b)`` written into ``out`` (the same GEMM call: ``addmm`` with a bias, else ``mm``)."""
    return torch.mm(h, w.t(), out=out) if b is None else torch.addmm(b, h, w.t(), out=out)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, rows: int, keep: bool
                ) -> Tensor:
        dtype = _compute_dtype(hidden)
        with torch.autocast(hidden.device.type, enabled=False):
            h, w = hidden.to(dtype), weight.to(dtype)
            b = None if bias is None else bias.to(dtype)
            grad = torch.empty(len(h), len(w), dtype=dtype, device=h.device) if keep else None
            nll = torch.empty(len(h), dtype=torch.promote_types(dtype, torch.float32), device=h.device)
            # fp32: all logits in one GEMM, as a GEMM per block packs the whole [V, d] weight again for each block
            # (GPT-1, 2,044 rows: head + loss 4.56 -> 4.18 s); bf16: a GEMM per block measured faster (1.22 vs 1.27 s)
            one_gemm = grad is not None and grad.element_size() >= 4
            if one_gemm:
                _linear_into(grad, h, w, b)
            for i in range(0, len(h), rows):
                block = None if grad is None else grad[i:i + rows]
                if block is None:
                    logits = F.linear(h[i:i + rows], w, b)
                else:  # the logits are made in the block of the gradient they become: no [r, V] buffer per block
                    logits = block if one_gemm else _linear_into(block, h[i:i + rows], w, b)
                nll[i:i + rows] = _block_nll(logits, target[i:i + rows], block)
        ctx.dtypes = hidden.dtype, weight.dtype, None if bias is None else bias.dtype
        ctx.save_for_backward(h, w, grad)
        return nll

    @staticmethod
    def backward(ctx, g: Tensor):
        h, w, grad = ctx.saved_tensors
        g = g.float()[:, None]
        d_hidden = d_weight = d_bias = None
        with torch.autocast(g.device.type, enabled=False):
            if ctx.needs_input_grad[0]:
                d_hidden = (g * (grad @ w)).to(ctx.dtypes[0])
            if ctx.needs_input_grad[1]:
                d_weight = (grad.t() @ (g * h).to(grad.dtype)).to(ctx.dtypes[1])
            if ctx.needs_input_grad[2]:
                d_bias = (grad.t() @ g.to(grad.dtype)).squeeze(1).to(ctx.dtypes[2])
        return d_hidden, d_weight, d_bias, None, None, None


def linear_cross_entropy(hidden: Tensor, weight: Tensor, target: Tensor, bias: Tensor | None = None,
                         block_elements: int = BLOCK_ELEMENTS) -> Tensor:
    """Per-row NLL ``[N]`` (fp32; fp64 for fp64 inputs) of ``softmax(hidden [N, d] @ weight [V, d]ᵀ + bias [V])``
    at ``target [N]``. Every target is a real class (select the rows first: there is no ignore index)."""
    rows = max(1, block_elements // max(1, weight.shape[0]))
    keep = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (hidden, weight, bias))
    return _LinearCrossEntropy.apply(hidden, weight, bias, target, rows, keep)
