"""Training cost of the MoS head and of the AWD-LSTM regularisers, PTB sizes, on CPU (Dai's thesis App. A, Table A.13).

    python experiments/perf/mos_cost.py [--batch 12] [--bptt 70] [--steps 5] [--experts 5,10,15] [--threads N]

Times one training step (forward, NLL + AR/TAR, backward, clip, SGD step) per model, same batch, same machine:
  1. AWD-LSTM-Softmax (PTB: emsize 400, 1150/1150/400) vs AWD-LSTM-MoS-K (PTB: 280, 960/960/620) for each K;
     the thesis' "bs" column (same batch size, one GPU) gives 1.2x / 1.6x / 1.9x for K = 5 / 10 / 15.
  2. Our AWD-LSTM (weight drop, locked/embedding dropout, AR/TAR; Softmax head) vs a plain nn.LSTM model of the
     same sizes without any regulariser: the cost of the regularisers.
Prints ratios against the Softmax run of the same process (no absolute claims: CPU timings are machine-bound).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from genlab.models.awd_lstm import AWDLSTM
from genlab.tasks.awd_lm import ar_tar

V = 10_000
SOFTMAX = dict(emsize=400, nhid=1150, nhidlast=400, head="softmax", n_experts=1)
MOS = dict(emsize=280, nhid=960, nhidlast=620, head="mos")


class PlainLSTMLM(nn.Module):
    """Same sizes as the AWD-LSTM Softmax model: three nn.LSTM layers, tied softmax, no regularisation."""

    def __init__(self, emsize: int, nhid: int, nhidlast: int):
        super().__init__()
        self.encoder = nn.Embedding(V, emsize)
        sizes = [emsize, nhid, nhid, nhidlast]
        self.rnns = nn.ModuleList(nn.LSTM(sizes[i], sizes[i + 1], batch_first=True) for i in range(3))
        self.decoder = nn.Linear(emsize, V)
        self.decoder.weight = self.encoder.weight

    def loss(self, x, y):
        h = self.encoder(x)
        for rnn in self.rnns:
            h, _ = rnn(h)
        return nn.functional.cross_entropy(self.decoder(h).flatten(0, 1), y.reshape(-1))


def time_steps(loss_fn, params, steps: int) -> float:
    opt = torch.optim.SGD(params, lr=1.0, weight_decay=1.2e-6)
    times = []
    for i in range(steps + 1):  # the first step warms up allocators and kernels
        start = time.perf_counter()
        opt.zero_grad()
        loss_fn().backward()
        torch.nn.utils.clip_grad_norm_(params, 0.25)
        opt.step()
        if i:
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]  # median


def awd_loss(model, x, y):
    def fn():
        out = model.run(x, y)
        return out.nll.mean() + ar_tar(out.output, out.raw_output, 2.0, 1.0)

    return fn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--bptt", type=int, default=70)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--experts", default="5,10,15")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randint(V, (args.batch, args.bptt))
    y = torch.randint(V, (args.batch, args.bptt))
    softmax = AWDLSTM(V, **SOFTMAX)
    base = time_steps(awd_loss(softmax, x, y), list(softmax.parameters()), args.steps)
    print(f"batch {args.batch} x bptt {args.bptt}, median of {args.steps} steps, {torch.get_num_threads()} threads")
    print("| model | params | s/step | ratio | seed (bs) |\n|---|---|---|---|---|")
    print(f"| AWD-LSTM Softmax | {sum(p.numel() for p in softmax.parameters()):,} | {base:.3f} | 1.00x | 1x |")
    seed = {5: "1.2x", 10: "1.6x", 15: "1.9x"}
    for k in map(int, args.experts.split(",")):
        mos = AWDLSTM(V, n_experts=k, **MOS)
        t = time_steps(awd_loss(mos, x, y), list(mos.parameters()), args.steps)
        print(f"| AWD-LSTM MoS-{k} | {sum(p.numel() for p in mos.parameters()):,} | {t:.3f} | {t / base:.2f}x | "
              f"{seed.get(k, '-')} |")
    plain = PlainLSTMLM(400, 1150, 400)
    t = time_steps(lambda: plain.loss(x, y), list(plain.parameters()), args.steps)
    print(f"| plain nn.LSTM, same sizes, no regularisers | {sum(p.numel() for p in plain.parameters()):,} | "
          f"{t:.3f} | {t / base:.2f}x | - |")
    print(f"regulariser cost (AWD-LSTM / plain): {base / t:.2f}x")


if __name__ == "__main__":
    main()
