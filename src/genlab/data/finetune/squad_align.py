"""Character <-> SentencePiece alignment for SQuAD (XLNet paper §3.3), the way the official XLNet preprocessing
does it: a longest-common-subsequence match between the raw paragraph and the concatenated pieces.

Why LCS: the tokenizer sees normalised text (whitespace collapsed, ``````/``''`` -> ``"``, NFKD with accents
dropped, optional lower-casing, plus whatever the SentencePiece model itself normalises), so piece text and raw
text differ in length and content. Comparing each raw character (normalised on its own) with the piece text and
keeping the LCS recovers, for every piece, the raw characters it came from; raw characters that match nothing
(``````, ``ﬁ``, an unknown piece's text ...) go to the piece they fall inside.

The LCS is exact over the whole paragraph (the official code bands it with ``max_dist``; an exact LCS needs no
band) and bit-parallel: one machine-word-vectorised big-integer update per raw character, see :func:`lcs_pairs`.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

UNK_CHAR = "\uffff"  # stands for an <unk> piece: its surface text is unknown, so it must match nothing


@dataclass
class Paragraph:
    """Pieces of one paragraph and the raw character span [char_start, char_end) each covers."""

    ids: list[int]
    char_start: np.ndarray  # int64 [n_pieces], non-decreasing
    char_end: np.ndarray    # int64 [n_pieces], non-decreasing; a lone "▁" piece is zero-width


@lru_cache(maxsize=65536)
def _norm_code(cp: int, lower: bool) -> int:
    """Code point of one raw character as the tokenizer's preprocessing writes it (whitespace -> space, NFKD
    without accents, optional lower-casing); -1 when it becomes zero or several characters."""
    c = chr(cp)
    if c.isspace():
        return 32
    s = "".join(x for x in unicodedata.normalize("NFKD", c) if not unicodedata.combining(x))
    s = s.lower() if lower else s
    return ord(s) if len(s) == 1 else -1


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)


def raw_codes(context: str, lower: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(normalised code per raw character, is-whitespace flag), mapped once per distinct character. Characters
    that expand or vanish get distinct negative codes so they match nothing."""
    cps = _code_points(context)
    uniq, inv = np.unique(cps, return_inverse=True)
    codes = np.array([_norm_code(int(u), lower) for u in uniq], dtype=np.int64)[inv]
    space = np.array([chr(int(u)).isspace() for u in uniq], dtype=bool)[inv]
    bad = np.flatnonzero(codes < 0)
    codes[bad] = -1 - bad
    return codes, space


def lcs_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices (ia, ib) of a longest common subsequence of the code arrays ``a`` [N] and ``b`` [M], both increasing.

    Bit-parallel LCS: row i of the DP is one M-bit integer V_i whose zero bits mark the columns where D[i][.]
    steps up, so D[i][j] = j - popcount(V_i & (2^j - 1)); each row costs a few big-integer operations
    (V' = (V + U) | (V - U) with U = V & match_mask[a_i]), and the traceback reads D from the stored rows."""
    a, b = a.tolist(), b.tolist()
    m = len(b)
    full = (1 << m) - 1
    masks: dict[int, int] = {}
    for j, c in enumerate(b):
        masks[c] = masks.get(c, 0) | (1 << j)
    v = full
    rows = [v]
    for x in a:
        u = v & masks.get(x, 0)
        v = ((v + u) | (v - u)) & full
        rows.append(v)

    def d(i: int, j: int) -> int:
        return j - (rows[i] & ((1 << j) - 1)).bit_count()

    ia, ib = [], []
    i, j = len(a), m
    while i > 0 and j > 0:
        if a[i - 1] == b[j - 1]:  # equal last characters are always matched by some LCS
            ia.append(i - 1)
            ib.append(j - 1)
            i, j = i - 1, j - 1
        elif d(i - 1, j) == d(i, j):  # ties go up, as the official traceback
            i -= 1
        else:
            j -= 1
    return np.array(ia[::-1], dtype=np.int64), np.array(ib[::-1], dtype=np.int64)


def align_pieces(context: str, pieces: list[str], lower: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Raw character span [start, end) of each piece (``pieces`` as SentencePiece writes them, "▁" = space,
    ``UNK_CHAR`` for an unknown piece)."""
    cat = "".join(pieces).replace("\u2581", " ")
    raw, space = raw_codes(context, lower)
    tok = _code_points(cat)
    ia, ib = lcs_pairs(raw, tok)
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
    is_text = tok != 32
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
    return _strip(space, starts, ends)


def _strip(space: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not len(starts):
        return starts, ends
    n = len(space)
    space = np.concatenate([space, [False]])
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


def offsets_paragraph(context: str, tok) -> Paragraph:
    """Pieces of a WordPiece tokenizer (genlab.data.tokenizers.wordpiece, built on ``tokenizers``) with their raw
    spans taken from the library's offset mapping. The library tracks every normalisation step (lower-casing,
    accent stripping, control characters dropped, punctuation split) back to the input characters, so the spans
    are exact without an LCS; an ``[UNK]`` piece spans the whole word it replaced."""
    ids, spans = tok.encode_with_offsets(context)
    offsets = np.array(spans, dtype=np.int64).reshape(-1, 2)
    return Paragraph(list(ids), offsets[:, 0].copy(), offsets[:, 1].copy())
