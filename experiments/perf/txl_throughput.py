"""Training-step throughput of genlab Transformer-XL vs Hugging Face TransfoXLLMHeadModel 4.35 (same weights).

HF removed TransfoXL after 4.35, so the reference runs in a separate venv (default /tmp/venv435: torch +
transformers==4.35.2) as a subprocess; without it the script says so and times ours alone. Our model is built
in HF's evaluation profile (``config_from_hf``: zero initial memory, PyTorch same_length) and its weights are
exported with ``export_hf_state_dict``, so both compute the same function. One step = forward over a segment
with the carried memory + adaptive-softmax NLL over the T-1 positions both predict + backward + Adam. The two
processes alternate step by step (same machine load for both). Prints tokens/s, the ratio, peak RSS, achieved
FLOP/s against a measured matmul peak (MFU) and the max |loss difference| per step.

    python experiments/perf/txl_throughput.py                    # 4 layers of the WT103-base shape
    python experiments/perf/txl_throughput.py --n-layer 16 --steps 3 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HF_PYTHON = os.environ.get("GENLAB_HF435_PYTHON", "/tmp/venv435/bin/python")


def hf_config(args: argparse.Namespace) -> dict:
    """An HF TransfoXLConfig as a dict: WT103-base layer shape, a smaller adaptive vocabulary."""
    return dict(vocab_size=args.vocab, cutoffs=[args.vocab // 5, args.vocab // 2], d_model=410, d_embed=410,
                n_head=10, d_head=41, d_inner=2100, n_layer=args.n_layer, mem_len=args.tgt_len, div_val=1,
                proj_share_all_but_first=True, untie_r=True, dropout=0.0, dropatt=0.0, same_length=False,
                clamp_len=-1, layer_norm_epsilon=1e-5)


# ----------------------------------------------------------------------------------- worker (either venv)
def worker(impl: str, folder: Path, threads: int) -> None:
    """Lock-step loop: one training step per line on stdin, one JSON line (loss, seconds) on stdout."""
    torch.set_num_threads(threads)
    cfg = json.loads((folder / "config.json").read_text())
    state = torch.load(folder / "weights.pt", weights_only=True)
    batches = torch.load(folder / "batches.pt", weights_only=True)
    if impl == "hf":
        import warnings

        warnings.filterwarnings("ignore")
        from transformers import TransfoXLConfig, TransfoXLLMHeadModel

        model = TransfoXLLMHeadModel(TransfoXLConfig(**cfg))
        model.load_state_dict(state, strict=True)
    else:
        from genlab.interop.hf_transfo_xl import config_from_hf, load_hf_state_dict
        from genlab.models.transformer_xl import TransformerXL

        model = TransformerXL(**config_from_hf(cfg))
        load_hf_state_dict(model, state)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    memory = None
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() == "done":
            break
        ids = batches[int(line)]
        t0 = time.perf_counter()
        if impl == "hf":  # HF predicts labels[:, 1:] from positions :-1 (T-1 targets)
            out = model(ids[:, :-1], mems=memory, labels=ids[:, :-1])
            loss, memory = out.losses.mean(), out.mems
        else:
            out = model(ids[:, :-1], target=ids[:, 1:], memory=memory)
            loss, memory = out.nll[:, :-1].mean(), out.memory
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(json.dumps({"loss": loss.item(), "s": time.perf_counter() - t0}), flush=True)
    print(json.dumps({"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)


# ----------------------------------------------------------------------------------------------- driver
def step_flops(cfg: dict, batch: int, tgt_len: int) -> float:
    """Matmul FLOPs of one training step (3 x forward): projections, both score terms, values, FFN, softmax."""
    d, hd, di, n = cfg["d_model"], cfg["n_head"] * cfg["d_head"], cfg["d_inner"], cfg["n_layer"]
    t, k = tgt_len, tgt_len + cfg["mem_len"]
    per_layer = 2 * batch * (k * d * 3 * hd + k * d * hd / batch + 2 * t * k * hd + t * k * hd + t * hd * d
                             + 2 * t * d * di)
    head = 2 * batch * t * d * cfg["vocab_size"]  # upper bound: every token reaching every tail cluster
    return 3 * (n * per_layer + head)


def matmul_peak(threads: int, n: int = 1536, reps: int = 5) -> float:
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min((lambda t0: (a @ b, time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(reps))
    return 2 * n**3 / best


def start(python: str, impl: str, folder: Path, threads: int) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    proc = subprocess.Popen([python, __file__, "--worker", impl, "--folder", str(folder), "--threads", str(threads)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    json.loads(proc.stdout.readline())  # ready
    return proc


def ask(proc: subprocess.Popen, msg: str) -> dict:
    proc.stdin.write(msg + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"worker {proc.args[2:4]} died (exit {proc.wait()})")
    return json.loads(line)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--tgt-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--worker", choices=["ours", "hf"], help=argparse.SUPPRESS)
    p.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.folder, args.threads)
        return

    from genlab.interop.hf_transfo_xl import config_from_hf, export_hf_state_dict
    from genlab.models.transformer_xl import TransformerXL

    cfg = hf_config(args)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        torch.manual_seed(0)
        (folder / "config.json").write_text(json.dumps(cfg))
        torch.save(export_hf_state_dict(TransformerXL(**config_from_hf(cfg))), folder / "weights.pt")
        g = torch.Generator().manual_seed(1)
        total = args.warmup + args.steps
        torch.save([torch.randint(0, args.vocab, (args.batch, args.tgt_len + 1), generator=g) for _ in range(total)],
                   folder / "batches.pt")
        impls = {"ours": sys.executable}
        if Path(HF_PYTHON).is_file():
            impls["hf"] = HF_PYTHON
        else:
            print(f"HF 4.35 reference skipped: no python at {HF_PYTHON} (set GENLAB_HF435_PYTHON or create the venv:"
                  " python -m venv /tmp/venv435 && /tmp/venv435/bin/pip install torch transformers==4.35.2)")
        procs = {name: start(py, name, folder, args.threads) for name, py in impls.items()}
        results = {name: [] for name in procs}
        for step in range(total):
            for name, proc in procs.items():
                results[name].append(ask(proc, str(step)))
        rss = {name: ask(proc, "done")["rss_mb"] for name, proc in procs.items()}
        for proc in procs.values():
            proc.wait()
    peak = matmul_peak(args.threads)
    tokens = args.batch * args.tgt_len
    flops = step_flops(cfg, args.batch, args.tgt_len)
    print(f"TXL n_layer={args.n_layer} d=410 H=10 d_inner=2100 vocab={args.vocab} B={args.batch} T={args.tgt_len} "
          f"M={args.tgt_len}, fp32 CPU, {args.threads} thread(s)/process, torch {torch.__version__}; "
          f"measured matmul peak {peak / 1e9:.1f} GFLOP/s")
    speed = {}
    for name, res in results.items():
        step_s = statistics.median(r["s"] for r in res[args.warmup:])
        speed[name] = tokens / step_s
        print(f"{name:5s} {speed[name]:9.1f} tok/s  step {step_s:7.3f} s  peak RSS {rss[name]:7.0f} MB  "
              f"MFU {flops / step_s / peak:6.1%}")
    if "hf" in results:
        diff = max(abs(a["loss"] - b["loss"]) for a, b in zip(results["ours"], results["hf"]))
        print(f"ours / HF: {speed['ours'] / speed['hf']:.2f}x tokens/s, {rss['ours'] / rss['hf']:.2f}x peak RSS; "
              f"max |loss difference| over {total} steps {diff:.2e}")


if __name__ == "__main__":
    main()
