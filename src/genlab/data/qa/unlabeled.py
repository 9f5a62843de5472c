"""GDAN's unlabelled set U (Yang thesis §3.2.5) at the thesis' size in bounded memory.

The thesis extracts 4,753,060 answers from 950,612 Wikipedia paragraphs and trains on all of them or on a sample of
about 50,000 (Table 3.4's "5M" and "50K"). Held as Python objects that is ~20 GB; here the file is read a line at a
time and every paragraph lives in memory-mapped encoded-text entries (genlab.data.text.encoded_texts):

1. reading: each paragraph's usable answers (the file's, or an extractor's over ``num_proc`` processes) are drawn
   (``answers_per_paragraph``, type-weighted, one generator in file order); only each drawn answer's paragraph and
   characters are kept, and a digest per paragraph;
2. tokenising: the paragraphs are tokenised once into an entry keyed on their text (GDAN's words as each row's tag,
   their character spans as fields) over ``num_proc`` processes; another label rate or seed reuses it;
3. drawing: every answer's token span is found at once (a block of paragraphs at a time), answers past
   ``max_paragraph_tokens`` are dropped and ``unlabeled_size`` pairs are drawn uniformly;
4. ids: once the vocabularies are known (counted by streaming the entry's words), the paragraphs holding a drawn pair
   are written as D ids and G's extended ids into a second entry that batches read through memory maps.

The draw equals that of tokenising every paragraph in memory (same generators in the same order; tested), and
every step logs progress through the genlab logger.
"""

from __future__ import annotations

import hashlib
import logging
from array import array
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from genlab.data.qa.answers import (
    AnswerExtractor,
    UnlabeledCounts,
    check_unlabeled,
    unlabeled_contexts,
    unlabeled_pieces,
)
from genlab.data.qa.text import TextNorm, Vocabulary, extended_ids, tag_words, word_encoder, words_key
from genlab.data.text.distinct import text_digest
from genlab.data.text.encoded_texts import EncodedRows, encode_rows
from genlab.data.text.progress import Progress, text_bytes
from genlab.errors import DataError

log = logging.getLogger(__name__)
BLOCK_ROWS = 20_000  # paragraphs whose tokens are searched at once (a few MB of int64 keys)


context_digest = text_digest  # a paragraph of U and one of SQuAD with equal text are one paragraph


class UnlabeledPairs:
    """The drawn (paragraph, answer span) pairs of U: ``row`` (the paragraph's line among the file's paragraphs),
    ``start`` / ``end`` (first and last token). :meth:`encode_ids` must run before :meth:`arrays`."""

    def __init__(self, words: EncodedRows, digests: np.ndarray, usable: np.ndarray, row: np.ndarray,
                 start: np.ndarray, end: np.ndarray, cap: int | None) -> None:
        self.words, self.digests, self.usable, self.cap = words, digests, usable, cap
        self.row, self.start, self.end = row, start, end
        self.ids: EncodedRows | None = None
        self._ids_row = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.row)

    def paragraphs(self, every: bool, exclude: set[bytes]) -> np.ndarray:
        """Distinct paragraphs (first line of each text) of the drawn pairs, or with ``every`` of every paragraph with
        a usable answer, leaving out those whose digest is in ``exclude``."""
        rows = self.usable if every else np.unique(self.row)
        _, first = np.unique(self.digests[rows], return_index=True)
        rows = rows[np.sort(first)]
        return rows[~np.isin(self.digests[rows], np.array(sorted(exclude), dtype="S16"))]

    def count_words(self, rows: np.ndarray, counts: Counter) -> None:
        """Add the words of paragraphs ``rows`` (cut at ``max_paragraph_tokens``) to ``counts``."""
        for _, words in self._words_of(rows, "counting the words of U"):
            counts.update(words)

    def _words_of(self, rows: np.ndarray, what: str) -> Iterator[tuple[int, list[str]]]:
        wanted = np.zeros(len(self.words), dtype=bool)
        wanted[rows] = True
        progress = Progress(what, (self.words.entry / "tags.txt").stat().st_size)
        for r, tag in enumerate(self.words.iter_tags()):
            progress.advance(len(tag.encode()) + 1)
            if wanted[r]:
                yield r, tag_words(tag)[:self.cap]
        progress.finish()

    def encode_ids(self, vocab: Vocabulary, g_vocab_size: int, cache_dir: str | Path | None,
                   num_proc: int | None) -> None:
        """The drawn pairs' paragraphs as D ids and G's extended ids (genlab.data.qa.text.extended_ids), cached."""
        used = np.unique(self.row)
        self._ids_row = np.searchsorted(used, self.row)
        vocab_digest = hashlib.sha256("\n".join(vocab.words).encode()).hexdigest()
        key = (self.words.entry.name, hashlib.sha256(used.tobytes()).hexdigest(), self.cap, vocab_digest, g_vocab_size)

        def encode(words: list[str]) -> tuple:
            d_ids = vocab.ids(words)
            return (d_ids.tolist(), extended_ids(words, d_ids, g_vocab_size).tolist()), (), None

        rows = (words for _, words in self._words_of(used, "writing U's ids"))
        self.ids = encode_rows(rows, encode, key, cache_dir, "gdan unlabelled ids", fields=("d_ids", "g_ext"),
                               num_proc=num_proc)
        if len(self.ids) != len(used):
            raise DataError(f"encoded-text cache {self.ids.entry} does not match U; delete the folder and run again.")

    def arrays(self, pairs: list[int]) -> tuple[list[np.ndarray], list[np.ndarray], list[int], list[int]]:
        """(D ids, G's extended ids, answer start, answer end) of ``pairs``."""
        rows = self._ids_row[pairs].tolist()
        return ([np.asarray(self.ids.row(r, "d_ids"), dtype=np.int64) for r in rows],
                [np.asarray(self.ids.row(r, "g_ext"), dtype=np.int64) for r in rows],
                self.start[pairs].tolist(), self.end[pairs].tolist())


