"""Plain-text pretraining corpora (BooksCorpus/Wikipedia style, spec §3.1) tokenised once into memmaps.

On-disk format: shards of UTF-8 text matched by a glob, one sentence per line, an empty line ends a document.
Shards are read line by line (one shard in memory at a time) and encoded with SentencePiece; the token stream and
the alternating sentence-id stream of each split are cached as flat memmaps keyed by a hash of (files, tokenizer,
settings). Sentence ids follow the official rule: a text line gets id s and s flips; an empty line (with
``use_eod``) flips s, emits ``<eod>`` with id s, and flips s again, so ``<eod>`` is glued to the last sentence. A
shard whose first id equals the previous shard's last id is inverted, so shard boundaries are sentence boundaries.
Documents are concatenated into one stream, so a document shorter than a segment simply shares its segment with
the next one (no padding in pretraining).

The offline corpora (``pretrain_mini`` and its held-out variants) are built in :mod:`genlab.data.pretrain.minis`.
"""

from __future__ import annotations

import glob as globlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from genlab.data.pretrain.minis import MINI_CORPORA
from genlab.data.pretrain.xlnet_examples import EOD_ID
from genlab.data.sources.tiers import DEFAULT_CACHE, locate
from genlab.data.tokenizers.xlnet_pieces import PieceTokenizer, train_tokenizer
from genlab.errors import DataError
from genlab.utils import atomic_write, stable_hash

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


def _encode_shard(path: Path, tok: PieceTokenizer, use_eod: bool) -> tuple[np.ndarray, np.ndarray]:
    ids: list[int] = []
    sids: list[int] = []
    s = True
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                if use_eod:
                    s = not s
                    ids.append(EOD_ID)
                    sids.append(s)
                    s = not s
                continue
            piece_ids = tok.encode(line)
            if not piece_ids:
                continue
            ids.extend(piece_ids)
            sids.extend([s] * len(piece_ids))
            s = not s
    return np.asarray(ids, dtype=np.int32), np.asarray(sids, dtype=np.uint8)


def tokenize_split(files: list[Path], tok: PieceTokenizer, cache: Path, use_eod: bool = True,
                   shard_seed: int = 0) -> TokenStream:
    """Encode ``files`` (shard order shuffled with ``shard_seed``) once; later calls open the cached memmaps.
    ``tok`` is any tokenizer with ``encode``, ``identity`` and ``lower`` (XLNet pieces, GPT's BPE)."""
    order = [files[i] for i in np.random.default_rng(shard_seed).permutation(len(files))]
    key = stable_hash([(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in order], tok.identity, tok.lower,
                      use_eod, "v1")
    tok_path, sid_path, meta_path = cache / f"{key}.tokens.i32", cache / f"{key}.sent.u8", cache / f"{key}.json"
    if not meta_path.is_file():
        total, last = 0, None
        with atomic_write(tok_path) as ft, atomic_write(sid_path) as fs:
            for shard in order:
                ids, sids = _encode_shard(shard, tok, use_eod)
                if not len(ids):
                    continue
                if last is not None and sids[0] == last:  # keep a sentence boundary between shards
                    sids = 1 - sids
                ft.write(ids.tobytes())
                fs.write(sids.tobytes())
                total, last = total + len(ids), int(sids[-1])
        with atomic_write(meta_path, "w") as f:
            json.dump({"n_tokens": total, "files": [str(f) for f in order], "tokenizer": tok.identity}, f)
    n = json.loads(meta_path.read_text())["n_tokens"]
    if n == 0:
        raise DataError(f"the corpus files {', '.join(map(str, files[:3]))}... contain no text. {FORMAT_HELP}")
    return TokenStream(np.memmap(tok_path, dtype=np.int32, mode="r", shape=(n,)),
                       np.memmap(sid_path, dtype=np.uint8, mode="r", shape=(n,)))


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
) -> PretrainCorpus:
    """``corpus=`` one of ``MINI_CORPORA`` (offline) or ``text`` (``path`` = your shards).
    ``tokenizer=None`` trains a SentencePiece model of ``vocab_size`` pieces on the training shards and caches it."""
    cache = Path(cache_dir).expanduser() if cache_dir else DEFAULT_CACHE
    root, train_files, valid_files = corpus_files(corpus, path, cache, train_glob, valid_glob)
    work = cache / "pretrain" / stable_hash(str(root.resolve()))
    if tokenizer is None:
        key = stable_hash([(str(f), f.stat().st_size) for f in train_files], vocab_size, lower)
        model = work / f"spm_{key}.model"
        if not model.is_file():
            train_tokenizer(train_files, model.with_suffix(""), vocab_size)
        tokenizer = str(model)
    tok = PieceTokenizer(tokenizer, lower)
    splits = {"train": tokenize_split(train_files, tok, work, use_eod, shard_seed)}
    if valid_files:
        splits["valid"] = tokenize_split(valid_files, tok, work, use_eod, shard_seed)
    return PretrainCorpus(corpus if corpus != "text" else str(root), tok, splits)
