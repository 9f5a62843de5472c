"""Plain-text pretraining corpora (BooksCorpus/Wikipedia style, XLNet paper §3.1) tokenised once into memmaps.

On-disk format: shards of UTF-8 text matched by a glob, one sentence per line, an empty line ends a document.
Shards are read in bounded line-aligned pieces, encoded with SentencePiece over ``num_proc`` processes and appended
to the cache, so memory does not grow with the file size; the token stream and the alternating sentence-id stream
of each split are a cache entry (:mod:`genlab.data.text.cache_entry`) keyed by the files' paths relative to the
corpus folder, sizes and mtimes, the tokenizer and the settings. Sentence ids follow the official rule: a text line gets id s and s flips; an empty line (with
``use_eod``) flips s, emits ``<eod>`` with id s, and flips s again, so ``<eod>`` is glued to the last sentence. A
shard whose first id equals the previous shard's last id is inverted, so shard boundaries are sentence boundaries.
Documents are concatenated into one stream, so a document shorter than a segment simply shares its segment with
the next one (no padding in pretraining).

The offline corpora (``pretrain_mini`` and its held-out variants) are built in :mod:`genlab.data.pretrain.minis`.
"""

from __future__ import annotations

import glob as globlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from genlab.data.pretrain.minis import MINI_CORPORA
from genlab.data.pretrain.xlnet_examples import EOD_ID
from genlab.data.sources.tiers import DEFAULT_CACHE, locate
from genlab.data.text.cache_entry import build_entry, verified_meta
from genlab.data.text.chunks import (
    Piece,
    check_not_empty,
    decode_piece,
    line_pieces,
    sniff_text,
    split_lines,
    total_bytes,
)
from genlab.data.text.parallel import ordered_map, resolve_num_proc
from genlab.data.text.progress import Progress, heartbeat
from genlab.data.tokenizers.xlnet_pieces import PieceTokenizer, train_tokenizer
from genlab.errors import DataError
from genlab.utils import stable_hash

PRETRAIN_CACHE = "pretrain"  # folder under the cache: tokenizer models and token entries of every corpus
FORMAT_HELP = (
    "A pretraining corpus is a directory of UTF-8 text shards (one sentence per line, an empty line between "
    "documents)."
)


# ------------------------------------------------------------------------------------------------ corpus files
# A preset's _mini twin shrinks model, batch and corpus together; `data=pretrain_mini` alone keeps the full preset's
# model and batch (8192 sequences for xlnet_base), which no laptop holds.
OFFLINE_HINT = ("or try the preset's offline twin, experiment=<preset>_mini, e.g. "
                "python train.py experiment=xlnet_base_mini.")


def find_shards(root: Path, pattern: str, what: str) -> list[Path]:
    files = sorted(Path(p) for p in globlib.glob(str(root / pattern), recursive=True) if Path(p).is_file())
    if not files:
        raise DataError(f"{what}: no file under {root} matches '{pattern}'. {FORMAT_HELP} "
                        f"Fix data.path= / the glob, {OFFLINE_HINT}")
    if all(f.stat().st_size == 0 for f in files):
        raise DataError(f"{what}: every file matching {root / pattern} is empty. {FORMAT_HELP}")
    return files


def corpus_root(path: str | None, experiment_hint: str = "") -> Path:
    """The user's corpus directory (``data.path``), with one clear error when it is unset or missing."""
    if not path:
        raise DataError(
            f"data.path is not set: this preset {experiment_hint}pretrains on your own corpus. {FORMAT_HELP} "
            "Point at it with data.path=/your/corpus (shards in train/ and valid/ by default; change with "
            f"data.train_glob= and data.valid_glob=), {OFFLINE_HINT}"
        )
    root = Path(path).expanduser()
    if not root.is_dir():
        raise DataError(f"data.path={path} is not a directory. {FORMAT_HELP} "
                        f"Fix data.path=, {OFFLINE_HINT}")
    return root


