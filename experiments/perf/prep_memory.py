"""Cost of preparing a pretraining corpus: peak memory, time and disk against the size of one input file.

Writes synthetic BooksCorpus-style files (one sentence per line, an empty line between documents, Zipf-distributed
words) of each ``--sizes-mb``, trains one small SentencePiece model on a 2 MB sample, then tokenises each file in a
fresh process through ``load_pretrain_corpus`` (the path every XLNet/BERT/Funnel preset takes; GPT's shares
``tokenize_split``). Prints per size: wall and CPU seconds, MB/s, peak RSS of the preparing process and of its
tokenising workers, cache bytes per input byte, and the peak-RSS ratio to the smallest size (flat = bounded).

    python experiments/perf/prep_memory.py --sizes-mb 30,100,300 [--num-proc 1] [--workdir /tmp/prep]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHILD = """
import json, resource, sys, time
from genlab.data.pretrain.corpus import load_pretrain_corpus
root, model, cache, procs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
t0, c0 = time.perf_counter(), time.process_time()
corpus = load_pretrain_corpus("text", root, cache, train_glob="*.txt", tokenizer=model, num_proc=procs)
own = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0 + kids.ru_utime + kids.ru_stime,
                  "rss_mb": own.ru_maxrss / 1024, "worker_rss_mb": kids.ru_maxrss / 1024,
                  "tokens": len(corpus.splits["train"])}))
"""


def write_corpus(path: Path, n_bytes: int, seed: int = 0) -> None:
    """Zipf words from a 50k-word vocabulary, 5-30 words a sentence, 5-60 sentences a document."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    words = ["".join(rng.choice(letters, rng.integers(2, 10))) for _ in range(50_000)]
    rank = np.minimum(rng.zipf(1.2, size=1 << 22), len(words)) - 1
    written, k = 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while written < n_bytes:
            lines = []
            for _ in range(rng.integers(5, 60)):
                n = int(rng.integers(5, 30))
                idx = rank[(k + np.arange(n)) % len(rank)]
                k += n
                lines.append(" ".join(words[i] for i in idx).capitalize() + ".")
            block = "\n".join(lines) + "\n\n"
            f.write(block)
            written += len(block)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes-mb", default="30,100,300")
    ap.add_argument("--num-proc", type=int, default=1)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    from genlab.data.tokenizers.xlnet_pieces import train_tokenizer

    work = Path(args.workdir or tempfile.mkdtemp(prefix="genlab-prep-"))
    work.mkdir(parents=True, exist_ok=True)
    sample = work / "sample.txt"
    write_corpus(sample, 2_000_000, seed=1)
    model = train_tokenizer([sample], work / "spm", vocab_size=8000)
    rows = []
    for mb in (int(s) for s in args.sizes_mb.split(",")):
        root = work / f"corpus_{mb}mb"
        root.mkdir(exist_ok=True)
        if not (root / "books.txt").is_file():
            write_corpus(root / "books.txt", mb * 1_000_000)
        cache = work / f"cache_{mb}mb_{args.num_proc}p"
        out = subprocess.run([sys.executable, "-c", CHILD, str(root), str(model), str(cache), str(args.num_proc)],
                             check=True, capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        size = (root / "books.txt").stat().st_size
        r.update(mb=size / 1e6, disk=sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) / size)
        rows.append(r)
    print(f"num_proc={args.num_proc}; synthetic single-file corpus; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'input MB':>9} {'tokens':>11} {'wall s':>8} {'cpu s':>8} {'MB/s':>6} {'peak RSS MB':>12} "
          f"{'worker RSS MB':>14} {'cache/input':>12} {'RSS ratio':>10}")
    for r in rows:
        print(f"{r['mb']:>9.0f} {r['tokens']:>11,} {r['wall']:>8.1f} {r['cpu']:>8.1f} {r['mb'] / r['wall']:>6.2f} "
              f"{r['rss_mb']:>12.0f} {r['worker_rss_mb']:>14.0f} {r['disk']:>12.2f} "
              f"{r['rss_mb'] / rows[0]['rss_mb']:>10.2f}")


if __name__ == "__main__":
    main()
