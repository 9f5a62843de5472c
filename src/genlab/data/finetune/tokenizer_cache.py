"""Tokenizers trained on a finetuning dataset's training text, cached once per text.

An entry is keyed on the content of the (whitespace-normalised) training lines and the vocabulary size, so the
same data under another folder name, a symlink or a copy reuses it, and edited data trains a new one. It is a
manifest-checked cache entry (``genlab.data.text.cache_entry``): published whole, verified before use, rebuilt with a
message when truncated or corrupted. The text is never held in memory: it is read once to key the entry and, when the
entry is missing, once more, streamed into the training file (SentencePiece then trains on a bounded sample of it,
a text longer than its line limit cut at whitespace rather than skipped: ``genlab.data.tokenizers.sentencepiece``);
both passes and the training log progress through the ``genlab`` logger. A rebuilt entry holds the same model bytes
(the build folder is not recorded in it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path

from genlab.data.sources.tiers import DEFAULT_CACHE
from genlab.data.text.cache_entry import build_entry, verified_meta
from genlab.data.text.progress import Progress, heartbeat
from genlab.data.tokenizers.xlnet_pieces import train_tokenizer
from genlab.errors import DataError
from genlab.utils import stable_hash

MODEL = "tokenizer.model"
# the training texts: a function returning them (called once or twice), or a collection (read twice)
Texts = Callable[[], Iterable[str | None]] | Collection[str | None]


def training_lines(texts: Iterable[str | None]) -> Iterator[bytes]:
    """One UTF-8 line (with its newline) per non-empty text, whitespace runs (newlines included) folded to one
    space."""
    return ((" ".join(t.split()) + "\n").encode() for t in texts if t and t.strip())


def _reader(texts: Texts) -> Callable[[], Iterable[str | None]]:
    if callable(texts):
        return texts
    if iter(texts) is texts:
        raise TypeError("the training texts are read twice (to key the cache, then to train): pass a list or a "
                        "function returning them, not an iterator.")
    return lambda: texts


def _digest(lines: Iterable[bytes], progress: Progress) -> tuple[str, int]:
    """sha256 and count of the lines."""
    digest, n = hashlib.sha256(), 0
    for line in lines:
        digest.update(line)
        n += 1
        progress.advance(len(line))
    progress.finish()
    return digest.hexdigest(), n


def _written(lines: Iterable[bytes], f) -> Iterator[bytes]:
    for line in lines:
        f.write(line)
        yield line


def cached_tokenizer_model(texts: Texts, cache_dir: str | None, kind: str, vocab_size: int,
                           train: Callable[[Path, Path], object]) -> Path:
    """The model file of a tokenizer of ``kind`` trained by ``train(text_file, model_file)`` on ``texts``."""
    read = _reader(texts)
    first = Progress(f"reading the finetuning text for the {kind} tokenizer", 0)  # its size is not known yet
    key, n = _digest(training_lines(read()), first)
    cache = Path(cache_dir).expanduser() if cache_dir else DEFAULT_CACHE
    entry = cache / "finetune" / f"{kind}_{stable_hash(key, n, vocab_size)}"
    if verified_meta(entry) is None:

        def fill(folder: Path) -> dict:
            text = folder / "train.txt"
            with open(text, "wb") as f:
                again = _digest(_written(training_lines(read()), f),
                                Progress(f"writing the {kind} tokenizer's training text", first.done))
            if again != (key, n):
                raise DataError(f"the finetuning text for the {kind} tokenizer changed while it was read; run again.")
            with heartbeat(f"training the {kind} tokenizer on {n} lines of finetuning text"):
                train(text, folder / MODEL)
            for extra in folder.iterdir():  # the training text and SentencePiece's .vocab listing are not needed
                if extra.name != MODEL:
                    extra.unlink()
            return {"kind": kind, "lines": n, "vocab_size": vocab_size}

        build_entry(entry, fill)
    return entry / MODEL


def piece_model(texts: Texts, cache_dir: str | None, vocab_size: int) -> Path:
    """XLNet's unigram SentencePiece trained on ``texts`` (cached per text)."""
    return cached_tokenizer_model(texts, cache_dir, "spm", vocab_size,
                                  lambda text, model: train_tokenizer([text], model.with_suffix(""), vocab_size))
