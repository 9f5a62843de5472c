"""What training a SentencePiece tokenizer costs (``data.tokenizer=null``), and what its sample bound buys.

Writes synthetic paragraphs (Zipf words, ~100 words a line, as pretraining shards) of each ``--mb`` size, then trains
XLNet's unigram model (``--model-type bpe``: GPT's BPE) on each in a fresh process, through
``SentencePieceTokenizer.train`` with the sample bound at ``--bound-mb`` (default: the shipped
``MAX_TRAINING_BYTES``), and prints CPU seconds, peak RSS and the pieces per byte of held-out paragraphs (lower:
a vocabulary that fits the text better). Text under the bound is trained on whole, so ``--bound-mb`` above the
sizes gives the unbounded cost; a size over it trains on a sample of ~``--bound-mb``.

    python experiments/perf/tokenizer_training.py --mb 5.4,21.6,40 --bound-mb 100      # memory grows with the text
    python experiments/perf/tokenizer_training.py --mb 10.8,40 --bound-mb 5.4          # ... not with the bound
    python experiments/perf/tokenizer_training.py --mb 10,20,40 --bound-mb 100         # pieces per held-out byte
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = """
import json, resource, sys, time
from pathlib import Path
from genlab.data.tokenizers.gpt_bpe import train_gpt_bpe
from genlab.data.tokenizers.sentencepiece import SentencePieceTokenizer
from genlab.data.tokenizers.xlnet_pieces import train_tokenizer
text, out, vocab, kind, bound, held = sys.argv[1:7]
train = SentencePieceTokenizer.train.__func__
SentencePieceTokenizer.train = classmethod(lambda cls, *a, **k: train(cls, *a, **k, max_bytes=int(bound)))
c0 = time.process_time()
if kind == "unigram":
    model = train_tokenizer([Path(text)], Path(out) / "spm", int(vocab))
else:
    model = train_gpt_bpe([Path(text)], Path(out) / "spm.model", int(vocab)).model_file
cpu = time.process_time() - c0
lines = Path(held).read_text(encoding="utf-8").splitlines()
sp = SentencePieceTokenizer(model)
pieces = sum(len(ids) for ids in sp.encode(lines))
print(json.dumps({"cpu": cpu, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "pieces_per_byte": pieces / sum(len(line.encode()) for line in lines), "vocab": len(sp)}))
"""


def write_paragraphs(path: Path, n_bytes: int, seed: int) -> None:
    """Lines of ~100 words (five ~20-word sentences) over one 100k-word Zipf vocabulary (the same for every seed)."""
    from corpus_prep import Words, _prose

    words = Words(100_000, 5.5, seed=3)
    words.rng = np.random.default_rng(seed)  # the same words, other draws
    text = _prose(words)
    with open(path, "w", encoding="utf-8") as f:
        written = 0
        while written < n_bytes:
            line = " ".join(text(20) for _ in range(5)) + "\n"
            f.write(line)
            written += len(line.encode())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", default="5.4,21.6,40", help="comma-separated text sizes in MB")
    ap.add_argument("--bound-mb", type=float, default=None, help="the sample bound (default: MAX_TRAINING_BYTES)")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--model-type", choices=("unigram", "bpe"), default="unigram")
    ap.add_argument("--workdir", default=None, help="keeps the synthetic text between runs (default: a temp dir)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))  # corpus_prep's Zipf words
    from genlab.data.tokenizers.sentencepiece import MAX_TRAINING_BYTES

    bound = int(args.bound_mb * 1e6) if args.bound_mb else MAX_TRAINING_BYTES
    work = Path(args.workdir or tempfile.mkdtemp(prefix="genlab-tokenizer-training-"))
    work.mkdir(parents=True, exist_ok=True)
    held = work / "held_out.txt"
    if not held.is_file():
        write_paragraphs(held, 2_000_000, seed=1)
    print(f"{args.model_type} {args.vocab} pieces, sample bound {bound / 1e6:g} MB")
    print(f"{'text MB':>8} {'trained on MB':>13} {'cpu s':>7} {'peak RSS MB':>11} {'pieces/held-out byte':>20}")
    for mb in (float(x) for x in args.mb.split(",")):
        text = work / f"text_{mb:g}mb.txt"
        if not text.is_file():
            write_paragraphs(text, int(mb * 1e6), seed=0)
        out = Path(tempfile.mkdtemp(dir=work, prefix="model-"))
        run = subprocess.run([sys.executable, "-c", CHILD, str(text), str(out), str(args.vocab), args.model_type,
                              str(bound), str(held)], capture_output=True, text=True)
        if run.returncode:
            raise SystemExit(f"training on {text} failed\n{run.stderr[-3000:]}")
        r = json.loads(run.stdout.strip().splitlines()[-1])
        size = text.stat().st_size
        print(f"{size / 1e6:>8.1f} {min(size, bound) / 1e6:>13.1f} {r['cpu']:>7.1f} {r['rss_mb']:>11.0f} "
              f"{r['pieces_per_byte']:>20.4f}", flush=True)


if __name__ == "__main__":
    main()
