"""Character <-> SentencePiece alignment for SQuAD (spec xlnet.md §5.4), the way the official XLNet preprocessing
does it: a longest-common-subsequence match between the raw paragraph and the concatenated pieces.

Why LCS: the tokenizer sees normalised text (whitespace collapsed, ``````/``''`` -> ``"``, NFKD with accents
dropped, optional lower-casing, plus whatever the SentencePiece model itself normalises), so piece text and raw
text differ in length and content. Comparing each raw character (normalised on its own) with the piece text and
keeping the LCS recovers, for every piece, the raw characters it came from; raw characters that match nothing
(``````, ``ﬁ``, an unknown piece's text ...) go to the piece they fall inside.

The DP is banded (|i - j| stays within ``|N - M| + band`` of the diagonal, as the official ``max_dist``) and
vectorised per row: with ``cand[j] = max(D[i-1][j], D[i-1][j-1] + match)``, row i is the running maximum of
``cand`` (``D[i][j] = max(cand[j], D[i][j-1])``), one ``np.maximum.accumulate`` per raw character.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

UNK_CHAR = "\uffff"  # stands for an <unk> piece: its surface text is unknown, so it must match nothing
NEG = np.int32(-(1 << 28))


@dataclass
class Paragraph:
    """Pieces of one paragraph and the raw character span [char_start, char_end) each covers."""

    ids: list[int]
    char_start: np.ndarray  # int64 [n_pieces], non-decreasing
    char_end: np.ndarray    # int64 [n_pieces], non-decreasing; a lone "▁" piece is zero-width


@lru_cache(maxsize=65536)
def _norm_char(c: str, lower: bool) -> str:
    """One raw character as the tokenizer's preprocessing would write it ('' for a dropped accent)."""
    s = "".join(x for x in unicodedata.normalize("NFKD", c) if not unicodedata.combining(x))
    if c.isspace():
        s = " "
    return s.lower() if lower else s


def _codes(chars: list[str]) -> np.ndarray:
    """Code points of one-character strings; anything else (expansions, drops) gets a code no piece has."""
    return np.array([ord(c) if len(c) == 1 else -1 - i for i, c in enumerate(chars)], dtype=np.int64)


