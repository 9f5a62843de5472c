"""What preparing each real corpus costs (time, memory, disk, processes), measured on synthetic files of its size.

The files have the real benchmark's format, size and word statistics (written offline, deterministically; nothing is
downloaded).

For each ``--corpora`` name the script writes the files the user would point ``data.path`` at (``--scale`` times
the real size), then prepares them in a fresh process exactly as a run does (``load_lm_corpus(name, "path", ...)``
for the language-modelling benchmarks) with an empty cache, and prints: input MB, tokens, wall and CPU seconds
(the process and its tokenising workers; "of it main": the preparing process alone, the part more workers do
not divide), the largest gap between two progress lines (the longest the user sees nothing; the lines go to stderr
as a run logs them), peak RSS of the preparing process (and how much of it the imports alone hold) and of its
largest worker, and the cache on disk (enwik8/text8 also their prepared split files). ``--warm`` then prepares
again from that cache, the folder named as ``data.path=X`` alone names it, and says whether it found the same entry.

    python experiments/perf/corpus_prep.py --corpora wikitext103,enwik8 [--scale 1] [--num-proc 1] [--workdir DIR]

Real sizes (the synthetic files match them at ``--scale 1``): WikiText-103 103M training words over a 267k-word
vocabulary (539 MB), WikiText-2 2.1M words / 33k, PTB 0.89M words / 10k (lower case, ``<unk>``), enwik8 and text8
10^8 bytes in their zip archives (prepared to the 90M/5M/5M split first), One Billion Word 99 training shards of
0.8B words in all over a 793k-word vocabulary file (4.2 GB; ``--scale 0.1`` writes a tenth), ``lm1b_mos`` the same
shards with its top-100k vocabulary counted from them. Words follow a truncated Zipf law (exponent 1) over the
vocabulary, so every vocabulary word occurs; word lengths are set so bytes per word match the real file. The
finetuning sets (``mnli``, ``yelp5``, ``race``, ``gdan``; their writers give the real counts) are set up through their
datamodules (``setup("fit")``: read, tokenise, lay out) with an 8,000-piece SentencePiece model of the synthetic prose.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

# A fresh process per measurement: imports first, then the clock runs over what a run's data set-up does.
CHILD = """
import json, logging, resource, sys, time, zipfile
from pathlib import Path
from genlab.data.lm import readers as R
from genlab.data.lm.corpora import load_lm_corpus
from genlab.data.finetune.datamodule import ClassificationDataModule
from genlab.data.finetune.race import RaceDataModule
from genlab.data.qa.datamodule import SemiSupervisedSquadDataModule
name, root, cache, procs, spm, source = (*sys.argv[1:4], int(sys.argv[4]), *sys.argv[5:7])
base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # torch, Lightning: what any run holds
stamps = [time.perf_counter()]
class Stamp(logging.Handler):
    def emit(self, record):
        stamps.append(time.perf_counter())
log = logging.getLogger("genlab")
log.setLevel(logging.INFO)
log.addHandler(Stamp())
shown = logging.StreamHandler(sys.stderr)  # the lines a run prints while it prepares, with their times
shown.setFormatter(logging.Formatter("  %(asctime)s %(message)s", "%H:%M:%S"))
log.addHandler(shown)
t0, c0 = stamps[0], time.process_time()
if name in ("enwik8", "text8"):  # what data.path=<folder with the zip> does, less its sha256 check of the download
    prepared = Path(cache) / "prepared" / name
    prepared.mkdir(parents=True)
    (prepared / f"{name}.zip").symlink_to(Path(root) / f"{name}.zip")
    with zipfile.ZipFile(prepared / f"{name}.zip") as z:
        n_test = z.getinfo(name).file_size // 20  # the 90M/5M/5M split, scaled with the file
    (R.prepare_enwik8 if name == "enwik8" else R.prepare_text8)(prepared, n_test=n_test)
    root = str(prepared)
if name in ("mnli", "yelp5"):  # the XLNet/BERT/Funnel presets' sequence lengths
    dm = ClassificationDataModule(name, path=root, cache_dir=cache, tokenizer=spm, num_proc=procs,
                                  max_seq_len=128 if name == "mnli" else 512)
    dm.setup("fit")
    items, vocab = len(dm.splits["train"]), dm.tokenizer.vocab_size
