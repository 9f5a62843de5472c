"""Readers for the real on-disk formats of the language-modelling benchmarks (as the Transformer-XL and MoS
code read them).

Each ``read_*`` takes the dataset directory and returns ``(vocab, {"train", "valid", "test"} -> int32 ids)``, the
ids of a large split as a stream of pieces (:func:`materialize` joins them), so that memory does not grow with it.
Word corpora are split on whitespace one line at a time (one dict lookup per token); byte and character
corpora are parsed with NumPy, without a Python loop over symbols.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from genlab.data.lm.archives import member_splits, split_writers
from genlab.data.lm.vocab import Order, Vocab, build_value_vocab, build_word_vocab
from genlab.data.text.chunks import Piece, decode_piece, line_pieces, split_lines, total_bytes
from genlab.data.text.parallel import ordered_map
from genlab.data.text.progress import Progress
from genlab.errors import DataError

SPLITS = ("train", "valid", "test")
EOS = "<eos>"
ENCODE_CHUNK_LINES = 100_000
PARSE_CHUNK_BYTES = 1 << 23  # enwik8/text8 files are parsed and written in pieces of this size


# ---------------------------------------------------------------------------------------------- word streams
def _read_lines(path: Path) -> Iterable[list[str]]:
    """Blocks of lines of a UTF-8 file; a decoding error becomes a DataError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            block: list[str] = []
            for line in f:
                block.append(line)
                if len(block) >= ENCODE_CHUNK_LINES:
                    yield block
                    block = []
            if block:
                yield block
    except UnicodeDecodeError as err:
        raise DataError(f"{path} is not valid UTF-8 text ({err}); the file is corrupt or not this dataset.") from err
    except OSError as err:
        raise DataError(f"cannot read {path} ({err}).") from err


@dataclass(frozen=True)
class WordEncoder:
    """Ids of one piece of a whitespace-tokenised file, ``eos`` appended to every line (blank lines included)."""

    vocab: Vocab
    eos: str | None = EOS
    lower: bool = False

    def __call__(self, piece: Piece) -> tuple[np.ndarray, int]:
        text = decode_piece(piece)
        text = text.lower() if self.lower else text
        if self.eos is None:
            tokens = text.split()
        else:  # one marker per line, blank lines included: "a b\n", "\n" -> a b <eos> <eos>
            tokens = f" {self.eos} ".join(split_lines(text)).split()
            tokens.append(self.eos)
        return self.vocab.encode(tokens, where=piece.path), len(piece.data)


def encode_word_file(path: Path, vocab: Vocab, eos: str | None = EOS, lower: bool = False,
                     num_proc: int = 1) -> Iterator[np.ndarray]:
    """The ids of ``path`` as a stream of chunks (one per piece of the file), encoded over ``num_proc`` processes."""
    progress = Progress(f"encoding {Path(path).name}", total_bytes([path]))
    n = 0
    for ids, n_bytes in ordered_map(WordEncoder(vocab, eos, lower), line_pieces(path), num_proc):
        n += len(ids)
        progress.advance(n_bytes)
        yield ids
    progress.finish()
    _non_empty(np.zeros(n, dtype=np.int32), path)


def _non_empty(ids: np.ndarray, path: Path) -> np.ndarray:
    if ids.size == 0:
        raise DataError(f"{path} holds no tokens: the corpus split is empty. Replace it with the real file.")
    return ids


