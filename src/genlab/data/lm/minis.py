"""Offline minis of the language-modelling benchmarks, each written in its benchmark's real file format.

Sources (real text shipped in the gensim wheel): the Wikipedia XML excerpt (:mod:`genlab.data.text.wiki_excerpt`) and
``lee_background.cor`` (300 news documents). Every builder is deterministic: the same package gives the same bytes.

Scale (vs the real benchmark): WikiText-103 mini ~0.4M train tokens (103M), WikiText-2 mini ~0.13M (2.1M),
PTB mini ~0.35M (0.93M) with a 5k closed vocabulary (10k), enwik8/text8 minis 2M symbols (100M) split 90/5/5.
"""

from __future__ import annotations

import re
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from genlab.data.lm import readers as R
from genlab.data.sources.tiers import package_file
from genlab.data.text.wiki_excerpt import Article, excerpt_articles, excerpt_bytes
from genlab.utils import atomic_write

LEE_FILE = "test/test_data/lee_background.cor"
LEE_SHA256 = "5d78d6dafd953bbf65797bef09a9ffb9ec430583381be705f8fd460000f370fb"

WIKITEXT_MIN_COUNT = 3  # WikiText maps words seen fewer than 3 times to <unk>
WT2_MINI_TRAIN_TOKENS = 130_000
PTB_MINI_VOCAB = 5_000  # closed vocabulary incl. <unk> and N (real PTB: 10k)
CHAR_MINI_BYTES = 2_000_000  # enwik8 / text8 minis: first 2M symbols, split 90/5/5 like the 100M originals
LM1B_HELDOUT_EVERY = 20  # one sentence in 20 goes to heldout-00000
LM1B_MIN_COUNT = 2  # words in the mini vocabulary file (the real file keeps words seen >= 3 times in 0.8B)
ZIP_DATE = (2006, 3, 1, 0, 0, 0)  # fixed timestamp so the zip bytes are reproducible


# ------------------------------------------------------------------------------------------------ helpers
def _split_of(i: int) -> str:
    """Articles are assigned by position: every 20th (offset 5) is valid, every 20th (offset 15) test."""
    return {5: "valid", 15: "test"}.get(i % 20, "train")


def _write_text(path: Path, lines: Iterable[str]) -> None:
    with atomic_write(path, "w") as f:
        f.write("".join(lines))


def _write_zip(path: Path, member: str, data: bytes) -> None:
    info = zipfile.ZipInfo(member, date_time=ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    with atomic_write(path, "wb") as f, zipfile.ZipFile(f, "w") as z:
        z.writestr(info, data)


_WT_TOKEN = re.compile(r"@[-,.]@|[^\W_]+(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|[^\W_]+|\S", re.I)


def wikitext_tokenize(text: str) -> list[str]:
    """WikiText-style tokens: punctuation split off, ``@-@`` inside hyphenated words, ``@,@``/``@.@`` in numbers."""
    text = re.sub(r"(?<=\d),(?=\d)", " @,@ ", text)
    text = re.sub(r"(?<=\d)\.(?=\d)", " @.@ ", text)
    text = re.sub(r"(?<=[^\W_])-(?=[^\W_])", " @-@ ", text)
    return _WT_TOKEN.findall(text)


def _heading(level: int, tokens: Sequence[str]) -> str:
    marks = " ".join(["="] * level)
    return f" {marks} {' '.join(tokens)} {marks} \n"


# ------------------------------------------------------------------------------------------------ WikiText
def _wikitext_articles(articles: Sequence[Article]) -> list[list[tuple[int, list[str]]]]:
    """Each article as (level, tokens) lines: the title is a level-1 heading, section headings keep their level."""
    out = []
    for art in articles:
        lines = [(1, wikitext_tokenize(art.title))]
        lines += [(lvl, wikitext_tokenize(text)) for lvl, text in art.blocks]
        out.append(lines)
    return out


def build_wikitext_mini(root: Path, train_tokens: int | None = None) -> None:
    """``wiki.{train,valid,test}.tokens`` from the excerpt: split by article, rare train words -> ``<unk>``.

    ``train_tokens`` caps the training part (WikiText-2 mini); valid and test are the same articles either way.
    """
    root = Path(root)
    arts = _wikitext_articles(excerpt_articles())
    by_split: dict[str, list] = {"train": [], "valid": [], "test": []}
    n_train = 0
    for i, art in enumerate(arts):
        split = _split_of(i)
        if split == "train":
            if train_tokens is not None and n_train >= train_tokens:
                continue
            n_train += sum(len(toks) for _, toks in art)
        by_split[split].append(art)
    counts = Counter(t for art in by_split["train"] for _, toks in art for t in toks)
    keep = {t for t, c in counts.items() if c >= WIKITEXT_MIN_COUNT}
    for split, arts_s in by_split.items():
        lines = []
        for art in arts_s:
            for lvl, toks in art:
                toks = [t if t in keep else "<unk>" for t in toks]
                if lvl:
                    lines += [" \n", _heading(lvl, toks), " \n"]
                else:
                    lines.append(f" {' '.join(toks)} \n")
        _write_text(root / f"wiki.{split}.tokens", lines)


def build_wikitext103_mini(root: Path) -> None:
    build_wikitext_mini(root)


def build_wikitext2_mini(root: Path) -> None:
    build_wikitext_mini(root, train_tokens=WT2_MINI_TRAIN_TOKENS)


# ------------------------------------------------------------------------------------------------ PTB
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]*[A-Z0-9])")
_PTB_TOKEN = re.compile(r"\d+(?:[,.]\d+)+|[^\W_]+(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|\$|&|[^\W_]+(?:[-.][^\W_]+)*")
_NUMBER = re.compile(r"^[\d.,:/-]*\d[\d.,:/-]*$")


