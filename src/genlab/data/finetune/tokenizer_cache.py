"""Tokenizers trained on a finetuning dataset's training text, cached once per text.

An entry is keyed on the content of the (whitespace-normalised) training lines and the vocabulary size, so the
same data under another folder name, a symlink or a copy reuses it, and edited data trains a new one. It is a
manifest-checked cache entry (``genlab.data.text.cache_entry``): published whole, verified before use, rebuilt with a
message when truncated or corrupted; training logs a heartbeat through the ``genlab`` logger.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path

from genlab.data.sources.tiers import DEFAULT_CACHE
from genlab.data.text.cache_entry import build_entry, verified_meta
from genlab.data.text.progress import heartbeat
from genlab.data.tokenizers.xlnet_pieces import train_tokenizer
from genlab.utils import stable_hash

MODEL = "tokenizer.model"


def training_lines(texts: Iterable[str | None]) -> list[str]:
    """One line per non-empty text, whitespace runs (newlines included) folded to one space."""
    return [" ".join(t.split()) for t in texts if t and t.strip()]


def lines_digest(lines: list[str]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode())
        digest.update(b"\n")
    return digest.hexdigest()


def cached_tokenizer_model(texts: Iterable[str | None], cache_dir: str | None, kind: str, vocab_size: int,
                           train: Callable[[Path, Path], object]) -> Path:
    """The model file of a tokenizer of ``kind`` trained by ``train(text_file, model_file)`` on ``texts``."""
    lines = training_lines(texts)
    cache = Path(cache_dir).expanduser() if cache_dir else DEFAULT_CACHE
    entry = cache / "finetune" / f"{kind}_{stable_hash(lines_digest(lines), len(lines), vocab_size)}"
    if verified_meta(entry) is None:

        def fill(folder: Path) -> dict:
            text = folder / "train.txt"
            text.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            with heartbeat(f"training the {kind} tokenizer on {len(lines)} lines of finetuning text"):
                train(text, folder / MODEL)
            for extra in folder.iterdir():  # the training text and SentencePiece's .vocab listing are not needed
                if extra.name != MODEL:
                    extra.unlink()
            return {"kind": kind, "lines": len(lines), "vocab_size": vocab_size}

        build_entry(entry, fill)
    return entry / MODEL


def piece_model(texts: Iterable[str | None], cache_dir: str | None, vocab_size: int) -> Path:
    """XLNet's unigram SentencePiece trained on ``texts`` (cached per text)."""
    return cached_tokenizer_model(texts, cache_dir, "spm", vocab_size,
                                  lambda text, model: train_tokenizer([text], model.with_suffix(""), vocab_size))