def lcs_pairs(a: np.ndarray, b: np.ndarray, band: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Indices (ia, ib) of a longest common subsequence of the code arrays ``a`` [N] and ``b`` [M], both increasing.

    The DP lives in a band of width W = |N - M| + 2·band + 1; row i covers columns j = lo + i .. lo + i + W - 1 with
    lo = min(0, M - N) - band, so the previous row's D[i-1][j] and D[i-1][j-1] are at band offsets k+1 and k."""
    n, m = len(a), len(b)
    lo = min(0, m - n) - band
    w = abs(m - n) + 2 * band + 1
    table = np.empty((n + 1, w), dtype=np.int32)  # table[i, k] = D[i][lo + i + k]
    cols0 = lo + np.arange(w)
    table[0] = np.where((cols0 >= 0) & (cols0 <= m), 0, NEG)
    b_pad = np.concatenate([np.full(w + n + 1, -(1 << 40), np.int64), b, np.full(w + n + 1, -(1 << 40), np.int64)])
    off = w + n + 1 - 1  # b_pad[off + j] = b[j - 1] for 1 <= j <= m
    prev_ext = np.empty(w + 1, dtype=np.int32)
    for i in range(1, n + 1):
        cols = cols0 + i
        prev_ext[:w] = table[i - 1]
        prev_ext[w] = NEG
        match = b_pad[off + cols] == a[i - 1]
        cand = np.maximum(prev_ext[1:], prev_ext[:w] + match)
        cand[cols == 0] = 0
        cand[(cols < 0) | (cols > m)] = NEG
        row = np.maximum.accumulate(cand)
        row[(cols < 0) | (cols > m)] = NEG
        table[i] = row
    # traceback from (n, m): prefer a diagonal match, then the larger neighbour (ties go up, as the official code)
    ia, ib = [], []
    i, j = n, m
    while i > 0 and j > 0:
        k = j - lo - i
        here = table[i, k]
        if a[i - 1] == b[j - 1] and 0 <= k < w and table[i - 1, k] + 1 == here:
            ia.append(i - 1)
            ib.append(j - 1)
            i, j = i - 1, j - 1
        elif k + 1 < w and table[i - 1, k + 1] == here:
            i -= 1
        elif k > 0 and table[i, k - 1] == here:
            j -= 1
        else:  # D[i-1][j] fell outside the band: the value came diagonally without a match
            i, j = i - 1, j - 1
    return np.array(ia[::-1], dtype=np.int64), np.array(ib[::-1], dtype=np.int64)


def align_pieces(context: str, pieces: list[str], lower: bool = False, band: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Raw character span [start, end) of each piece (``pieces`` as SentencePiece writes them, "▁" = space,
    ``UNK_CHAR`` for an unknown piece)."""
    cat = "".join(pieces).replace("\u2581", " ")
    raw = _codes([_norm_char(c, lower) for c in context])
    tok = np.array([ord(c) for c in cat], dtype=np.int64)
    ia, ib = lcs_pairs(raw, tok, band)
    # raw index of every piece character: matched -> its partner; unmatched -> between its matched neighbours
    n_cat = len(cat)
    matched = np.full(n_cat, -1, dtype=np.int64)
    matched[ib] = ia
    pos = np.arange(n_cat)
    left = np.maximum.accumulate(np.where(matched >= 0, pos, -1))               # last matched at or before j
    right = np.minimum.accumulate(np.where(matched >= 0, pos, n_cat)[::-1])[::-1]  # first matched at or after j
    left_raw = np.where(left >= 0, matched[np.maximum(left, 0)], -1)
    right_raw = np.where(right < n_cat, matched[np.minimum(right, n_cat - 1)], len(context))
    start_of = np.where(matched >= 0, matched, left_raw + 1)  # an unmatched char starts after its left neighbour
    end_of = np.where(matched >= 0, matched + 1, right_raw)   # ... and owns raw text up to its right neighbour
    # piece p covers cat[c0:c1]; its span runs from its first to its last non-space character
    lengths = np.array([len(p) for p in pieces], dtype=np.int64)
    c1 = np.cumsum(lengths)
    c0 = c1 - lengths
    is_text = np.array([c != " " for c in cat], dtype=bool)
    text_pos = np.flatnonzero(is_text)
    first = np.searchsorted(text_pos, c0)            # first text char at or after c0
    last = np.searchsorted(text_pos, c1) - 1         # last text char before c1
    has_text = (first <= last) & (first < len(text_pos))
    safe_first = text_pos[np.minimum(first, max(len(text_pos) - 1, 0))] if len(text_pos) else np.zeros_like(c0)
    safe_last = text_pos[np.clip(last, 0, max(len(text_pos) - 1, 0))] if len(text_pos) else np.zeros_like(c0)
    starts = np.where(has_text, start_of[safe_first] if n_cat else 0, 0)
    ends = np.where(has_text, end_of[safe_last] if n_cat else 0, 0)
    # text-less pieces (a lone "▁") are zero-width at the start of the next raw text
    starts = np.where(has_text, starts, -1)
    nxt = np.minimum.accumulate(np.where(has_text, starts, len(context))[::-1])[::-1]
    starts = np.where(has_text, starts, nxt)
    ends = np.where(has_text, ends, nxt)
    # expansions (one raw char -> several piece chars) can give neighbours the same raw char: keep spans monotone
    starts = np.maximum.accumulate(starts)
    ends = np.maximum(np.maximum.accumulate(ends), starts)
    # unmatched whitespace at span edges belongs to nobody
    return _strip(context, starts, ends)


def _strip(context: str, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not len(starts):
        return starts, ends
    space = np.array([c.isspace() for c in context] + [False], dtype=bool)
    n = len(context)
    # next non-space at or after i, last non-space before i (+1)
    nxt = np.minimum.accumulate(np.where(~space, np.arange(n + 1), n)[::-1])[::-1]
    prv = np.maximum.accumulate(np.where(~space[:n], np.arange(1, n + 1), 0))
    prv = np.concatenate([[0], prv])
    s = np.minimum(nxt[np.clip(starts, 0, n)], ends)
    e = np.maximum(prv[np.clip(ends, 0, n)], s)
    return s, e


def char_to_piece_span(p: Paragraph, start: int, end: int) -> tuple[int, int] | None:
    """First and last piece overlapping characters [start, end); None if no piece does."""
    first = int(np.searchsorted(p.char_end, start, side="right"))
    last = int(np.searchsorted(p.char_start, end, side="left")) - 1
    if first > last or first >= len(p.ids):
        return None
    return first, last
