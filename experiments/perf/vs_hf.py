"""Ours vs Hugging Face for the HF-anchored families: BERT, GPT-1 and Funnel-Transformer, one training step each.

Per family, HF's pretraining model (``BertForPreTraining``, ``OpenAIGPTLMHeadModel``, ``FunnelForMaskedLM``) is
built from a config at base dimensions (``--n-layer`` layers; Funnel: blocks 1-1-1 and its 2-layer decoder) and
our model gets the same weights through ``genlab.interop``. One step is what each side's user runs: ours the
task's ``training_step`` (MLM + NSP, the GPT LM loss, the Funnel MLM), HF the model called with its labels;
then backward and the same Adam. Both sides take turns step by step in this process (order flipped every step),
in fp32 and under bf16 autocast (``trainer.precision=bf16-mixed``), so they share the machine's load. Before
timing, the first loss of each side is compared (dropout off: the same function must give the same number).

Steps are timed in the process's CPU time as well as on the wall clock: on a shared machine the wall clock counts
the other processes' turns, CPU time only this one's work, so the CPU-time ratio is the one to read under load.
Prints per family and precision ``<family> ours/HF: X`` (CPU-time ratio, > 1 = ours faster; the wall-clock ratio
beside it), each side's step times and, from one more step per side with every ATen op timed in CPU time (a
``TorchDispatchMode``, so also meaningful under load), its share in GEMMs (mm/addmm/bmm/baddbmm) with the largest
non-GEMM ops, which is where a gap that is not matmul work shows; ``--shapes N`` lists the N costliest
(op, input shapes) rows of each side, where the GEMMs of the two sides can be compared shape by shape.

    python experiments/perf/vs_hf.py --threads 1 --steps 3
    python experiments/perf/vs_hf.py --families gpt --precisions fp32 --steps 5 --top 12 --shapes 20
    python experiments/perf/vs_hf.py --families gpt bert --precisions bf16-mixed --sdpa-reference
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections import Counter, defaultdict
from functools import partial

import torch
from torch.utils._python_dispatch import TorchDispatchMode

GEMM_OPS = {"mm", "addmm", "bmm", "baddbmm", "_addmm_activation", "addbmm"}
VOCAB = {"bert": 30_522, "gpt": 40_478, "funnel": 30_522}


# ------------------------------------------------------------------------------------------------ the pairs
def build_pair(family: str, n_layer: int, dropout: float):
    """(our task, HF model), same weights; HF's random init mapped into ours by genlab.interop."""
    import transformers

    from genlab.tasks.funnel_pretrain import FunnelMLMTask
    from genlab.tasks.gpt import GPTPretrainTask
    from genlab.tasks.pretrain import MaskedLMTask

    sgd = partial(torch.optim.SGD, lr=0.0)  # the tasks want a factory; the step below uses its own Adam
    torch.manual_seed(0)
    if family == "bert":
        from genlab.interop.hf_bert import config_from_hf, load_hf_state_dict
        from genlab.models.bert import BertForPretraining

        cfg = transformers.BertConfig(vocab_size=VOCAB[family], num_hidden_layers=n_layer, hidden_dropout_prob=dropout,
                                      attention_probs_dropout_prob=dropout)
        hf = transformers.BertForPreTraining(cfg)
        ours = BertForPretraining(**config_from_hf(cfg.to_dict()))
        load_hf_state_dict(ours, hf.state_dict())
        return MaskedLMTask(ours, sgd, nsp_weight=1.0), hf
    if family == "gpt":
        from genlab.interop.hf_gpt import config_from_hf, load_hf_state_dict
        from genlab.models.gpt import GPTLMHeadModel

        cfg = transformers.OpenAIGPTConfig(vocab_size=VOCAB[family], n_layer=n_layer, resid_pdrop=dropout,
                                           embd_pdrop=dropout, attn_pdrop=dropout)
        hf = transformers.OpenAIGPTLMHeadModel(cfg)
        ours = GPTLMHeadModel(**config_from_hf(cfg.to_dict()))
        load_hf_state_dict(ours, hf.state_dict())
        return GPTPretrainTask(ours, sgd), hf
    from genlab.interop.hf_funnel import config_from_hf, load_hf_state_dict
    from genlab.models.funnel_pretraining import FunnelForMaskedLM

    cfg = transformers.FunnelConfig(vocab_size=VOCAB[family], block_sizes=[1, 1, 1], hidden_dropout=dropout,
                                    attention_dropout=dropout, activation_dropout=0.0)
    hf = transformers.FunnelForMaskedLM(cfg)
    config = {**cfg.to_dict(), "architectures": ["FunnelForMaskedLM"]}
    ours = FunnelForMaskedLM(**config_from_hf(config), mlm_transform=False)  # HF's head: one tied projection
    load_hf_state_dict(ours, hf.state_dict())
    return FunnelMLMTask(ours, sgd), hf


