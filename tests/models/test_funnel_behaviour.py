"""Small-scale behaviour of the encoder-only Funnel (the pooled [CLS] summary of Dai's
thesis §5.2.2): a task that needs
global information ("is token 20 anywhere in the sequence") is learned through the pooled [CLS] summary, with
pool-query-only attention and with the pooled-keys ablation."""

from __future__ import annotations

import pytest
import torch

from genlab.models.backbones import FunnelBackbone
from genlab.models.funnel import FunnelModel
from genlab.models.heads import ClassificationHead

V, T, MARK = 50, 32, 20


def sample(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(21, V, (n, T), generator=g)
    ids[:, 0] = 3  # [CLS]
    label = torch.randint(0, 2, (n,), generator=g)
    where = torch.randint(1, T - 1, (n,), generator=g)  # the last position is dropped by truncation
    ids[label.bool(), where[label.bool()]] = MARK
    return ids, label


@pytest.mark.parametrize("pool_q_only", [True, False], ids=["pool_q_only", "pooled_keys"])
def test_check26_encoder_learns_a_global_feature(pool_q_only):
    torch.manual_seed(0)
    body = FunnelModel(V, (1, 1, 1), d_model=64, n_head=2, d_head=32, d_inner=256, use_decoder=False,
                       pool_q_only=pool_q_only, dropout=0.0, dropatt=0.0)
    backbone, head = FunnelBackbone(body, summary_dropout=0.0), ClassificationHead(64, 2)
    params = list(backbone.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=2e-3, betas=(0.9, 0.99), eps=1e-6)
    g = torch.Generator().manual_seed(1)
    types = torch.zeros(32, T, dtype=torch.long)
    types[:, 0] = 2
    for _ in range(200):
        ids, label = sample(32, g)
        loss = head.loss(head(backbone.summary(backbone.encode(ids, types))), label)
        opt.zero_grad()
        loss.backward()
        opt.step()
    backbone.eval()
    ids, label = sample(512, torch.Generator().manual_seed(2))
    with torch.no_grad():
        pred = head(backbone.summary(backbone.encode(ids, torch.zeros_like(ids).index_fill_(1, torch.tensor([0]), 2))))
    accuracy = (pred.argmax(-1) == label).float().mean()
    assert accuracy > 0.95, float(accuracy)
