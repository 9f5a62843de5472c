"""Training-step throughput of genlab Transformer-XL vs Hugging Face TransfoXLLMHeadModel 4.35 (same weights).

HF removed TransfoXL after 4.35, so the reference runs in a separate venv (default /tmp/venv435: torch +
transformers==4.35.2) as a subprocess; without it the script says so and times ours alone. Our model is built
in HF's evaluation profile (``config_from_hf``: zero initial memory, PyTorch same_length) and its weights are
exported with ``export_hf_state_dict``, so both compute the same function. One step = forward over a segment
with the carried memory + adaptive-softmax NLL over the T-1 positions both predict + backward + Adam (by default
each side's own: ours fused, as the LM task configures it; HF per-tensor, torch.optim.Adam's CPU default;
``--ours-optimizer`` / ``--hf-optimizer`` set them alike to compare the models alone). The two
processes alternate step by step, and this process times a GEMM between the steps (same machine load for all
three). Two layer shapes:

- ``wt103``: WT103-base layers (d=410, 10 heads, d_inner=2100), vocabulary 10,000 with adaptive softmax,
  B=4, T=M=128: matmul-dominated (feed-forward and projections).
- ``enwik8``: enwik8-base layers (d=512, 8 heads, d_inner=2048), 204 characters (plain softmax), B=2,
  T=M=512: attention-dominated (scores over K=1024 keys).

Prints tokens/s, the ratio, peak RSS, the matmul FLOPs each implementation really ran (torch FlopCounterMode,
one step) and the GEMM floor: the matmul FLOPs a step needs (counted analytically: queries for new positions
only, the position term over K distances, the adaptive tails for the tokens that need them, x3 for backward)
divided by the measured GEMM rate. "floor / step" says how close each implementation is to pure-matmul time.
``--profile`` adds each implementation's top ops (torch.profiler, one extra step).

    python experiments/perf/txl_throughput.py --shape wt103 --steps 4
    python experiments/perf/txl_throughput.py --shape enwik8 --steps 3 --profile
"""

from __future__ import annotations

import argparse
import itertools
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
from gemm_rate import gemm_rate, top_ops

OPTIMIZERS = ("fused", "per-tensor")
HF_PYTHON = os.environ.get("GENLAB_HF435_PYTHON", "/tmp/venv435/bin/python")
SHAPES = {
    "wt103": dict(d_model=410, n_head=10, d_head=41, d_inner=2100, vocab=10000, cutoffs=[2000, 5000], batch=4,
                  tgt_len=128),
    "enwik8": dict(d_model=512, n_head=8, d_head=64, d_inner=2048, vocab=204, cutoffs=[], batch=2, tgt_len=512),
}


def hf_config(args: argparse.Namespace) -> dict:
    """An HF TransfoXLConfig as a dict for the chosen layer shape (memory length = segment length)."""
    s = SHAPES[args.shape]
    return dict(vocab_size=s["vocab"], cutoffs=s["cutoffs"], d_model=s["d_model"], d_embed=s["d_model"],
                n_head=s["n_head"], d_head=s["d_head"], d_inner=s["d_inner"], n_layer=args.n_layer,
                mem_len=args.tgt_len, div_val=1, proj_share_all_but_first=True, untie_r=True, dropout=0.0,
                dropatt=0.0, same_length=False, clamp_len=-1, layer_norm_epsilon=1e-5)


