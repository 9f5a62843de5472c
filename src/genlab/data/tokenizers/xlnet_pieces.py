"""XLNet's view of a SentencePiece model (XLNet paper §3.1): fixed special ids, the official text normalisation,
the "2000," split rule and the word-start table the span sampler reads. Shared by pretraining and finetuning data."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import numpy as np

from genlab.data.tokenizers.sentencepiece import SentencePieceTokenizer
from genlab.errors import DataError

CONTROL_SYMBOLS = ("<cls>", "<sep>", "<pad>", "<mask>", "<eod>")  # ids 3..7 after <unk>, <s>, </s>
USER_SYMBOLS = ("<eop>", ".", "(", ")", '"', "-", "–", "£", "€")  # <eop> = 8
# Single-character pieces that count as word starts: ASCII punctuation without the apostrophe, "=" and ">" (the authors'
# span sampler).
WORD_START_CHARS = frozenset('!"#$%&()*+,-./:;?@[\\]^_`{|}~')


def word_start_table(pieces: list[str]) -> np.ndarray:
    """``table[id]`` is True when the piece starts a word: "▁" prefix, "<" prefix (specials) or lone punctuation."""
    return np.array([p.startswith("▁") or p.startswith("<") or p in WORD_START_CHARS for p in pieces], dtype=bool)


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
    """Unigram SentencePiece with the XLNet control/user symbols and special ids (as the released XLNet vocabulary),
    trained on ``files``."""
    model = Path(f"{model_prefix}.model")
    SentencePieceTokenizer.train(
        files, model, vocab_size, "unigram", user_defined_symbols=USER_SYMBOLS, control_symbols=CONTROL_SYMBOLS,
        character_coverage=0.99995, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, input_sentence_size=max_sentences,
        shuffle_input_sentence=True, hard_vocab_limit=False, normalization_rule_name="identity",
    )
    return model


