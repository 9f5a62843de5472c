"""Tokens/s one DataLoader worker delivers for every pretraining family, and the workers one GPU needs.

    taskset -c 0 python experiments/perf/loader_throughput.py [--tokens 100000000] [--families xlnet,bert,...]
        [--gpu-tokens-per-s 150000] [--batches 30] [--host-masks]

A synthetic token cache (int32 token memmap + uint8 sentence ids, sentences of 5-45 pieces, 32,000-piece
vocabulary, 60 % word starts) is written to a temporary folder and read through the families' own datasets with a
real ``DataLoader(batch_size=None, num_workers=1, persistent_workers=True)``, the way the data modules build it.
Each family runs at its paper preset's per-device batch: XLNet / DAE / BERT / Funnel 64 x 512, GPT 64 x 512
(gpt_books), Transformer-XL 60 x 150 (txl_wt103_base), MoS 15 x ~70 (mos_wt2, variable BPTT).

Tokens/s counts input tokens per batch (batch x sequence) after two warm-up batches: over wall time (what one
worker delivered on this machine, at its load) and per CPU second of the worker (/proc; what a worker with a core of
its own delivers, independent of load; 10 ms clock ticks, so coarse for the light families).
``workers/GPU`` = ceil(gpu rate / the per-CPU-second rate). The GPU rate is an
assumption (``--gpu-tokens-per-s``, default 150k tokens/s: XLNet-Base two-stream training at 512 in bf16 on one
H100; BERT/Funnel/GPT/TXL train faster per token, so pass their own rate to size those).

``--host-masks`` is the reference: the PLM worker also builds the dense perm_mask / target_mapping (the former
construction, ~80 MB per 64 x 512 batch through the worker queue); the script prints the ratio of the two.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from torch.utils.data import DataLoader, Dataset

from genlab.data.lm.bptt import BPTTWindows, VariableBPTTSampler
from genlab.data.lm.streams import ChunkedStreamSegments, ResumableSequentialSampler
from genlab.data.pretrain.corpus import TokenStream
from genlab.data.pretrain.datamodule import PassSampler, PretrainBatches
from genlab.data.pretrain.gpt_windows import RandomWindows
from genlab.data.pretrain.mlm_examples import MaskingConfig
from genlab.data.pretrain.xlnet_examples import SpanConfig, XLNetDataConfig

VOCAB = 32_000
FAMILIES = ("xlnet", "dae", "bert", "funnel", "gpt", "txl", "mos")


def synthetic_cache(folder: Path, n_tokens: int) -> tuple[TokenStream, np.ndarray]:
    """Zipf-like ordinary pieces (ids >= 9) and alternating sentence ids, as memmaps like the token cache."""
    rng = np.random.default_rng(0)
    tokens = np.lib.format.open_memmap(folder / "tokens.npy", "w+", np.int32, (n_tokens,))
    sent = np.lib.format.open_memmap(folder / "sent_ids.npy", "w+", np.uint8, (n_tokens,))
    step = 10_000_000
    for lo in range(0, n_tokens, step):
        n = min(step, n_tokens - lo)
        tokens[lo:lo + n] = 9 + np.minimum(rng.zipf(1.1, n), VOCAB - 9) - 1
        lengths = rng.integers(5, 46, n // 5 + 1)
        sent[lo:lo + n] = (np.repeat(np.arange(len(lengths)), lengths)[:n] + lo) % 2
    tokens.flush(), sent.flush()
    del tokens, sent
    read = lambda name: np.load(folder / name, mmap_mode="r")  # noqa: E731
    word_start = rng.random(VOCAB) < 0.6
    word_start[:9] = True
    return TokenStream(read("tokens.npy"), read("sent_ids.npy")), word_start


class WithHostMasks(Dataset):
    """The former PLM loader: dense masks built in the worker and shipped through the queue."""

    def __init__(self, data: PretrainBatches):
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, item):
        from genlab.data.pretrain.permutation import plm_dense_inputs

        batch = self.data[item]
        return batch if "perm_mask" in batch else {**batch, **plm_dense_inputs(batch)}


def family(name: str, stream: TokenStream, word_start: np.ndarray):
    """(dataset, sampler, tokens per batch) at the family's paper preset batch."""
    if name in ("xlnet", "dae", "bert", "funnel"):
        objective = {"xlnet": "plm", "dae": "dae"}.get(name, "mlm")
        cfg = (XLNetDataConfig(512, 256, 1, 0, bi_data=False) if objective == "mlm"  # what the data module sets
               else XLNetDataConfig(512, 256, 256, 85, bi_data=True, span=SpanConfig()))
        masking = MaskingConfig(num_targets=85, random_ids="any") if name == "funnel" else MaskingConfig()
        funnel = dict(cls_token_type=2, tail_pad=4) if name == "funnel" else {}
        data = PretrainBatches(stream, objective, 64, cfg, masking, word_start, VOCAB, seed=0, nsp=name == "bert",
                               **funnel)
        return data, PassSampler(len(data)), 64 * 512
    tokens = np.asarray(stream.tokens)
    if name == "gpt":
        data = RandomWindows(stream.tokens, 64, 512, seed=0)
        return data, PassSampler(len(data)), 64 * 512
    if name == "txl":
        data = ChunkedStreamSegments(tokens, 60, 150)
        return data, ResumableSequentialSampler(len(data)), 60 * 150
    if name == "mos":
        rows = tokens[: len(tokens) // 15 * 15].reshape(15, -1)
        return BPTTWindows(rows, 70), VariableBPTTSampler(rows.shape[1], 70, 20, seed=0), 15 * 70
    raise SystemExit(f"unknown family {name!r}; choose from {FAMILIES}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), to rate the worker independently of machine load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tokens_per_s(data: Dataset, sampler, per_batch: int, batches: int) -> tuple[float, float]:
    """(tokens per wall second, tokens per CPU second of the worker) over ``batches`` batches."""
    loader = DataLoader(data, batch_size=None, sampler=sampler, num_workers=1, persistent_workers=True)
    it = iter(loader)
    for _ in range(2):  # worker start-up and the first pages of the memmaps
        next(it)
    pid = it._workers[0].pid
    n, t0, c0 = 0, time.perf_counter(), cpu_seconds(pid)
    for _ in range(batches):
        batch = next(it)
        n += batch["input_ids"].numel() if "input_ids" in batch else per_batch
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
    return n / wall, n / max(cpu, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=100_000_000, help="size of the synthetic cache")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--gpu-tokens-per-s", type=float, default=150_000)
    parser.add_argument("--host-masks", action="store_true", help="also time the former PLM loader (reference)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stream, word_start = synthetic_cache(Path(tmp), args.tokens)
        print(f"synthetic cache: {args.tokens:,} tokens; GPU rate assumed {args.gpu_tokens_per_s:,.0f} tokens/s")
        for name in args.families.split(","):
            data, sampler, per_batch = family(name, stream, word_start)
            rate, cpu_rate = tokens_per_s(data, sampler, per_batch, args.batches)
            need = math.ceil(args.gpu_tokens_per_s / cpu_rate)  # each worker with a core of its own
            print(f"{name} tokens/s per worker: {rate:,.0f}  (per worker CPU second: {cpu_rate:,.0f}; "
                  f"workers/GPU at {args.gpu_tokens_per_s:,.0f} tokens/s: {need})")
            if name == "xlnet" and args.host_masks:
                data, sampler, per_batch = family(name, stream, word_start)
                ref, cpu_ref = tokens_per_s(WithHostMasks(data), sampler, per_batch, max(5, args.batches // 3))
                print(f"xlnet with host-built dense masks (reference) tokens/s per worker: {ref:,.0f}  (per worker "
                      f"CPU second: {cpu_ref:,.0f}); integers only: {rate / ref:.1f}x wall, {cpu_rate / cpu_ref:.1f}x CPU")


if __name__ == "__main__":
    main()