# ----------------------------------------------------------------------------------- worker (either venv)
def worker(impl: str, folder: Path, threads: int, profile: bool, fused: bool) -> None:
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
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=fused)
    memory = None

    def step(ids: torch.Tensor) -> torch.Tensor:
        nonlocal memory
        if impl == "hf":  # HF predicts labels[:, 1:] from positions :-1 (T-1 targets)
            out = model(ids[:, :-1], mems=memory, labels=ids[:, :-1])
            loss, memory = out.losses.mean(), out.mems
        else:
            out = model(ids[:, :-1], target=ids[:, 1:], memory=memory)
            loss, memory = out.nll[:, :-1].mean(), out.memory
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() == "done":
            break
        i = int(line)
        reply = {}
        if i == 0:  # untimed first step: count its matmul FLOPs
            from torch.utils.flop_counter import FlopCounterMode

            with FlopCounterMode(display=False) as counter:
                loss = step(batches[0])
            reply["flops"] = counter.get_total_flops()
        else:
            t0 = time.perf_counter()
            loss = step(batches[i])
            reply["s"] = time.perf_counter() - t0
        reply["loss"] = loss.item()
        print(json.dumps(reply), flush=True)
    reply = {"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            step(batches[-1])
        reply["top_ops"] = top_ops(prof)
    print(json.dumps(reply), flush=True)


# ----------------------------------------------------------------------------------------------- driver
def floor_flops(cfg: dict, batches: list[torch.Tensor]) -> float:
    """Matmul FLOPs a training step needs, averaged over the timed batches: 3 x forward (forward, input and
    weight gradients), 2 x for products whose input needs no gradient (the detached memory, the sinusoids).

    Per layer: queries|keys|values for the T new rows, keys|values for the M memory rows (2 x), content,
    position and value terms over K = M + T keys (the position term against K distances), output projection,
    feed-forward; the position projection once per step (2 x). Output layer: the head (shortlist + cluster
    columns) for every predicted token and each tail bin for the tokens whose target is in it (exact for these
    batches)."""
    d, hd, di, n = cfg["d_model"], cfg["n_head"] * cfg["d_head"], cfg["d_inner"], cfg["n_layer"]
    b, t, m = batches[0].shape[0], batches[0].shape[1] - 1, cfg["mem_len"]
    k = t + m
    per_layer = 2 * b * (t * d * 3 * hd + 3 * t * k * hd + t * hd * d + 2 * t * d * di)
    weight_grad_only = 2 * b * m * d * 2 * hd + 2 * k * d * hd
    bounds = [0, *cfg["cutoffs"], cfg["vocab_size"]]
    heads = []
    for ids in batches:
        target = ids[:, 1:-1].reshape(-1)  # the T-1 positions both implementations score
        cols = float(target.numel() * (bounds[1] + len(cfg["cutoffs"])))
        for lo, hi in itertools.pairwise(bounds[1:]):
            cols += float(((target >= lo) & (target < hi)).sum()) * (hi - lo)
        heads.append(2 * d * cols)
    return 3 * (n * per_layer + statistics.mean(heads)) + 2 * n * weight_grad_only


def start(python: str, impl: str, folder: Path, threads: int, profile: bool, optimizer: str,
          system_malloc: bool) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if not system_malloc:  # both sides as train.py runs (genlab.cli.host_memory), through glibc's variables
        from genlab.cli.host_memory import LARGEST

        env.update(MALLOC_MMAP_THRESHOLD_=str(LARGEST), MALLOC_TRIM_THRESHOLD_=str(LARGEST))
    cmd = [python, __file__, "--worker", impl, "--folder", str(folder), "--threads", str(threads),
           f"--{impl}-optimizer", optimizer]
    proc = subprocess.Popen(cmd + (["--profile"] if profile else []), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
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
    p.add_argument("--shape", choices=sorted(SHAPES), default="wt103")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--batch", type=int, default=None, help="default: the shape's")
    p.add_argument("--tgt-len", type=int, default=None, help="segment and memory length; default: the shape's")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--profile", action="store_true", help="print each implementation's top ops for one step")
    p.add_argument("--ours-optimizer", choices=OPTIMIZERS, default="fused",
                   help="Adam for genlab: fused (default; the LM task's conf/task/lm.yaml) or per-tensor")
    p.add_argument("--hf-optimizer", choices=OPTIMIZERS, default="per-tensor",
                   help="Adam for HF: per-tensor (default; torch.optim.Adam's CPU default) or fused")
    p.add_argument("--system-malloc", action="store_true",
                   help="leave glibc's defaults in both workers; default: both as train.py runs (reuse_host_memory)")
    p.add_argument("--worker", choices=["ours", "hf"], help=argparse.SUPPRESS)
    p.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.folder, args.threads, args.profile,
               getattr(args, f"{args.worker}_optimizer") == "fused")
        return
    args.batch = args.batch or SHAPES[args.shape]["batch"]
    args.tgt_len = args.tgt_len or SHAPES[args.shape]["tgt_len"]

    from genlab.interop.hf_transfo_xl import config_from_hf, export_hf_state_dict
    from genlab.models.transformer_xl import TransformerXL

    cfg = hf_config(args)
    total = 1 + args.steps  # step 0: untimed, FLOP-counted
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, cfg["vocab_size"], (args.batch, args.tgt_len + 1), generator=g) for _ in range(total)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        torch.manual_seed(0)
        (folder / "config.json").write_text(json.dumps(cfg))
        torch.save(export_hf_state_dict(TransformerXL(**config_from_hf(cfg))), folder / "weights.pt")
        torch.save(batches, folder / "batches.pt")
        impls = {"ours": sys.executable}
        if Path(HF_PYTHON).is_file():
            impls["hf"] = HF_PYTHON
        else:
            print(f"HF 4.35 reference skipped: no python at {HF_PYTHON} (set GENLAB_HF435_PYTHON or create the venv:"
                  " python -m venv /tmp/venv435 && /tmp/venv435/bin/pip install torch transformers==4.35.2)")
        procs = {name: start(py, name, folder, args.threads, args.profile, getattr(args, f"{name}_optimizer"),
                             args.system_malloc)
                 for name, py in impls.items()}
        results = {name: [] for name in procs}
        rates = []
        for step in range(total):
            order = list(procs.items()) if step % 2 else list(reversed(procs.items()))
            for name, proc in order:
                results[name].append(ask(proc, str(step)))
            rates.append(gemm_rate(args.threads))
        final = {name: ask(proc, "done") for name, proc in procs.items()}
        for proc in procs.values():
            proc.wait()
    rate = statistics.median(rates)
    floor = floor_flops(cfg, batches[1:])
    tokens = args.batch * args.tgt_len
    print(f"TXL {args.shape} shape: n_layer={args.n_layer} d={cfg['d_model']} H={cfg['n_head']} "
          f"d_inner={cfg['d_inner']} vocab={cfg['vocab_size']} cutoffs={cfg['cutoffs']} B={args.batch} "
          f"T={args.tgt_len} M={args.tgt_len}, fp32 CPU, {args.threads} thread(s)/process, torch {torch.__version__}")
    print(f"Adam: ours {args.ours_optimizer}, HF {args.hf_optimizer}; host memory (both): "
          f"{'glibc defaults' if args.system_malloc else 'freed memory reused'}")
    print(f"GEMM rate {rate / 1e9:.1f} GFLOP/s (median of {len(rates)}, measured between the steps); matmul FLOPs "
          f"needed per step {floor / 1e9:.2f} G -> GEMM floor {floor / rate:.3f} s")
    speed = {}
    for name, res in results.items():
        step_s = statistics.median(r["s"] for r in res[1:])
        speed[name] = tokens / step_s
        print(f"{name:5s} {speed[name]:8.1f} tok/s  step {step_s:7.3f} s  floor/step {floor / rate / step_s:6.1%}  "
              f"counted matmul {res[0]['flops'] / 1e9:6.2f} GFLOP  peak RSS {final[name]['rss_mb']:6.0f} MB")
    if "hf" in results:
        diff = max(abs(a["loss"] - b["loss"]) for a, b in zip(results["ours"], results["hf"]))
        print(f"ours / HF: {speed['ours'] / speed['hf']:.2f}x tokens/s, "
              f"{final['ours']['rss_mb'] / final['hf']['rss_mb']:.2f}x peak RSS; "
              f"max |loss difference| over {total} steps {diff:.2e}")
    for name, res in final.items():
        if "top_ops" in res:
            print(f"top ops, {name} (one step, torch.profiler):\n{res['top_ops']}")


if __name__ == "__main__":
    main()