def read_word_corpus(
    files: dict[str, Path],
    vocab_splits: Sequence[str],
    order: Order = "frequency",
    unk: str | None = "<unk>",
    lower: bool = False,
    vocab: Vocab | None = None,
    num_proc: int = 1,
) -> tuple[Vocab, dict[str, Iterator[np.ndarray]]]:
    """WikiText / PTB style: ``<eos>`` appended to each line; id 0 in frequency order, inline in first-appearance.

    ``unk`` is used for out-of-vocabulary tokens only when the vocabulary contains it (these corpora are
    closed: their rare words are already ``<unk>``); otherwise an unseen token is an error. A given ``vocab``
    (e.g. the one shipped with an imported checkpoint) is used as is instead of being rebuilt.
    """
    for split, path in files.items():
        if not path.is_file():
            raise DataError(f"{path} is missing: the {split} split of this corpus. Put the file there or fix data.path.")
        if path.stat().st_size == 0:
            raise DataError(f"{path} is empty (0 bytes): the {split} split has no text. Replace it with the real file.")
    if vocab is None:
        specials = (EOS,) if order == "frequency" else ()  # MoS meets <eos> inline, after the first line's words
        vocab = build_word_vocab([files[s] for s in vocab_splits], specials=specials, order=order, lower=lower,
                                 num_proc=num_proc)
    if unk is not None and unk in vocab and vocab.unk is None:
        vocab = Vocab(vocab.symbols, unk=unk, specials=vocab.specials)
    return vocab, {s: encode_word_file(p, vocab, lower=lower, num_proc=num_proc) for s, p in files.items()}


def read_wikitext(
    root: Path, order: Order = "frequency", vocab_splits: Sequence[str] = ("train",), vocab: Vocab | None = None,
    num_proc: int = 1,
):
    """``wiki.{train,valid,test}.tokens`` (WikiText-103 and WikiText-2): case kept, ``<eos>`` on every line.

    TXL counts train only for WT103 and train+valid+test for WT2; the vocabulary is the same set either way.
    """
    files = {s: Path(root) / f"wiki.{s}.tokens" for s in SPLITS}
    return read_word_corpus(files, vocab_splits, order=order, vocab=vocab, num_proc=num_proc)


def read_ptb(
    root: Path, order: Order = "frequency", char: bool = False, lower_case: bool = False, vocab: Vocab | None = None,
    num_proc: int = 1,
):
    """Mikolov's ``ptb.{split}.txt`` (word) or ``ptb.char.{split}.txt`` (char); vocab from all three splits.

    ``lower_case`` is the TXL PTB setting (it turns the number token ``N`` into ``n``); MoS/AWD-LSTM keep case.
    """
    stem = "ptb.char" if char else "ptb"
    files = {s: Path(root) / f"{stem}.{s}.txt" for s in SPLITS}
    return read_word_corpus(files, SPLITS, order=order, lower=lower_case, vocab=vocab, num_proc=num_proc)


# ---------------------------------------------------------------------------------------------- enwik8
def split_sizes(total: int, n_test: int) -> tuple[int, int, int]:
    """The official 90M/5M/5M rule: the last ``n_test`` symbols are test, the ``n_test`` before them valid."""
    if total <= 2 * n_test:
        raise DataError(f"corpus of {total} symbols is too small for valid and test parts of {n_test} each.")
    return total - 2 * n_test, n_test, n_test


def _splits_of(n_test: int) -> Callable[[int], list[tuple[str, int]]]:
    return lambda total: list(zip(SPLITS, split_sizes(total, n_test)))


def prepare_enwik8(root: Path, n_test: int = 5_000_000, archive: str = "enwik8.zip") -> None:
    """``enwik8.zip`` -> ``{train,valid,test}.txt``: bytes as space-separated decimals, newline bytes as line breaks.

    Same output as salesforce/awd-lstm-lm ``prep_enwik8.py`` (no trailing newline), written with NumPy a piece at a
    time as the member streams out of the archive.
    """
    root = Path(root)
    with split_writers(root, SPLITS) as out:
        started = set()
        for split, part in member_splits(root / archive, "enwik8", _splits_of(n_test), PARSE_CHUNK_BYTES):
            out[split].write((b" " if split in started else b"") + bytes_to_decimal_text(part))
            started.add(split)