def make_batch(family: str, batch: int, seq: int) -> dict:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, VOCAB[family], (batch, seq), generator=g)
    if family == "gpt":
        return {"input_ids": ids, "lm_mask": torch.ones_like(ids)}
    labels = torch.full_like(ids, -100)
    sel = torch.rand(batch, seq, generator=g) < 0.15  # BERT's 15% of positions predicted
    labels[sel] = ids[sel]
    ids = ids.masked_fill(sel, 4)  # the input shows a mask token where a label is predicted
    types = torch.zeros_like(ids)
    types[:, seq // 2:] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": torch.ones_like(ids), "labels": labels,
            "nsp_label": torch.randint(0, 2, (batch,), generator=g)}


def hf_loss(family: str, model, batch: dict) -> torch.Tensor:
    if family == "gpt":
        return model(batch["input_ids"], labels=batch["input_ids"]).loss
    kw = dict(attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"], labels=batch["labels"])
    if family == "bert":
        kw["next_sentence_label"] = batch["nsp_label"]
    return model(batch["input_ids"], **kw).loss


def sdpa_path(loss_fn):
    """``loss_fn`` with BERT's/GPT-1's attention on SDPA even where ``genlab.nn.attention.attend_heads`` takes the
    bf16 score chain (bf16 + dropout on the CPU): the reference for that choice."""
    import genlab.nn.attention as attention

    def run():
        kept, attention.LOW_PRECISION = attention.LOW_PRECISION, ()
        try:
            return loss_fn()
        finally:
            attention.LOW_PRECISION = kept
    return run


def stepper(loss_fn, module: torch.nn.Module, bf16: bool):
    opt = torch.optim.Adam(module.parameters(), lr=1e-4)

    def step() -> tuple[float, float]:
        """One step: (wall seconds, CPU seconds)."""
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return time.perf_counter() - t0, time.process_time() - c0
    return step


# ------------------------------------------------------------------------------------------------ measuring
class OpCpuTimes(TorchDispatchMode):
    """CPU seconds of every ATen op that reaches the dispatcher (forward, backward and optimiser), by (op name,
    input shapes). An op's time includes the ops it calls inside its kernel, which the mode does not see again."""

    def __init__(self):
        super().__init__()
        self.seconds: defaultdict[tuple[str, tuple], float] = defaultdict(float)
        self.calls: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        c0 = time.process_time()
        out = func(*args, **(kwargs or {}))
        key = (func.overloadpacket.__name__, tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor)))
        self.seconds[key] += time.process_time() - c0
        self.calls[key] += 1
        return out


def op_breakdown(step, top: int, shapes: int) -> tuple[float, list[tuple[str, float]], list[str]]:
    """One step with every op timed: its GEMM share of the ops' CPU time, the ``top`` largest non-GEMM ops (name,
    ms) and the ``shapes`` largest (op, shapes) rows as lines."""
    ops = OpCpuTimes()
    with ops:
        step()
    by_name: defaultdict[str, float] = defaultdict(float)
    for (name, _), sec in ops.seconds.items():
        by_name[name] += sec * 1e3
    gemm = sum(ms for name, ms in by_name.items() if name in GEMM_OPS)
    rest = sorted(((n, ms) for n, ms in by_name.items() if n not in GEMM_OPS), key=lambda r: -r[1])[:top]
    rows = sorted(ops.seconds.items(), key=lambda kv: -kv[1])[:shapes]
    lines = [f"{sec * 1e3:9.1f} ms {ops.calls[key]:4d} x {key[0]} {list(key[1])}" for key, sec in rows]
    return gemm / sum(by_name.values()), rest, lines


