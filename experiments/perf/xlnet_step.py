"""The XLNet pretraining step that ``xlnet_mfu.py``, ``xlnet_throughput.py`` and ``cpu_bf16.py`` time: its sizes
(``SIZES``), its batch (``make_batch``) and the matmul FLOPs it needs (``analytic_flops``), in one module both
benchmarks import, so neither imports the other.

FLOPs are counted analytically: the matmuls the model needs (queries, keys|values over [mem; h], the positional key
projection, content, positional and value terms over the K = M + T keys for the T content rows and the P query slots,
output projections, feed-forward for T + P rows, the tied output layer over the P slots), x3 for forward + backward,
except: no input gradient for the memory rows or the sinusoids, and the last layer's content stream runs forward only
(the loss reads the query stream; its keys come from the layer input, so the backward never reaches that stream: the
autograd graph skips it). ``xlnet_mfu.py`` cross-checks them against torch's FlopCounterMode.

    python experiments/perf/xlnet_step.py --config base --n-layer 4    # the step's shape and FLOPs, nothing timed
"""

from __future__ import annotations

import argparse

import torch

SIZES = {
    "tiny": dict(n_layer=2, d_model=64, n_head=4, d_head=16, d_inner=128, vocab=1000, seq=64, reuse=32,
                 mem=48, num_predict=10, batch=4),
    "base": dict(n_layer=12, d_model=768, n_head=12, d_head=64, d_inner=3072, vocab=32000, seq=512, reuse=256,
                 mem=384, num_predict=85, batch=2),
}


def make_batch(cfg: dict, step: int) -> dict:
    """Pretraining-shaped batch: two halves with their own permutation, [inp A SEP B SEP CLS] segments."""
    from genlab.data.pretrain.permutation import (
        local_perm,
        prediction_slots,
        sample_ranks,
        two_half_perm_mask,
    )

    g = torch.Generator().manual_seed(1000 + step)
    b, t, r, p = cfg["batch"], cfg["seq"], cfg["reuse"], cfg["num_predict"]
    ids = torch.randint(10, cfg["vocab"], (b, t), generator=g)
    a_len = (t - r - 3) // 2
    ids[:, r + a_len] = 4
    ids[:, -2:] = torch.tensor([4, 3])
    seg = torch.zeros(b, t, dtype=torch.long)
    seg[:, r + a_len + 1:] = 1
    seg[:, -1] = 2
    masks, targets = [], []
    for lo, hi, goal in [(0, r, (p + 1) // 2), (r, t, p // 2)]:
        n = hi - lo
        choice = torch.rand(b, n, generator=g).argsort(-1)[:, :goal]
        masked = torch.zeros(b, n, dtype=torch.bool).scatter_(1, choice, True)
        out = local_perm(ids[:, lo:hi], masked, sample_ranks(n, n, (b,), generator=g))
        masks.append(out.perm_mask)
        targets.append(out.is_target)
    slots = prediction_slots(ids, torch.cat(targets, 1), p)
    return dict(input_ids=ids, token_type_ids=seg, perm_mask=two_half_perm_mask(*masks),
                target_mapping=slots.target_mapping, target=slots.target, target_mask=slots.target_mask)


def analytic_flops(cfg: dict) -> float:
    """Matmul FLOPs one training step needs (see the module docstring)."""
    b, t, m, p = cfg["batch"], cfg["seq"], cfg["mem"], cfg["num_predict"]
    d, hd, di, n, v = cfg["d_model"], cfg["n_head"] * cfg["d_head"], cfg["d_inner"], cfg["n_layer"], cfg["vocab"]
    k = m + t

    def stream(rows: int) -> float:  # query projection, 3 score/value terms over K keys, output, feed-forward
        return 2 * b * rows * (d * hd + 3 * k * hd + hd * d + 2 * d * di)

    # keys|values over K rows: forward + weight gradient over K rows + input gradient for the T new rows only
    kv = 2 * (2 * b * k * d * 2 * hd) + 2 * b * t * d * 2 * hd
    pos = 2 * (2 * (k + t) * d * hd)  # forward + weight gradient (the sinusoids need none)
    per_layer = kv + pos + 3 * stream(p) + 3 * stream(t)
    # the last layer's content stream feeds only ``out.hidden``, not the loss: forward only
    return n * per_layer - 2 * stream(t) + 3 * 2 * b * p * d * v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=sorted(SIZES), default="base")
    parser.add_argument("--n-layer", type=int, default=None, help="override the number of layers")
    args = parser.parse_args()
    cfg = dict(SIZES[args.config], **({"n_layer": args.n_layer} if args.n_layer else {}))
    print(" ".join(f"{k}={v}" for k, v in cfg.items()))
    print(f"matmul FLOPs per training step: {analytic_flops(cfg) / 1e9:.1f} G "
          f"({analytic_flops(cfg) / (cfg['batch'] * cfg['seq']) / 1e6:.1f} M per token)")


if __name__ == "__main__":
    main()