def bytes_to_decimal_text(part: np.ndarray) -> bytes:
    """``b'A\\nB'`` -> ``b'65 \\n 66'``: each byte's decimal value, joined by spaces; byte 10 stays a newline."""
    names = [str(v).encode() if v != 10 else b"\n" for v in range(256)]
    # vectorised join: emit the table entry of every byte, separated by single spaces
    lengths = np.array([len(n) for n in names], dtype=np.int64)[part]
    flat = np.frombuffer(b"".join(n.ljust(3, b"\0") for n in names), dtype=np.uint8).reshape(256, 3)
    out_len = int(lengths.sum() + max(len(part) - 1, 0))
    out = np.full(out_len, ord(" "), dtype=np.uint8)
    starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1])) if len(part) else np.zeros(0, dtype=np.int64)
    for k in range(3):  # at most three digits per byte
        sel = lengths > k
        out[starts[sel] + k] = flat[part[sel], k]
    return out.tobytes()


def _separated_chunks(path: Path, chunk: int | None = None) -> Iterable[tuple[int, np.ndarray]]:
    """(file offset, bytes) pieces of ``path`` that each end at a space or newline (or at the end of the file), so
    no symbol is cut in two; memory stays at one piece whatever the file size."""
    chunk = chunk or PARSE_CHUNK_BYTES
    offset, carry = 0, b""
    try:
        with open(path, "rb") as f:
            while True:
                block = f.read(chunk)
                data = carry + block
                if not block:
                    if data:
                        yield offset, np.frombuffer(data, dtype=np.uint8)
                    return
                cut = max(data.rfind(b" "), data.rfind(b"\n")) + 1
                if cut == 0:
                    carry = data
                    continue
                yield offset, np.frombuffer(data[:cut], dtype=np.uint8)
                offset += cut
                carry = data[cut:]
    except OSError as err:
        raise DataError(f"cannot read {path} ({err}).") from err


@dataclass(frozen=True)
class ParsedValues:
    """The symbol values of byte/character files in order, parsed one piece at a time on every pass over them:
    nothing is kept, so memory stays at a piece whatever the file size (the vocabulary and the encoding each read
    the files once more instead). ``parse(buf, file offset, path)`` turns a piece into values."""

    paths: tuple[Path, ...]
    parse: Callable[[np.ndarray, int, Path], np.ndarray]
    what: str = "reading"

    def __iter__(self) -> Iterator[np.ndarray]:
        progress = Progress(f"{self.what} {', '.join(p.name for p in self.paths)}", total_bytes(self.paths))
        for path in self.paths:
            for offset, buf in _separated_chunks(path):
                yield self.parse(buf, offset, path)
                progress.advance(len(buf))
        progress.finish()


def _all_values(path: Path, parse: Callable[[np.ndarray, int, Path], np.ndarray]) -> np.ndarray:
    parts = list(ParsedValues((Path(path),), parse))
    return _non_empty(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16), path)


def parse_decimal_bytes(path: Path, keep_newlines: bool = False) -> np.ndarray:
    """Decimal byte values of an enwik8-format file, in order; a newline becomes byte 10 only if ``keep_newlines``.

    The official pipeline reads line by line without ``<eos>``, so newline bytes are dropped.
    """
    return _all_values(path, partial(_parse_decimal_chunk, keep_newlines=keep_newlines))


def _parse_decimal_chunk(buf: np.ndarray, offset: int, path: Path, keep_newlines: bool) -> np.ndarray:
    digit = (buf >= 48) & (buf <= 57)
    sep = (buf == 32) | (buf == 10) | (buf == 13)
    if not np.all(digit | sep):
        pos = int(np.flatnonzero(~(digit | sep))[0])
        raise DataError(
            f"{path} is not in enwik8 format: byte offset {offset + pos} holds {bytes(buf[pos:pos + 1])!r}; expected "
            "decimal byte values separated by spaces. Re-create it from enwik8.zip (data.source=download prepares it)."
        )
    prev = np.concatenate(([False], digit[:-1]))
    nxt = np.concatenate((digit[1:], [False]))
    start = np.flatnonzero(digit & ~prev)
    end = np.flatnonzero(digit & ~nxt) + 1
    if np.any(end - start > 3):
        raise DataError(f"{path}: a number longer than 3 digits at byte {offset + int(start[np.argmax(end - start > 3)])}.")
    # value of each run: digits weighted by 10^(distance to the run end)
    value = np.zeros(len(start), dtype=np.int16)
    for k in range(3):
        pos = end - 1 - k
        ok = pos >= start
        value[ok] += (buf[pos[ok]].astype(np.int16) - 48) * 10**k
    if np.any(value > 255):
        raise DataError(f"{path}: value {int(value.max())} is not a byte (0-255); the file is corrupt.")
    if keep_newlines:
        nl = np.flatnonzero(buf == 10)
        order = np.argsort(np.concatenate((start, nl)), kind="stable")
        value = np.concatenate((value, np.full(len(nl), 10, dtype=np.int16)))[order]
    return value


