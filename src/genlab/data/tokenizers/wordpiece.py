"""BERT WordPiece tokenisation of a published checkpoint (``vocab.txt`` or, as ``transformers`` >= 5 saves it,
``tokenizer.json``; settings from ``tokenizer_config.json``).

The algorithm is the ``tokenizers`` library's (BERT normaliser: clean text, CJK spacing, optional accent strip and
lower-casing; BERT pre-tokeniser: whitespace and punctuation; greedy longest-match WordPiece with ``##``
continuations), configured exactly as Hugging Face's ``BertTokenizer`` from the checkpoint's own settings, so ids
equal those the checkpoint was pretrained with. Special tokens written in text (``[MASK]`` ...) stay one token,
as in Hugging Face. ``identity`` hashes the vocabulary and the normalisation flags, so a finetuning run can
refuse text tokenised differently from the checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from genlab.errors import DataError

CONFIG = "tokenizer_config.json"
SPECIALS = {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
            "mask_token": "[MASK]"}
# Funnel-Transformer's uncased WordPiece vocabulary names them <unk>, <cls>, ... (HF FunnelTokenizer defaults)
FUNNEL_SPECIALS = {"unk_token": "<unk>", "cls_token": "<cls>", "sep_token": "<sep>", "pad_token": "<pad>",
                   "mask_token": "<mask>"}


def _token(value: Any, default: str) -> str:
    """Special tokens are plain strings or (older configs) AddedToken dicts with a ``content`` field."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else default


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise DataError(f"{path} is not valid JSON ({err}); restore the checkpoint's file.") from err


def read_vocab(path: Path) -> dict[str, int]:
    """token -> id from ``vocab.txt`` (id = line number, as Hugging Face's ``load_vocab``: a repeated token keeps
    its last line) or from the WordPiece model of a ``tokenizer.json``."""
    if path.suffix == ".json":
        model = _json(path).get("model", {})
        if model.get("type") != "WordPiece":
            raise DataError(f"{path} holds a {model.get('type')} tokenizer, not BERT's WordPiece; use the checkpoint's "
                            "own vocab.txt / spiece.model.")
        return dict(model["vocab"])
    with open(path, encoding="utf-8") as f:  # universal newlines, as Hugging Face reads it
        return {line.rstrip("\n"): i for i, line in enumerate(f)}


def read_settings(path: Path) -> dict[str, Any]:
    """Normalisation flags and special tokens from the ``tokenizer_config.json`` next to ``path`` (else the BERT
    normaliser of a ``tokenizer.json``), with Hugging Face's ``BertTokenizer`` defaults for what neither says."""
    config_path = path.parent / CONFIG
    config: dict[str, Any] = _json(config_path) if config_path.is_file() else {}
    if not config and path.suffix == ".json":
        norm = _json(path).get("normalizer") or {}
        if norm.get("type") == "BertNormalizer":
            config = {"do_lower_case": norm.get("lowercase"), "strip_accents": norm.get("strip_accents"),
                      "tokenize_chinese_chars": norm.get("handle_chinese_chars")}
    settings = {"do_lower_case": bool(_default(config.get("do_lower_case"), True)),
                "strip_accents": config.get("strip_accents"),
                "tokenize_chinese_chars": bool(_default(config.get("tokenize_chinese_chars"), True))}
    settings.update({name: _token(config.get(name), default) for name, default in SPECIALS.items()})
    return settings


def _default(value: Any, default: Any) -> Any:
    return default if value is None else value


class WordPieceTokenizer:
    """``encode(text) -> ids`` without special tokens; ``cls_id``/``sep_id``/``pad_id``/``mask_id``/``unk_id``;
    ``vocab_size``; ``identity``. ``overrides`` replace settings read from the config (tests, odd folders)."""

    def __init__(self, vocab_file: str | os.PathLike, **overrides: Any) -> None:
        try:
            from tokenizers import Tokenizer, normalizers, pre_tokenizers
            from tokenizers.models import WordPiece
        except ImportError as err:
            raise DataError("WordPiece (BERT vocab.txt) tokenisation needs the 'tokenizers' package: "
                            "pip install 'tokenizers>=0.15' (it comes with transformers).") from err
        self.vocab_file = Path(vocab_file)
        if not self.vocab_file.is_file():
            raise DataError(f"WordPiece vocabulary {self.vocab_file} does not exist; point data.tokenizer at the "
                            "checkpoint folder holding vocab.txt.")
        vocab = read_vocab(self.vocab_file)
        self.settings = {**read_settings(self.vocab_file), **overrides}
        s = self.settings
        for name, default in SPECIALS.items():  # not named by the config, absent, and Funnel's name present
            if s[name] == default and default not in vocab and FUNNEL_SPECIALS[name] in vocab:
                s[name] = FUNNEL_SPECIALS[name]
        missing = [s[name] for name in SPECIALS if s[name] not in vocab]
        if missing:
            raise DataError(f"WordPiece vocabulary {self.vocab_file} lacks the special tokens {missing}; it is not a "
                            "BERT vocab.txt (or tokenizer_config.json names other special tokens).")
        self._tok = Tokenizer(WordPiece(vocab, unk_token=s["unk_token"], max_input_chars_per_word=100))
        self._tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=s["tokenize_chinese_chars"], strip_accents=s["strip_accents"],
            lowercase=s["do_lower_case"])
        self._tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        self._tok.add_special_tokens([s[name] for name in SPECIALS])
        self._vocab_size = max(vocab.values()) + 1
        self.lower = s["do_lower_case"]
        self.unk_id, self.cls_id, self.sep_id, self.pad_id, self.mask_id = (vocab[s[n]] for n in SPECIALS)
        # the same vocabulary and settings give the same identity whichever file they were read from
        tokens = "\n".join(sorted(vocab, key=vocab.__getitem__)).encode()
        flags = json.dumps({k: s[k] for k in sorted(s)}, sort_keys=True).encode()
        self.identity = "wordpiece-" + hashlib.sha256(tokens + b"\0" + flags).hexdigest()[:16]

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and each piece's [start, end) character span in ``text`` (the library maps every normalisation
        step back to the input)."""
        enc = self._tok.encode(text, add_special_tokens=False)
        return enc.ids, enc.offsets

    def encode_pieces(self, text: str) -> list[str]:
        return self._tok.encode(text, add_special_tokens=False).tokens

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(map(int, ids)))
