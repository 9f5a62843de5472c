"""Time the language-modelling data layer: mini build + first tokenisation, then the cached (memory-mapped) load,
and reader throughput on a synthetic corpus scaled up from the minis.

    python experiments/perf/lm_data_load.py [--scale-tokens 5000000] [--datasets wikitext103,ptb,...]

Prints CPU seconds per step (process time: stable on a shared machine) and tokens/s; the cached load is reported as a ratio to the first load.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from genlab.data.lm import readers as R
from genlab.data.lm.corpora import DATASETS, load_lm_corpus


def time_minis(names: list[str], cache: Path) -> None:
    print(f"{'dataset':<12} {'vocab':>7} {'train':>10} {'build+tokenise s':>17} {'cached load s':>14} {'ratio':>8}")
    for name in names:
        t0 = time.process_time()
        corpus = load_lm_corpus(name, "mini", cache_dir=cache)
        first = time.process_time() - t0
        t0 = time.process_time()
        again = load_lm_corpus(name, "mini", cache_dir=cache)
        int(again.splits["train"][-1])  # touch the memory map
        cached = time.process_time() - t0
        print(f"{name:<12} {len(corpus.vocab):>7} {len(corpus.splits['train']):>10} {first:>17.2f} {cached:>14.4f}"
              f" {first / cached:>7.0f}x")


def time_word_reader(n_tokens: int, root: Path) -> None:
    """Zipf-distributed words in WikiText layout: the per-token cost of counting and encoding."""
    rng = np.random.default_rng(0)
    words = np.array([f"w{i}" for i in range(50_000)])
    toks = words[np.minimum(rng.zipf(1.2, size=n_tokens), 50_000) - 1]
    cuts = np.cumsum(rng.integers(0, 150, size=n_tokens // 50))
    cuts = cuts[cuts < n_tokens]
    lines = [" " + " ".join(part) + " \n" for part in np.split(toks, cuts)]
    for split in R.SPLITS:
        (root / f"wiki.{split}.tokens").write_text("".join(lines if split == "train" else lines[:200]))
    t0 = time.process_time()
    _, streams = R.read_wikitext(root)
    splits = {s: R.materialize(ids) for s, ids in streams.items()}  # the ids stream in pieces: encode them all
    dt = time.process_time() - t0
    print(f"word reader: {len(splits['train']):,} tokens in {dt:.2f} s = {len(splits['train']) / dt / 1e6:.2f} M tokens/s")


def time_byte_reader(n_bytes: int, root: Path) -> None:
    """enwik8 layout: prepare (bytes -> decimal text) and parse back, both vectorised."""
    import zipfile

    data = np.random.default_rng(0).integers(0, 256, size=n_bytes).astype(np.uint8).tobytes()
    with zipfile.ZipFile(root / "enwik8.zip", "w") as z:
        z.writestr("enwik8", data)
    t0 = time.process_time()
    R.prepare_enwik8(root, n_test=n_bytes // 20)
    prep = time.process_time() - t0
    t0 = time.process_time()
    _, streams = R.read_enwik8(root)
    for ids in streams.values():
        R.materialize(ids)  # the ids stream in pieces: encode them all
    read = time.process_time() - t0
    print(f"enwik8 format: prepare {n_bytes / prep / 1e6:.1f} MB/s, read {n_bytes / read / 1e6:.1f} M bytes/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--scale-tokens", type=int, default=5_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        time_minis(args.datasets.split(","), tmp / "cache")
        (tmp / "wt").mkdir()
        time_word_reader(args.scale_tokens, tmp / "wt")
        (tmp / "e8").mkdir()
        time_byte_reader(4 * args.scale_tokens, tmp / "e8")


if __name__ == "__main__":
    main()