def read_enwik8(root: Path, keep_newlines: bool = False, vocab: Vocab | None = None):
    """enwik8 ``{train,valid,test}.txt``; vocab = byte values seen in all three splits, by frequency, no specials.
    The splits' ids stream in pieces (:func:`materialize` makes arrays)."""
    return _encode_values(root, partial(_parse_decimal_chunk, keep_newlines=keep_newlines),
                          [str(v) for v in range(256)], vocab)


def _encode_values(root: Path, parse: Callable[[np.ndarray, int, Path], np.ndarray], names: list[str],
                   vocab: Vocab | None) -> tuple[Vocab, dict[str, Iterator[np.ndarray]]]:
    """Byte/char values -> ids, with a vocabulary built from all splits (one counting pass over the files) or the
    given one; each split's ids are a stream of pieces."""
    paths = {s: Path(root) / f"{s}.txt" for s in SPLITS}
    if vocab is None:
        vocab, table = build_value_vocab(ParsedValues(tuple(paths.values()), parse, "counting symbols of"),
                                         len(names), names)
    else:
        table = np.array([vocab.get(n, -1) for n in names], dtype=np.int32)

    def encode(path: Path) -> Iterator[np.ndarray]:
        n = 0
        for values in ParsedValues((path,), parse, "encoding"):
            ids = table[values]
            if len(ids) and ids.min() < 0:
                bad = names[int(values[int(np.argmin(ids))])]
                raise DataError(f"{path}: symbol {bad!r} is not in the given vocabulary; use the vocabulary this "
                                "corpus was tokenised with.")
            n += len(ids)
            yield ids
        _non_empty(np.zeros(n, dtype=np.int32), path)

    return vocab, {s: encode(p) for s, p in paths.items()}


# ---------------------------------------------------------------------------------------------- text8
TEXT8_ALPHABET = "_abcdefghijklmnopqrstuvwxyz"
_STRIPPED_TABLE = np.zeros(256, dtype=bool)
_STRIPPED_TABLE[list(b" \t\n\r\x0b\x0c")] = True  # the bytes bytes.strip() removes


def prepare_text8(root: Path, n_test: int = 5_000_000, archive: str = "text8.zip") -> None:
    """``text8.zip`` -> ``{train,valid,test}.txt`` with the 90M/5M/5M split, each part stripped, characters
    space-separated and ' ' written as '_' (the TXL ``prep_text8.py`` output), a piece at a time as the member
    streams out of the archive."""
    root = Path(root)
    with split_writers(root, SPLITS) as out:
        started: set[str] = set()  # splits whose leading whitespace is behind us
        held: dict[str, list[np.ndarray]] = {s: [] for s in SPLITS}  # whitespace that may be the part's end
        for split, part in member_splits(root / archive, "text8", _splits_of(n_test), PARSE_CHUNK_BYTES):
            kept = np.flatnonzero(~_STRIPPED_TABLE[part])
            if not len(kept):
                if split in started:
                    held[split].append(part)
                continue
            if split not in started:  # bytes.strip() at the part's start
                part = part[kept[0]:]
                kept -= kept[0]
            chars = np.concatenate([*held[split], part[: kept[-1] + 1]])
            held[split] = [part[kept[-1] + 1 :]]  # written only if more text follows: strip() at the part's end
            chars[chars == ord(" ")] = ord("_")
            text = np.full(2 * len(chars), ord(" "), dtype=np.uint8)
            text[1::2] = chars
            out[split].write(text[int(split not in started):].tobytes())  # " c" per character, the file's first bare
            started.add(split)


