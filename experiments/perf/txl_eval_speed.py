"""Evaluation speed: vanilla Transformer (sliding window) vs Transformer-XL (state reuse), Yang's thesis §2.1.4,
Table 2.10.

Per-token wall time at evaluation for one small model on CPU, at several attention lengths l:
- vanilla (Al-Rfou, attn_type=abs_learned, mem_len=0): for every token, a forward over the previous l tokens,
  scoring only the last position (sliding window, stride 1);
- Transformer-XL (attn_type=rel): segments of ``--tgt-len`` tokens with a full memory of l cached states.
The speed-up should grow with l (the seed reports 363x at l=800 ... 1,874x at l=3,800 on a GPU with a
12-layer model); the target for this CPU model is a speed-up of at least 0.3 x l. No assertions: it prints.

    python experiments/perf/txl_eval_speed.py                      # l = 128, 256, 512, 1024
    python experiments/perf/txl_eval_speed.py --lengths 128 256 --threads 2

It then prints the training throughput (tokens/s, forward + backward + Adam step with clipping) of the default
job, ``experiment=txl_mini``, on its own data (``--train-steps`` steps after 3 warm-up steps).
"""

from __future__ import annotations

import argparse
import time

import torch

from genlab.models.transformer_xl import TransformerXL

CLOCK = [time.process_time]  # CPU time of this process: robust on a shared machine (with --threads 1)


def build(attn_type: str, mem_len: int, max_len: int, args: argparse.Namespace) -> TransformerXL:
    torch.manual_seed(0)
    return TransformerXL(
        args.vocab, n_layer=args.n_layer, d_model=args.d_model, n_head=args.n_head,
        d_head=args.d_model // args.n_head, d_inner=4 * args.d_model, dropout=0.0, dropatt=0.0,
        mem_len=mem_len, attn_type=attn_type, max_len=max_len, same_length=mem_len > 0,
    ).eval()


@torch.inference_mode()
def vanilla_per_token(length: int, stream: torch.Tensor, args: argparse.Namespace) -> float:
    model = build("abs_learned", 0, length, args)
    model(stream[:, :length], stream[:, 1:length + 1])  # warm-up
    start = CLOCK[0]()
    for t in range(args.vanilla_tokens):
        window = stream[:, t:t + length]
        target = stream[:, t + 1:t + length + 1]
        out = model.hidden_states(window)[0][:, -1:]  # only the last position is scored
        model.crit(out.reshape(-1, args.d_model), target[:, -1])
    return (CLOCK[0]() - start) / args.vanilla_tokens


@torch.inference_mode()
def txl_per_token(length: int, stream: torch.Tensor, args: argparse.Namespace) -> float:
    model = build("rel", length, length, args)
    L = args.tgt_len
    mem, pos = None, 0
    for _ in range(-(-length // L) + 1):  # fill the memory first
        mem = model(stream[:, pos:pos + L], stream[:, pos + 1:pos + L + 1], mem).memory
        pos += L
    start = CLOCK[0]()
    for _ in range(args.txl_segments):
        mem = model(stream[:, pos:pos + L], stream[:, pos + 1:pos + L + 1], mem).memory
        pos += L
    return (CLOCK[0]() - start) / (args.txl_segments * L)


def txl_mini_training_throughput(steps: int) -> tuple[float, int]:
    """Tokens/s of txl_mini's real model, task and data (the objects train.py builds), timed on ``CLOCK``."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    from genlab import assemble

    conf = Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=txl_mini", "paths.output_dir=/tmp/genlab-perf"])
    datamodule = assemble.build_data(cfg.data)
    task = assemble.build_task(cfg, datamodule)
    optimizer = task.configure_optimizers()["optimizer"]
    batches, memory, tokens, start = iter(datamodule.train_dataloader()), None, 0, 0.0
    for step in range(steps + 3):
        if step == 3:
            tokens, start = 0, CLOCK[0]()
        batch = next(batches)
        out = task(batch["input_ids"], batch["target"], memory)
        memory = [m.detach() for m in out.memory]
        out.nll.mean().backward()
        torch.nn.utils.clip_grad_norm_(task.parameters(), cfg.trainer.gradient_clip_val)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += batch["target"].numel()
    return tokens / (CLOCK[0]() - start), task.model.num_parameters()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024])
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--vocab", type=int, default=204, help="enwik8-sized character vocabulary")
    p.add_argument("--tgt-len", type=int, default=128, help="TXL evaluation segment length")
    p.add_argument("--vanilla-tokens", type=int, default=32, help="tokens timed for the vanilla model")
    p.add_argument("--txl-segments", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                   help="cpu: process CPU time (default; fair on a shared machine); wall: perf_counter")
    p.add_argument("--train-steps", type=int, default=20, help="timed txl_mini training steps (0: skip)")
    args = p.parse_args()
    CLOCK[0] = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    need = max(args.lengths) * 2 + args.tgt_len * (args.txl_segments + 2) + args.vanilla_tokens + 2
    stream = torch.randint(0, args.vocab, (1, need), generator=torch.Generator().manual_seed(0))
    print(f"model: {args.n_layer} layers, d={args.d_model}, {args.n_head} heads, V={args.vocab}; batch 1; "
          f"TXL segment {args.tgt_len}; {args.threads} thread(s); {args.clock} clock")
    print("| attn len | vanilla ms/token | TXL ms/token | speed-up | speed-up / attn len | target (>= 0.3) |")
    print("|---:|---:|---:|---:|---:|:---:|")
    for length in args.lengths:
        v = vanilla_per_token(length, stream, args)
        x = txl_per_token(length, stream, args)
        ratio = v / x
        print(f"| {length} | {v * 1e3:.3f} | {x * 1e3:.4f} | {ratio:.1f}x | {ratio / length:.2f} | "
              f"{'yes' if ratio >= 0.3 * length else 'no'} |", flush=True)
    if args.train_steps > 0:
        rate, params = txl_mini_training_throughput(args.train_steps)
        print(f"\ntxl_mini training ({params:,} parameters, {args.threads} thread(s), {args.clock} clock): "
              f"{rate:,.0f} tokens/s")


if __name__ == "__main__":
    main()
