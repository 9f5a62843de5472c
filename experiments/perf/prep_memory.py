"""Cost of preparing a pretraining corpus: peak memory, time and disk against the size of one input file.

Writes synthetic BooksCorpus-style files (one sentence per line, an empty line between documents, Zipf-distributed
words) of each ``--sizes-mb``, trains one small SentencePiece model on a 2 MB sample, then tokenises each file in a
fresh process through ``load_pretrain_corpus`` (the path every XLNet/BERT/Funnel preset takes; GPT's shares
``tokenize_split``). Prints per size: wall and CPU seconds (and of it the preparing process's own), MB/s, peak
RSS of the preparing process and of its tokenising workers, cache bytes per input byte, and the peak-RSS ratio to
the smallest size (flat = bounded).

    python experiments/perf/prep_memory.py --sizes-mb 30,100,300 [--num-proc 1] [--workdir /tmp/prep]

``--squad-mb 30,300`` measures the SQuAD-format JSON reader instead (XLNet/BERT/Funnel SQuAD, GDAN): a synthetic
file of each size is read in a fresh process by streaming its articles (``squad_articles``, what every reader does;
the process keeps only a count), by ``read_squad`` without the parse tree (what a training file costs: its flat
examples) and, as the reference, by ``json.load`` of the whole file (the reader before streaming).
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
main_cpu = time.process_time() - c0  # the preparing process alone: the part more workers do not divide
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": main_cpu + kids.ru_utime + kids.ru_stime,
                  "main_cpu": main_cpu, "rss_mb": own.ru_maxrss / 1024, "worker_rss_mb": kids.ru_maxrss / 1024,
                  "tokens": len(corpus.splits["train"])}))
"""

SQUAD_CHILD = """
import json, resource, sys, time
from genlab.data.finetune.squad import read_squad, squad_articles
path, how = sys.argv[1], sys.argv[2]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # after the imports (torch: ~0.4 GB)
t0 = time.process_time()
if how == "stream":
    n = sum(len(ex) for _, ex in squad_articles(path))
elif how == "read_squad":
    n = len(read_squad(path, keep_data=False)[1])
else:
    with open(path, encoding="utf-8") as f:
        n = sum(len(qa) for a in json.load(f)["data"] for p in a["paragraphs"] for qa in [p["qas"]])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"cpu": time.process_time() - t0, "rss_mb": peak, "extra_mb": peak - base, "questions": n}))
"""


def write_squad(path: Path, n_bytes: int, seed: int = 0) -> None:
    """SQuAD v2.0 layout: articles of 40 paragraphs (~700 bytes each) with 5 questions each, answers at their
    offsets; 16 article texts repeated under fresh ids, titles and paragraph numbers (so every paragraph is
    distinct), written one article at a time."""
    rng = np.random.default_rng(seed)
    words = ["".join(rng.choice(list("etaoinshrdlucmfwyp"), rng.integers(2, 9))) for _ in range(5000)]
    templates = []
    for _ in range(16):
        paras = []
        for p in range(40):
            context = "@@@@@@ " + " ".join(rng.choice(words, 110))  # the article number: distinct paragraphs
            qas = []
            for q in range(5):
                start = context.rfind(" ", 0, int(rng.integers(8, len(context) - 10))) + 1
                qas.append({"id": f"@-{p}-{q}", "question": " ".join(rng.choice(words, 10)) + "?",
                            "is_impossible": False,
                            "answers": [{"text": context[start:context.find(" ", start)], "answer_start": start}]})
            paras.append({"context": context, "qas": qas})
        templates.append(json.dumps({"title": "@", "paragraphs": paras}))
    written, a = 0, 0
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"version": "v2.0", "data": [')
        while written < n_bytes:
            block = ("," if a else "") + templates[a % 16].replace("@@@@@@", f"{a:06d}").replace('"@', f'"{a}')
            f.write(block)
            written, a = written + len(block), a + 1
        f.write("]}")


def squad_main(sizes_mb: list[int], work: Path) -> None:
    print(f"SQuAD-format JSON; peak RSS of a fresh process reading one file, above its RSS after the imports; "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'input MB':>9} {'questions':>10} {'stream MB':>10} {'read_squad MB':>14} {'json.load MB':>13} "
          f"{'stream cpu s':>13} {'json.load cpu s':>16} {'base RSS MB':>12}")
    for mb in sizes_mb:
        path = work / f"squad_{mb}mb.json"
        if not path.is_file():
            write_squad(path, mb * 1_000_000)
        r = {}
        for how in ("stream", "read_squad", "json.load"):
            out = subprocess.run([sys.executable, "-c", SQUAD_CHILD, str(path), how], check=True,
                                 capture_output=True, text=True)
            r[how] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{path.stat().st_size / 1e6:>9.0f} {r['stream']['questions']:>10,} {r['stream']['extra_mb']:>10.0f} "
              f"{r['read_squad']['extra_mb']:>14.0f} {r['json.load']['extra_mb']:>13.0f} {r['stream']['cpu']:>13.1f} "
              f"{r['json.load']['cpu']:>16.1f} {r['stream']['rss_mb'] - r['stream']['extra_mb']:>12.0f}")


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
    ap.add_argument("--squad-mb", default=None, help="measure the SQuAD JSON reader at these sizes instead")
    args = ap.parse_args()
    from genlab.data.tokenizers.xlnet_pieces import train_tokenizer

    work = Path(args.workdir or tempfile.mkdtemp(prefix="genlab-prep-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.squad_mb:
        squad_main([int(s) for s in args.squad_mb.split(",")], work)
        return
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
    print(f"{'input MB':>9} {'tokens':>11} {'wall s':>8} {'cpu s':>8} {'of it main':>10} {'MB/s':>6} "
          f"{'peak RSS MB':>12} {'worker RSS MB':>14} {'cache/input':>12} {'RSS ratio':>10}")
    for r in rows:
        print(f"{r['mb']:>9.0f} {r['tokens']:>11,} {r['wall']:>8.1f} {r['cpu']:>8.1f} {r['main_cpu']:>10.1f} "
              f"{r['mb'] / r['wall']:>6.2f} {r['rss_mb']:>12.0f} {r['worker_rss_mb']:>14.0f} {r['disk']:>12.2f} "
              f"{r['rss_mb'] / rows[0]['rss_mb']:>10.2f}")


if __name__ == "__main__":
    main()
