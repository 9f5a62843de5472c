"""The tokenizer that belongs to a pretrained checkpoint, for finetuning data (``data.tokenizer=<path>``).

``path`` may be a SentencePiece ``.model`` (ours or XLNet's ``spiece.model``), a BERT ``vocab.txt`` or WordPiece
``tokenizer.json`` (what ``transformers`` >= 5 saves), or a checkpoint folder holding one of them (an HF
``xlnet-base-cased`` / ``bert-base-uncased`` folder, or a genlab export). The folder's ``tokenizer_config.json``
decides lower-casing (``do_lower_case``), as the checkpoint was pretrained; it overrides ``data.lower``. Every
tokenizer returned has ``encode``, ``vocab_size`` and ``identity``; :func:`special_ids` gives the ids an input layout
must use instead of XLNet's fixed ones (none for SentencePiece, whose ``<cls>``/``<sep>`` ids are fixed;
``[CLS]``/``[SEP]``/``[PAD]`` of the vocabulary for WordPiece).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol

from genlab import checkpoints
from genlab.data.tokenizers.wordpiece import WordPieceTokenizer
from genlab.data.tokenizers.xlnet_pieces import PieceTokenizer
from genlab.errors import DataError

SENTENCEPIECE, WORDPIECE, TOKENIZER_JSON = "spiece.model", "vocab.txt", "tokenizer.json"
RUN_TOKENIZER = SENTENCEPIECE  # a pretraining run's copy of its SentencePiece model; data.tokenizer=<run dir> works


class FinetuneTokenizer(Protocol):
    vocab_size: int
    identity: str

    def encode(self, text: str) -> list[int]: ...


def special_ids(tokenizer: FinetuneTokenizer) -> dict[str, int]:
    """``cls_id``/``sep_id``/``pad_id`` overrides for the input layouts; empty = keep XLNet's fixed ids."""
    if isinstance(tokenizer, WordPieceTokenizer):
        return {"cls_id": tokenizer.cls_id, "sep_id": tokenizer.sep_id, "pad_id": tokenizer.pad_id}
    return {}


def tokenizer_file(path: str | os.PathLike) -> Path | None:
    """The tokenizer file of a checkpoint folder (or the file itself); None when a folder has none."""
    path = Path(path).expanduser()
    if path.is_file():
        return path
    for name in (SENTENCEPIECE, WORDPIECE, TOKENIZER_JSON):
        if (path / name).is_file():
            return path / name
    models = sorted(path.glob("*.model")) if path.is_dir() else []
    return models[0] if len(models) == 1 else None


def _lower_from_config(file: Path, default: bool) -> bool:
    config = file.parent / "tokenizer_config.json"
    if not config.is_file():
        return default
    try:
        return bool(json.loads(config.read_text(encoding="utf-8")).get("do_lower_case", default))
    except ValueError as err:
        raise DataError(f"{config} is not valid JSON ({err}); restore the checkpoint's file.") from err


def recorded_tokenizer(ckpt: Path) -> tuple[str, bool]:
    """(``data.tokenizer``, ``data.lower``) of the run that wrote a genlab ``.ckpt`` (recorded in its config)."""
    data = checkpoints.record(checkpoints.load(ckpt, key="data.tokenizer", mmap=True)).get("config", {}).get("data", {})
    if data.get("tokenizer"):
        return str(data["tokenizer"]), bool(data.get("lower", False))
    for run_dir in (ckpt.parent.parent, ckpt.parent):  # <run>/checkpoints/x.ckpt, or a .ckpt moved next to it
        if (run_dir / RUN_TOKENIZER).is_file():  # the SentencePiece model the run trained, kept by train.py
            return str(run_dir / RUN_TOKENIZER), bool(data.get("lower", False))
    raise DataError(f"data.tokenizer={ckpt}: the run that wrote this checkpoint trained its own SentencePiece "
                    f"(its data.tokenizer was null) and its run folder has no {RUN_TOKENIZER}; set data.tokenizer= "
                    "to that .model file (in its cache_dir).")


def load_tokenizer(path: str | os.PathLike, lower: bool = False) -> FinetuneTokenizer:
    """The checkpoint's tokenizer (see the module docstring); ``lower`` applies when the checkpoint says nothing.
    A genlab ``.ckpt`` stands for the tokenizer its run recorded, so ``data.tokenizer=${task.init_from}`` works for
    every kind of ``init_from`` (a hub id too: genlab.interop.hub)."""
    from genlab.interop.hub import resolve

    path = resolve(path, key="data.tokenizer")
    if Path(path).suffix == ".ckpt" and checkpoints.exists(path):  # a file, or a folder of FSDP2 shards
        path, lower = recorded_tokenizer(Path(path))
    file = tokenizer_file(path)
    if file is None:
        raise DataError(f"data.tokenizer={path}: no tokenizer there; give a SentencePiece .model, a BERT vocab.txt, "
                        f"or a checkpoint folder containing {SENTENCEPIECE}, {WORDPIECE} or {TOKENIZER_JSON}.")
    if file.suffix == ".model":
        return PieceTokenizer(file, _lower_from_config(file, lower))
    if file.suffix in (".txt", ".json"):
        return WordPieceTokenizer(file)
    raise DataError(f"data.tokenizer={path}: {file.name} is not a SentencePiece .model, WordPiece vocab.txt or "
                    "tokenizer.json.")
