"""Answer chunks for unlabelled paragraphs (Yang thesis §3.2.5) and the unlabelled-paragraph JSONL format.

The thesis tags Wikipedia paragraphs with the Stanford POS tagger, a small constituency grammar and the 7-class
Stanford NER, then keeps 5 chunks per paragraph sampled by SQuAD's answer-type percentages. Neither tool is available
offline, so :class:`HeuristicExtractor` stands in for them: regular expressions for dates and numbers (money and
percentages are "Other Numeric", as the NER mapping of the seed), runs of capitalised words that do not start a
sentence for entities (one coarse ``Entity`` type: person, location and organisation cannot be told apart without a
tagger), and a determiner-led noun-phrase chunker built from a closed-class lexicon and suffix rules for "Common Noun
Phrase". Adjective phrases, verb phrases and clauses are not extracted. :class:`GoldAnswers` returns spans a data
generator already knows (the synthetic fixture).

:func:`sample_answers` draws k chunks per paragraph: at each draw a type is chosen with probability proportional to
its SQuAD percentage among the types still available, then one of its chunks uniformly -- uniform sampling over
chunks would over-represent noun phrases.

JSONL, one paragraph per line: ``{"id": str, "context": str, "answers": [{"text", "answer_start", "type"}]}``.
"""

from __future__ import annotations

import io
import json
import logging
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import Protocol

import numpy as np

from genlab.data.text.chunks import Piece, decode_piece, line_pieces, read_lines, total_bytes
from genlab.data.text.parallel import ordered_map, resolve_num_proc
from genlab.data.text.progress import Progress
from genlab.data.text.sentences import split_sentences
from genlab.errors import DataError
from genlab.utils import atomic_write

log = logging.getLogger(__name__)

# Rajpurkar et al. 2016, Table 2 (percent of SQuAD dev answers per type).
SQUAD_TYPE_PERCENT = {"Date": 8.9, "Other Numeric": 10.9, "Person": 12.9, "Location": 4.4, "Other Entity": 15.3,
                      "Common Noun Phrase": 31.8, "Adjective Phrase": 3.9, "Verb Phrase": 5.5, "Clause": 3.7,
                      "Other": 2.7}
ENTITY = "Entity"  # the heuristic's coarse entity type: Person + Location + Other Entity
TYPE_WEIGHTS = {**SQUAD_TYPE_PERCENT, ENTITY: sum(SQUAD_TYPE_PERCENT[t] for t in ("Person", "Location",
                                                                                    "Other Entity"))}


@dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset in the paragraph
    type: str = "Other"

    def as_json(self) -> dict:
        return {"text": self.text, "answer_start": self.start, "type": self.type}


class AnswerExtractor(Protocol):
    def __call__(self, context: str) -> list[Answer]:
        """Every candidate answer chunk of one paragraph (spans of ``context``)."""


# ------------------------------------------------------------------------------------------------ heuristic
_MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
_DATE = re.compile(rf"\b(?:{_MONTH}\s+\d{{1,2}},\s+\d{{4}}|\d{{1,2}}\s+{_MONTH}\s+\d{{4}}|{_MONTH}\s+\d{{4}}|"
                   rf"(?:1[0-9]|20)\d\ds?)\b")
_NUMERIC = re.compile(r"(?:[$£€]\s?)?\b\d[\d,]*(?:\.\d+)?(?:\s?(?:%|percent|per cent)|"
                      r"\s(?:million|billion|thousand|hundred))?(?:\b|(?<=%))")