elif name == "race":
    dm = RaceDataModule(path=root, cache_dir=cache, tokenizer=spm, num_proc=procs, max_seq_len=512)
    dm.setup("fit")
    items, vocab = len(dm.data["train"]), dm.tokenizer.vocab_size
elif name == "gdan":
    dm = SemiSupervisedSquadDataModule(path=root, cache_dir=cache, num_proc=procs)
    dm.setup("fit")
    items, vocab = len(dm._train_pool) + len(dm.unlabeled), len(dm.vocab)
else:
    corpus = load_lm_corpus(name, source, path=root, cache_dir=cache, num_proc=procs)
    items, vocab = len(corpus.splits["train"]), corpus.vocab_size
stamps.append(time.perf_counter())
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
main_cpu = time.process_time() - c0
print(json.dumps({"wall": stamps[-1] - t0, "cpu": main_cpu + kids.ru_utime + kids.ru_stime, "main_cpu": main_cpu,
                  "silence": max(b - a for a, b in zip(stamps, stamps[1:])), "lines": len(stamps) - 2,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "base_mb": base_mb, "worker_rss_mb": kids.ru_maxrss / 1024, "items": items, "vocab": vocab}))
"""


# ------------------------------------------------------------------------------------------------ synthetic text
class Words:
    """``size`` distinct lower-case words drawn with a truncated Zipf law of exponent 1 (rank r has p ~ 1/r); word
    r is r in base 26 (frequent words short) plus random letters, so that a word and its separator average
    ``bytes_per_word`` bytes in the text."""

    def __init__(self, size: int, bytes_per_word: float, seed: int = 0, reserved: tuple[str, ...] = ()):
        self.rng = np.random.default_rng(seed)
        rank = np.arange(size)
        p = 1.0 / (rank + 1)
        self.cdf = np.cumsum(p / p.sum())
        base = [_base26(r) for r in range(size)]
        base_len = np.array([len(b) for b in base])
        extra = max(bytes_per_word - 1 - float((p / p.sum()) @ base_len), 0.0)
        tails = self.rng.poisson(extra, size)
        letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
        tail_text = "".join(self.rng.choice(letters, int(tails.sum())))
        ends = np.cumsum(tails)
        words, seen = [], set()
        for b, t, e in zip(base, tails, ends):
            w = b + tail_text[e - t : e]
            while w in seen:  # base + tail can spell another word's base
                w += "q"
            seen.add(w)
            words.append(w)
        for i, special in enumerate(reserved):  # e.g. <unk> among the frequent words, as in WikiText
            words[10 + 7 * i] = special
        self.words = np.array(words, dtype=object)

    def ids(self, n: int) -> np.ndarray:
        """Ranks of ``n`` words drawn from the law."""
        return np.minimum(np.searchsorted(self.cdf, self.rng.random(n)), len(self.words) - 1)

    def sample(self, n: int) -> np.ndarray:
        return self.words[self.ids(n)]

    @cached_property
    def spelled(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every word's UTF-8 bytes back to back (uint8), each word's offset into them and its length."""
        encoded = [w.encode() for w in self.words]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        return np.frombuffer(b"".join(encoded), dtype=np.uint8), np.cumsum(lengths) - lengths, lengths


def _base26(r: int) -> str:
    out = ""
    while True:
        out = chr(97 + r % 26) + out
        r = r // 26 - 1
        if r < 0:
            return out