def parse_text8_chars(path: Path) -> np.ndarray:
    """Characters of a prepared text8 file (single characters separated by spaces), as byte values."""
    return _all_values(path, _parse_text8_chunk)


_TEXT8_ALLOWED = np.zeros(256, dtype=bool)
_TEXT8_ALLOWED[np.frombuffer(TEXT8_ALPHABET.encode(), dtype=np.uint8)] = True


def _parse_text8_chunk(buf: np.ndarray, offset: int, path: Path) -> np.ndarray:
    is_sep = (buf == 32) | (buf == 10)
    lone = ~is_sep & np.concatenate(([True], is_sep[:-1])) & np.concatenate((is_sep[1:], [True]))
    bad = ~is_sep & (~lone | ~_TEXT8_ALLOWED[buf])
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{path} is not in prepared text8 format at byte {offset + pos} ({bytes(buf[pos:pos + 8])!r}): expected "
            "single characters a-z or '_' separated by spaces. Re-create it from text8.zip (data.source=download)."
        )
    return buf[~is_sep].astype(np.int16)


def read_text8(root: Path, vocab: Vocab | None = None):
    """text8 ``{train,valid,test}.txt``: 27 symbols ('_' for space), no ``<eos>``, frequency order; the splits' ids
    stream in pieces."""
    return _encode_values(root, _parse_text8_chunk, [chr(v) for v in range(256)], vocab)


# ---------------------------------------------------------------------------------------------- One Billion Word
LM1B_TRAIN_DIR = "training-monolingual.tokenized.shuffled"
LM1B_HELDOUT_DIR = "heldout-monolingual.tokenized.shuffled"
LM1B_VOCAB = "1b_word_vocab.txt"
LM1B_TRAIN_SHARDS = tuple(f"{LM1B_TRAIN_DIR}/news.en-{i:05d}-of-00100" for i in range(1, 100))
LM1B_HELDOUT = f"{LM1B_HELDOUT_DIR}/news.en.heldout-00000-of-00050"
LM1B_CONVENTIONS = ("pytorch", "tf", "eos")
# MoS 1B Word (Dai thesis App. A.3): valid heldout-00 and -10, test heldout-20, -30 and -40
LM1B_MOS_VALID = tuple(f"{LM1B_HELDOUT_DIR}/news.en.heldout-{i:05d}-of-00050" for i in (0, 10))
LM1B_MOS_TEST = tuple(f"{LM1B_HELDOUT_DIR}/news.en.heldout-{i:05d}-of-00050" for i in (20, 30, 40))


def read_lm1b_vocab(path: Path) -> Vocab:
    """``1b_word_vocab.txt``: one symbol (first field) per line, in file order; ``<UNK>`` takes OOV words."""
    symbols = []
    for block in _read_lines(path):
        symbols.extend(line.split()[0] for line in block if line.strip())
    if not symbols:
        raise DataError(f"{path} is empty: the LM1B vocabulary file lists no symbols. Download it again.")
    for required in ("<S>", "<UNK>"):
        if required not in symbols:
            raise DataError(f"{path} lacks the symbol {required}; it is not the LM1B vocabulary file.")
    return Vocab(symbols, unk="<UNK>")


def lm1b_stream(sentences: Sequence[str], vocab: Vocab, convention: str, where: str, opening: bool) -> np.ndarray:
    """Wrap sentences as ``<S> w1..wn <S>``.

    pytorch (default): consecutive sentences share one ``<S>`` boundary, so each sentence contributes its words and
    one closing ``<S>`` as targets and ``<S> -> <S>`` is never scored. ``opening`` writes the very first ``<S>``.
    tf: the blocks are concatenated, which also scores each closing-to-opening ``<S> -> <S>``.
    eos: MoS / AWD-LSTM ``data.py``, ``w1..wn <eos>`` per sentence and no opening symbol.
    """
    if convention == "eos":
        tokens = (f" {EOS} ".join(sentences) + f" {EOS}").split()
    elif convention == "pytorch":
        tokens = (" <S> ".join(sentences) + " <S>").split()
        if opening:
            tokens.insert(0, "<S>")
    elif convention == "tf":
        tokens = " ".join(f"<S> {s} <S>" for s in sentences).split()
    else:
        raise DataError(f"lm1b convention {convention!r} is not one of {LM1B_CONVENTIONS}.")
    return vocab.encode(tokens, where=where)