_CAPITAL = re.compile(r"[A-Z][\w'’.-]*")
_WORD = re.compile(r"[\w'’-]+")
_CLOSED = frozenset([
    "a", "an", "the", "this", "that", "these", "those", "its", "his", "her", "their", "our", "my", "your", "some",
    "any", "each", "every", "no", "all", "both", "either", "neither", "of", "in", "on", "at", "by", "for", "from",
    "to", "with", "without", "into", "onto", "over", "under", "about", "above", "below", "between", "among",
    "through", "during", "after", "before", "since", "until", "upon", "within", "against", "toward", "towards",
    "across", "behind", "beyond", "near", "via", "per", "as", "than", "and", "or", "but", "nor", "so", "yet",
    "if", "because", "while", "although", "though", "whereas", "when", "where", "which", "who", "whom", "whose",
    "what", "why", "how", "is", "are", "was", "were", "be", "been", "being", "am", "has", "have", "had", "having",
    "do", "does", "did", "done", "can", "could", "may", "might", "must", "shall", "should", "will", "would",
    "not", "also", "only", "very", "more", "most", "less", "least", "such", "then", "there", "here", "it", "he",
    "she", "they", "we", "you", "i", "him", "them", "us", "me", "one", "two", "three", "four", "five", "six",
    "seven", "eight", "nine", "ten", "first", "second", "third", "many", "much", "several", "other", "another",
    "same", "often", "still", "even", "just", "well", "however", "thus"
])
_NOT_NOUN_SUFFIXES = ("ly", "ed")  # adverbs and past forms end a noun phrase
_DETERMINERS = frozenset(["a", "an", "the", "this", "that", "these", "those", "its", "his", "her", "their", "our"])
MAX_ENTITY_WORDS = 4
MAX_NP_WORDS = 4


class HeuristicExtractor:
    """Offline stand-in for the thesis' POS/NER/chunker pipeline (types: Date, Other Numeric, Entity, Common Noun
    Phrase); ``types`` keeps only some of them (the real-data mini's questions use the first three)."""

    def __init__(self, types: Sequence[str] = ("Date", "Other Numeric", ENTITY, "Common Noun Phrase")) -> None:
        unknown = set(types) - {"Date", "Other Numeric", ENTITY, "Common Noun Phrase"}
        if unknown:
            raise ValueError(f"the heuristic extractor has no types {sorted(unknown)}")
        self.types = tuple(types)

    def __call__(self, context: str) -> list[Answer]:
        found: dict[tuple[int, int], str] = {}
        taken = np.zeros(len(context) + 1, dtype=bool)  # characters inside a date or number already

        def add(start: int, end: int, kind: str) -> None:
            if kind in self.types and (start, end) not in found:
                found[(start, end)] = kind

        for m in _DATE.finditer(context):
            add(m.start(), m.end(), "Date")
            taken[m.start():m.end()] = True
        for m in _NUMERIC.finditer(context):
            if not taken[m.start():m.end()].any():
                add(m.start(), m.end(), "Other Numeric")
        for start, end in self._entities(context):
            add(start, end, ENTITY)
        for start, end in self._noun_phrases(context):
            add(start, end, "Common Noun Phrase")
        return [Answer(context[s:e], s, t) for (s, e), t in sorted(found.items())]

    @staticmethod
    def _sentence_starts(context: str) -> set[int]:
        starts, pos = set(), 0
        for sentence in split_sentences(context):
            pos = context.find(sentence, pos)
            starts.add(pos)
            pos += len(sentence)
        return starts

    def _entities(self, context: str) -> Iterable[tuple[int, int]]:
        """Maximal runs of capitalised words (single spaces between), at most 4, not starting a sentence."""
        starts = self._sentence_starts(context)
        words = list(_WORD.finditer(context))
        i = 0
        while i < len(words):
            j = i
            while (j < len(words) and _CAPITAL.fullmatch(words[j].group())
                   and (j == i or context[words[j - 1].end():words[j].start()] == " ")):
                j += 1
            if j > i and words[i].start() not in starts and j - i <= MAX_ENTITY_WORDS:
                end = words[j - 1].end()
                yield words[i].start(), end - (1 if context[end - 1] in ".-'’" else 0)
            i = max(j, i + 1)

    @staticmethod
    def _noun_phrases(context: str) -> Iterable[tuple[int, int]]:
        """Lower-case content words after a determiner, up to 4, ending before a closed-class word, punctuation, an
        adverb or a past form (the determiner itself is left out of the answer)."""
        words = list(_WORD.finditer(context))
        for i, w in enumerate(words[:-1]):
            if w.group().lower() not in _DETERMINERS:
                continue
            j = i + 1
            while j < len(words) and j - i <= MAX_NP_WORDS:
                word = words[j].group()
                gap = context[words[j - 1].end():words[j].start()]
                if (gap != " " or not word.islower() or word in _CLOSED or word.endswith(_NOT_NOUN_SUFFIXES)
                        or not word.isalpha()):
                    break
                j += 1
            if j > i + 1:
                yield words[i + 1].start(), words[j - 1].end()


