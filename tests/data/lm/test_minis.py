"""Offline minis: deterministic bytes, the benchmarks' real formats, sane sizes, readable by the real readers."""

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from genlab.data.lm import readers as R
from genlab.data.lm.corpora import DATASETS, load_lm_corpus

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gensim") is None, reason="the offline minis need gensim's data files (genlab[data])"
)

BUILD_ALL = """
import sys
from pathlib import Path
from genlab.data.lm.corpora import DATASETS
root = Path(sys.argv[1])
for name, ds in DATASETS.items():
    (root / name).mkdir(parents=True)
    ds.spec.build_mini(root / name)
"""


def _arrays(reader, *args, **kwargs):
    """A reader's splits as arrays (word readers stream their ids in chunks)."""
    vocab, splits = reader(*args, **kwargs)
    return vocab, {s: R.materialize(v) for s, v in splits.items()}


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def minis(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("minis")
    for name, ds in DATASETS.items():
        (root / name).mkdir()
        ds.spec.build_mini(root / name)
    return root


def test_minis_are_deterministic_across_processes(minis, tmp_path):
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", BUILD_ALL, str(tmp_path)], check=True, env=env, timeout=300)
    a, b = _digest(minis), _digest(tmp_path)
    assert a.keys() == b.keys()
    assert a == b


def test_minis_write_every_file_the_spec_lists(minis):
    for name, ds in DATASETS.items():
        missing = [f for f in ds.spec.files if not (minis / name / f).is_file()]
        assert not missing, (name, missing[:3])


def test_wikitext103_mini_format_and_size(minis):
    root = minis / "wikitext103"
    train = (root / "wiki.train.tokens").read_text(encoding="utf-8")
    lines = train.split("\n")[:-1]
    assert lines[0] == " " and lines[1].startswith(" = ") and lines[1].endswith(" = ")  # ` = Title = `
    assert all(line.startswith(" ") and line.endswith(" ") for line in lines)
    assert any(line.startswith(" = = ") for line in lines)  # section headings
    tokens = train.split()
    assert "@-@" in tokens and "<unk>" in tokens and "@,@" in tokens
    vocab, splits = _arrays(R.read_wikitext, root)
    assert 250_000 <= len(splits["train"]) <= 600_000
    assert 10_000 <= len(splits["valid"]) and 10_000 <= len(splits["test"])
    assert 5_000 <= len(vocab) <= 20_000
    counts = Counter(t for t in tokens if t != "<unk>")
    assert min(counts.values()) >= 3  # rare words are <unk>
    for split in ("valid", "test"):  # closed vocabulary: no word outside train
        words = set((root / f"wiki.{split}.tokens").read_text(encoding="utf-8").split())
        assert words <= set(vocab.symbols)


def test_wikitext2_mini_is_smaller_with_same_eval_articles(minis):
    v103, s103 = _arrays(R.read_wikitext, minis / "wikitext103")
    v2, s2 = _arrays(R.read_wikitext, minis / "wikitext2", vocab_splits=R.SPLITS)
    assert len(s2["train"]) < len(s103["train"]) / 2
    for split in ("valid", "test"):
        a = (minis / "wikitext2" / f"wiki.{split}.tokens").read_text().split()
        b = (minis / "wikitext103" / f"wiki.{split}.tokens").read_text().split()
        assert len(a) == len(b)


def test_ptb_mini_style(minis):
    root = minis / "ptb"
    text = (root / "ptb.train.txt").read_text()
    assert {c for c in text if c.isupper()} == {"N"}  # lowercase, numbers are N
    tokens = text.split()
    assert "N" in tokens and "<unk>" in tokens
    assert not any(re.fullmatch(r"[\d.,:/-]+", t) for t in tokens)  # every number became N
    assert not set(",;:()?!\"") & set(text)
    assert text.startswith(" ") and text.split("\n")[0].endswith(" ")
    vocab, splits = _arrays(R.read_ptb, root)
    assert len(vocab) == 5001  # 5,000 words incl. <unk> and N, plus <eos>
    assert 200_000 <= len(splits["train"]) <= 600_000 and len(splits["valid"]) > 10_000


def test_ptb_char_mini_spells_the_ptb_mini(minis):
    words = (minis / "ptb" / "ptb.valid.txt").read_text().split("\n")[0].split()
    chars = (minis / "ptb_char" / "ptb.char.valid.txt").read_text().split("\n")[0]
    assert chars == " _ ".join(" ".join(w) for w in words)
    vocab, _ = _arrays(R.read_ptb, minis / "ptb_char", char=True)
    assert 30 <= len(vocab) <= 60


def test_enwik8_mini_is_the_raw_xml_prepared_like_enwik8(minis):
    root = minis / "enwik8"
    kept = {s: R.parse_decimal_bytes(root / f"{s}.txt", keep_newlines=True) for s in R.SPLITS}
    assert [len(kept[s]) for s in R.SPLITS] == [1_800_000, 100_000, 100_000]
    raw = b"".join(bytes(kept[s].astype(np.uint8)) for s in R.SPLITS)
    assert raw.startswith(b"<mediawiki") and b"<page>" in raw
    vocab, _ = R.read_enwik8(root)
    assert 100 <= len(vocab) <= 220


def test_text8_mini_follows_text8_rules(minis):
    import zipfile

    with zipfile.ZipFile(minis / "text8" / "text8.zip") as z:
        text = z.read("text8").decode("ascii")
    assert len(text) == 2_000_000 and text.startswith(" ")
    assert set(text) <= set(" abcdefghijklmnopqrstuvwxyz") and "  " not in text
    assert " one nine " in text or " two zero " in text  # digits are spelled out
    vocab, splits = R.read_text8(minis / "text8")
    assert len(vocab) == 27


def test_lm1b_mini_layout(minis):
    root = minis / "lm1b"
    shards = [(root / s).read_text().splitlines() for s in R.LM1B_TRAIN_SHARDS]
    assert len(shards) == 99 and all(shards)
    heldout = (root / R.LM1B_HELDOUT).read_text().splitlines()
    n_train = sum(map(len, shards))
    assert 0.03 < len(heldout) / (n_train + len(heldout)) < 0.08
    vocab_lines = (root / R.LM1B_VOCAB).read_text().splitlines()
    assert vocab_lines[:3] == ["<S> 0", f"</S> {n_train}", "<UNK> 0"]
    counts = [int(line.split()[1]) for line in vocab_lines[3:]]
    assert counts == sorted(counts, reverse=True) and min(counts) >= 2


def test_load_lm_corpus_mini_builds_once_then_loads_from_cache(tmp_path):
    c = load_lm_corpus("wikitext103", "mini", cache_dir=tmp_path)
    assert c.vocab.symbols[0] == "<eos>" and c.vocab_size == len(c.vocab)
    assert all(isinstance(v, np.memmap) and v.dtype == np.int32 for v in c.splits.values())
    assert int(max(v.max() for v in c.splits.values())) < c.vocab_size
    stamp = [(p, p.stat().st_mtime_ns) for p in sorted(tmp_path.rglob("*.npy"))]
    again = load_lm_corpus("wikitext103", "mini", cache_dir=tmp_path)
    assert [(p, p.stat().st_mtime_ns) for p in sorted(tmp_path.rglob("*.npy"))] == stamp
    assert again.vocab.fingerprint() == c.vocab.fingerprint()