def split_sentences(paragraph: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(paragraph) if s.strip()]


def ptb_tokenize(sentence: str) -> list[str]:
    """Mikolov's PTB style: lowercase, punctuation removed, numbers -> ``N``, clitics split off (``'s``, ``n't``)."""
    tokens = _PTB_TOKEN.findall(sentence.lower())
    return ["N" if _NUMBER.match(t) else t for t in tokens]


def _ptb_sentences() -> dict[str, list[list[str]]]:
    """Tokenised sentences of the excerpt, split by article, rare words -> ``<unk>`` (closed vocabulary)."""
    by_split: dict[str, list[list[str]]] = {"train": [], "valid": [], "test": []}
    for i, art in enumerate(excerpt_articles()):
        for para in art.paragraphs():
            for sent in split_sentences(para):
                toks = ptb_tokenize(sent)
                if toks:
                    by_split[_split_of(i)].append(toks)
    counts = Counter(t for s in by_split["train"] for t in s)
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])  # stable: ties keep first occurrence
    keep = {t for t, _ in ranked[: PTB_MINI_VOCAB - 1]}  # plus <unk>
    return {k: [[t if t in keep else "<unk>" for t in s] for s in v] for k, v in by_split.items()}


def build_ptb_mini(root: Path) -> None:
    """``ptb.{train,valid,test}.txt``: one sentence per line, written `` w1 w2 ... \\n`` like Mikolov's files."""
    for split, sents in _ptb_sentences().items():
        _write_text(Path(root) / f"ptb.{split}.txt", (f" {' '.join(s)} \n" for s in sents))


def build_ptb_char_mini(root: Path) -> None:
    """``ptb.char.{split}.txt``: the PTB mini's sentences as space-separated characters, '_' between words."""
    for split, sents in _ptb_sentences().items():
        lines = (" ".join(" _ ".join(" ".join(w) for w in s).split(" ")) + "\n" for s in sents)
        _write_text(Path(root) / f"ptb.char.{split}.txt", lines)