LM1B_MARKERS = {"eos": (EOS, 0, 1), "pytorch": ("<S>", 0, 1), "tf": ("<S>", 1, 1)}  # marker, before, after
INDEX32_MAX = np.iinfo(np.int32).max  # a shard's positions up to this are indexed with int32


@dataclass(frozen=True)
class ShardEncoder:
    """A piece of an LM1B shard (:func:`line_pieces`: ~1 MB, whole lines) encoded in file order: (whether it ends
    its shard, its bytes, ids, words per sentence). A worker's job; the parent joins a shard's pieces, shuffles its
    sentences and adds the boundary symbols (:func:`lm1b_layout`). Pieces, not whole 42 MB shards: progress is
    logged within a shard (a shard is ~5 CPU seconds) and a worker holds a piece's word strings (~10 MB)."""

    vocab: Vocab
    lower: bool = False

    def __call__(self, piece: Piece) -> tuple[bool, int, np.ndarray, np.ndarray]:
        # the lines text-mode reading gives (\n, \r\n and \r end a line), as the held-out shards are read
        lines = decode_piece(piece).replace("\r\n", "\n").replace("\r", "\n").split("\n")
        words = [s.split() for s in _block_sentences(lines, self.lower)]
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        ids = self.vocab.encode([w for sentence in words for w in sentence], where=piece.path)
        return piece.last, len(piece.data), ids, lengths


def _shard_pieces(paths: Sequence[Path]) -> Iterator[Piece]:
    for path in paths:
        if path.stat().st_size == 0:
            raise _no_sentences(path)
        yield from line_pieces(path)


def lm1b_layout(ids: np.ndarray, lengths: np.ndarray, order: np.ndarray, marker: int, convention: str,
                opening: bool) -> np.ndarray:
    """:func:`lm1b_stream` of the sentences taken in ``order`` from ``ids`` (concatenated, ``lengths`` words each),
    vectorised: every position that is not a word holds the boundary ``marker``. The per-word index arrays are int32
    while the shard fits (a full-size shard's ~8M words: 0.23 -> 0.13 GiB at the peak), int64 past 2**31 - 1."""
    _, before, after = LM1B_MARKERS[convention]
    lead = int(opening and convention == "pytorch")
    seg = lengths[order]
    n_words = int(seg.sum())
    size = lead + n_words + len(seg) * (before + after)
    index = np.int32 if max(size, len(ids)) <= INDEX32_MAX else np.int64
    laid = np.cumsum(seg) - seg  # each sentence's first word among the words laid out
    block_start = lead + laid + np.arange(len(seg)) * (before + after)
    source = np.repeat(((np.cumsum(lengths) - lengths)[order] - laid).astype(index), seg)
    source += np.arange(n_words, dtype=index)
    into = np.repeat((block_start + before - laid).astype(index), seg)
    into += np.arange(n_words, dtype=index)
    out = np.full(size, marker, dtype=np.int32)
    out[into] = ids[source]
    return out


def _block_sentences(block: list[str], lower: bool) -> list[str]:
    return [s.lower() if lower else s for s in (line.strip() for line in block) if s]


def _sentences(path: Path, lower: bool = False) -> list[str]:
    out: list[str] = []
    for block in _read_lines(path):
        out.extend(_block_sentences(block, lower))
    if not out:
        raise _no_sentences(path)
    return out


def _no_sentences(path: Path) -> DataError:
    return DataError(f"{path} holds no sentences: the shard is empty. Replace it with the real file.")


