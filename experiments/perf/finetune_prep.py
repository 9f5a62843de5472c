"""What preparing a finetuning set costs, first run against later runs (the encoded-text cache).

Writes a synthetic SQuAD v2.0-format training file of ``--mb`` MB (``prep_memory.write_squad``: distinct paragraphs
of ~110 words, 5 questions each; SQuAD 2.0's own train file is 40 MB, 130k questions) and a dev file a tenth its
size, trains one SentencePiece model on a 2 MB sample, then in fresh processes builds the training windows through
``SquadDataModule`` (setup + ``train_features``: read, tokenise every paragraph and question, align pieces to
characters, lay out the windows): once with an empty cache, then again with the cache it wrote. Prints wall and CPU
seconds, peak RSS, the cache's size on disk and the cold / warm ratio.

    python experiments/perf/finetune_prep.py [--mb 40] [--num-proc 1] [--workdir /tmp/ft]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prep_memory import write_squad

CHILD = """
import json, resource, sys, time
from genlab.data.finetune.squad import SquadDataModule
root, model, cache, procs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
t0, c0 = time.perf_counter(), time.process_time()
dm = SquadDataModule("2.0", path=root, cache_dir=cache, tokenizer=model, num_proc=procs)
dm.setup("fit")
feats = dm.train_features()
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0 + kids.ru_utime + kids.ru_stime,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "windows": len(feats.cls_index), "questions": len(dm._train_examples)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=40)
    ap.add_argument("--num-proc", type=int, default=1)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    from genlab.data.tokenizers.xlnet_pieces import train_tokenizer

    work = Path(args.workdir or tempfile.mkdtemp(prefix="genlab-ft-"))
    root = work / f"squad_{args.mb}mb"
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "train-v2.0.json").is_file():
        write_squad(root / "train-v2.0.json", args.mb * 1_000_000)
        write_squad(root / "dev-v2.0.json", args.mb * 100_000, seed=1)
    sample = work / "sample.txt"
    if not sample.is_file():
        from genlab.data.finetune.squad import read_squad

        contexts = list(dict.fromkeys(e.context for e in read_squad(root / "dev-v2.0.json")[1]))
        sample.write_text("\n".join(contexts)[:2_000_000])
    model = work / "spm.model"
    if not model.is_file():
        train_tokenizer([sample], work / "spm", vocab_size=8000)
    cache = work / f"cache_{args.mb}mb_{args.num_proc}p_{time.time_ns()}"
    rows = {}
    for run in ("cold", "warm"):
        out = subprocess.run([sys.executable, "-c", CHILD, str(root), str(model), str(cache), str(args.num_proc)],
                             check=True, capture_output=True, text=True)
        rows[run] = json.loads(out.stdout.strip().splitlines()[-1])
    disk = sum(p.stat().st_size for p in (cache / "encoded").rglob("*") if p.is_file())
    size = (root / "train-v2.0.json").stat().st_size + (root / "dev-v2.0.json").stat().st_size
    print(f"SQuAD 2.0 format, {size / 1e6:.0f} MB (train + dev), {rows['cold']['questions']:,} training questions, "
          f"{rows['cold']['windows']:,} windows; num_proc={args.num_proc}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'run':>5} {'wall s':>8} {'cpu s':>8} {'peak RSS MB':>12}")
    for run, r in rows.items():
        print(f"{run:>5} {r['wall']:>8.1f} {r['cpu']:>8.1f} {r['rss_mb']:>12.0f}")
    print(f"encoded-text cache on disk: {disk / 1e6:.1f} MB ({disk / size:.2f} bytes per input byte); "
          f"cold / warm CPU: {rows['cold']['cpu'] / rows['warm']['cpu']:.1f}x")


if __name__ == "__main__":
    main()