# ------------------------------------------------------------------------------------------------ enwik8
def build_enwik8_mini(root: Path, n_bytes: int = CHAR_MINI_BYTES) -> None:
    """The excerpt's first ``n_bytes`` raw XML bytes as ``enwik8.zip``, then the real prepare step (90/5/5)."""
    root = Path(root)
    _write_zip(root / "enwik8.zip", "enwik8", excerpt_bytes()[:n_bytes])
    R.prepare_enwik8(root, n_test=n_bytes // 20)


# ------------------------------------------------------------------------------------------------ text8
_DIGIT_NAMES = str.maketrans({str(d): f" {w} " for d, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"])})
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_T8_RULES = [  # applied in order to each line of article text (the rules of Mahoney's wikifil.pl)
    (re.compile(r"<.*>"), ""),  # the XML tags themselves (wiki text is still escaped here)
    (re.compile(r"&amp;"), "&"), (re.compile(r"&lt;"), "<"), (re.compile(r"&gt;"), ">"),
    (re.compile(r"<ref[^<]*</ref>"), ""),  # references
    (re.compile(r"<[^>]*>"), ""),  # xhtml tags
    (re.compile(r"\[http:[^\] ]*"), "["),  # keep a link's visible text, drop its URL
    (re.compile(r"\|(?:thumb|left|right|\d+px)", re.I), ""),  # image options
    (re.compile(r"\[\[image:[^\[\]]*\|", re.I), ""),  # image: keep the caption
    (re.compile(r"\[\[category:([^|\]]*)[^\]]*\]\]", re.I), r"[[\1]]"),  # category: keep its name
    (re.compile(r"\[\[[a-z\-]*:[^\]]*\]\]"), ""),  # links to other languages
    (re.compile(r"\[\[[^|\]]*\|"), "[["),  # piped links: keep the visible text
    (re.compile(r"\{\{[^}]*\}\}"), ""), (re.compile(r"\{[^}]*\}"), ""),  # templates, tables
    (re.compile(r"[\[\]]"), ""),
    (re.compile(r"&[^;]*;"), " "),  # remaining entities
]
_NON_LETTERS = re.compile(r"[^a-z]+")


def text8_clean(xml: bytes) -> str:
    """text8 cleaning of a MediaWiki XML dump: article text only, redirects skipped, markup removed, ASCII
    lowercased, digits spelled out, everything but a-z squeezed to single spaces."""
    out = []
    in_text = False
    for line in xml.decode("utf-8").split("\n"):
        if "<text " in line:
            in_text = True
        if re.search("#redirect", line, re.I):
            in_text = False
        if not in_text:
            continue
        if "</text>" in line:
            in_text = False
        for pattern, repl in _T8_RULES:
            line = pattern.sub(repl, line)
        line = (" " + line + " ").translate(_ASCII_LOWER).translate(_DIGIT_NAMES)
        out.append(_NON_LETTERS.sub(" ", line)[:-1])  # squeezed; drop the closing space
    return "".join(out)


def build_text8_mini(root: Path, n_chars: int = CHAR_MINI_BYTES) -> None:
    """The first ``n_chars`` of the cleaned excerpt as ``text8.zip``, then the real prepare step (90/5/5)."""
    root = Path(root)
    text = text8_clean(excerpt_bytes())[:n_chars]
    _write_zip(root / "text8.zip", "text8", text.encode("ascii"))
    R.prepare_text8(root, n_test=len(text) // 20)


# ------------------------------------------------------------------------------------------------ LM1B
_LM1B_TOKEN = re.compile(r"\d+(?:[,.]\d+)+|[^\W_]+(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|[^\W_]+(?:[-.][^\W_]+)*|\S")
LM1B_MINI_SEED = 1


def build_lm1b_mini(root: Path, heldout_shards: tuple[str, ...] = (R.LM1B_HELDOUT,)) -> None:
    """LM1B layout from ``lee_background.cor``: tokenised sentences shuffled once, 99 training shards, the held-out
    sentences (one in 20) dealt round-robin over ``heldout_shards`` (TXL: ``heldout-00000`` alone) and
    ``1b_word_vocab.txt`` (``<S>``, ``</S>``, ``<UNK>``, then words by training count)."""
    root = Path(root)
    lee = package_file("gensim", LEE_FILE, LEE_SHA256).read_text(encoding="utf-8")
    sents = [" ".join(_LM1B_TOKEN.findall(s)) for doc in lee.splitlines() for s in split_sentences(doc.strip())]
    sents = [s for s in sents if s]
    order = np.random.default_rng(LM1B_MINI_SEED).permutation(len(sents))
    sents = [sents[i] for i in order]
    heldout = sents[::LM1B_HELDOUT_EVERY]
    train = [s for i, s in enumerate(sents) if i % LM1B_HELDOUT_EVERY]
    n_shards = len(R.LM1B_TRAIN_SHARDS)
    for k, shard in enumerate(R.LM1B_TRAIN_SHARDS):
        _write_text(root / shard, (s + "\n" for s in train[k::n_shards]))
    for k, shard in enumerate(heldout_shards):
        _write_text(root / shard, (s + "\n" for s in heldout[k :: len(heldout_shards)]))
    counts = Counter(t for s in train for t in s.split())
    words = [(w, c) for w, c in counts.most_common() if c >= LM1B_MIN_COUNT]
    header = [("<S>", 0), ("</S>", len(train)), ("<UNK>", 0)]
    _write_text(root / R.LM1B_VOCAB, (f"{w} {c}\n" for w, c in header + words))


def build_lm1b_mos_mini(root: Path) -> None:
    """The LM1B mini with the MoS held-out shards (valid heldout-00/10, test heldout-20/30/40)."""
    build_lm1b_mini(root, (*R.LM1B_MOS_VALID, *R.LM1B_MOS_TEST))
