"""Plain-text pretraining corpora (BooksCorpus/Wikipedia style, spec §3.1) tokenised once into memmaps.

On-disk format: shards of UTF-8 text matched by a glob, one sentence per line, an empty line ends a document.
Shards are read line by line (one shard in memory at a time) and encoded with SentencePiece; the token stream and
the alternating sentence-id stream of each split are cached as flat memmaps keyed by a hash of (files, tokenizer,
settings). Sentence ids follow the official rule: a text line gets id s and s flips; an empty line (with
``use_eod``) flips s, emits ``<eod>`` with id s, and flips s again, so ``<eod>`` is glued to the last sentence. A
shard whose first id equals the previous shard's last id is inverted, so shard boundaries are sentence boundaries.
Documents are concatenated into one stream, so a document shorter than a segment simply shares its segment with
the next one (no padding in pretraining).

``pretrain_mini`` writes the Wikipedia excerpt shipped in the gensim wheel in this same format.
"""

from __future__ import annotations

import glob as globlib
import json
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from genlab.data.sentencepiece_tokenizer import SentencePieceTokenizer
from genlab.data.sources import DEFAULT_CACHE, DatasetSpec, locate
from genlab.data.xlnet_examples import EOD_ID, word_start_table
from genlab.errors import DataError
from genlab.utils import atomic_write, stable_hash

CONTROL_SYMBOLS = ("<cls>", "<sep>", "<pad>", "<mask>", "<eod>")  # ids 3..7 after <unk>, <s>, </s>
USER_SYMBOLS = ("<eop>", ".", "(", ")", '"', "-", "–", "£", "€")  # <eop> = 8
FORMAT_HELP = (
    "A pretraining corpus is a directory of UTF-8 text shards (one sentence per line, an empty line between "
    "documents)."
)


# ------------------------------------------------------------------------------------------------ tokenizer
def preprocess_text(text: str, lower: bool = False) -> str:
    """Official normalisation: collapse whitespace, `` and '' -> ", NFKD and drop combining accents."""
    text = " ".join(text.strip().split()).replace("``", '"').replace("''", '"')
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return text.lower() if lower else text


class PieceTokenizer:
    """XLNet view of a SentencePiece model: fixed special ids, official preprocessing, the "2000," split rule and
    the word-start table of the span sampler."""

    def __init__(self, model_file: str | os.PathLike, lower: bool = False):
        self.model_file, self.lower = Path(model_file), lower
        if not self.model_file.is_file():
            raise DataError(f"tokenizer model {self.model_file} does not exist; set data.tokenizer= to a .model file "
                            "or null to train one on the corpus.")
        self.sp = SentencePieceTokenizer(self.model_file, required_symbols=(*CONTROL_SYMBOLS, "<eop>"))
        for i, sym in enumerate((*CONTROL_SYMBOLS, "<eop>"), start=3):
            if self.sp.id_to_piece(i) != sym:
                raise DataError(f"tokenizer {self.model_file}: id {i} is {self.sp.id_to_piece(i)!r}, expected {sym!r}; "
                                "XLNet needs <unk> <s> </s> <cls> <sep> <pad> <mask> <eod> <eop> as ids 0..8.")
        self.pieces = [self.sp.id_to_piece(i) for i in range(len(self.sp))]
        self.is_word_start = word_start_table(self.pieces)
        self.identity = self.sp.fingerprint()[:16]

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def encode(self, text: str) -> list[int]:
        pieces = self.sp.encode_pieces(preprocess_text(text, self.lower))
        out: list[str] = []
        for p in pieces:  # "2000," -> "2000" + "," (official encode_pieces)
            if len(p) > 1 and p[-1] == "," and p[-2].isdigit():
                sub = self.sp.encode_pieces(p[:-1].replace("▁", ""))
                if p[0] != "▁" and sub and sub[0][0] == "▁":
                    sub = sub[1:] if len(sub[0]) == 1 else [sub[0][1:]] + sub[1:]
                out.extend(sub)
                out.append(",")
            else:
                out.append(p)
        return [self.sp.piece_to_id(p) for p in out]


def train_tokenizer(files: list[Path], model_prefix: Path, vocab_size: int, max_sentences: int = 1_000_000) -> Path:
    """Unigram SentencePiece with the XLNet control/user symbols and special ids (spec §3.1), trained on ``files``."""
    model = Path(f"{model_prefix}.model")
    SentencePieceTokenizer.train(
        files, model, vocab_size, "unigram", user_defined_symbols=USER_SYMBOLS, control_symbols=CONTROL_SYMBOLS,
        character_coverage=0.99995, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, input_sentence_size=max_sentences,
        shuffle_input_sentence=True, hard_vocab_limit=False, normalization_rule_name="identity",
    )
    return model


# ------------------------------------------------------------------------------------------------ corpus files
def find_shards(root: Path, pattern: str, what: str) -> list[Path]:
    files = sorted(Path(p) for p in globlib.glob(str(root / pattern), recursive=True) if Path(p).is_file())
    if not files:
        raise DataError(f"{what}: no file under {root} matches '{pattern}'. {FORMAT_HELP} "
                        "Fix data.path= / the glob, or try the offline stand-in with data=pretrain_mini.")
    if all(f.stat().st_size == 0 for f in files):
        raise DataError(f"{what}: every file matching {root / pattern} is empty. {FORMAT_HELP}")
    return files


