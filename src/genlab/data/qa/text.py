"""GDAN's word tokenizer and vocabularies (platform choices; the thesis names no tokenizer).

Tokens are the regex ``\\w+|[^\\w\\s]`` over the original string, each with its character span, so a predicted token
span is cut from the original context (numbers and case intact). Vocabulary lookups use a normalised view:
lower-cased, every digit replaced by ``0`` ("CO2" -> "co0", "1990" -> "0000"), as the thesis' samples show.

Vocabularies share their ids: D's list starts with G's (specials, then G's words), so a G id is the same word's D id
and no map is needed between the two models. G's words are those of L (questions and paragraphs) seen at least
twice, capped (a platform default); D adds the other words of its training text (L and U paragraphs).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from genlab.data.finetune.squad_align import Paragraph, char_to_piece_span
from genlab.data.text.encoded_texts import encode_rows, texts_digest
from genlab.data.text.progress import text_bytes
from genlab.errors import DataError

_TOKEN = re.compile(r"\w+|[^\w\s]")
_DIGIT = re.compile(r"\d")
SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")  # ids 0..3 in both vocabularies (models' pad/unk/bos/eos ids)
PAD, UNK, BOS, EOS = range(4)


@dataclass(frozen=True)
class TextNorm:
    """The normalised view used for lookups (``text.lowercase``, ``text.digits_to_zero`` of the spec)."""

    lowercase: bool = True
    digits_to_zero: bool = True

    def __call__(self, token: str) -> str:
        token = token.lower() if self.lowercase else token
        return _DIGIT.sub("0", token) if self.digits_to_zero else token


def tokenize(text: str, norm: TextNorm = TextNorm()) -> tuple[list[str], np.ndarray]:
    """(normalised tokens, [n, 2] character start/end of each token in ``text``)."""
    words, spans = [], []
    for m in _TOKEN.finditer(text):
        words.append(norm(m.group()))
        spans.append(m.span())
    return words, np.array(spans, dtype=np.int64).reshape(-1, 2)


Tokenised = dict[str, tuple[list[str], np.ndarray]]  # text -> (normalised words, [n, 2] character spans)


def word_encoder(norm: TextNorm):
    """A row encoder for :func:`genlab.data.text.encoded_texts.encode_rows`: a text's token starts and ends, its
    normalised words as the row's tag (space-separated: a word holds no whitespace)."""
    def encode(text: str) -> tuple:
        words, spans = tokenize(text, norm)
        return (spans[:, 0].tolist(), spans[:, 1].tolist()), (), " ".join(words)

    return encode


def words_key(norm: TextNorm) -> tuple:
    """What decides :func:`word_encoder`'s output (part of every cache key of GDAN's words)."""
    return "gdan words", _TOKEN.pattern, norm.lowercase, norm.digits_to_zero


def tag_words(tag: str) -> list[str]:
    """A row's words back from its tag."""
    return tag.split(" ") if tag else []


def tokenize_all(texts: Iterable[str], norm: TextNorm, cache_dir: str | Path | None,
                 num_proc: int | None = None) -> Tokenised:
    """:func:`tokenize` of every distinct text, over ``num_proc`` processes and cached as the finetuning texts are
    (``genlab.data.text.encoded_texts``: spans as int arrays, the normalised words as each row's tag); keyed on the
    texts, the token pattern and the normalisation."""
    distinct = list(dict.fromkeys(texts))
    key = (*words_key(norm), len(distinct), texts_digest(distinct))
    rows = encode_rows(distinct, word_encoder(norm), key, cache_dir, "gdan words", fields=("starts", "ends"),
                       num_proc=num_proc, progress=(sum(map(text_bytes, distinct)), text_bytes))
    tags = rows.tags()
    if len(rows) != len(distinct) or len(tags) != len(distinct):
        raise DataError(f"encoded-text cache {rows.entry} does not match its texts; delete the folder and run again.")
    # every span at once, then a view per text (slicing the maps text by text: 0.9 vs 0.55 CPU s on SQuAD's texts)
    spans = np.stack([rows.fields["starts"], rows.fields["ends"]], axis=1).astype(np.int64)
    return {t: (tag_words(tag), span)
            for t, tag, span in zip(distinct, tags, np.split(spans, np.asarray(rows.offsets[1:-1])))}


def token_span(offsets: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """Smallest token span (first, last) covering characters [start, end); None if no token does.
    The finetuning suite's alignment, with our tokens as its pieces."""
    if not len(offsets):
        return None
    return char_to_piece_span(Paragraph([0] * len(offsets), offsets[:, 0], offsets[:, 1]), start, end)


def extended_ids(words: list[str], d_ids: np.ndarray, g_vocab_size: int) -> np.ndarray:
    """G's extended ids: a word of G's vocabulary keeps its id, any other word gets a slot per distinct word after
    G's vocabulary (the paragraph's copy slots)."""
    slots: dict[str, int] = {}
    ext = d_ids.copy()
    for i, (w, d) in enumerate(zip(words, d_ids.tolist())):
        if d >= g_vocab_size or d == UNK:
            ext[i] = g_vocab_size + slots.setdefault(w, len(slots))
    return ext


class Vocabulary:
    """Word -> id with the four specials first; unknown words map to ``<unk>``."""

    def __init__(self, words: Iterable[str]) -> None:
        self.words = list(SPECIALS) + [w for w in words if w not in SPECIALS]
        self.index = {w: i for i, w in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise ValueError("vocabulary words must be distinct")

    def __len__(self) -> int:
        return len(self.words)

    def ids(self, tokens: Iterable[str]) -> np.ndarray:
        get = self.index.get
        return np.array([get(t, UNK) for t in tokens], dtype=np.int64)


def frequent(counts: Counter, min_count: int, max_size: int | None) -> list[str]:
    """Words seen at least ``min_count`` times, most frequent first (ties alphabetical, so the order is stable)."""
    kept = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIALS),
                  key=lambda w: (-counts[w], w))
    return kept[:max_size] if max_size else kept


def shared_vocabularies(g_counts: Counter, d_counts: Counter, g_min_count: int = 2, g_max_size: int | None = 30000,
                        d_min_count: int = 2, d_max_size: int | None = None) -> tuple[Vocabulary, int]:
    """(D's vocabulary, size of G's): G's words (from L) come first, so G's vocabulary is D's first ids."""
    g_words = frequent(g_counts, g_min_count, g_max_size)
    known = set(g_words)
    rest = [w for w in frequent(d_counts, d_min_count, None) if w not in known]
    if d_max_size is not None:
        rest = rest[:max(0, d_max_size - len(SPECIALS) - len(g_words))]
    return Vocabulary(g_words + rest), len(SPECIALS) + len(g_words)