class GoldAnswers:
    """Answers known in advance (the synthetic fixture): ``answers[context]``."""

    def __init__(self, answers: dict[str, list[Answer]]) -> None:
        self.answers = answers

    def __call__(self, context: str) -> list[Answer]:
        return list(self.answers.get(context, []))


# ------------------------------------------------------------------------------------------------ sampling
def sample_answers(candidates: Sequence[Answer], k: int, rng: np.random.Generator,
                   weights: dict[str, float] = TYPE_WEIGHTS) -> list[Answer]:
    """k distinct chunks: a type drawn by its SQuAD weight among the types left, then one of its chunks uniformly;
    all of them when there are at most k. Types without a weight count as "Other"."""
    spans = [(a.start, a.start + len(a.text)) for a in candidates]
    return [candidates[i] for i in sample_spans(spans, [a.type for a in candidates], k, rng, weights)]


def sample_spans(spans: Sequence[tuple[int, int]], types: Sequence[str], k: int, rng: np.random.Generator,
                 weights: dict[str, float] = TYPE_WEIGHTS) -> list[int]:
    """:func:`sample_answers` on answers given as (start, end) ``spans`` and their ``types``: the indices of the
    chosen, ordered by start and length (the same draws)."""
    pools: dict[str, list[int]] = {}
    for i, kind in enumerate(types):
        pools.setdefault(kind, []).append(i)
    if len(spans) <= k:
        chosen = list(range(len(spans)))
    else:
        chosen, table = [], tuple(weights.items())
        while len(chosen) < k and pools:
            kinds = tuple(sorted(pools))
            # Generator.choice(len(kinds), p=...)'s draw (one uniform against the normalised cdf) without its
            # per-call checks, which were three quarters of the draw loop's CPU in reading an extracted U
            kind = kinds[bisect_right(_type_cdf(kinds, table), rng.random())]
            pool = pools[kind]
            chosen.append(pool.pop(int(rng.integers(len(pool)))))
            if not pool:
                del pools[kind]
    return sorted(chosen, key=lambda i: (spans[i][0], spans[i][1] - spans[i][0]))


@lru_cache(maxsize=1024)
def _type_cdf(kinds: tuple[str, ...], weights: tuple[tuple[str, float], ...]) -> list[float]:
    """The cumulative probabilities of ``kinds`` that Generator.choice(p=weights / sum) searches."""
    table = dict(weights)
    w = np.array([table.get(t, table.get("Other", 1.0)) for t in kinds], dtype=np.float64)
    cdf = np.cumsum(w / w.sum())
    cdf /= cdf[-1]
    return cdf.tolist()


# ------------------------------------------------------------------------------------------------ JSONL
@dataclass
class UnlabeledParagraph:
    pid: str
    context: str
    answers: list[Answer]


def write_unlabeled(path: Path, rows: Iterable[UnlabeledParagraph]) -> None:
    with atomic_write(path, "w") as f:
        for row in rows:
            f.write(json.dumps({"id": row.pid, "context": row.context,
                                "answers": [a.as_json() for a in row.answers]}, ensure_ascii=False) + "\n")


@dataclass
class UnlabeledCounts:
    """What :func:`iter_unlabeled` skipped: answers not matching their context, paragraphs left with none."""

    bad: int = 0
    empty: int = 0


def _check_exists(path: Path) -> None:
    if not path.is_file():
        raise DataError(f"unlabelled paragraphs {path} do not exist: data.unlabeled_path must be a JSONL file, one "
                        '{"id", "context", "answers": [{"text", "answer_start", "type"}]} per line.')