def corpus_root(path: str | None, experiment_hint: str = "") -> Path:
    """The user's corpus directory (``data.path``), with one clear error when it is unset or missing."""
    if not path:
        raise DataError(
            f"data.path is not set: this preset {experiment_hint}pretrains on your own corpus. {FORMAT_HELP} "
            "Point at it with data.path=/your/corpus (shards in train/ and valid/ by default; change with "
            "data.train_glob= and data.valid_glob=), "
            "or try the offline stand-in with data=pretrain_mini."
        )
    root = Path(path).expanduser()
    if not root.is_dir():
        raise DataError(f"data.path={path} is not a directory. {FORMAT_HELP} "
                        "Fix data.path=, or try the offline stand-in with data=pretrain_mini.")
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
    """Encode ``files`` (shard order shuffled with ``shard_seed``) once; later calls open the cached memmaps."""
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


# ------------------------------------------------------------------------------------------------ offline mini
MINI_TRAIN_SHARDS = 8
MINI_FILES = tuple(f"train/wiki_{k:02d}.txt" for k in range(MINI_TRAIN_SHARDS)) + ("valid/wiki_00.txt",)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(paragraph: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(paragraph) if s.strip()]


def build_pretrain_mini(root: Path, drop: frozenset[str] = frozenset()) -> None:
    """Every 20th article goes to valid, the rest round-robin over the train shards; one sentence per line; the
    sentences in ``drop`` are left out."""
    from genlab.data.wiki_excerpt import iter_articles

    docs: dict[str, list[str]] = {f: [] for f in MINI_FILES}
    for k, art in enumerate(iter_articles()):
        lines = [s for para in art.paragraphs() for s in split_sentences(para) if s not in drop]
        if not lines:
            continue
        name = MINI_FILES[-1] if k % 20 == 19 else MINI_FILES[k % MINI_TRAIN_SHARDS]
        docs[name].append("\n".join(lines) + "\n")
    for name, texts in docs.items():
        with atomic_write(root / name, "w") as f:
            f.write("\n".join(texts))


def cloze_eval_sentences() -> frozenset[str]:
    """Every sentence of the cloze RACE mini's dev and test articles and of the cloze SQuAD minis' dev paragraphs.
    Those minis blank words of these very sentences, and they come from the same excerpt as ``pretrain_mini``."""
    from genlab.data.finetune_minis import squad_cloze_data
    from genlab.data.race_mini import race_cloze_articles

    texts = [obj["article"] for _, split, obj in race_cloze_articles() if split != "train"]
    texts += [p["context"] for art in squad_cloze_data(with_impossible=False)[1] for p in art["paragraphs"]]
    return frozenset(s for text in texts for s in split_sentences(text))


PRETRAIN_MINI = DatasetSpec(
    name="pretrain_mini", files=MINI_FILES, build_mini=build_pretrain_mini, mini_version="1",
    notes="106 Wikipedia articles from the gensim test data, BooksCorpus/Wikipedia plain-text format",
)
# For pretrain-then-finetune on the cloze minis: a model pretrained on pretrain_mini has read their test answers.
PRETRAIN_MINI_HELDOUT = DatasetSpec(
    name="pretrain_mini_heldout", files=MINI_FILES, mini_version="1",
    build_mini=lambda root: build_pretrain_mini(root, drop=cloze_eval_sentences()),
    notes="pretrain_mini without the sentences of the cloze RACE/SQuAD minis' dev and test texts",
)
RACE_TAPT_FILE = "train/race_mini_train.txt"


def build_race_mini_tapt(root: Path) -> None:
    """``pretrain_mini_heldout`` plus one shard of the cloze RACE mini's training articles, each followed by its
    questions (blank ``_``; no options, no answers): task-adaptive pretraining text. An article holding a sentence of
    another cloze mini's dev or test text is left out, so the corpus stays held out for every cloze mini."""
    from genlab.data.race_mini import race_cloze_articles

    drop = cloze_eval_sentences()
    build_pretrain_mini(root, drop)
    docs = []
    for _, split, obj in race_cloze_articles():
        sentences = split_sentences(obj["article"])
        if split == "train" and drop.isdisjoint(sentences):
            docs.append("\n".join(sentences + obj["questions"]) + "\n")
    with atomic_write(root / RACE_TAPT_FILE, "w") as f:
        f.write("\n".join(docs))


RACE_MINI_TAPT = DatasetSpec(
    name="race_mini_tapt", files=(*MINI_FILES, RACE_TAPT_FILE), build_mini=build_race_mini_tapt, mini_version="1",
    notes="pretrain_mini_heldout + the cloze RACE mini's training articles with their questions (no answers)",
)
MINI_CORPORA = {spec.name: spec for spec in (PRETRAIN_MINI, PRETRAIN_MINI_HELDOUT, RACE_MINI_TAPT)}


@dataclass
class PretrainCorpus:
    name: str
    tokenizer: PieceTokenizer
    splits: dict[str, TokenStream]

    def identity(self) -> dict:
        return {"corpus": self.name, "tokenizer": self.tokenizer.identity, "vocab_size": self.tokenizer.vocab_size}


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
    train_files = [f for f in train_files if f not in set(valid_files)]
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