def run_family(family: str, args: argparse.Namespace) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        task, hf = build_pair(family, args.n_layer, 0.0)
        batch = make_batch(family, args.batch, args.seq)
        with torch.no_grad():
            ours_first = float(task.eval().training_step(batch, 0))
            hf_first = float(hf_loss(family, hf.eval(), batch))
        if args.dropout:
            task, hf = build_pair(family, args.n_layer, args.dropout)
    print(f"{family}: {sum(p.numel() for p in hf.parameters()) / 1e6:.1f}M parameters, batch {args.batch} x "
          f"{args.seq}, first loss ours {ours_first:.6f} HF {hf_first:.6f} (|diff| {abs(ours_first - hf_first):.1e}), "
          f"HF attention {getattr(hf.config, '_attn_implementation', 'eager')}", flush=True)
    tokens = args.batch * args.seq
    for precision in args.precisions:
        bf16 = precision == "bf16-mixed"
        task.train()
        hf.train()
        sides = {"ours": stepper(lambda: task.training_step(batch, 0), task, bf16),
                 "HF": stepper(lambda: hf_loss(family, hf, batch), hf, bf16)}
        if args.sdpa_reference and bf16 and family != "funnel":
            sides["ours, SDPA"] = stepper(sdpa_path(lambda: task.training_step(batch, 0)), task, bf16)
        wall, cpu = ({k: [] for k in sides} for _ in range(2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(args.warmup + args.steps):
                for name in (list(sides) if i % 2 == 0 else list(reversed(sides))):
                    dt, ct = sides[name]()
                    if i >= args.warmup:
                        wall[name].append(dt)
                        cpu[name].append(ct)
            profiles = {name: op_breakdown(step, args.top, args.shapes) for name, step in sides.items()}
        med = {k: statistics.median(v) for k, v in cpu.items()}
        med_wall = {k: statistics.median(v) for k, v in wall.items()}
        for name in sides:
            share, rest, rows = profiles[name]
            others = ", ".join(f"{n} {ms:.0f}" for n, ms in rest)
            print(f"  {precision:10s} {name:10s}: {tokens / med[name]:8.1f} tokens per CPU second, step CPU "
                  f"{med[name]:.3f} s (range {min(cpu[name]):.3f}-{max(cpu[name]):.3f}), wall {med_wall[name]:.3f} s; "
                  f"GEMMs {share:.1%} of the ops' CPU time; largest other ops (ms): {others}", flush=True)
            for line in rows:
                print(f"      {line}")
        print(f"{family} ours/HF: {med['HF'] / med['ours']:.2f} ({precision}, CPU time; wall clock "
              f"{med_wall['HF'] / med_wall['ours']:.2f})", flush=True)
        if "ours, SDPA" in med:
            print(f"{family} bf16 score chain / SDPA: {med['ours, SDPA'] / med['ours']:.2f} (CPU time)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", choices=list(VOCAB), default=list(VOCAB))
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16-mixed"], default=["fp32", "bf16-mixed"])
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--dropout", type=float, default=0.1, help="while timing (the loss check runs without)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--top", type=int, default=6, help="non-GEMM ops listed per side")
    parser.add_argument("--shapes", type=int, default=0, help="costliest (op, input shapes) rows listed per side")
    parser.add_argument("--sdpa-reference", action="store_true",
                        help="bf16: also time ours with SDPA where the bf16 score chain runs (BERT, GPT-1)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from genlab.cli.host_memory import reuse_freed_host_memory

    malloc = "freed memory reused" if reuse_freed_host_memory() else "glibc defaults"
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} thread(s), "
          f"host memory: {malloc}")
    for family in args.families:
        run_family(family, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