def build_lm1b_top_vocab(root: Path, size: int, train_shards: Sequence[str] = LM1B_TRAIN_SHARDS,
                         num_proc: int = 1) -> Vocab:
    """MoS 1B vocabulary: ``<eos>``, ``<unk>`` and the ``size - 2`` most frequent lower-cased training words, so
    that it has exactly ``size`` symbols (Dai thesis App. A.3: "the top 100K tokens", V = 100,000)."""
    specials = (EOS, "<unk>")
    if size <= len(specials):
        raise DataError(f"lm1b vocab_size={size} leaves no room for words; use more than {len(specials)}.")
    return build_word_vocab([Path(root) / s for s in train_shards], specials=specials, unk="<unk>",
                            max_size=size - len(specials), lower=True, num_proc=num_proc)


def read_lm1b(
    root: Path,
    convention: str = "pytorch",
    shuffle_seed: int = 0,
    train_shards: Sequence[str] = LM1B_TRAIN_SHARDS,
    valid_shards: Sequence[str] = (LM1B_HELDOUT,),
    test_shards: Sequence[str] = (LM1B_HELDOUT,),
    vocab: Vocab | None = None,
    lower: bool = False,
    num_proc: int = 1,
):
    """LM1B: training shards (shard order and the sentences in each shard shuffled with ``shuffle_seed``), and
    held-out shards for valid and test; by default ``heldout-00000`` as both and the vocabulary of
    ``1b_word_vocab.txt`` (TXL ``getdata.sh``). MoS passes its own shards, a top-K ``vocab`` and ``lower``.

    ``train`` is an iterator of per-shard id arrays (see :func:`materialize`), the shards encoded over ``num_proc``
    processes (the same arrays for any count); valid and test are arrays.
    """
    if convention not in LM1B_CONVENTIONS:
        raise DataError(f"lm1b convention {convention!r} is not one of {LM1B_CONVENTIONS}.")
    root = Path(root)
    missing = [s for s in (*train_shards, *valid_shards, *test_shards) if not (root / s).is_file()]
    if missing:
        raise DataError(f"LM1B shard {root / missing[0]} is missing ({len(missing)} missing); re-extract them.")
    vocab = read_lm1b_vocab(root / LM1B_VOCAB) if vocab is None else vocab

    def train_stream() -> Iterator[np.ndarray]:
        """One shard at a time (0.8B tokens do not need to sit in memory twice)."""
        rng = np.random.default_rng(shuffle_seed)
        paths = [root / train_shards[int(k)] for k in rng.permutation(len(train_shards))]
        progress = Progress(f"encoding {len(paths)} LM1B training shards", total_bytes(paths))
        marker = int(vocab.encode([LM1B_MARKERS[convention][0]], where=str(root))[0])
        k, ids, lengths = 0, [], []
        for last, n_bytes, piece_ids, piece_lengths in ordered_map(ShardEncoder(vocab, lower), _shard_pieces(paths),
                                                                   num_proc):
            ids.append(piece_ids)
            lengths.append(piece_lengths)
            progress.advance(n_bytes)
            if last:
                shard_lengths = np.concatenate(lengths)
                if not len(shard_lengths):  # blank lines only
                    raise _no_sentences(paths[k])
                # the same draws as shuffling each shard's sentence list in shard order
                yield lm1b_layout(np.concatenate(ids), shard_lengths, rng.permutation(len(shard_lengths)), marker,
                                  convention, opening=k == 0)
                k, ids, lengths = k + 1, [], []
        progress.finish()

    def heldout(shards: Sequence[str]) -> np.ndarray:
        sents = [s for shard in shards for s in _sentences(root / shard, lower)]
        return lm1b_stream(sents, vocab, convention, ", ".join(str(root / s) for s in shards), opening=True)

    valid = heldout(valid_shards)
    test = valid.copy() if tuple(test_shards) == tuple(valid_shards) else heldout(test_shards)
    return vocab, {"train": train_stream(), "valid": valid, "test": test}


def materialize(ids: np.ndarray | Iterable[np.ndarray]) -> np.ndarray:
    """A split as one array, whether the reader returned an array or a stream of chunks."""
    return ids if isinstance(ids, np.ndarray) else np.concatenate(list(ids))