# ------------------------------------------------------------------------------------------------ token streams
@dataclass
class TokenStream:
    """One split: ``tokens`` (int32) and ``sent_ids`` (uint8, alternating per sentence) as read-only memmaps."""

    tokens: np.ndarray
    sent_ids: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)


def files_identity(files: list[Path]) -> list[tuple[str, int, int]]:
    """(path relative to the files' common folder, size, mtime_ns): the same files give the same identity whatever
    the folder is called (a symlink, a relative path, a trailing slash); an edited or replaced file changes it."""
    base = Path(os.path.commonpath([str(Path(f).parent) for f in files])) if files else Path()
    return [(Path(f).relative_to(base).as_posix(), Path(f).stat().st_size, Path(f).stat().st_mtime_ns) for f in files]


@dataclass
class _Encoded:
    ids: np.ndarray
    sent_ids: np.ndarray  # as if the piece started with sentence id 1
    odd_flips: bool  # the piece flips the sentence id an odd number of times
    first: bool  # the piece starts its shard
    n_bytes: int


@dataclass(frozen=True)
class ShardEncoder:
    """Ids and sentence ids of one piece of a shard (the work of one process)."""

    tok: PieceTokenizer
    use_eod: bool

    def __call__(self, piece: Piece) -> _Encoded:
        ids: list[int] = []
        runs: list[tuple[bool, int]] = []
        s = True
        for line in split_lines(decode_piece(piece)):
            line = line.strip()
            if not line:
                if self.use_eod:
                    ids.append(EOD_ID)
                    runs.append((not s, 1))  # <eod> takes the flipped id and s flips back
                continue
            piece_ids = self.tok.encode(line)
            if piece_ids:
                ids.extend(piece_ids)
                runs.append((s, len(piece_ids)))
                s = not s
        sids = np.repeat(np.array([v for v, _ in runs], dtype=np.uint8), [n for _, n in runs])
        return _Encoded(np.asarray(ids, dtype=np.int32), sids, not s, piece.offset == 0, len(piece.data))


def tokenize_split(files: list[Path], tok: PieceTokenizer, cache: Path, use_eod: bool = True,
                   shard_seed: int = 0, num_proc: int = 1) -> TokenStream:
    """Encode ``files`` (shard order shuffled with ``shard_seed``) once, over ``num_proc`` processes; later calls
    open the cached memmaps. ``tok`` is any tokenizer with ``encode``, ``identity`` and ``lower`` (XLNet pieces,
    GPT's BPE). The cache is byte-identical whatever ``num_proc``."""
    check_not_empty(files)
    order = [files[i] for i in np.random.default_rng(shard_seed).permutation(len(files))]
    key = stable_hash(files_identity(order), tok.identity, tok.lower, use_eod, "v2")
    entry = Path(cache) / f"tokens-{key}"
    meta = verified_meta(entry)
    if meta is None:
        build_entry(entry, lambda folder: _write_split(folder, order, tok, use_eod, num_proc))
        meta = verified_meta(entry)
    n = meta["n_tokens"]
    if n == 0:
        raise DataError(f"the corpus files {', '.join(map(str, files[:3]))}... contain no text. {FORMAT_HELP}")
    return TokenStream(np.memmap(entry / "tokens.i32", dtype=np.int32, mode="r", shape=(n,)),
                       np.memmap(entry / "sent.u8", dtype=np.uint8, mode="r", shape=(n,)))


