"""What GDAN's parent process pays while answers are extracted over ``data.num_proc`` processes (Yang thesis §3.2.5).

The parent reads the unlabelled file, ships pieces of lines to the workers, receives each piece's answers and draws
``answers_per_paragraph`` of them per paragraph in file order (one generator, so the draw is that of one process).
That part does not divide: extracting over N processes is at most (one process's CPU) / (the parent's CPU at N)
times faster. Paragraphs are the Wikipedia excerpt's (``genlab.data.text.wiki_excerpt``), cycled to
``--paragraphs``; the heuristic extractor tags them. The words' cache is built before the clock starts, so each
figure is ``genlab.data.qa.unlabeled.read_pairs`` with its tokenised entry on disk (best of ``--repeats``).

    python experiments/perf/gdan_extraction.py [--paragraphs 5000] [--num-proc 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from itertools import cycle, islice
from pathlib import Path


def measure(path: Path, cache: Path, num_proc: int, repeats: int) -> tuple[float, float, float]:
    """Best (process CPU, main-thread CPU, wall) seconds of the parent over ``repeats`` warm reads."""
    from genlab.data.qa.answers import HeuristicExtractor
    from genlab.data.qa.text import TextNorm
    from genlab.data.qa.unlabeled import read_pairs

    def read() -> None:
        read_pairs(path, HeuristicExtractor(), TextNorm(), cache, num_proc, 5, 0, None, None)

    read()  # the words' entry
    best = (float("inf"),) * 3
    for _ in range(repeats):
        cpu, thread, wall = time.process_time(), time.thread_time(), time.perf_counter()
        read()
        best = min(best, (time.process_time() - cpu, time.thread_time() - thread, time.perf_counter() - wall))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paragraphs", type=int, default=5000)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from genlab.data.text.wiki_excerpt import iter_articles

    paragraphs = [p for article in iter_articles() for p in article.paragraphs() if len(p) > 200]
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "unlabeled.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for k, context in enumerate(islice(cycle(paragraphs), args.paragraphs)):
                f.write(json.dumps({"id": f"u{k}", "context": context}, ensure_ascii=False) + "\n")
        mb = path.stat().st_size / 1e6
        print(f"{args.paragraphs} paragraphs ({len(paragraphs)} distinct), {mb:.2f} MB")
        one, _, one_wall = measure(path, Path(work) / "cache", 1, args.repeats)
        print(f"one process: {one:.2f} CPU s ({one / mb:.2f} per MB), {one_wall:.2f} s wall")
        parent, thread, wall = measure(path, Path(work) / "cache", args.num_proc, args.repeats)
        print(f"parent at num_proc {args.num_proc}: {parent:.2f} CPU s ({thread:.2f} its main thread), "
              f"{wall:.2f} s wall")
        print(f"extraction speed-up cap (one process / parent): {one / parent:.1f}x")


if __name__ == "__main__":
    main()
