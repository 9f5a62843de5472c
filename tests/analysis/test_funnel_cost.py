"""Funnel FLOPs: the thesis' estimator reproduces its tables (5.1, 5.7-5.10) and the analytic matmul count equals
what FlopCounterMode counts on the real model, forward and training mode."""

from __future__ import annotations

import pytest
import torch

from genlab.analysis.funnel_cost import counting_mode, forward_flops, table_flops_ratio
from genlab.models.funnel import FunnelModel

B666 = table_flops_ratio((6, 6, 6), baseline_layers=1)  # 10.5 full-length layers: the Table 5.7 baseline


@pytest.mark.parametrize("blocks,repeats,dec,baseline,printed", [
    ((6, 6, 6), None, 0, 12, 0.88), ((6, 3, 3), (1, 2, 2), 0, 12, 0.88), ((4, 4, 4), None, 0, 12, 0.58),
    ((10, 10, 10), None, 0, 24, 0.73), ((8, 8, 8), None, 0, 24, 0.58), ((3, 4, 4), None, 0, 6, 1.00),
    ((6, 6, 6), None, 2, 12, 1.04), ((6, 3, 3), (1, 2, 2), 2, 12, 1.04), ((4, 4, 4), None, 2, 12, 0.75),
    ((10, 10, 10), None, 2, 24, 0.81)])
def test_check11_estimator_reproduces_tables_5_1_and_5_10(blocks, repeats, dec, baseline, printed):
    assert round(table_flops_ratio(blocks, repeats, dec, baseline), 2) == printed


def test_check11_ablation_layouts_and_the_one_misprint():
    assert round(table_flops_ratio((8, 8), baseline_layers=1) / B666, 2) == 1.14  # Table 5.7 (7)
    assert round(table_flops_ratio((5, 5, 5, 5), baseline_layers=1) / B666, 2) == 0.89  # (8)
    b888 = table_flops_ratio((8, 8, 8), num_decoder_layers=2, baseline_layers=24)
    assert b888 == pytest.approx(16 / 24) and round(b888, 2) == 0.67 and abs(b888 - 0.66) <= 0.01  # printed 0.66


@pytest.mark.parametrize("kw", [dict(), dict(use_decoder=False), dict(block_sizes=(2, 1, 1), block_repeats=(2, 2, 1)),
                                dict(pool_q_only=False), dict(separate_cls=False), dict(truncate_seq=False),
                                dict(block_sizes=(3,), use_decoder=False), dict(d_embed=48)])
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_analytic_flops_equal_flop_counter(kw, train):
    model = FunnelModel(50, **{"block_sizes": (1, 1, 1), "d_model": 32, "n_head": 2, "d_head": 16, "d_inner": 64,
                               **kw}).train(train)
    ids = torch.randint(0, 50, (2, 17))
    with torch.set_grad_enabled(train), counting_mode() as counter:
        model(ids)
    assert counter.get_total_flops() == forward_flops(model.arch, 2, 17)


def test_funnel_saves_flops_against_the_baseline_at_length_512():
    dims = dict(d_model=768, n_head=12, d_head=64, d_inner=3072, use_decoder=False)
    base = forward_flops(dict(block_sizes=(12,), **dims), 1, 512)
    assert 0.8 < forward_flops(dict(block_sizes=(6, 6, 6), **dims), 1, 512) / base < 0.9
    assert 0.5 < forward_flops(dict(block_sizes=(4, 4, 4), **dims), 1, 512) / base < 0.6