def _write_split(folder: Path, order: list[Path], tok: PieceTokenizer, use_eod: bool, num_proc: int) -> dict:
    """Append each piece's ids to the entry's files as it comes back, in shard order. Sentence ids continue across
    pieces, and a shard whose first id equals the previous shard's last id is inverted (a boundary stays one)."""
    progress = Progress(f"tokenising {len(order)} file(s)", total_bytes(order))
    total, last = 0, None
    start_s, invert = True, False
    pieces = (piece for shard in order for piece in line_pieces(shard))
    with open(folder / "tokens.i32", "wb") as ft, open(folder / "sent.u8", "wb") as fs:
        for out in ordered_map(ShardEncoder(tok, use_eod), pieces, num_proc):
            if out.first:
                start_s, invert = True, None
            if len(out.ids):
                sids = out.sent_ids if start_s else 1 - out.sent_ids
                if invert is None:
                    invert = last is not None and int(sids[0]) == last
                sids = 1 - sids if invert else sids
                ft.write(out.ids.tobytes())
                fs.write(sids.tobytes())
                total, last = total + len(out.ids), int(sids[-1])
            start_s ^= out.odd_flips
            progress.advance(out.n_bytes)
    progress.finish()
    return {"n_tokens": total, "files": [f for f, _, _ in files_identity(order)], "tokenizer": tok.identity}


@dataclass
class PretrainCorpus:
    name: str
    tokenizer: PieceTokenizer
    splits: dict[str, TokenStream]

    def identity(self) -> dict:
        return {"corpus": self.name, "tokenizer": self.tokenizer.identity, "vocab_size": self.tokenizer.vocab_size}


def corpus_files(corpus: str, path: str | None, cache: Path, train_glob: str, valid_glob: str | None
                 ) -> tuple[Path, list[Path], list[Path]]:
    """(root, training shards, held-out shards) of ``corpus``: a mini of ``MINI_CORPORA`` (built offline into
    ``cache``) or ``text`` (the user's folder ``path``, shards chosen by the globs)."""
    if corpus in MINI_CORPORA:
        root = locate(MINI_CORPORA[corpus], "mini", None, cache)
        train_glob, valid_glob = "train/*.txt", "valid/*.txt"
    elif corpus == "text":
        root = corpus_root(path)
    else:
        raise DataError(f"data.corpus={corpus!r} is unknown; use 'text' (with data.path=) or one of "
                        f"{sorted(MINI_CORPORA)}.")
    train_files = find_shards(root, train_glob, f"corpus {root} (data.train_glob)")
    valid_files = find_shards(root, valid_glob, f"corpus {root} (data.valid_glob)") if valid_glob else []
    return root, [f for f in train_files if f not in set(valid_files)], valid_files


def load_pretrain_corpus(
    corpus: str = "text",
    path: str | None = None,
    cache_dir: str | None = None,
    train_glob: str = "**/*.txt",
    valid_glob: str | None = None,
    tokenizer: str | None = None,
    vocab_size: int = 32000,
    lower: bool = False,
    use_eod: bool = True,
    shard_seed: int = 0,
    num_proc: int | None = None,
) -> PretrainCorpus:
    """``corpus=`` one of ``MINI_CORPORA`` (offline) or ``text`` (``path`` = your shards).
    ``tokenizer=None`` trains a SentencePiece model of ``vocab_size`` pieces on the training shards and caches it.
    ``num_proc`` processes tokenise (None: the available cores, at most 8)."""
    cache = Path(cache_dir).expanduser() if cache_dir else DEFAULT_CACHE
    root, train_files, valid_files = corpus_files(corpus, path, cache, train_glob, valid_glob)
    procs = resolve_num_proc(num_proc)
    work = cache / PRETRAIN_CACHE
    if tokenizer is None:
        model = work / f"spm_{stable_hash(files_identity(train_files), vocab_size, lower)}.model"
        if not model.is_file():
            sniff_text(train_files)
            with heartbeat(f"training a SentencePiece tokenizer on {len(train_files)} file(s)"):
                train_tokenizer(train_files, model.with_suffix(""), vocab_size)
        tokenizer = str(model)
    tok = PieceTokenizer(tokenizer, lower)
    splits = {"train": tokenize_split(train_files, tok, work, use_eod, shard_seed, procs)}
    if valid_files:
        splits["valid"] = tokenize_split(valid_files, tok, work, use_eod, shard_seed, procs)
    return PretrainCorpus(corpus if corpus != "text" else str(root), tok, splits)