def read_pairs(path: Path, extractor: AnswerExtractor | None, norm: TextNorm, cache_dir: str | Path | None,
               num_proc: int | None, answers_per_paragraph: int, split_seed: int, cap: int | None,
               size: int | None) -> UnlabeledPairs:
    """U's pairs: steps 1-3 of the module's description."""
    rng = np.random.default_rng(split_seed + 7919)  # U is one fixed set across runs, like the thesis' 50K
    counts = UnlabeledCounts()
    texts, digests, n_bytes = hashlib.sha256(), bytearray(), 0
    usable, rows, starts, ends = array("q"), array("q"), array("q"), array("q")
    i = 0
    for piece in unlabeled_pieces(path, extractor, counts, num_proc):
        for j, context in enumerate(piece.contexts):
            data = context.encode("utf-8", "surrogatepass")
            texts.update(data + b"\0")
            digests += hashlib.blake2b(data, digest_size=16).digest()
            n_bytes += len(data)
            if piece.bounds[j + 1] > piece.bounds[j]:
                usable.append(i)
                for start, end in piece.sample(j, answers_per_paragraph, rng):
                    rows.append(i)
                    starts.append(start)
                    ends.append(end)
            i += 1
    check_unlabeled(path, len(usable), counts)
    n = len(digests) // 16
    words = encode_rows(unlabeled_contexts(path), word_encoder(norm), (*words_key(norm), n, texts.hexdigest()),
                        cache_dir, "gdan unlabelled words", fields=("starts", "ends"), num_proc=num_proc,
                        progress=(n_bytes, text_bytes))
    if len(words) != n:
        raise DataError(f"encoded-text cache {words.entry} does not match {path}; delete the folder and run again.")
    row, start, end = (np.frombuffer(a, dtype=np.int64) for a in (rows, starts, ends))
    first, last, inside = token_spans(words, row, start, end, cap, f"finding the tokens of the answers of {path.name}")
    keep = np.flatnonzero(inside)
    if not len(keep):
        raise DataError(f"{path}: no unlabelled answer lies within data.max_paragraph_tokens={cap}.")
    if size is not None and size < len(keep):
        keep = keep[np.sort(np.random.default_rng(split_seed + 104729).choice(len(keep), size, replace=False))]
    log.info("U: %d of %d answers drawn from %d paragraphs of %s", len(keep), len(row), len(usable), path)
    return UnlabeledPairs(words, np.frombuffer(bytes(digests), dtype="S16"), np.frombuffer(usable, dtype=np.int64),
                          row[keep], first[keep], last[keep], cap)


def token_spans(words: EncodedRows, row: np.ndarray, start: np.ndarray, end: np.ndarray, cap: int | None,
                what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first token, last token, found) of each answer (characters [start, end) of paragraph ``row``, rows in
    ascending order): genlab.data.qa.text.token_span over the paragraph's first ``cap`` tokens, vectorised. Tokens of
    a block of paragraphs are searched at once under the key (paragraph << 32) + character, which is ascending.
    Progress (``what``) counts the bytes of token spans searched."""
    offsets = np.asarray(words.offsets, dtype=np.int64)
    progress = Progress(what, 8 * int(offsets[-1]))
    first, last = np.empty(len(row), dtype=np.int64), np.empty(len(row), dtype=np.int64)
    n_rows = len(offsets) - 1
    bounds = np.searchsorted(row, np.arange(0, n_rows + BLOCK_ROWS, BLOCK_ROWS))
    for b, (p0, p1) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
        if p0 == p1:
            continue
        r0, r1 = b * BLOCK_ROWS, min((b + 1) * BLOCK_ROWS, n_rows)
        t0, t1 = int(offsets[r0]), int(offsets[r1])
        tok_row = np.repeat(np.arange(r1 - r0, dtype=np.int64), np.diff(offsets[r0:r1 + 1])) << 32
        pair_row = (row[p0:p1] - r0) << 32
        base = offsets[row[p0:p1]] - t0
        char_end = tok_row + _read(words.fields["ends"], t0, t1)
        char_start = tok_row + _read(words.fields["starts"], t0, t1)
        first[p0:p1] = np.searchsorted(char_end, pair_row + start[p0:p1], side="right") - base
        last[p0:p1] = np.searchsorted(char_start, pair_row + end[p0:p1], side="left") - 1 - base
        progress.advance(8 * (t1 - t0))
    progress.finish()
    n_tokens = np.diff(offsets)[row]
    if cap is not None:
        n_tokens = np.minimum(n_tokens, cap)
    return first, np.minimum(last, n_tokens - 1), (first < n_tokens) & (first <= last)


def _read(array: np.memmap, t0: int, t1: int) -> np.ndarray:
    """``array[t0:t1]`` copied through a mapping of its own that is dropped after: the pages read do not stay in this
    process's resident set (the thesis' U has ~1 GB of token spans)."""
    block = np.memmap(array.filename, dtype=array.dtype, mode="r", offset=array.offset + t0 * array.itemsize,
                      shape=(t1 - t0,))
    out = np.array(block, dtype=np.int64)
    del block
    return out