def write_lines(path: Path, words: Words, n_words: int, line_words: float, blank_every: int = 0) -> None:
    """``n_words`` words as lines of ~``line_words`` words (" w1 w2 \\n", WikiText/PTB layout), a blank line
    (" \\n") after every ``blank_every``-th line when set; written a million words at a time."""
    rng = words.rng
    with open(path, "w", encoding="utf-8") as f:
        done, k = 0, 0
        while done < n_words:
            toks = list(words.sample(min(1 << 20, n_words - done)))
            cuts = np.cumsum(rng.geometric(1 / line_words, len(toks) // max(int(line_words), 1) + 2))
            cuts = cuts[cuts < len(toks)]
            lines = []
            for part in np.split(np.array(toks, dtype=object), cuts):
                lines.append(" " + " ".join(part) + " \n")
                k += 1
                if blank_every and k % blank_every == 0:
                    lines.append(" \n")
            f.write("".join(lines))
            done += len(toks)


def write_sentences(path: Path, words: Words, n_words: int, sentence_words: float) -> None:
    """One sentence a line ("W1 w2 .\\n", the LM1B shards' layout), first letter upper-cased as in news text.

    Laid out as bytes with NumPy a million words at a time (~10x the rate of joining Python strings, which made
    writing the 4.2 GB of training shards the slow part); the text is the one ``" ".join(sentence).capitalize() +
    " .\\n"`` per sentence would give (the words are lower-case ASCII) from the same draws."""
    rng = words.rng
    spelling, offset, length = words.spelled
    with open(path, "wb") as f:
        done = 0
        while done < n_words:
            ids = words.ids(min(1 << 20, n_words - done))
            cuts = np.cumsum(rng.geometric(1 / sentence_words, len(ids) // max(int(sentence_words), 1) + 2))
            cuts = cuts[cuts < len(ids)]
            last = np.append(cuts - 1, len(ids) - 1)  # each sentence's last word: " .\n" after it, not " "
            n = length[ids]
            size = n + 1
            size[last] += 2
            start = np.cumsum(size) - size
            out = np.full(int(size.sum()), ord(" "), dtype=np.uint8)
            within = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)  # each byte's place in its word
            out[np.repeat(start, n) + within] = spelling[np.repeat(offset[ids], n) + within]
            end = start[last] + n[last] + 1
            out[end], out[end + 1] = ord("."), ord("\n")
            first = start[np.append(0, cuts)]
            out[first] -= ((out[first] >= ord("a")) & (out[first] <= ord("z"))).astype(np.uint8) * 32
            f.write(out.tobytes())
            done += len(ids)


def zipped_text(path: Path, member: str, words: Words, n_bytes: int, newline_every: int = 0) -> None:
    """A zip holding ``member``: ``n_bytes`` of words separated by spaces (text8), or also by a newline every
    ``newline_every`` words (enwik8's text lines); stored deflated, as the real archives."""
    parts, written = [], 0
    while written < n_bytes:
        toks = words.sample(1 << 18)
        if newline_every:
            toks[newline_every::newline_every] += "\n"
        block = " " + " ".join(toks)
        parts.append(block)
        written += len(block)
    data = "".join(parts).encode()[:n_bytes]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr(member, data)


# ------------------------------------------------------------------------------------------------ the corpora
@dataclass(frozen=True)
class Real:
    """A benchmark's real size: training words, vocabulary, bytes per word (with separator), words per line."""

    train_words: int
    vocab: int
    bytes_per_word: float
    line_words: float
    eval_words: int = 0


REAL = {
    "wikitext103": Real(103_227_021, 267_735, 5.22, 57.0, 230_000),
    "wikitext2": Real(2_088_628, 33_278, 5.22, 57.0, 230_000),
    "ptb": Real(887_521, 10_000, 5.6, 21.1, 75_000),
    "enwik8": Real(100_000_000, 0, 0, 0),
    "text8": Real(100_000_000, 0, 0, 0),
    "lm1b": Real(768_648_884, 793_471, 5.3, 25.4, 160_000),
}
REAL["lm1b_mos"] = REAL["lm1b"]
# enwik8 is Wikipedia XML: markup, digits, punctuation and UTF-8 among the words (~200 distinct byte values)
ENWIK8_MARKUP = ("[[", "]]", "&quot;", "&lt;", "&gt;", "{{", "}}", "|", "==", "''", "<text>", "</page>",
                 "(1984),", "2.", "0", "Z", "X-ray", "café", "Québec", "São", "Æsir", "Köln", "—", "naïve", "«", "»",
                 ";", "#")


def write_corpus(name: str, root: Path, scale: float) -> None:
    """The files of benchmark ``name`` at ``scale`` times its real size, in the layout its reader expects."""
    from genlab.data.lm import readers as R

    root.mkdir(parents=True, exist_ok=True)
    if name in FINETUNE:
        return FINETUNE[name](root, scale)
    real = REAL[name]
    if name in ("wikitext103", "wikitext2", "ptb"):
        words = Words(real.vocab - 1, real.bytes_per_word, reserved=("<unk>",))
        blank = 1 if name != "ptb" else 0  # WikiText: a blank line after each paragraph
        for split in R.SPLITS:
            n = int(real.train_words * scale) if split == "train" else int(real.eval_words * min(1.0, 10 * scale))
            path = root / (f"wiki.{split}.tokens" if name != "ptb" else f"ptb.{split}.txt")
            write_lines(path, words, n, real.line_words, blank)
    elif name in ("enwik8", "text8"):  # ~10k distinct words in enwik8's text lines, 253k in text8
        markup = () if name == "text8" else ENWIK8_MARKUP
        words = Words(253_854 if name == "text8" else 10_000, 5.7, reserved=markup)
        zipped_text(root / f"{name}.zip", name, words, int(1e8 * scale), newline_every=0 if name == "text8" else 12)
    else:  # One Billion Word: 99 training shards, held-out shards 0, 10, 20, 30, 40, the vocabulary file
        words = Words(real.vocab - 3, real.bytes_per_word)
        shards = [*R.LM1B_TRAIN_SHARDS, R.LM1B_HELDOUT, *R.LM1B_MOS_VALID[1:], *R.LM1B_MOS_TEST]
        for shard in shards:
            (root / shard).parent.mkdir(parents=True, exist_ok=True)
            held = "heldout" in shard
            n = int(real.eval_words * min(1.0, 10 * scale)) if held else int(real.train_words * scale / 99)
            write_sentences(root / shard, words, n, real.line_words)
        vocab = ["<S>", "</S>", "<UNK>", *words.words]
        (root / R.LM1B_VOCAB).write_text("".join(f"{w}\t{len(vocab) - i}\n" for i, w in enumerate(vocab)))


# ------------------------------------------------------------------------------------------------ finetuning sets
def _prose(words: Words) -> Callable[[float], str]:
    """Sentences of ~``mean`` words: capitalised, ending in a full stop."""

    def text(mean: float) -> str:
        return " ".join(words.sample(max(1, int(words.rng.geometric(1 / mean))))).capitalize() + "."

    return text


def write_mnli(root: Path, scale: float) -> None:
    """GLUE MNLI TSVs: 392,702 training pairs (premise ~22 words, hypothesis ~11) with every column of the real
    files (binary and full parses included); dev and test, matched and mismatched, ~9.8k rows each. As in MultiNLI
    (Williams et al. 2018, §2: a writer gives each premise one hypothesis per label), every premise has three
    hypotheses, and the rows are shuffled."""
    text, rng = _prose(Words(60_000, 5.5)), np.random.default_rng(1)
    labels = ("contradiction", "entailment", "neutral")
    for split, n, n_labels in (("train", 392_702, 1), ("dev_matched", 9_815, 5), ("dev_mismatched", 9_832, 5),
                               ("test_matched", 9_796, 0), ("test_mismatched", 9_847, 0)):
        head = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
                "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]
        head += [f"label{i + 1}" for i in range(n_labels)] + (["gold_label"] if n_labels else [])
        rows = max(1, int(n * scale))
        premises = [text(22) for _ in range((rows + 2) // 3)]
        with open(root / f"{split}.tsv", "w", encoding="utf-8") as f:
            f.write("\t".join(head) + "\n")
            for i, j in enumerate(rng.permutation(3 * len(premises))[:rows]):  # premise j // 3, label j % 3
                a, b = premises[j // 3], text(11)
                parses = [f"( {s} )" for s in (a, b)] + [f"(ROOT (S {' '.join(f'(NN {w})' for w in s.split())}))"
                                                        for s in (a, b)]
                gold = [labels[j % 3]] * (n_labels + 1) if n_labels else []
                f.write("\t".join([str(i), str(j // 3), f"{j // 3}{'cen'[j % 3]}", "fiction", *parses, a, b, *gold])
                        + "\n")


def write_yelp5(root: Path, scale: float) -> None:
    """Zhang et al. (2015) Yelp-5 CSVs: 650,000 training and 50,000 test reviews of ~135 words (train.csv 0.5 GB),
    quoted, newlines escaped as ``\\n``."""
    text, rng = _prose(Words(100_000, 5.5)), np.random.default_rng(2)
    for split, n in (("train", 650_000), ("test", 50_000)):
        with open(root / f"{split}.csv", "w", encoding="utf-8") as f:
            for _ in range(max(1, int(n * scale))):
                body = "\\n".join(text(15) for _ in range(int(rng.geometric(1 / 9))))
                f.write(f'"{int(rng.integers(1, 6))}","{body}"\n')


def write_race(root: Path, scale: float) -> None:
    """RACE: one JSON file per article (middle ~250 words, high ~350), ~3.5 questions with 4 options each; train
    25,137 articles / 87,866 questions, dev 1,389 / 4,887, test 1,407 / 4,934."""
    text, rng = _prose(Words(50_000, 5.3)), np.random.default_rng(3)
    sizes = {"train": {"middle": 6_409, "high": 18_728}, "dev": {"middle": 368, "high": 1_021},
             "test": {"middle": 362, "high": 1_045}}
    for split, levels in sizes.items():
        for level, n in levels.items():
            folder = root / split / level
            folder.mkdir(parents=True, exist_ok=True)
            words = 250 if level == "middle" else 350
            for k in range(max(1, int(n * scale))):
                article = " ".join(text(18) for _ in range(words // 18))
                n_q = 3 + int(rng.random() < 0.5)
                obj = {"answers": ["ABCD"[int(rng.integers(4))] for _ in range(n_q)],
                       "options": [[text(5) for _ in range(4)] for _ in range(n_q)],
                       "questions": [text(10) for _ in range(n_q)], "article": article, "id": f"{level}{k}.txt"}
                (folder / f"{k}.txt").write_text(json.dumps(obj))


def write_gdan(root: Path, scale: float) -> None:
    """GDAN (Yang et al. 2017; thesis §3): SQuAD v1.1 train (30 MB, 87.6k questions) and dev (4.9 MB) files, and the
    unlabelled Wikipedia paragraphs with five extracted answers each (the thesis' 950,612 paragraphs of at most
    850 words; ~120 words here, as SQuAD's). The SQuAD files are whole from ``scale`` 0.1 up."""
    from prep_memory import write_squad

    squad = min(1.0, 10 * scale)  # SQuAD whole from a tenth of the unlabelled set up
    write_squad(root / "train-v1.1.json", int(30_288_272 * squad))
    write_squad(root / "dev-v1.1.json", int(4_854_279 * squad), seed=1)
    text, rng = _prose(Words(100_000, 5.5)), np.random.default_rng(4)
    types = ("Date", "Other Numeric", "Person", "Location", "Common Noun Phrase")
    with open(root / "unlabeled.jsonl", "w", encoding="utf-8") as f:
        for k in range(int(950_612 * scale)):
            context = " ".join(text(20) for _ in range(6))
            starts = [0, *(m + 1 for m in range(len(context)) if context[m] == " ")]
            answers = []
            for j in rng.choice(len(starts) - 3, 5, replace=False):
                a, b = starts[j], starts[j + int(rng.integers(1, 3))] - 1
                answers.append({"text": context[a:b], "answer_start": a, "type": types[len(answers)]})
            f.write(json.dumps({"id": f"u{k}", "context": context, "answers": answers}) + "\n")


FINETUNE: dict[str, Callable[[Path, float], None]] = {"mnli": write_mnli, "yelp5": write_yelp5, "race": write_race,
                                                      "gdan": write_gdan}


def piece_model(work: Path) -> Path:
    """One 8,000-piece SentencePiece model (the finetuning readers need a checkpoint's), trained on 2 MB of the
    synthetic prose; pieces per word are therefore higher than with a real 32k vocabulary."""
    from genlab.data.tokenizers.xlnet_pieces import train_tokenizer

    model = work / "spm.model"
    if not model.is_file():
        text = _prose(Words(100_000, 5.5, seed=9))
        sample = work / "spm_sample.txt"
        sample.write_text("\n".join(text(20) for _ in range(20_000)))
        train_tokenizer([sample], work / "spm", vocab_size=8000)
    return model


def prepare(name: str, root: Path, cache: Path, num_proc: int, spm: Path, source: str = "path") -> dict:
    """``source``: the tier the language-modelling benchmarks are located with (``data.source=path data.path=X``
    or, as ``data.path=X`` alone gives with the presets' default, ``download``)."""
    out = subprocess.run([sys.executable, "-c", CHILD, name, str(root), str(cache), str(num_proc), str(spm), source],
                         stdout=subprocess.PIPE, text=True)  # its log (progress, errors) goes to our stderr
    if out.returncode:
        raise SystemExit(f"{name}: preparation failed (its error is above)")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["input_mb"] = sum(_text_bytes(p) for p in root.rglob("*") if p.is_file()) / 1e6
    r["prepared_mb"] = _folder_bytes(cache / "prepared") / 1e6  # enwik8/text8: the split text files (the zip is a link)
    r["cache_mb"] = _folder_bytes(cache) / 1e6 - r["prepared_mb"]
    return r


def _text_bytes(path: Path) -> int:
    """Bytes of text in ``path``: a zip archive counts its uncompressed members."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as z:
            return sum(m.file_size for m in z.infolist())
    return path.stat().st_size


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


ALL = (*REAL, *FINETUNE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpora", default=",".join(ALL), help=f"a comma-separated subset of {', '.join(ALL)}")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the real size to write")
    ap.add_argument("--num-proc", type=int, default=1, help="data.num_proc of the preparing run")
    ap.add_argument("--workdir", default=None, help="keeps the synthetic files between runs (default: a temp dir)")
    ap.add_argument("--warm", action="store_true", help="then prepare each corpus again from the cache just built, "
                    "naming its folder as data.path=X alone does (data.source=download): the seconds a later run "
                    "waits, and whether it found the same cache entry")
    ap.add_argument("--write-only", action="store_true", help="write the synthetic files and stop (a measurement "
                    "under a lock then does not hold it while writing)")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="genlab-corpus-prep-"))
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).parent))  # prep_memory's SQuAD writer
    spm = piece_model(work)
    print(f"scale {args.scale:g} of the real size; num_proc={args.num_proc}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'corpus':<12} {'input MB':>9} {'train items':>12} {'vocab':>8} {'wall s':>7} {'cpu s':>7} "
          f"{'of it main':>10} {'MB/cpu s':>8} {'silent s':>8} {'peak RSS MB':>11} {'of it imports':>13} "
          f"{'worker MB':>9} {'cache MB':>8} "
          f"{'prepared MB':>11}")
    for name in args.corpora.split(","):
        if name not in ALL:
            raise SystemExit(f"--corpora: {name!r} is not one of {', '.join(ALL)}")
        source = "lm1b" if name == "lm1b_mos" else name
        root = work / f"{source}_x{args.scale:g}"
        if not (root / ".complete").is_file():
            write_corpus(source, root, args.scale)
            (root / ".complete").touch()
        if args.write_only:
            continue
        cache = work / f"cache_{name}_x{args.scale:g}_{args.num_proc}p_{time.time_ns()}"
        r = prepare(name, root, cache, args.num_proc, spm)
        print_row(name, r)
        if args.warm and name not in ("enwik8", "text8"):  # (their split from the zip is what is measured)
            entries = sorted(p.name for p in cache.rglob("*") if p.is_dir())
            print_row(f"{name} warm", prepare(name, root, cache, args.num_proc, spm, source="download"))
            same = entries == sorted(p.name for p in cache.rglob("*") if p.is_dir())
            print(f"{'':<12} warm run: {'the same cache entry' if same else 'a NEW cache entry (a key fault)'}")


def print_row(name: str, r: dict) -> None:
    print(f"{name:<12} {r['input_mb']:>9.0f} {r['items']:>12,} {r['vocab']:>8,} {r['wall']:>7.1f} "
          f"{r['cpu']:>7.1f} {r['main_cpu']:>10.1f} {r['input_mb'] / max(r['cpu'], 1e-9):>8.2f} "
          f"{r['silence']:>8.1f} {r['rss_mb']:>11.0f} {r['base_mb']:>13.0f} {r['worker_rss_mb']:>9.0f} "
          f"{r['cache_mb']:>8.0f} {r['prepared_mb']:>11.0f}", flush=True)


if __name__ == "__main__":
    main()
