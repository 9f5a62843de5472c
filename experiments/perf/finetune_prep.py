"""What preparing a finetuning set costs, first run against later runs (the encoded-text cache), and whether its
memory stays flat as the data grows.

``--dataset amazon2`` (document classification; GLUE, SNLI/SciTail and the GPT layouts share its path) writes a
synthetic Amazon-2 ``train.csv`` of each ``--mb`` size (``"label","title","body"`` rows, reviews of 40-200 words)
and a ``test.csv`` a tenth its size, trains one SentencePiece model on a 2 MB sample, then in fresh processes runs
``ClassificationDataModule(max_seq_len=512)``: setup (stream, tokenise, write the memory-mapped entry) and 200
training batches of 32 laid out from it, once with an empty cache and once from the cache. Prints per size and run
wall and CPU seconds, peak RSS, the peak-RSS ratio to the smallest size (flat = bounded; the laid-out
``[N, 512]`` arrays this replaced grew 6 KB per example), and after the batches the anonymous memory and the
file-backed pages (the memory-mapped cache pages the batches touched: shared with DataLoader workers, evictable).

    python experiments/perf/finetune_prep.py --dataset amazon2 --mb 20,80 [--num-proc 1] [--workdir /tmp/ft]
        [--before /path/to/reference/src]

``--before`` adds a cold run of another checkout's code (e.g. the commit before streaming) on the same files, and
prints its peak RSS over this code's.

``--dataset squad`` (the default) writes a synthetic SQuAD v2.0-format training file of each ``--mb`` size
(``prep_memory.write_squad``: distinct paragraphs of ~110 words, 5 questions each; SQuAD 2.0's own train file is 40 MB,
130k questions) and a dev file a tenth its size, trains one SentencePiece model on a 2 MB sample, then in fresh
processes runs ``SquadDataModule(max_seq_len=512)``: setup and ``train_features`` (stream the questions, tokenise
them and their paragraphs, align pieces to characters, write the memory-mapped entry, number the windows) and 200
training batches of 32 laid out from it, cold and warm, with the same columns as ``amazon2`` plus the windows and
the entry's size on disk (the dev file's included).

    python experiments/perf/finetune_prep.py --mb 20,80 [--num-proc 1] [--workdir /tmp/ft] [--before SRC]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from prep_memory import write_squad

CHILD = """
import json, resource, sys, time
from itertools import islice
from genlab.data.finetune.squad import SquadDataModule
root, model, cache, procs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
t0, c0 = time.perf_counter(), time.process_time()
dm = SquadDataModule("2.0", path=root, cache_dir=cache, tokenizer=model, num_proc=procs, batch_size=32)
dm.setup("fit")
feats = dm.train_features()
prep = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
batches = sum(1 for _ in islice(dm.train_dataloader(), 200))
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
status = dict(line.split(":", 1) for line in open("/proc/self/status") if line.startswith(("RssAnon", "RssFile")))
questions = len(feats.rows) if hasattr(feats, "rows") else len(dm._train_examples)  # --before: the older code
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0 + kids.ru_utime + kids.ru_stime,
                  "prep_rss_mb": prep, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "workers_rss_mb": kids.ru_maxrss / 1024, "windows": len(feats.cls_index), "questions": questions,
                  "batches": batches, **{k: int(v.split()[0]) / 1024 for k, v in status.items()}}))
"""


DOC_CHILD = """
import json, resource, sys, time
from itertools import islice
from genlab.data.finetune.datamodule import ClassificationDataModule
root, model, cache, procs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
t0, c0 = time.perf_counter(), time.process_time()
dm = ClassificationDataModule("amazon2", path=root, cache_dir=cache, tokenizer=model, max_seq_len=512, batch_size=32,
                              num_proc=procs)
dm.setup("fit")
prep = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
batches = sum(1 for _ in islice(dm.train_dataloader(), 200))
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
status = dict(line.split(":", 1) for line in open("/proc/self/status") if line.startswith(("RssAnon", "RssFile")))
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0 + kids.ru_utime + kids.ru_stime,
                  "prep_rss_mb": prep, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "workers_rss_mb": kids.ru_maxrss / 1024, "examples": len(dm.splits["train"]), "batches": batches,
                  **{k: int(v.split()[0]) / 1024 for k, v in status.items()}}))
