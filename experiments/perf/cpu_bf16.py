"""CPU bf16: fp32 vs bf16-mixed training speed of genlab Transformer-XL and XLNet, and ours vs HF XLNet in bf16.

For each case, in one process and one run: a training step (forward + loss + backward + Adam, fused by default as
the LM task configures it; ``--optimizer per-tensor`` for torch's CPU default, ``adamweightdecay`` for the
XLNet/BERT tasks') of the same model
from the same weights in fp32 and under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (what
``trainer.precision=bf16-mixed`` runs), alternating step by step, with a bf16 and an fp32 GEMM rate measured
between the steps (same machine load for everything). Prints per case:

- tokens/s in fp32 and in bf16-mixed and "bf16/fp32 speed ratio: X" (target >= 2.0, issue #30), next to the ratio
  of the two GEMM rates (about 2.2 on AVX-512 BF16 CPUs without AMX: the step's ratio for all-GEMM work);
- the bf16 GEMM rate measured in this run, and MFU of the bf16 step against it (and of the fp32 step against the
  fp32 rate): matmul FLOPs per step from the model's analytic count (TXL ``flops_per_token``, XLNet
  ``xlnet_step.analytic_flops``);
- the loss difference over the steps, max |bf16 - fp32| and max relative (the two runs train side by side, so
  this is the drift of the bf16 trajectory, not one step's rounding).

Cases: ``txl_wt103`` and ``txl_enwik8`` (the layer shapes of txl_throughput.py), ``xlnet_base`` (base dims,
xlnet_throughput.py's pretraining batch). With transformers installed, ours vs Hugging Face XLNetLMHeadModel,
both inside the same bf16 autocast: "ours/HF in bf16 autocast: X" (target >= 1.5).

    python experiments/perf/cpu_bf16.py --threads 1 --steps 4 --n-layer 4
    python experiments/perf/cpu_bf16.py --tiny --steps 2        # a smoke test: seconds, numbers meaningless
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from txl_throughput import SHAPES  # noqa: E402
from xlnet_step import SIZES, analytic_flops, make_batch  # noqa: E402
from xlnet_throughput import build, step_fn  # noqa: E402

from genlab.callbacks.throughput import measured_gemm_flops  # noqa: E402
from genlab.cli.host_memory import reuse_freed_host_memory  # noqa: E402
from genlab.tasks.layerwise_lr import AdamWeightDecay  # noqa: E402

TINY_TXL = dict(d_model=64, n_head=2, d_head=32, d_inner=128, batch=2, tgt_len=16)
TINY_VOCAB = {"txl_wt103": (400, [100, 200]), "txl_enwik8": (204, [])}


def gemm_rate(dtype: str, n: int) -> float:
    """A fresh measurement (the library's is cached once per process)."""
    return measured_gemm_flops.__wrapped__("cpu", n=n, seconds=0.05, dtype=dtype)


# ------------------------------------------------------------------------------------------------ the cases
class TXLCase:
    def __init__(self, shape: str, n_layer: int, tiny: bool) -> None:
        from genlab.models.transformer_xl import TransformerXL

        s = dict(SHAPES[shape.removeprefix("txl_")])
        if tiny:
            s.update(TINY_TXL, vocab=TINY_VOCAB[shape][0], cutoffs=TINY_VOCAB[shape][1])
        self.cfg = s
        torch.manual_seed(0)
        self.model = TransformerXL(s["vocab"], n_layer=n_layer, d_model=s["d_model"], n_head=s["n_head"],
                                   d_head=s["d_head"], d_inner=s["d_inner"], cutoffs=s["cutoffs"] or None,
                                   dropout=0.0, mem_len=s["tgt_len"])
        self.tokens = s["batch"] * s["tgt_len"]
        self.flops = self.model.flops_per_token(seq_len=s["tgt_len"]) * self.tokens
        g = torch.Generator().manual_seed(1)
        self.stream = torch.randint(0, s["vocab"], (s["batch"], 64 * s["tgt_len"] + 1), generator=g)

    def runner(self, model):
        t, memory = self.cfg["tgt_len"], None

        def step(i: int) -> torch.Tensor:
            nonlocal memory
            lo = (i % 64) * t
            out = model(self.stream[:, lo:lo + t], target=self.stream[:, lo + 1:lo + t + 1], memory=memory)
            memory = [m.detach() for m in out.memory]
            return out.nll.float().mean()
        return step


class XLNetCase:
    def __init__(self, n_layer: int, tiny: bool, folder: Path) -> None:
        from genlab.models.xlnet import XLNetLMHeadModel

        cfg = dict(SIZES["tiny" if tiny else "base"], n_layer=n_layer)
        self.cfg, self.weights = cfg, folder / "xlnet.pt"
        torch.manual_seed(0)
        dims = {k: cfg[k] for k in ("n_layer", "d_model", "n_head", "d_head", "d_inner")}
        torch.save(XLNetLMHeadModel(cfg["vocab"], **dims).state_dict(), self.weights)
        self.model = build("ours", cfg, self.weights)
        self.tokens = cfg["batch"] * cfg["seq"]
        self.flops = analytic_flops(cfg)
        self.batches = [make_batch(cfg, i) for i in range(4)]

    def hf_model(self):
        return build("hf", self.cfg, self.weights)

    def runner(self, model, impl: str = "ours"):
        b, d = self.cfg["batch"], self.cfg["d_model"]
        memory = [torch.zeros(b, self.cfg["mem"], d) for _ in range(self.cfg["n_layer"])]
        if impl == "hf":
            memory = [m.transpose(0, 1).contiguous() for m in memory]  # HF: [M, B, d]

        def step(i: int) -> torch.Tensor:
            nonlocal memory
            loss, new = step_fn(impl, model, self.batches[i % len(self.batches)], memory, self.cfg["reuse"])
            memory = [m.detach() for m in new]
            return loss
        return step


# ------------------------------------------------------------------------------------------------ timing
OPTIMIZERS = {  # --optimizer: name -> factory over the parameters
    "fused": lambda params: torch.optim.Adam(params, lr=1e-4, fused=True),  # the LM task's (conf/task/lm.yaml)
    "per-tensor": lambda params: torch.optim.Adam(params, lr=1e-4),  # torch's CPU default
    "adamweightdecay": lambda params: AdamWeightDecay(params, lr=1e-4, weight_decay=0.01),  # the PLM/MLM tasks'
}


def trainer(forward, model, bf16: bool, optimizer: str = "fused"):
    """One training step of ``model`` (its ``forward`` closure), under bf16 autocast or not: (loss, seconds)."""
    opt = OPTIMIZERS[optimizer](model.parameters())

    def step(i: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = forward(i)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item(), time.perf_counter() - t0
    return step


def side_by_side(steps: dict, n: int, warmup: int, gemm_n: int) -> tuple[dict, dict]:
    """Alternate the named steps (order flipped every step), a bf16 and an fp32 GEMM rate between them."""
    losses = {k: [] for k in steps}
    times = {k: [] for k in steps}
    rates = {"bf16": [], "fp32": []}
    for i in range(warmup + n):
        for name in (list(steps) if i % 2 == 0 else list(reversed(steps))):
            loss, dt = steps[name](i)
            losses[name].append(loss)
            if i >= warmup:
                times[name].append(dt)
        for dtype in rates:
            rates[dtype].append(gemm_rate(dtype, gemm_n))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"losses": losses, "step_s": med}, {k: statistics.median(v) for k, v in rates.items()}


def report(name: str, case, result: dict, rates: dict) -> dict:
    fp32, bf16 = result["step_s"]["fp32"], result["step_s"]["bf16"]
    lf, lb = result["losses"]["fp32"], result["losses"]["bf16"]
    diff = max(abs(a - b) for a, b in zip(lf, lb))
    rel = max(abs(a - b) / abs(a) for a, b in zip(lf, lb))
    print(f"\n[{name}] tokens/step {case.tokens}, matmul FLOPs/step {case.flops / 1e9:.2f} G")
    print(f"  fp32       {case.tokens / fp32:9.1f} tokens/s  step {fp32:.3f} s  MFU {case.flops / fp32 / rates['fp32']:.1%} "
          f"of the fp32 GEMM rate {rates['fp32'] / 1e9:.1f} GFLOP/s")
    print(f"  bf16-mixed {case.tokens / bf16:9.1f} tokens/s  step {bf16:.3f} s  MFU {case.flops / bf16 / rates['bf16']:.1%} "
          f"of the bf16 GEMM rate {rates['bf16'] / 1e9:.1f} GFLOP/s (measured in this run)")
    print(f"  bf16/fp32 speed ratio: {fp32 / bf16:.2f} (GEMM rates in this run: {rates['bf16'] / rates['fp32']:.2f}, "
          "what a step of GEMMs alone would reach)")
    print(f"  loss difference over {len(lf)} steps: max |bf16 - fp32| {diff:.4f}, max relative {rel:.2%}")
    return dict(ratio=fp32 / bf16, mfu_bf16=case.flops / bf16 / rates["bf16"], loss_diff=diff, loss_rel=rel)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="+", default=["txl_wt103", "txl_enwik8", "xlnet_base"],
                   choices=["txl_wt103", "txl_enwik8", "xlnet_base"])
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="fused",
                   help="for every run: fused Adam (default; the LM task's), per-tensor Adam (torch's CPU default) "
                        "or adamweightdecay (the XLNet/BERT tasks')")
    p.add_argument("--no-hf", action="store_true", help="skip ours vs HF XLNet in bf16 autocast")
    p.add_argument("--tiny", action="store_true", help="tiny dimensions: a smoke test, the numbers mean nothing")
    p.add_argument("--system-malloc", action="store_true",
                   help="leave glibc's defaults (train.py's reuse_host_memory=false); default: as train.py runs")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    malloc = "glibc defaults" if args.system_malloc or not reuse_freed_host_memory() else "freed memory reused"
    gemm_n = 256 if args.tiny else 1024
    print(f"torch {torch.__version__}, {args.threads} thread(s), CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, n_layer={args.n_layer}, steps={args.steps} (+{args.warmup}), "
          f"optimizer {args.optimizer}, host memory: {malloc}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases:
            case = TXLCase(name, args.n_layer, args.tiny) if name.startswith("txl") else \
                XLNetCase(args.n_layer, args.tiny, Path(tmp))
            initial = copy.deepcopy(case.model)  # the runs below train their models in place
            steps = {"fp32": trainer(case.runner(case.model), case.model, bf16=False, optimizer=args.optimizer)}
            twin = copy.deepcopy(initial)
            steps["bf16"] = trainer(case.runner(twin), twin, bf16=True, optimizer=args.optimizer)
            result, rates = side_by_side(steps, args.steps, args.warmup, gemm_n)
            report(name, case, result, rates)
            if name == "xlnet_base" and not args.no_hf:
                try:
                    hf = case.hf_model()
                except ImportError as missing:
                    print(f"  ours vs HF skipped: {missing}")
                    continue
                ours = copy.deepcopy(initial)  # HF's model is built from the same initial weights
                pair = {"ours": trainer(case.runner(ours), ours, bf16=True, optimizer=args.optimizer),
                        "hf": trainer(case.runner(hf, "hf"), hf, bf16=True, optimizer=args.optimizer)}
                res, _ = side_by_side(pair, args.steps, args.warmup, gemm_n)
                o, h = res["step_s"]["ours"], res["step_s"]["hf"]
                diff = max(abs(a - b) for a, b in zip(res["losses"]["ours"], res["losses"]["hf"]))
                print(f"  ours {case.tokens / o:.1f} vs HF {case.tokens / h:.1f} tokens/s, both in bf16 autocast; "
                      f"max |loss difference| {diff:.4f}")
                print(f"  ours/HF in bf16 autocast: {h / o:.2f}")


if __name__ == "__main__":
    main()