@dataclass
class UnlabeledPiece:
    """Consecutive paragraphs of an unlabelled file in a form that crosses processes cheaply: their ids and texts,
    and one row (start, end, index into ``kinds``) of ``answers`` per answer, paragraph j's being rows
    ``bounds[j]:bounds[j + 1]``. With an object per answer (~17-30 a paragraph), receiving them had been a third of
    the parent's CPU when answers are extracted in other processes."""

    pids: list[str]
    contexts: list[str]
    bounds: np.ndarray
    answers: np.ndarray
    kinds: list[str]

    def answers_of(self, j: int) -> list[Answer]:
        context = self.contexts[j]
        return [Answer(context[s:e], s, self.kinds[t])
                for s, e, t in self.answers[self.bounds[j]:self.bounds[j + 1]].tolist()]

    def sample(self, j: int, k: int, rng: np.random.Generator) -> list[tuple[int, int]]:
        """(start, end) of the answers :func:`sample_answers` draws from paragraph j's, without building them."""
        rows = self.answers[self.bounds[j]:self.bounds[j + 1]].tolist()
        chosen = sample_spans([(s, e) for s, e, _ in rows], [self.kinds[t] for _, _, t in rows], k, rng)
        return [(rows[i][0], rows[i][1]) for i in chosen]


def unlabeled_pieces(path: Path, extractor: AnswerExtractor | None = None, counts: UnlabeledCounts | None = None,
                     num_proc: int | None = 1) -> Iterator[UnlabeledPiece]:
    """Every paragraph of the file, in order and a piece of lines at a time, with its usable answers (none when no
    answer is). An answer whose text is not ``context[answer_start:][:len]`` is counted in ``counts`` and left out.
    With ``extractor`` every paragraph's answers are its chunks (the file's are ignored; lines may be just
    ``{"id", "context"}``), extracted over ``num_proc`` processes (``data.num_proc``; None: the cores available):
    pieces come back in file order, so the paragraphs are those of one process."""
    path = Path(path)
    _check_exists(path)
    counts = counts if counts is not None else UnlabeledCounts()
    progress = Progress(f"extracting answers from {path.name}" if extractor else f"reading {path.name}",
                        total_bytes([path]))
    # without a tagger, parsing JSON is all a line costs: not worth shipping to other processes
    pieces = line_pieces(path, EXTRACT_PIECE_BYTES if extractor else PIECE_BYTES)
    lines = 0
    for result in ordered_map(partial(_parse_piece, extractor), pieces, resolve_num_proc(num_proc) if extractor else 1):
        if result.error:
            line, reason = result.error
            raise DataError(f"{path}, line {lines + line}: not an unlabelled paragraph ({reason}); every line must be "
                            '{"id", "context", "answers": [{"text", "answer_start", "type"}]}.')
        counts.bad += result.bad
        for i, line in result.unnamed:  # a paragraph without an id is named by its line, as it always was
            result.paragraphs.pids[i] = str(lines + line)
        counts.empty += int(np.count_nonzero(np.diff(result.paragraphs.bounds) == 0))
        yield result.paragraphs
        lines += result.lines
        progress.advance(result.n_bytes)
    progress.finish()


def iter_unlabeled(path: Path, extractor: AnswerExtractor | None = None, counts: UnlabeledCounts | None = None,
                   num_proc: int | None = 1) -> Iterator[UnlabeledParagraph]:
    """The paragraphs of :func:`unlabeled_pieces` one at a time, their answers as :class:`Answer` objects."""
    for piece in unlabeled_pieces(path, extractor, counts, num_proc):
        for j, (pid, context) in enumerate(zip(piece.pids, piece.contexts)):
            yield UnlabeledParagraph(pid, context, piece.answers_of(j))


# Reading: ~15 paragraphs a piece, whose objects die young (1 MB pieces read U 40 % slower; 64 KB ones ~10 %).
# Extracting: ~400, so that the parent's cost per piece (submitting it, receiving its arrays) stays small beside the
# workers' (~0.1 CPU s of the heuristic): its CPU at num_proc 2, 5,000 paragraphs, 16 KB -> 256 KB: 0.38 -> 0.15 s.
PIECE_BYTES = 1 << 14
EXTRACT_PIECE_BYTES = 1 << 18