"""


def write_reviews(path: Path, n_bytes: int, seed: int = 0) -> None:
    """Amazon-2 CSV layout: ``"label","title","body"``, labels 1/2, a title of 2-6 words, a body of 40-200 words."""
    rng = np.random.default_rng(seed)
    words = ["".join(rng.choice(list("etaoinshrdlucmfwypvbgk"), rng.integers(2, 9))) for _ in range(20000)]
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < n_bytes:
            rows = []
            for _ in range(1000):
                title = " ".join(words[i] for i in rng.integers(0, len(words), rng.integers(2, 7)))
                body = " ".join(words[i] for i in rng.integers(0, len(words), rng.integers(40, 201)))
                rows.append(f'"{rng.integers(1, 3)}","{title}","{body}"\n')
            block = "".join(rows)
            f.write(block)
            written += len(block)


def runs_table(child: str, sizes_mb: list[int], roots: dict[int, Path], model: Path, work: Path, num_proc: int,
               before: str | None, row: Callable[[int, str, dict, Path, float], str]) -> None:
    """Per size a cold run, a warm one and with ``before`` a cold run of the reference code, each in a fresh process;
    ``row(mb, run, the child's JSON line, its cache folder, peak RSS / the smallest size's)`` formats each line."""
    first: dict[str, float] = {}
    for mb in sizes_mb:
        cache = work / f"cache_{roots[mb].name}_{num_proc}p_{time.time_ns()}"
        peak = {}
        for run in ("cold", "warm", *(("before",) if before else ())):
            env = {**os.environ, "PYTHONPATH": before} if run == "before" else None  # the reference code's src/
            where = cache.with_name(cache.name + "_before") if run == "before" else cache
            out = subprocess.run([sys.executable, "-c", child, str(roots[mb]), str(model), str(where), str(num_proc)],
                                 check=True, capture_output=True, text=True, env=env)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            first.setdefault(run, r["rss_mb"])
            peak[run] = r["rss_mb"]
            print(row(mb, run, r, where, r["rss_mb"] / first[run]), flush=True)
        if before:
            print(f"{'':>9} reference / this code, peak RSS of the first run: {peak['before'] / peak['cold']:.2f}x")


def synthetic_sets(work: Path, name: str, sizes_mb: list[int], write, train: str, held_out: str) -> dict[int, Path]:
    """One folder per size: a training file of that many MB and a held-out file a tenth of it (``write(path, bytes,
    seed=...)``); the held-out file is written last, so a half-written set is rewritten."""
    roots = {}
    for mb in sizes_mb:
        roots[mb] = root = work / f"{name}_{mb}mb"
        root.mkdir(parents=True, exist_ok=True)
        if not (root / held_out).is_file():
            write(root / train, mb * 1_000_000)
            write(root / held_out, mb * 100_000, seed=1)
    return roots


def reviews_main(sizes_mb: list[int], num_proc: int, work: Path, before: str | None) -> None:
    from genlab.data.tokenizers.xlnet_pieces import train_tokenizer

    model = work / "reviews_spm.model"
    roots = synthetic_sets(work, "amazon2", sizes_mb, write_reviews, "train.csv", "test.csv")
    if not model.is_file():
        sample = work / "reviews_sample.txt"
        sample.write_text((roots[sizes_mb[0]] / "test.csv").read_text()[:2_000_000])
        train_tokenizer([sample], work / "reviews_spm", vocab_size=8000)
    print(f"Amazon-2 CSV layout, max_seq_len 512, num_proc={num_proc}; setup + 200 training batches of 32 in a fresh "
          f"process; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'train MB':>9} {'examples':>10} {'run':>6} {'wall s':>7} {'cpu s':>7} {'setup RSS MB':>13} "
          f"{'peak RSS MB':>12} {'workers MB':>11} {'RSS ratio':>10} {'anon MB':>8} {'mapped MB':>10}")
    def row(mb: int, run: str, r: dict, cache: Path, ratio: float) -> str:
        return (f"{(roots[mb] / 'train.csv').stat().st_size / 1e6:>9.0f} {r['examples']:>10,} {run:>6} "
                f"{r['wall']:>7.1f} {r['cpu']:>7.1f} {r['prep_rss_mb']:>13.0f} {r['rss_mb']:>12.0f} "
                f"{r['workers_rss_mb']:>11.0f} {ratio:>10.2f} {r.get('RssAnon', 0):>8.0f} {r.get('RssFile', 0):>10.0f}")

    runs_table(DOC_CHILD, sizes_mb, roots, model, work, num_proc, before, row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", choices=("squad", "amazon2"), default="squad")
    ap.add_argument("--mb", default="40", help="size(s) of the training file in MB, comma-separated")
    ap.add_argument("--num-proc", type=int, default=1)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--before", default=None, metavar="SRC",
                    help="also run the reference code whose package lies under SRC (e.g. a checkout's src/)")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="genlab-ft-"))
    sizes = [int(x) for x in args.mb.split(",")]
    if args.dataset == "amazon2":
        reviews_main(sizes, args.num_proc, work, args.before)
        return
    squad_main(sizes, args.num_proc, work, args.before)


def squad_main(sizes_mb: list[int], num_proc: int, work: Path, before: str | None) -> None:
    from genlab.data.finetune.squad import read_squad
    from genlab.data.tokenizers.xlnet_pieces import train_tokenizer

    roots = synthetic_sets(work, "squad", sizes_mb, write_squad, "train-v2.0.json", "dev-v2.0.json")
    model = work / "spm.model"
    if not model.is_file():
        sample = work / "sample.txt"
        contexts = dict.fromkeys(e.context for e in read_squad(roots[sizes_mb[0]] / "dev-v2.0.json")[1])
        sample.write_text("\n".join(contexts)[:2_000_000])
        train_tokenizer([sample], work / "spm", vocab_size=8000)
    print(f"SQuAD 2.0 format, max_seq_len 512, num_proc={num_proc}; setup + training windows + 200 batches of 32 in a "
          f"fresh process; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'train MB':>9} {'questions':>10} {'windows':>8} {'run':>6} {'wall s':>7} {'cpu s':>7} {'setup RSS MB':>13} "
          f"{'peak RSS MB':>12} {'RSS ratio':>10} {'anon MB':>8} {'mapped MB':>10} {'cache MB':>9}")
    def row(mb: int, run: str, r: dict, cache: Path, ratio: float) -> str:
        disk = sum(p.stat().st_size for p in (cache / "encoded").rglob("*") if p.is_file())
        return (f"{(roots[mb] / 'train-v2.0.json').stat().st_size / 1e6:>9.0f} {r['questions']:>10,} "
                f"{r['windows']:>8,} {run:>6} {r['wall']:>7.1f} {r['cpu']:>7.1f} {r['prep_rss_mb']:>13.0f} "
                f"{r['rss_mb']:>12.0f} {ratio:>10.2f} {r.get('RssAnon', 0):>8.0f} {r.get('RssFile', 0):>10.0f} "
                f"{disk / 1e6:>9.0f}")

    runs_table(CHILD, sizes_mb, roots, model, work, num_proc, before, row)


if __name__ == "__main__":
    main()
