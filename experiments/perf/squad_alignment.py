"""SQuAD char<->piece LCS alignment speed on the cloze SQuAD 2.0 mini (genlab.data.finetune.squad_align).

Prints, per paragraph, the time of (a) SentencePiece encoding, (b) our bit-parallel LCS alignment (DP + traceback + piece spans) and
(c) a plain-Python banded LCS DP (band |N-M|+16, the structure of the official preprocessing loop), and the
ratios, so the numbers compare on whatever machine runs it:

    OMP_NUM_THREADS=1 python experiments/perf/squad_alignment.py [--cache-dir DIR] [--n 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from genlab.data.finetune.squad import UNK_ID, SquadDataModule, read_squad
from genlab.data.finetune.squad_align import UNK_CHAR, align_pieces, raw_codes
from genlab.data.sources.tiers import locate


def python_banded_lcs(a: list[int], b: list[int], band: int) -> int:
    """Reference: the same banded DP with Python loops (length only; the traceback would add more)."""
    n, m = len(a), len(b)
    reach = abs(n - m) + band
    d = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        for j in range(max(1, i - reach), min(m, i + reach) + 1):
            d[i][j] = d[i - 1][j - 1] + 1 if a[i - 1] == b[j - 1] else max(d[i - 1][j], d[i][j - 1])
    return d[n][m]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    dm = SquadDataModule("2.0", source="mini", cache_dir=args.cache_dir, vocab_size=2000, max_seq_len=128,
                         doc_stride=64, max_query_length=48)
    dm.setup("fit")
    tok = dm.tokenizer
    root = locate(dm._spec(), "mini", None, dm.cache_dir)
    contexts = list(dict.fromkeys(e.context for e in read_squad(root / "train-v2.0.json")[1]))[: args.n]
    t_enc = t_align = t_py = 0.0
    for ctx in contexts:
        t0 = time.perf_counter()
        ids = tok.encode(ctx)
        t1 = time.perf_counter()
        pieces = [UNK_CHAR if i == UNK_ID else tok.pieces[i] for i in ids]
        align_pieces(ctx, pieces)
        t2 = time.perf_counter()
        raw = raw_codes(ctx)[0].tolist()
        cat = [ord(c) for c in "".join(pieces).replace("\u2581", " ")]
        python_banded_lcs(raw, cat, 16)
        t3 = time.perf_counter()
        t_enc, t_align, t_py = t_enc + t1 - t0, t_align + t2 - t1, t_py + t3 - t2
    n = len(contexts)
    chars = np.mean([len(c) for c in contexts])
    print(f"{n} paragraphs, mean {chars:.0f} characters")
    print(f"encode        {1e3 * t_enc / n:8.3f} ms/paragraph")
    print(f"LCS (ours)    {1e3 * t_align / n:8.3f} ms/paragraph   = {t_align / t_enc:.1f}x encode")
    print(f"LCS (Python)  {1e3 * t_py / n:8.3f} ms/paragraph   = {t_py / t_align:.1f}x ours (length only)")


if __name__ == "__main__":
    main()