@dataclass
class _ParsedPiece:
    """One piece of the file: its paragraphs (None after an error), how many lines and bytes it held, answers
    skipped, the paragraphs without an id (index, line within the piece), and the first bad line (line within the
    piece, reason) if any."""

    paragraphs: UnlabeledPiece | None
    lines: int
    n_bytes: int
    bad: int = 0
    unnamed: list[tuple[int, int]] = field(default_factory=list)
    error: tuple[int, str] | None = None


def _parse_piece(extractor: AnswerExtractor | None, piece: Piece) -> _ParsedPiece:
    data = decode_piece(piece)
    out = _ParsedPiece(None, 0, len(piece.data))
    pids, contexts, bounds, rows, kinds = [], [], [0], [], {}
    for n, line in enumerate(io.StringIO(data.removeprefix("\ufeff") if piece.offset == 0 else data, newline=""), 1):
        out.lines = n
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            context = str(obj["context"])
            answers = [a.as_json() for a in extractor(context)] if extractor else obj.get("answers") or []
            pid = str(obj["id"]) if "id" in obj else None
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            out.error = (n, str(err))
            return out
        for a in answers:
            try:
                text, start = str(a["text"]), int(a["answer_start"])
            except (KeyError, TypeError, ValueError):
                out.bad += 1
                continue
            if not text.strip() or context[start:start + len(text)] != text:
                out.bad += 1
                continue
            rows.append((start, start + len(text), kinds.setdefault(str(a.get("type") or "Other"), len(kinds))))
        bounds.append(len(rows))
        if pid is None:
            out.unnamed.append((len(pids), n))
        pids.append(pid or "")
        contexts.append(context)
    out.paragraphs = UnlabeledPiece(pids, contexts, np.array(bounds, dtype=np.int64),
                                    np.array(rows, dtype=np.int64).reshape(-1, 3), list(kinds))
    return out


def unlabeled_contexts(path: Path) -> Iterator[str]:
    """The paragraphs of a file :func:`iter_unlabeled` has read, in its order, without their answers."""
    for line in read_lines(path, progress=False):
        if line.strip():
            yield str(json.loads(line)["context"])


def check_unlabeled(path: Path, n_usable: int, counts: UnlabeledCounts) -> None:
    """After reading: a file without any usable answer is a DataError naming the format; skips are a warning."""
    if not n_usable:
        raise DataError(f"{path} has no usable answers ({counts.empty} paragraphs, {counts.bad} answers not matching "
                        "their context): GDAN trains on (paragraph, answer) pairs, so every line needs answers: "
                        '[{"text", "answer_start", "type"}] with text == context[answer_start:answer_start+len(text)]. '
                        "Extract them with genlab.data.qa.answers.HeuristicExtractor (or your tagger) first.")
    if counts.bad or counts.empty:
        log.warning("%s: %d answers did not match their context and %d paragraphs had none; skipped", path,
                    counts.bad, counts.empty)


def read_unlabeled(path: Path, extractor: AnswerExtractor | None = None) -> list[UnlabeledParagraph]:
    """The paragraphs of :func:`iter_unlabeled` that have a usable answer, checked by :func:`check_unlabeled`."""
    counts = UnlabeledCounts()
    rows = [row for row in iter_unlabeled(path, extractor, counts) if row.answers]
    check_unlabeled(Path(path), len(rows), counts)
    return rows


def extract_unlabeled(paragraphs: Iterable[tuple[str, str]], extractor: AnswerExtractor, k: int = 5,
                      seed: int = 0) -> list[UnlabeledParagraph]:
    """(id, context) pairs -> paragraphs with k type-weighted chunks each (paragraphs without a chunk dropped)."""
    rng = np.random.default_rng(seed)
    out = []
    for pid, context in paragraphs:
        chosen = sample_answers(extractor(context), k, rng)
        if chosen:
            out.append(UnlabeledParagraph(pid, context, chosen))
    return out
